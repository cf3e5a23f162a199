package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// VictoriaMetrics is a single-node VictoriaMetrics (built by libs/builder) started by
// StartVictoriaMetrics.
type VictoriaMetrics struct {
	// URL is its HTTP address, http://127.0.0.1:<port>.
	URL  string
	p    *Process
	dir  string
	args []string
}

// VictoriaMetricsOptions configure StartVictoriaMetrics.
type VictoriaMetricsOptions struct {
	// ScrapeConfig, if set, is a Prometheus scrape configuration (YAML) it scrapes.
	ScrapeConfig string
	// Port, if set, is the port to listen on (a restart keeps it); else a free one.
	Port int
}

// StartVictoriaMetrics runs VictoriaMetrics with its data in <dir>/victoria-metrics-data,
// logging to <dir>/victoria-metrics.log, with the flags a test needs: all history kept, no
// latency offset (the newest samples are visible at once) and no response cache (a test imports
// history behind it). It returns once VictoriaMetrics answers.
func StartVictoriaMetrics(dir string, o VictoriaMetricsOptions) (*VictoriaMetrics, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	port := o.Port
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	args := []string{
		"-storageDataPath=" + filepath.Join(dir, "victoria-metrics-data"),
		fmt.Sprintf("-httpListenAddr=127.0.0.1:%d", port),
		"-retentionPeriod=100y", "-search.latencyOffset=0s", "-search.disableCache",
		"-loggerLevel=WARN",
	}
	if o.ScrapeConfig != "" {
		path := filepath.Join(dir, "victoria-metrics-scrape.yaml")
		if err := os.WriteFile(path, []byte(o.ScrapeConfig), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "-promscrape.config="+path)
	}
	vm := &VictoriaMetrics{URL: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir, args: append([]string{filepath.Join(bin, "victoria-metrics")}, args...)}
	return vm, vm.start()
}

func (vm *VictoriaMetrics) start() error {
	p, err := StartLogged(vm.args[0], filepath.Join(vm.dir, "victoria-metrics.log"), nil, vm.args[1:]...)
	if err != nil {
		return err
	}
	vm.p = p
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		resp, err := http.Get(vm.URL + "/health")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			vm.Stop()
			return fmt.Errorf("victoria-metrics did not answer at %s (see %s)", vm.URL, p.log.Name())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops VictoriaMetrics; its data stays.
func (vm *VictoriaMetrics) Stop() { vm.p.Stop() }

// Restart stops and starts it again on the same port and data.
func (vm *VictoriaMetrics) Restart() error {
	vm.Stop()
	return vm.start()
}

// Import writes samples in Prometheus text format with timestamps (milliseconds), as
// /api/v1/import/prometheus takes them, and flushes them so that queries see them at once.
func (vm *VictoriaMetrics) Import(text string) error {
	resp, err := http.Post(vm.URL+"/api/v1/import/prometheus", "text/plain", strings.NewReader(text))
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("import: %s", resp.Status)
	}
	resp, err = http.Get(vm.URL + "/internal/force_flush")
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}
