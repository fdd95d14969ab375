package e2e

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// Direct checks of the Go helper servers, so that the proxied tests built
// on them stand on something proven.

func TestReplayServer(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	p := directStdioClient(t, nil, helperBin(t, "replay")) // default -data: e2e/testdata in the repository
	text, res := p.callText(ctx, t, "list", nil)
	if res.IsError {
		t.Fatalf("list: %s", text)
	}
	var entries []struct {
		ID    string `json:"id"`
		Steps int    `json:"steps"`
	}
	if err := json.Unmarshal([]byte(text), &entries); err != nil || len(entries) == 0 {
		t.Fatalf("list returned %q (%v), want a JSON array of trajectories", truncate(text, 200), err)
	}
	first := entries[0]
	out, res := p.callText(ctx, t, "run", map[string]any{"trajectory": first.ID, "step": 0})
	if res.IsError {
		t.Fatalf("run %s step 0: %s", first.ID, out)
	}
	errText, res := p.callText(ctx, t, "run", map[string]any{"trajectory": first.ID, "step": first.Steps})
	if !res.IsError || !strings.Contains(errText, "out of range") {
		t.Errorf("run past the last step: %q (isError %v), want an out-of-range tool error", errText, res.IsError)
	}
	for _, tt := range []struct {
		kind  string
		bytes int
	}{{"text", 10}, {"log", 1 << 10}, {"json", 100 << 10}, {"code", 1 << 20}, {"text", 0}} {
		got, res := p.callText(ctx, t, "emit", map[string]any{"bytes": tt.bytes, "kind": tt.kind})
		if res.IsError || len(got) != tt.bytes {
			t.Errorf("emit(%d, %s): %d bytes (isError %v), want exactly %d", tt.bytes, tt.kind, len(got), res.IsError, tt.bytes)
		}
	}
}

// leakManifest is what leaky -manifest writes.
type leakManifest struct {
	Secrets []struct {
		Rule  string `json:"rule"`
		Value string `json:"value"`
	} `json:"secrets"`
	Forms map[string][]string `json:"forms"`
}

func TestLeakyServerLeaksEverywhere(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	manifestPath := filepath.Join(t.TempDir(), "manifest.json")
	p := directStdioClient(t, nil, helperBin(t, "leaky"), "-seed", "7", "-manifest", manifestPath)
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatalf("reading the manifest: %v", err)
	}
	var m leakManifest
	if err := json.Unmarshal(b, &m); err != nil || len(m.Secrets) == 0 {
		t.Fatalf("manifest %s: %v", b, err)
	}
	// hasAll reports whether s carries every secret in every encoding.
	hasAll := func(s string) bool {
		for _, forms := range m.Forms {
			for _, f := range forms {
				if !strings.Contains(s, f) {
					return false
				}
			}
		}
		return true
	}
	raw := func(method string, params map[string]any) string {
		t.Helper()
		res, err := p.raw(ctx, method, params)
		if err != nil {
			return err.Error()
		}
		// Undo JSON string escaping so escaped-JSON forms compare as planted.
		var v any
		if err := json.Unmarshal(res, &v); err != nil {
			t.Fatalf("%s result: %v", method, err)
		}
		return flatten(v)
	}
	tool := func(name string, meta map[string]any) string {
		params := map[string]any{"name": name, "arguments": map[string]any{}}
		if meta != nil {
			params["_meta"] = meta
		}
		return raw("tools/call", params)
	}
	channels := []struct {
		name string
		got  func() string
	}{
		{"result text", func() string { return tool("leak_text", nil) }},
		{"structuredContent", func() string { return tool("leak_structured", nil) }},
		{"embedded resource", func() string { return tool("leak_embedded", nil) }},
		{"error result", func() string { return tool("leak_error", nil) }},
		{"json-rpc error", func() string { return tool("leak_rpc_error", nil) }},
		{"resource read", func() string {
			return raw("resources/read", map[string]any{"uri": "leaky://secrets/plain"}) +
				raw("resources/read", map[string]any{"uri": "leaky://secrets/base64"}) +
				raw("resources/read", map[string]any{"uri": "leaky://secrets/json"})
		}},
		{"prompt messages", func() string { return raw("prompts/get", map[string]any{"name": "leaky_prompt"}) }},
		{"logging notification", func() string {
			if err := p.SetLevel(ctx, mcp.SetLevelRequest{Params: mcp.SetLevelParams{Level: mcp.LoggingLevelDebug}}); err != nil {
				t.Fatalf("setLevel: %v", err)
			}
			tool("leak_log", nil)
			notes, err := p.notes.waitFor(ctx, 1, func(n note) bool { return n.Method == string(mcp.MethodNotificationMessage) })
			if err != nil {
				t.Fatal(err)
			}
			return flattenRaw(t, notes[0].Params)
		}},
		{"progress message", func() string {
			token := newToken("leak")
			tool("leak_progress", map[string]any{"progressToken": token})
			notes, err := p.notes.waitFor(ctx, 1, progressFor(token))
			if err != nil {
				t.Fatal(err)
			}
			return flattenRaw(t, notes[0].Params)
		}},
		{"elicitation request", func() string {
			tool("leak_elicit", nil)
			reqs := p.agent.elicitationRequests()
			if len(reqs) == 0 {
				return ""
			}
			return reqs[len(reqs)-1].Params.Message
		}},
		{"sampling request", func() string {
			tool("leak_sample", nil)
			reqs := p.agent.samplingRequests()
			if len(reqs) == 0 {
				return ""
			}
			b, _ := json.Marshal(reqs[len(reqs)-1].CreateMessageParams)
			return flattenRaw(t, b)
		}},
	}
	for _, ch := range channels {
		t.Run(ch.name, func(t *testing.T) {
			if got := ch.got(); !hasAll(got) {
				t.Errorf("%s does not carry every planted form:\n%s", ch.name, truncate(got, 1500))
			}
		})
	}
	// The base64 forms really encode the secrets.
	for i, f := range m.Forms["base64"] {
		dec, err := base64.StdEncoding.DecodeString(f)
		if err != nil || !strings.Contains(string(dec), m.Secrets[i].Value) {
			t.Errorf("base64 form %q does not encode %s (%v)", f, m.Secrets[i].Rule, err)
		}
	}
}

// flatten joins every string in a decoded JSON value, so that text held in
// nested JSON strings reads as it was planted.
func flatten(v any) string {
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			b.WriteString(x)
			b.WriteByte('\n')
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return b.String()
}

func flattenRaw(t testing.TB, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decoding %s: %v", truncate(string(raw), 200), err)
	}
	return flatten(v)
}
