// Package linstor is the storage-controller's connection to the LINSTOR controller: a golinstor
// client configured as a real deployment needs (endpoint, TLS client certificate), the few calls
// the controller makes, and View, an in-memory copy of LINSTOR's nodes and storage pools kept
// fresh by a bounded poll, from which capacity is computed without a LINSTOR call per request.
package linstor
