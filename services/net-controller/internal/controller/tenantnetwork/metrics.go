package tenantnetwork

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// transactions counts the OVN northbound transactions sent for TenantNetworks; it stays flat
	// while every network is converged.
	transactions = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "net_controller", Subsystem: "ovn", Name: "transactions_total",
		Help: "OVN northbound transactions sent for TenantNetworks.",
	})
	// restored counts rows of converged networks that someone else removed or altered and the
	// controller put back.
	restored = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "net_controller", Subsystem: "ovn", Name: "rows_restored_total",
		Help: "OVN northbound rows of converged TenantNetworks restored after someone else removed or altered them.",
	})
)

func init() { metrics.Registry.MustRegister(transactions, restored) }

// Restored is the value of the restored-rows counter, for tests.
func Restored() float64 { return counterValue(restored) }

// Transactions is the value of the transactions counter, for tests.
func Transactions() float64 { return counterValue(transactions) }

func counterValue(c prometheus.Counter) float64 {
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
