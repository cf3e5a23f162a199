package workloads

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name string, status corev1.PodStatus) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "redis", Image: "mirror/redis@sha256:1"}}},
		Status: status}
}

func waiting(reason, msg string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "redis", Image: "mirror/redis@sha256:1", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}}
}

func TestExplain(t *testing.T) {
	crashing := waiting("CrashLoopBackOff", "back-off 10s")
	crashing.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"none", nil, ""},
		{"starting: scheduled, pulling", []corev1.Pod{pod("a-0", waiting("ContainerCreating", ""))}, ""},
		{"running", []corev1.Pod{pod("a-0", corev1.PodStatus{Phase: corev1.PodRunning})}, ""},
		{"unschedulable", []corev1.Pod{pod("a-0", corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available: 1 Insufficient cpu."}}})},
			"pod a-0 cannot be scheduled: 0/1 nodes are available: 1 Insufficient cpu."},
		{"image", []corev1.Pod{pod("a-0", waiting("ImagePullBackOff", `Back-off pulling image "mirror/redis@sha256:1"`))},
			`pod a-0: image mirror/redis@sha256:1 cannot be pulled (Back-off pulling image "mirror/redis@sha256:1")`},
		{"crashing", []corev1.Pod{pod("a-0", crashing)}, "pod a-0: container redis keeps exiting (last exit code 1, Error)"},
		{"config", []corev1.Pod{pod("a-0", waiting("CreateContainerConfigError", `secret "a-auth" not found`))},
			`pod a-0: container redis cannot be created: secret "a-auth" not found`},
		{"failed", []corev1.Pod{pod("a-0", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."})},
			"pod a-0 failed: The node was low on resource: memory."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Explain(tc.pods); got != tc.want {
				t.Errorf("Explain = %q, want %q", got, tc.want)
			}
		})
	}
}

// Many failing pods: the first few by name, and how many more.
func TestExplainCountsTheRest(t *testing.T) {
	var pods []corev1.Pod
	for _, n := range []string{"a-4", "a-2", "a-0", "a-3", "a-1"} {
		pods = append(pods, pod(n, waiting("ErrImagePull", "not found")))
	}
	got := Explain(pods)
	if !strings.HasPrefix(got, "pod a-0: ") || !strings.Contains(got, "pod a-2: ") || strings.Contains(got, "pod a-3") ||
		!strings.HasSuffix(got, "; and 2 more pods") {
		t.Errorf("Explain = %q", got)
	}
}
