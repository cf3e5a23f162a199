package catalog

import (
	"k8s.io/apimachinery/pkg/util/json"
	"testing"
)

func mustJSON(t testing.TB, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}
