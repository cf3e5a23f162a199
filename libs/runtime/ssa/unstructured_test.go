package ssa

import "testing"

func TestContains(t *testing.T) {
	for _, tc := range []struct {
		name       string
		have, want any
		ok         bool
	}{
		{"more keys live", map[string]any{"a": int64(1), "b": "x"}, map[string]any{"a": int64(1)}, true},
		{"numbers by value", map[string]any{"a": float64(2)}, map[string]any{"a": int64(2)}, true},
		{"changed value", map[string]any{"a": int64(1)}, map[string]any{"a": int64(2)}, false},
		{"missing key", map[string]any{}, map[string]any{"a": "x"}, false},
		{"defaulted item field", []any{map[string]any{"n": "a", "d": true}}, []any{map[string]any{"n": "a"}}, true},
		{"extra item", []any{"a", "b"}, []any{"a"}, false},
		{"type changed", "1", int64(1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Contains(tc.have, tc.want); got != tc.ok {
				t.Errorf("Contains = %v, want %v", got, tc.ok)
			}
		})
	}
}

// Cluster API adds its own owner references (a Cluster owns its MachineDeployments) and
// finalizers beside the controller's: an object is still converged.
func TestContainsObjectWithOthersOwnerReferences(t *testing.T) {
	ours := map[string]any{"uid": "u1", "kind": "KubernetesCluster", "controller": true}
	theirs := map[string]any{"uid": "u2", "kind": "Cluster"}
	live := map[string]any{"metadata": map[string]any{"ownerReferences": []any{theirs, ours}, "finalizers": []any{"capi"}}}
	if !ContainsObject(live, map[string]any{"metadata": map[string]any{"ownerReferences": []any{ours}}}) {
		t.Error("another owner's reference made a converged object look changed")
	}
	if ContainsObject(map[string]any{"metadata": map[string]any{"ownerReferences": []any{theirs}}}, map[string]any{"metadata": map[string]any{"ownerReferences": []any{ours}}}) {
		t.Error("a missing owner reference went unnoticed")
	}
}
