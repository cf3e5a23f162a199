package e2e

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/release"
	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// A platform without internet access installs Flotilla from its registry mirror alone: a release
// built here (for this machine's platform), loaded from its offline bundle into a registry on
// loopback, installed by the real source-, kustomize- and helm-controller from nothing but the
// bootstrap objects a platform team commits (deploy/flux/clusters/production, with the mirror's
// prefix set), then upgraded to the next release the same way.
//
// No kubelet runs here: a stand-in plays the deployment and daemonset controllers and the kubelet
// by reporting each workload rolled out, so that Flux's health checks pass as on a real cluster.
func TestAirGappedInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// The mirror serves TLS with a certificate of its own CA, which source-controller is given.
	reg := httptest.NewTLSServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	mirror := strings.TrimPrefix(reg.URL, "https://") + "/mirror/flotilla"
	ca := filepath.Join(t.TempDir(), "mirror-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: reg.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	push := remote.WithTransport(reg.Client().Transport)

	first := buildRelease(ctx, t, "1.0.0")
	loadBundle(ctx, t, first, mirror, push)

	crds, err := testenv.ModuleCRDDirs(append(testenv.FluxModules, testenv.KustomizeModule)...)
	if err != nil {
		t.Fatal(err)
	}
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, sourcev1.AddToScheme, helmv2.AddToScheme, kustomizev1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	env, err := testenv.Start(testenv.Options{CRDDirs: crds, Scheme: scheme, Aggregation: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	k8s := env.Client
	dir := os.Getenv("AIRGAP_LOGS") // keeps the Flux controllers' logs there, to debug a failure
	if dir == "" {
		dir = t.TempDir()
	}
	if err := env.StartFlux(ctx, dir, "SSL_CERT_FILE="+ca); err != nil {
		t.Fatal(err)
	}
	if err := env.StartKustomizeController(dir); err != nil {
		t.Fatal(err)
	}
	fluxInstallation(ctx, t, k8s)
	go rolloutStandIn(ctx, k8s)

	// What the platform team commits: the bootstrap file with the mirror's prefix and the release.
	raw, err := os.ReadFile(filepath.Join(repo, "deploy", "flux", "clusters", "production", "flotilla.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := strings.ReplaceAll(string(raw), "ghcr.io/flotilla-dev", mirror)
	bootstrap = strings.Replace(bootstrap, "tag: 0.1.0", "tag: 1.0.0", 1)
	for _, o := range decodeAll(t, []byte(bootstrap)) {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("bootstrap %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	installed(ctx, t, k8s, first, mirror, "1.0.0")
	crdUIDs := crdUIDs(ctx, t, k8s)

	// Customers' objects, made while release 1.0.0 runs, must come through the upgrade untouched.
	// (the examples' cluster-scoped objects: no controller runs, so no webhook-guarded kind)
	var customer []*unstructured.Unstructured
	for _, f := range []string{"storage.yaml", "network.yaml"} {
		raw, err := os.ReadFile(filepath.Join(repo, "deploy", "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decodeAll(t, raw) {
			if o.GetNamespace() == "" {
				customer = append(customer, o)
			}
		}
	}
	for _, o := range customer {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", o.GetKind(), err)
		}
	}

	// The next release, through the same mirror: the team changes the tag.
	second := buildRelease(ctx, t, "1.1.0")
	loadBundle(ctx, t, second, mirror, push)
	src := &sourcev1.OCIRepository{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: testenv.FluxNamespace, Name: "flotilla"}, src); err != nil {
		t.Fatal(err)
	}
	src.Spec.Reference.Tag = "1.1.0"
	if err := k8s.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	installed(ctx, t, k8s, second, mirror, "1.1.0")

	for name, uid := range crdUIDs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
			t.Errorf("CRD %s after the upgrade: %v", name, err)
		} else if crd.UID != uid {
			t.Errorf("CRD %s was deleted and made anew by the upgrade", name)
		}
	}
	for _, o := range customer {
		now := &unstructured.Unstructured{}
		now.SetGroupVersionKind(o.GroupVersionKind())
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), now); err != nil {
			t.Errorf("%s %s after the upgrade: %v", o.GetKind(), o.GetName(), err)
		} else if now.GetUID() != o.GetUID() || now.GetGeneration() != o.GetGeneration() {
			t.Errorf("%s %s changed in the upgrade: generation %d → %d", o.GetKind(), o.GetName(), o.GetGeneration(), now.GetGeneration())
		}
	}
}

// buildRelease builds a release of this checkout for this machine's platform, and writes and
// reads back its offline bundle (the same path an operator's copy takes).
func buildRelease(ctx context.Context, t *testing.T, version string) *release.Bundle {
	t.Helper()
	work := t.TempDir() // the binaries: linked anew, their packages from the Go build cache
	meta := release.Meta{Version: version, Revision: "test", Source: "https://example.org/flotilla", Created: time.Unix(1_700_000_000, 0).UTC()}
	b, err := release.Build(ctx, release.Options{Repo: repo, Meta: meta, WorkDir: work, Log: io.Discard,
		Platforms: []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bundle-"+version)
	if err := b.WriteLayout(dir); err != nil {
		t.Fatal(err)
	}
	if b, err = release.ReadLayout(dir); err != nil {
		t.Fatal(err)
	}
	return b
}

func loadBundle(ctx context.Context, t *testing.T, b *release.Bundle, mirror string, opts ...remote.Option) {
	t.Helper()
	if err := b.Push(ctx, mirror, false, io.Discard, opts...); err != nil {
		t.Fatal(err)
	}
}

// fluxInstallation is what `flux install` makes and a platform has before it commits anything:
// helm-controller's ServiceAccount (the platform's releases install as it) and its rights.
func fluxInstallation(ctx context.Context, t *testing.T, k8s client.Client) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.FluxNamespace, Name: "helm-controller"}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "flux-helm-controller"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: testenv.FluxNamespace, Name: "helm-controller"}}}
	for _, o := range []client.Object{sa, crb} {
		if err := client.IgnoreAlreadyExists(k8s.Create(ctx, o)); err != nil {
			t.Fatal(err)
		}
	}
}

// installed waits until every service's HelmRelease is Ready at version, then checks what Flux
// installed: every workload's image from the mirror by the bundle's digest, the CRDs and webhooks
// of every chart, every Flux source reading from the mirror.
func installed(ctx context.Context, t *testing.T, k8s client.Client, b *release.Bundle, mirror, version string) {
	t.Helper()
	svcs := services(t)
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, s := range svcs {
			hr := &helmv2.HelmRelease{}
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: testenv.FluxNamespace, Name: s}, hr); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			ready := meta.FindStatusCondition(hr.Status.Conditions, "Ready")
			if ready == nil || ready.Status != metav1.ConditionTrue || hr.Status.LastAttemptedRevision != version {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("release %s not installed: %v\n%s", version, err, fluxReport(ctx, k8s))
	}

	digests := map[string]string{}
	for _, a := range b.Artifacts {
		if a.Index != nil {
			d, _ := a.Digest()
			digests[a.Repository] = d.String()
		}
	}
	var workloads []client.Object
	deps := &appsv1.DeploymentList{}
	dss := &appsv1.DaemonSetList{}
	if err := k8s.List(ctx, deps, client.InNamespace("flotilla-system")); err != nil {
		t.Fatal(err)
	}
	if err := k8s.List(ctx, dss, client.InNamespace("flotilla-system")); err != nil {
		t.Fatal(err)
	}
	for i := range deps.Items {
		workloads = append(workloads, &deps.Items[i])
	}
	for i := range dss.Items {
		workloads = append(workloads, &dss.Items[i])
	}
	seen := map[string]bool{}
	for _, w := range workloads {
		for _, c := range podSpec(w).Containers {
			repoPart, digest, ok := strings.Cut(c.Image, "@")
			svc := strings.TrimPrefix(repoPart, mirror+"/")
			if !ok || svc == repoPart || digests[svc] != digest {
				t.Errorf("%T %s: image %s is not %s/<service>@<the release's digest>", w, w.GetName(), c.Image, mirror)
			}
			seen[svc] = true
		}
	}
	for _, s := range svcs {
		if !seen[s] {
			t.Errorf("release %s: no workload runs the %s image", version, s)
		}
	}
	for _, s := range svcs {
		files, _ := filepath.Glob(filepath.Join(repo, "deploy", "charts", s, "crds", "*.yaml"))
		for _, f := range files {
			raw, _ := os.ReadFile(f)
			for _, o := range decodeAll(t, raw) {
				if err := k8s.Get(ctx, types.NamespacedName{Name: o.GetName()}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
					t.Errorf("CRD %s of %s: %v", o.GetName(), s, err)
				}
			}
		}
	}
	for _, name := range []string{"tenant-controller", "storage-controller"} {
		if err := k8s.Get(ctx, types.NamespacedName{Name: name}, &admissionregistrationv1.ValidatingWebhookConfiguration{}); err != nil {
			t.Errorf("the %s chart's ValidatingWebhookConfiguration: %v", name, err)
		}
	}
	for _, list := range []client.ObjectList{&sourcev1.OCIRepositoryList{}, &sourcev1.HelmRepositoryList{}} {
		if err := k8s.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		_ = meta.EachListItem(list, func(o kruntime.Object) error {
			var url string
			switch s := o.(type) {
			case *sourcev1.OCIRepository:
				url = s.Spec.URL
			case *sourcev1.HelmRepository:
				url = s.Spec.URL
			}
			if !strings.HasPrefix(url, "oci://"+mirror+"/") {
				t.Errorf("Flux source %s reads %s, not the mirror", o.(client.Object).GetName(), url)
			}
			return nil
		})
	}
}

func crdUIDs(ctx context.Context, t *testing.T, k8s client.Client) map[string]types.UID {
	t.Helper()
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := k8s.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, c := range list.Items {
		if strings.HasSuffix(c.Spec.Group, ".flotilla.dev") {
			out[c.Name] = c.UID
		}
	}
	return out
}

// rolloutStandIn stands in for the deployment and daemonset controllers and the kubelet, which do
// not run here: it reports every workload in flotilla-system rolled out and available.
func rolloutStandIn(ctx context.Context, k8s client.Client) {
	for ctx.Err() == nil {
		deps := &appsv1.DeploymentList{}
		if k8s.List(ctx, deps, client.InNamespace("flotilla-system")) == nil {
			for i := range deps.Items {
				d := &deps.Items[i]
				n := int32(1)
				if d.Spec.Replicas != nil {
					n = *d.Spec.Replicas
				}
				if d.Status.ObservedGeneration == d.Generation && d.Status.AvailableReplicas == n {
					continue
				}
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
					Conditions: []appsv1.DeploymentCondition{
						{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
						{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}}}
				_ = k8s.Status().Update(ctx, d)
			}
		}
		dss := &appsv1.DaemonSetList{}
		if k8s.List(ctx, dss, client.InNamespace("flotilla-system")) == nil {
			for i := range dss.Items {
				d := &dss.Items[i]
				if d.Status.ObservedGeneration == d.Generation && d.Status.NumberAvailable == 1 {
					continue
				}
				d.Status = appsv1.DaemonSetStatus{ObservedGeneration: d.Generation, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
					UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1}
				_ = k8s.Status().Update(ctx, d)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func podSpec(o client.Object) corev1.PodSpec {
	switch w := o.(type) {
	case *appsv1.Deployment:
		return w.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return w.Spec.Template.Spec
	}
	return corev1.PodSpec{}
}

// fluxReport says, for a failure message, where every Flux object stands.
func fluxReport(ctx context.Context, k8s client.Client) string {
	var b strings.Builder
	for _, list := range []client.ObjectList{&kustomizev1.KustomizationList{}, &sourcev1.OCIRepositoryList{}, &sourcev1.HelmRepositoryList{}, &helmv2.HelmReleaseList{}} {
		if err := k8s.List(ctx, list); err != nil {
			fmt.Fprintf(&b, "%T: %v\n", list, err)
			continue
		}
		_ = meta.EachListItem(list, func(o kruntime.Object) error {
			u, _ := kruntime.DefaultUnstructuredConverter.ToUnstructured(o)
			conds, _, _ := unstructured.NestedSlice(u, "status", "conditions")
			fmt.Fprintf(&b, "%T %s:", o, o.(client.Object).GetName())
			for _, c := range conds {
				m := c.(map[string]any)
				fmt.Fprintf(&b, " %v=%v (%v: %v)", m["type"], m["status"], m["reason"], m["message"])
			}
			b.WriteString("\n")
			return nil
		})
	}
	return b.String()
}
