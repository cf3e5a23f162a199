package workloads

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// NotReady says what of objects (a release's workloads, judged by kstatus, and its objects of the
// kinds checks judge) is not ready yet, one sentence per object ordered by name, or "" once all
// of it is.
func NotReady(objs []*unstructured.Unstructured, checks *Checks) string {
	var waiting []string
	for _, o := range objs {
		if o.GetDeletionTimestamp() != nil {
			continue
		}
		if why := checks.notReady(o); why != "" {
			waiting = append(waiting, fmt.Sprintf("%s %s: %s", o.GetKind(), o.GetName(), why))
		}
	}
	return summarize(waiting, "")
}

// Checks are a definition's health checks, compiled: CEL expressions per kind, with the
// semantics of Flux's healthCheckExprs (RFC 0009): an object whose status.observedGeneration is
// behind is in progress; else inProgress, failed and current are tried in that order, the first
// true one decides; none true is in progress.
type Checks struct {
	byKind map[schema.GroupKind]*check
}

type check struct {
	gvk                         schema.GroupVersionKind
	inProgress, failed, current cel.Program
}

// Compile compiles a definition's health checks; an error names the one that does not compile.
func Compile(hcs []kustomize.CustomHealthCheck) (*Checks, error) {
	env, err := cel.NewEnv(cel.OptionalTypes(), ext.Strings())
	if err != nil {
		return nil, err
	}
	program := func(expr string) (cel.Program, error) {
		if expr == "" {
			return nil, nil
		}
		ast, iss := env.Parse(expr)
		if iss.Err() != nil {
			return nil, iss.Err()
		}
		return env.Program(ast)
	}
	c := &Checks{byKind: map[schema.GroupKind]*check{}}
	for i, hc := range hcs {
		k := check{gvk: schema.FromAPIVersionAndKind(hc.APIVersion, hc.Kind)}
		for _, e := range []struct {
			p    *cel.Program
			expr string
		}{{&k.inProgress, hc.InProgress}, {&k.failed, hc.Failed}, {&k.current, hc.Current}} {
			if *e.p, err = program(e.expr); err != nil {
				return nil, fmt.Errorf("readiness.healthChecks[%d] (%s): %w", i, hc.Kind, err)
			}
		}
		c.byKind[k.gvk.GroupKind()] = &k
	}
	return c, nil
}

// Kinds are the kinds the checks judge, in the versions the definition names.
func (c *Checks) Kinds() []schema.GroupVersionKind {
	kinds := make([]schema.GroupVersionKind, 0, len(c.byKind))
	for _, k := range c.byKind {
		kinds = append(kinds, k.gvk)
	}
	slices.SortFunc(kinds, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.String(), b.String()) })
	return kinds
}

// notReady says why o is not ready, or "": by its kind's check if it has one, else by kstatus.
func (c *Checks) notReady(o *unstructured.Unstructured) string {
	if k := c.byKind[o.GroupVersionKind().GroupKind()]; k != nil {
		return k.notReady(o)
	}
	res, err := kstatus.Compute(o)
	switch {
	case err != nil:
		return err.Error()
	case res.Status == kstatus.CurrentStatus:
		return ""
	case res.Message != "":
		return res.Message
	}
	return strings.ToLower(res.Status.String())
}

func (k *check) notReady(o *unstructured.Unstructured) string {
	observed, found, err := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
	if err == nil && found && observed != o.GetGeneration() {
		return "its controller has not acted on its latest generation yet"
	}
	for _, e := range []struct {
		p       cel.Program
		verdict string
	}{{k.inProgress, "in progress"}, {k.failed, "failed"}, {k.current, ""}} {
		if e.p == nil {
			continue
		}
		// A field the expression reads that the object does not have yet (no status at first)
		// is an error here: the object is not ready yet.
		out, _, err := e.p.Eval(o.Object)
		if err != nil {
			return "not ready yet"
		}
		if out == types.True {
			return e.verdict
		}
	}
	return "not ready yet"
}
