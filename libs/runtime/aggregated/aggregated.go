// Package aggregated is how Flotilla's aggregated API servers (the apps API, the usage API) are
// served and started: HTTPS on 8443 (a self-signed certificate unless given one), authentication
// and authorization delegated to kube-apiserver, and the same command main.
package aggregated

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/memory"
)

// Options are the serving and delegation flags every aggregated server takes.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
}

// NewOptions returns the defaults: port 8443, certificate pair "apiserver", delegated
// authentication and authorization.
func NewOptions() Options {
	o := Options{
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  genericoptions.NewDelegatingAuthorizationOptions(),
	}
	o.SecureServing.BindPort = 8443
	o.SecureServing.ServerCert.PairName = "apiserver"
	return o
}

// AddFlags registers the options' flags.
func (o Options) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
}

// Config is a generic server's configuration with the options applied: serving (with a
// self-signed certificate for localhost when none is given), delegated authentication and
// authorization, the build's version.
func (o Options) Config(codecs serializer.CodecFactory) (*genericapiserver.RecommendedConfig, error) {
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}
	cfg := genericapiserver.NewRecommendedConfig(codecs)
	cfg.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	if err := o.SecureServing.ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return nil, err
	}
	if err := o.Authentication.ApplyTo(&cfg.Authentication, cfg.SecureServing, nil); err != nil {
		return nil, err
	}
	if err := o.Authorization.ApplyTo(&cfg.Authorization); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Main is an aggregated server command's main: addFlags registers the server's flags beside
// klog's (-v) and --kubeconfig, and run serves with the kubeconfig's configuration until a signal
// ends it. A failure is logged and exits 1.
func Main(addFlags func(*pflag.FlagSet), run func(ctx context.Context, kube *rest.Config) error) {
	addFlags(pflag.CommandLine)
	klog.InitFlags(flag.CommandLine)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine) // --kubeconfig, -v
	pflag.Parse()

	ctrl.SetLogger(klog.NewKlogr()) // controller-runtime's caches log with the server
	memory.FromContainer(klog.NewKlogr())
	ctx := ctrl.SetupSignalHandler()
	cfg, err := ctrl.GetConfig()
	if err != nil {
		klog.ErrorS(err, "no kubeconfig")
		os.Exit(1)
	}
	if err := run(ctx, cfg); err != nil {
		klog.ErrorS(err, "apiserver stopped")
		os.Exit(1)
	}
}
