// Command usage-api serves usage.flotilla.dev/v1alpha1: UsageReports, what a tenant and its
// workloads used, answered from VictoriaMetrics. It is registered with kube-apiserver by an
// APIService and delegates authentication and authorization to it.
package main

import (
	"context"

	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/libs/runtime/aggregated"
	"github.com/flotilla-dev/flotilla/services/usage-api/internal/apiserver"
)

func main() {
	opts := apiserver.NewOptions()
	aggregated.Main(opts.AddFlags, func(ctx context.Context, kube *rest.Config) error {
		srv, err := apiserver.New(opts, kube)
		if err != nil {
			return err
		}
		return srv.Run(ctx)
	})
}
