// Package meta holds the condition types and reasons every Flotilla API shares, so that all
// services speak kstatus the same way: Ready always present, Reconciling and Stalled only while
// True, observedGeneration written when the object is Ready or Stalled.
package meta
