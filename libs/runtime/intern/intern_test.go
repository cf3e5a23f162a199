package intern

import (
	"fmt"
	"hash/maphash"
	"maps"
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func binding(ns string, labels map[string]string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns, Labels: labels,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "me", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "rbac.authorization.k8s.io/v1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:roleRef":{},"f:subjects":{}}`)}}}}}
}

// Objects that hold equal labels and field sets share them from the second on; what they hold is
// unchanged, and a value only one object holds is not kept.
func TestTransformSharesEqualValues(t *testing.T) {
	transform := Transform()
	var got []*rbacv1.RoleBinding
	for i := range 3 {
		b := binding(fmt.Sprint("ns-", i), map[string]string{"managed-by": "me", "x": "1"})
		want := b.DeepCopy()
		out, err := transform(b)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.(*rbacv1.RoleBinding))
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("the transform changed what the object holds: %+v, want %+v", got[i], want)
		}
	}
	if reflect.ValueOf(got[1].Labels).UnsafePointer() != reflect.ValueOf(got[2].Labels).UnsafePointer() {
		t.Error("the third object's labels are not the second's")
	}
	if got[1].ManagedFields[0].FieldsV1 != got[2].ManagedFields[0].FieldsV1 {
		t.Error("the third object's field set is not the second's")
	}
	p := &pool{seed: maphash.MakeSeed()}
	for i := range 2 * limit {
		p.labels(map[string]string{"tenant": fmt.Sprint(i)})
	}
	if len(p.maps) != 0 || len(p.seenMaps) > limit {
		t.Errorf("values held by one object each: %d shared, %d remembered", len(p.maps), len(p.seenMaps))
	}
	for i := range 2 * limit {
		m := map[string]string{"tenant": fmt.Sprint(i)}
		p.labels(m)
		p.labels(m)
	}
	if len(p.maps) != limit {
		t.Errorf("%d shared values, want the limit %d", len(p.maps), limit)
	}
}

// A tombstone passes as it is.
func TestTransformPassesTombstones(t *testing.T) {
	if out, err := Transform()("not an object"); err != nil || out != "not an object" {
		t.Errorf("%v %v", out, err)
	}
}

// Values whose hashes collide are not shared: each keeps its own.
func TestShareChecksEquality(t *testing.T) {
	var shared map[uint64]map[string]string
	var seen map[uint64]struct{}
	a, b := map[string]string{"a": "1"}, map[string]string{"b": "2"}
	share(&shared, &seen, 1, maps.Clone(a), maps.Equal)
	share(&shared, &seen, 1, a, maps.Equal) // a is shared from here on
	if got := share(&shared, &seen, 1, maps.Clone(a), maps.Equal); reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(a).UnsafePointer() {
		t.Fatal("an equal value is not given the shared one")
	}
	if got := share(&shared, &seen, 1, b, maps.Equal); !maps.Equal(got, b) {
		t.Errorf("a value whose hash collides got %v, want %v", got, b)
	}
}
