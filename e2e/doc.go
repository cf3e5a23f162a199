// Package e2e tests the repository as users meet it: the charts as Helm renders them and the API
// server accepts them, the Flux GitOps tree as Flux would read it, and the Tiltfile.
package e2e
