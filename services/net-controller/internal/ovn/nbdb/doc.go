// Package nbdb holds the OVN northbound models libovsdb's modelgen generates from
// ovn-nb.ovsschema: the tables the net-controller uses (Logical_Router, Logical_Router_Port,
// Logical_Switch, Logical_Switch_Port, NAT), copied unchanged from the schema of OVN 23.03
// (schema 7.0.0, Debian 12's ovn-common 23.03.1-1~deb12u2; TestSchemaIsOVNs holds them to it).
// libovsdb's client validates a model of some tables against the server's whole schema. To use
// another table, copy it from that schema and run `make generate`.
//
//go:generate go run github.com/ovn-kubernetes/libovsdb/cmd/modelgen -extended -p nbdb -o . ovn-nb.ovsschema
package nbdb
