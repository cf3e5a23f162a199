package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// demoPlatformPods checks, in a running `make demo` with a real node (its state in dir), that the
// platform has moved onto the node from its release: every service runs there as pods Running and
// Ready without a restart, from an image of the node's registry pulled by digest; every leader is
// a pod, not a process the demo started; the tenant-controller's webhook is configured through its
// Service and answers through it.
func demoPlatformPods(t *testing.T, dir string) {
	t.Helper()
	kubectl := func(v any, args ...string) {
		t.Helper()
		out, err := exec.Command(tool(t, "kubectl"), append([]string{"--kubeconfig", filepath.Join(dir, "kubeconfig"), "-o", "json", "get"}, args...)...).Output()
		if err == nil {
			err = json.Unmarshal(out, v)
		}
		if err != nil {
			t.Fatalf("kubectl %v: %v", args, err)
		}
	}
	env, err := os.ReadFile(filepath.Join(dir, "webhook.env"))
	if err != nil {
		t.Fatal(err)
	}
	var registry string
	for _, l := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(l, "NODE_REGISTRY="); ok {
			registry = v + "/flotilla/"
		}
	}
	pods := &corev1.PodList{}
	kubectl(pods, "pods", "-n", "flotilla-system")
	running := map[string]bool{}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Spec.NodeName, "worker-") {
			t.Errorf("pod %s runs on %q, not the real node", p.Name, p.Spec.NodeName)
		}
		for _, c := range p.Status.ContainerStatuses {
			image := strings.TrimPrefix(c.ImageID, registry)
			service, digest, ok := strings.Cut(image, "@sha256:")
			if !ok || image == c.ImageID || !c.Ready || c.State.Running == nil || c.RestartCount > 0 {
				t.Errorf("pod %s container %s: image %s, ready %v, running %v, %d restarts; want Running and Ready from %s<service>@sha256:…, never restarted",
					p.Name, c.Name, c.ImageID, c.Ready, c.State.Running != nil, c.RestartCount, registry)
				continue
			}
			running[service] = len(digest) == 64
		}
	}
	for _, s := range services(t) {
		if !running[s] {
			t.Errorf("no pod of %s runs from the node's registry by digest", s)
		}
	}
	leases := &coordinationv1.LeaseList{}
	kubectl(leases, "leases", "-n", "flotilla-system")
	podNames := map[string]bool{}
	for _, p := range pods.Items {
		podNames[p.Name] = true
	}
	for _, l := range leases.Items {
		holder, _, _ := strings.Cut(ptr.Deref(l.Spec.HolderIdentity, ""), "_")
		if !podNames[holder] {
			t.Errorf("Lease %s is held by %q, not one of the platform's pods", l.Name, holder)
		}
	}
	if len(leases.Items) == 0 {
		t.Error("no leader-election Lease in flotilla-system")
	}
	hook := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	kubectl(hook, "validatingwebhookconfiguration", "tenant-controller")
	for _, w := range hook.Webhooks {
		if w.ClientConfig.Service == nil || w.ClientConfig.URL != nil {
			t.Errorf("webhook %s is not served through the tenant-controller's Service: %+v", w.Name, w.ClientConfig)
		}
	}
	cmd := exec.Command(tool(t, "kubectl"), "--kubeconfig", filepath.Join(dir, "kubeconfig"), "create", "--dry-run=server", "-f", "-")
	cmd.Stdin = strings.NewReader("apiVersion: tenancy.flotilla.dev/v1alpha1\nkind: Tenant\nmetadata: {name: stray, namespace: default}\n")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `namespace "default" is not a tenant namespace`) { // the webhook's words
		t.Errorf("a Tenant outside any tenant's namespace: %v, want the tenant-controller's pods to deny it:\n%s", err, out)
	}
}
