package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// frontProxyUser is the identity kube-apiserver presents to aggregated API servers.
const frontProxyUser = "front-proxy-client"

// configureAggregation gives kube-apiserver what an aggregated API server needs: a front-proxy
// CA and client certificate and the request-header flags, which kube-apiserver publishes in the
// kube-system/extension-apiserver-authentication ConfigMap for delegated authentication.
func configureAggregation(env *envtest.Environment, dir string) error {
	ca, caKey, err := newCA(dir, "front-proxy-ca", "front-proxy-ca")
	if err != nil {
		return err
	}
	client := &x509.Certificate{Subject: pkix.Name{CommonName: frontProxyUser}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if err := writeSigned(dir, "front-proxy-client", client, ca, caKey); err != nil {
		return err
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", filepath.Join(dir, "front-proxy-ca.crt"))
	args.Set("proxy-client-cert-file", filepath.Join(dir, "front-proxy-client.crt"))
	args.Set("proxy-client-key-file", filepath.Join(dir, "front-proxy-client.key"))
	args.Set("requestheader-allowed-names", frontProxyUser)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("enable-aggregator-routing", "false")
	return nil
}

// RegisterAPIService points group/version at an aggregated API server listening on
// 127.0.0.1:port. Endpoints refuse loopback addresses, so the APIService names an ExternalName
// Service resolving to 127.0.0.1 in namespace ns (created if missing).
func RegisterAPIService(ctx context.Context, c client.Client, ns, group, version string, port int) error {
	if err := client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})); err != nil {
		return err
	}
	name := strings.ReplaceAll(group, ".", "-")
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"type": "ExternalName", "externalName": "127.0.0.1",
			"ports": []any{map[string]any{"name": "https", "port": int64(port), "protocol": "TCP"}},
		},
	}}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": version + "." + group},
		"spec": map[string]any{
			"group": group, "version": version, "groupPriorityMinimum": int64(900), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true,
			"service":               map[string]any{"name": name, "namespace": ns, "port": int64(port)},
		},
	}}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(svc), client.FieldOwner("flotilla-testenv"), client.ForceOwnership); err != nil {
		return err
	}
	// The whole spec is replaced: an APIService a release installed before (`make demo` started
	// again after its platform moved onto the node) has a caBundle, which insecureSkipTLSVerify
	// may not go with.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { // the aggregator writes its status meanwhile
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(apiService.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(apiService), live); apierrors.IsNotFound(err) {
			return c.Create(ctx, apiService.DeepCopy())
		} else if err != nil {
			return err
		}
		live.Object["spec"] = apiService.Object["spec"]
		return c.Update(ctx, live)
	})
}

// WaitServing waits until the aggregated API server on 127.0.0.1:port answers its /readyz with 200
// (it serves once its caches are in). Register it only then: the aggregator checks a server as
// soon as the APIService names it, and marks one that does not answer yet unavailable for a
// while, so that a server restarted on a new port answered 503 right after its APIService, still
// Available from before, said it was.
func WaitServing(ctx context.Context, port int) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // its own self-signed certificate
	defer hc.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", port)
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// WaitAPIServiceAvailable waits until kube-apiserver reports the APIService name (version.group)
// Available: its aggregated server answers through the aggregator.
func WaitAPIServiceAvailable(ctx context.Context, c client.Client, name string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		svc := &unstructured.Unstructured{}
		svc.SetAPIVersion("apiregistration.k8s.io/v1")
		svc.SetKind("APIService")
		if err := c.Get(ctx, client.ObjectKey{Name: name}, svc); err != nil {
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(svc.Object, "status", "conditions")
		for _, raw := range conditions {
			if c, ok := raw.(map[string]any); ok && c["type"] == "Available" {
				return c["status"] == "True", nil
			}
		}
		return false, nil
	})
}
