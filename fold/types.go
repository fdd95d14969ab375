package fold

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/foldproxy/foldproxy/fold/store"
)

// Status of a branch (the store keeps it in the branch's record).
type Status = store.Status

// Branch statuses. Active is the only open status; the rest are final.
const (
	StatusActive   = store.StatusActive
	StatusReturned = store.StatusReturned
	StatusForced   = store.StatusForced
	StatusFailed   = store.StatusFailed
)

// Reasons for a forced return or failure.
const (
	ReasonBudget         = "budget exhausted"
	ReasonDeadline       = "deadline passed"
	ReasonParent         = "parent returning"
	ReasonSessionEnd     = "session ended"
	ReasonProxyRestarted = "proxy restarted"
)

// Sentinel errors. Every refusal wraps one of them, with a message that says
// what was wrong and what to do.
var (
	ErrMaxDepthExceeded = errors.New("ErrMaxDepthExceeded")
	ErrBudgetExceeded   = errors.New("ErrBudgetExceeded")   // requested budget above max or above parent's remaining
	ErrBranchClosed     = errors.New("ErrBranchClosed")     // call attributed to a closed branch
	ErrBranchNotFound   = store.ErrBranchNotFound           // unknown id, or one of another session
	ErrTooManyBranches  = errors.New("ErrTooManyBranches")  // per-session or per-instance active limit
	ErrRateLimited      = errors.New("ErrRateLimited")      // creations per minute
	ErrInvalidArgument  = store.ErrInvalidArgument          // bad tool arguments
	ErrDependencyFailed = errors.New("ErrDependencyFailed") // depends_on branch failed or did not finish in time
	ErrSessionNotFound  = store.ErrSessionNotFound
	ErrCutNotFound      = store.ErrCutNotFound // unknown or pruned recall handle
	ErrStoreFull        = store.ErrStoreFull   // the store's disk is (nearly) full: nothing was written
	ErrRecordNotFound   = store.ErrRecordNotFound
	// ErrCheckpointNotFound: an unknown checkpoint, or one of another
	// principal, which this principal's sessions cannot see.
	ErrCheckpointNotFound = errors.New("ErrCheckpointNotFound")
)

// The records the store keeps are declared by fold/store; fold names
// them here so that its callers need only fold.
type (
	Branch        = store.Branch
	CallRecord    = store.CallRecord
	SessionRecord = store.SessionRecord
	Record        = store.Record
	ModelContext  = store.ModelContext
	Batch         = store.Batch
	BatchRecord   = store.BatchRecord
	BatchCut      = store.BatchCut
	BatchCall     = store.BatchCall
)

// Store keeps branches, archives and sessions durably. Implementations must
// be safe for concurrent use, and a successful write must survive kill -9.
type Store interface {
	PutBranch(ctx context.Context, b *Branch) error
	GetBranch(ctx context.Context, id string) (*Branch, error) // ErrBranchNotFound when absent
	// Branches lists every branch of a session, or of all sessions when session is "".
	Branches(ctx context.Context, session string) ([]*Branch, error)
	// AppendCall archives a call of a branch and returns its sequence number.
	AppendCall(ctx context.Context, branch string, rec *CallRecord) (int, error)
	Calls(ctx context.Context, branch string, fromSeq, limit int) ([]*CallRecord, error)
	// PutCut stores the remainder of a cut result under a handle.
	PutCut(ctx context.Context, handle string, rest []byte) error
	GetCut(ctx context.Context, handle string) ([]byte, error)
	// PutSession, GetSession and DeleteSession keep the records of
	// downstream sessions, so that an HTTP session can resume after a restart.
	PutSession(ctx context.Context, rec *SessionRecord) error
	GetSession(ctx context.Context, id string) (*SessionRecord, error) // ErrSessionNotFound when absent
	Sessions(ctx context.Context) ([]*SessionRecord, error)
	DeleteSession(ctx context.Context, id string) error
	// PutRecord, GetRecord, Records and DeleteRecord keep fold's own small
	// records beside the branches, by kind and id: checkpoints
	// (KindCheckpoint). GetRecord returns an error wrapping
	// ErrRecordNotFound when absent; Records lists a kind's records by
	// id; deleting an absent record is not an error. Prune leaves them.
	PutRecord(ctx context.Context, kind, id string, data []byte) error
	GetRecord(ctx context.Context, kind, id string) ([]byte, error)
	Records(ctx context.Context, kind string) ([]Record, error)
	DeleteRecord(ctx context.Context, kind, id string) error
	// Prune removes archives older than maxAge and then the oldest until the
	// total archive size is under maxBytes. Branch records of active
	// branches are never removed.
	Prune(ctx context.Context, maxAge time.Duration, maxBytes int64) error
	Close() error
}

// Event is a branch lifecycle event, handed to the EventSink (audit, metrics).
type Event struct {
	Time    time.Time
	Kind    string // created, returned, forced, failed, warning, cut, refused
	Session string
	Branch  string
	Parent  string
	Depth   int
	Status  Status
	Reason  string
	Level   string
	Used    int
	Budget  int
	Tokens  int // the create or return answer's tokens (charged to the parent) for creations and returns; cut remainder for cuts
	Err     error
}

// EventSink receives branch events. BranchEvent must not block for long and
// must be safe for concurrent use.
type EventSink interface {
	BranchEvent(ctx context.Context, ev Event)
}

// Scanner scrubs text at fold time (return messages, return values,
// descriptions and prompts). It returns the clean text and redaction counts
// by rule, or an error when the text could not be scanned; the caller then
// refuses the operation (fail closed).
type Scanner interface {
	ScrubText(ctx context.Context, text string) (string, map[string]int, error)
}

// Counter counts tokens of text (the session's configured encoding).
type Counter interface {
	CountText(text string) int
}

// RootID returns the id of a session's root branch.
//
// It is derived from the session id by a one-way hash, so that a session can
// find its root again after a restart while the id the model sees carries
// nothing of the session's credential (an HTTP session id is one).
func RootID(session string) string {
	sum := sha256.Sum256([]byte("foldproxy root\x00" + session))
	return "root-" + hex.EncodeToString(sum[:8])
}

// legacyRootID is the root id of stores written before RootID was hashed.
func legacyRootID(session string) string { return "root-" + session }

// Budget is what the budget interceptor learns about a branch while it holds
// the branch's charge lock (see Manager.Charge).
type Budget struct {
	Branch    string
	Used      int    // tokens used before this result
	Total     int    // the budget; 0: unlimited
	Remaining int    // Total-Used, or -1 when unlimited
	Level     string // the level before this result
	// Handle is reserved for this call's remainder should the result be cut.
	Handle string
	// Reserve is what the branch keeps back for the cut notice of the
	// result that ends it (NoticeReserve; 0 when unlimited): a result is
	// delivered whole only when it leaves at least Reserve, otherwise it is
	// cut, with its notice, and a branch is force-returned. So a branch
	// never ends on a result that cannot say why.
	Reserve int
	// Summaries are forced-return summaries of children that this branch
	// has not yet seen; they are appended to this result and then marked
	// delivered.
	Summaries []string
}

// Charge is what one result costs its branch, as decided by the fit
// function under the branch's charge lock.
type Charge struct {
	Upstream  string
	Method    string
	Name      string
	Args      string
	Result    []byte // the full scrubbed result JSON as the upstream sent it, archived
	ArgTokens int
	// Tokens is what the agent receives, notices included. It must not
	// exceed Budget.Remaining when that is not -1.
	Tokens int
	// Cut is set when the result was cut; Rest holds the remainder, which
	// is stored under Budget.Handle for branch_recall, byte for byte.
	Cut  bool
	Rest []byte
	// Level is the warning level after this result.
	Level string
}

// ChargeResult reports the branch after a charge.
type ChargeResult struct {
	Used   int
	Total  int
	Level  string
	Forced bool // the branch was force-returned (budget exhausted)
	Handle string
}

// storeFull reports whether err means the store could not be written for
// lack of space: what a session can live through in memory.
func storeFull(err error) bool { return errors.Is(err, ErrStoreFull) }
