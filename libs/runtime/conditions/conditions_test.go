package conditions

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fmeta "github.com/flotilla-dev/flotilla/libs/apis/meta"
)

// object is a minimal ObjectWithConditions for the tests.
type object struct {
	metav1.ObjectMeta
	conds    []metav1.Condition
	observed int64
}

func (o *object) GetConditions() []metav1.Condition  { return o.conds }
func (o *object) SetConditions(c []metav1.Condition) { o.conds = c }
func (o *object) GetObservedGeneration() int64       { return o.observed }
func (o *object) SetObservedGeneration(g int64)      { o.observed = g }

func TestSummarize(t *testing.T) {
	o := &object{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	MarkTrue(o, "A", "Ok", "")
	MarkFalse(o, "B", "Waiting", "waiting for B")
	Summarize(o, []string{"A", "B"}, nil)
	if r := Get(o, fmeta.ReadyCondition); r.Status != metav1.ConditionFalse || r.Reason != "Waiting" {
		t.Errorf("Ready = %+v, want False/Waiting", r)
	}
	if !IsTrue(o, fmeta.ReconcilingCondition) || o.observed != 0 {
		t.Errorf("want Reconciling and no observedGeneration while in progress, got %+v %d", o.conds, o.observed)
	}

	MarkTrue(o, "B", "Ok", "")
	Summarize(o, []string{"A", "B"}, nil)
	if !IsReady(o) || Get(o, fmeta.ReconcilingCondition) != nil {
		t.Errorf("want Ready for generation 2 without Reconciling, got %+v %d", o.conds, o.observed)
	}

	Summarize(o, []string{"A", "B"}, &Stall{Reason: "Bad", Message: "fix the spec"})
	if !IsTrue(o, fmeta.StalledCondition) || IsTrue(o, fmeta.ReadyCondition) || Get(o, fmeta.ReconcilingCondition) != nil {
		t.Errorf("want Stalled, not Ready, not Reconciling, got %+v", o.conds)
	}
}

// A domain condition set for an earlier generation says nothing about the current spec: it is not
// yet evaluated, so the object is not Ready for the new generation and its observedGeneration stays.
func TestSummarizeIgnoresConditionsOfAnOlderGeneration(t *testing.T) {
	o := &object{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	MarkTrue(o, "A", "Ok", "")
	MarkTrue(o, "B", "Ok", "")
	Summarize(o, []string{"A", "B"}, nil)
	if !IsReady(o) {
		t.Fatalf("generation 1: not Ready: %+v", o.conds)
	}

	o.Generation = 2 // the spec changed; only A was evaluated again
	MarkTrue(o, "A", "Ok", "")
	Summarize(o, []string{"A", "B"}, nil)
	if r := Get(o, fmeta.ReadyCondition); r.Status == metav1.ConditionTrue || r.ObservedGeneration != 2 {
		t.Errorf("B of generation 1: Ready = %+v, want not True, for generation 2", r)
	}
	if !IsTrue(o, fmeta.ReconcilingCondition) || o.observed != 1 {
		t.Errorf("B of generation 1: want Reconciling and observedGeneration 1, got %+v %d", o.conds, o.observed)
	}

	MarkTrue(o, "B", "Ok", "")
	Summarize(o, []string{"A", "B"}, nil)
	if !IsReady(o) || o.observed != 2 {
		t.Errorf("both of generation 2: want Ready for generation 2, got %+v %d", o.conds, o.observed)
	}
}

// A failed reconcile keeps Ready=True only where an earlier reconcile of the same generation
// finished it.
func TestUnfinished(t *testing.T) {
	failed := errors.New("listing: connection refused")
	o := &object{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	MarkTrue(o, "A", "Ok", "")
	Summarize(o, []string{"A"}, nil)
	finished := &object{ObjectMeta: o.ObjectMeta, conds: slices.Clone(o.conds), observed: o.observed}

	o.Generation = 2
	before := &object{ObjectMeta: o.ObjectMeta, conds: slices.Clone(o.conds), observed: o.observed}
	MarkTrue(o, "A", "Ok", "")
	Summarize(o, []string{"A"}, nil)
	Unfinished(o, before, failed)
	if IsTrue(o, fmeta.ReadyCondition) || !IsTrue(o, fmeta.ReconcilingCondition) || o.observed != 1 {
		t.Errorf("generation 2 failed: want not Ready, Reconciling, observedGeneration 1, got %+v %d", o.conds, o.observed)
	}

	// Generation 1 was finished before this reconcile failed: Ready stays.
	again := &object{ObjectMeta: finished.ObjectMeta, conds: slices.Clone(finished.conds), observed: finished.observed}
	Summarize(again, []string{"A"}, nil)
	Unfinished(again, finished, failed)
	if !IsReady(again) {
		t.Errorf("generation 1 finished, then a reconcile failed: want Ready, got %+v %d", again.conds, again.observed)
	}
}

func TestReadyFlipped(t *testing.T) {
	withReady := func(s metav1.ConditionStatus) *object {
		o := &object{}
		if s != "" {
			Set(o, fmeta.ReadyCondition, s, "R", "m")
		}
		return o
	}
	for _, tc := range []struct {
		before, after metav1.ConditionStatus
		flipped       bool
	}{
		{"", metav1.ConditionTrue, true},   // a new object's first Ready is news
		{"", metav1.ConditionFalse, false}, // a new object still progressing is not
		{"", "", false},
		{metav1.ConditionTrue, metav1.ConditionTrue, false},
		{metav1.ConditionTrue, metav1.ConditionFalse, true},
		{metav1.ConditionFalse, metav1.ConditionTrue, true},
	} {
		if got := ReadyFlipped(withReady(tc.before), withReady(tc.after)) != nil; got != tc.flipped {
			t.Errorf("%q -> %q: flipped = %v, want %v", tc.before, tc.after, got, tc.flipped)
		}
	}
}
