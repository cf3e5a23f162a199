package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// Scheduler is a kube-scheduler started by StartScheduler.
type Scheduler struct{ p *Process }

// Stop stops the scheduler.
func (s *Scheduler) Stop() { s.p.Stop() }

// SchedulerOptions configure StartScheduler.
type SchedulerOptions struct {
	Extenders []schedconfigv1.Extender
	// PercentageOfNodesToScore: 0 keeps kube-scheduler's adaptive default, which stops looking
	// for feasible nodes after about 40% of 1,000 (so an extender is shown only those).
	PercentageOfNodesToScore int32
	// MetricsPort, if set, serves kube-scheduler's /metrics and /metrics/resources (each pod's
	// effective requests, with its node) on 127.0.0.1:MetricsPort over HTTPS to anyone: for a
	// local metrics store (the usage-api's) to scrape without credentials.
	MetricsPort int
	// SchedulerName, if set, makes this kube-scheduler schedule only the pods that name it
	// (spec.schedulerName), beside any other.
	SchedulerName string
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
	if o.SchedulerName != "" {
		cfg["profiles"] = []map[string]any{{"schedulerName": o.SchedulerName}}
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
	serving := []string{"--secure-port=0"}
	if o.MetricsPort != 0 {
		serving = []string{fmt.Sprintf("--secure-port=%d", o.MetricsPort), "--bind-address=127.0.0.1", "--cert-dir=" + filepath.Join(dir, "kube-scheduler-certs"),
			"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
			"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/metrics/resources"}
	}
	if err := e.StartProcess("kube-scheduler", dir, nil, append([]string{"--config=" + path, "--v=1"}, serving...)...); err != nil {
		return nil, fmt.Errorf("kube-scheduler: %w", err)
	}
	return &Scheduler{p: e.procs[n]}, nil
}
