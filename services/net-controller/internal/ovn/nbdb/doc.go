// Package nbdb holds the OVN northbound models libovsdb's modelgen generates from
// ovn-nb.ovsschema (OVN 23.03, schema 7.0.0, from Debian 12's ovn-common 23.03.1-1~deb12u2).
// `make generate` regenerates them.
//
//go:generate go run github.com/ovn-kubernetes/libovsdb/cmd/modelgen -extended -p nbdb -o . ovn-nb.ovsschema
package nbdb
