package catalog

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// Compiler caches Compile by definition UID and generation: resolving the catalog compiles
// every definition, and the apiserver and the controller resolve it on every change. The zero
// value is ready to use; it is safe for concurrent use.
type Compiler struct {
	mu    sync.Mutex
	cache map[types.UID]compiled
}

type compiled struct {
	generation int64
	kind       *Kind
	err        error
}

// Compile returns the cached compilation of def's generation, compiling it when missing.
func (c *Compiler) Compile(def *catalogv1.ApplicationDefinition) (*Kind, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hit, ok := c.cache[def.UID]; ok && hit.generation == def.Generation {
		return hit.kind, hit.err
	}
	k, err := Compile(def)
	if c.cache == nil {
		c.cache = map[types.UID]compiled{}
	}
	c.cache[def.UID] = compiled{generation: def.Generation, kind: k, err: err}
	return k, err
}

// Retain forgets the compilations of definitions not in defs (deleted ones).
func (c *Compiler) Retain(defs []catalogv1.ApplicationDefinition) {
	live := make(map[types.UID]bool, len(defs))
	for _, d := range defs {
		live[d.UID] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.cache {
		if !live[uid] {
			delete(c.cache, uid)
		}
	}
}
