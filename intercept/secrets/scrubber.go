package secrets

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// Scrubbing defaults, used where policy.Scrub leaves a field zero.
const (
	DefaultScrubTimeout = 10 * time.Second
	DefaultChunkBytes   = 64 << 10
	DefaultOverlapBytes = 4 << 10
	// MinOverlapBytes is the smallest chunk overlap foldproxy uses: a PEM
	// private key (about 3.3 KB for RSA-4096) must fit in it whole, or a
	// key straddling a chunk border would be found in neither chunk.
	MinOverlapBytes = 4 << 10
)

// InlineScanBytes is the size under which a text is scanned on the
// caller's goroutine (see runScan). Tool results are mostly this small (the
// median of the trajectory data is a few hundred bytes), and a scan of
// this much takes well under a millisecond: the goroutine, its stack and
// the timer that would let runScan return at the deadline whatever the
// detector does cost more than the scan itself.
const InlineScanBytes = 16 << 10

// unescapeDepth is how many levels of JSON escaping below the content are
// scanned (JSON in a string in JSON, ...).
const unescapeDepth = 2

// unescapePad is how far around each decoded escape the deeper views are
// scanned.
const unescapePad = 1 << 10

// errWorkTimeout is the cause of the context that ends a scan on a
// goroutine of its own at its deadline (Exchange.WorkDeadline for the Scrub
// interceptor's scans).
var errWorkTimeout = errors.New("scrub.timeout reached")

// ScanError reports why a text could not be scanned. Its message never
// holds any of the text.
type ScanError struct {
	// Reason says what went wrong, e.g. "scan timed out after 10s".
	Reason string
	// Err is the underlying cause when there is one (a context error).
	Err error
}

func (e *ScanError) Error() string { return e.Reason }

// Unwrap returns the underlying cause.
func (e *ScanError) Unwrap() error { return e.Err }

// Scrubber removes secrets from text and JSON with gitleaks' rules (its
// defaults plus the user's .gitleaks.toml). Every secret found becomes
// [REDACTED:<rule-id>].
//
// A Scrubber is built once and is safe for concurrent use.
type Scrubber struct {
	disabled bool
	timeout  time.Duration
	chunk    int
	overlap  int
	logger   *slog.Logger
	eng      *engine
	// inline is the size under which texts are scanned on the caller's
	// goroutine: InlineScanBytes; tests set 0 to have every scan on a
	// goroutine of its own.
	inline int
	// find locates secrets in one piece of a text. It is eng.find; tests
	// replace it with detectors that fail, panic or hang.
	find func(ctx context.Context, text string, nls []int, lo, hi int) ([]found, []int, error)
}

var _ fold.Scanner = (*Scrubber)(nil)

// NewScrubber builds the scrubber described by s. It loads gitleaks'
// default rules and, when s.GitleaksConfig names a file, that file's rules
// and allowlists on top of them (see loadGitleaksConfig for how the two are
// merged). A file that cannot be read or parsed, or holds an invalid rule,
// is an error naming the file and the problem. A disabled scrubber loads
// nothing and passes everything through.
//
// Zero fields take their defaults: Timeout 10s, ChunkBytes 64 KiB,
// OverlapBytes 4 KiB. An overlap below MinOverlapBytes is raised to it, and
// the chunk to at least twice the overlap. logger may be nil.
func NewScrubber(s policy.Scrub, logger *slog.Logger) (*Scrubber, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if s.Disabled {
		return &Scrubber{disabled: true, logger: logger}, nil
	}
	sc := &Scrubber{
		timeout: s.Timeout.D(),
		chunk:   s.ChunkBytes,
		overlap: s.OverlapBytes,
		logger:  logger,
		inline:  InlineScanBytes,
	}
	switch {
	case sc.timeout < 0:
		return nil, fmt.Errorf("scrub.timeout: %s must not be negative", sc.timeout)
	case sc.chunk < 0:
		return nil, fmt.Errorf("scrub.chunkBytes: %d must not be negative", sc.chunk)
	case sc.overlap < 0:
		return nil, fmt.Errorf("scrub.overlapBytes: %d must not be negative", sc.overlap)
	}
	if sc.timeout == 0 {
		sc.timeout = DefaultScrubTimeout
	}
	if sc.chunk == 0 {
		sc.chunk = DefaultChunkBytes
	}
	if sc.overlap == 0 {
		sc.overlap = DefaultOverlapBytes
	}
	if sc.overlap < MinOverlapBytes {
		logger.Info("scrub: chunk overlap raised so that a private key fits", "configured", sc.overlap, "used", MinOverlapBytes)
		sc.overlap = MinOverlapBytes
	}
	if sc.chunk < 2*sc.overlap {
		logger.Info("scrub: chunk size raised to twice the overlap", "configured", sc.chunk, "used", 2*sc.overlap)
		sc.chunk = 2 * sc.overlap
	}
	cfg, err := loadGitleaksConfig(s.GitleaksConfig)
	if err != nil {
		return nil, err
	}
	if sc.eng, err = newEngine(cfg, sc.overlap); err != nil {
		return nil, fmt.Errorf("gitleaks rules: %w", err)
	}
	sc.find = sc.eng.find
	logger.Debug("scrub: gitleaks rules loaded", "rules", len(sc.eng.rules), "config", s.GitleaksConfig)
	return sc, nil
}

// Disabled reports whether the scrubber passes everything through.
func (s *Scrubber) Disabled() bool { return s.disabled }

// Timeout returns how long a scan may take (scrub.timeout): ScrubText and
// ScrubJSON give up after it, and callers that bound a whole exchange with
// one deadline (the Scrub interceptor) start from it.
func (s *Scrubber) Timeout() time.Duration { return s.timeout }

// Logger returns the logger the scrubber was built with, for its callers
// to report what they do with a scan that failed.
func (s *Scrubber) Logger() *slog.Logger { return s.logger }

// ScrubText returns text with every secret replaced by [REDACTED:<rule-id>]
// and the number of secrets removed by rule. Besides the text as it is, it
// scans the text with one and two levels of JSON string escaping undone
// around every escape sequence (see view), and gitleaks decodes base64, hex
// and percent-encoded segments; a secret found in a decoded form is
// redacted in the original, escape sequences or encoded segment included.
//
// The scan is bounded by the scrubber's timeout. When it cannot complete
// (deadline, cancellation, a panic inside gitleaks) ScrubText returns an
// error, a *ScanError, and no text; the error never holds any of the text.
func (s *Scrubber) ScrubText(ctx context.Context, text string) (string, map[string]int, error) {
	return s.ScrubTextUntil(ctx, time.Now().Add(s.timeout), text)
}

// ScrubTextUntil is ScrubText with the deadline given.
func (s *Scrubber) ScrubTextUntil(ctx context.Context, deadline time.Time, text string) (string, map[string]int, error) {
	if s.disabled || text == "" {
		return text, nil, nil
	}
	spans, err := runScan(s, ctx, deadline, len(text), func(ctx context.Context) ([]found, error) {
		spans, v, err := s.scan(ctx, text, false)
		v.release()
		return spans, err
	})
	if err != nil {
		return "", nil, err
	}
	out, counts := redact(text, spans)
	return out, counts, nil
}

// ScrubJSON scrubs every string of a JSON value, object keys included:
// tool results (text, structuredContent, embedded resources), resource
// contents, prompt messages, notifications, elicitation and sampling
// requests. String values under a "blob" or "data" key that hold base64 of
// text are decoded, scrubbed as text and encoded again.
//
// When nothing is found the input slice itself is returned, byte for byte.
// Otherwise only the affected string literals are rewritten and the result
// is valid JSON. raw that is not valid JSON is an error (the caller
// withholds it). Errors are as for ScrubText.
func (s *Scrubber) ScrubJSON(ctx context.Context, raw json.RawMessage) (json.RawMessage, map[string]int, error) {
	out, counts, dec, err := s.ScrubJSONUntil(ctx, time.Now().Add(s.timeout), raw)
	dec.Release() // its buffers go back to the pool
	return out, counts, err
}

// ScrubJSONUntil is ScrubJSON with the deadline given, that also returns,
// when nothing was found (out is raw), the strings of raw as the scan
// decoded them, for the count (Decoded); nil when there is none to share.
// The caller releases it (Decoded.Release) once done with it.
func (s *Scrubber) ScrubJSONUntil(ctx context.Context, deadline time.Time, raw json.RawMessage) (json.RawMessage, map[string]int, *Decoded, error) {
	if s.disabled || len(raw) == 0 {
		return raw, nil, nil, nil
	}
	if !jsonscan.Valid(raw) { // as encoding/json.Valid, faster
		return nil, nil, nil, &ScanError{Reason: "the message is not valid JSON"}
	}
	if bytes.IndexByte(raw, '"') < 0 {
		// No string, so nothing to scrub: only the insides of string
		// literals are ever edited (arguments such as {} or a result of
		// numbers). There is nothing decoded to share either.
		return raw, nil, nil, nil
	}
	// The scan's results are returned, not stored in variables of this
	// frame: the closure would move such variables to the heap, three
	// allocations a call.
	r, err := runScan(s, ctx, deadline, len(raw), func(ctx context.Context) (jsonScan, error) {
		return s.scanJSON(ctx, raw, s.inlined(len(raw)))
	})
	if err != nil {
		return nil, nil, nil, err
	}
	edits, counts, dec := r.edits, r.counts, r.dec
	if len(edits) == 0 {
		return raw, nil, dec, nil
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	last := 0
	for _, e := range edits {
		b.Write(raw[last:e.start])
		b.WriteString(e.repl)
		last = e.end
	}
	b.Write(raw[last:])
	return json.RawMessage(b.Bytes()), counts, nil, nil
}

// edit replaces raw[start:end] by repl.
type edit struct {
	start, end int
	repl       string
}

// jsonScan is what scanJSON returns: the edits that remove the secrets
// found and their counts by rule, or when there are none, the view of raw
// the scan decoded (nil when there is none to share).
type jsonScan struct {
	edits  []edit
	counts map[string]int
	dec    *Decoded
}

// jsonString is the interior of one string literal of a JSON text.
type jsonString struct {
	start, end int // raw[start:end] is between the quotes
	blob       bool
}

// scanJSON finds the secrets of raw and returns the edits that remove
// them. When raw holds no textual blob, it also returns the view of raw
// the scan decoded (see Decoded); the view is only good for raw
// itself, so the caller drops it when there are edits.
//
// With alias, the scan reads raw as a string without copying it: the
// caller must run the scan on its own goroutine (runScan does when
// s.inlined) and keep raw unchanged while it holds the view, and the
// scan keeps no part of the text past its return but in the view (what it
// found is redacted into a new text). Larger texts are scanned on a
// goroutine that may outlive runScan at its deadline: they are copied.
func (s *Scrubber) scanJSON(ctx context.Context, raw []byte, alias bool) (jsonScan, error) {
	// The string literals are listed up front only when a textual blob may
	// be among them; otherwise only once a secret is found (most results
	// hold none), to keep its edits inside the strings.
	var strs []jsonString
	if bytes.Contains(raw, []byte(`"blob"`)) || bytes.Contains(raw, []byte(`"data"`)) {
		strs = jsonStrings(raw)
	}
	var counts map[string]int
	var edits []edit
	var blank []jsonString // textual blobs, scanned decoded and hidden from the raw scan
	for _, js := range strs {
		if !js.blob {
			continue
		}
		dec, ok := textBlob(raw[js.start:js.end])
		if !ok {
			continue
		}
		blank = append(blank, js)
		spans, v, err := s.scan(ctx, dec, false)
		v.release()
		if err != nil {
			return jsonScan{}, err
		}
		if len(spans) == 0 {
			continue
		}
		clean, c := redact(dec, spans)
		if counts == nil {
			counts = map[string]int{}
		}
		for k, v := range c {
			counts[k] += v
		}
		edits = append(edits, edit{js.start, js.end, base64.StdEncoding.EncodeToString([]byte(clean))})
	}

	var text string
	var own *viewBufs // the scan's copy of raw, when it has one
	if len(blank) == 0 && alias {
		text = unsafe.String(unsafe.SliceData(raw), len(raw))
	} else {
		// A buffer of the views' pool: it goes back once nothing reads
		// the copy (the count's decoded view, Decoded.release), not
		// when the scan is abandoned at its deadline (it is garbage
		// then).
		own = viewPool.Get().(*viewBufs)
		own.buf = append(own.buf[:0], raw...)
		for _, js := range blank {
			for i := js.start; i < js.end; i++ {
				own.buf[i] = ' '
			}
		}
		text = unsafe.String(unsafe.SliceData(own.buf), len(own.buf))
	}
	spans, v, err := s.scan(ctx, text, true)
	if err != nil {
		return jsonScan{}, err
	}
	var dec *Decoded
	if len(blank) == 0 {
		dec = &Decoded{raw: raw, v: v, own: own}
	} else {
		v.release()
		own.put()
	}
	// Keep only the parts of each span inside string literals (never a
	// quote or a structural character) and outside textual blobs.
	if len(spans) > 0 && strs == nil {
		strs = jsonStrings(raw)
	}
	k := 0
	for _, f := range spans {
		hit := false
		for k > 0 && strs[k-1].end > f.start {
			k--
		}
		for ; k < len(strs) && strs[k].start < f.end; k++ {
			js := strs[k]
			a, b := max(js.start, f.start), min(js.end, f.end)
			if a >= b || js.blob && isBlanked(blank, js) {
				continue
			}
			edits = append(edits, edit{a, b, marker(f.rule)})
			hit = true
		}
		if hit {
			if counts == nil {
				counts = map[string]int{}
			}
			counts[f.rule]++
		}
	}
	if len(edits) == 0 {
		return jsonScan{dec: dec}, nil
	}
	dec.Release() // it decodes raw, which the edits replace
	sortEdits(edits)
	return jsonScan{edits: edits, counts: counts}, nil
}

func isBlanked(blank []jsonString, js jsonString) bool {
	for _, b := range blank {
		if b.start == js.start {
			return true
		}
	}
	return false
}

func sortEdits(es []edit) {
	// Edits never overlap: spans are merged and blobs are excluded from
	// the span edits.
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].start < es[j-1].start; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// jsonStrings lists the string literals of valid JSON, in order, marking
// the values of "blob" and "data" keys.
func jsonStrings(raw []byte) []jsonString {
	// Two quotes a string, escaped quotes aside: one allocation.
	out := make([]jsonString, 0, bytes.Count(raw, []byte{'"'})/2)
	var lastKey []byte
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '"')
		if j < 0 {
			break
		}
		open := i + j
		end, err := jsonscan.SkipString(raw, open)
		if err != nil {
			end = len(raw) + 1 // unterminated: the string runs to the end
		}
		js := jsonString{start: open + 1, end: min(end-1, len(raw))}
		next := jsonscan.SkipSpace(raw, end)
		if next < len(raw) && raw[next] == ':' {
			lastKey = raw[js.start:js.end]
		} else if prevNonSpace(raw, open) == ':' && (string(lastKey) == "blob" || string(lastKey) == "data") && js.end-js.start >= 16 {
			js.blob = true
		}
		out = append(out, js)
		i = end
	}
	return out
}

func prevNonSpace(raw []byte, i int) byte {
	for i--; i >= 0; i-- {
		if !jsonscan.IsSpace(raw[i]) {
			return raw[i]
		}
	}
	return 0
}

// textBlob decodes a base64 string literal and reports whether it holds
// text (valid UTF-8 without control characters other than white space).
func textBlob(lit []byte) (string, bool) {
	if bytes.IndexByte(lit, '\\') >= 0 {
		s, err := jsonscan.Unquote(append(append([]byte{'"'}, lit...), '"'))
		if err != nil {
			return "", false
		}
		lit = []byte(s)
	}
	dec := make([]byte, base64.StdEncoding.DecodedLen(len(lit)))
	n, err := base64.StdEncoding.Decode(dec, lit)
	if err != nil {
		return "", false
	}
	dec = dec[:n]
	if !utf8.Valid(dec) {
		return "", false
	}
	for _, c := range dec {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' {
			return "", false
		}
	}
	return string(dec), true
}
