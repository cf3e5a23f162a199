// Package addresses hands out platform (external) addresses to TenantNetworks: pure functions
// over what the networks' statuses already hold.
package addresses
