package testenv

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// KStatus is what kstatus (cli-utils, the judge Flux, kubectl wait and Argo CD share) computes
// for obj.
func KStatus(obj runtime.Object) (*kstatus.Result, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return kstatus.Compute(&unstructured.Unstructured{Object: u})
}

// KStatusOf is KStatus's verdict, failing t on an error.
func KStatusOf(t testing.TB, obj runtime.Object) kstatus.Status {
	t.Helper()
	res, err := KStatus(obj)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}
