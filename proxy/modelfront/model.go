package modelfront

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/fold/modelwire"
	"github.com/foldproxy/foldproxy/proxy/guard"
)

// TokenHeader carries foldproxy's own token on model requests when one
// is configured. The Authorization and x-api-key headers belong to the
// model API (the agent's own credentials) and pass through untouched, so
// foldproxy's token cannot travel in them; this header is removed before
// the request is forwarded. Claude Code sends it with
// ANTHROPIC_CUSTOM_HEADERS="X-Foldproxy-Token: <token>".
const TokenHeader = "X-Foldproxy-Token"

// Options configures the model front.
type Options struct {
	// AnthropicURL and OpenAIURL are the model APIs requests are forwarded
	// to: the request's path and query are appended to them. Both required.
	AnthropicURL string
	OpenAIURL    string
	// Token, when set, must come with every request in TokenHeader.
	// It is required when Loopback is false.
	Token string
	// Loopback and AllowedOrigins guard against DNS rebinding as on the MCP
	// front (see proxy.HTTPOptions).
	Loopback       bool
	AllowedOrigins []string
	// MaxRequestBytes bounds one request body; larger gets 413. Default 32 MiB.
	MaxRequestBytes int64
	// State is the fold state the context manager reads and charges; Wire
	// its options (scrubber, token counter). State is required. The
	// front remembers what Wire.Scrub made of each text (see scrubMemo),
	// since an agent resends its history on every request.
	State modelwire.State
	Wire  modelwire.Options
	// Observer hears of every request answered; nil: nobody.
	Observer Observer
	// Logger receives diagnostics, never a header or a body. nil discards.
	Logger *slog.Logger
	// Transport sends the requests upstream. nil: a transport like
	// http.DefaultTransport that leaves Accept-Encoding and the response
	// bytes alone.
	Transport http.RoundTripper
	// Transparent is the model front behind the forward proxy (transparent
	// mode): the request names the real API host, the proxy has already
	// authorized the client, so neither the Host check nor the token
	// applies, and paths outside /v1/ are relayed untouched to AnthropicURL
	// instead of answered 404.
	Transparent bool
	// CacheRead and CacheWrite are the prices of a cached input token
	// read and written, relative to an uncached one, for the bills of
	// Event. Default 0.1 and 1.25.
	CacheRead, CacheWrite float64
}

// Observer is told of each model request once it is answered, for
// metrics and the audit log. It must not block.
type Observer interface {
	ModelRequest(ev Event)
}

// Event describes one model request. It holds no content and no header.
type Event struct {
	// Dialect is the modelwire dialect, or "passthrough" for a request
	// relayed without folding (another /v1 path).
	Dialect string
	// Status is the HTTP status the agent got.
	Status int
	// Outcome is one of "ok", "upstream_error" (the model API answered
	// with an error status, relayed as it was), "unreachable" (no answer
	// from the model API), "refused" (foldproxy refused the request) or
	// "error" (the context manager failed; nothing was forwarded).
	Outcome string
	// The context manager's result, for folded dialects.
	Changed      bool
	Folded       int
	TokensBefore int
	TokensAfter  int
	Guidance     bool
	Duration     time.Duration
	// Session is the model session the request belongs to (see
	// modelSession); AutoFold what automatic folding did to it.
	Session  string
	AutoFold modelwire.AutoFoldResult
	// Usage is what the model API reported of its answer; Bill the
	// prompt-cache model of the request's input, with and without
	// foldproxy (see Bill).
	Usage Usage
	Bill  Bill
}

// Model request outcomes (Event.Outcome).
const (
	OutcomeOK            = "ok"
	OutcomeUpstreamError = "upstream_error"
	OutcomeUnreachable   = "unreachable"
	OutcomeRefused       = "refused"
	OutcomeError         = "error"
)

// Bounds of the scrub and count memos: texts remembered, and bytes of
// scrubbed text held, per generation (two generations at most).
const (
	modelMemoEntries = 1 << 16
	modelMemoBytes   = 64 << 20
	// modelCountMemoEntries bounds the count memo: texts of 512 bytes
	// and more, a few hundred in a long conversation.
	modelCountMemoEntries = 1 << 14
)

// modelPassthrough is the Dialect of a request relayed without folding.
const modelPassthrough = "passthrough"

// Handler is the model front: the Anthropic Messages API
// (POST /v1/messages, /v1/messages/count_tokens), OpenAI Chat Completions
// (POST /v1/chat/completions) and the OpenAI Responses API
// (POST /v1/responses) on the HTTP listener. Each request body goes through
// the context manager (modelwire.Apply) and on to the model API; every
// header passes through untouched in both directions (hop-by-hop headers
// and TokenHeader aside), and the response is relayed byte for byte,
// an event stream flushed event by event as it arrives.
//
// Other /v1/ paths (model lists, batches, files) are relayed, a JSON
// body with its strings scrubbed (model_passthrough.go): to the Anthropic URL when the path is under /v1/messages or the request
// carries an anthropic-version header, to the OpenAI URL otherwise. Any
// other path gets 404, "/" included (Claude Code probes it).
//
// Errors that foldproxy itself answers come in the dialect's own error
// shape; the model API's own errors are relayed as they are.
type Handler struct {
	log       *slog.Logger
	needToken bool
	tokenSum  [sha256.Size]byte
	loopback  bool
	allowed   map[string]bool
	maxBytes  int64
	state     modelwire.State
	wire      modelwire.Options
	obs       Observer
	anthropic *modelTarget
	openai    *modelTarget
	// transparent: see Options.Transparent.
	transparent bool
	read, write float64 // cache prices
	ledger      modelLedger
}

var _ http.Handler = (*Handler)(nil)

// modelTarget is one model API and the reverse proxy that reaches it.
type modelTarget struct {
	name string // "Anthropic", "OpenAI": for error messages
	url  *url.URL
	rp   *httputil.ReverseProxy
}

// NewHandler validates opts and returns the model front.
func NewHandler(opts Options) (*Handler, error) {
	h := &Handler{
		log:      opts.Logger,
		loopback: opts.Loopback,
		maxBytes: opts.MaxRequestBytes,
		state:    opts.State,
		wire:     opts.Wire,
		obs:      opts.Observer,

		transparent: opts.Transparent,
		read:        opts.CacheRead,
		write:       opts.CacheWrite,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.read == 0 {
		h.read = 0.1
	}
	if h.write == 0 {
		h.write = 1.25
	}
	if h.read < 0 || h.write < h.read {
		return nil, fmt.Errorf("model front: cache prices read %v and write %v: want 0 < read <= write", opts.CacheRead, opts.CacheWrite)
	}
	if h.state == nil {
		return nil, errors.New("model front: Options.State is required")
	}
	if opts.Wire.Count != nil {
		h.wire.Count = newCountMemo(opts.Wire.Count, modelCountMemoEntries).Count
	}
	if opts.Wire.Scrub != nil {
		h.wire.Scrub = newScrubMemo(opts.Wire.Scrub, modelMemoEntries, modelMemoBytes).Scrub
	}
	if opts.Wire.ScrubAcross != nil {
		h.wire.ScrubAcross = newAcrossMemo(opts.Wire.ScrubAcross, modelMemoEntries).ScrubAcross
	}
	if h.wire.Memo == nil {
		// The tokens of the messages every request resends.
		h.wire.Memo = modelwire.NewMemo(modelMemoEntries)
	}
	var err error
	if !opts.Transparent {
		// Behind the forward proxy the agent's CONNECT was admitted
		// already; no token applies (see Transparent).
		t, err := guard.FrontToken("model front", opts.Token, opts.Loopback)
		if err != nil {
			return nil, err
		}
		h.needToken, h.tokenSum = t.Sum()
	}
	if h.allowed, err = guard.NewOrigins(opts.AllowedOrigins); err != nil {
		return nil, fmt.Errorf("model front: %w", err)
	}
	if h.maxBytes < 0 {
		return nil, fmt.Errorf("model front: MaxRequestBytes %d is negative", opts.MaxRequestBytes)
	}
	if h.maxBytes == 0 {
		h.maxBytes = 32 << 20
	}
	tr := opts.Transport
	if tr == nil {
		tr = NewTransport(nil)
	}
	if h.anthropic, err = h.newTarget("Anthropic", "AnthropicURL", opts.AnthropicURL, tr); err != nil {
		return nil, err
	}
	if h.openai, err = h.newTarget("OpenAI", "OpenAIURL", opts.OpenAIURL, tr); err != nil {
		return nil, err
	}
	return h, nil
}

// NewTransport is http.DefaultTransport's setup with compression left
// to the agent: its Accept-Encoding goes upstream as it is, and the
// response comes back as the model API encoded it. roots, when not nil,
// replaces the system roots in verifying the model API's certificate
// (a failure is an error, never skipped); the forward proxy passes the
// system roots plus its extra roots, and no proxy from the environment
// (foldproxy would be its own proxy).
func NewTransport(roots *x509.CertPool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if roots != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		t.Proxy = nil
	}
	t.DisableCompression = true
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

func (h *Handler) newTarget(name, field, raw string, tr http.RoundTripper) (*modelTarget, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("model front: %s %q must be an http:// or https:// URL", field, raw)
	}
	t := &modelTarget{name: name, url: u}
	t.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// The reverse proxy drops the forwarding headers and query
			// parameters it cannot parse before Rewrite: the agent's go
			// on as they were. foldproxy adds none of its own.
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[k]; ok {
					pr.Out.Header[k] = v
				}
			}
			pr.Out.Header.Del(TokenHeader)
		},
		Transport: tr,
		// Flush every write at once: an event stream reaches the agent
		// event by event, as the model API sends it.
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
		ModifyResponse: func(resp *http.Response) error {
			if c := modelCallOf(resp.Request.Context()); c != nil {
				c.upstreamStatus = resp.StatusCode
				if c.dialect != modelPassthrough && resp.StatusCode < 300 && resp.Body != nil {
					resp.Body = newUsageTap(resp.Body, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Encoding"), &c.usage, c.recall)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			c := modelCallOf(r.Context())
			if c != nil {
				c.unreachable = true
			}
			if r.Context().Err() != nil {
				return // the agent went away; there is nobody to answer
			}
			h.log.Warn("model front: the model API did not answer", "api", name, "host", u.Host, "err", err)
			d := modelPassthrough
			if c != nil {
				d = c.dialect
			}
			modelError(w, d, http.StatusBadGateway, "api_error",
				"foldproxy could not reach the %s API at %s: %v", name, u.Host, modelErrText(err))
		},
	}
	return t, nil
}

// modelErrText is a transport error without the request URL that
// *url.Error puts in front (the path and query are the agent's).
func modelErrText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// modelCall is the per-request record the reverse proxy's hooks fill in.
type modelCall struct {
	dialect        string
	upstreamStatus int
	unreachable    bool
	usage          Usage        // filled as the answer is relayed
	recall         *recallCalls // watches the answer for calls of the added recall tool
}

type modelCallKey struct{}

func modelCallOf(ctx context.Context) *modelCall {
	c, _ := ctx.Value(modelCallKey{}).(*modelCall)
	return c
}

// modelRoute is what a request path maps to.
type modelRoute struct {
	dialect string // a modelwire.Dialect, or modelPassthrough
	target  *modelTarget
}

// route maps a request to its dialect and model API; ok is false for a
// path the front does not serve.
func (h *Handler) route(r *http.Request) (rt modelRoute, ok bool) {
	switch p := modelPath(r.URL.Path); {
	case p == "/v1/messages" || p == "/v1/messages/count_tokens":
		return modelRoute{string(modelwire.Anthropic), h.anthropic}, true
	case p == "/v1/chat/completions":
		return modelRoute{string(modelwire.OpenAIChat), h.openai}, true
	case p == "/v1/responses":
		return modelRoute{string(modelwire.OpenAIResponses), h.openai}, true
	case strings.HasPrefix(p, "/v1/messages/") || (strings.HasPrefix(p, "/v1/") && r.Header.Get("Anthropic-Version") != ""):
		return modelRoute{modelPassthrough, h.anthropic}, true
	case strings.HasPrefix(p, "/v1/"):
		return modelRoute{modelPassthrough, h.openai}, true
	case h.transparent:
		return modelRoute{modelPassthrough, h.anthropic}, true
	}
	return modelRoute{}, false
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	w := &modelStatusWriter{ResponseWriter: rw}
	ev := Event{Dialect: modelErrorDialect(r), Outcome: OutcomeRefused}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler { // the reverse proxy aborting a broken stream
				panic(v)
			}
			h.log.Error("model front: panic serving a request", "path", r.URL.Path,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if w.status == 0 {
				modelError(w, ev.Dialect, http.StatusInternalServerError, "api_error", "internal error in foldproxy")
			}
			ev.Outcome = OutcomeError
		}
		ev.Status = w.status
		ev.Duration = time.Since(start)
		h.log.Debug("model front: request", "dialect", ev.Dialect, "path", r.URL.Path, "status", ev.Status,
			"outcome", ev.Outcome, "tokens_before", ev.TokensBefore, "tokens_after", ev.TokensAfter,
			"folded", ev.Folded, "duration", ev.Duration)
		if h.obs != nil {
			h.obs.ModelRequest(ev)
		}
	}()

	if reason := guard.Refusal(r, h.loopback, h.allowed); reason != "" && !h.transparent {
		modelError(w, ev.Dialect, http.StatusForbidden, "permission_error", "%s", reason)
		return
	}
	if !h.checkToken(r) {
		modelError(w, ev.Dialect, http.StatusUnauthorized, "authentication_error",
			"foldproxy requires its token in the %s header (the model API's own credentials go in x-api-key or Authorization as usual)", TokenHeader)
		return
	}
	rt, ok := h.route(r)
	if !ok {
		modelError(w, ev.Dialect, http.StatusNotFound, "not_found_error",
			"not found: %s (foldproxy serves the model API under /v1/ and MCP at /mcp)", r.URL.Path)
		return
	}
	ev.Dialect = rt.dialect
	call := &modelCall{dialect: rt.dialect}
	r = r.WithContext(context.WithValue(r.Context(), modelCallKey{}, call))
	if rt.dialect == string(modelwire.OpenAIResponses) && isWebSocketUpgrade(r) {
		// The Responses API's WebSocket mode (Codex tries it first with
		// OpenAI's own provider) is refused: a client on it may send each
		// turn's new items only, against a response the server keeps, so
		// the conversation to fold would not be in the request. Codex
		// falls back to POST after its retries; a model_providers entry
		// (supports_websockets false) never tries it.
		modelError(w, rt.dialect, http.StatusNotImplemented, "invalid_request_error",
			"foldproxy serves the Responses API over HTTP POST only, not over a WebSocket: for Codex, use a model_providers entry with wire_api = \"responses\" and supports_websockets = false (foldproxy run -- codex sets one up)")
		return
	}
	if rt.dialect == modelPassthrough {
		if !h.scrubPassthrough(w, r, &ev) {
			return
		}
	} else {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			modelError(w, rt.dialect, http.StatusMethodNotAllowed, "invalid_request_error", "method %s not allowed: use POST", r.Method)
			return
		}
		if !h.fold(w, r, rt, &ev) {
			return
		}
	}
	rt.target.rp.ServeHTTP(w, r)
	ev.Usage = call.usage
	switch {
	case call.unreachable:
		ev.Outcome = OutcomeUnreachable
	case call.upstreamStatus >= 400:
		ev.Outcome = OutcomeUpstreamError
	default:
		ev.Outcome = OutcomeOK
	}
}

// fold reads the request body, runs the context manager over it and puts
// the result in r's place. It writes the error response and reports false
// when the request cannot go on.
func (h *Handler) fold(w http.ResponseWriter, r *http.Request, rt modelRoute, ev *Event) bool {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		modelError(w, rt.dialect, http.StatusUnsupportedMediaType, "invalid_request_error",
			"foldproxy cannot read a request body with Content-Encoding %q: send it uncompressed", ce)
		return false
	}
	body, ok := h.readBody(w, r, rt.dialect)
	if !ok {
		return false
	}
	// Apply validates the body first (one pass over it, not two).
	d := modelwire.Dialect(rt.dialect)
	opt := h.wire
	opt.Session = modelSession(r, d, body)
	ev.Session = opt.Session
	res, err := modelwire.Apply(r.Context(), d, body, h.state, opt)
	if errors.Is(err, modelwire.ErrNotJSON) {
		modelError(w, rt.dialect, http.StatusBadRequest, "invalid_request_error", "the request body is not valid JSON")
		return false
	}
	if de := (*modelwire.DuplicateKeyError)(nil); errors.As(err, &de) {
		modelError(w, rt.dialect, http.StatusBadRequest, "invalid_request_error", "%s", dupKeyText(de))
		return false
	}
	if err != nil {
		ev.Outcome = OutcomeError
		h.log.Warn("model front: the context manager failed; the request was not forwarded", "dialect", rt.dialect, "err", err)
		modelError(w, rt.dialect, http.StatusInternalServerError, "api_error",
			"foldproxy could not apply its context manager to the request, so it was not forwarded: %v", err)
		return false
	}
	ev.Changed, ev.Folded, ev.Guidance = res.Changed, len(res.Folded), res.Guidance
	ev.TokensBefore, ev.TokensAfter = res.TokensBefore, res.TokensAfter
	ev.AutoFold = res.AutoFold
	if rc, ok := h.state.(modelwire.RecallCaller); ok && res.AutoFold.RecallTool {
		if c := modelCallOf(r.Context()); c != nil {
			ctx := r.Context()
			c.recall = newRecallCalls(func(calls []modelwire.RecallCall) {
				if err := rc.RecordRecallCalls(ctx, calls); err != nil {
					h.log.Warn("model front: recording calls of the recall tool", "err", err)
				}
			})
		}
	}
	out := res.Body
	if out == nil {
		out = body
	}
	ev.Bill = h.ledger.observe(opt.Session, out, res.Pieces, res.TokensBefore, res.TokensAfter, h.read, h.write)
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out)), nil }
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return true
}

// isWebSocketUpgrade reports whether r asks to switch to a WebSocket.
func isWebSocketUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// checkToken reports whether the request carries foldproxy's token, when
// one is required.
func (h *Handler) checkToken(r *http.Request) bool {
	return guard.MatchSum(h.needToken, h.tokenSum, r.Header.Get(TokenHeader))
}

// modelErrorDialect guesses the dialect of a request for an error that
// comes before routing: Anthropic for its paths or headers, OpenAI
// otherwise.
func modelErrorDialect(r *http.Request) string {
	switch p := modelPath(r.URL.Path); {
	case p == "/v1/chat/completions":
		return string(modelwire.OpenAIChat)
	case p == "/v1/responses":
		return string(modelwire.OpenAIResponses)
	case strings.HasPrefix(p, "/v1/messages"), r.Header.Get("Anthropic-Version") != "", r.Header.Get("X-Api-Key") != "":
		return string(modelwire.Anthropic)
	case strings.HasPrefix(p, "/v1/"):
		return string(modelwire.OpenAIChat)
	}
	return string(modelwire.Anthropic)
}

// modelError writes an error that foldproxy itself answers, in the
// dialect's own shape: Anthropic's {"type":"error","error":{"type","message"}}
// or OpenAI's {"error":{"message","type","param","code"}}. typ is the
// Anthropic error type; it is mapped to OpenAI's.
func modelError(w http.ResponseWriter, dialect string, status int, typ, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	var body []byte
	if dialect == string(modelwire.Anthropic) {
		body, _ = json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	} else {
		otyp := "invalid_request_error"
		switch typ {
		case "api_error":
			otyp = "server_error"
		case "authentication_error":
			otyp = "authentication_error"
		case "permission_error":
			otyp = "permission_error"
		case "not_found_error":
			otyp = "not_found_error"
		}
		body, _ = json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": otyp, "param": nil, "code": nil}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("X-Foldproxy-Error", "1")
	w.WriteHeader(status)
	_, _ = w.Write(body) // a write error means the agent left
}

// modelStatusWriter notes the status written, for the event and for a
// recovered panic.
type modelStatusWriter struct {
	http.ResponseWriter
	status int
}

func (w *modelStatusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *modelStatusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController (the reverse proxy's flushes) reach
// the connection.
func (w *modelStatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
