// Command cluster-controller turns cluster.flotilla.dev KubernetesClusters into managed Kubernetes
// clusters: Cluster API objects for a Kamaji-hosted control plane and KubeVirt worker nodes.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/libs/runtime/manager"
	"github.com/flotilla-dev/flotilla/libs/runtime/metrics"
	clusterapi "github.com/flotilla-dev/flotilla/services/cluster-controller/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/controller/kubernetescluster"
)

func main() {
	opts := manager.Options{Name: "cluster-controller"}
	opts.BindFlags(flag.CommandLine)
	co := cluster.DefaultOptions()
	flag.StringVar(&co.NodeImage, "node-image", co.NodeImage, "Container-disk image of the worker nodes' root disk, without tag (the tag is the Kubernetes release).")
	flag.StringVar(&co.PodCIDR, "pod-cidr", co.PodCIDR, "Pod network of the customers' clusters.")
	flag.StringVar(&co.ServiceCIDR, "service-cidr", co.ServiceCIDR, "Service network of the customers' clusters.")
	flag.StringVar(&co.AddonsRepository, "addons-repository", co.AddonsRepository, "URL of the Helm repository holding the add-on charts (one chart per add-on, named after it).")
	flag.StringVar(&co.InfraNamespace, "infra-namespace", co.InfraNamespace, "Namespace where each cluster's cloud-controller-manager, CSI controller and cluster-autoscaler run, out of its tenant's reach; empty runs none.")
	flag.StringVar(&co.Images.CloudController, "cloud-controller-image", co.Images.CloudController, "Image of the KubeVirt cloud-controller-manager run per cluster.")
	flag.StringVar(&co.Images.CSIDriver, "csi-driver-image", co.Images.CSIDriver, "Image of the KubeVirt CSI driver's controller run per cluster.")
	flag.StringVar(&co.Images.CSIProvisioner, "csi-provisioner-image", co.Images.CSIProvisioner, "Image of the CSI external-provisioner beside it.")
	flag.StringVar(&co.Images.CSIAttacher, "csi-attacher-image", co.Images.CSIAttacher, "Image of the CSI external-attacher beside it.")
	flag.StringVar(&co.Images.CSIResizer, "csi-resizer-image", co.Images.CSIResizer, "Image of the CSI external-resizer beside it.")
	flag.StringVar(&co.Images.Autoscaler, "autoscaler-image", co.Images.Autoscaler, "Image of cluster-autoscaler (Cluster API provider) run per cluster, for a minor version --autoscaler-images does not name.")
	autoscalers := flag.String("autoscaler-images", "", "cluster-autoscaler's image for each minor version of the customers' clusters, as minor=image pairs separated by commas.")
	baseAddons := flag.String("base-addons", strings.Join(co.BaseAddons, ","), "Add-ons every cluster gets whatever its spec says, separated by commas (charts of the add-on repository): its CNI and the CSI node plugin. Empty for node images that carry them.")
	concurrency := flag.Int("concurrency", 4, "How many KubernetesClusters are reconciled at once.")
	releases := flag.String("releases", "1.37=v1.37.2", "The release run for each minor version, as minor=release pairs separated by commas.")
	flag.Parse()
	co.PatchVersions = pairs(*releases)
	co.Images.AutoscalerByMinor = pairs(*autoscalers)
	co.BaseAddons = nil
	for _, a := range strings.Split(*baseAddons, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(a); len(errs) > 0 {
			fmt.Fprintf(os.Stderr, "--base-addons: %q is not an add-on's chart name: %s\n", a, strings.Join(errs, "; "))
			os.Exit(2)
		}
		co.BaseAddons = append(co.BaseAddons, a)
	}
	if err := run(opts, co, *concurrency); err != nil {
		ctrl.Log.WithName("setup").Error(err, "Cluster controller failed")
		os.Exit(1)
	}
}

// pairs reads key=value pairs separated by commas.
func pairs(flag string) map[string]string {
	out := map[string]string{}
	for _, pair := range strings.Split(flag, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(pair), "="); ok {
			out[k] = v
		}
	}
	return out
}

func run(opts manager.Options, co cluster.Options, concurrency int) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := clusterapi.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := manager.New(opts, scheme, func(o *ctrl.Options) {
		o.Client.Cache = kubernetescluster.ClientCacheOptions()
		o.Cache.ByObject = kubernetescluster.CacheByObject(co.InfraNamespace)
	})
	if err != nil {
		return err
	}
	if err := metrics.RegisterStatus(mgr.GetCache(), metrics.KindOf[clusterapi.KubernetesClusterList]("KubernetesCluster")); err != nil {
		return err
	}
	r := &kubernetescluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: co, Concurrency: concurrency, Recorder: mgr.GetEventRecorder(opts.Name)}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
