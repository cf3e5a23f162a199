package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// The certificates of a control plane: the front proxy's (aggregation.go) and, with a node, the node
// CA that signs kube-apiserver's serving certificate, its client certificate to kubelets and
// servers on the node's link, and the key ServiceAccount tokens are signed with.

// NodeCAFile is the CA that signs kube-apiserver's serving certificate of a control plane with a
// node (pods trust it through kube-root-ca.crt) and its client certificate to kubelets.
func NodeCAFile(certDir string) string { return filepath.Join(certDir, "node-ca.crt") }

// loadOrMakeCA reads dir's node CA, making it the first time (a demo restarted keeps its CA, so
// that the certificates its pods hold stay valid).
func loadOrMakeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	crtPath, keyPath := NodeCAFile(dir), filepath.Join(dir, "node-ca.key")
	if crtPEM, err := os.ReadFile(crtPath); err == nil {
		keyPEM, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, nil, err
		}
		certs, err := cert.ParseCertsPEM(crtPEM)
		if err != nil {
			return nil, nil, err
		}
		key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
		if err != nil {
			return nil, nil, err
		}
		ec, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return nil, nil, fmt.Errorf("%s: not an ECDSA key", keyPath)
		}
		return certs[0], ec, nil
	}
	return newCA(dir, "node-ca", "flotilla-node-ca")
}

// ensureServiceAccountKey writes the key pair envtest would have written beside its own serving
// certificate (sa-signer.key and .crt), which kube-apiserver signs ServiceAccount tokens with; kept
// across restarts, so that the tokens pods hold stay valid.
func ensureServiceAccountKey(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "sa-signer.key")); err == nil {
		return nil
	}
	_, _, err := newCA(dir, "sa-signer", "service-accounts")
	return err
}

// newCA writes <dir>/<name>.crt and .key: a new self-signed CA named cn.
func newCA(dir, name, cn string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: cn}, key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), keyPEM, 0o600); err != nil {
		return nil, nil, err
	}
	return ca, key, os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: ca.Raw}), 0o644)
}

// writeSigned writes <dir>/<name>.crt and .key: tmpl with a new key, signed by ca.
func writeSigned(dir, name string, tmpl *x509.Certificate, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	crt, key, err := sign(tmpl, ca, caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), key, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".crt"), crt, 0o644)
}

// sign returns tmpl with a new key, signed by ca for ten years, and that key, in PEM.
func sign(tmpl *x509.Certificate, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (crtPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, now.Add(-time.Hour), now.Add(10*365*24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der}), keyPEM, nil
}

// NodeServingCert is a serving certificate for ips signed by the node CA of a control plane with a
// node (certDir is its kube-apiserver's): what the node's containerd and the control plane's
// processes trust, for a server on the node's link (an image registry's mirror, say).
func NodeServingCert(certDir string, ips ...net.IP) (tls.Certificate, error) {
	ca, caKey, err := loadOrMakeCA(certDir)
	if err != nil {
		return tls.Certificate{}, err
	}
	crt, key, err := sign(&x509.Certificate{Subject: pkix.Name{CommonName: ips[0].String()}, IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(crt, key)
}
