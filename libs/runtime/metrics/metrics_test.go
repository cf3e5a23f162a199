package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/libs/runtime/internal/widget"
	"github.com/flotilla-dev/flotilla/libs/testenv"
)

// The collector counts what the API holds, by condition and status, and the objects whose status
// lags their spec.
func TestStatusCollector(t *testing.T) {
	dir, err := widget.CRDDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(testenv.Options{Scheme: widget.Scheme(), CRDDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	k8s := env.Client

	// ready: Ready=True, current; failing: Ready=False and Stalled=True; fresh: no status yet (stale).
	for name, conds := range map[string][]metav1.Condition{
		"ready":   {{Type: "Ready", Status: metav1.ConditionTrue}},
		"failing": {{Type: "Ready", Status: metav1.ConditionFalse}, {Type: "Stalled", Status: metav1.ConditionTrue}},
		"fresh":   nil,
	} {
		w := &widget.Widget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: map[string]string{"a": "b"}}
		if err := k8s.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		if conds == nil {
			continue
		}
		for i := range conds {
			conds[i].Reason, conds[i].LastTransitionTime = "Test", metav1.Now()
		}
		w.Status.Conditions, w.Status.ObservedGeneration = conds, w.Generation
		if err := k8s.Status().Update(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	c := &StatusCollector{Reader: k8s, Kinds: []Kind{{Name: "Widget", List: func() client.ObjectList { return &widget.WidgetList{} }}}}
	want := `
# HELP flotilla_objects Objects of a kind by the status of a kstatus condition (Ready, Reconciling, Stalled); Unknown counts objects without it.
# TYPE flotilla_objects gauge
flotilla_objects{condition="Ready",kind="Widget",status="False"} 1
flotilla_objects{condition="Ready",kind="Widget",status="True"} 1
flotilla_objects{condition="Ready",kind="Widget",status="Unknown"} 1
flotilla_objects{condition="Reconciling",kind="Widget",status="False"} 0
flotilla_objects{condition="Reconciling",kind="Widget",status="True"} 0
flotilla_objects{condition="Reconciling",kind="Widget",status="Unknown"} 3
flotilla_objects{condition="Stalled",kind="Widget",status="False"} 0
flotilla_objects{condition="Stalled",kind="Widget",status="True"} 1
flotilla_objects{condition="Stalled",kind="Widget",status="Unknown"} 2
# HELP flotilla_objects_stale Objects of a kind whose status is behind their spec (status.observedGeneration < metadata.generation).
# TYPE flotilla_objects_stale gauge
flotilla_objects_stale{kind="Widget"} 1
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
