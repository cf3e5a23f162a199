package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/apiserver"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// The attack suite: a tenant administrator of acme tries to cross a boundary through the apps
// API. Each test is one attack from issue 7 and fails if the attack works.

// The exploit as reported: a storage class with a newline and "---" added a ClusterRoleBinding to
// cluster-admin to the release. The schema refuses it, naming the field, and nothing is written.
func TestAttackInjectedStorageClass(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "postgres")
	acme := tenantNamespace(t, "acme")
	mallory := tenantAdmin(t, acme, "mallory")
	app := appObject("Postgres", acme, "escalate", "{}")
	injected := "fast\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: mallory-is-admin\n" +
		"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n" +
		"subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: mallory}]"
	if err := unstructured.SetNestedField(app.Object, map[string]any{"storageClass": injected}, "spec", "storage"); err != nil {
		t.Fatal(err)
	}
	_, err := mallory.Resource(postgresGVR).Namespace(acme).Create(ctx, app, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.storage.storageClass") {
		t.Fatalf("the injected storage class was not refused naming spec.storage.storageClass: %v", err)
	}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(acme), Name: "pg-escalate"}, &helmv2.HelmRelease{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a HelmRelease was written for the refused app: %v", err)
	}
	// Given time to act had it been written, no binding appears.
	time.Sleep(2 * time.Second)
	if err := kube.Get(ctx, client.ObjectKey{Name: "mallory-is-admin"}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the injected ClusterRoleBinding exists: %v", err)
	}
}

// A quantity like 1e1000000000 is nine bytes, but adding or comparing it builds a number of a
// billion digits: a child tenant ordered with one would stall whoever does its quota arithmetic.
// The Tenant app's schema refuses a decimal exponent beyond two digits, naming the field.
func TestAttackHugeQuantity(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "tenant")
	acme := tenantNamespace(t, "acme")
	mallory := tenantAdmin(t, acme, "mallory")
	appsGVR := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "tenants"}
	app := appObject("Tenant", acme, "huge", "{}")
	if err := unstructured.SetNestedField(app.Object, map[string]any{"requests.cpu": "1e1000000000"}, "spec", "resourceQuotas"); err != nil {
		t.Fatal(err)
	}
	_, err := mallory.Resource(appsGVR).Namespace(acme).Create(ctx, app, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.resourceQuotas.requests.cpu") {
		t.Fatalf("a quota of 1e1000000000 was not refused naming spec.resourceQuotas.requests.cpu: %v", err)
	}
	if err := unstructured.SetNestedField(app.Object, map[string]any{"requests.cpu": "1e3"}, "spec", "resourceQuotas"); err != nil {
		t.Fatal(err)
	}
	if _, err := mallory.Resource(appsGVR).Namespace(acme).Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a quota of 1e3: %v", err)
	}
}

// An app whose chart renders an object that exists and is not the release's fails, naming the
// object, and leaves the object as it was: the Tenant app "dev" must not take over the Tenant "dev"
// acme's administrator made by hand (deleting the app would then delete that tenant).
func TestAttackAppAdoptsExistingObject(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "tenant")
	acme := tenantNamespace(t, "acme")
	mallory := tenantAdmin(t, acme, "mallory")
	tenantGVR := schema.GroupVersionResource{Group: "tenancy.flotilla.dev", Version: "v1alpha1", Resource: "tenants"}
	existing := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "tenancy.flotilla.dev/v1alpha1", "kind": "Tenant",
		"metadata": map[string]any{"name": "dev", "namespace": acme},
		"spec":     map[string]any{"etcd": true, "resourceQuotas": map[string]any{"requests.cpu": "3"}},
	}}
	before, err := mallory.Resource(tenantGVR).Namespace(acme).Create(ctx, existing, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	appsGVR := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "tenants"}
	if _, err := mallory.Resource(appsGVR).Namespace(acme).Create(ctx, appObject("Tenant", acme, "dev", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	eventually(t, 90*time.Second, "the app to report the object it would take over", func() (bool, error) {
		app, err := mallory.Resource(appsGVR).Namespace(acme).Get(ctx, "dev", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		msg, _, _ = unstructured.NestedString(app.Object, "status", "message")
		st := &apiserver.AppStatus{}
		status, _, _ := unstructured.NestedMap(app.Object, "status")
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(status, st); err != nil {
			return false, err
		}
		ready := apimeta.FindStatusCondition(st.Conditions, "Ready")
		return ready != nil && ready.Status == metav1.ConditionFalse && strings.Contains(msg, `Tenant "dev"`), nil
	})
	t.Logf("app status: %s", msg)
	after, err := mallory.Resource(tenantGVR).Namespace(acme).Get(ctx, "dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The tenant-controller writes its status; nobody else may touch it.
	if !equality.Semantic.DeepEqual(after.Object["spec"], before.Object["spec"]) ||
		!equality.Semantic.DeepEqual(after.GetLabels(), before.GetLabels()) ||
		after.GetAnnotations()["meta.helm.sh/release-name"] != "" {
		t.Fatalf("the existing Tenant was changed by the app's release:\nbefore %v %v\nafter  %v %v",
			before.GetLabels(), before.Object["spec"], after.GetLabels(), after.Object["spec"])
	}
	if err := mallory.Resource(appsGVR).Namespace(acme).Delete(ctx, "dev", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the app to be gone", func() (bool, error) {
		_, err := mallory.Resource(appsGVR).Namespace(acme).Get(ctx, "dev", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if _, err := mallory.Resource(tenantGVR).Namespace(acme).Get(ctx, "dev", metav1.GetOptions{}); err != nil {
		t.Fatalf("deleting the app deleted the Tenant it never owned: %v", err)
	}
}

// An app's spec larger than the documented limit is refused with 422 naming spec, whatever the
// definition's schema allows.
func TestAttackOversizedSpec(t *testing.T) {
	ctx := context.Background()
	def := testDefinition(t, "Note", "notes", func(d *catalogv1.ApplicationDefinition) {
		d.Spec.Schema.Raw = []byte(`{"type":"object","properties":{"text":{"type":"string"}}}`)
	})
	if err := kube.Create(ctx, def); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	waitDiscovered(t, "notes", true)
	acme := tenantNamespace(t, "acme")
	mallory := tenantAdmin(t, acme, "mallory")
	gvr := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "notes"}
	big := appObject("Note", acme, "big", "{}")
	big.Object["spec"] = map[string]any{"text": strings.Repeat("x", 1500*1024)}
	_, err := mallory.Resource(gvr).Namespace(acme).Create(ctx, big, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) && !apierrors.IsRequestEntityTooLargeError(err) {
		t.Fatalf("a 1.5 MB spec was not refused with 422 or 413: %v", err)
	}
	if apierrors.IsInvalid(err) && !strings.Contains(err.Error(), "spec: Too long") {
		t.Fatalf("the refusal does not name spec: %v", err)
	}
	small := appObject("Note", acme, "small", "{}")
	small.Object["spec"] = map[string]any{"text": strings.Repeat("x", apiserver.MaxSpecBytes-64)}
	if _, err := mallory.Resource(gvr).Namespace(acme).Create(ctx, small, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a spec within the limit was refused: %v", err)
	}
}

// The exploit as reported: Helm's release record of an app was a Secret in the tenant's
// namespace; a tenant administrator added a ClusterRole and another tenant's ConfigMap to its
// manifest, and deleting the app made helm-controller delete both. The records now live in the
// delivery namespace, out of the tenant's reach; and were one edited all the same (here by the
// platform admin, standing in for any way to write it), the uninstall runs as the tenant's delivery
// identity, which may delete neither.
func TestAttackEditedReleaseRecord(t *testing.T) {
	ctx := context.Background()
	installDefinition(t, "redis")
	acme, beta := tenantNamespace(t, "recacme"), tenantNamespace(t, "recbeta")
	mallory := tenantAdmin(t, acme, "mallory")
	redisGVR := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "redises"}
	if _, err := mallory.Resource(redisGVR).Namespace(acme).Create(ctx, appObject("Redis", acme, "cache", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "", "wait", "-n", acme, "redis/cache", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	// The records are not in the tenant's namespace, and the delivery namespace is closed to it.
	typed := typedAs(t, "mallory", acme+"-admin")
	if l, err := typed.CoreV1().Secrets(acme).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"}); err != nil || len(l.Items) > 0 {
		t.Fatalf("Helm's release records in the tenant's namespace: %v %v", l, err)
	}
	delivery := tenancyv1.DeliveryNamespace(acme)
	if _, err := typed.CoreV1().Secrets(delivery).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("acme's admin may read the delivery namespace: %v", err)
	}

	// The edit, as the report made it.
	victims := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "recacme-victim"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: beta}},
	}
	for _, v := range victims {
		if err := kube.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	records := &corev1.SecretList{}
	if err := kube.List(ctx, records, client.InNamespace(delivery), client.MatchingLabels{"owner": "helm", "name": "redis-cache"}); err != nil || len(records.Items) == 0 {
		t.Fatalf("no release record of redis-cache in %s: %v", delivery, err)
	}
	record := &records.Items[len(records.Items)-1]
	record.Data["release"] = appendToManifest(t, record.Data["release"],
		"\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: recacme-victim\n"+
			"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: victim\n  namespace: "+beta+"\n")
	if err := kube.Update(ctx, record); err != nil {
		t.Fatal(err)
	}
	if err := mallory.Resource(redisGVR).Namespace(acme).Delete(ctx, "cache", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Helm gives up on the uninstall (it may delete neither object) and keeps the record: the app
	// stays Deleting, saying why, until a platform admin looks.
	hr := &helmv2.HelmRelease{}
	eventually(t, 90*time.Second, "the uninstall to fail", func() (bool, error) {
		if err := kube.Get(ctx, client.ObjectKey{Namespace: delivery, Name: "redis-cache"}, hr); err != nil {
			return false, err
		}
		ready := apimeta.FindStatusCondition(hr.Status.Conditions, "Ready")
		return ready != nil && ready.Status == metav1.ConditionFalse && strings.Contains(ready.Message, "uninstall"), nil
	})
	for _, v := range victims {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
			t.Errorf("the uninstall of acme's app deleted %T %s: %v", v, v.GetName(), err)
		}
		_ = kube.Delete(ctx, v)
	}
	// What the platform admin does with a tampered record: let the app go.
	if err := kube.Patch(ctx, hr, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
}

// appendToManifest decodes a Helm release record (base64 of gzipped JSON), appends YAML to its
// manifest and encodes it again.
func appendToManifest(t *testing.T, data []byte, yaml string) []byte {
	t.Helper()
	gz, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		t.Fatal(err)
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	var rel map[string]any
	if err := json.NewDecoder(r).Decode(&rel); err != nil {
		t.Fatal(err)
	}
	rel["manifest"] = rel["manifest"].(string) + yaml
	raw, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

// typedAs is a typed client impersonating user in groups.
func typedAs(t *testing.T, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// One app's chart tries to delete, change or take over another app's objects in the same
// namespace: here through a value the tenant controls that the chart renders into a name, and a
// hook whose delete policy removes an object of that name before creating its own (Helm checks no
// ownership for hooks). Each app is installed as its own identity, which kube-apiserver holds to
// its own release's objects: the attacker's install fails naming the policy, and the victim's
// Secret, Service and volume stay as they were, its app Ready. Acting as the attacker's identity
// directly, every other way in is refused too.
func TestAttackAppTouchesAnotherAppsObjects(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	templates := map[string]string{
		"values.yaml": "replicas: 1\ntarget: \"\"\n",
		"templates/objects.yaml": `apiVersion: v1
kind: Service
metadata: {name: "{{ .Release.Name }}"}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Secret
metadata: {name: "{{ .Release.Name }}-password"}
stringData: {password: "{{ .Release.Name }}-s3cret"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: "{{ .Release.Name }}-data"}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
{{- with .Values.target }}
---
apiVersion: v1
kind: Secret
metadata:
  name: "{{ . }}-password"
  annotations: {helm.sh/hook: pre-install, helm.sh/hook-delete-policy: before-hook-creation}
stringData: {password: stolen}
{{- end }}
`,
	}
	repo, err := testenv.ServeCharts(filepath.Join(dir, "repo"), 0, writeChartWith(t, dir, "stash", "0.1.0",
		chartDefinition("Stash", "stashes", 1, "      target: {type: string, maxLength: 40}"), templates))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close() })
	helmSource(t, "stash-charts", sourcev1.HelmRepositorySpec{URL: repo.URL})
	waitSource(t, "stash-charts", "Ready", "Succeeded")
	waitDiscovered(t, "stashes", true)

	acme := tenantNamespace(t, "stashacme")
	mallory := tenantAdmin(t, acme, "mallory")
	stashes := schema.GroupVersionResource{Group: "apps.flotilla.dev", Version: "v1alpha1", Resource: "stashes"}
	if _, err := mallory.Resource(stashes).Namespace(acme).Create(ctx, appObject("Stash", acme, "shop", "{}"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, "", "wait", "-n", acme, "stash/shop", "--for=condition=Ready", "--timeout=90s"); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	victims := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: acme, Name: "stash-shop-password"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: acme, Name: "stash-shop"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: acme, Name: "stash-shop-data"}},
	}
	before := map[string]string{}
	for _, v := range victims {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
			t.Fatal(err)
		}
		before[v.GetName()] = v.GetResourceVersion()
	}

	// The chart, told by the tenant to name the shop's Secret.
	if _, err := mallory.Resource(stashes).Namespace(acme).Create(ctx, appObject("Stash", acme, "evil", `{"target":"stash-shop"}`), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	eventually(t, 90*time.Second, "the attacking app to fail naming the policy", func() (bool, error) {
		app, err := mallory.Resource(stashes).Namespace(acme).Get(ctx, "evil", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		msg, _, _ = unstructured.NestedString(app.Object, "status", "message")
		return strings.Contains(msg, tenancyv1.AppIdentityPolicy), nil
	})
	t.Logf("the attacking app: %s", msg)

	// Acting as the attacker's identity directly: change, delete, take over.
	hr := &helmv2.HelmRelease{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: tenancyv1.DeliveryNamespace(acme), Name: "stash-evil"}, hr); err != nil {
		t.Fatal(err)
	}
	attacker := typedAs(t, "system:serviceaccount:"+hr.Namespace+":"+hr.Spec.ServiceAccountName, "system:serviceaccounts", tenancyv1.DeliveryGroup(hr.Namespace))
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tenancyv1.AppIdentityPolicy) {
			t.Errorf("%s as the attacking app's identity %s: want refused by %s, got %v", what, hr.Spec.ServiceAccountName, tenancyv1.AppIdentityPolicy, err)
		}
	}
	_, err = attacker.CoreV1().Services(acme).Patch(ctx, "stash-shop", types.MergePatchType, []byte(`{"spec":{"selector":{"app":"evil"}}}`), metav1.PatchOptions{})
	refused("patching the shop's Service", err)
	refused("deleting the shop's volume", attacker.CoreV1().PersistentVolumeClaims(acme).Delete(ctx, "stash-shop-data", metav1.DeleteOptions{}))
	adopt := []byte(`{"metadata":{"labels":{"helm.toolkit.fluxcd.io/name":"stash-evil"},"annotations":{"meta.helm.sh/release-name":"stash-evil"}}}`)
	_, err = attacker.CoreV1().Secrets(acme).Patch(ctx, "stash-shop-password", types.MergePatchType, adopt, metav1.PatchOptions{})
	refused("taking over the shop's Secret", err)

	for _, v := range victims {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
			t.Fatalf("the shop's %T %s: %v", v, v.GetName(), err)
		}
		if v.GetResourceVersion() != before[v.GetName()] || v.GetDeletionTimestamp() != nil {
			t.Errorf("the shop's %T %s was changed by the attacking app", v, v.GetName())
		}
	}
	if out, err := kubectl(t, "", "wait", "-n", acme, "stash/shop", "--for=condition=Ready", "--timeout=10s"); err != nil {
		t.Fatalf("the shop is not Ready: %v\n%s", err, out)
	}
}
