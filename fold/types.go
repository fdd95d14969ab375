package fold

import (
	"context"
	"errors"
	"time"
)

// Status of a branch.
type Status string

// Branch statuses. Active is the only open status; the rest are final.
const (
	StatusActive   Status = "active"
	StatusReturned Status = "returned" // the branch called branch_return
	StatusForced   Status = "forced"   // force-returned: budget, deadline, parent returning, session end
	StatusFailed   Status = "failed"   // closed without a return, e.g. "proxy restarted"
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
	ErrBranchNotFound   = errors.New("ErrBranchNotFound")   // unknown id, or one of another session
	ErrTooManyBranches  = errors.New("ErrTooManyBranches")  // per-session or per-instance active limit
	ErrRateLimited      = errors.New("ErrRateLimited")      // creations per minute
	ErrInvalidArgument  = errors.New("ErrInvalidArgument")  // bad tool arguments
	ErrDependencyFailed = errors.New("ErrDependencyFailed") // depends_on branch failed or did not finish in time
)

// Branch is the durable record of one branch. The root of a session is a
// Branch too, with Depth 0 and ID RootID(session).
type Branch struct {
	ID          string         `json:"id"`
	Session     string         `json:"session"`
	Parent      string         `json:"parent,omitempty"`
	Depth       int            `json:"depth"`
	Description string         `json:"description,omitempty"`
	Prompt      string         `json:"prompt,omitempty"`
	Status      Status         `json:"status"`
	Reason      string         `json:"reason,omitempty"`
	Budget      int            `json:"budget"` // 0: unlimited (the root by default)
	Used        int            `json:"used"`
	Level       string         `json:"level"` // last warning level reached
	Created     time.Time      `json:"created"`
	Deadline    time.Time      `json:"deadline,omitzero"`
	Closed      time.Time      `json:"closed,omitzero"`
	Children    []string       `json:"children,omitempty"`
	DependsOn   []string       `json:"dependsOn,omitempty"`
	Calls       int            `json:"calls"`
	ByTool      map[string]int `json:"byTool,omitempty"`     // tokens by "<upstream>/<tool>"
	ByUpstream  map[string]int `json:"byUpstream,omitempty"` // tokens by upstream
	Cuts        []string       `json:"cuts,omitempty"`       // recall handles of cut results
	Message     string         `json:"message,omitempty"`    // the return message as the parent sees it
	ReturnValue string         `json:"returnValue,omitempty"`
	Summary     string         `json:"summary,omitempty"` // automatic summary of a forced return
	// SummaryDelivered is set once the forced-return summary has been
	// appended to a result of the parent.
	SummaryDelivered bool `json:"summaryDelivered,omitempty"`
}

// CallRecord is one call archived inside a branch: what went up and, already
// scrubbed, what came back.
type CallRecord struct {
	Seq      int       `json:"seq"`
	Time     time.Time `json:"time"`
	Upstream string    `json:"upstream"`
	Method   string    `json:"method"`
	Name     string    `json:"name"`
	Args     string    `json:"args,omitempty"`
	Result   string    `json:"result"` // the full result JSON as the upstream sent it, after scrubbing
	Tokens   int       `json:"tokens"`
	Handle   string    `json:"handle,omitempty"` // set when the result was cut
}

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
	Tokens  int // message tokens for returns; cut remainder for cuts
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
