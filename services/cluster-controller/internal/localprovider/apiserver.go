package localprovider

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// apiServer is one hosted control plane: a kube-apiserver process on the platform's etcd.
type apiServer struct {
	dir     string
	port    int
	cmd     *exec.Cmd
	exited  chan struct{}
	pki     *pki
	version string
}

// serverConfig is what a control plane's kube-apiserver is started with.
type serverConfig struct {
	binary      string // path of kube-apiserver
	dir         string // certificates, port and log; kept across restarts of the stand-in
	etcdServers string
	etcdPrefix  string
	serviceCIDR string
}

// startAPIServer starts kube-apiserver and waits until it is ready. Its certificates and port
// are kept in dir, so a restarted stand-in serves a control plane at the same endpoint with the
// same credentials.
func startAPIServer(ctx context.Context, c serverConfig) (*apiServer, error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, err
	}
	p, err := loadOrCreatePKI(c.dir)
	if err != nil {
		return nil, err
	}
	port, err := loadOrPickPort(c.dir)
	if err != nil {
		return nil, err
	}
	f := func(name string) string { return filepath.Join(c.dir, name) }
	log, err := os.OpenFile(f("kube-apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.binary,
		"--etcd-servers="+c.etcdServers,
		"--etcd-prefix="+c.etcdPrefix,
		// Compaction is the business of the etcd's owner: the platform's etcd is shared.
		"--etcd-compaction-interval=0",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+f("apiserver.crt"),
		"--tls-private-key-file="+f("apiserver.key"),
		"--client-ca-file="+f("ca.crt"),
		"--service-account-issuer=https://127.0.0.1:"+strconv.Itoa(port),
		"--service-account-key-file="+f("sa.key"),
		"--service-account-signing-key-file="+f("sa.key"),
		"--service-cluster-ip-range="+c.serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--profiling=false",
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(err, log.Close())
	}
	s := &apiServer{dir: c.dir, port: port, cmd: cmd, exited: make(chan struct{}), pki: p}
	go func() { _ = cmd.Wait(); _ = log.Close(); close(s.exited) }()
	if err := s.waitReady(ctx); err != nil {
		s.stop()
		// The port may have been taken meanwhile: the next start picks another.
		_ = os.Remove(f("port"))
		log, _ := os.ReadFile(f("kube-apiserver.log"))
		if len(log) > 2048 {
			log = log[len(log)-2048:]
		}
		return nil, fmt.Errorf("kube-apiserver of %s did not become ready: %w; its log ends:\n%s", c.dir, err, log)
	}
	return s, nil
}

// waitReady polls /readyz as the admin, then reads the server's version.
func (s *apiServer) waitReady(ctx context.Context) error {
	hc, err := s.httpClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		select {
		case <-s.exited:
			return errors.New("kube-apiserver exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := hc.Get(s.url() + "/readyz")
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		resp, err = hc.Get(s.url() + "/version")
		if err != nil {
			continue
		}
		var v struct{ GitVersion string }
		err = json.NewDecoder(resp.Body).Decode(&v)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		s.version = v.GitVersion
		return nil
	}
}

func (s *apiServer) httpClient() (*http.Client, error) {
	pair, err := tls.X509KeyPair(s.pki.adminCert, s.pki.adminKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.pki.caCert)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}, nil
}

func (s *apiServer) url() string { return "https://127.0.0.1:" + strconv.Itoa(s.port) }

// alive reports whether the process still runs.
func (s *apiServer) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// stop terminates kube-apiserver, killing it if it does not stop within 10 seconds.
func (s *apiServer) stop() {
	if !s.alive() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// kubeconfig is the admin kubeconfig of the control plane (a system:masters client certificate),
// as Kamaji writes it.
func (s *apiServer) kubeconfig(clusterName string) ([]byte, error) {
	user := clusterName + "-admin"
	return clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{clusterName: {Server: s.url(), CertificateAuthorityData: s.pki.caCert}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {ClientCertificateData: s.pki.adminCert, ClientKeyData: s.pki.adminKey}},
		Contexts:       map[string]*clientcmdapi.Context{user + "@" + clusterName: {Cluster: clusterName, AuthInfo: user}},
		CurrentContext: user + "@" + clusterName,
	})
}

// pki is a control plane's certificates: one CA signing the serving certificate and the admin's
// client certificate, and the ServiceAccount token signing key.
type pki struct {
	caCert, caKey, adminCert, adminKey []byte
}

func loadOrCreatePKI(dir string) (*pki, error) {
	f := func(name string) string { return filepath.Join(dir, name) }
	read := func() (*pki, error) {
		p := &pki{}
		for path, dst := range map[string]*[]byte{f("ca.crt"): &p.caCert, f("ca.key"): &p.caKey, f("admin.crt"): &p.adminCert, f("admin.key"): &p.adminKey} {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			*dst = b
		}
		return p, nil
	}
	if p, err := read(); err == nil {
		return p, nil
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "kubernetes"}, caKey)
	if err != nil {
		return nil, err
	}
	serving := &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	admin := &x509.Certificate{Subject: pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	files := map[string][]byte{"ca.crt": pemCert(ca.Raw)}
	if files["ca.key"], err = keyutil.MarshalPrivateKeyToPEM(caKey); err != nil {
		return nil, err
	}
	for name, tmpl := range map[string]*x509.Certificate{"apiserver": serving, "admin": admin} {
		crt, key, err := signed(tmpl, ca, caKey)
		if err != nil {
			return nil, err
		}
		files[name+".crt"], files[name+".key"] = crt, key
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if files["sa.key"], err = keyutil.MarshalPrivateKeyToPEM(saKey); err != nil {
		return nil, err
	}
	for name, b := range files {
		if err := os.WriteFile(f(name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return read()
}

func signed(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (crt, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(365*24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	if key, err = keyutil.MarshalPrivateKeyToPEM(k); err != nil {
		return nil, nil, err
	}
	return pemCert(der), key, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der})
}

// loadOrPickPort returns the port kept in dir, or a free loopback port (kept there).
func loadOrPickPort(dir string) (int, error) {
	path := filepath.Join(dir, "port")
	if b, err := os.ReadFile(path); err == nil {
		if p, err := strconv.Atoi(string(b)); err == nil {
			return p, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return port, os.WriteFile(path, []byte(strconv.Itoa(port)), 0o600)
}
