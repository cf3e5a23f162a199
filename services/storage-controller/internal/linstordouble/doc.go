// Package linstordouble is a test double of the LINSTOR controller's REST API (v1, as specified
// by LINSTOR's rest_v1_openapi.yaml 1.28): nodes, storage pools with capacity, resource groups
// with select filters and properties, resource definitions, diskful and diskless resources with
// their disk states, autoplace, toggle-disk, resource-group adjust and spawn, and LINSTOR's
// auto-diskful promotion and cleanup on an injectable clock. Errors are LINSTOR's ApiCallRc
// lists, whatever the status, as LINSTOR sends them (the document declares a single ApiCallRc for
// a 500; openapicheck corrects that).
//
// No LINSTOR controller or DRBD can run where Flotilla is developed and tested; this double
// stands in for one in tests and in `make demo`. It is never part of a chart. The contract test
// (contract_test.go) checks every request and response against the published OpenAPI document.
//
// Faults (Faults) make it fail, delay and half-apply requests at random, for fault tests.
package linstordouble
