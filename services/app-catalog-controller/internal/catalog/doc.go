// Package catalog turns an ApplicationDefinition into a served Kind: the app's full schema
// (the definition's values under spec, the platform's fields beside them, the status), its
// defaulting, validation, forbidden paths, OpenAPI document, table columns and server-side-apply
// type converter.
//
// The technique is the one kube-apiserver uses for CRDs, through apiextensions-apiserver's own
// packages: the definition is turned into an equivalent CustomResourceDefinition in memory (never
// written to the cluster), validated by the CRD validation, and compiled by the same structural
// schema, pruning, defaulting, validation, table and OpenAPI builders.
package catalog
