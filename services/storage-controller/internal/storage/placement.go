package storage

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	storagepolicyv1 "github.com/flotilla-dev/flotilla/services/storage-controller/api/v1alpha1"
)

// ClassOf names the scheduling class of a pod in namespace ns: the namespace's (a tenant's
// placement, which its users may not escape), else the pod's annotation. "" means none.
func ClassOf(pod *corev1.Pod, ns *corev1.Namespace) string {
	if c := ns.Labels[storagepolicyv1.LabelNamespaceSchedulingClass]; c != "" {
		return c
	}
	return pod.Annotations[storagepolicyv1.AnnotationSchedulingClass]
}

// Place writes class into pod, for kube-scheduler to enforce: the node selector (a pod's own
// selector may add keys but not contradict the class), and for a topology either a spread
// constraint (DoNotSchedule) or a required pod affinity to the pods of the same service.
func Place(pod *corev1.Pod, class *storagepolicyv1.SchedulingClass) error {
	spec := class.Spec
	for k, v := range spec.NodeSelector {
		if have, ok := pod.Spec.NodeSelector[k]; ok && have != v {
			return field.Invalid(field.NewPath("spec", "nodeSelector").Key(k), have,
				fmt.Sprintf("the scheduling class %s places this namespace's pods on %s=%s", class.Name, k, v))
		}
		if pod.Spec.NodeSelector == nil {
			pod.Spec.NodeSelector = map[string]string{}
		}
		pod.Spec.NodeSelector[k] = v
	}
	t := spec.Topology
	if t == nil {
		return nil
	}
	group := &metav1.LabelSelector{}
	label := spec.GroupLabel
	if label == "" {
		label = "app.kubernetes.io/instance"
	}
	if v, ok := pod.Labels[label]; ok {
		group.MatchLabels = map[string]string{label: v}
	}
	switch t.Policy {
	case storagepolicyv1.TopologySpread:
		skew := int32(1)
		if t.MaxSkew != nil {
			skew = *t.MaxSkew
		}
		c := corev1.TopologySpreadConstraint{MaxSkew: skew, TopologyKey: t.Key, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: group}
		pod.Spec.TopologySpreadConstraints = appendOnce(pod.Spec.TopologySpreadConstraints, c)
	case storagepolicyv1.TopologyPack:
		if pod.Spec.Affinity == nil {
			pod.Spec.Affinity = &corev1.Affinity{}
		}
		if pod.Spec.Affinity.PodAffinity == nil {
			pod.Spec.Affinity.PodAffinity = &corev1.PodAffinity{}
		}
		a := pod.Spec.Affinity.PodAffinity
		// The first pod of a service matches no other and is placed anywhere (it matches its own
		// selector); the others follow it into its topology value.
		a.RequiredDuringSchedulingIgnoredDuringExecution = appendOnce(a.RequiredDuringSchedulingIgnoredDuringExecution,
			corev1.PodAffinityTerm{LabelSelector: group, TopologyKey: t.Key})
	}
	return nil
}

func appendOnce[T any](list []T, item T) []T {
	for _, have := range list {
		if equality.Semantic.DeepEqual(have, item) {
			return list
		}
	}
	return append(list, item)
}

// Hold keeps a pod whose class does not exist from being scheduled anywhere: a scheduling gate,
// and a label naming the class so that the storage-controller can say why in an event.
func Hold(pod *corev1.Pod, class string) {
	pod.Spec.SchedulingGates = appendOnce(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: storagepolicyv1.SchedulingGate})
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[storagepolicyv1.LabelMissingClass] = class
}
