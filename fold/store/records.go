package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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

// Sentinel errors of the store. package fold declares the same values
// under the same names (fold.ErrStoreFull is ErrStoreFull), so errors.Is
// matches either.
var (
	ErrBranchNotFound  = errors.New("ErrBranchNotFound") // unknown id, or one of another session
	ErrSessionNotFound = errors.New("ErrSessionNotFound")
	ErrCutNotFound     = errors.New("ErrCutNotFound") // unknown or pruned recall handle
	ErrStoreFull       = errors.New("ErrStoreFull")   // the store's disk is (nearly) full: nothing was written
	ErrRecordNotFound  = errors.New("ErrRecordNotFound")
	ErrInvalidArgument = errors.New("ErrInvalidArgument") // a write with missing parts (a Batch without ids)
)

// Branch is the durable record of one branch. The root of a session is a
// Branch too, with Depth 0 and ID RootID(session).
type Branch struct {
	ID          string    `json:"id"`
	Session     string    `json:"session"`
	Parent      string    `json:"parent,omitempty"`
	Depth       int       `json:"depth"`
	Description string    `json:"description,omitempty"`
	Prompt      string    `json:"prompt,omitempty"`
	Status      Status    `json:"status"`
	Reason      string    `json:"reason,omitempty"`
	Budget      int       `json:"budget"` // 0: unlimited (the root by default)
	Used        int       `json:"used"`
	Level       string    `json:"level"` // last warning level reached
	Created     time.Time `json:"created"`
	Deadline    time.Time `json:"deadline,omitzero"`
	Closed      time.Time `json:"closed,omitzero"`
	// Ord is the branch's place among its parent's children, from 1 in
	// creation order; 0 in records written before it was kept, which are
	// ordered by creation time. A parent's record does not list its
	// children (it would grow with every child and be rewritten whole by
	// every branch_create and branch_return): the Manager keeps the list
	// in memory and rebuilds it from the children's Parent and Ord when a
	// session is loaded (childrenFromParents).
	Ord        int            `json:"ord,omitempty"`
	DependsOn  []string       `json:"dependsOn,omitempty"`
	Calls      int            `json:"calls"`
	ByTool     map[string]int `json:"byTool,omitempty"`     // tokens by "<upstream>/<tool>"
	ByUpstream map[string]int `json:"byUpstream,omitempty"` // tokens by upstream
	// Cuts lists the recall handles of the branch's latest cut results,
	// oldest first, at most ListedCuts of them; CutCount counts them all.
	// The record is rewritten whole by every charge, so it does not list
	// every cut: a main thread that cut hundreds of results would pay for
	// the whole list on every call, and branch_status would show it all.
	// Every cut call's archived record keeps its handle (CallRecord.Handle).
	// Records written before CutCount was kept list every cut and have no
	// count: decodeBranch turns them into this form.
	Cuts        []string `json:"cuts,omitempty"`
	CutCount    int      `json:"cutCount,omitempty"`
	Message     string   `json:"message,omitempty"`     // the return message as the parent sees it
	ReturnValue string   `json:"returnValue,omitempty"` // compact JSON text of the value returned
	Summary     string   `json:"summary,omitempty"`     // automatic summary of a forced return
	// Injected lists the memories injected into the branch at its
	// creation, whose confidence its outcome moves.
	Injected []string `json:"injected,omitempty"`
	// SummaryDelivered is set once the forced-return summary has been
	// appended to a result of the parent.
	SummaryDelivered bool `json:"summaryDelivered,omitempty"`
	// ModelContext (roots only) is the size of the main thread's context
	// as the model last saw it on the model wire, before and after folding.
	ModelContext *ModelContext `json:"modelContext,omitempty"`
	// Principal (roots only) is who the session acted for: the orphans of
	// a session are shown to later sessions of the same principal only.
	Principal string `json:"principal,omitempty"`
	// Acknowledged is set on an orphaned branch (closed because its
	// session went away) once a later session acknowledged it.
	Acknowledged bool `json:"acknowledged,omitempty"`
	// Reasoning is the model's own output on the model wire while the
	// branch was the innermost, in tokens (RecordModelOutput): shown in
	// the usage breakdown, never charged to the budget.
	Reasoning int `json:"reasoning,omitempty"`
}

// Clone returns a deep copy of b.
func (b *Branch) Clone() *Branch {
	c := *b
	c.DependsOn = slices.Clone(b.DependsOn)
	c.Cuts = slices.Clone(b.Cuts)
	c.ByTool = maps.Clone(b.ByTool)
	c.ByUpstream = maps.Clone(b.ByUpstream)
	return &c
}

// ListedCuts is how many handles of its latest cut results a branch's
// record lists (Branch.Cuts).
const ListedCuts = 16

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

// Record is one of fold's own records (Store.Records).
type Record struct {
	ID   string
	Data []byte
}

// SessionRecord is the durable record of a downstream session.
type SessionRecord struct {
	ID              string          `json:"id"`
	Transport       string          `json:"transport"` // stdio or http
	ProtocolVersion string          `json:"protocolVersion,omitempty"`
	ClientInfo      json.RawMessage `json:"clientInfo,omitempty"`
	ClientCaps      json.RawMessage `json:"clientCaps,omitempty"`
	Created         time.Time       `json:"created"`
	LastSeen        time.Time       `json:"lastSeen"`
}

// ModelContext is the size of a session's main-thread context as the model
// last saw it, before and after folding.
type ModelContext struct {
	TokensBefore int       `json:"tokens_before"`
	TokensAfter  int       `json:"tokens_after"`
	Folded       int       `json:"branches_folded"`
	Requests     int       `json:"requests"`
	At           time.Time `json:"at"`
}

// Batch holds the writes of one operation.
type Batch struct {
	Cuts     []BatchCut
	Calls    []BatchCall // each record's Seq is set once written
	Branches []*Branch
	// Records are records as Store.PutRecord keeps them, written with
	// the rest; unless Keep, they are pruned with the archive, by age and
	// size (automatic folds of the model wire, with their texts as Cuts).
	Records []BatchRecord
}

// BatchRecord is a record of kind (a short name: "af", "ms") under id.
type BatchRecord struct {
	Kind, ID string
	Value    []byte
	// Keep exempts the record from pruning (a key that must outlive the
	// records it keys).
	Keep bool
}

// BatchCut is a cut remainder to store.
type BatchCut struct {
	Handle string
	Rest   []byte
}

// BatchCall is a call to archive in a branch.
type BatchCall struct {
	Branch string
	Rec    *CallRecord
}

// validate refuses a batch with missing parts.
func (b *Batch) validate() error {
	for _, c := range b.Cuts {
		if c.Handle == "" {
			return fmt.Errorf("%w: fold: a batch holds a cut without a handle", ErrInvalidArgument)
		}
	}
	for _, c := range b.Calls {
		if c.Rec == nil {
			return fmt.Errorf("%w: fold: a batch holds a call without a record", ErrInvalidArgument)
		}
	}
	for _, br := range b.Branches {
		if br == nil || br.ID == "" {
			return fmt.Errorf("%w: fold: a batch holds a branch without an id", ErrInvalidArgument)
		}
	}
	for _, r := range b.Records {
		if r.Kind == "" || r.ID == "" || strings.Contains(r.Kind, "/") {
			return fmt.Errorf("%w: fold: a batch holds a record without a kind or an id (%q, %q)", ErrInvalidArgument, r.Kind, r.ID)
		}
	}
	return nil
}
