package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCACommandPrintsTrustLines(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "foldproxy.json")
	if err := os.WriteFile(cfg, []byte(`{"mcpServers":{},"foldproxy":{"proxyListen":"127.0.0.1:8899"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"ca", "--config", cfg}, nil, &out, &errOut); code != 0 {
		t.Fatalf("foldproxy ca: exit %d: %s", code, errOut.String())
	}
	cert := filepath.Join(dir, ".foldproxy", "ca", "ca.pem")
	if !strings.Contains(errOut.String(), "made a new local CA") {
		t.Errorf("stderr = %q, want it to say a CA was made", errOut.String())
	}
	for _, want := range []string{
		"\n" + cert + "\n",
		"export NODE_EXTRA_CA_CERTS=" + cert + "\n",
		"export CURL_CA_BUNDLE=",
		"curl --cacert ",
		"export REQUESTS_CA_BUNDLE=",
		"export SSL_CERT_FILE=",
		"export HTTPS_PROXY=http://127.0.0.1:8899\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, ".foldproxy", "ca", "ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v, want mode 0600", fi, err)
	}
	if strings.Contains(out.String(), "PRIVATE KEY") {
		t.Error("the key is printed")
	}

	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"ca", "--state", filepath.Join(dir, ".foldproxy"), "--cert"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("foldproxy ca --cert: exit %d: %s", code, errOut.String())
	}
	if out.String() != cert+"\n" || errOut.Len() != 0 {
		t.Errorf("--cert: stdout %q stderr %q, want the path only and no new CA", out.String(), errOut.String())
	}
	if code := run(context.Background(), []string{"ca"}, nil, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "--config or --state is required") {
		t.Errorf("foldproxy ca without a folder: exit %d, stderr %q", code, errOut.String())
	}
}

func TestServeProxyListenRefusals(t *testing.T) {
	t.Setenv("FOLDPROXY_TOKEN", "")
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain.json", `{"mcpServers":{}}`)
	noPEM := write("nopem.json", `{"mcpServers":{},"foldproxy":{"proxy":{"extraRootsFile":"plain.json"}}}`)
	for _, tt := range []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--config", plain, "--listen", "127.0.0.1:0", "--proxy-listen", "0.0.0.0:0"}, "--proxy-listen 0.0.0.0:0 is not a loopback address: set foldproxy.authToken"},
		{[]string{"serve", "--config", noPEM, "--proxy-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"}, "extraRootsFile " + filepath.Join(dir, "plain.json") + ": no PEM certificate"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tt.args, strings.NewReader(""), &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), tt.says) {
			t.Errorf("foldproxy %s: exit %d, stderr:\n%s\nwant it to say %q", strings.Join(tt.args, " "), code, errOut.String(), tt.says)
		}
	}
}
