// Package tenantnetwork programs TenantNetworks into OVN's northbound database: it allocates
// their platform addresses (recorded in their status, the ledger), then has ovn.Programmer bring
// the network's rows to the spec in one transaction. Changes in the database made by anyone come
// back as events, so rows removed or altered by someone else are restored, and counted.
package tenantnetwork
