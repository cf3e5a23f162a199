package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync/atomic"
)

// ChartRepository is a Helm chart repository served on a loopback port: an index.yaml and the
// packaged charts, as Flux's HelmRepository expects.
type ChartRepository struct {
	URL    string
	server *http.Server
	// auth, when set, is the user and password every request must carry (HTTP basic auth).
	auth atomic.Pointer[[2]string]
}

// RequireBasicAuth makes the repository private: from now on every request must carry user and
// password, or is answered 401.
func (r *ChartRepository) RequireBasicAuth(user, password string) {
	r.auth.Store(&[2]string{user, password})
}

func (r *ChartRepository) serve(files http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if want := r.auth.Load(); want != nil {
			user, password, ok := req.BasicAuth()
			if !ok || user != want[0] || password != want[1] {
				w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		files.ServeHTTP(w, req)
	})
}

// ServeCharts packages each chart directory with the builder's helm into dir, indexes them and
// serves dir on 127.0.0.1 (port 0 picks a free one).
func ServeCharts(dir string, port int, charts ...string) (*ChartRepository, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	helm := filepath.Join(bin, "helm")
	for _, c := range charts {
		if out, err := exec.Command(helm, "package", c, "--destination", dir).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("helm package %s: %w: %s", c, err, out)
		}
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	url := "http://" + l.Addr().String()
	if out, err := exec.Command(helm, "repo", "index", dir, "--url", url).CombinedOutput(); err != nil {
		return nil, errors.Join(fmt.Errorf("helm repo index: %w: %s", err, out), l.Close())
	}
	r := &ChartRepository{URL: url}
	r.server = &http.Server{Handler: r.serve(http.FileServer(http.Dir(dir)))}
	go func() { _ = r.server.Serve(l) }()
	return r, nil
}

// Close stops serving.
func (r *ChartRepository) Close() error { return r.server.Close() }
