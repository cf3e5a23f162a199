// Package release builds Flotilla's release without a container engine: a container image per
// service for every platform (static binaries on a base of CA certificates and a non-root user),
// every chart as a Helm OCI artifact that names its image by digest, and the GitOps tree and the
// starter catalog as Flux OCI artifacts. Everything is reproducible: one commit gives the same
// digests, whoever builds it. A Bundle is written to one OCI image layout directory (the offline
// bundle) or pushed to a registry.
//
// What goes into which image is deploy/images.txt; the repository's layout does the rest.
package release
