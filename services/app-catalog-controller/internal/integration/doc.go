// Package integration tests the app-catalog-controller as deployed: the apps apiserver behind
// kube-apiserver's aggregator, the catalog controller, the real Flux source-controller and
// helm-controller, and the starter catalog's charts served from a loopback Helm repository.
package integration
