// Package memory gives a Flotilla process its container's memory limit as the Go runtime's.
package memory

import (
	"math"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
)

// FromContainer sets the Go runtime's soft memory limit (GOMEMLIMIT, unless the environment sets
// it) to 90 % of the memory limit of the process's cgroup, its container's: near it the garbage
// collector works harder, instead of the kernel killing the pod while its heap still holds
// garbage. With no limit (outside a container) it sets none. It logs what it set.
func FromContainer(log logr.Logger) {
	limit, err := memlimit.Set()
	switch {
	case err != nil:
		log.Error(err, "The container's memory limit cannot be read: no Go memory limit")
	case limit < math.MaxInt64:
		log.Info("Go memory limit set from the container's", "GOMEMLIMIT", limit)
	}
}
