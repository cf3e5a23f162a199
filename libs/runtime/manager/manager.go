package manager

import (
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/flotilla-dev/flotilla/libs/runtime/memory"
)

// Options are the flags every service accepts.
type Options struct {
	// Name identifies the service: leader-election lock, field owner, event source.
	Name string

	MetricsAddr             string
	ProbeAddr               string
	PprofAddr               string
	LeaderElect             bool
	LeaderElectionNamespace string
	WebhookPort             int
	WebhookCertDir          string
	Zap                     zap.Options
}

// BindFlags registers the common flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "", "Address net/http/pprof binds to, for profiling; empty disables it.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; defaults to the pod's namespace.")
	// 0 by default: a webhook server that serves nothing would never start, and the readiness
	// probe waits for it. A service with webhooks is given its port (by its chart, say).
	fs.IntVar(&o.WebhookPort, "webhook-port", 0, "Port the admission webhook server listens on; 0 (the default) disables it.")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", "", "Directory holding tls.crt and tls.key for the webhook server.")
	o.Zap.BindFlags(fs)
}

// New sets the global logger and returns a manager with probes configured. customize, when not
// nil, may adjust the options (cache selectors, for instance) before the manager is built.
func New(o Options, scheme *runtime.Scheme, customize func(*ctrl.Options)) (ctrl.Manager, error) {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.Zap)))
	memory.FromContainer(ctrl.Log.WithName("setup"))
	opts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.Name + ".flotilla.dev",
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       ptr.To(30 * time.Second),
	}
	if o.WebhookPort != 0 {
		opts.WebhookServer = webhook.NewServer(webhook.Options{Port: o.WebhookPort, CertDir: o.WebhookCertDir})
	}
	if customize != nil {
		customize(&opts)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	ready := healthz.Ping
	if opts.WebhookServer != nil {
		ready = opts.WebhookServer.StartedChecker()
	}
	if err := mgr.AddReadyzCheck("ready", ready); err != nil {
		return nil, err
	}
	return mgr, nil
}
