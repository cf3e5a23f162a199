package ssa

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// What the transform leaves is still enough for Apply: the owner's applied fields extract the same.
func TestTrimManagedFieldsKeepsWhatApplyExtracts(t *testing.T) {
	fields := func(raw string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(raw)} }
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "1", "b": "2"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "me", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:a":{}}}}`)},
			{Manager: "me", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: fields(`{"f:status":{}}`)},
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:b":{}}}}`)},
		}}}
	before, err := corev1ac.ExtractNamespace(ns, "me")
	if err != nil {
		t.Fatal(err)
	}
	out, err := TrimManagedFields("me")(ns)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Namespace)
	if len(got.ManagedFields) != 1 || got.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Fatalf("managedFields after the transform: %+v", got.ManagedFields)
	}
	after, err := corev1ac.ExtractNamespace(got, "me")
	if err != nil {
		t.Fatal(err)
	}
	if same, err := sameJSON(before, after); err != nil || !same {
		t.Errorf("extracted before %+v, after %+v", before, after)
	}
	other, _ := TrimManagedFields("someone")(ns.DeepCopy())
	if mf := other.(*corev1.Namespace).ManagedFields; mf != nil {
		t.Errorf("an object the owner never applied keeps %d entries", len(mf))
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "n", Obj: ns}
	if out, err := TrimManagedFields("me")(tomb); err != nil || out != any(tomb) {
		t.Errorf("a tombstone: %v, %v", out, err)
	}
}
