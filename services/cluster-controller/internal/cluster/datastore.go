package cluster

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
)

// DataStoreGVK is Kamaji's description of a datastore (clastix/kamaji, whose CRD is kept in
// test/crds/kamaji); cluster-scoped, written unstructured: its Go module is not served.
var DataStoreGVK = schema.GroupVersionKind{Group: "kamaji.clastix.io", Version: "v1alpha1", Kind: "DataStore"}

// The etcd a tenant provides (Tenant spec.etcd) in its namespace, as the DataStore describes it
// to Kamaji: the contract between that etcd's deployment and the cluster-controller.
const (
	// EtcdService is the etcd's client Service; its serving certificate names
	// <EtcdService>.<namespace>.svc.
	EtcdService    = "etcd"
	EtcdClientPort = 2379
	// EtcdCASecret holds the CA of the etcd's client certificates (tls.crt, tls.key): Kamaji
	// issues each control plane an etcd client certificate of its own from it.
	EtcdCASecret = "etcd-ca"
	// EtcdClientSecret holds a client certificate of the etcd's root user (tls.crt, tls.key), with
	// which Kamaji gives each control plane its own etcd user and key prefix.
	EtcdClientSecret = "etcd-client"
)

const dataStorePrefix = "flotilla-"

// DataStoreName is the Kamaji DataStore of the etcd in tenant namespace etcdNamespace.
func DataStoreName(etcdNamespace string) string { return dataStorePrefix + etcdNamespace }

// DataStoreEtcdNamespace is the etcd namespace of a DataStore's name, or "" for a name that is
// not a DataStoreName.
func DataStoreEtcdNamespace(name string) string {
	ns, _ := strings.CutPrefix(name, dataStorePrefix)
	if ns == name {
		return ""
	}
	return ns
}

// DataStore is the Kamaji DataStore of the etcd in tenant namespace etcdNamespace, which every
// cluster that etcd serves shares (each under its own key prefix, its dataStoreSchema).
func DataStore(etcdNamespace string) *unstructured.Unstructured {
	secret := func(name, key string) map[string]any {
		return map[string]any{"secretReference": map[string]any{"name": name, "namespace": etcdNamespace, "keyPath": key}}
	}
	pair := func(name string) map[string]any {
		return map[string]any{"certificate": secret(name, "tls.crt"), "privateKey": secret(name, "tls.key")}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"driver":    "etcd",
		"endpoints": []any{fmt.Sprintf("%s.%s.svc:%d", EtcdService, etcdNamespace, EtcdClientPort)},
		"tlsConfig": map[string]any{"certificateAuthority": pair(EtcdCASecret), "clientCertificate": pair(EtcdClientSecret)},
	}}}
	u.SetGroupVersionKind(DataStoreGVK)
	u.SetName(DataStoreName(etcdNamespace))
	u.SetLabels(map[string]string{clusterapi.LabelEtcdNamespace: etcdNamespace})
	return u
}
