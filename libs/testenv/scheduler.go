package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// Scheduler is a kube-scheduler started by StartScheduler.
type Scheduler struct{ p *process }

// Stop stops the scheduler.
func (s *Scheduler) Stop() { s.p.stop() }

// SchedulerOptions configure StartScheduler.
type SchedulerOptions struct {
	Extenders []schedconfigv1.Extender
	// PercentageOfNodesToScore: 0 keeps kube-scheduler's adaptive default, which stops looking
	// for feasible nodes after about 40% of 1,000 (so an extender is shown only those).
	PercentageOfNodesToScore int32
}

// StartScheduler runs the real kube-scheduler (built by libs/builder) against the control plane,
// with its default profile, logging to <dir>/kube-scheduler.log. Nodes must be created by hand (no
// kubelet runs): a Node with allocatable capacity and no taints is schedulable.
func (e *Env) StartScheduler(dir string, o SchedulerOptions) (*Scheduler, error) {
	kubeconfig, err := e.AdminKubeconfig("kube-scheduler", dir)
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig, "qps": 500, "burst": 1000},
		"leaderElection":   map[string]any{"leaderElect": false},
		"extenders":        o.Extenders,
	}
	if o.PercentageOfNodesToScore != 0 {
		cfg["percentageOfNodesToScore"] = o.PercentageOfNodesToScore
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kube-scheduler.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return nil, err
	}
	n := len(e.procs)
	if err := e.StartProcess("kube-scheduler", dir, nil, "--config="+path, "--secure-port=0", "--v=1"); err != nil {
		return nil, fmt.Errorf("kube-scheduler: %w", err)
	}
	return &Scheduler{p: e.procs[n]}, nil
}
