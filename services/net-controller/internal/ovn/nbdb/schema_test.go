package nbdb_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// The models are generated from the tables the net-controller uses, copied from the schema of the
// OVN the tests run (Debian's): every table here is that schema's, unchanged, at its version.
func TestSchemaIsOVNs(t *testing.T) {
	root, err := testenv.OVNRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) map[string]any {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var s map[string]any
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	ours, theirs := read("ovn-nb.ovsschema"), read(filepath.Join(root, "usr", "share", "ovn", "ovn-nb.ovsschema"))
	for _, k := range []string{"name", "version", "cksum"} {
		if ours[k] != theirs[k] {
			t.Errorf("%s: ours %v, OVN's %v", k, ours[k], theirs[k])
		}
	}
	for name, table := range ours["tables"].(map[string]any) {
		if !reflect.DeepEqual(table, theirs["tables"].(map[string]any)[name]) {
			t.Errorf("table %s differs from OVN's", name)
		}
	}
}
