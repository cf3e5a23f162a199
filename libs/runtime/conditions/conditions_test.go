package conditions

import (
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
