// Package storage holds the storage-controller's pure functions: the LINSTOR resource group and
// the StorageClass a StoragePolicy implies, and what the policy's volumes can still hold given the
// capacity LINSTOR reports. Nothing here talks to an API.
package storage
