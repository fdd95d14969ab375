package policy

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseDefaults(t *testing.T) {
	for _, in := range []string{"", "null", "{}", "  "} {
		got, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		d := Default()
		if got.Fold.DefaultBudget != d.Fold.DefaultBudget || got.Tokens.Encoding != "o200k_base" ||
			got.Fold.MaxDepth != 3 || got.Fold.DefaultTimeout.D() != 300*time.Second || !got.BranchIDEnabled() {
			t.Errorf("Parse(%q) = %+v, want defaults", in, got)
		}
		m := got.Memory
		if m.Backend != "badger" || m.MaxItems != 10 || m.MinConfidence != 0.7 || m.InjectionRatio != 0.2 ||
			!m.BlockSuspiciousEnabled() || m.Disabled || m.MaxUnused.D() != 90*24*time.Hour {
			t.Errorf("Parse(%q).Memory = %+v, want defaults", in, m)
		}
	}
}

func TestParseValues(t *testing.T) {
	got, err := Parse([]byte(`{"separator":"--","branchIdArg":false,"fold":{"defaultBudget":100,"maxBudget":200,"defaultTimeout":"30s","maxTimeout":60},"tokens":{"encoding":"cl100k_base"},"audit":{"fsync":"always"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Separator != "--" || got.BranchIDEnabled() || got.Fold.DefaultBudget != 100 || got.Fold.MaxBudget != 200 ||
		got.Fold.DefaultTimeout.D() != 30*time.Second || got.Fold.MaxTimeout.D() != time.Minute ||
		got.Tokens.Encoding != "cl100k_base" || got.Audit.Fsync != "always" {
		t.Errorf("got %+v", got)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	tests := []parseErrorCase{
		{`{"fold":{"defaultBudget":-1}}`, "fold.defaultBudget", ""},
		{`{"fold":{"defaultBudget":50000}}`, "fold.defaultBudget", ""},
		{`{"fold":{"defaultTimeout":"20m"}}`, "fold.defaultTimeout", ""},
		{`{"fold":{"defaultTimeout":"soon"}}`, "soon", ""},
		{`{"fold":{"thresholds":[0.9,0.8,0.95]}}`, "fold.thresholds[1]", ""},
		{`{"fold":{"thresholds":[0.5]}}`, "fold.thresholds", ""},
		{`{"fold":{"guaranteedPerSession":-1}}`, "fold.guaranteedPerSession", ""},
		{`{"fold":{"guaranteedPerSession":101}}`, "fold.guaranteedPerSession", ""},
		{`{"tokens":{"encoding":"p50k"}}`, "tokens.encoding", ""},
		{`{"audit":{"fsync":"sometimes"}}`, "audit.fsync", ""},
		{`{"scrub":{"chunkBytes":100,"overlapBytes":200}}`, "scrub.overlapBytes", ""},
		{`{"separator":"a b"}`, "separator", ""},
		{`{"budget":1}`, `unknown field "budget"`, "(at foldproxy.budget)"},
		{`{"fold":{"maxDepth":"3"}}`, "maxDepth", ""},
		{`{"upstreams":{"fs":{"denyTools":["[x"]}}}`, "upstreams.fs", ""},
		{`[1]`, "foldproxy", ""},
		{`{"upstreams":{"fs":{"prefix":"a b"}}}`, "upstreams.fs.prefix", ""},
		{`{"upstreams":{"fs":{"callTimeout":"-1s"}}}`, "upstreams.fs.callTimeout", ""},
		{`{"memory":{"backend":"sqlite"}}`, "memory.backend", ""},
		{`{"memory":{"maxItems":-1}}`, "memory.maxItems", ""},
		{`{"memory":{"minConfidence":1.5}}`, "memory.minConfidence", ""},
		{`{"memory":{"injectionRatio":-0.2}}`, "memory.injectionRatio", ""},
		{`{"memory":{"penalty":2}}`, "memory.penalty", ""},
		{`{"memory":{"maxUnused":"-1h"}}`, "memory.maxUnused", ""},
		{`{"memory":{"qdrant":{"collection":"a/b"}}}`, "memory.qdrant.collection", ""},
		{`{"memory":{"embeddings":{"url":"localhost:8080"}}}`, "memory.embeddings.url", ""},
		{`{"daemonListen":"0.0.0.0:8765"}`, "daemonListen", "loopback"},
		{`{"daemonListen":"example.com:80"}`, "daemonListen", "loopback"},
		{`{"daemonListen":"127.0.0.1"}`, "daemonListen", "host:port"},
		{`{"daemonListen":"127.0.0.1:99999"}`, "daemonListen", "port"},
	}
	checkParseErrors(t, tests)
}

// TestDaemonListen: the daemon's address defaults to a loopback port of
// the system's choosing; "off" and loopback addresses are accepted.
func TestDaemonListen(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                                DefaultDaemonListen,
		`{"daemonListen":"off"}`:            DaemonListenOff,
		`{"daemonListen":"127.0.0.1:8765"}`: "127.0.0.1:8765",
		`{"daemonListen":"[::1]:0"}`:        "[::1]:0",
		`{"daemonListen":"localhost:9000"}`: "localhost:9000",
	} {
		s, err := Parse([]byte(in))
		if err != nil || s.DaemonListen != want {
			t.Errorf("Parse(%s): daemonListen %q, %v; want %q", in, s.DaemonListen, err, want)
		}
	}
}

// parseErrorCase is a configuration Parse refuses: its error wraps
// ErrInvalid, names field and says why (when not empty).
type parseErrorCase struct{ in, field, why string }

func checkParseErrors(t *testing.T, tests []parseErrorCase) {
	t.Helper()
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in))
		if err == nil {
			t.Errorf("Parse(%s): no error, want one naming %s", tt.in, tt.field)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%s): %v does not wrap ErrInvalid", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("Parse(%s) = %q, want it to name %s and say %q", tt.in, err, tt.field, tt.why)
		}
	}
}

func TestLevelOf(t *testing.T) {
	th := Default().Fold.Thresholds
	tests := []struct {
		used, total int
		want        Level
	}{
		{0, 100, Normal}, {69, 100, Normal}, {70, 100, Caution}, {84, 100, Caution},
		{85, 100, Warning}, {94, 100, Warning}, {95, 100, Critical}, {150, 100, Critical},
		{1000, 0, Normal},
	}
	for _, tt := range tests {
		if got := LevelOf(tt.used, tt.total, th); got != tt.want {
			t.Errorf("LevelOf(%d, %d) = %s, want %s", tt.used, tt.total, got, tt.want)
		}
	}
	if Critical.String() != "critical" || Level(9).String() != "unknown" {
		t.Error("level names")
	}
}

func TestParseLevel(t *testing.T) {
	tests := []struct {
		name   string
		want   Level
		wantOK bool
	}{
		{"normal", Normal, true}, {"caution", Caution, true}, {"warning", Warning, true}, {"critical", Critical, true},
		{"", Normal, false}, {"unknown", Normal, false}, {"Critical", Normal, false},
	}
	for _, tt := range tests {
		if got, ok := ParseLevel(tt.name); got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseLevel(%q) = %s, %v; want %s, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
	for l := Normal; l <= Critical; l++ {
		if got, ok := ParseLevel(l.String()); got != l || !ok {
			t.Errorf("ParseLevel(%s.String()) = %s, %v", l, got, ok)
		}
	}
}

func TestToolAllowed(t *testing.T) {
	s := Default()
	s.Upstreams = map[string]Upstream{
		"fs":  {DenyTools: []string{"write_*"}},
		"web": {AllowTools: []string{"search", "fetch*"}, DenyTools: []string{"fetch_raw"}},
	}
	tests := []struct {
		up, tool string
		want     bool
	}{
		{"fs", "read_file", true}, {"fs", "write_file", false},
		{"web", "search", true}, {"web", "fetch_page", true}, {"web", "fetch_raw", false}, {"web", "post", false},
		{"other", "anything", true},
	}
	empty := ""
	s.Upstreams["solo"] = Upstream{Prefix: &empty}
	if s.NamePrefix("solo") != "" || s.NamePrefix("fs") != "fs__" {
		t.Errorf("NamePrefix: solo=%q fs=%q", s.NamePrefix("solo"), s.NamePrefix("fs"))
	}
	for _, tt := range tests {
		if got := s.ToolAllowed(tt.up, tt.tool); got != tt.want {
			t.Errorf("ToolAllowed(%s, %s) = %v, want %v", tt.up, tt.tool, got, tt.want)
		}
	}
}

func TestMayExceedShare(t *testing.T) {
	f := Default().Fold // 10 per session, 100 per instance, 2 guaranteed
	tests := []struct {
		name                   string
		held, active, reserved int
		want                   bool
	}{
		{"within the guarantee, instance nearly full", 1, 99, 50, true},
		{"beyond it, room for the others and a newcomer", 2, 10, 4, true},
		{"beyond it, the last free slots are the others'", 5, 94, 4, false},
		{"beyond it, only a newcomer's share left", 5, 98, 0, false},
		{"beyond it, one more than a newcomer's share", 5, 97, 0, true},
	}
	for _, tt := range tests {
		if got := f.MayExceedShare(tt.held, tt.active, tt.reserved); got != tt.want {
			t.Errorf("%s: MayExceedShare(%d, %d, %d) = %v, want %v", tt.name, tt.held, tt.active, tt.reserved, got, tt.want)
		}
	}
	f.GuaranteedPerSess = 50 // above maxActivePerSession: the reserve is off
	if got := f.Guaranteed(); got != 10 {
		t.Errorf("Guaranteed() = %d, want maxActivePerSession 10", got)
	}
}

func TestCallTimeout(t *testing.T) {
	s, err := Parse([]byte(`{"upstreams":{"slow":{"callTimeout":"90s"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CallTimeout("slow"); got != 90*time.Second {
		t.Errorf("CallTimeout(slow) = %s, want 1m30s", got)
	}
	if got := s.CallTimeout("other"); got != DefaultCallTimeout {
		t.Errorf("CallTimeout(other) = %s, want the default %s", got, DefaultCallTimeout)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"fold":{"defaultBudget":100}}`))
	f.Add([]byte(`{"scrub":{"timeout":"1s"},"audit":{"fsync":"never"}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted settings that do not validate: %v", err)
		}
	})
}

func TestUnknownFieldPath(t *testing.T) {
	checkParseErrors(t, []parseErrorCase{
		// The same name is known in one object and unknown in another: the
		// path names the one that is wrong.
		{`{"fold":{"defaultBudget":5000},"model":{"guidance":{"defaultBudget":1}}}`, `unknown field "defaultBudget"`, "(at foldproxy.model.guidance.defaultBudget)"},
		// Names match without regard to case, as encoding/json matches them.
		{`{"FOLD":{"DefaultBudget":5000,"typo":1}}`, `unknown field "typo"`, "(at foldproxy.FOLD.typo)"},
	})
}

func TestSeedAliases(t *testing.T) {
	s, err := Parse([]byte(`{"default_budget": 4096, "max_budget": 16384, "max_depth": 2, "default_timeout_seconds": 120,
		"max_timeout_seconds": 240, "injection_budget_ratio": 0.1, "memory_min_confidence": 0.6, "memory_max_items": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	f, m := s.Fold, s.Memory
	if f.DefaultBudget != 4096 || f.MaxBudget != 16384 || f.MaxDepth != 2 || f.DefaultTimeout.D() != 120*time.Second ||
		f.MaxTimeout.D() != 240*time.Second || m.InjectionRatio != 0.1 || m.MinConfidence != 0.6 || m.MaxItems != 3 {
		t.Fatalf("aliases not applied: %+v %+v", f, m)
	}
	// The defaults are the design's, whichever spelling.
	d, _ := Parse(nil)
	if d.Fold.DefaultBudget != 8192 || d.Fold.MaxBudget != 32768 || d.Fold.MaxDepth != 3 || d.Fold.DefaultTimeout.D() != 300*time.Second ||
		d.Fold.MaxTimeout.D() != 600*time.Second || d.Memory.InjectionRatio != 0.2 || d.Memory.MinConfidence != 0.7 || d.Memory.MaxItems != 10 {
		t.Fatalf("defaults: %+v %+v", d.Fold, d.Memory)
	}
	if _, err := Parse([]byte(`{"default_budget": 4096, "fold": {"defaultBudget": 2048}}`)); err == nil || !strings.Contains(err.Error(), "default_budget") || !strings.Contains(err.Error(), "fold.defaultBudget") {
		t.Fatalf("conflicting alias: %v", err)
	}
	if _, err := Parse([]byte(`{"default_budget": 4096, "fold": {"defaultBudget": 4096}}`)); err != nil {
		t.Fatalf("agreeing alias: %v", err)
	}
}
