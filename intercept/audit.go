package intercept

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/rawio"
	"github.com/foldproxy/foldproxy/policy/statedir"
)

// Record kinds written by foldproxy.
const (
	KindCall   = "call"   // one forwarded request and its answer
	KindBranch = "branch" // one branch lifecycle event
	// KindModel is one request of the model front: Method is the dialect,
	// ResultTokens the conversation as the agent sent it, DeliveredTokens
	// as forwarded after folding, Tokens the branches folded.
	KindModel = "model"
)

// Limits on the free text an audit record may carry. They keep a record
// small enough to be written with one write call and read back with a
// bounded buffer.
const (
	maxErrorLen = 256     // bytes of Record.Error
	maxToolLen  = 512     // bytes of Record.Tool
	maxLineLen  = 1 << 20 // a longer line is not a record of ours: the reader skips it
)

// Record is one line of the JSONL audit log. It holds names, counts and
// sizes only: never a result, an argument or a message, so that no secret
// can land in the log. Error is the short error text the agent was given,
// which the proxy has already scrubbed.
type Record struct {
	Time     time.Time `json:"time"` // RFC 3339 with nanoseconds, UTC
	Kind     string    `json:"kind"` // KindCall or KindBranch; other kinds for records the proxy writes itself
	Session  string    `json:"session,omitempty"`
	Branch   string    `json:"branch,omitempty"`
	Parent   string    `json:"parent,omitempty"`
	Depth    int       `json:"depth"`
	Upstream string    `json:"upstream,omitempty"`
	Method   string    `json:"method,omitempty"`
	// Tool is the tool or prompt name, or the resource URI without its
	// user information, query and fragment (they may hold credentials).
	Tool string `json:"tool,omitempty"`

	ArgTokens         int            `json:"arg_tokens,omitempty"`
	ResultTokens      int            `json:"result_tokens,omitempty"`    // as the upstream sent it, before any cut
	DeliveredTokens   int            `json:"delivered_tokens,omitempty"` // what the agent received, notices included
	Redactions        map[string]int `json:"redactions,omitempty"`       // secrets removed, by rule id
	BudgetUsed        int            `json:"budget_used,omitempty"`
	BudgetTotal       int            `json:"budget_total,omitempty"`
	Outcome           string         `json:"outcome,omitempty"` // one of the Outcome constants
	Error             string         `json:"error,omitempty"`
	CutHandle         string         `json:"cut_handle,omitempty"`
	LatencyMS         float64        `json:"latency_ms,omitempty"`          // total, from the request's arrival
	UpstreamLatencyMS float64        `json:"upstream_latency_ms,omitempty"` // the upstream's share

	// Branch events only.
	Event  string `json:"event,omitempty"` // created, returned, forced, failed, warning, cut, refused
	Status string `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
	Level  string `json:"level,omitempty"`
	Tokens int    `json:"tokens,omitempty"` // message tokens of a return; remainder of a cut

	// Model requests only (KindModel).
	Model *ModelFigures `json:"model,omitempty"`
}

// ModelFigures are what a model request's audit record adds: its model
// session, what automatic folding did, the usage the model API reported,
// and the prompt-cache model of its bill (the front's o200k tokens).
type ModelFigures struct {
	Session string `json:"session,omitempty"`
	// Automatic folds: those this request decided (Folds), the results it
	// carried folded and the tokens they kept out of it. In observe mode
	// nothing was folded and the same figures are WouldFold, WouldSave
	// and WouldFolds.
	Folds      []FoldNote `json:"folds,omitempty"`
	Folded     int        `json:"folded,omitempty"`
	FoldSaved  int        `json:"fold_saved,omitempty"`
	WouldFolds []FoldNote `json:"would_folds,omitempty"`
	WouldFold  int        `json:"would_fold,omitempty"`
	WouldSave  int        `json:"would_save,omitempty"`
	Recalls    int        `json:"recalls,omitempty"`
	// Usage is what the model API reported; absent when it reported none
	// that foldproxy could read.
	Usage *Usage `json:"usage,omitempty"`
	// The modelled bill of the request's input at the configured cache
	// prices: as forwarded (its prefix held since the session's request
	// before read, the rest written), and as it would have been without
	// foldproxy (the client's requests taken to grow by appending).
	PrefixHeld      int     `json:"prefix_held"`
	ModelledBilled  float64 `json:"modelled_billed"`
	ModelledWithout float64 `json:"modelled_without"`
}

// FoldNote is one automatic fold in an audit record: what it hid and the
// handle that reads it back.
type FoldNote struct {
	Handle string `json:"handle"`
	Kind   string `json:"kind"`
	Tool   string `json:"tool,omitempty"`
	Brief  string `json:"brief,omitempty"`
	Tokens int    `json:"tokens"`
}

// Usage is a model answer's usage as the API reported it, and the input it
// bills at the configured cache prices.
type Usage struct {
	Input      int     `json:"input"`
	CacheRead  int     `json:"cache_read"`
	CacheWrite int     `json:"cache_write"`
	Output     int     `json:"output"`
	Billed     float64 `json:"billed"`
}

// Auditor writes the JSONL audit log: one record per forwarded request and
// per branch event, each with a single write so that concurrent records
// never interleave. A crash can leave at most a torn last line, which
// ReadAudit skips and the next NewAuditor terminates.
//
// The log rotates by size: past policy.Audit.MaxBytes the file becomes
// <path>.1, older rotations shift up, and at most MaxFiles rotated files are
// kept. Fsync follows policy.Audit.Fsync: "always" syncs before Write
// returns, "interval" syncs from a background flusher at most FsyncInterval
// after a write (and on Close), "never" leaves it to the system.
//
// An Auditor built with the path "" or "-" is a no-op that accepts every
// record. All methods are safe for concurrent use; a nil *Auditor behaves as
// the no-op one.
type Auditor struct {
	logger   *slog.Logger
	path     string
	maxBytes int64
	maxFiles int
	fsync    string

	mu     sync.Mutex
	buf    []byte   // the line being written, reused
	f      *os.File // nil for the no-op auditor
	size   int64
	dirty  bool // written since the last sync
	closed bool

	stop chan struct{} // closed by Close to end the flusher
	done chan struct{} // closed by the flusher when it ends
}

var _ fold.EventSink = (*Auditor)(nil)

// NewAuditor opens (creating it and its folder if need be) the audit log at
// path, already resolved by the caller. Zero fields of a take the defaults
// of policy.Default. The path "" or "-" gives a no-op auditor. Close must be
// called to flush and release the file.
func NewAuditor(a policy.Audit, path string, logger *slog.Logger) (*Auditor, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if path == "" || path == "-" {
		return &Auditor{logger: logger}, nil
	}
	def := policy.Default().Audit
	if a.MaxBytes == 0 {
		a.MaxBytes = def.MaxBytes
	}
	if a.MaxFiles == 0 {
		a.MaxFiles = def.MaxFiles
	}
	if a.Fsync == "" {
		a.Fsync = def.Fsync
	}
	if a.FsyncInterval == 0 {
		a.FsyncInterval = def.FsyncInterval
	}
	switch {
	case a.MaxBytes < 0:
		return nil, fmt.Errorf("audit.maxBytes: %d must not be negative", a.MaxBytes)
	case a.MaxFiles < 0:
		return nil, fmt.Errorf("audit.maxFiles: %d must not be negative", a.MaxFiles)
	case a.FsyncInterval < 0:
		return nil, fmt.Errorf("audit.fsyncInterval: %s must not be negative", a.FsyncInterval.D())
	}
	switch a.Fsync {
	case "always", "interval", "never":
	default:
		return nil, fmt.Errorf("audit.fsync: %q is not one of always, interval, never", a.Fsync)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log folder: %w", err)
	}
	au := &Auditor{
		logger:   logger,
		path:     path,
		maxBytes: a.MaxBytes,
		maxFiles: a.MaxFiles,
		fsync:    a.Fsync,
	}
	if err := au.open(); err != nil {
		return nil, err
	}
	if a.Fsync == "interval" {
		au.stop = make(chan struct{})
		au.done = make(chan struct{})
		go au.flusher(a.FsyncInterval.D())
	}
	return au, nil
}

// open opens the log for appending. When the file ends in a torn line (a
// crash in the middle of a write), a newline is added first so that the
// next record starts a line of its own.
func (a *Auditor) open() error {
	// Not through a link, and only a file of this user's: a link or a
	// file someone else left in the state folder would send the records
	// to them.
	f, err := statedir.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log: %w", err)
	}
	size := st.Size()
	if size > 0 {
		torn, err := endsTorn(a.path, size)
		if err != nil {
			f.Close()
			return err
		}
		if torn {
			if _, err := f.Write([]byte{'\n'}); err != nil {
				f.Close()
				return fmt.Errorf("audit log %s: terminating a torn last line: %w", a.path, err)
			}
			size++
		}
	}
	a.f, a.size = f, size
	return nil
}

// endsTorn reports whether the file of the given size does not end with a
// newline.
func endsTorn(path string, size int64) (bool, error) {
	r, err := statedir.Open(path)
	if err != nil {
		return false, fmt.Errorf("audit log: %w", err)
	}
	defer r.Close()
	var b [1]byte
	if _, err := r.ReadAt(b[:], size-1); err != nil {
		return false, fmt.Errorf("audit log %s: reading its last byte: %w", path, err)
	}
	return b[0] != '\n', nil
}

// flusher syncs the log at most every interval while records are written.
func (a *Auditor) flusher(interval time.Duration) {
	defer close(a.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.mu.Lock()
			f, dirty := a.f, a.dirty
			a.dirty = false
			a.mu.Unlock()
			if !dirty || f == nil {
				continue
			}
			// Sync outside the lock so that writers never wait for the
			// disk. A rotation may close f meanwhile; it syncs f first.
			if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
				a.logger.Error("audit: fsync failed", "path", a.path, "err", err)
			}
		}
	}
}

// Write appends rec to the log as one line. A zero Time is set to now; the
// time is stored in UTC, and Error and Tool are shortened. With fsync
// "always" the record is on disk when Write returns.
func (a *Auditor) Write(rec Record) error {
	return a.write(nil, rec)
}

// write appends the records of before (prepared already), then rec, to
// the log with a single write, so that they are never interleaved with
// other records. A record that cannot be encoded is left out, and its
// error returned once the others are written.
func (a *Auditor) write(before []Record, rec Record) error {
	if rec.Kind == "" {
		return errors.New("audit record: kind is empty")
	}
	if a == nil || a.path == "" {
		return nil
	}
	prepare(&rec)

	a.mu.Lock()
	defer a.mu.Unlock()
	buf := a.buf[:0]
	var encErr error
	for i := range before {
		var err error
		if buf, err = encodeLine(buf, &before[i]); err != nil {
			encErr = errors.Join(encErr, err)
		}
	}
	buf, err := encodeLine(buf, &rec)
	if err != nil {
		encErr = errors.Join(encErr, err)
	}
	a.buf = buf
	line := buf
	if cap(a.buf) > 64<<10 {
		a.buf = nil // a rare huge record: do not keep its buffer
	}
	if len(line) == 0 {
		return encErr
	}
	if a.closed {
		return fmt.Errorf("audit log %s: closed", a.path)
	}
	if a.f == nil {
		// A failed rotation left no file open; try again.
		if err := a.open(); err != nil {
			return err
		}
	}
	if a.size > 0 && a.size+int64(len(line)) > a.maxBytes {
		if err := a.rotate(); err != nil {
			return err
		}
	}
	n, err := rawio.WriteFile(a.f, line) // no scheduler work: see rawio.WriteFile
	a.size += int64(n)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", a.path, err)
	}
	switch a.fsync {
	case "always":
		if err := a.f.Sync(); err != nil {
			return fmt.Errorf("audit log %s: fsync: %w", a.path, err)
		}
	case "interval":
		a.dirty = true
	}
	return encErr
}

// eventBatch holds the branch-event records of one audited exchange (the
// fold manager's events while it serves a fold tool, the budget's while it
// charges a result), which Audit writes with the exchange's call record in
// one write(2) instead of one write each: the same records, in the same
// order, all in the log before the response is released, as before.
type eventBatch struct {
	a    *Auditor
	mu   sync.Mutex
	recs []Record
	done bool // the exchange's records are written: events go to the log at once
}

type eventBatchKey struct{}

// batched queues rec with the records of the exchange ctx belongs to, when
// a audits it and its records are not written yet, and reports whether it
// did.
func (a *Auditor) batched(ctx context.Context, rec Record) bool {
	b, _ := ctx.Value(eventBatchKey{}).(*eventBatch)
	if b == nil || b.a != a {
		return false
	}
	prepare(&rec) // its time is the event's, not the write's
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return false
	}
	b.recs = append(b.recs, rec)
	return true
}

// take ends the batch and returns its records.
func (b *eventBatch) take() []Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	recs := b.recs
	b.recs = nil
	return recs
}

// rotate shifts <path>.i to <path>.i+1, drops what falls past maxFiles,
// moves the log to <path>.1 and opens a fresh one. a.mu is held.
func (a *Auditor) rotate() error {
	if a.fsync != "never" {
		if err := a.f.Sync(); err != nil {
			a.logger.Error("audit: fsync before rotation failed", "path", a.path, "err", err)
		}
	}
	if err := a.f.Close(); err != nil {
		a.logger.Error("audit: close before rotation failed", "path", a.path, "err", err)
	}
	a.f, a.size, a.dirty = nil, 0, false
	if err := os.Remove(rotated(a.path, a.maxFiles)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("audit log %s: rotation: %w", a.path, err)
	}
	for i := a.maxFiles - 1; i >= 1; i-- {
		if err := os.Rename(rotated(a.path, i), rotated(a.path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("audit log %s: rotation: %w", a.path, err)
		}
	}
	if err := os.Rename(a.path, rotated(a.path, 1)); err != nil {
		return fmt.Errorf("audit log %s: rotation: %w", a.path, err)
	}
	return a.open()
}

func rotated(path string, i int) string { return path + "." + strconv.Itoa(i) }

// Close flushes the log to disk, stops the flusher and closes the file.
// Later writes fail. Close may be called more than once.
func (a *Auditor) Close() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	f := a.f
	a.f = nil
	a.mu.Unlock()
	if a.stop != nil {
		close(a.stop)
		<-a.done
	}
	if f == nil {
		return nil
	}
	var errs []error
	if a.fsync != "never" {
		if err := f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("audit log %s: fsync: %w", a.path, err))
		}
	}
	if err := f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("audit log %s: %w", a.path, err))
	}
	return errors.Join(errs...)
}

// Audit returns the interceptor that writes the record of every exchange.
// The record is written synchronously after the inner handlers return, so
// it is in the log (on disk, with fsync "always") before the response is
// released. A failed write is logged and does not withhold the response.
//
// The branch events of the exchange (BranchEvent with its context) are
// written with its record, before it, in the same write.
func Audit(a *Auditor) Interceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			if a == nil || a.path == "" {
				return next(ctx, ex)
			}
			b := &eventBatch{a: a}
			ended := false
			defer func() {
				if ended {
					return
				}
				// A panic: the events still go to the log.
				for _, rec := range b.take() {
					if werr := a.write(nil, rec); werr != nil {
						a.logger.ErrorContext(ctx, "audit: branch event lost", "session", rec.Session,
							"branch", rec.Branch, "event", rec.Event, "err", werr)
					}
				}
			}()
			err := next(context.WithValue(ctx, eventBatchKey{}, b), ex)
			ended = true
			events := b.take()
			rec := callRecord(ex, err, time.Now())
			if werr := a.write(events, rec); werr != nil {
				a.logger.ErrorContext(ctx, "audit: record lost", "session", ex.Session,
					"upstream", ex.Upstream, "method", ex.Method, "events", len(events), "err", werr)
			}
			return err
		}
	}
}

// callRecord builds the record of an exchange that ended at now with the
// handler error herr.
func callRecord(ex *Exchange, herr error, now time.Time) Record {
	rec := Record{
		Time:              now,
		Kind:              KindCall,
		Session:           ex.Session,
		Branch:            ex.Branch,
		Parent:            ex.Parent,
		Depth:             ex.Depth,
		Upstream:          ex.Upstream,
		Method:            ex.Method,
		Tool:              ex.Name,
		ArgTokens:         ex.ArgTokens,
		ResultTokens:      ex.ResultTokens,
		DeliveredTokens:   ex.DeliveredTokens,
		BudgetUsed:        ex.BudgetUsed,
		BudgetTotal:       ex.BudgetTotal,
		Outcome:           ex.Outcome,
		CutHandle:         ex.CutHandle,
		UpstreamLatencyMS: millis(ex.UpstreamLatency),
	}
	if ex.Method == "resources/read" {
		rec.Tool = safeURI(ex.Name)
	}
	if len(ex.Redactions) > 0 {
		rec.Redactions = make(map[string]int, len(ex.Redactions))
		for rule, n := range ex.Redactions {
			rec.Redactions[rule] = n
		}
	}
	if !ex.Start.IsZero() {
		rec.LatencyMS = millis(now.Sub(ex.Start))
	}
	err := ex.Err
	if err == nil {
		err = ex.RPCError
	}
	if err == nil {
		err = herr
	}
	if err != nil {
		rec.Error = shorten(err.Error(), maxErrorLen)
	}
	if rec.Outcome == "" {
		rec.Outcome = OutcomeOK
		if err != nil {
			rec.Outcome = OutcomeError
		}
	}
	return rec
}

// BranchEvent writes the record of a branch event. It implements
// fold.EventSink; a failed write is logged.
func (a *Auditor) BranchEvent(ctx context.Context, ev fold.Event) {
	if a == nil || a.path == "" {
		return
	}
	rec := Record{
		Time:        ev.Time,
		Kind:        KindBranch,
		Session:     ev.Session,
		Branch:      ev.Branch,
		Parent:      ev.Parent,
		Depth:       ev.Depth,
		Event:       ev.Kind,
		Status:      string(ev.Status),
		Reason:      ev.Reason,
		Level:       ev.Level,
		Tokens:      ev.Tokens,
		BudgetUsed:  ev.Used,
		BudgetTotal: ev.Budget,
	}
	if ev.Err != nil {
		rec.Error = ev.Err.Error()
	}
	if a.batched(ctx, rec) {
		return // written with its exchange's record (Audit)
	}
	if err := a.Write(rec); err != nil {
		a.logger.ErrorContext(ctx, "audit: branch event lost", "session", ev.Session,
			"branch", ev.Branch, "event", ev.Kind, "err", err)
	}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// shorten keeps s on one line and within max bytes, cut at a rune boundary.
func shorten(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= max {
		return s
	}
	const ell = "…"
	cut := max - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}

// safeURI drops the user information, query and fragment of a resource URI:
// they are where credentials hide.
func safeURI(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.IndexAny(s, "?#"); i >= 0 {
			s = s[:i]
		}
		if i := strings.Index(s, "@"); i >= 0 {
			s = s[i+1:]
		}
		return s
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}
