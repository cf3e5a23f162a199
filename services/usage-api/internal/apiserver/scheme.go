package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	usagev1 "github.com/flotilla-dev/flotilla/services/usage-api/api/v1alpha1"
)

var (
	// scheme knows the served types. UsageReport has one version, so its Go type is also the
	// internal version the generic handlers convert to: no conversion code.
	scheme = runtime.NewScheme()
	// Codecs encode and decode the served types and the meta types beside them.
	Codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	utilruntime.Must(usagev1.AddToScheme(scheme))
	scheme.AddKnownTypes(schema.GroupVersion{Group: usagev1.GroupVersion.Group, Version: runtime.APIVersionInternal}, &usagev1.UsageReport{})
	unversioned := schema.GroupVersion{Version: "v1"}
	metav1.AddToGroupVersion(scheme, unversioned)
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{})
}
