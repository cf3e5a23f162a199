package catalog

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// Creation times have a resolution of one second: a definition created in the same second as one
// already served must not take its names from it (its apps would vanish from every tenant).
func TestResolveKeepsTheServedDefinitionAgainstOneOfTheSameSecond(t *testing.T) {
	second := metav1.NewTime(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	postgres := definition(pgSchema)
	postgres.CreationTimestamp = second
	clone := definition(pgSchema)
	clone.Name, clone.Spec.Names = "pgclones", catalogv1.Names{Kind: "Pgclone", Plural: "pgclones", ShortNames: []string{"pg"}}
	clone.CreationTimestamp = second

	winner := func() string {
		t.Helper()
		c := Resolve([]*catalogv1.ApplicationDefinition{postgres, clone}, Compile)
		if len(c.Kinds) != 1 || len(c.Rejected) != 1 {
			t.Fatalf("served %v, rejected %v: want one of each", c.Kinds, c.Rejected)
		}
		for plural := range c.Kinds {
			return plural
		}
		return ""
	}
	// Neither served yet: the first by name, the same in every reconcile.
	if got := winner(); got != "pgclones" {
		t.Errorf("two new definitions of the same second: %s served, want pgclones (first by name)", got)
	}
	// Postgres was judged served before the clone came: it keeps its names.
	postgres.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: catalogv1.ServedReason, ObservedGeneration: 1}}
	postgres.Generation = 2 // an edit not yet judged does not lose it its place
	if got := winner(); got != "postgreses" {
		t.Errorf("a definition served before one of the same second came: %s served, want postgreses", got)
	}
	// An older definition wins whatever the newer one's status says.
	clone.CreationTimestamp = metav1.NewTime(second.Add(-time.Second))
	if got := winner(); got != "pgclones" {
		t.Errorf("an older definition: %s served, want pgclones", got)
	}
}
