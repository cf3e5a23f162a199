package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/apiserver/apiservertest"
)

// seatSchema is the schema of the kinds the tenant's seat is measured on.
const seatSchema = `{"type":"object","properties":{"note":{"type":"string","maxLength":64}}}`

// seat measures how long a tenant user waits, with plain kubectl and a fresh cache, before
// creating an object of a kind that has just been added: from the moment an ApplicationDefinition
// is created, and, as the reference, from the moment a CRD of the same schema (granted to the same
// tenant role) is created. kubectl is retried every 100 ms.
type seat struct {
	kubectl, kubeconfig, ns string
}

func newSeat(b *testing.B, dir string, kubeconfig []byte, ns string) *seat {
	bin, err := exec.LookPath("kubectl")
	check(b, err)
	path := filepath.Join(dir, "tenant.kubeconfig")
	check(b, os.WriteFile(path, kubeconfig, 0o600))
	return &seat{kubectl: bin, kubeconfig: path, ns: ns}
}

// firstCreate is the time from start until the tenant's kubectl creates the object.
func (s *seat) firstCreate(b *testing.B, start time.Time, apiVersion, kind, name, spec string) time.Duration {
	manifest := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", apiVersion, kind, name, s.ns, spec)
	for {
		cache, err := os.MkdirTemp("", "kubectl-cache-")
		check(b, err)
		cmd := exec.Command(s.kubectl, "--kubeconfig", s.kubeconfig, "--cache-dir", cache, "create", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		_ = os.RemoveAll(cache)
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > 3*time.Minute {
			b.Fatalf("the tenant's kubectl never created %s: %s", kind, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// liveKinds measures rounds additions of an app kind and of a CRD, alternately.
func (s *seat) liveKinds(b *testing.B, ctx context.Context, c ctrlclient.Client, rounds int) (app, crd []time.Duration) {
	for i := range rounds {
		kind, plural := fmt.Sprintf("Seat%d", i), fmt.Sprintf("seats%d", i)
		def := &catalogv1.ApplicationDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural},
			Spec: catalogv1.ApplicationDefinitionSpec{
				Names: catalogv1.Names{Kind: kind, Plural: plural},
				Chart: catalogv1.Chart{Name: "postgres", SourceRef: catalogv1.SourceReference{Kind: "HelmRepository", Name: "flotilla-catalog", Namespace: "flotilla-system"}},
			},
		}
		def.Spec.Schema.Raw = []byte(seatSchema)
		start := time.Now()
		check(b, c.Create(ctx, def))
		app = append(app, s.firstCreate(b, start, "apps.flotilla.dev/v1alpha1", kind, "first", "{note: hi}"))

		group := fmt.Sprintf("seat%d.example.org", i)
		grant := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "seat-" + group, Labels: map[string]string{"flotilla.dev/aggregate-to-tenant-admin": "true"}},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch", "create"}}},
		}
		check(b, c.Create(ctx, grant))
		crdObj, err := apiservertest.CRD(group, kind, plural, seatSchema)
		check(b, err)
		start = time.Now()
		check(b, c.Create(ctx, crdObj))
		crd = append(crd, s.firstCreate(b, start, group+"/v1", kind, "first", "{note: hi}"))
	}
	return app, crd
}
