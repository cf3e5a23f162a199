// Package patch writes an object's status in one place, at the end of a reconcile, and only when
// it changed: a converged reconcile makes no API call.
package patch
