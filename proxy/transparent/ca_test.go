package transparent

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCACreatedPrivateAndReloaded(t *testing.T) {
	state := t.TempDir()
	ca, created, err := LoadOrCreateCA(state)
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Error("first use: created = false")
	}
	for path, want := range map[string]os.FileMode{
		filepath.Join(state, CADirName): 0o700,
		ca.KeyPath():                    0o600,
		ca.CertPath():                   0o644,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
	}
	key, _ := os.ReadFile(ca.KeyPath())
	cert, _ := os.ReadFile(ca.CertPath())
	if !strings.Contains(string(key), "PRIVATE KEY") || strings.Contains(string(cert), "PRIVATE KEY") {
		t.Error("the key must be in ca-key.pem only")
	}
	if b := ca.BundlePath(); b != "" {
		data, _ := os.ReadFile(b)
		if !strings.HasSuffix(string(data), string(cert)) {
			t.Error("bundle.pem does not end with the CA certificate")
		}
	}
	again, created, err := LoadOrCreateCA(state)
	if err != nil {
		t.Fatal(err)
	}
	if created || !again.Cert().Equal(ca.Cert()) {
		t.Errorf("second use: created=%v, same cert=%v; want the same CA loaded", created, again.Cert().Equal(ca.Cert()))
	}
	if left, _ := filepath.Glob(filepath.Join(state, ".ca-new-*")); len(left) != 0 {
		t.Errorf("temporary folders left behind: %v", left)
	}
}

func TestCACertificateShape(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ca, _, err := loadOrCreateCA(t.TempDir(), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Cert()
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA: IsCA=%v BasicConstraintsValid=%v MaxPathLen=%d MaxPathLenZero=%v; want a CA limited to path length 0",
			c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign {
		t.Errorf("CA key usage = %b, want CertSign only", c.KeyUsage)
	}
	if len(c.ExtKeyUsage) != 0 {
		t.Errorf("CA ext key usage = %v, want none", c.ExtKeyUsage)
	}
	if !c.NotBefore.Equal(now.Add(-clockSkew)) || !c.NotAfter.Equal(now.Add(caValidity)) {
		t.Errorf("CA valid %s to %s, want %s to %s", c.NotBefore, c.NotAfter, now.Add(-clockSkew), now.Add(caValidity))
	}
	if len(c.PermittedDNSDomains) != 0 {
		t.Errorf("name constraints are not used, got %v", c.PermittedDNSDomains)
	}

	roots := x509.NewCertPool()
	roots.AddCert(c)
	for _, host := range []string{"api.anthropic.com", "127.0.0.1", "::1", "Localhost."} {
		tc, err := ca.Leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		l := tc.Leaf
		if l.IsCA {
			t.Errorf("%s: leaf is a CA", host)
		}
		if l.KeyUsage != x509.KeyUsageDigitalSignature {
			t.Errorf("%s: key usage %b, want DigitalSignature only", host, l.KeyUsage)
		}
		if len(l.ExtKeyUsage) != 1 || l.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
			t.Errorf("%s: ext key usage %v, want ServerAuth only", host, l.ExtKeyUsage)
		}
		if !l.NotBefore.Equal(now.Add(-clockSkew)) || !l.NotAfter.Equal(now.Add(leafValidity)) {
			t.Errorf("%s: leaf valid %s to %s", host, l.NotBefore, l.NotAfter)
		}
		name := strings.ToLower(strings.TrimSuffix(host, "."))
		if _, err := l.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("%s: leaf does not verify against the CA: %v", host, err)
		}
		if strings.Contains(host, ".") && !strings.Contains(host, ":") && host[0] > '9' {
			if len(l.DNSNames) != 1 || l.DNSNames[0] != name || len(l.IPAddresses) != 0 {
				t.Errorf("%s: SANs %v %v, want DNS %s", host, l.DNSNames, l.IPAddresses, name)
			}
		} else if len(l.IPAddresses) != 1 || len(l.DNSNames) != 0 {
			t.Errorf("%s: SANs %v %v, want one IP", host, l.DNSNames, l.IPAddresses)
		}
		if _, err := l.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: roots, CurrentTime: now}); err == nil {
			t.Errorf("%s: leaf verifies for another host", host)
		}
	}
	a, _ := ca.Leaf("api.anthropic.com")
	b, _ := ca.Leaf("API.anthropic.com")
	if a != b {
		t.Error("the leaf of a host is not cached")
	}
	now = now.Add(leafValidity - leafRenewBelow + time.Minute)
	if c, _ := ca.Leaf("api.anthropic.com"); c == a {
		t.Error("a leaf close to expiry is not remade")
	}
}

func TestCALeafNeverOutlivesTheCA(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	state := t.TempDir()
	ca, _, err := loadOrCreateCA(state, clock)
	if err != nil {
		t.Fatal(err)
	}
	now = ca.Cert().NotAfter.Add(-48 * time.Hour)
	l, err := ca.Leaf("api.openai.com")
	if err != nil {
		t.Fatal(err)
	}
	if l.Leaf.NotAfter.After(ca.Cert().NotAfter) {
		t.Errorf("leaf ends %s after the CA %s", l.Leaf.NotAfter, ca.Cert().NotAfter)
	}
	now = ca.Cert().NotAfter.Add(time.Hour)
	if _, _, err := loadOrCreateCA(state, clock); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired CA: err = %v, want it to say expired", err)
	}
}

func TestCARefusesBadFiles(t *testing.T) {
	state := t.TempDir()
	ca, _, err := LoadOrCreateCA(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ca.KeyPath(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(state); err == nil || !strings.Contains(err.Error(), "readable by other users") {
		t.Errorf("key mode 0644: err = %v, want a refusal naming the mode", err)
	}
	os.Chmod(ca.KeyPath(), 0o600)

	other, _, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	otherCert, _ := os.ReadFile(other.CertPath())
	if err := os.WriteFile(ca.CertPath(), otherCert, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(state); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched certificate: err = %v", err)
	}
	if err := os.WriteFile(ca.KeyPath(), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(state); err == nil || !strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Errorf("junk key: err = %v", err)
	}
	if _, err := ca.Leaf(""); err == nil {
		t.Error("Leaf(\"\"): no error")
	}
}
