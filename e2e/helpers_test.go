package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

const repo = ".."

// services are the directories under services/, each a deployable controller.
func services(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repo, "services"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// tool finds a binary built by libs/builder.
func tool(t testing.TB, name string) string {
	t.Helper()
	dir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not built: run make test (libs/builder/build.sh)", name)
	}
	return p
}

func run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(tool(t, name), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", name, args, err, out, stderr.String())
	}
	return out
}

// decodeAll splits multi-document YAML into objects.
func decodeAll(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// freePorts returns the first of n consecutive free ports below the kernel's ephemeral range
// (32768 up by default), where no outgoing connection can take one of them while they are in use.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 100; try++ {
		base := 20000 + rand.IntN(12000-n)
		free := true
		for p := base; p < base+n && free; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if free = err == nil; free {
				_ = l.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}
