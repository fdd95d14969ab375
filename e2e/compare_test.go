package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// This file compares what a client sees directly from an upstream with what
// it sees through foldproxy: tools and prompts named "<server>__<name>",
// foldproxy's optional branch_id argument added to each forwarded tool's
// input schema, and everything else identical. Members are compared in
// order and byte for byte (whitespace between tokens aside).

// field is one member of a JSON object, its value as it was written.
type field struct {
	key   string
	value json.RawMessage
}

// objectFields returns the members of a JSON object in the order written.
func objectFields(raw []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("reading object: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", truncate(string(raw), 80))
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("reading key: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key is %T", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("member %q: %w", key, err)
		}
		out = append(out, field{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("closing object: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("trailing data after object")
	}
	return out, nil
}

func get(fields []field, key string) (json.RawMessage, bool) {
	for _, f := range fields {
		if f.key == key {
			return f.value, true
		}
	}
	return nil, false
}

func without(fields []field, key string) []field {
	return slices.DeleteFunc(slices.Clone(fields), func(f field) bool { return f.key == key })
}

// blank replaces the value of key with null.
func blank(fields []field, key string) []field {
	out := slices.Clone(fields)
	for i := range out {
		if out[i].key == key {
			out[i].value = json.RawMessage("null")
		}
	}
	return out
}

func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// diffFields compares two member lists: same keys, same order, same bytes.
func diffFields(path string, want, got []field) error {
	wk := make([]string, len(want))
	for i, f := range want {
		wk[i] = f.key
	}
	gk := make([]string, len(got))
	for i, f := range got {
		gk[i] = f.key
	}
	if !slices.Equal(wk, gk) {
		return fmt.Errorf("%s: members differ: direct %v, proxied %v", path, wk, gk)
	}
	for i := range want {
		if w, g := compact(want[i].value), compact(got[i].value); w != g {
			return fmt.Errorf("%s.%s differs:\n direct:  %s\n proxied: %s", path, want[i].key, truncate(w, 600), truncate(g, 600))
		}
	}
	return nil
}

// nameOf returns an item's "name" member.
func nameOf(raw []byte) (string, error) {
	var v struct {
		Name *string `json:"name"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	if v.Name == nil {
		return "", fmt.Errorf("item without a name: %s", truncate(string(raw), 120))
	}
	return *v.Name, nil
}

// diffNamed compares a tool or prompt listed directly with the same item
// listed through foldproxy. The proxied name must be prefix+direct name.
// With branchID, the proxied item must be a tool whose inputSchema has the
// optional branch_id property; it is removed before the comparison.
func diffNamed(direct, proxied []byte, prefix string, branchID bool) error {
	df, err := objectFields(direct)
	if err != nil {
		return fmt.Errorf("direct item: %w", err)
	}
	pf, err := objectFields(proxied)
	if err != nil {
		return fmt.Errorf("proxied item: %w", err)
	}
	dn, _ := get(df, "name")
	pn, _ := get(pf, "name")
	var dName, pName string
	if err := json.Unmarshal(dn, &dName); err != nil {
		return fmt.Errorf("direct item name: %w", err)
	}
	if err := json.Unmarshal(pn, &pName); err != nil {
		return fmt.Errorf("proxied item name: %w", err)
	}
	if pName != prefix+dName {
		return fmt.Errorf("proxied name %q, want %q", pName, prefix+dName)
	}
	if branchID {
		ds, _ := get(df, "inputSchema")
		ps, ok := get(pf, "inputSchema")
		if !ok {
			return fmt.Errorf("%s: proxied tool has no inputSchema", pName)
		}
		if err := diffSchema(pName, ds, ps); err != nil {
			return err
		}
		// Compared above: keep the member's position, not its value.
		df, pf = blank(df, "inputSchema"), blank(pf, "inputSchema")
	}
	return diffFields(pName, without(df, "name"), without(pf, "name"))
}

// diffSchema compares input schemas, the proxied one with branch_id.
func diffSchema(tool string, direct, proxied []byte) error {
	pf, err := objectFields(proxied)
	if err != nil {
		return fmt.Errorf("%s: proxied inputSchema: %w", tool, err)
	}
	var df []field
	if direct != nil {
		if df, err = objectFields(direct); err != nil {
			return fmt.Errorf("%s: direct inputSchema: %w", tool, err)
		}
	}
	props, ok := get(pf, "properties")
	if !ok {
		return fmt.Errorf("%s: proxied inputSchema has no properties, want the optional branch_id", tool)
	}
	propFields, err := objectFields(props)
	if err != nil {
		return fmt.Errorf("%s: proxied inputSchema.properties: %w", tool, err)
	}
	bid, ok := get(propFields, "branch_id")
	if !ok {
		return fmt.Errorf("%s: proxied inputSchema.properties has no branch_id", tool)
	}
	var bidSchema struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(bid, &bidSchema); err != nil || bidSchema.Type != "string" {
		return fmt.Errorf("%s: branch_id schema %s, want type string", tool, bid)
	}
	if req, ok := get(pf, "required"); ok {
		var names []string
		if err := json.Unmarshal(req, &names); err == nil && slices.Contains(names, "branch_id") {
			return fmt.Errorf("%s: branch_id must be optional, but it is required", tool)
		}
	}
	if dp, ok := get(df, "properties"); ok {
		dpf, err := objectFields(dp)
		if err != nil {
			return fmt.Errorf("%s: direct inputSchema.properties: %w", tool, err)
		}
		if err := diffFields(tool+".inputSchema.properties", dpf, without(propFields, "branch_id")); err != nil {
			return err
		}
	} else if len(propFields) != 1 {
		return fmt.Errorf("%s: direct inputSchema has no properties, proxied has %d besides branch_id", tool, len(propFields)-1)
	}
	return diffFields(tool+".inputSchema", without(df, "properties"), without(pf, "properties"))
}

// diffCatalog compares a direct list of tools or prompts with the proxied
// one: every direct item present under prefix+name and equal, nothing else
// besides the extra names allowed.
func diffCatalog(direct, proxied []json.RawMessage, prefix string, branchID bool, extra []string) []error {
	var errs []error
	byName := map[string]json.RawMessage{}
	for _, d := range direct {
		n, err := nameOf(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("direct: %w", err))
			continue
		}
		byName[prefix+n] = d
	}
	seen := map[string]bool{}
	for _, p := range proxied {
		n, err := nameOf(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("proxied: %w", err))
			continue
		}
		if seen[n] {
			errs = append(errs, fmt.Errorf("proxied: %q listed twice", n))
		}
		seen[n] = true
		d, ok := byName[n]
		if !ok {
			if !slices.Contains(extra, n) {
				errs = append(errs, fmt.Errorf("proxied: unexpected item %q", n))
			}
			continue
		}
		if err := diffNamed(d, p, prefix, branchID); err != nil {
			errs = append(errs, err)
		}
	}
	for n := range byName {
		if !seen[n] {
			errs = append(errs, fmt.Errorf("proxied: %q is missing", n))
		}
	}
	for _, n := range extra {
		if !seen[n] {
			errs = append(errs, fmt.Errorf("proxied: %q is missing", n))
		}
	}
	return errs
}

// diffExact compares two lists item by item, byte for byte (resources and
// resource templates, which foldproxy does not rename), in any order.
func diffExact(direct, proxied []json.RawMessage) []error {
	count := func(items []json.RawMessage) map[string]int {
		m := map[string]int{}
		for _, it := range items {
			m[compact(it)]++
		}
		return m
	}
	d, p := count(direct), count(proxied)
	var errs []error
	for k, n := range d {
		if p[k] != n {
			errs = append(errs, fmt.Errorf("direct item listed %d times directly, %d times through the proxy: %s", n, p[k], truncate(k, 300)))
		}
	}
	for k, n := range p {
		if _, ok := d[k]; !ok {
			errs = append(errs, fmt.Errorf("proxied item not listed directly (%d times): %s", n, truncate(k, 300)))
		}
	}
	return errs
}

// timestamps matches server-everything's "created at <local time>" in its
// dynamic resources, which differ between two reads.
var timestamps = regexp.MustCompile(`created at [0-9:]+(\s?[APap]\.?[Mm]\.?)?`)

func normalizeTimestamps(s string) string { return timestamps.ReplaceAllString(s, "created at <time>") }

// call is one request to make on both sides and compare.
type call struct {
	name   string // test name
	method string // tools/call, resources/read, prompts/get
	params map[string]any
	// named: params["name"] is prefixed through the proxy.
	named bool
	// normalize, if set, is applied to both compact results.
	normalize func(string) string
}

// compareCalls makes each call directly and through the proxy and requires
// identical results (JSON-RPC errors included).
func compareCalls(ctx context.Context, t *testing.T, direct, proxied *peer, prefix string, calls []call) {
	t.Helper()
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			pp := c.params
			if c.named {
				pp = map[string]any{}
				for k, v := range c.params {
					pp[k] = v
				}
				pp["name"] = prefix + c.params["name"].(string)
			}
			want, werr := direct.raw(ctx, c.method, c.params)
			got, gerr := proxied.raw(ctx, c.method, pp)
			if werr != nil || gerr != nil {
				// Both sides failing the same way is a match too; the
				// messages carry the peer's name, so compare what follows.
				if werr == nil || gerr == nil || afterPeer(werr) != afterPeer(gerr) {
					t.Fatalf("%s %v:\n direct error:  %v\n proxied error: %v", c.method, c.params, werr, gerr)
				}
				return
			}
			w, g := compact(want), compact(got)
			if c.normalize != nil {
				w, g = c.normalize(w), c.normalize(g)
			}
			if w != g {
				t.Errorf("%s %v differs:\n direct:  %s\n proxied: %s", c.method, c.params, truncate(w, 2000), truncate(g, 2000))
			}
		})
	}
}

func afterPeer(err error) string {
	s := err.Error()
	if i := strings.Index(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// compareCatalogs compares tools, prompts, resources and resource templates
// listed directly and through the proxy. fold says the proxied side is
// foldproxy (prefixed names, branch_id, fold tools).
func compareCatalogs(ctx context.Context, t *testing.T, direct, proxied *peer, prefix string, fold bool) {
	t.Helper()
	extraTools := []string(nil)
	if fold {
		extraTools = foldTools
	}
	lists := []struct {
		method, key string
		named       bool
		extra       []string
		branchID    bool
	}{
		{"tools/list", "tools", true, extraTools, fold},
		{"prompts/list", "prompts", true, nil, false},
		{"resources/list", "resources", false, nil, false},
		{"resources/templates/list", "resourceTemplates", false, nil, false},
	}
	for _, l := range lists {
		t.Run(l.method, func(t *testing.T) {
			want, werr := direct.rawList(ctx, l.method, l.key)
			got, gerr := proxied.rawList(ctx, l.method, l.key)
			if werr != nil {
				// The upstream does not serve this list: the proxy may
				// answer with an empty list or the same error.
				if gerr == nil && len(got) > 0 {
					t.Fatalf("direct %s failed (%v) but the proxy listed %d items", l.method, werr, len(got))
				}
				return
			}
			if gerr != nil {
				t.Fatalf("through the proxy: %v", gerr)
			}
			var errs []error
			if l.named {
				errs = diffCatalog(want, got, prefix, l.branchID, l.extra)
			} else {
				errs = diffExact(want, got)
			}
			for _, err := range errs {
				t.Error(err)
			}
			t.Logf("%s: %d items directly, %d through the proxy", l.method, len(want), len(got))
		})
	}
}

func TestDiffNamed(t *testing.T) {
	direct := `{"name":"echo","description":"Echoes","inputSchema":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]},"annotations":{"readOnlyHint":true}}`
	tests := []struct {
		name     string
		proxied  string
		branchID bool
		wantErr  string // "" for no error
	}{
		{"same with branch_id", `{"name":"ev__echo","description":"Echoes","inputSchema":{"type":"object","properties":{"message":{"type":"string"},"branch_id":{"type":"string","description":"x"}},"required":["message"]},"annotations":{"readOnlyHint":true}}`, true, ""},
		{"whitespace differs", `{"name": "ev__echo", "description": "Echoes", "inputSchema": {"type":"object","properties":{"message":{"type":"string"},"branch_id":{"type":"string"}},"required":["message"]}, "annotations": {"readOnlyHint": true}}`, true, ""},
		{"no prefix", `{"name":"echo","description":"Echoes","inputSchema":{"type":"object","properties":{"message":{"type":"string"},"branch_id":{"type":"string"}},"required":["message"]},"annotations":{"readOnlyHint":true}}`, true, `proxied name "echo", want "ev__echo"`},
		{"branch_id missing", `{"name":"ev__echo","description":"Echoes","inputSchema":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]},"annotations":{"readOnlyHint":true}}`, true, "has no branch_id"},
		{"branch_id required", `{"name":"ev__echo","description":"Echoes","inputSchema":{"type":"object","properties":{"message":{"type":"string"},"branch_id":{"type":"string"}},"required":["message","branch_id"]},"annotations":{"readOnlyHint":true}}`, true, "must be optional"},
		{"annotation changed", `{"name":"ev__echo","description":"Echoes","inputSchema":{"type":"object","properties":{"message":{"type":"string"},"branch_id":{"type":"string"}},"required":["message"]},"annotations":{"readOnlyHint":false}}`, true, "ev__echo.annotations differs"},
		{"members reordered", `{"name":"ev__echo","inputSchema":{"type":"object","properties":{"message":{"type":"string"},"branch_id":{"type":"string"}},"required":["message"]},"description":"Echoes","annotations":{"readOnlyHint":true}}`, true, "members differ"},
		{"property schema changed", `{"name":"ev__echo","description":"Echoes","inputSchema":{"type":"object","properties":{"message":{"type":"number"},"branch_id":{"type":"string"}},"required":["message"]},"annotations":{"readOnlyHint":true}}`, true, "properties.message differs"},
		{"prompt without branch_id", `{"name":"ev__echo","description":"Echoes","inputSchema":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]},"annotations":{"readOnlyHint":true}}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := diffNamed([]byte(direct), []byte(tt.proxied), "ev__", tt.branchID)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("diffNamed: %v, want no error", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("diffNamed: no error, want one containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("diffNamed: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDiffSchemaWithoutProperties(t *testing.T) {
	tests := []struct {
		name, direct, proxied string
		wantErr               bool
	}{
		{"only branch_id added", `{"type":"object"}`, `{"type":"object","properties":{"branch_id":{"type":"string"}}}`, false},
		{"extra property", `{"type":"object"}`, `{"type":"object","properties":{"x":{},"branch_id":{"type":"string"}}}`, true},
		{"type changed", `{"type":"object"}`, `{"type":"array","properties":{"branch_id":{"type":"string"}}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := diffSchema("t", []byte(tt.direct), []byte(tt.proxied))
			if (err != nil) != tt.wantErr {
				t.Fatalf("diffSchema: %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestNormalizeTimestamps(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Resource 1: This is a plaintext resource created at 5:46:08 AM", "Resource 1: This is a plaintext resource created at <time>"},
		{"created at 17:46:08\"}", "created at <time>\"}"},
		{"nothing to do", "nothing to do"},
	}
	for _, tt := range tests {
		if got := normalizeTimestamps(tt.in); got != tt.want {
			t.Errorf("normalizeTimestamps(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
