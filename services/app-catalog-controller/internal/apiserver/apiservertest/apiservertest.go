// Package apiservertest runs the apps apiserver in-process against a testenv control plane and
// registers it with kube-apiserver's aggregator, for integration tests and benchmarks.
package apiservertest

import (
	"context"
	"fmt"
	"net"
	"os"

	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/services/app-catalog-controller/internal/apiserver"
)

// Namespace holds the ExternalName Service the APIService points at.
const Namespace = "flotilla-system"

// Start serves apps.flotilla.dev on a free loopback port until ctx ends, registers the
// APIService and waits until kube-apiserver reports it Available. It returns the port. The
// server authenticates and authorizes through kube-apiserver with an admin kubeconfig written
// to dir.
func Start(ctx context.Context, env *testenv.Env, dir string) (int, error) {
	return StartWith(ctx, env, dir, env.Config)
}

// StartWith is Start with the configuration the server reaches kube-apiserver with, so that a
// test can act on its connections (delay its watches, say).
func StartWith(ctx context.Context, env *testenv.Env, dir string, kube *rest.Config) (int, error) {
	kubeconfig, err := env.AdminKubeconfig("flotilla-apps", dir)
	if err != nil {
		return 0, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	opts := apiserver.NewOptions()
	opts.SecureServing.Listener = l
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	opts.SecureServing.BindPort = port
	opts.SecureServing.ServerCert.CertDirectory = dir
	opts.Authentication.RemoteKubeConfigFile = kubeconfig
	opts.Authorization.RemoteKubeConfigFile = kubeconfig
	srv, err := apiserver.New(opts, kube)
	if err != nil {
		return 0, err
	}
	go func() {
		if err := srv.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "apps apiserver:", err)
		}
	}()
	if err := testenv.WaitServing(ctx, port); err != nil {
		return 0, err
	}
	if err := testenv.RegisterAPIService(ctx, env.Client, Namespace, "apps.flotilla.dev", "v1alpha1", port); err != nil {
		return 0, err
	}
	return port, testenv.WaitAPIServiceAvailable(ctx, env.Client, apiserver.APIServiceName)
}
