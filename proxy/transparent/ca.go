package transparent

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/policy/statedir"
)

// The local certificate authority of the forward proxy (transparent mode).
// It is created on first use under the state folder, in a folder of its
// own (mode 0700) holding:
//
//	ca.pem      the CA certificate (0644): what the agent is told to trust
//	ca-key.pem  its private key (0600): never leaves this folder
//	bundle.pem  the system's roots followed by ca.pem (0644), for tools
//	            whose setting replaces their roots (curl, Python)
//
// The CA signs one leaf certificate per intercepted host, made on demand
// and kept in memory.
const (
	CADirName      = "ca"
	CACertFile     = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	CABundleFile   = "bundle.pem"
	caValidity     = 5 * 365 * 24 * time.Hour
	leafValidity   = 30 * 24 * time.Hour
	leafRenewBelow = 24 * time.Hour // a cached leaf this close to expiry is remade
	clockSkew      = time.Hour      // certificates start this long before now
)

// CA is foldproxy's local certificate authority.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  crypto.Signer
	now  func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// Cert is the CA certificate.
func (ca *CA) Cert() *x509.Certificate { return ca.cert }

// CertPath is the file the CA certificate is in.
func (ca *CA) CertPath() string { return filepath.Join(ca.dir, CACertFile) }

// KeyPath is the file the CA private key is in.
func (ca *CA) KeyPath() string { return filepath.Join(ca.dir, CAKeyFile) }

// BundlePath is the file holding the system roots and the CA certificate,
// "" when no system bundle was found.
func (ca *CA) BundlePath() string {
	p := filepath.Join(ca.dir, CABundleFile)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// systemBundles are the usual places of the system's root bundle (as
// crypto/x509 looks for them on Linux and the BSDs).
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
	"/usr/local/etc/ssl/cert.pem",
}

// LoadOrCreateCA opens the CA under stateDir, creating it the first time.
// created reports whether it was made now. A CA whose key is readable by
// others, whose files do not match or whose certificate has expired is an
// error naming the file and what to do; it is never silently replaced.
func LoadOrCreateCA(stateDir string) (ca *CA, created bool, err error) {
	return loadOrCreateCA(stateDir, time.Now)
}

func loadOrCreateCA(stateDir string, now func() time.Time) (*CA, bool, error) {
	dir := filepath.Join(stateDir, CADirName)
	if err := statedir.Check(dir, "the CA's folder"); err != nil {
		return nil, false, err
	}
	keyPath := filepath.Join(dir, CAKeyFile)
	_, err := os.Lstat(keyPath)
	switch {
	case err == nil:
		ca, err := loadCA(dir, now)
		return ca, false, err
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("CA key %s: %w", keyPath, err)
	}
	// The CA is made whole in a folder of its own and renamed into place:
	// a crash leaves no half CA, and of two foldproxies starting at once
	// one CA wins and the other loads it.
	tmp, err := os.MkdirTemp(stateDir, ".ca-new-*") // mode 0700
	if err != nil {
		return nil, false, fmt.Errorf("making the CA under %s: %w", stateDir, err)
	}
	defer os.RemoveAll(tmp)
	ca, err := createCA(tmp, now)
	if err != nil {
		return nil, false, fmt.Errorf("making the CA under %s: %w", stateDir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(keyPath); serr == nil { // another foldproxy made it first
			ca, err := loadCA(dir, now)
			return ca, false, err
		}
		return nil, false, fmt.Errorf("making the CA in %s: %w", dir, err)
	}
	ca.dir = dir
	return ca, true, nil
}

func createCA(dir string, now func() time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	t := now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			Organization: []string{"foldproxy"},
			// A name of its own per installation, so that two machines'
			// CAs are told apart in a trust store.
			CommonName: fmt.Sprintf("foldproxy local CA %s %x", host, serial.Bytes()[:4]),
		},
		NotBefore:             t.Add(-clockSkew),
		NotAfter:              t.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeFileAtomic(filepath.Join(dir, CACertFile), certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	writeBundle(dir, certPEM)
	return &CA{dir: dir, cert: cert, key: key, now: now, leaves: map[string]*tls.Certificate{}}, nil
}

// writeBundle writes bundle.pem: the first system bundle found, then the
// CA. Without a system bundle there is no bundle file.
func writeBundle(dir string, certPEM []byte) {
	for _, p := range systemBundles {
		sys, err := os.ReadFile(p)
		if err != nil || len(sys) == 0 {
			continue
		}
		if sys[len(sys)-1] != '\n' {
			sys = append(sys, '\n')
		}
		_ = writeFileAtomic(filepath.Join(dir, CABundleFile), append(sys, certPEM...), 0o644)
		return
	}
}

func loadCA(dir string, now func() time.Time) (*CA, error) {
	keyPath := filepath.Join(dir, CAKeyFile)
	certPath := filepath.Join(dir, CACertFile)
	fi, err := os.Lstat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyPath, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("CA key %s is readable by other users (mode %04o): run chmod 600 %s, or remove the folder %s to make a new CA", keyPath, fi.Mode().Perm(), keyPath, dir)
	}
	keyPEM, err := statedir.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyPath, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("CA key %s: no PEM \"PRIVATE KEY\" block (remove the folder %s to make a new CA)", keyPath, dir)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %v (remove the folder %s to make a new CA)", keyPath, err, dir)
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key %s: not a signing key", keyPath)
	}
	certPEM, err := statedir.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %w (remove the folder %s to make a new CA)", certPath, err, dir)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("CA certificate %s: no PEM \"CERTIFICATE\" block (remove the folder %s to make a new CA)", certPath, dir)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %v", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("CA certificate %s is not a CA certificate (remove the folder %s to make a new CA)", certPath, dir)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("CA certificate %s does not match the key %s (remove the folder %s to make a new CA)", certPath, keyPath, dir)
	}
	if t := now(); t.After(cert.NotAfter) {
		return nil, fmt.Errorf("CA certificate %s expired on %s: remove the folder %s to make a new CA, and trust the new one", certPath, cert.NotAfter.Format(time.DateOnly), dir)
	}
	if _, err := os.Stat(filepath.Join(dir, CABundleFile)); err != nil {
		writeBundle(dir, certPEM)
	}
	return &CA{dir: dir, cert: cert, key: key, now: now, leaves: map[string]*tls.Certificate{}}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}

// Leaf returns the certificate for host (a DNS name or an IP address),
// made on first use and cached until close to its expiry.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return nil, errors.New("no host name for the certificate")
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	t := ca.now()
	if c, ok := ca.leaves[host]; ok && c.Leaf.NotAfter.Sub(t) > leafRenewBelow {
		return c, nil
	}
	c, err := ca.makeLeaf(host, t)
	if err != nil {
		return nil, err
	}
	ca.leaves[host] = c
	return c, nil
}

func (ca *CA) makeLeaf(host string, t time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notAfter := t.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"foldproxy"}, CommonName: host},
		NotBefore:             t.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		AuthorityKeyId:        ca.cert.SubjectKeyId,
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	h := sha1.Sum(b) // the usual key identifier (RFC 5280 4.2.1.2), not a security hash here
	return h[:]
}

// writeFileAtomic writes data to a temporary file in the same folder and
// renames it into place.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	name := f.Name()
	defer os.Remove(name)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(name, path)
}
