// Package manager bootstraps a controller-runtime manager the same way for every Flotilla
// service: zap logging, Prometheus metrics, health and readiness probes, leader election and,
// when asked for, a webhook server.
package manager
