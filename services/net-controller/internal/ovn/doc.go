// Package ovn programs TenantNetworks into the OVN northbound database: Desired builds the rows of
// one network (pure), and Programmer brings the database to them in at most one transaction,
// touching only rows whose external_ids say they are the controller's.
//
// Each network is a logical switch holding the tenant's range and a gateway router of its own, so
// two tenants may use the same range: their addresses never meet in one routing table. A router
// reaches the platform only through its port on the shared transit switch, whose addresses are
// platform addresses (the router's SNAT address and its floating addresses).
package ovn
