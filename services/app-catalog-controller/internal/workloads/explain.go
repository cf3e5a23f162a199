// Package workloads tells, in words a tenant understands, why an app's pods cannot start: the
// scheduler found no node for them, an image cannot be pulled, a container keeps crashing or
// cannot be created. A pod still starting (scheduled, pulling, waiting for its volume) is not a
// failure. Pure: the reconciler reads the pods and writes what Explain returns.
package workloads

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
)

// MaxReported is how many failing pods a message names; the rest are counted.
const MaxReported = 3

// Explain returns why pods cannot start, one sentence per failing pod ordered by name, or "" when
// none is failing.
func Explain(pods []corev1.Pod) string {
	var failing []string
	for i := range pods {
		if why := explain(&pods[i]); why != "" {
			failing = append(failing, why)
		}
	}
	return summarize(failing, "pods")
}

// summarize joins sentences in order of their text, the first MaxReported of them, and counts
// the rest ("; and 2 more pods"); "" for none.
func summarize(sentences []string, what string) string {
	slices.Sort(sentences)
	msg := strings.Join(sentences[:min(len(sentences), MaxReported)], "; ")
	if more := len(sentences) - MaxReported; more > 0 {
		msg += strings.TrimSuffix(fmt.Sprintf("; and %d more %s", more, what), " ")
	}
	return msg
}

// explain is why one pod cannot start, or "".
func explain(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return ""
	}
	name := "pod " + p.Name
	if p.Status.Phase == corev1.PodFailed {
		return fmt.Sprintf("%s failed: %s", name, firstOf(p.Status.Message, p.Status.Reason, "its containers exited"))
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return fmt.Sprintf("%s cannot be scheduled: %s", name, firstOf(c.Message, "no node fits it"))
		}
	}
	images := map[string]string{}
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		images[c.Name] = c.Image
	}
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		w := s.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			return fmt.Sprintf("%s: image %s cannot be pulled (%s)", name, firstOf(images[s.Name], s.Image), firstOf(w.Message, w.Reason))
		case "CrashLoopBackOff":
			return fmt.Sprintf("%s: container %s keeps exiting%s", name, s.Name, lastExit(s.LastTerminationState.Terminated))
		case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
			return fmt.Sprintf("%s: container %s cannot be created: %s", name, s.Name, firstOf(w.Message, w.Reason))
		}
	}
	return ""
}

// Latest is the most recent of events (by its last occurrence), or nil.
func Latest(events []eventsv1.Event) *eventsv1.Event {
	var latest *eventsv1.Event
	for i := range events {
		if latest == nil || when(&events[i]).After(when(latest)) {
			latest = &events[i]
		}
	}
	return latest
}

// when an event last happened: its series' last observation, else its time.
func when(e *eventsv1.Event) time.Time {
	if e.Series != nil {
		return e.Series.LastObservedTime.Time
	}
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.DeprecatedLastTimestamp.Time
}

// lastExit describes how a container last ended.
func lastExit(t *corev1.ContainerStateTerminated) string {
	if t == nil {
		return ""
	}
	s := fmt.Sprintf(" (last exit code %d", t.ExitCode)
	if t.Reason != "" {
		s += ", " + t.Reason
	}
	return s + ")"
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
