package apiserver

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The watch cache's size, on the apps apiserver's /metrics: what the history holds against its
// limits (--watch-history, --watch-history-bytes), and how many watches are open.
var (
	historyBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "flotilla", Subsystem: "apps", Name: "watch_history_bytes",
		Help: "Estimated bytes of the changes the apps apiserver keeps for watches and lists at an earlier resourceVersion, over all kinds.",
	})
	historyChanges = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "flotilla", Subsystem: "apps", Name: "watch_history_changes",
		Help: "Changes the apps apiserver keeps for watches and lists at an earlier resourceVersion, over all kinds.",
	})
	openWatches = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "flotilla", Subsystem: "apps", Name: "watches",
		Help: "Watches the apps apiserver is serving.",
	})
)

func init() {
	legacyregistry.MustRegister(historyBytes, historyChanges, openWatches)
}
