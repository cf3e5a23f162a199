package conditions

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
)

// Setter is an object whose conditions can be read and written.
type Setter = fmeta.ObjectWithConditions

// Set sets a condition on obj, stamped with obj's generation. The transition time only moves when
// the status changes, so setting the same condition twice is not a change.
func Set(obj Setter, condType string, status metav1.ConditionStatus, reason, message string) {
	conds := obj.GetConditions()
	meta.SetStatusCondition(&conds, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: obj.GetGeneration(),
	})
	obj.SetConditions(conds)
}

// MarkTrue sets condType to True.
func MarkTrue(obj Setter, condType, reason, message string) {
	Set(obj, condType, metav1.ConditionTrue, reason, message)
}

// MarkFalse sets condType to False.
func MarkFalse(obj Setter, condType, reason, message string) {
	Set(obj, condType, metav1.ConditionFalse, reason, message)
}

// Delete removes condType.
func Delete(obj Setter, condType string) {
	conds := obj.GetConditions()
	meta.RemoveStatusCondition(&conds, condType)
	obj.SetConditions(conds)
}

// Get returns condType, or nil.
func Get(obj Setter, condType string) *metav1.Condition {
	return meta.FindStatusCondition(obj.GetConditions(), condType)
}

// IsTrue reports whether condType is True.
func IsTrue(obj Setter, condType string) bool {
	return meta.IsStatusConditionTrue(obj.GetConditions(), condType)
}

// IsReady reports whether obj is Ready for its current generation: what a consumer of another
// service's object must check before relying on it.
func IsReady(obj Setter) bool {
	c := Get(obj, fmeta.ReadyCondition)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == obj.GetGeneration() &&
		obj.GetObservedGeneration() == obj.GetGeneration()
}

// ReadyFlipped returns after's Ready condition when it deserves an event: its status differs from
// before's, or it is the object's first Ready condition and it is True (a new object's first
// Ready is news; a new object that is still progressing is not).
func ReadyFlipped(before, after Setter) *metav1.Condition {
	was, now := Get(before, fmeta.ReadyCondition), Get(after, fmeta.ReadyCondition)
	switch {
	case now == nil:
		return nil
	case was == nil:
		if now.Status == metav1.ConditionTrue {
			return now
		}
		return nil
	case was.Status == now.Status:
		return nil
	}
	return now
}

// Stall describes why a reconcile cannot progress without a human changing something: the spec
// (the message names the field), or an object in the way. It is an error, so that the reconcile
// can end with it (status.Stalled).
type Stall struct {
	Reason  string
	Message string
}

// Error is the stall's reason and message.
func (s Stall) Error() string { return s.Reason + ": " + s.Message }

// Summarize derives the kstatus conditions from the domain conditions (in order of importance)
// and, when stall is non-nil, marks the object Stalled:
//
//   - stalled: Stalled=True, Ready=False with the stall's reason, no Reconciling;
//   - every domain condition True for the object's current generation: Ready=True, no
//     Reconciling, no Stalled;
//   - otherwise: Ready=False and Reconciling=True carrying the first domain condition that is not
//     True for the current generation. A missing one, or one set for an earlier generation, is
//     not yet evaluated for this spec: a reconcile that failed before it evaluated a condition
//     again leaves that condition as an earlier spec had it, which says nothing about this one.
//
// observedGeneration is advanced only when the object is Ready or Stalled, so kstatus reports
// "in progress" until the current generation has been fully acted upon.
func Summarize(obj Setter, domain []string, stall *Stall) {
	if stall != nil {
		MarkTrue(obj, fmeta.StalledCondition, stall.Reason, stall.Message)
		MarkFalse(obj, fmeta.ReadyCondition, stall.Reason, stall.Message)
		Delete(obj, fmeta.ReconcilingCondition)
		obj.SetObservedGeneration(obj.GetGeneration())
		return
	}
	Delete(obj, fmeta.StalledCondition)
	for _, t := range domain {
		c := Get(obj, t)
		if c == nil || c.ObservedGeneration != obj.GetGeneration() {
			msg := fmt.Sprintf("%s not yet evaluated for generation %d", t, obj.GetGeneration())
			MarkFalse(obj, fmeta.ReadyCondition, fmeta.ProgressingReason, msg)
			MarkTrue(obj, fmeta.ReconcilingCondition, fmeta.ProgressingReason, msg)
			return
		}
		if c.Status != metav1.ConditionTrue {
			MarkFalse(obj, fmeta.ReadyCondition, c.Reason, c.Message)
			MarkTrue(obj, fmeta.ReconcilingCondition, c.Reason, c.Message)
			return
		}
	}
	MarkTrue(obj, fmeta.ReadyCondition, fmeta.SucceededReason, "Reconciliation succeeded")
	Delete(obj, fmeta.ReconcilingCondition)
	obj.SetObservedGeneration(obj.GetGeneration())
}

// Unfinished keeps a reconcile that failed with err from claiming the generation it did not
// finish: Ready=True stays only where it was already True for this generation before the
// reconcile (before is the object as read), that is, an earlier reconcile of the same generation
// finished it. Otherwise Ready is False and Reconciling True with the error, and
// observedGeneration stays as it was. Call it after Summarize.
func Unfinished(obj, before Setter, err error) {
	if !IsTrue(obj, fmeta.ReadyCondition) || IsReady(before) {
		return
	}
	msg := fmt.Sprintf("Reconciliation of generation %d failed: %v", obj.GetGeneration(), err)
	MarkFalse(obj, fmeta.ReadyCondition, fmeta.ProgressingReason, msg)
	MarkTrue(obj, fmeta.ReconcilingCondition, fmeta.ProgressingReason, msg)
	obj.SetObservedGeneration(before.GetObservedGeneration())
}

// MarkDeleting records that the object is being torn down and what it waits for.
func MarkDeleting(obj Setter, message string) {
	Delete(obj, fmeta.StalledCondition)
	MarkFalse(obj, fmeta.ReadyCondition, fmeta.DeletingReason, message)
	MarkTrue(obj, fmeta.ReconcilingCondition, fmeta.DeletingReason, message)
}
