// Command localcp runs a long-lived local control plane for `make demo` and for people: etcd,
// kube-apiserver and kube-controller-manager built by libs/builder, with CRDs, webhooks and
// manifests installed. It writes <dir>/kubeconfig and <dir>/webhook.env, and stops everything
// cleanly on SIGTERM or SIGINT. etcd's data stays in <dir>/etcd across runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/libs/testenv"
)

func main() {
	dir := flag.String("dir", ".local", "State directory (etcd data, kubeconfig, logs).")
	crds := flag.String("crds", "", "Comma-separated directories of CRDs to install.")
	webhooks := flag.String("webhooks", "", "Comma-separated files of ValidatingWebhookConfigurations to install.")
	apply := flag.String("apply", "", "Comma-separated manifest files to apply after start.")
	webhookPort := flag.Int("webhook-port", 19443, "Port on 127.0.0.1 the webhooks are served on.")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	if err := run(*dir, split(*crds), split(*webhooks), split(*apply), *webhookPort); err != nil {
		fmt.Fprintln(os.Stderr, "localcp:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func run(dir string, crds, webhookFiles, apply []string, webhookPort int) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	hooks, err := testenv.ReadWebhooks(webhookFiles...)
	if err != nil {
		return err
	}
	env, err := testenv.Start(testenv.Options{CRDDirs: crds, Webhooks: hooks, WebhookPort: webhookPort,
		ControllerManager: true, DataDir: dir})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	for _, f := range apply {
		if err := testenv.ApplyFile(ctx, env.Client, f); err != nil {
			return err
		}
	}
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		return err
	}
	w := env.WebhookInstallOptions
	webhookEnv := fmt.Sprintf("WEBHOOK_PORT=%d\nWEBHOOK_CERT_DIR=%s\n", w.LocalServingPort, w.LocalServingCertDir)
	if err := os.WriteFile(filepath.Join(dir, "webhook.env"), []byte(webhookEnv), 0o600); err != nil {
		return err
	}
	fmt.Printf("control plane ready at %s; kubeconfig %s\n", env.Config.Host, filepath.Join(dir, "kubeconfig"))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	fmt.Println("stopping control plane")
	_ = os.Remove(filepath.Join(dir, "kubeconfig"))
	return nil
}
