// Command linstor-double serves the LINSTOR test double (package linstordouble) on a local port,
// for `make demo`: a stand-in for a LINSTOR controller where none can run, and with --provision
// for the LINSTOR CSI driver's provisioning (package csistandin). It is not LINSTOR, and no chart
// ships it.
//
//	linstor-double --listen 127.0.0.1:3370 --nodes node-1=zone-a,node-2=zone-b --pool ssd=100Gi
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	neturl "net/url"

	lapi "github.com/LINBIT/golinstor/client"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble/csistandin"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:3370", "Address to serve LINSTOR's REST API on.")
	nodes := flag.String("nodes", "node-1=zone-a,node-2=zone-a,node-3=zone-b", "Comma-separated node=zone: satellites, with Aux/topology.kubernetes.io/zone.")
	pool := flag.String("pool", "ssd=100Gi", "name=size: the LVM_THIN storage pool every node has.")
	step := flag.Duration("step", 10*time.Second, "How often LINSTOR's periodic work (resync, auto-diskful) runs.")
	provision := flag.Bool("provision", false, "Also stand in for the LINSTOR CSI driver's provisioning and the PV binder, against the cluster of $KUBECONFIG (package csistandin).")
	flag.Parse()
	if err := run(*listen, *nodes, *pool, *step, *provision); err != nil {
		fmt.Fprintln(os.Stderr, "linstor-double:", err)
		os.Exit(1)
	}
}

func run(listen, nodes, pool string, step time.Duration, provision bool) error {
	name, size, ok := strings.Cut(pool, "=")
	q, err := resource.ParseQuantity(size)
	if !ok || err != nil {
		return fmt.Errorf("--pool: want name=size, got %q", pool)
	}
	d := linstordouble.New(linstordouble.Options{})
	for _, n := range strings.Split(nodes, ",") {
		node, zone, ok := strings.Cut(n, "=")
		if !ok {
			return fmt.Errorf("--nodes: want node=zone, got %q", n)
		}
		d.AddNode(node, map[string]string{"Aux/topology.kubernetes.io/zone": zone},
			linstordouble.Pool{Name: name, Kind: "LVM_THIN", TotalKiB: q.Value() / 1024, FreeKiB: q.Value() / 1024})
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.Step()
			}
		}
	}()
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if provision {
		if err := startProvisioner(ctx, "http://"+l.Addr().String()); err != nil {
			return err
		}
	}
	log.Printf("LINSTOR test double (not LINSTOR) serving its REST API on http://%s: nodes %s, pool %s", l.Addr(), nodes, pool)
	if err := srv.Serve(l); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// startProvisioner runs the CSI driver's stand-in against the double at url.
func startProvisioner(ctx context.Context, url string) error {
	ctrl.SetLogger(zap.New())
	base, err := neturl.Parse(url)
	if err != nil {
		return err
	}
	lc, err := lapi.NewClient(lapi.BaseURL(base), lapi.Log(quiet{}))
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	if err := (&csistandin.Provisioner{Client: mgr.GetClient(), LINSTOR: lc}).SetupWithManager(mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			log.Printf("CSI stand-in: %v", err)
		}
	}()
	return nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}
