package fold

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/policy"
)

// ErrScanFailed is wrapped when a text could not be scanned for secrets at
// fold time; the operation is refused (fail closed).
var ErrScanFailed = errors.New("ErrScanFailed")

// Options configure a Manager. Store and Counter are required; every other
// nil or zero field takes its default.
type Options struct {
	// Settings are the numbers of the fold contract; zero fields take
	// policy.Default's values.
	Settings policy.Fold
	// Store keeps the durable state. The Manager never closes it.
	Store Store
	// Scanner scrubs descriptions, prompts, return messages and return
	// values before they are stored. nil stores them as given: use it only
	// when scrubbing is disabled.
	Scanner Scanner
	// Counter counts the tokens of return messages and recall pages.
	Counter Counter
	// Events receives branch lifecycle events; nil drops them.
	Events EventSink
	// Memory, when not nil, gives branches memories (fold/memory): the
	// memory tools, injection at branch_create, extraction at return.
	// Without it inject_memories and extract_memory are accepted and
	// answered "memory":"unavailable".
	Memory *memory.Service
	// Principal is who this proxy's sessions act for (memory.principal):
	// checkpoints and orphaned branches are shown to sessions of the same
	// principal only. "" means "local".
	Principal string
	// Logger receives the Manager's own warnings; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Deadline timers always run on
	// the runtime's clock.
	Now func() time.Time
	// PruneInterval is how often the archive is pruned in the background
	// (by Settings.ArchiveMaxAge and ArchiveMaxBytes), starting at once.
	// Zero means hourly; a negative value disables background pruning, in
	// which case the owner calls Prune.
	PruneInterval time.Duration
}

// Manager owns the branches of every session of one foldproxy instance.
// Its methods are safe for concurrent use.
//
// Locking. Each branch has a lock, held while its record changes; calls
// charged to one branch serialize on it, calls to different branches run in
// parallel. Locks are always taken from ancestor to descendant (a parent
// before its child), never the other way round, which rules out deadlock.
// A closed branch's record only changes under its parent's lock (to mark
// its summary delivered). Manager.mu is a leaf lock: it guards the maps and
// counters and is never held while waiting for a branch lock or the store.
type Manager struct {
	set       policy.Fold
	principal string
	store     Store
	scan      Scanner
	count     Counter
	events    EventSink
	mem       *memory.Service
	log       *slog.Logger
	now       func() time.Time
	tools     []json.RawMessage

	bg   context.Context // cancelled by Close; used by timers and pruning
	stop context.CancelFunc
	wg   sync.WaitGroup // timer callbacks and the pruner in flight

	loadMu sync.Mutex // serializes loading sessions from the store
	seq    atomic.Uint64

	mu       sync.Mutex
	closed   bool
	sessions map[string]*session
	nodes    map[string]*node
	active   int                        // active (or being created) non-root branches of the instance
	model    map[string]*modelDecisions // model-wire decisions by branch (modelstate.go)
	folds    foldBook                   // automatic folds of the model wire (autofold.go)
	orphans  []orphan                   // branches closed because their session went away (orphans.go)
	history  []sample                   // closed branches, for learned budgets (learned.go)
}

// node is the in-memory handle of one branch.
type node struct {
	id, session, parent string
	depth               int
	seq                 uint64 // creation order, for "most recently created"

	sem  chan struct{}          // the branch's lock
	done <-chan struct{}        // closed once the branch is closed: closed.Done()
	cur  atomic.Pointer[Branch] // the last persisted record; never mutated once published

	// closed is done once the branch is closed (markClosed), so that the
	// calls in flight in it end with it through context.AfterFunc, without
	// a goroutine per call watching done.
	closed     context.Context
	markClosed context.CancelFunc

	timer *time.Timer // deadline timer; guarded by sem

	// reserve memoizes the branch's NoticeReserve: the budget it was
	// computed for, and its tokens. Guarded by sem.
	reserve [2]int

	pending []string // children whose forced summary is undelivered; guarded by Manager.mu
	// kids are the branch's children, in creation order; guarded by
	// Manager.mu. Only ever appended to (children), so that a copy of the
	// slice header is a stable view.
	kids []string
}

// lock takes the branch's lock, or gives up when ctx is done.
func (n *node) lock(ctx context.Context) error {
	select {
	case n.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case n.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fold: waiting for branch %s: %w", n.id, ctx.Err())
	}
}

func (n *node) unlock() { <-n.sem }

func (n *node) active() bool { return n.cur.Load().Status == StatusActive }

// NewManager validates opts and returns a Manager. ctx bounds the
// Manager's background work (pruning and deadline timers) together with
// Close. Call Recover before serving sessions after a restart.
func NewManager(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Store == nil {
		return nil, fmt.Errorf("%w: fold: Options.Store is nil; pass the Badger store (OpenBadger) or NewMemStore()", ErrInvalidArgument)
	}
	if opts.Counter == nil {
		return nil, fmt.Errorf("%w: fold: Options.Counter is nil; pass the session's token counter", ErrInvalidArgument)
	}
	set, err := fillFold(opts.Settings)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		set:       set,
		store:     opts.Store,
		scan:      opts.Scanner,
		count:     opts.Counter,
		events:    opts.Events,
		mem:       opts.Memory,
		principal: cmp.Or(opts.Principal, "local"),
		log:       opts.Logger,
		now:       opts.Now,
		sessions:  make(map[string]*session),
		nodes:     make(map[string]*node),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.tools, err = buildTools(set, m.mem != nil)
	if err != nil {
		return nil, err
	}
	m.bg, m.stop = context.WithCancel(ctx)
	if every := opts.PruneInterval; every >= 0 {
		if every == 0 {
			every = time.Hour
		}
		m.wg.Go(func() { m.pruneLoop(every) })
	}
	return m, nil
}

// fillFold gives zero fields their defaults and validates the result.
func fillFold(f policy.Fold) (policy.Fold, error) {
	d := policy.Default().Fold
	num := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	dur := func(v *policy.Duration, def policy.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	num(&f.DefaultBudget, d.DefaultBudget)
	num(&f.MaxBudget, d.MaxBudget)
	num(&f.MaxDepth, d.MaxDepth)
	dur(&f.DefaultTimeout, d.DefaultTimeout)
	dur(&f.MaxTimeout, d.MaxTimeout)
	num(&f.MaxActivePerSess, d.MaxActivePerSess)
	num(&f.MaxActiveInstance, d.MaxActiveInstance)
	num(&f.GuaranteedPerSess, d.GuaranteedPerSess)
	num(&f.CreatesPerMinute, d.CreatesPerMinute)
	dur(&f.SessionEndGrace, d.SessionEndGrace)
	dur(&f.ArchiveMaxAge, d.ArchiveMaxAge)
	if f.ArchiveMaxBytes == 0 {
		f.ArchiveMaxBytes = d.ArchiveMaxBytes
	}
	dur(&f.DependsOnWait, d.DependsOnWait)
	num(&f.RecallPageTokens, d.RecallPageTokens)
	dur(&f.OrphanMaxAge, d.OrphanMaxAge)
	if len(f.Thresholds) == 0 {
		f.Thresholds = d.Thresholds
	}
	f.Thresholds = slices.Clone(f.Thresholds)
	s := policy.Default()
	s.Fold = f
	if err := s.Validate(); err != nil {
		return policy.Fold{}, fmt.Errorf("fold: settings: %w", err)
	}
	return f, nil
}

// Close stops the deadline timers and background pruning and waits for
// those in flight. It does not close the Store, which belongs to the caller.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	nodes := slices.Collect(maps.Values(m.nodes))
	m.mu.Unlock()
	m.stop()
	m.wg.Wait()
	for _, n := range nodes {
		if err := n.lock(context.Background()); err != nil {
			continue
		}
		if n.timer != nil {
			n.timer.Stop()
			n.timer = nil
		}
		n.unlock()
	}
	return nil
}

// enter registers background work (a timer callback); it returns false
// once Close has begun, and the work must then not run.
func (m *Manager) enter() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}

func (m *Manager) pruneLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := m.Prune(m.bg); err != nil && m.bg.Err() == nil {
			m.log.Warn("fold: pruning the archive failed; will retry", "err", err, "retry", every)
		}
		select {
		case <-m.bg.Done():
			return
		case <-t.C:
		}
	}
}

// Prune removes archives older than Settings.ArchiveMaxAge, then the
// oldest until the archive is under Settings.ArchiveMaxBytes.
func (m *Manager) Prune(ctx context.Context) error {
	return m.store.Prune(ctx, m.set.ArchiveMaxAge.D(), m.set.ArchiveMaxBytes)
}

// newID returns a random id with the given prefix.
func newID(prefix string, nbytes int) string {
	b := make([]byte, nbytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + hex.EncodeToString(b)
}

// newNode builds the in-memory handle of a stored branch.
func (m *Manager) newNode(b *Branch) *node {
	n := &node{
		id: b.ID, session: b.Session, parent: b.Parent, depth: b.Depth,
		seq: m.seq.Add(1),
		sem: make(chan struct{}, 1),
	}
	n.closed, n.markClosed = context.WithCancel(context.Background())
	n.done = n.closed.Done()
	if b.Status != StatusActive {
		n.markClosed()
	}
	n.cur.Store(b)
	return n
}

// put persists b as n's new record and publishes it. The caller holds n's
// lock (or, for a closed n, its parent's).
func (m *Manager) put(ctx context.Context, n *node, b *Branch) error {
	if err := m.store.PutBranch(ctx, b); err != nil {
		return err
	}
	n.cur.Store(b)
	return nil
}

// childrenFromParents returns the children of the branches of one session,
// loaded from the store, by parent id, from their Parent: in the order of
// Ord, then (records written before Ord was kept) of creation, then of id.
func childrenFromParents(bs []*Branch) map[string][]string {
	kids := slices.Clone(bs)
	slices.SortStableFunc(kids, func(x, y *Branch) int {
		return cmp.Or(cmp.Compare(x.Ord, y.Ord), x.Created.Compare(y.Created), cmp.Compare(x.ID, y.ID))
	})
	out := make(map[string][]string)
	for _, b := range kids {
		if b.Parent != "" && b.Parent != b.ID {
			out[b.Parent] = append(out[b.Parent], b.ID)
		}
	}
	return out
}

// children returns n's children, in creation order. The slice is shared:
// the caller must not change it.
func (m *Manager) children(n *node) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clip(n.kids)
}

func (m *Manager) emit(ctx context.Context, ev Event) {
	if m.events == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = m.now()
	}
	m.events.BranchEvent(ctx, ev)
}

func branchEvent(kind string, b *Branch) Event {
	return Event{
		Kind: kind, Session: b.Session, Branch: b.ID, Parent: b.Parent, Depth: b.Depth,
		Status: b.Status, Reason: b.Reason, Level: b.Level, Used: b.Used, Budget: b.Budget,
	}
}

// branchOf returns the branch id of the open session sess. A branch of
// another session is reported as not found: sessions cannot see each
// other's branches.
func (m *Manager) branchOf(sess, id string) (*session, *node, error) {
	return m.branchField(sess, "branch", id)
}

// branchField is branchOf with the name of the argument that named the
// branch, for the refusal's message.
func (m *Manager) branchField(sess, field, id string) (*session, *node, error) {
	s, err := m.sessionOf(sess)
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	n := s.nodes[id]
	m.mu.Unlock()
	if n == nil {
		return nil, nil, fmt.Errorf("%w: %s %q is not a branch of this session; call branch_status without arguments to list them", ErrBranchNotFound, field, id)
	}
	return s, n, nil
}

// lookup returns the cached node id, or nil.
func (m *Manager) lookup(id string) *node {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodes[id]
}

// Attribute returns the branch a forwarded call of session is charged to:
// the explicit branch_id when given, else the session's innermost active
// branch, else its root. An explicit id must be a branch of the session
// (else ErrBranchNotFound) and active (else ErrBranchClosed, with a message
// that tells the agent what to do). The returned Branch is the manager's
// snapshot of the branch, never changed once published (a charge publishes
// a new one): read it, never write it. (It is not copied: this runs on
// every forwarded call.)
func (m *Manager) Attribute(ctx context.Context, session, explicit string) (*Branch, error) {
	if explicit == "" {
		s, err := m.sessionOf(session)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		n := innermostLocked(s)
		m.mu.Unlock()
		if n == nil {
			n = s.root
		}
		b := n.cur.Load()
		if b.Status != StatusActive {
			return nil, closedErr(b)
		}
		return b, nil
	}
	_, n, err := m.branchOf(session, explicit)
	if err != nil {
		return nil, err
	}
	b := n.cur.Load()
	if b.Status != StatusActive {
		return nil, closedErr(b)
	}
	return b, nil
}

// BranchDone returns a context done when branch of session closes
// (returned, force-returned at its deadline or budget, failed), and a func
// that then says how, for ending the calls still in flight in it
// (context.AfterFunc: no goroutine per call). It returns nil when the
// branch is unknown.
func (m *Manager) BranchDone(session, branch string) (context.Context, func() error) {
	_, n, err := m.branchOf(session, branch)
	if err != nil {
		return nil, nil
	}
	return n.closed, func() error { return closedErr(n.cur.Load()) }
}

// closedErr is the refusal for a call to a closed branch.
func closedErr(b *Branch) error {
	state := string(b.Status)
	if b.Reason != "" {
		state += ": " + b.Reason
	}
	what := "its summary is in branch_status"
	if b.Status == StatusReturned {
		what = "its return message is in branch_status"
	}
	if b.Depth == 0 {
		return fmt.Errorf("%w: the main thread of this session is closed (%s); the session has ended, reconnect to start a new one", ErrBranchClosed, state)
	}
	return fmt.Errorf("%w: branch %s is closed (%s); %s; continue in the parent branch or create a new branch with branch_create", ErrBranchClosed, b.ID, state, what)
}
