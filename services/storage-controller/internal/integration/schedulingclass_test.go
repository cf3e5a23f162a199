package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/webhook"
)

func zonedNodes(t *testing.T) map[string]string {
	t.Helper()
	zones := map[string]string{"node-1": "a", "node-2": "b", "node-3": "c", "node-4": "a"}
	for n, z := range zones {
		node(t, n, z)
	}
	return zones
}

func schedulingClass(t *testing.T, name string, spec storagepolicyv1.SchedulingClassSpec) {
	t.Helper()
	ctx := context.Background()
	c := &storagepolicyv1.SchedulingClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, c) })
	eventually(t, 10*time.Second, "SchedulingClass "+name+" Ready", func() (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return false, err
		}
		ready := fmeta.ReadyCondition
		for _, cond := range c.Status.Conditions {
			if cond.Type == ready && cond.Status == metav1.ConditionTrue && c.Status.ObservedGeneration == c.Generation {
				return true, nil
			}
		}
		return false, nil
	})
}

// classedNamespace is a tenant namespace with a scheduling class, as the tenant-controller labels it.
func classedNamespace(t *testing.T, name, class string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{storagepolicyv1.LabelNamespaceSchedulingClass: class}}}
	if err := k8s.Create(context.Background(), ns); client.IgnoreAlreadyExists(err) != nil { // made by the same test run before (-count)
		t.Fatal(err)
	}
	return name
}

func webPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app.kubernetes.io/instance": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}}},
	}
}

// scheduledZones creates the pods and returns the zone each was bound to by the real scheduler.
func scheduledZones(t *testing.T, zones map[string]string, pods ...*corev1.Pod) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, p := range pods {
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, p, client.GracePeriodSeconds(0)) })
		eventually(t, 30*time.Second, p.Name+" scheduled", func() (bool, error) {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return false, err
			}
			return p.Spec.NodeName != "", fmt.Errorf("not scheduled: %+v", p.Status.Conditions)
		})
		out = append(out, zones[p.Spec.NodeName])
	}
	return out
}

// A spread class puts a service's three pods in three zones; a pack class puts them in one; the
// real kube-scheduler enforces what the webhook wrote into the pods.
func TestSchedulingClassSpreadsAndPacks(t *testing.T) {
	zones := zonedNodes(t)
	schedulingClass(t, "spread", storagepolicyv1.SchedulingClassSpec{Topology: &storagepolicyv1.Topology{Key: "topology.kubernetes.io/zone", Policy: "Spread"}})
	schedulingClass(t, "pack", storagepolicyv1.SchedulingClassSpec{Topology: &storagepolicyv1.Topology{Key: "topology.kubernetes.io/zone", Policy: "Pack"}})

	ns := classedNamespace(t, "spread-web", "spread")
	got := scheduledZones(t, zones, webPod(ns, "web-1"), webPod(ns, "web-2"), webPod(ns, "web-3"))
	if got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		t.Errorf("spread class: pods in zones %v, want one per zone", got)
	}

	ns = classedNamespace(t, "pack-web", "pack")
	got = scheduledZones(t, zones, webPod(ns, "web-1"), webPod(ns, "web-2"), webPod(ns, "web-3"))
	if got[0] != got[1] || got[1] != got[2] {
		t.Errorf("pack class: pods in zones %v, want all in one", got)
	}
}

// A tenant cannot escape its namespace's class: naming another class on the pod changes nothing,
// and a node selector that contradicts the class is refused, naming the field.
func TestSchedulingClassCannotBeEscaped(t *testing.T) {
	ctx := context.Background()
	zonedNodes(t)
	schedulingClass(t, "fenced", storagepolicyv1.SchedulingClassSpec{NodeSelector: map[string]string{"topology.kubernetes.io/zone": "b"}})
	schedulingClass(t, "open", storagepolicyv1.SchedulingClassSpec{})
	ns := classedNamespace(t, "fenced-web", "fenced")

	annotated := webPod(ns, "escape-by-annotation")
	annotated.Annotations = map[string]string{storagepolicyv1.AnnotationSchedulingClass: "open"}
	if err := k8s.Create(ctx, annotated); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, annotated, client.GracePeriodSeconds(0)) })
	if annotated.Spec.NodeSelector["topology.kubernetes.io/zone"] != "b" {
		t.Errorf("a pod naming another class escaped its namespace's: nodeSelector %v", annotated.Spec.NodeSelector)
	}

	p := webPod(ns, "escape-by-selector")
	p.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "a"}
	err := k8s.Create(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "spec.nodeSelector[topology.kubernetes.io/zone]") || !strings.Contains(err.Error(), "fenced") {
		t.Errorf("a pod contradicting its class: %v", err)
		_ = k8s.Delete(ctx, p, client.GracePeriodSeconds(0))
	}
}

// A pod whose class does not exist is scheduled nowhere, and an event on it names the class.
func TestUnknownSchedulingClassHoldsThePod(t *testing.T) {
	ctx := context.Background()
	zonedNodes(t)
	ns := namespace(t, "held")
	p := webPod(ns, "held")
	p.Annotations = map[string]string{storagepolicyv1.AnnotationSchedulingClass: "nonexistent"}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, p, client.GracePeriodSeconds(0)) })
	eventually(t, 30*time.Second, "an event naming the missing class", func() (bool, error) {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Regarding.UID == p.UID && e.Reason == "SchedulingClassNotFound" && strings.Contains(e.Note, "SchedulingClass nonexistent") {
				return true, nil
			}
		}
		return false, nil
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Errorf("the held pod was bound to %s", p.Spec.NodeName)
	}
	gated := false
	for _, c := range p.Status.Conditions {
		gated = gated || (c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated)
	}
	if !gated {
		t.Errorf("the pod is not reported SchedulingGated: %+v", p.Status.Conditions)
	}
}

// Every field a class can get wrong is refused, naming it.
func TestBadSchedulingClassesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spec  storagepolicyv1.SchedulingClassSpec
		field string
	}{
		{"policy", storagepolicyv1.SchedulingClassSpec{Topology: &storagepolicyv1.Topology{Key: "zone", Policy: "Scatter"}}, "spec.topology.policy"},
		{"key", storagepolicyv1.SchedulingClassSpec{Topology: &storagepolicyv1.Topology{Key: "zone\nx", Policy: "Spread"}}, "spec.topology.key"},
		{"skew of pack", storagepolicyv1.SchedulingClassSpec{Topology: &storagepolicyv1.Topology{Key: "zone", Policy: "Pack", MaxSkew: ptr.To[int32](2)}}, "spec.topology.maxSkew"},
		{"skew zero", storagepolicyv1.SchedulingClassSpec{Topology: &storagepolicyv1.Topology{Key: "zone", Policy: "Spread", MaxSkew: ptr.To[int32](0)}}, "spec.topology.maxSkew"},
		{"group label", storagepolicyv1.SchedulingClassSpec{GroupLabel: "a b"}, "spec.groupLabel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &storagepolicyv1.SchedulingClass{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tc.spec}
			err := k8s.Create(context.Background(), c)
			if err == nil {
				_ = k8s.Delete(context.Background(), c)
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("the error does not name %s: %v", tc.field, err)
			}
		})
	}
}

// The webhook reads a namespace or class its cache has not seen yet from the API server: a
// namespace and its pods applied together, or a class created just before a pod naming it, are
// placed, neither refused nor held. Its cache here sees nothing, as the manager's cache does in
// the moments before an object created just now reaches it.
func TestPodPlacerReadsWhatItsCacheHasNotSeen(t *testing.T) {
	ctx := context.Background()
	placer := &webhook.PodPlacer{Reader: unseeingCache(t), APIReader: k8s}

	schedulingClass(t, "unseen", storagepolicyv1.SchedulingClassSpec{NodeSelector: map[string]string{"topology.kubernetes.io/zone": "a"}})
	for _, tc := range []struct {
		name string
		ns   string
		pod  func(ns string) *corev1.Pod
	}{
		{"the namespace's class", classedNamespace(t, "unseen-classed", "unseen"), func(ns string) *corev1.Pod { return webPod(ns, "web") }},
		{"the pod's class", namespace(t, "unseen-plain"), func(ns string) *corev1.Pod {
			p := webPod(ns, "web")
			p.Annotations = map[string]string{storagepolicyv1.AnnotationSchedulingClass: "unseen"}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pod(tc.ns)
			if err := placer.Default(ctx, p); err != nil {
				t.Fatalf("refused: %v", err)
			}
			if len(p.Spec.SchedulingGates) != 0 || p.Spec.NodeSelector["topology.kubernetes.io/zone"] != "a" {
				t.Errorf("not placed by class unseen: gates %v, node selector %v", p.Spec.SchedulingGates, p.Spec.NodeSelector)
			}
		})
	}
}
