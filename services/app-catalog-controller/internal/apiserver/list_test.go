package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/catalog"
)

// A LIST written from the apps' memoized JSON is the JSON the encoder writes for the same list.
func TestListJSONIsTheEncodersJSON(t *testing.T) {
	k := starterKind(t, "postgres")
	st := newStore(HistoryLimits{Changes: 10, Bytes: 1 << 20})
	var objs []any
	for i := range 5 {
		app := newApp(k, map[string]any{"replicas": int64(1 + i)})
		app.SetName(fmt.Sprintf("db%d", i))
		app.SetLabels(map[string]string{"team": "<&>"}) // escaped alike
		k.Default(app.Object)
		hr := &helmv2.HelmRelease{}
		if err := toHelmRelease(k, app, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: app.GetNamespace()}}, "", hr); err != nil {
			t.Fatal(err)
		}
		hr.ResourceVersion = fmt.Sprint(i + 1)
		objs = append(objs, hr)
	}
	if err := st.Replace(objs, "5"); err != nil {
		t.Fatal(err)
	}
	s := &appStorage{kind: k, store: st}
	obj, err := s.List(genericapirequest.WithNamespace(context.Background(), ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := obj.(*appList)
	if !ok || len(l.Items) != 5 {
		t.Fatalf("List returned %T with %d items", obj, len(l.Items))
	}
	ser := newNegotiatedSerializer()
	var fast, slow bytes.Buffer
	if err := ser.EncoderForVersion(ser.infos[0].Serializer, k.GVK.GroupVersion()).Encode(l, &fast); err != nil {
		t.Fatal(err)
	}
	if err := ser.EncoderForVersion(ser.infos[0].PrettySerializer, k.GVK.GroupVersion()).Encode(l, &slow); err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(fast.Bytes(), &a); err != nil {
		t.Fatalf("%v: %s", err, fast.Bytes())
	}
	if err := json.Unmarshal(slow.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("memoized list differs from the encoder's:\n%s\n%s", fast.Bytes(), slow.Bytes())
	}
}

// Apps sort as their continue-token keys do: "/a-b/x" before "/a/x" ('-' sorts before '/').
func TestByKeyIsListKeyOrder(t *testing.T) {
	var hrs []*helmv2.HelmRelease
	for _, ns := range []string{"a", "a-b", "a0", "ab", "b", "a-"} {
		for _, name := range []string{"x", "x-y", "x0", "y"} {
			hrs = append(hrs, &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "apps-" + ns,
				Labels: map[string]string{catalogv1.LabelAppName: name}}, Spec: helmv2.HelmReleaseSpec{TargetNamespace: ns}})
		}
	}
	for _, a := range hrs {
		for _, b := range hrs {
			if got, want := byKey(a, b), strings.Compare(listKey(a), listKey(b)); got != want {
				t.Errorf("%s vs %s: %d, want %d", listKey(a), listKey(b), got, want)
			}
		}
	}
}

// postgresReleases is n Postgres apps' HelmReleases in namespace ns, resourceVersions from first.
func postgresReleases(t *testing.T, k *catalog.Kind, ns string, n, first int) []*helmv2.HelmRelease {
	t.Helper()
	var out []*helmv2.HelmRelease
	for i := range n {
		app := newApp(k, map[string]any{})
		app.SetNamespace(ns)
		app.SetName(fmt.Sprintf("db%d", i))
		k.Default(app.Object)
		hr := &helmv2.HelmRelease{}
		if err := toHelmRelease(k, app, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, "", hr); err != nil {
			t.Fatal(err)
		}
		hr.ResourceVersion = fmt.Sprint(first + i)
		out = append(out, hr)
	}
	return out
}

// Pages are one snapshot: changes after the first page do not show in the next ones, and a
// continue token older than the history is 410 Gone, saying to list again.
func TestPagesAreOneSnapshot(t *testing.T) {
	k := starterKind(t, "postgres")
	st := newStore(HistoryLimits{Changes: 3, Bytes: 1 << 30})
	var objs []any
	for _, hr := range postgresReleases(t, k, "tenant-a", 5, 1) {
		objs = append(objs, hr)
	}
	if err := st.Replace(objs, "5"); err != nil {
		t.Fatal(err)
	}
	s := &appStorage{kind: k, store: st}
	ctx := genericapirequest.WithNamespace(context.Background(), "tenant-a")
	page := func(cont string) *unstructured.UnstructuredList {
		t.Helper()
		obj, err := s.List(ctx, &metainternalversion.ListOptions{Limit: 2, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := obj.(*appList); ok {
			return l.UnstructuredList
		}
		return obj.(*unstructured.UnstructuredList)
	}
	first := page("")
	if len(first.Items) != 2 || first.GetContinue() == "" || *first.GetRemainingItemCount() != 3 {
		t.Fatalf("first page: %d items, continue %q", len(first.Items), first.GetContinue())
	}
	// A change after the first page: db4 deleted (its resourceVersion 6).
	gone := postgresReleases(t, k, "tenant-a", 5, 2)[4]
	_ = st.Delete(gone)
	var names []string
	for l, cont := first, first.GetContinue(); ; cont = l.GetContinue() {
		for _, it := range l.Items {
			names = append(names, it.GetName())
		}
		if cont == "" {
			break
		}
		l = page(cont)
		if l.GetResourceVersion() != first.GetResourceVersion() {
			t.Fatalf("page at %s, first page at %s", l.GetResourceVersion(), first.GetResourceVersion())
		}
	}
	if fmt.Sprint(names) != "[db0 db1 db2 db3 db4]" {
		t.Fatalf("pages hold %v, want the snapshot of the first page", names)
	}
	// Enough changes to push the first page's snapshot out of the history.
	for i, hr := range postgresReleases(t, k, "tenant-a", 4, 10) {
		hr.Labels["n"] = fmt.Sprint(i)
		_ = st.Update(hr)
	}
	_, err := s.List(ctx, &metainternalversion.ListOptions{Limit: 2, Continue: first.GetContinue()})
	if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "continue parameter is too old") {
		t.Fatalf("an expired continue token: %v", err)
	}
}
