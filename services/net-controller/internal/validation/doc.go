// Package validation holds no code: its tests check, against a real kube-apiserver, that the CRDs'
// schemas refuse bad input in every user-facing field, naming the field.
package validation
