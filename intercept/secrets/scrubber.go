package intercept

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonrpc"
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

// inlineScanBytes is the size under which a text is scanned on the
// caller's goroutine (see runScan). Tool results are mostly this small (the
// median of the trajectory data is a few hundred bytes), and a scan of
// this much takes well under a millisecond: the goroutine, its stack and
// the timer that would let runScan return at the deadline whatever the
// detector does cost more than the scan itself.
const inlineScanBytes = 16 << 10

// unescapeDepth is how many levels of JSON escaping below the content are
// scanned (JSON in a string in JSON, ...).
const unescapeDepth = 2

// unescapePad is how far around each decoded escape the deeper views are
// scanned.
const unescapePad = 1 << 10

// ErrWithheld is wrapped by the error an agent gets instead of a result
// that could not be scanned for secrets.
var ErrWithheld = errors.New("foldproxy withheld this result")

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
	// goroutine: inlineScanBytes; tests set 0 to have every scan on a
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
		inline:  inlineScanBytes,
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
	return s.scrubText(ctx, time.Now().Add(s.timeout), text)
}

// scrubText is ScrubText with the deadline given.
func (s *Scrubber) scrubText(ctx context.Context, deadline time.Time, text string) (string, map[string]int, error) {
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
	out, counts, dec, err := s.scrubJSON(ctx, time.Now().Add(s.timeout), raw)
	dec.release() // its buffers go back to the pool
	return out, counts, err
}

// scrubJSON is ScrubJSON with the deadline given, that also returns, when
// nothing was found (out is raw), the strings of raw as the scan decoded
// them, for the count (decodedJSON); nil when there is none to share.
func (s *Scrubber) scrubJSON(ctx context.Context, deadline time.Time, raw json.RawMessage) (json.RawMessage, map[string]int, *decodedJSON, error) {
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
	dec    *decodedJSON
}

// jsonString is the interior of one string literal of a JSON text.
type jsonString struct {
	start, end int // raw[start:end] is between the quotes
	blob       bool
}

// scanJSON finds the secrets of raw and returns the edits that remove
// them. When raw holds no textual blob, it also returns the view of raw
// the scan decoded (see decodedJSON); the view is only good for raw
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
		// the copy (the count's decoded view, decodedJSON.release), not
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
	var dec *decodedJSON
	if len(blank) == 0 {
		dec = &decodedJSON{raw: raw, v: v, own: own}
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
	dec.release() // it decodes raw, which the edits replace
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

// inlined reports whether runScan scans a text of size bytes on the caller's
// goroutine: scanJSON may then read the text without copying it.
func (s *Scrubber) inlined(size int) bool { return size < s.inline }

// runScan runs f, the scan of a text of size bytes, until deadline, turning a
// deadline, a cancellation or a panic into a *ScanError.
//
// A text of s.inline bytes or more is scanned on a goroutine of its own,
// under a context that ends at the deadline, and runScan returns at the
// deadline even when f does not: a detector that ignores its context is
// left to finish on its own, its result discarded. A smaller text is
// scanned on the caller's goroutine, as Tokens counts a small result, with
// no goroutine, context or timer of its own: go-re2's engine runs in time
// linear in the text, and a scan that ends past the deadline fails all the
// same. ctx still cancels both (gitleaks checks it between rules).
//
// f returns what it found rather than storing it in the caller's
// variables, which would move them to the heap (f escapes, to the
// goroutine). What it returns is dropped when runScan fails.
func runScan[T any](s *Scrubber, ctx context.Context, deadline time.Time, size int, f func(context.Context) (T, error)) (T, error) {
	var v T
	var err error
	wctx := ctx
	if s.inlined(size) {
		v, err = runScanInline(s, ctx, f)
	} else {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadlineCause(ctx, deadline, errWorkTimeout)
		defer cancel()
		type outcome struct {
			v   T
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			growStack(0)
			defer func() {
				if r := recover(); r != nil {
					done <- outcome{err: s.panicked(r)}
				}
			}()
			v, err := f(wctx)
			done <- outcome{v, err}
		}()
		select {
		case o := <-done:
			v, err = o.v, o.err
		case <-wctx.Done():
			err = wctx.Err()
		}
	}
	late := !time.Now().Before(deadline)
	if err == nil && !late {
		return v, nil
	}
	var zero T
	var se *ScanError
	switch {
	case ctx.Err() != nil:
		return zero, &ScanError{Reason: "scan canceled: " + ctx.Err().Error(), Err: ctx.Err()}
	case late || errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil:
		return zero, &ScanError{Reason: fmt.Sprintf("scan timed out after %s", s.timeout), Err: context.DeadlineExceeded}
	case errors.As(err, &se):
		return zero, se
	default:
		return zero, &ScanError{Reason: "scan failed: the secret detector reported an error", Err: err}
	}
}

// runScanInline runs f on the calling goroutine, a panic becoming an error.
func runScanInline[T any](s *Scrubber, ctx context.Context, f func(context.Context) (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, s.panicked(r)
		}
	}()
	if err := ctx.Err(); err != nil {
		return v, err
	}
	return f(ctx)
}

// scanStack is the stack a scan goroutine is grown to up front: gitleaks'
// detector calling into the regex engine (go-re2's translated
// WebAssembly) runs deep. 16 KiB removed nearly all later growth on the
// trajectory data; 32 and 64 KiB cost more in zeroing than they saved.
const scanStack = 16 << 10

// growStack grows the calling goroutine's stack to hold scanStack bytes
// at once, while it is nearly empty and cheap to copy. A goroutine starts
// with a few KB; growing it by doublings in the middle of a scan copies
// the deep frames of the detector at each one (5 to 10% of the CPU time
// of scrubbing the trajectory data's tool results went there). i is 0; it keeps the frame from
// being optimized away.
//
//go:noinline
func growStack(i int) byte {
	var pad [scanStack]byte
	pad[i] = 1
	return pad[(i*7)%len(pad)]
}

// panicked logs a recovered panic (its type and stack, never its value,
// which could quote the text) and returns the error that replaces it.
func (s *Scrubber) panicked(r any) error {
	s.logger.Error("scrub: secret detector panicked", "panic_type", fmt.Sprintf("%T", r), "stack", string(debug.Stack()))
	return &ScanError{Reason: "scan failed: the secret detector panicked"}
}

// scanText is one text the engine scans: a view of the raw text (the raw
// text itself, or one with a level of JSON escaping undone), or a window
// of a deeper view around its decoded escapes, starting at off in v.text.
type scanText struct {
	v    *view
	off  int
	text string
	nls  []int
}

// scanJob is one piece of a scanText: the secrets whose keyword starts in
// text[lo:hi], or (rule >= 0) one whole rule over the whole text. It holds
// its text by value, and ti is the text's index in the scan's list: a scan
// of one piece then keeps its texts and jobs in its own frame (a pointer
// to a text, shared with the workers of runJobsParallel, would move every
// text to the heap).
type scanJob struct {
	t      scanText
	ti     int
	lo, hi int
	rule   int
}

// scan finds the secrets of text and returns them merged. In JSON mode
// text is JSON: its strings are scanned decoded. Besides the text as it
// is, the views with one and two more levels of JSON escaping undone are
// scanned around their escape sequences.
//
// Texts longer than a chunk are scanned in pieces of about s.chunk bytes,
// in parallel. Pieces do not overlap and are cut where no stretched rule
// can run through the cut; a piece scans the windows of the keywords that
// start in it, wherever they reach, so a secret across a piece border is
// found whole. Rules that can run through any byte (private keys) are
// run once over the whole text when a piece reports their keyword.
//
// It also returns the view the scan starts from: in JSON mode the text with
// one level of escaping undone (its strings decoded), else the text itself.
func (s *Scrubber) scan(ctx context.Context, text string, jsonMode bool) ([]found, *view, error) {
	if uint64(len(text)) > maxScanText {
		return nil, nil, &ScanError{Reason: fmt.Sprintf("scan refused: the text is %d bytes, over the scrubber's limit of %d", len(text), uint64(maxScanText))}
	}
	root := &view{text: text}
	cur := root
	if jsonMode {
		if v, ok := unescapeView(root, true); ok {
			cur = v
		}
	}
	first := cur
	nls := cur.nls
	if cur.parent == nil {
		nls = newlines(cur.text, nil)
	}
	// Sized for the common scan, which these fit: kept in this frame.
	texts := make([]scanText, 0, 4)
	texts = append(texts, scanText{v: cur, text: cur.text, nls: nls})
	// The deeper views are the scan's own: their buffers go back when it
	// ends (every job has ended by then, runJobs waits for them; what
	// the scan returns holds offsets into the raw text).
	var deeper []*view
	defer func() {
		for _, v := range deeper {
			v.release()
		}
	}()
	for range unescapeDepth {
		v, ok := unescapeView(cur, false)
		if !ok {
			break
		}
		deeper = append(deeper, v)
		for _, w := range v.changedWindows(unescapePad) {
			sub := v.text[w[0]:w[1]]
			texts = append(texts, scanText{v: v, off: w[0], text: sub, nls: newlines(sub, nil)})
		}
		cur = v
	}
	jobs := make([]scanJob, 0, 4)
	for ti, t := range texts {
		for lo := 0; lo < len(t.text); {
			hi := len(t.text)
			if len(t.text)-lo > s.chunk {
				hi = s.eng.splitPoint(t.text, lo+s.chunk)
			}
			jobs = append(jobs, scanJob{t: t, ti: ti, lo: lo, hi: hi, rule: -1})
			lo = hi
		}
	}
	res := make([]jobResult, 4)
	if len(jobs) > len(res) {
		res = make([]jobResult, len(jobs))
	}
	res = res[:len(jobs)]
	if err := s.runJobs(ctx, jobs, res); err != nil {
		return nil, nil, err
	}
	// Second round: whole rules whose keyword a piece saw.
	var more []scanJob
	seen := map[[2]int]bool{}
	for i, r := range res {
		for _, ri := range r.whole {
			k := [2]int{jobs[i].ti, ri}
			if !seen[k] {
				seen[k] = true
				more = append(more, scanJob{t: jobs[i].t, ti: jobs[i].ti, rule: ri})
			}
		}
	}
	var all []found
	for i, r := range res {
		all = appendMapped(all, jobs[i].t.v, r.fs, jobs[i].t.off)
	}
	// Compressed text (gzip+base64, scrub_split.go), looked for in the
	// text as the client reads it.
	if strings.Contains(first.text, gzipMagic64) {
		gz, err := s.gzipFindings(ctx, first.text)
		if err != nil {
			return nil, nil, err
		}
		all = appendMapped(all, first, gz, 0)
	}
	if len(more) > 0 {
		res2 := make([]jobResult, len(more))
		if err := s.runJobs(ctx, more, res2); err != nil {
			return nil, nil, err
		}
		for i, r := range res2 {
			all = appendMapped(all, more[i].t.v, r.fs, more[i].t.off)
		}
	}
	if len(all) == 0 {
		return nil, first, nil
	}
	all = append(all, sweep(text, all)...)
	return mergeFound(all), first, nil
}

// jobResult is what one scanJob found.
type jobResult struct {
	fs    []found
	whole []int
}

// runJob runs one scanJob.
func (s *Scrubber) runJob(ctx context.Context, j scanJob) (jobResult, error) {
	if j.rule >= 0 {
		fs, err := s.eng.findWhole(ctx, j.t.text, j.rule)
		return jobResult{fs: fs}, err
	}
	fs, whole, err := s.find(ctx, j.t.text, j.t.nls, j.lo, j.hi)
	return jobResult{fs: fs, whole: whole}, err
}

// runJobs runs jobs over GOMAXPROCS workers and stores their results in
// res, in order (res has a result for each job). The first error (a
// *ScanError first) cancels the rest.
func (s *Scrubber) runJobs(ctx context.Context, jobs []scanJob, res []jobResult) error {
	if len(jobs) == 1 {
		r, err := s.runJob(ctx, jobs[0])
		res[0] = r
		return err
	}
	results, err := s.runJobsParallel(ctx, slices.Clone(jobs))
	copy(res, results)
	return err
}

// runJobsParallel is runJobs of more than one job. It is a function of its
// own so that what its workers share is put on the heap only when there
// are workers (a small text is one job); jobs is its own, shared with
// them.
func (s *Scrubber) runJobsParallel(ctx context.Context, jobs []scanJob) ([]jobResult, error) {
	results := make([]jobResult, len(jobs))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	// Worker 0 is this goroutine, which would only wait otherwise.
	var first func()
	for w := range workers {
		wg.Add(1)
		work := func() {
			if w > 0 {
				growStack(0)
			}
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs[w] = s.panicked(r)
					cancel()
				}
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) || ctx.Err() != nil {
					return
				}
				r, err := s.runJob(ctx, jobs[i])
				if err != nil {
					errs[w] = err
					cancel()
					return
				}
				results[i] = r
			}
		}
		if w == 0 {
			first = work
		} else {
			go work()
		}
	}
	first()
	wg.Wait()
	for _, err := range errs {
		var se *ScanError
		if errors.As(err, &se) {
			return nil, err
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return results, nil
}

// appendMapped maps findings made at offset off of v.text to the raw text.
func appendMapped(out []found, v *view, fs []found, off int) []found {
	for _, f := range fs {
		f.start, f.end = v.toRoot(f.start+off, f.end+off)
		out = append(out, f)
	}
	return out
}

// ScrubbedRPCError is what a JSON-RPC error from an upstream becomes when
// its message or data held a secret: the same code, the message and data
// scrubbed. It implements the RPCError interface the proxy can use to
// encode it.
type ScrubbedRPCError struct {
	Code    int
	Message string
	Data    json.RawMessage
}

func (e *ScrubbedRPCError) Error() string {
	return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message)
}

// RPCCode returns the JSON-RPC error code.
func (e *ScrubbedRPCError) RPCCode() int { return e.Code }

// RPCMessage returns the scrubbed message.
func (e *ScrubbedRPCError) RPCMessage() string { return e.Message }

// RPCData returns the scrubbed data, or nil.
func (e *ScrubbedRPCError) RPCData() json.RawMessage { return e.Data }

// RPCError is implemented by errors that carry a JSON-RPC error object.
// The scrub interceptor uses it to scrub an upstream's error message and
// data while keeping its code; RPCData is optional.
type RPCError interface {
	error
	RPCCode() int
	RPCMessage() string
}

// redactedError replaces an error whose text held a secret. errors.Is
// still matches what the original matched, but the original (and its text)
// is not reachable through Unwrap.
type redactedError struct {
	msg  string
	orig error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.orig, target) }

// Scrub returns the interceptor that removes secrets from what an upstream
// sends back: ex.Result (every string in it), the message and data of
// ex.RPCError, and the text of ex.Err; and from the call's arguments as
// they are archived and counted (ex.Args, once the upstream has answered;
// the upstream itself gets them unchanged). Redactions are added to
// ex.Redactions and the time spent is stored in ex.ScrubTime.
//
// An upstream JSON-RPC error that held a secret is replaced by a
// *ScrubbedRPCError with the same code when the error implements RPCError,
// and with code -32603 otherwise; a clean error is left untouched.
//
// Scrubbing fails closed: when a scan errors, panics or overruns its
// deadline, the result is withheld — ex.Result and ex.RPCError are cleared,
// ex.Outcome is OutcomeWithheld and ex.Err (also returned) wraps
// ErrWithheld and says why, e.g. "foldproxy withheld this result: it could
// not be scanned for secrets (scan timed out after 10s)". A nil or disabled
// scrubber passes everything through.
func Scrub(s *Scrubber) Interceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) (err error) {
			herr := next(ctx, ex)
			if s == nil || s.disabled {
				return herr
			}
			start := time.Now()
			// One deadline for all the work on this result: every scan
			// below, then counting (ex.WorkDeadline, read by Tokens).
			deadline := start.Add(s.timeout)
			ex.WorkDeadline = deadline
			defer func() {
				if r := recover(); r != nil {
					err = s.withhold(ctx, ex, s.panicked(r))
				}
				ex.ScrubTime = time.Since(start)
			}()
			if len(ex.Args) > 0 {
				// The arguments went upstream as the agent sent them
				// (ex.Params); what is archived and counted from here on
				// is the scrubbed copy. A copy that cannot be scanned
				// withholds the exchange: nothing is delivered, so
				// nothing is archived.
				out, counts, dec, serr := s.scrubJSON(ctx, deadline, ex.Args)
				dec.release() // nothing reads the arguments decoded
				if serr != nil {
					return s.withhold(ctx, ex, serr)
				}
				ex.Args = out
				addCounts(ex, counts)
			}
			if len(ex.Result) > 0 {
				out, counts, dec, serr := s.scrubJSON(ctx, deadline, ex.Result)
				if serr != nil {
					return s.withhold(ctx, ex, serr)
				}
				ex.Result, ex.decoded = out, dec
				addCounts(ex, counts)
				// Secrets split across the result's text items.
				out, counts, serr = s.scrubItems(ctx, deadline, ex.Result)
				if serr != nil {
					return s.withhold(ctx, ex, serr)
				}
				if len(counts) > 0 {
					ex.decoded.release()
					ex.Result, ex.decoded = out, nil
					addCounts(ex, counts)
				}
			}
			if ex.RPCError != nil {
				rerr, counts, serr := s.scrubRPCError(ctx, deadline, ex.RPCError)
				if serr != nil {
					return s.withhold(ctx, ex, serr)
				}
				ex.RPCError = rerr
				addCounts(ex, counts)
			}
			if ex.Err != nil {
				msg := ex.Err.Error()
				clean, counts, serr := s.scrubText(ctx, deadline, msg)
				if serr != nil {
					return s.withhold(ctx, ex, serr)
				}
				if clean != msg {
					ex.Err = &redactedError{msg: clean, orig: ex.Err}
					addCounts(ex, counts)
				}
				if herr != nil {
					herr = ex.Err
				}
			}
			return herr
		}
	}
}

func (s *Scrubber) scrubRPCError(ctx context.Context, deadline time.Time, e error) (error, map[string]int, error) {
	var re RPCError
	if !errors.As(e, &re) {
		msg := e.Error()
		clean, counts, err := s.scrubText(ctx, deadline, msg)
		if err != nil || clean == msg {
			return e, nil, err
		}
		return &ScrubbedRPCError{Code: jsonrpc.CodeInternalError, Message: clean}, counts, nil
	}
	msg := re.RPCMessage()
	clean, counts, err := s.scrubText(ctx, deadline, msg)
	if err != nil {
		return nil, nil, err
	}
	var data json.RawMessage
	if d, ok := re.(interface{ RPCData() json.RawMessage }); ok {
		data = d.RPCData()
	}
	cleanData := data
	if len(data) > 0 {
		var dc map[string]int
		cleanData, dc, _, err = s.scrubJSON(ctx, deadline, data)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range dc {
			if counts == nil {
				counts = map[string]int{}
			}
			counts[k] += v
		}
	}
	if len(counts) == 0 {
		return e, nil, nil
	}
	return &ScrubbedRPCError{Code: re.RPCCode(), Message: clean, Data: cleanData}, counts, nil
}

func addCounts(ex *Exchange, counts map[string]int) {
	if len(counts) == 0 {
		return
	}
	if ex.Redactions == nil {
		ex.Redactions = make(map[string]int, len(counts))
	}
	for k, v := range counts {
		ex.Redactions[k] += v
	}
}

// withhold fails an exchange closed: nothing of the upstream's answer is
// delivered.
//
// When the call itself has ended (ctx canceled by the agent, or past its
// deadline), that is not a scan failure: the exchange's outcome is
// OutcomeCanceled and ex.Err wraps ctx's error (context.Canceled or
// context.DeadlineExceeded), so that the proxy can tell a canceled call,
// which gets no response, from a result withheld for want of a scan.
func (s *Scrubber) withhold(ctx context.Context, ex *Exchange, cause error) error {
	ex.Result = nil
	ex.RPCError = nil
	if cerr := ctx.Err(); cerr != nil {
		ex.Outcome = OutcomeCanceled
		ex.Err = fmt.Errorf("foldproxy: %s ended before its result was scanned: %w", ex.Method, cerr)
		s.logger.Debug("scrub: call ended during the scan", "session", ex.Session, "upstream", ex.Upstream, "method", ex.Method, "reason", cerr.Error())
		return ex.Err
	}
	ex.Outcome = OutcomeWithheld
	ex.Err = fmt.Errorf("%w: it could not be scanned for secrets (%v)", ErrWithheld, cause)
	s.logger.Warn("scrub: result withheld", "session", ex.Session, "upstream", ex.Upstream, "method", ex.Method, "reason", cause.Error())
	return ex.Err
}
