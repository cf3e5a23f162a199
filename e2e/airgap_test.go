package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
	"github.com/flotilla-dev/flotilla/libs/testenv/node"
)

// A platform without internet access installs Flotilla from its registry mirror alone: a release
// built here (for this machine's platform), loaded from its offline bundle into a registry on the
// node's link, installed by the real source-, kustomize- and helm-controller from nothing but the
// bootstrap objects a platform team commits (deploy/flux/clusters/production, with the mirror's
// prefix set), then upgraded to the next release the same way.
//
// The platform runs as pods on a real node (libs/testenv/node): containerd pulls every image from
// the mirror by the release's digest, Flux's health checks wait for real rollouts, and every
// Flotilla pod must be Ready without a restart and its webhooks answer through their Services.
// Then it serves customers (customersOrderApps): tenants order apps that run and answer.
func TestAirGappedInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release")
	}
	if os.Geteuid() != 0 {
		t.Skip("installs onto a real node, which needs root: CI runs as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	first := buildRelease(ctx, t, "1.0.0")
	dir := os.Getenv("AIRGAP_LOGS") // keeps the Flux controllers' and the node's logs there, to debug a failure
	if dir == "" {
		dir = t.TempDir()
	}
	audit := filepath.Join(dir, "audit.log")
	c := startAirGapped(ctx, t, dir, audit)
	defer c.stop()
	defer func() {
		if t.Failed() {
			dumpLogs(t, filepath.Join(dir, "node", "logs"))
		}
	}()
	env, n, k8s, mirror, push := c.env, c.node, c.env.Client, c.mirror, c.push
	loadBundle(ctx, t, first, mirror, push)
	committed := time.Now()
	c.commitBootstrap(ctx, t, "1.0.0")

	installed(ctx, t, k8s, first, mirror, "1.0.0")
	running(ctx, t, k8s, n.Name)
	t.Logf("release 1.0.0: every Flotilla pod Ready on the node %.1f s after the bootstrap objects were committed", time.Since(committed).Seconds())
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
	upgraded := time.Now()
	installed(ctx, t, k8s, second, mirror, "1.1.0")
	running(ctx, t, k8s, n.Name)
	t.Logf("release 1.1.0: every Flotilla pod rolled and Ready %.1f s after the tag changed", time.Since(upgraded).Seconds())
	scraped(ctx, t, env, dir)
	quietFailover(ctx, t, k8s, audit)

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
	customersOrderApps(ctx, t, c)
	impersonationMatrix(ctx, t, c.env.Config)
	platformSecretReach(ctx, t, c.env.Config)
}

// airGapped is a fresh control plane with a real node and a registry mirror on the node's link,
// with Flux's source-, kustomize- and helm-controller running: a platform without internet access
// before it installs Flotilla.
type airGapped struct {
	env    *testenv.Env
	node   *node.Node
	reg    *httptest.Server
	mirror string // <registry>/mirror/flotilla, the registry prefix a platform team sets
	push   remote.Option
}

// startAirGapped starts it, its logs under dir (kube-apiserver's audit log at audit, if set).
func startAirGapped(ctx context.Context, t testing.TB, dir, audit string) *airGapped {
	t.Helper()
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
	c := &airGapped{}
	c.env, err = testenv.Start(testenv.Options{CRDDirs: append(crds, platformPrerequisites(t)...), Scheme: scheme, Aggregation: true,
		Node: true, ControllerManager: true, AuditLog: audit})
	if err != nil {
		t.Fatal(err)
	}
	ok := false
	defer func() {
		if !ok {
			c.stop()
		}
	}()
	if _, err := c.env.StartScheduler(dir, testenv.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	if c.node, err = node.Start(ctx, c.env, node.Options{Dir: filepath.Join(dir, "node")}); err != nil {
		t.Fatal(err)
	}
	// The mirror serves TLS on the node's link with a certificate of the node CA, which containerd
	// and source-controller are given.
	certs := c.env.ControlPlane.APIServer.CertDir
	serving, err := testenv.NodeServingCert(certs, c.env.NodeNet.HostIP())
	if err != nil {
		t.Fatal(err)
	}
	c.reg = httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	if c.reg.Listener, err = net.Listen("tcp", net.JoinHostPort(c.env.NodeNet.HostIP().String(), "0")); err != nil {
		t.Fatal(err)
	}
	c.reg.TLS = &tls.Config{Certificates: []tls.Certificate{serving}}
	c.reg.StartTLS()
	host := c.reg.Listener.Addr().String()
	c.mirror = host + "/mirror/flotilla"
	if err := c.node.TrustRegistry(host); err != nil {
		t.Fatal(err)
	}
	ca := testenv.NodeCAFile(certs)
	pool := x509.NewCertPool()
	if raw, err := os.ReadFile(ca); err != nil || !pool.AppendCertsFromPEM(raw) {
		t.Fatalf("the node CA %s: %v", ca, err)
	}
	c.push = remote.WithTransport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	if err := c.env.StartFlux(ctx, dir, "SSL_CERT_FILE="+ca); err != nil {
		t.Fatal(err)
	}
	if err := c.env.StartKustomizeController(dir); err != nil {
		t.Fatal(err)
	}
	fluxInstallation(ctx, t, c.env.Client)
	ok = true
	return c
}

func (c *airGapped) stop() {
	if c.reg != nil {
		c.reg.Close()
	}
	if c.node != nil {
		c.node.Stop()
	}
	_ = c.env.Stop()
}

// commitBootstrap creates what the platform team commits: the bootstrap file with the mirror's
// prefix and the release's version.
func (c *airGapped) commitBootstrap(ctx context.Context, t testing.TB, version string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repo, "deploy", "flux", "clusters", "production", "flotilla.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := strings.ReplaceAll(string(raw), "ghcr.io/flotilla-dev", c.mirror)
	bootstrap = strings.Replace(bootstrap, "tag: 0.1.0", "tag: "+version, 1)
	for _, o := range decodeAll(t, []byte(bootstrap)) {
		if err := c.env.Client.Create(ctx, o); err != nil {
			t.Fatalf("bootstrap %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// buildRelease builds a release of this checkout for this machine's platform, and writes and
// reads back its offline bundle (the same path an operator's copy takes).
func buildRelease(ctx context.Context, t testing.TB, version string) *release.Bundle {
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

func loadBundle(ctx context.Context, t testing.TB, b *release.Bundle, mirror string, opts ...remote.Option) {
	t.Helper()
	if err := b.Push(ctx, mirror, false, io.Discard, opts...); err != nil {
		t.Fatal(err)
	}
}

// fluxInstallation is what `flux install` makes and a platform has before it commits anything:
// helm-controller's ServiceAccount (the platform's releases install as it) and its rights.
func fluxInstallation(ctx context.Context, t testing.TB, k8s client.Client) {
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
func installed(ctx context.Context, t testing.TB, k8s client.Client, b *release.Bundle, mirror, version string) {
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
		t.Fatalf("release %s not installed: %v\n%s%s", version, err, fluxReport(ctx, k8s), podStates(ctx, k8s, "flotilla-system"))
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
	// The catalog's apps: their images in the bundle, their registry the mirror.
	for _, app := range []string{"redis", "etcd"} {
		if digests[release.CatalogImages+"/"+app] == "" {
			t.Errorf("release %s: no image %s/%s in the bundle", version, release.CatalogImages, app)
		}
	}
	// The operators the catalog's kinds need, from the GitOps tree: CloudNativePG's running the
	// bundle's image from the mirror (their Kustomization waits for their workloads).
	operators := &kustomizev1.Kustomization{}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: testenv.FluxNamespace, Name: "flotilla-operators"}, operators); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return meta.IsStatusConditionTrue(operators.Status.Conditions, "Ready") && strings.HasPrefix(operators.Status.LastAppliedRevision, version+"@"), nil
	})
	if err != nil {
		t.Fatalf("release %s: the operators not installed: %v\n%s%s", version, err, fluxReport(ctx, k8s), podStates(ctx, k8s, "cnpg-system"))
	}
	cnpg := &appsv1.Deployment{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: "cnpg-system", Name: "cnpg-controller-manager"}, cnpg); err != nil {
		t.Error(err)
	} else if want := mirror + "/" + release.CatalogImages + "/cnpg@" + digests[release.CatalogImages+"/cnpg"]; cnpg.Spec.Template.Spec.Containers[0].Image != want {
		t.Errorf("CloudNativePG's operator runs %s, want %s", cnpg.Spec.Template.Spec.Containers[0].Image, want)
	}
	apps := &appsv1.Deployment{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: "flotilla-system", Name: "app-catalog-controller-apiserver"}, apps); err != nil {
		t.Error(err)
	} else if args := apps.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--image-registry="+mirror) {
		t.Errorf("the apps apiserver's arguments %v give the catalog's apps no --image-registry=%s", args, mirror)
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

func crdUIDs(ctx context.Context, t testing.TB, k8s client.Client) map[string]types.UID {
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

// platformPrerequisites are the CRDs of what Flotilla's controllers work with and a provider's
// cluster has before Flotilla comes (as `make demo` installs them): Cluster API's core and kubeadm
// bootstrap, its KubeVirt provider, Kamaji's control planes and Kube-OVN's subnets.
func platformPrerequisites(t testing.TB) []string {
	t.Helper()
	var dirs []string
	for _, m := range []struct{ module, crds string }{
		{"sigs.k8s.io/cluster-api@v1.13.6", "config/crd/bases"},
		{"sigs.k8s.io/cluster-api@v1.13.6", "bootstrap/kubeadm/config/crd/bases"},
		{"sigs.k8s.io/cluster-api-provider-kubevirt@v0.11.2", "config/crd/bases"},
		{"github.com/kubeovn/kube-ovn@v1.16.2", "charts/kube-ovn-v2/crds"},
	} {
		dir, err := testenv.ModuleDir(m.module)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.Join(dir, m.crds))
	}
	return append(dirs, filepath.Join(repo, "services", "cluster-controller", "test", "crds", "kamaji"))
}

// running waits until every pod in flotilla-system runs on the node and is Ready (a rollout's old
// pods gone), then checks that none restarted, and that the tenant-controller's webhook answers
// through its Service: it denies a Tenant outside any tenant's namespace.
func running(ctx context.Context, t testing.TB, k8s client.Client, nodeName string) {
	t.Helper()
	pods := &corev1.PodList{}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := k8s.List(ctx, pods, client.InNamespace("flotilla-system")); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}
			if !ready || p.DeletionTimestamp != nil {
				return false, nil
			}
		}
		return len(pods.Items) > 0, nil
	})
	if err != nil {
		t.Fatalf("Flotilla's pods not all Ready: %v\n%s", err, podStates(ctx, k8s, "flotilla-system"))
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != nodeName {
			t.Errorf("pod %s on %q, want the node %s", p.Name, p.Spec.NodeName, nodeName)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount > 0 {
				t.Errorf("container %s of pod %s restarted %d times", c.Name, p.Name, c.RestartCount)
			}
		}
	}
	bad := &unstructured.Unstructured{}
	bad.SetAPIVersion("tenancy.flotilla.dev/v1alpha1")
	bad.SetKind("Tenant")
	bad.SetNamespace(metav1.NamespaceDefault)
	bad.SetName("stray")
	err = k8s.Create(ctx, bad, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), `admission webhook "tenants.tenancy.flotilla.dev" denied the request`) {
		t.Errorf("a Tenant outside any tenant's namespace: %v, want the tenant-controller's webhook to deny it", err)
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
