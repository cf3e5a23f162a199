// Package ssa applies child objects with server-side apply under a fixed field owner, skipping the
// request when the fields this owner manages already hold the desired values: Apply for kinds with
// client-go apply configurations, ApplyUnstructured for other projects' kinds.
package ssa
