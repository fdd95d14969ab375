package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/intercept/secretgen"
)

// The leak test (issue 4): the leaky upstream plants generated secrets in
// every channel an upstream has to the agent, each plain, base64-encoded
// and inside escaped JSON, and the test checks that nothing of them reaches
// the client through foldproxy: not a secret, and no 16-character piece of
// one or of its base64 encoding, in the raw bytes the client read from
// foldproxy (stdout over stdio, response bodies over HTTP), nor in
// foldproxy's stderr, nor in the audit log.
//
// TestLeakCheckSeesUnscrubbed runs the same exercise with scrubbing
// disabled and requires the check to find leaks in every channel, so that
// a pass of TestLeakScrubbed is not a blind checker's pass.

// leakSeed seeds the secrets leaky plants in these tests.
const leakSeed = 404

// leakWindow is the length of the pieces of a secret that must not
// survive: any 16 characters of a secret, or of its base64 encoding.
const leakWindow = 16

// redactedMarker starts every redaction the scrubber makes.
const redactedMarker = "[REDACTED:"

// plantedSecret is one secret of leaky's manifest.
type plantedSecret struct {
	Rule    string `json:"rule"`
	Value   string `json:"value"`
	Context string `json:"context"`
}

// planted is leaky's manifest (leaky -manifest) as these tests read it.
type planted struct {
	Secrets []plantedSecret     `json:"secrets"`
	Forms   map[string][]string `json:"forms"`
}

// leakyRand is the generator leaky draws its secrets from for a seed; it
// mirrors Rand in servers/leaky, so that the test knows what was planted
// without trusting the manifest alone.
func leakyRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, ^seed)) }

// readPlanted reads leaky's manifest and checks it against secretgen's
// secrets for the seed: the test must know exactly what was planted, and
// it must cover at least 30 of gitleaks' rules, the common ones included.
func readPlanted(t testing.TB, path string, seed uint64) *planted {
	t.Helper()
	return readPlantedFamily(t, path, seed, false)
}

// readPlantedFamily is readPlanted for leaky's secrets, or with long for
// leaky -long's: secretgen's long family, keys and tokens longer than any
// fixed scan window.
func readPlantedFamily(t testing.TB, path string, seed uint64, long bool) *planted {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading leaky's manifest: %v", err)
	}
	var m planted
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("leaky's manifest %s: %v", path, err)
	}
	want := secretgen.Generate(leakyRand(seed))
	if long {
		want = secretgen.Long(leakyRand(seed))
	}
	if len(m.Secrets) != len(want) {
		t.Fatalf("leaky planted %d secrets, secretgen gives %d for seed %d", len(m.Secrets), len(want), seed)
	}
	rules := map[string]bool{}
	for i, s := range m.Secrets {
		if s.Rule != want[i].RuleID || s.Value != want[i].Value || s.Context != want[i].Context {
			t.Fatalf("leaky's secret %d (%s) is not secretgen's (%s) for seed %d", i, s.Rule, want[i].RuleID, seed)
		}
		rules[s.Rule] = true
	}
	if long {
		n := map[string]int{}
		for _, s := range m.Secrets {
			if len(s.Value) > 4500 {
				n[s.Rule]++
			}
		}
		if n["private-key"] < 3 || n["jwt"] < 2 {
			t.Fatalf("leaky -long planted %v secrets over 4.5 KB, want at least 3 private keys and 2 JWTs", n)
		}
		return &m
	}
	if len(rules) < 30 {
		t.Fatalf("leaky planted %d rule types, want at least 30", len(rules))
	}
	for _, r := range []string{"aws-access-token", "github-pat", "gitlab-pat", "slack-bot-token", "stripe-access-token",
		"gcp-api-key", "openai-api-key", "anthropic-api-key", "npm-access-token", "pypi-upload-token",
		"sendgrid-api-token", "twilio-api-key", "private-key", "jwt", "generic-api-key"} {
		if !rules[r] {
			t.Errorf("leaky planted no %s secret", r)
		}
	}

	return &m
}

// needle is a piece of a planted secret that must never be seen.
type needle struct {
	secret int    // index in planted.Secrets
	form   string // "value" or "base64"
}

// needles returns every leakWindow-long piece of each secret's value and
// of its base64 encoding at each of the three alignments a value can have
// in a longer base64 text (only the characters that encode the value's
// own bits), with the secret each belongs to. A secret shorter than the
// window is its own needle.
func (m *planted) needles() map[string]needle {
	out := map[string]needle{}
	add := func(s string, n needle) {
		if len(s) < leakWindow {
			if len(s) > 0 {
				out[s] = n
			}
			return
		}
		for i := 0; i+leakWindow <= len(s); i++ {
			out[s[i:i+leakWindow]] = n
		}
	}
	for i, s := range m.Secrets {
		add(s.Value, needle{i, "value"})
		for a := range 3 {
			add(base64Core(s.Value, a), needle{i, "base64"})
		}
	}
	return out
}

// base64Core returns the characters of the standard base64 encoding of a
// text in which v starts a bytes (0, 1 or 2) into a 3-byte group that
// depend on v's bytes alone: they appear in any such encoding.
func base64Core(v string, a int) string {
	enc := base64.StdEncoding.EncodeToString(append(make([]byte, a), v...))
	var b strings.Builder
	for i := range enc {
		first, last := 6*i/8, (6*i+5)/8
		if first >= a && last < a+len(v) {
			b.WriteByte(enc[i])
		}
	}
	return b.String()
}

// leak is one needle found.
type leak struct {
	needle
	piece   string
	level   int    // levels of string escaping undone to find it
	context string // the text around it
}

// findLeaks looks for the needles in b as it is and with one to three
// levels of JSON/Go string escaping undone (a secret's newlines and quotes
// are escaped once per level of JSON it sits in). It returns at most one
// leak per secret and form.
func findLeaks(b []byte, needles map[string]needle) []leak {
	var out []leak
	seen := map[needle]bool{}
	view := b
	for level := 0; level <= 3; level++ {
		for i := 0; i+leakWindow <= len(view); i++ {
			n, ok := needles[string(view[i:i+leakWindow])]
			if !ok || seen[n] {
				continue
			}
			seen[n] = true
			lo, hi := max(i-60, 0), min(i+leakWindow+60, len(view))
			out = append(out, leak{needle: n, piece: string(view[i : i+leakWindow]), level: level, context: string(view[lo:hi])})
		}
		next := unescape(view)
		if bytes.Equal(next, view) {
			break
		}
		view = next
	}
	return out
}

// unescape undoes one level of JSON (and Go %q) string escaping wherever a
// backslash escape appears, leaving everything else as it is.
func unescape(b []byte) []byte {
	if bytes.IndexByte(b, '\\') < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 == len(b) {
			out = append(out, c)
			continue
		}
		switch e := b[i+1]; e {
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case '"', '\\', '/', '\'':
			out = append(out, e)
		case 'u':
			if i+6 <= len(b) {
				if r, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 32); err == nil {
					out = utf8.AppendRune(out, rune(r))
					i += 5
					continue
				}
			}
			out = append(out, c, e)
		default:
			out = append(out, c, e)
		}
		i++
	}
	return out
}

// describeLeaks formats leaks for a failure message, naming the secret's
// rule and form.
func describeLeaks(m *planted, leaks []leak) string {
	var lines []string
	for _, l := range leaks {
		lines = append(lines, fmt.Sprintf("  %s (secret %d) %s piece %q at escape level %d in …%q…",
			m.Secrets[l.secret].Rule, l.secret, l.form, l.piece, l.level, l.context))
	}
	sort.Strings(lines)
	if len(lines) > 40 {
		lines = append(lines[:40], fmt.Sprintf("  … and %d more", len(lines)-40))
	}
	return strings.Join(lines, "\n")
}

// rawTap keeps a copy of every byte a client read from foldproxy. It is
// safe for concurrent use.
type rawTap struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (r *rawTap) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.Write(p)
}

// mark returns the current length, for since.
func (r *rawTap) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.Len()
}

// since returns a copy of the bytes read after mark m.
func (r *rawTap) since(m int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.b.Bytes()[m:])
}

// tapBody copies a response body into a tap as it is read.
type tapBody struct {
	io.ReadCloser
	tap *rawTap
}

func (b tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.tap.Write(p[:n])
	return n, err
}

// tapTransport is an http.RoundTripper that records every response body.
type tapTransport struct {
	base http.RoundTripper
	tap  *rawTap
}

func (t tapTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = tapBody{resp.Body, t.tap}
	}
	return resp, err
}

// proxyRun is a foldproxy process and a client connected to it whose
// every received byte is recorded.
type proxyRun struct {
	peer   *peer
	tap    *rawTap
	proc   *process // its output is foldproxy's stderr (and, over HTTP, its empty stdout)
	state  string   // the state directory over stdio; "" over HTTP
	url    string   // the MCP URL over HTTP; "" over stdio
	addr   string   // the listen address over HTTP
	stdout bool     // the client reads foldproxy's stdout
}

// startTappedStdio runs "foldproxy serve" over stdio with its stdout read
// through a tap by an mcp-go client, and its stderr captured apart.
// extra are further serve flags.
func startTappedStdio(t testing.TB, cfg string, a *agent, extra ...string) *proxyRun {
	t.Helper()
	state := t.TempDir()
	args := append([]string{"serve", "--config", cfg, "--state", state}, extra...)
	cmd := exec.Command(proxyBin(t), args...)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	p := startProcess(t, "foldproxy stdio", cmd)
	// The child holds its own ends now.
	inR.Close()
	outW.Close()
	t.Cleanup(func() { outR.Close() })
	tap := &rawTap{}
	tr := transport.NewIO(io.TeeReader(outR, tap), inW, nil)
	return &proxyRun{peer: connect(t, "foldproxy stdio (tapped)", tr, a), tap: tap, proc: p, state: state, stdout: true}
}

// startTappedHTTP runs "foldproxy serve --listen" on a free loopback port
// and connects a streamable HTTP client whose response bodies are
// recorded.
func startTappedHTTP(t testing.TB, cfg string, a *agent) *proxyRun {
	t.Helper()
	url, p := startProxyHTTPProcess(t, cfg)
	tap := &rawTap{}
	hc := &http.Client{Transport: tapTransport{base: http.DefaultTransport, tap: tap}}
	tr, err := transport.NewStreamableHTTP(url, transport.WithContinuousListening(), transport.WithHTTPBasicClient(hc))
	if err != nil {
		t.Fatalf("streamable HTTP client for %s: %v", url, err)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	return &proxyRun{peer: connect(t, "foldproxy http (tapped)", tr, a), tap: tap, proc: p, url: url, addr: addr}
}

// leakyEntry runs the leaky helper with the given seed, writing its
// manifest to manifest.
func leakyEntry(t testing.TB, seed uint64, manifest string, extra ...string) map[string]any {
	t.Helper()
	args := append([]string{"-seed", strconv.FormatUint(seed, 10), "-manifest", manifest}, extra...)
	return stdioEntry(helperBin(t, "leaky"), args...)
}

// leakConfig writes a config with the leaky upstream (and any other
// servers given) and an audit log at auditPath synced on every record.
func leakConfig(t testing.TB, servers map[string]any, auditPath string, scrub bool) string {
	t.Helper()
	settings := map[string]any{"audit": map[string]any{"path": auditPath, "fsync": "always"}}
	if !scrub {
		settings["scrub"] = map[string]any{"disabled": true}
	}
	return writeConfig(t, servers, settings)
}

// channelCapture is what the client received while one channel was
// exercised.
type channelCapture struct {
	name string
	raw  []byte // the raw bytes read from foldproxy meanwhile
	// seen is what the client's handlers made of it (decoded messages,
	// notification params, requests received): the redaction markers
	// must show there.
	seen string
}

// exerciseLeakChannels drives every channel of the leaky upstream
// (prefixed "leaky__") through the run's client, one after the other, and
// returns what arrived on each. Every channel must deliver something: a
// notification or a server-to-client request that never arrives fails the
// test (dropping is only allowed when scanning fails, and here it must
// not). With scrubbed, what arrives must show redactions.
func exerciseLeakChannels(ctx context.Context, t *testing.T, run *proxyRun, scrubbed bool) []channelCapture {
	t.Helper()
	p := run.peer
	var caps []channelCapture
	outer := ctx
	capture := func(name string, f func() (string, error)) {
		t.Helper()
		// Each channel has its own deadline, so that one that hangs does
		// not take the others' time.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(outer, 30*time.Second)
		defer cancel()
		m := run.tap.mark()
		seen, err := f()
		if err != nil {
			t.Errorf("channel %s: %v", name, err)
		}
		caps = append(caps, channelCapture{name: name, raw: run.tap.since(m), seen: seen})
		if scrubbed && err == nil && !strings.Contains(seen, redactedMarker) {
			t.Errorf("channel %s: the client got no redaction marker; it received:\n%s", name, truncate(seen, 1500))
		}
	}
	// call calls a leaky tool; a tool error is an error unless the tool
	// is meant to return one.
	call := func(tool string, meta *mcp.Meta) (*mcp.CallToolResult, error) {
		req := mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "leaky__" + tool, Arguments: map[string]any{"encoding": "all"}}}
		req.Params.Meta = meta
		res, err := p.CallTool(ctx, req)
		if err == nil && res.IsError && tool != "leak_error" {
			return nil, fmt.Errorf("%s: tool error: %s", tool, truncate(resultText(res), 500))
		}
		return res, err
	}
	resultOf := func(tool string, wantError bool) func() (string, error) {
		return func() (string, error) {
			res, err := call(tool, nil)
			if err != nil {
				return "", fmt.Errorf("calling %s: %w", tool, err)
			}
			if res.IsError != wantError {
				// leak_error's is checked here; call reports the others.
				return "", fmt.Errorf("%s: isError %v, want %v: %s", tool, res.IsError, wantError, truncate(resultText(res), 300))
			}
			b, err := json.Marshal(res)
			return string(b), err
		}
	}
	capture("result text", resultOf("leak_text", false))
	capture("structuredContent", resultOf("leak_structured", false))
	capture("embedded resources", resultOf("leak_embedded", false))
	capture("error result", resultOf("leak_error", true))
	capture("json-rpc error", func() (string, error) {
		res, err := call("leak_rpc_error", nil)
		if err == nil {
			return "", fmt.Errorf("leak_rpc_error: got a result, want a JSON-RPC error: %s", truncate(resultText(res), 300))
		}
		return err.Error(), nil
	})
	for _, enc := range []string{"plain", "base64", "json"} {
		capture("resource read "+enc, func() (string, error) {
			res, err := p.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: "leaky://secrets/" + enc}})
			if err != nil {
				return "", err
			}
			b, err := json.Marshal(res)
			return string(b), err
		})
	}
	capture("prompt messages", func() (string, error) {
		res, err := p.GetPrompt(ctx, mcp.GetPromptRequest{Params: mcp.GetPromptParams{Name: "leaky__leaky_prompt", Arguments: map[string]string{"encoding": "all"}}})
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(res)
		return string(b), err
	})
	capture("logging notification", func() (string, error) {
		if err := p.SetLevel(ctx, mcp.SetLevelRequest{Params: mcp.SetLevelParams{Level: mcp.LoggingLevelDebug}}); err != nil {
			return "", fmt.Errorf("logging/setLevel: %w", err)
		}
		if _, err := call("leak_log", nil); err != nil {
			return "", err
		}
		notes, err := p.notes.waitFor(ctx, 1, func(n note) bool {
			return n.Method == string(mcp.MethodNotificationMessage) && strings.Contains(string(n.Params), `"leaky"`)
		})
		if err != nil {
			return "", err
		}
		return string(notes[len(notes)-1].Params), nil
	})
	capture("progress notification", func() (string, error) {
		// The call is held open until the notification has arrived (see
		// leaky's leak_progress): progress after the response is dropped.
		token := newToken("leak")
		done := make(chan error, 1)
		go func() {
			req := mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "leaky__leak_progress", Arguments: map[string]any{"encoding": "all", "hold": true}}}
			req.Params.Meta = &mcp.Meta{ProgressToken: token}
			res, err := p.CallTool(ctx, req)
			if err == nil && res.IsError {
				err = fmt.Errorf("leak_progress: tool error: %s", truncate(resultText(res), 500))
			}
			done <- err
		}()
		notes, err := p.notes.waitFor(ctx, 1, progressFor(token))
		if _, rerr := call("leak_release", nil); rerr != nil && err == nil {
			err = rerr
		}
		if cerr := <-done; cerr != nil && err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
		return string(notes[0].Params), nil
	})
	capture("elicitation request", func() (string, error) {
		n := len(p.agent.elicitationRequests())
		res, err := call("leak_elicit", nil)
		if err != nil {
			return "", err
		}
		reqs := p.agent.elicitationRequests()
		if len(reqs) == n {
			return "", fmt.Errorf("the client got no elicitation request; leak_elicit said %q", truncate(resultText(res), 300))
		}
		b, err := json.Marshal(reqs[len(reqs)-1].Params)
		return string(b), err
	})
	capture("sampling request", func() (string, error) {
		n := len(p.agent.samplingRequests())
		res, err := call("leak_sample", nil)
		if err != nil {
			return "", err
		}
		reqs := p.agent.samplingRequests()
		if len(reqs) == n {
			return "", fmt.Errorf("the client got no sampling request; leak_sample said %q", truncate(resultText(res), 300))
		}
		if !strings.Contains(resultText(res), samplingReply) {
			return "", fmt.Errorf("leak_sample did not get the client's answer back: %q", truncate(resultText(res), 300))
		}
		b, err := json.Marshal(reqs[len(reqs)-1].CreateMessageParams)
		return string(b), err
	})
	return caps
}

// waitManifest waits until leaky has written its manifest (it does before
// serving; foldproxy starts it in the background).
func waitManifest(ctx context.Context, t testing.TB, path string) {
	t.Helper()
	for {
		if st, err := os.Stat(path); err == nil && st.Size() > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("leaky wrote no manifest at %s: %v", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestLeakScrubbed(t *testing.T) {
	fronts := []struct {
		name  string
		start func(t *testing.T, cfg string) *proxyRun
		long  bool // leaky plants the long family (keys, JWTs of 5-12 KB)
	}{
		{"stdio", func(t *testing.T, cfg string) *proxyRun { return startTappedStdio(t, cfg, nil) }, false},
		{"http", func(t *testing.T, cfg string) *proxyRun { return startTappedHTTP(t, cfg, nil) }, false},
		{"stdio-long", func(t *testing.T, cfg string) *proxyRun { return startTappedStdio(t, cfg, nil) }, true},
		{"http-long", func(t *testing.T, cfg string) *proxyRun { return startTappedHTTP(t, cfg, nil) }, true},
	}
	for _, front := range fronts {
		t.Run(front.name, func(t *testing.T) {
			ctx := testContext(t, 3*time.Minute)
			dir := t.TempDir()
			manifest, auditPath := filepath.Join(dir, "manifest.json"), filepath.Join(dir, "audit.jsonl")
			var extra []string
			if front.long {
				extra = []string{"-long"}
			}
			cfg := leakConfig(t, map[string]any{"leaky": leakyEntry(t, leakSeed, manifest, extra...)}, auditPath, true)
			run := front.start(t, cfg)
			waitManifest(ctx, t, manifest)
			m := readPlantedFamily(t, manifest, leakSeed, front.long)
			needles := m.needles()

			caps := exerciseLeakChannels(ctx, t, run, true)
			if run.state != "" {
				callWithSecretArgs(ctx, t, run, m)
				if leaks := stateLeaks(t, run.state, needles); len(leaks) > 0 {
					t.Errorf("the state directory (the archive) holds %d pieces of planted secrets:\n%s", len(leaks), describeLeaks(m, leaks))
				}
			}
			for _, c := range caps {
				if leaks := findLeaks(c.raw, needles); len(leaks) > 0 {
					t.Errorf("channel %s: %d pieces of planted secrets reached the client:\n%s", c.name, len(leaks), describeLeaks(m, leaks))
				}
				if len(c.raw) == 0 {
					t.Errorf("channel %s: the client read nothing from foldproxy", c.name)
				}
			}
			// Everything the client ever read, catalogue and handshake included.
			if leaks := findLeaks(run.tap.since(0), needles); len(leaks) > 0 {
				t.Errorf("the client's whole input holds %d pieces of planted secrets:\n%s", len(leaks), describeLeaks(m, leaks))
			}
			if leaks := findLeaks([]byte(run.proc.out.String()), needles); len(leaks) > 0 {
				t.Errorf("foldproxy's stderr holds %d pieces of planted secrets:\n%s", len(leaks), describeLeaks(m, leaks))
			}
			audit, err := os.ReadFile(auditPath)
			if err != nil {
				t.Fatalf("reading the audit log: %v", err)
			}
			if leaks := findLeaks(audit, needles); len(leaks) > 0 {
				t.Errorf("the audit log holds %d pieces of planted secrets:\n%s", len(leaks), describeLeaks(m, leaks))
			}
			// The audit log saw the redactions of the forwarded results.
			redacted := map[string]int{}
			err = intercept.ReadAudit([]string{auditPath}, func(r intercept.Record) error {
				if r.Kind == intercept.KindCall && r.Upstream == "leaky" {
					for _, n := range r.Redactions {
						redacted[r.Tool] += n
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("reading the audit log: %v", err)
			}
			for _, tool := range []string{"leak_text", "leak_structured", "leak_embedded", "leak_error", "leak_rpc_error", "leaky_prompt", "leaky://secrets/plain"} {
				if redacted[tool] < len(m.Secrets) {
					t.Errorf("audit: %s has %d redactions recorded, want at least one per planted secret (%d)", tool, redacted[tool], len(m.Secrets))
				}
			}
		})
	}
}

// TestLeakCheckSeesUnscrubbed proves the leak check: with scrubbing
// disabled in the config, every channel must carry pieces of every
// planted secret in both forms, as the check sees them.
func TestLeakCheckSeesUnscrubbed(t *testing.T) {
	t.Run("generated", func(t *testing.T) { checkSeesUnscrubbed(t, false) })
	t.Run("long", func(t *testing.T) { checkSeesUnscrubbed(t, true) })
}

func checkSeesUnscrubbed(t *testing.T, long bool) {
	ctx := testContext(t, 3*time.Minute)
	dir := t.TempDir()
	manifest, auditPath := filepath.Join(dir, "manifest.json"), filepath.Join(dir, "audit.jsonl")
	var extra []string
	if long {
		extra = []string{"-long"}
	}
	cfg := leakConfig(t, map[string]any{"leaky": leakyEntry(t, leakSeed, manifest, extra...)}, auditPath, false)
	run := startTappedStdio(t, cfg, nil)
	waitManifest(ctx, t, manifest)
	m := readPlantedFamily(t, manifest, leakSeed, long)
	needles := m.needles()
	// The archive check sees the arguments when nothing scrubs them.
	callWithSecretArgs(ctx, t, run, m)
	onDisk := map[needle]bool{}
	for _, l := range stateLeaks(t, run.state, needles) {
		onDisk[l.needle] = true
	}
	for i, s := range m.Secrets {
		if !onDisk[needle{i, "value"}] {
			t.Errorf("unscrubbed: the state directory check does not see the %s secret %d passed in arguments", s.Rule, i)
		}
	}
	for _, c := range exerciseLeakChannels(ctx, t, run, false) {
		found := map[needle]bool{}
		for _, l := range findLeaks(c.raw, needles) {
			found[l.needle] = true
		}
		// A resource holds one encoding; every other channel carries
		// every secret in every form.
		forms := []string{"value", "base64"}
		switch c.name {
		case "resource read plain", "resource read json":
			forms = []string{"value"}
		case "resource read base64":
			forms = []string{"base64"}
		}
		var missing []string
		for i, s := range m.Secrets {
			for _, form := range forms {
				if !found[needle{i, form}] {
					missing = append(missing, s.Rule+" "+form)
				}
			}
		}
		if len(missing) > 0 {
			t.Errorf("channel %s, unscrubbed: the check does not see %d planted pieces: %s", c.name, len(missing), strings.Join(missing, ", "))
		}
	}
}

// callWithSecretArgs calls a leaky tool with every planted secret in its
// arguments, as an agent that pastes a key into a command would: the
// upstream gets them, the archive must not keep them.
func callWithSecretArgs(ctx context.Context, t *testing.T, run *proxyRun, m *planted) {
	t.Helper()
	var lines []string
	for _, s := range m.Secrets {
		lines = append(lines, s.Context)
	}
	req := mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "leaky__leak_text", Arguments: map[string]any{
		"encoding": "plain", "note": strings.Join(lines, "\n"),
	}}}
	if _, err := run.peer.CallTool(ctx, req); err != nil {
		t.Fatalf("calling leak_text with secrets in its arguments: %v", err)
	}
}

// stateLeaks looks for the needles in every file of a state directory
// (Badger's write-ahead log and value log hold what was archived).
func stateLeaks(t *testing.T, dir string, needles map[string]needle) []leak {
	t.Helper()
	var out []leak
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if d.Type()&os.ModeSocket != 0 {
			return nil // the daemon's socket holds no data
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Badger preallocates its logs: what follows the last write is zeros.
		out = append(out, findLeaks(bytes.TrimRight(b, "\x00"), needles)...)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the state directory: %v", err)
	}
	return out
}
