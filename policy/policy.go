package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Key is the name of foldproxy's own settings object, which sits beside
// mcpServers in the configuration file.
const Key = "foldproxy"

// ErrInvalid is wrapped by every validation error; the message names the field.
var ErrInvalid = errors.New("invalid configuration")

// Duration is a time.Duration that reads from JSON as a Go duration string
// ("30s", "5m") or as a number of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts "1m30s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: want a Go duration such as \"30s\" or a number of seconds", s)
		}
		*d = Duration(v)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("duration %s: want a Go duration such as \"30s\" or a number of seconds", b)
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// Settings is foldproxy's own configuration. Every field is optional; the
// zero value of a field means its default (see Default).
type Settings struct {
	// Separator joins an upstream's name and a tool or prompt name
	// ("<server>__<tool>"). Default "__".
	Separator string `json:"separator,omitempty"`
	// BranchIDArg adds an optional branch_id property to every forwarded
	// tool's input schema, stripped before forwarding. Default true.
	BranchIDArg *bool `json:"branchIdArg,omitempty"`
	// Listen is the default address of the HTTP front; --listen overrides it.
	Listen string `json:"listen,omitempty"`
	// ProxyListen is the default address of the forward proxy of
	// transparent mode (HTTPS_PROXY); --proxy-listen overrides it. Empty:
	// no forward proxy.
	ProxyListen string `json:"proxyListen,omitempty"`
	// DaemonListen is the loopback address on which the project's shared
	// daemon (the one every stdio session of the project attaches to)
	// serves HTTP: the model front for all those sessions, MCP at /mcp,
	// /metrics and the /ui page. Default "127.0.0.1:0": a port of the
	// system's choosing, kept across restarts of the daemon while it is
	// free; "off" serves none. A fixed port is what "foldproxy import"
	// writes, so that a project's settings can name the model endpoint.
	DaemonListen string `json:"daemonListen,omitempty"`
	// AuthToken is the bearer token the HTTP front requires. When empty the
	// FOLDPROXY_TOKEN environment variable is used. Required whenever the
	// listen address is not loopback.
	AuthToken string `json:"authToken,omitempty"`
	// AllowedOrigins are extra Origin values accepted by the HTTP front
	// besides loopback origins.
	AllowedOrigins []string `json:"allowedOrigins,omitempty"`
	// StateDir holds the Badger store and, unless Audit.Path says otherwise,
	// the audit log. Default ".foldproxy" beside the config file.
	StateDir string `json:"stateDir,omitempty"`
	// MaxMessageBytes bounds one JSON-RPC message from the agent. Default 16 MiB.
	MaxMessageBytes int64 `json:"maxMessageBytes,omitempty"`
	// ReadyWait bounds how long a new session's first catalogue request
	// (tools/list...) waits for upstreams still in their first connection
	// attempt. Upstreams that come up later are announced with list_changed.
	// Default 500ms, so that an agent that gives tools/list a few seconds
	// (Claude Code: 5 s) always has its answer.
	ReadyWait Duration `json:"readyWait,omitempty"`

	Fold      Fold                `json:"fold"`
	Tokens    Tokens              `json:"tokens"`
	Scrub     Scrub               `json:"scrub"`
	Audit     Audit               `json:"audit"`
	Metrics   Metrics             `json:"metrics"`
	Memory    Memory              `json:"memory"`
	Model     Model               `json:"model"`
	Proxy     Proxy               `json:"proxy"`
	Upstreams map[string]Upstream `json:"upstreams,omitempty"`

	// Aliases are the seeds' keys (default_budget, ...), see Aliases.
	Aliases
}

// Fold holds the numbers of the fold contract.
type Fold struct {
	DefaultBudget     int      `json:"defaultBudget,omitempty"`        // 8192 tokens
	MaxBudget         int      `json:"maxBudget,omitempty"`            // 32768 tokens
	RootBudget        int      `json:"rootBudget,omitempty"`           // 0: the root is counted but never cut
	MaxDepth          int      `json:"maxDepth,omitempty"`             // 3; the root is depth 0
	DefaultTimeout    Duration `json:"defaultTimeout,omitempty"`       // 300s
	MaxTimeout        Duration `json:"maxTimeout,omitempty"`           // 600s
	MaxActivePerSess  int      `json:"maxActivePerSession,omitempty"`  // 10
	MaxActiveInstance int      `json:"maxActivePerInstance,omitempty"` // 100
	// GuaranteedPerSess is the share of maxActivePerInstance every open
	// session is sure of (default 2, at most maxActivePerSession): a session
	// that holds this many active branches or more may create another only
	// while the instance keeps enough free for every other open session to
	// reach its share, and for one session yet to open. So no client, even
	// one with many sessions, can fill the instance-wide cap for the rest.
	// Setting it to maxActivePerSession turns the reserve off (first come,
	// first served).
	GuaranteedPerSess int      `json:"guaranteedPerSession,omitempty"`
	CreatesPerMinute  int      `json:"createsPerMinute,omitempty"` // 5 per session
	SessionEndGrace   Duration `json:"sessionEndGrace,omitempty"`  // 30s
	ArchiveMaxAge     Duration `json:"archiveMaxAge,omitempty"`    // 168h
	ArchiveMaxBytes   int64    `json:"archiveMaxBytes,omitempty"`  // 1 GiB
	DependsOnWait     Duration `json:"dependsOnWait,omitempty"`    // 120s
	RecallPageTokens  int      `json:"recallPageTokens,omitempty"` // 4096
	// OrphanMaxAge is how long branch_status shows a later session the
	// branches of earlier sessions that ended without a return. Default 72h.
	OrphanMaxAge Duration `json:"orphanMaxAge,omitempty"`
	// Fsync flushes the state store to disk on every change, so that it
	// survives a crash of the machine. Without it (the default) every change
	// is still written to the operating system before the agent hears of
	// it, which survives kill -9 and any crash of foldproxy itself.
	Fsync bool `json:"fsync,omitempty"`
	// Thresholds are the budget fractions at which the warning level becomes
	// caution, warning and critical. Default [0.70, 0.85, 0.95].
	Thresholds []float64 `json:"thresholds,omitempty"`
}

// Memory configures memories: what one branch learned, offered to the
// branches that come after it (see fold/memory).
type Memory struct {
	// Disabled turns memories off: no extraction, no injection, no
	// memory_record or memory_search tools.
	Disabled bool `json:"disabled,omitempty"`
	// Backend is "badger" (default: the embedded state store) or "qdrant".
	Backend string `json:"backend,omitempty"`
	// MaxItems bounds the memories injected into one branch. Default 10.
	MaxItems int `json:"maxItems,omitempty"`
	// MinConfidence is the confidence a memory needs to be injected.
	// Default 0.7.
	MinConfidence float64 `json:"minConfidence,omitempty"`
	// MinRelevance is the share of a lesson's words (weighed by how rare
	// they are among the project's memories) that a new branch's
	// description and prompt must hold for it to be injected: confidence
	// alone is not enough. Default 0.3.
	MinRelevance float64 `json:"minRelevance,omitempty"`
	// MinResemblance is the same floor for anti-patterns and remediations,
	// which only branches resembling the one that failed receive.
	// Default 0.5.
	MinResemblance float64 `json:"minResemblance,omitempty"`
	// ShareAcrossPrincipals lets memories of another principal be
	// injected and found (marked untrusted). Default false: a principal's
	// branches see only its own memories and imports.
	ShareAcrossPrincipals bool `json:"shareAcrossPrincipals,omitempty"`
	// AutoExtract makes a returned branch whose message carries a lesson
	// (a few sentences, not "done") a memory candidate without
	// extract_memory. Default true; extract_memory: false opts a return
	// out.
	AutoExtract *bool `json:"autoExtract,omitempty"`
	// InjectionRatio is the most of a branch's budget that injected
	// memories may take: a ceiling, not a target. Default 0.2.
	InjectionRatio float64 `json:"injectionRatio,omitempty"`
	// BlockSuspicious keeps memories that match a prompt-injection pattern
	// out of injection and search answers. Default true.
	BlockSuspicious *bool `json:"blockSuspicious,omitempty"`
	// ExtractAll makes every successfully returned branch a memory
	// candidate, not only those returned with extract_memory: true.
	ExtractAll bool `json:"extractAll,omitempty"`
	// InitialConfidence is a new memory's confidence. Default 0.8.
	InitialConfidence float64 `json:"initialConfidence,omitempty"`
	// Reward is added to a memory's confidence when a branch it was
	// injected into returns; Penalty is taken off when that branch is
	// force-returned. Default 0.05 and 0.15.
	Reward  float64 `json:"reward,omitempty"`
	Penalty float64 `json:"penalty,omitempty"`
	// MaxUnused ages memories out: one neither injected, found nor updated
	// for this long is forgotten. Default 2160h (90 days).
	MaxUnused Duration `json:"maxUnused,omitempty"`
	// MergeSimilarity is the term overlap (Jaccard) above which a new
	// memory merges into an existing one. Default 0.6.
	MergeSimilarity float64 `json:"mergeSimilarity,omitempty"`
	// Project scopes memories; default: the config file's folder name.
	Project string `json:"project,omitempty"`
	// Principal is who this proxy's sessions act for; memories of another
	// principal are marked untrusted. Default: the operating system user.
	Principal string `json:"principal,omitempty"`
	// Qdrant locates the Qdrant backend.
	Qdrant Qdrant `json:"qdrant"`
	// Embeddings, when URL is set, adds dense embeddings from an
	// OpenAI-compatible /v1/embeddings endpoint to lexical retrieval.
	Embeddings Embeddings `json:"embeddings"`
}

// Qdrant locates a Qdrant server (gRPC).
type Qdrant struct {
	// URL is the gRPC address, "host:port" or "http(s)://host:port".
	// Default: the QDRANT_URL environment variable, else localhost:6334.
	URL string `json:"url,omitempty"`
	// APIKey defaults to the QDRANT_API_KEY environment variable.
	APIKey string `json:"apiKey,omitempty"`
	// Collection is the collection name prefix; the project is appended.
	// Default "foldproxy_memories".
	Collection string `json:"collection,omitempty"`
}

// Embeddings configures an OpenAI-compatible embeddings endpoint.
type Embeddings struct {
	URL    string `json:"url,omitempty"` // e.g. http://localhost:8080/v1/embeddings
	Model  string `json:"model,omitempty"`
	APIKey string `json:"apiKey,omitempty"` // default: the EMBEDDINGS_API_KEY environment variable
}

// BlockSuspiciousEnabled reports memory.blockSuspicious (default true).
func (m Memory) BlockSuspiciousEnabled() bool { return m.BlockSuspicious == nil || *m.BlockSuspicious }

// AutoExtractEnabled reports memory.autoExtract (default true).
func (m Memory) AutoExtractEnabled() bool { return m.AutoExtract == nil || *m.AutoExtract }

// Tokens selects the token encoding.
type Tokens struct {
	// Encoding is "o200k_base" (default) or "cl100k_base".
	Encoding string `json:"encoding,omitempty"`
	// ImageTokens and AudioTokens are the flat estimates charged per image
	// or audio block when its size gives no better one. Default 1600 and 800.
	ImageTokens int `json:"imageTokens,omitempty"`
	AudioTokens int `json:"audioTokens,omitempty"`
}

// Scrub configures secret scrubbing.
type Scrub struct {
	// Disabled turns scrubbing off. Default false: scrubbing is on.
	Disabled bool `json:"disabled,omitempty"`
	// GitleaksConfig names a .gitleaks.toml whose rules and allowlist are
	// added to gitleaks' defaults. Relative paths are resolved against the
	// config file's folder by the caller.
	GitleaksConfig string `json:"gitleaksConfig,omitempty"`
	// Timeout bounds the scan of one message; past it the content is
	// withheld (fail closed). Default 10s.
	Timeout Duration `json:"timeout,omitempty"`
	// ChunkBytes and OverlapBytes shape chunked scanning. Default 64 KiB and 4 KiB.
	ChunkBytes   int `json:"chunkBytes,omitempty"`
	OverlapBytes int `json:"overlapBytes,omitempty"`
}

// Audit configures the JSONL audit log.
type Audit struct {
	// Path of the log. Default "<stateDir>/audit.jsonl". "-" disables it.
	Path string `json:"path,omitempty"`
	// MaxBytes rotates the log past this size. Default 64 MiB.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// MaxFiles rotated files are kept. Default 5.
	MaxFiles int `json:"maxFiles,omitempty"`
	// Fsync is "always" (before each response is released), "interval"
	// (default; at most FsyncInterval apart) or "never".
	Fsync         string   `json:"fsync,omitempty"`
	FsyncInterval Duration `json:"fsyncInterval,omitempty"` // 1s
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Listen serves /metrics on its own address (useful in stdio mode).
	// With the HTTP front, /metrics is also served there.
	Listen string `json:"listen,omitempty"`
}

// Upstream holds per-upstream rules, keyed by the mcpServers entry name.
type Upstream struct {
	// AllowTools, when not empty, lists the only tools exposed (path.Match
	// patterns on the upstream's own tool names).
	AllowTools []string `json:"allowTools,omitempty"`
	// DenyTools hides matching tools; deny wins over allow.
	DenyTools []string `json:"denyTools,omitempty"`
	// Prefix replaces "<name><separator>" in front of this upstream's tool
	// and prompt names. "" exposes the names unprefixed, which suits a
	// proxy wrapping a single server; colliding names keep the first.
	Prefix *string `json:"prefix,omitempty"`
	// CallTimeout bounds every request foldproxy forwards to this upstream
	// and every request the upstream makes of the agent (sampling,
	// elicitation, roots): past it the call ends with an error and is
	// cancelled upstream. Default DefaultCallTimeout.
	CallTimeout Duration `json:"callTimeout,omitempty"`
}

// DefaultCallTimeout is upstreams.<name>.callTimeout when unset.
const DefaultCallTimeout = 5 * time.Minute

// Encodings lists the supported token encodings.
var Encodings = []string{"o200k_base", "cl100k_base"}

// Default returns the settings with every default filled in.
func Default() Settings {
	t := true
	return Settings{
		Separator:       "__",
		BranchIDArg:     &t,
		MaxMessageBytes: 16 << 20,
		ReadyWait:       Duration(500 * time.Millisecond),
		DaemonListen:    DefaultDaemonListen,
		Fold: Fold{
			DefaultBudget:     8192,
			MaxBudget:         32768,
			MaxDepth:          3,
			DefaultTimeout:    Duration(300 * time.Second),
			MaxTimeout:        Duration(600 * time.Second),
			MaxActivePerSess:  10,
			MaxActiveInstance: 100,
			GuaranteedPerSess: 2,
			CreatesPerMinute:  5,
			SessionEndGrace:   Duration(30 * time.Second),
			ArchiveMaxAge:     Duration(168 * time.Hour),
			ArchiveMaxBytes:   1 << 30,
			DependsOnWait:     Duration(120 * time.Second),
			RecallPageTokens:  4096,
			OrphanMaxAge:      Duration(72 * time.Hour),
			Thresholds:        []float64{0.70, 0.85, 0.95},
		},
		Tokens: Tokens{Encoding: "o200k_base", ImageTokens: 1600, AudioTokens: 800},
		Memory: DefaultMemory(),
		Scrub:  Scrub{Timeout: Duration(10 * time.Second), ChunkBytes: 64 << 10, OverlapBytes: 4 << 10},
		Audit:  Audit{MaxBytes: 64 << 20, MaxFiles: 5, Fsync: "interval", FsyncInterval: Duration(time.Second)},
		Model:  defaultModel(),
		Proxy:  Proxy{InterceptHosts: append([]string(nil), DefaultInterceptHosts...), AllowPorts: append([]int(nil), DefaultAllowPorts...)},
	}
}

// DefaultMemory returns the memory settings with every default filled in.
func DefaultMemory() Memory {
	t := true
	return Memory{
		Backend: "badger", MaxItems: 10, MinConfidence: 0.7, InjectionRatio: 0.2, MinRelevance: 0.3, MinResemblance: 0.5,
		BlockSuspicious: &t, InitialConfidence: 0.8, Reward: 0.05, Penalty: 0.15,
		MaxUnused: Duration(90 * 24 * time.Hour), MergeSimilarity: 0.6,
		Qdrant: Qdrant{Collection: "foldproxy_memories"},
	}
}

// FillMemory replaces the zero fields of m by their defaults.
func FillMemory(m Memory) Memory {
	d := DefaultMemory()
	if m.Backend == "" {
		m.Backend = d.Backend
	}
	if m.MaxItems == 0 {
		m.MaxItems = d.MaxItems
	}
	fl := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	fl(&m.MinConfidence, d.MinConfidence)
	fl(&m.MinRelevance, d.MinRelevance)
	fl(&m.MinResemblance, d.MinResemblance)
	fl(&m.InjectionRatio, d.InjectionRatio)
	fl(&m.InitialConfidence, d.InitialConfidence)
	fl(&m.Reward, d.Reward)
	fl(&m.Penalty, d.Penalty)
	fl(&m.MergeSimilarity, d.MergeSimilarity)
	if m.BlockSuspicious == nil {
		m.BlockSuspicious = d.BlockSuspicious
	}
	if m.MaxUnused == 0 {
		m.MaxUnused = d.MaxUnused
	}
	if m.Qdrant.Collection == "" {
		m.Qdrant.Collection = d.Qdrant.Collection
	}
	return m
}

// Validate checks the memory settings (defaults filled) and returns an
// error naming the first bad field.
func (m Memory) Validate() error {
	switch m.Backend {
	case "badger", "qdrant":
	default:
		return invalid("memory.backend", "%q is not one of badger, qdrant", m.Backend)
	}
	if m.MaxItems < 0 || m.MaxItems > 100 {
		return invalid("memory.maxItems", "%d must be between 1 and 100", m.MaxItems)
	}
	fractions := []struct {
		name string
		v    float64
	}{
		{"memory.minConfidence", m.MinConfidence},
		{"memory.minRelevance", m.MinRelevance},
		{"memory.minResemblance", m.MinResemblance},
		{"memory.injectionRatio", m.InjectionRatio},
		{"memory.initialConfidence", m.InitialConfidence},
		{"memory.reward", m.Reward},
		{"memory.penalty", m.Penalty},
		{"memory.mergeSimilarity", m.MergeSimilarity},
	}
	for _, f := range fractions {
		if !(f.v >= 0 && f.v <= 1) {
			return invalid(f.name, "%v must be between 0 and 1", f.v)
		}
	}
	if m.MaxUnused < 0 {
		return invalid("memory.maxUnused", "%s must not be negative", m.MaxUnused.D())
	}
	if strings.ContainsAny(m.Qdrant.Collection, " /\\\t\n") {
		return invalid("memory.qdrant.collection", "%q must contain no spaces or slashes", m.Qdrant.Collection)
	}
	if m.Embeddings.URL != "" && !strings.HasPrefix(m.Embeddings.URL, "http://") && !strings.HasPrefix(m.Embeddings.URL, "https://") {
		return invalid("memory.embeddings.url", "%q must be an http:// or https:// URL", m.Embeddings.URL)
	}
	return nil
}

// Parse decodes foldproxy's settings object (the value under Key; nil or
// empty means all defaults), fills defaults and validates the result.
// Unknown fields are refused so that a typo does not pass silently.
func Parse(raw []byte) (Settings, error) {
	var s Settings
	if len(bytes.TrimSpace(raw)) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
				name = strings.TrimSuffix(name, `"`)
				if where := unknownFieldPath(raw, reflect.TypeFor[Settings](), name); where != "" {
					return Settings{}, fmt.Errorf("%w: %s: unknown field %q (at %s)", ErrInvalid, Key, name, where)
				}
			}
			return Settings{}, fmt.Errorf("%w: %s: %v", ErrInvalid, Key, err)
		}
	}
	if errs := s.Aliases.apply(&s); len(errs) > 0 {
		return Settings{}, errors.Join(errs...)
	}
	s.fill()
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// fill replaces zero values by defaults.
func (s *Settings) fill() {
	d := Default()
	str := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	num := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	num64 := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	dur := func(v *Duration, def Duration) {
		if *v == 0 {
			*v = def
		}
	}
	str(&s.Separator, d.Separator)
	str(&s.DaemonListen, d.DaemonListen)
	if s.BranchIDArg == nil {
		s.BranchIDArg = d.BranchIDArg
	}
	num64(&s.MaxMessageBytes, d.MaxMessageBytes)
	dur(&s.ReadyWait, d.ReadyWait)
	f, df := &s.Fold, d.Fold
	num(&f.DefaultBudget, df.DefaultBudget)
	num(&f.MaxBudget, df.MaxBudget)
	num(&f.MaxDepth, df.MaxDepth)
	dur(&f.DefaultTimeout, df.DefaultTimeout)
	dur(&f.MaxTimeout, df.MaxTimeout)
	num(&f.MaxActivePerSess, df.MaxActivePerSess)
	num(&f.MaxActiveInstance, df.MaxActiveInstance)
	num(&f.GuaranteedPerSess, df.GuaranteedPerSess)
	num(&f.CreatesPerMinute, df.CreatesPerMinute)
	dur(&f.SessionEndGrace, df.SessionEndGrace)
	dur(&f.ArchiveMaxAge, df.ArchiveMaxAge)
	num64(&f.ArchiveMaxBytes, df.ArchiveMaxBytes)
	dur(&f.DependsOnWait, df.DependsOnWait)
	num(&f.RecallPageTokens, df.RecallPageTokens)
	dur(&f.OrphanMaxAge, df.OrphanMaxAge)
	if len(f.Thresholds) == 0 {
		f.Thresholds = df.Thresholds
	}
	str(&s.Tokens.Encoding, d.Tokens.Encoding)
	num(&s.Tokens.ImageTokens, d.Tokens.ImageTokens)
	num(&s.Tokens.AudioTokens, d.Tokens.AudioTokens)
	dur(&s.Scrub.Timeout, d.Scrub.Timeout)
	num(&s.Scrub.ChunkBytes, d.Scrub.ChunkBytes)
	num(&s.Scrub.OverlapBytes, d.Scrub.OverlapBytes)
	num64(&s.Audit.MaxBytes, d.Audit.MaxBytes)
	num(&s.Audit.MaxFiles, d.Audit.MaxFiles)
	str(&s.Audit.Fsync, d.Audit.Fsync)
	dur(&s.Audit.FsyncInterval, d.Audit.FsyncInterval)
	s.Memory = FillMemory(s.Memory)
	s.Model.fill()
	s.Proxy.fill()
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s.%s: %s", ErrInvalid, Key, field, fmt.Sprintf(format, args...))
}

// Validate checks every field and returns an error naming each bad one
// (errors.Join: one line per field, each wrapping ErrInvalid).
// It expects defaults to have been filled (Parse does that).
func (s Settings) Validate() error {
	var errs []error
	if s.Separator == "" || strings.ContainsAny(s.Separator, " /\t\n") {
		errs = append(errs, invalid("separator", "%q must be non-empty and contain no spaces or slashes", s.Separator))
	}
	if err := checkDaemonListen(s.DaemonListen); err != "" {
		errs = append(errs, invalid("daemonListen", "%q %s", s.DaemonListen, err))
	}
	if s.MaxMessageBytes < 1024 {
		errs = append(errs, invalid("maxMessageBytes", "%d is below the minimum of 1024", s.MaxMessageBytes))
	}
	f := s.Fold
	positive := []struct {
		name string
		v    int64
	}{
		{"readyWait", int64(s.ReadyWait)},
		{"fold.defaultBudget", int64(f.DefaultBudget)},
		{"fold.maxBudget", int64(f.MaxBudget)},
		{"fold.maxDepth", int64(f.MaxDepth)},
		{"fold.defaultTimeout", int64(f.DefaultTimeout)},
		{"fold.maxTimeout", int64(f.MaxTimeout)},
		{"fold.maxActivePerSession", int64(f.MaxActivePerSess)},
		{"fold.maxActivePerInstance", int64(f.MaxActiveInstance)},
		{"fold.guaranteedPerSession", int64(f.GuaranteedPerSess)},
		{"fold.createsPerMinute", int64(f.CreatesPerMinute)},
		{"fold.sessionEndGrace", int64(f.SessionEndGrace)},
		{"fold.archiveMaxAge", int64(f.ArchiveMaxAge)},
		{"fold.archiveMaxBytes", f.ArchiveMaxBytes},
		{"fold.dependsOnWait", int64(f.DependsOnWait)},
		{"fold.recallPageTokens", int64(f.RecallPageTokens)},
		{"fold.orphanMaxAge", int64(f.OrphanMaxAge)},
		{"tokens.imageTokens", int64(s.Tokens.ImageTokens)},
		{"tokens.audioTokens", int64(s.Tokens.AudioTokens)},
		{"scrub.timeout", int64(s.Scrub.Timeout)},
		{"scrub.chunkBytes", int64(s.Scrub.ChunkBytes)},
		{"scrub.overlapBytes", int64(s.Scrub.OverlapBytes)},
		{"audit.maxBytes", s.Audit.MaxBytes},
		{"audit.maxFiles", int64(s.Audit.MaxFiles)},
		{"audit.fsyncInterval", int64(s.Audit.FsyncInterval)},
	}
	for _, p := range positive {
		if p.v < 0 {
			errs = append(errs, invalid(p.name, "%d must not be negative", p.v))
		}
	}
	if f.RootBudget < 0 {
		errs = append(errs, invalid("fold.rootBudget", "%d must not be negative", f.RootBudget))
	}
	if f.DefaultBudget > f.MaxBudget {
		errs = append(errs, invalid("fold.defaultBudget", "%d exceeds fold.maxBudget %d", f.DefaultBudget, f.MaxBudget))
	}
	if f.DefaultTimeout > f.MaxTimeout {
		errs = append(errs, invalid("fold.defaultTimeout", "%s exceeds fold.maxTimeout %s", f.DefaultTimeout.D(), f.MaxTimeout.D()))
	}
	if f.MaxActivePerSess > f.MaxActiveInstance {
		errs = append(errs, invalid("fold.maxActivePerSession", "%d exceeds fold.maxActivePerInstance %d", f.MaxActivePerSess, f.MaxActiveInstance))
	}
	if f.GuaranteedPerSess > f.MaxActiveInstance {
		errs = append(errs, invalid("fold.guaranteedPerSession", "%d exceeds fold.maxActivePerInstance %d", f.GuaranteedPerSess, f.MaxActiveInstance))
	}
	if len(f.Thresholds) != 3 {
		errs = append(errs, invalid("fold.thresholds", "want 3 fractions (caution, warning, critical), got %d", len(f.Thresholds)))
	}
	prev := 0.0
	for i, t := range f.Thresholds {
		if t <= prev || t >= 1 {
			errs = append(errs, invalid(fmt.Sprintf("fold.thresholds[%d]", i), "%v must be above %v and below 1", t, prev))
		}
		prev = t
	}
	if !contains(Encodings, s.Tokens.Encoding) {
		errs = append(errs, invalid("tokens.encoding", "%q is not one of %s", s.Tokens.Encoding, strings.Join(Encodings, ", ")))
	}
	if s.Scrub.OverlapBytes >= s.Scrub.ChunkBytes {
		errs = append(errs, invalid("scrub.overlapBytes", "%d must be smaller than scrub.chunkBytes %d", s.Scrub.OverlapBytes, s.Scrub.ChunkBytes))
	}
	switch s.Audit.Fsync {
	case "always", "interval", "never":
	default:
		errs = append(errs, invalid("audit.fsync", "%q is not one of always, interval, never", s.Audit.Fsync))
	}
	if err := s.Memory.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := s.Model.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, s.Proxy.validate()...)
	names := make([]string, 0, len(s.Upstreams))
	for name := range s.Upstreams {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		u := s.Upstreams[name]
		if u.CallTimeout < 0 {
			errs = append(errs, invalid(fmt.Sprintf("upstreams.%s.callTimeout", name), "%s must not be negative", u.CallTimeout.D()))
		}
		if u.Prefix != nil && strings.ContainsAny(*u.Prefix, " \t\n/") {
			errs = append(errs, invalid(fmt.Sprintf("upstreams.%s.prefix", name), "%q must contain no spaces or slashes", *u.Prefix))
		}
		for i, p := range append(append([]string{}, u.AllowTools...), u.DenyTools...) {
			if _, err := path.Match(p, ""); err != nil {
				errs = append(errs, invalid(fmt.Sprintf("upstreams.%s", name), "tool pattern %d %q: %v", i, p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// DaemonListenOff is the DaemonListen value that serves no HTTP from the
// daemon; DefaultDaemonListen is the default.
const (
	DaemonListenOff     = "off"
	DefaultDaemonListen = "127.0.0.1:0"
)

// checkDaemonListen says what is wrong with a daemonListen value, "" if
// nothing: "off", or a loopback host (an IP or "localhost") and a port.
// The daemon's listener takes foldproxy's token when one is set but never
// requires one, so it may not listen beyond loopback.
func checkDaemonListen(s string) string {
	if s == DaemonListenOff {
		return ""
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "must be \"off\" or a loopback host:port such as 127.0.0.1:8765"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "has no valid port (0 to 65535; 0 lets the system choose)"
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "must be a loopback address (127.0.0.1, [::1] or localhost): the daemon's listener serves the project's tools and model endpoint"
	}
	return ""
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// ToolAllowed reports whether upstream's tool may be exposed.
func (s Settings) ToolAllowed(upstream, tool string) bool {
	u, ok := s.Upstreams[upstream]
	if !ok {
		return true
	}
	for _, p := range u.DenyTools {
		if m, _ := path.Match(p, tool); m {
			return false
		}
	}
	if len(u.AllowTools) == 0 {
		return true
	}
	for _, p := range u.AllowTools {
		if m, _ := path.Match(p, tool); m {
			return true
		}
	}
	return false
}

// NamePrefix returns what is put in front of upstream's tool and prompt names.
func (s Settings) NamePrefix(upstream string) string {
	if u, ok := s.Upstreams[upstream]; ok && u.Prefix != nil {
		return *u.Prefix
	}
	return upstream + s.Separator
}

// CallTimeout returns upstreams.<upstream>.callTimeout, or its default.
func (s Settings) CallTimeout(upstream string) time.Duration {
	if u, ok := s.Upstreams[upstream]; ok && u.CallTimeout > 0 {
		return u.CallTimeout.D()
	}
	return DefaultCallTimeout
}

// BranchIDEnabled reports whether forwarded tools get the branch_id argument.
func (s Settings) BranchIDEnabled() bool { return s.BranchIDArg == nil || *s.BranchIDArg }
