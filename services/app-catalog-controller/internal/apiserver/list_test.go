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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
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
		if err := toHelmRelease(k, app, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: app.GetNamespace()}}, hr); err != nil {
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
