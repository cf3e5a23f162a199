// Package subnets cuts SubnetPools into tenant blocks and builds the Kube-OVN Subnets that hold
// them. Everything here is pure: the reconciler reads the cluster and applies what these
// functions return.
package subnets
