package integration_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/flotilla-dev/flotilla/libs/testenv"
	"github.com/flotilla-dev/flotilla/services/cluster-controller/internal/cluster"
	tenancyv1 "github.com/flotilla-dev/flotilla/services/tenant-controller/api/v1alpha1"
)

// The starter catalog's etcd (deploy/catalog/etcd) is what the DataStore this controller writes
// describes: the Secrets and keys it names, the Service and port, the pod label the tenant's
// network policy admits control planes to. Run as the chart runs it (a real etcd with the
// StatefulSet's flags and the chart's certificates, then the real etcdctl with the auth Job's
// steps), it serves the Service's name over TLS, refuses a client without a certificate of its
// CA, and, with authentication on, keeps a control plane given a user of its own (as Kamaji does)
// to its own key prefix.
func TestEtcdChartMeetsTheDataStoreContract(t *testing.T) {
	const ns = "tenant-etcdchart"
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join("..", "..", "..", "..", "deploy", "catalog", "etcd", "chart")
	out, err := exec.Command(filepath.Join(bin, "helm"), "template", "etcd-main", chart, "--namespace", ns, "--set", "replicas=1").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objs := map[string]*unstructured.Unstructured{} // by kind/name
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs[u.GetKind()+"/"+u.GetName()] = u
		}
	}
	secret := func(name, key string) []byte {
		t.Helper()
		s, ok := objs["Secret/"+name]
		if !ok {
			t.Fatalf("the chart renders no Secret %s", name)
		}
		v, _, _ := unstructured.NestedString(s.Object, "data", key)
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(b) == 0 {
			t.Fatalf("Secret %s has no key %s (%v)", name, key, err)
		}
		return b
	}

	// What the DataStore names, the chart provides.
	ds := cluster.DataStore(ns)
	for _, pair := range []string{"certificateAuthority", "clientCertificate"} {
		for _, part := range []string{"certificate", "privateKey"} {
			ref, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "tlsConfig", pair, part, "secretReference")
			if ref["namespace"] != ns {
				t.Errorf("DataStore %s.%s names namespace %q", pair, part, ref["namespace"])
			}
			secret(ref["name"], ref["keyPath"])
		}
	}
	endpoints, _, _ := unstructured.NestedStringSlice(ds.Object, "spec", "endpoints")
	svc, ok := objs["Service/"+cluster.EtcdService]
	if !ok {
		t.Fatalf("the chart renders no Service %s", cluster.EtcdService)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["port"]) != fmt.Sprint(cluster.EtcdClientPort) ||
		len(endpoints) != 1 || endpoints[0] != fmt.Sprintf("%s.%s.svc:%d", cluster.EtcdService, ns, cluster.EtcdClientPort) {
		t.Fatalf("Service ports %v, DataStore endpoints %v", ports, endpoints)
	}
	sts := objs["StatefulSet/etcd"]
	if sts == nil {
		t.Fatal("the chart renders no StatefulSet etcd")
	}
	if l, _, _ := unstructured.NestedString(sts.Object, "spec", "template", "metadata", "labels", tenancyv1.LabelService); l != "etcd" {
		t.Fatalf("the members are labelled %s=%q: the tenant's network policy would not admit control planes", tenancyv1.LabelService, l)
	}

	// A real etcd with the StatefulSet's flags; only addresses and paths are this machine's.
	dir := t.TempDir()
	for name, files := range map[string]string{"etcd-server": "tls", "etcd-client": "client"} {
		if err := os.MkdirAll(filepath.Join(dir, files), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"ca.crt", "tls.crt", "tls.key"} {
			if err := os.WriteFile(filepath.Join(dir, files, key), secret(name, key), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	port := func() string {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(p)
	}
	client, peer, metrics := port(), port(), port()
	member := "etcd-0.etcd-peers." + ns + ".svc"
	local := strings.NewReplacer(member+":2379", "127.0.0.1:"+client, member+":2380", "127.0.0.1:"+peer,
		"0.0.0.0:2379", "127.0.0.1:"+client, "0.0.0.0:2380", "127.0.0.1:"+peer, "0.0.0.0:2381", "127.0.0.1:"+metrics,
		"/etc/etcd/tls", filepath.Join(dir, "tls"), "/var/lib/etcd", filepath.Join(dir, "data"))
	containers, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	args := argsOf(t, containers[0], strings.NewReplacer("$(POD_NAME)", "etcd-0"), local)
	ctx, cancel := context.WithCancel(context.Background())
	etcd := exec.CommandContext(ctx, filepath.Join(bin, "etcd"), args...)
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	etcd.Stdout, etcd.Stderr = log, log
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = etcd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("etcd %s:\n%s", strings.Join(args, " "), b)
		}
	})
	eventually(t, "etcd's /readyz", func() (bool, error) {
		resp, err := http.Get("http://127.0.0.1:" + metrics + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})

	// Clients, by the Service's name as the DataStore gives it.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret(cluster.EtcdCASecret, "tls.crt"))
	connect := func(cert *tls.Certificate) *clientv3.Client {
		t.Helper()
		cfg := &tls.Config{RootCAs: pool, ServerName: cluster.EtcdService + "." + ns + ".svc", MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://127.0.0.1:" + client}, TLS: cfg, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	pair := func(crt, key []byte) *tls.Certificate {
		t.Helper()
		c, err := tls.X509KeyPair(crt, key)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	// Before authentication is on, a certificate of another CA, and none at all, are refused: the
	// certificate is what keeps them out (with authentication on, no user would too).
	rootCert := pair(secret(cluster.EtcdClientSecret, "tls.crt"), secret(cluster.EtcdClientSecret, "tls.key"))
	short, cancelShort := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := connect(rootCert).Put(short, "/x", "1"); err != nil {
		t.Fatalf("the root client certificate (%s) is refused: %v", cluster.EtcdClientSecret, err)
	}
	cancelShort()
	other, err := tls.X509KeyPair(selfSigned(t))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*tls.Certificate{"another CA's certificate": issue(t, &other, "root"), "no certificate": nil} {
		short, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if _, err := connect(c).Put(short, "/x", "1"); err == nil {
			t.Errorf("a client with %s writes to the etcd", name)
		}
		cancel()
	}

	// The auth Job's steps, in its order, with the real etcdctl; the steps it says are
	// idempotent once more.
	job := objs["Job/etcd-auth"]
	if job == nil {
		t.Fatal("the chart renders no Job etcd-auth")
	}
	steps, _, _ := unstructured.NestedSlice(job.Object, "spec", "template", "spec", "initContainers")
	mains, _, _ := unstructured.NestedSlice(job.Object, "spec", "template", "spec", "containers")
	steps = append(steps, mains...)
	toLocal := strings.NewReplacer("etcd."+ns+".svc:2379", "127.0.0.1:"+client, "/etc/etcd/client", filepath.Join(dir, "client"))
	run := func(step any) {
		t.Helper()
		args := argsOf(t, step, toLocal)
		if out, err := exec.Command(filepath.Join(bin, "etcdctl"), args...).CombinedOutput(); err != nil {
			t.Fatalf("etcdctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, s := range steps {
		run(s)
	}
	for _, s := range steps[1:] {
		run(s)
	}

	op, cancelOp := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelOp()
	root := connect(rootCert)
	if st, err := root.AuthStatus(op); err != nil || !st.Enabled {
		t.Fatalf("authentication is not on after the Job's steps: %+v, %v", st, err)
	}
	// What Kamaji does for each control plane, with the root certificate and the CA's key.
	for _, cp := range []string{"cp-a", "cp-b"} {
		for _, err := range []error{
			func() error { _, err := root.RoleAdd(op, cp); return err }(),
			func() error {
				_, err := root.RoleGrantPermission(op, cp, "/"+cp+"/", clientv3.GetPrefixRangeEnd("/"+cp+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
				return err
			}(),
			func() error {
				_, err := root.UserAddWithOptions(op, cp, "", &clientv3.UserAddOptions{NoPassword: true})
				return err
			}(),
			func() error { _, err := root.UserGrantRole(op, cp, cp); return err }(),
		} {
			if err != nil {
				t.Fatalf("setting up %s as root: %v", cp, err)
			}
		}
	}
	ca := pair(secret(cluster.EtcdCASecret, "tls.crt"), secret(cluster.EtcdCASecret, "tls.key"))
	cpA := connect(issue(t, ca, "cp-a"))
	if _, err := cpA.Put(op, "/cp-a/registry/x", "1"); err != nil {
		t.Fatalf("a control plane cannot write its own prefix: %v", err)
	}
	if _, err := cpA.Get(op, "/cp-b/registry/x"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a control plane reads another's prefix: %v", err)
	}
	if _, err := cpA.Get(op, "/", clientv3.WithPrefix()); err == nil {
		t.Fatal("a control plane reads the whole keyspace")
	}
}

// argsOf is a rendered container's args, rewritten for this machine by each replacer in turn.
func argsOf(t *testing.T, container any, rs ...*strings.Replacer) []string {
	t.Helper()
	raw, _, _ := unstructured.NestedStringSlice(container.(map[string]any), "args")
	if len(raw) == 0 {
		t.Fatalf("container %v has no args", container.(map[string]any)["name"])
	}
	var args []string
	for _, a := range raw {
		for _, r := range rs {
			a = r.Replace(a)
		}
		args = append(args, a)
	}
	return args
}

// issue is a client certificate for user cn, signed by ca.
func issue(t *testing.T, ca *tls.Certificate, cn string) *tls.Certificate {
	t.Helper()
	parent, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, signer.Public(), ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: signer}
}

// selfSigned is a CA of its own, PEM-encoded certificate and key.
func selfSigned(t *testing.T) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}
