// Package conditions sets metav1.Conditions with kstatus semantics and summarises a reconciler's
// domain conditions into Ready, Reconciling and Stalled, the way Flux and Cluster API do.
package conditions
