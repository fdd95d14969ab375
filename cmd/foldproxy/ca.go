package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/foldproxy/foldproxy/proxy/transparent"
)

// caCommand prints foldproxy's local CA (made on first use) and the
// environment lines that make clients trust it in transparent mode.
type caCommand struct {
	stdout, stderr io.Writer
}

// Run implements command.
func (c *caCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ca", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	configPath := fs.String("config", "", "configuration file, for its state folder and proxyListen")
	stateDir := fs.String("state", "", "state folder; default the config's stateDir, or .foldproxy beside the config")
	certOnly := fs.Bool("cert", false, "print only the path of the CA certificate")
	fs.Usage = func() {
		fmt.Fprintln(c.stderr, "usage: foldproxy ca (--config FILE | --state DIR) [--cert]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *configPath == "" && *stateDir == "" {
		fs.Usage()
		return errors.New("--config or --state is required (the CA lives in the state folder)")
	}
	dir := *stateDir
	proxyListen := ""
	if *configPath != "" {
		cfg, err := loadConfig(*configPath)
		if err != nil {
			return err
		}
		dir = stateDirOf(cfg, *stateDir)
		proxyListen = cfg.Settings.ProxyListen
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := prepareStateDir(dir); err != nil {
		return err
	}
	ca, created, err := transparent.LoadOrCreateCA(dir)
	if err != nil {
		return err
	}
	if *certOnly {
		fmt.Fprintln(c.stdout, ca.CertPath())
		return nil
	}
	if created {
		fmt.Fprintf(c.stderr, "foldproxy: made a new local CA in %s\n", filepath.Dir(ca.CertPath()))
	}
	writeCAHelp(c.stdout, ca, proxyListen)
	return nil
}

// writeCAHelp prints the CA certificate's path and the lines that make
// Node, curl and Python trust it.
func writeCAHelp(w io.Writer, ca *transparent.CA, proxyListen string) {
	cert := ca.CertPath()
	sum := sha256.Sum256(ca.Cert().Raw)
	fmt.Fprintf(w, "# foldproxy's local CA certificate (valid until %s, SHA-256 %X);\n", ca.Cert().NotAfter.Format("2006-01-02"), sum[:8])
	fmt.Fprintf(w, "# its private key stays in %s (mode 0600).\n", ca.KeyPath())
	fmt.Fprintln(w, cert)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "# Node (Claude Code, the MCP SDKs, mcp-remote): adds the CA to Node's own roots.")
	fmt.Fprintf(w, "export NODE_EXTRA_CA_CERTS=%s\n", cert)
	bundle := ca.BundlePath()
	if bundle != "" {
		fmt.Fprintln(w, "# curl and Python replace their roots with the file named: use the bundle")
		fmt.Fprintln(w, "# (the system's roots followed by foldproxy's CA), so tunnelled hosts still verify.")
	} else {
		fmt.Fprintln(w, "# curl and Python replace their roots with the file named; no system bundle was")
		fmt.Fprintln(w, "# found to combine, so only intercepted hosts will verify with these lines.")
		bundle = cert
	}
	fmt.Fprintf(w, "export CURL_CA_BUNDLE=%s    # or: curl --cacert %s\n", bundle, bundle)
	fmt.Fprintf(w, "export REQUESTS_CA_BUNDLE=%s\n", bundle)
	fmt.Fprintf(w, "export SSL_CERT_FILE=%s\n", bundle)
	fmt.Fprintln(w)
	addr := proxyListen
	if addr == "" {
		addr = "127.0.0.1:PORT"
		fmt.Fprintln(w, "# Then, with foldproxy serve --proxy-listen 127.0.0.1:PORT running:")
	} else {
		fmt.Fprintln(w, "# Then, with foldproxy serve running (foldproxy.proxyListen):")
	}
	fmt.Fprintf(w, "export HTTPS_PROXY=http://%s\n", addr)
}
