package testenv

import (
	"strings"
	"testing"
)

// TestOVN starts a real OVN and checks that ovn-northd turns a northbound logical switch into
// southbound logical flows.
func TestOVN(t *testing.T) {
	o, err := StartOVN("")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = o.Stop() }()
	if _, err := o.Nbctl("--wait=sb", "ls-add", "probe"); err != nil {
		t.Fatal(err)
	}
	out, err := o.Sbctl("--columns=logical_datapath", "list", "Logical_Flow")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "logical_datapath") {
		t.Fatalf("no logical flows in SB after ls-add: %q", out)
	}
}
