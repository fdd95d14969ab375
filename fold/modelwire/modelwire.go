package modelwire

import "context"

// Dialect names the request shape of a model API.
type Dialect string

// The dialects Apply understands.
const (
	Anthropic       Dialect = "anthropic"        // POST /v1/messages, /v1/messages/count_tokens
	OpenAIChat      Dialect = "openai-chat"      // POST /v1/chat/completions
	OpenAIResponses Dialect = "openai-responses" // POST /v1/responses
)

// Branch is what the context manager needs to know of a branch whose
// branch_create call it found in the conversation.
type Branch struct {
	ID      string
	Closed  bool   // returned, force-returned or failed
	Summary string // what the parent sees in place of the span (return message and value, scrubbed)
	Budget  int    // tokens
	Used    int
	// EndCall is the tool-use id of the result that force-returned the
	// branch on the model wire (a cut), "" otherwise: the span ends there.
	EndCall string
	// EndNotice, with EndCall, is the notice of the branch's forced return
	// shown with that result (a deadline, a restart: closures the
	// conversation does not show by itself); "" when the result's own
	// Decision says it (a cut).
	EndNotice string
}

// Ender is optionally implemented by a State. When a branch closed without
// the conversation showing it (force-returned by its deadline while the
// agent went on with built-in tools), Apply calls MarkEnd with the newest
// result inside its span; the State records, once and durably, that this
// result carries the closure, and answers the tool-use id recorded (the
// first one) and the notice to show with it. The span then ends there, as
// at a cut.
type Ender interface {
	MarkEnd(ctx context.Context, branchID, toolUseID string) (endCall, notice string, err error)
}

// Decision is the (persistent, deterministic) verdict on one tool result.
type Decision struct {
	Keep   int    // bytes of the text kept; len(text) when whole
	Notice string // appended to the kept text ("" for none): warning level, cut + recall handle
}

// State is the fold state; fold.Manager provides one (m.ModelState()).
type State interface {
	Branch(ctx context.Context, id string) (Branch, bool, error)
	// ChargeResult charges a tool result inside branchID's open span once,
	// keyed by toolUseID; later calls with the same key return the same
	// Decision and charge nothing.
	ChargeResult(ctx context.Context, branchID, toolUseID, toolName, text string) (Decision, error)
}

// Observer is optionally implemented by a State that wants to know, after
// each request, what the model receives: Apply calls Observe with the
// Result when the conversation holds at least one branch (whose id ties it
// to a session). fold.Manager's State keeps the latest figures per session
// for branch_status and foldproxy report.
type Observer interface {
	Observe(ctx context.Context, r Result) error
}

// Options configure Apply.
type Options struct {
	Scrub func(ctx context.Context, text string) (string, error) // nil: no scrubbing; error: fail closed
	Count func(text string) int                                  // token counter (o200k_base); nil: bytes/4
	// ScrubAcross, when set, scrubs the secrets that run across the
	// boundaries of texts read one after the other (the parts of one
	// tool result or one message), each text already scrubbed alone by
	// Scrub; it returns the texts with those secrets redacted in every
	// part they touch. nil: parts are scrubbed one by one only.
	ScrubAcross func(ctx context.Context, texts []string) ([]string, error)
	// ChargedOnMCP reports whether the results of the named tool were
	// already charged on the MCP wire, so that the model wire does not
	// charge them again (it scrubs them all the same). foldproxy serve
	// passes the tools its MCP front served (proxy.ServedTools). nil
	// means: names beginning with "mcp__".
	ChargedOnMCP func(name string) bool
	// Guidance configures the reminders that suggest a branch.
	Guidance Guidance
	// AutoFold configures automatic folding (off when zero).
	AutoFold AutoFold
	// Session names the model session the request belongs to (found by
	// the front from its headers), recorded with the folds it decides.
	Session string
	// Memo, shared by a front's requests, remembers the tokens of the
	// messages it counted; nil counts every message of every request.
	Memo *Memo
}

// Guidance configures the reminders added to the main thread. The zero
// value is on, with the defaults.
type Guidance struct {
	Off bool // no reminders at all
	// AfterTokens: a reminder once the main thread has taken in more than
	// this many tokens of tool results since the last fold (branch start,
	// branch end or reminder); 0 means DefaultAfterTokens.
	AfterTokens int
	// NoRepeats turns off the reminder when a call that failed is repeated
	// with the same input.
	NoRepeats bool
}

// DefaultAfterTokens is Guidance.AfterTokens's default.
const DefaultAfterTokens = 8000

// Result is what Apply made of a request.
type Result struct {
	Body         []byte // the request to forward (== input when nothing changed)
	Changed      bool
	Folded       []string // branch ids folded
	TokensBefore int      // tokens of the conversation as the client sent it
	TokensAfter  int      // as forwarded
	// Guidance is set when guidance fired on this request: a reminder
	// sits on its newest message. Reminders is how many reminders the
	// forwarded request holds in all (placed deterministically, earlier
	// ones are repeated as they were).
	Guidance  bool
	Reminders int
	// Cut counts the results this request carries cut (new cuts and
	// earlier ones, repeated as decided).
	Cut int
	// Branches are the ids of every branch whose span the conversation
	// holds, open or closed, in order of creation.
	Branches []string
	// AutoFold is what automatic folding did (or, in observe mode, would
	// have done) to this request.
	AutoFold AutoFoldResult
	// Pieces lay out the forwarded request for a prompt-cache model: its
	// head (everything before the conversation: tools, system prompt)
	// then each message, with a digest of its bytes, so that the front
	// can tell where a request first differs from the one before it.
	Pieces []Piece
}

// Piece is one part of a forwarded request: it starts at byte Start and
// its bytes digest to Sum (Options.Memo's digest, comparable across the
// requests of one Memo; FNV-1a without one).
type Piece struct {
	Start int
	Sum   uint64
}

// AutoFoldResult is what automatic folding did to one request.
type AutoFoldResult struct {
	Observe bool // observe mode: nothing below was applied
	// New are the decisions this request made (persisted before it was
	// forwarded); Folded counts the results it carries folded, new and
	// earlier, and Saved the tokens those folds keep out of it (what they
	// hide less their stubs).
	New    []FoldRecord
	Folded int
	Saved  int
	// Recalls counts the calls of the added recall tool answered in
	// this request; RecallTool is set when the tool was added.
	Recalls    int
	RecallTool bool
}

// AutoFold configures automatic folding: tool results the agent did not
// fold itself leave the conversation the model sees, each replaced by a
// short stub that names a recall handle (see autofold.go). The zero value
// is off; the product's default configuration turns it on
// (policy.ModelAutoFold). Zero fields take the defaults below.
type AutoFold struct {
	// Mode is ModeOn, ModeObserve or "" / ModeOff.
	Mode string
	// KeepRecent: the newest results never folded as stale (besides every
	// result of the newest turn). Default 1.
	KeepRecent int
	// Trigger: stale results are folded only once the conversation's
	// tool-result tokens, folded or not, pass it. Default 2,000.
	Trigger int
	// MinTokens: a result smaller than this is never folded. Default 100.
	MinTokens int
	// MinBatch: a batch of folds must take at least this many tokens out
	// of the conversation, stubs deducted. Default 300.
	MinBatch int
	// Oversize: a result above this many tokens keeps only its head and
	// tail (KeepHead, KeepTail) from the start; -1 turns the rule off.
	// Default 10,000, 4,000 and 2,000.
	Oversize, KeepHead, KeepTail int
	// NoSuperseded and NoRepeats turn off the folding of results that a
	// later read or run supersedes, and of results repeated byte for byte.
	NoSuperseded, NoRepeats bool
	// Exclude names tools whose results are never folded.
	Exclude []string
	// ReadPrice and WritePrice are the prices of a cached input token read
	// and written, relative to an uncached one (Anthropic's published
	// ratios by default: 0.1 and 1.25). They weigh a batch's saving
	// against the cache it rewrites.
	ReadPrice, WritePrice float64
	// MinRequests is the least number of later requests a batch is assumed
	// to be read by (see autofold.go). Default 20.
	MinRequests int
}

// AutoFold modes.
const (
	ModeOff     = "off"
	ModeOn      = "on"
	ModeObserve = "observe"
)

// AutoFold defaults.
const (
	DefaultKeepRecent  = 1
	DefaultTrigger     = 2000
	DefaultMinTokens   = 100
	DefaultMinBatch    = 300
	DefaultOversize    = 10000
	DefaultKeepHead    = 4000
	DefaultKeepTail    = 2000
	DefaultReadPrice   = 0.1
	DefaultWritePrice  = 1.25
	DefaultMinRequests = 20
)

// Fold kinds (FoldRecord.Kind).
const (
	FoldStale      = "stale"
	FoldSuperseded = "superseded"
	FoldRepeat     = "repeat"
	FoldOversized  = "oversized"
)

// FoldRecord is one automatic fold decision. The State persists it before
// the request that made it is forwarded, and Apply repeats it, byte for
// byte, on every later request that holds its anchor.
type FoldRecord struct {
	// Handle names the archived text of the result (the whole text the
	// model would have read, scrubbed) for branch_recall.
	Handle    string `json:"handle"`
	ToolUseID string `json:"tool_use_id"`
	// Anchor is the tool-use id of the newest result of the request that
	// decided the fold: the fold applies to requests that hold it, so a
	// conversation played again folds at the same points.
	Anchor string `json:"anchor"`
	Kind   string `json:"kind"`
	Tool   string `json:"tool"`
	Brief  string `json:"brief,omitempty"` // the call's input in brief: a command, a path
	Tokens int    `json:"tokens"`          // tokens of the text it hides
	// Stub is the text that replaces the result's content: a one-line
	// stub, or for FoldOversized the head, a notice and the tail.
	Stub       string `json:"stub"`
	StubTokens int    `json:"stub_tokens"`
	// Session is the model session of the request that decided it
	// (Options.Session).
	Session string `json:"session,omitempty"`
}

// Folder is implemented by a State that keeps automatic folds
// (fold.Manager's does). Apply folds automatically only when the State is
// a Folder and Options.AutoFold.Mode is on or observe.
type Folder interface {
	// FoldHandle returns the recall handle of a result's text: a pure
	// function of the tool-use id and the text that cannot be guessed
	// without them.
	FoldHandle(toolUseID, text string) string
	// Folds returns the recorded decisions among handles (observe: the
	// decisions of observe mode, kept apart), keyed by handle; a result
	// may hold two, its oversize cut and its fold, keyed
	// handle and handle+"/fold".
	Folds(ctx context.Context, observe bool, keys []string) (map[string]FoldRecord, error)
	// RecordFolds persists new decisions and, unless observe, archives
	// texts[i], the text recs[i] hides, under recs[i].Handle. It returns
	// once both are durable.
	RecordFolds(ctx context.Context, observe bool, recs []FoldRecord, texts []string) error
	// RecallFold answers branch_recall for a fold's handle, as the MCP
	// tool answers it (a page of the text as JSON), for the recall tool
	// the model wire adds to an agent that lacks foldproxy's own.
	RecallFold(ctx context.Context, handle string, offset, maxTokens int) (string, error)
}

// RecallCall is a call the model made of the recall tool Apply adds to an
// agent that lacks foldproxy's own (see recalltool.go), as the model made
// it: its tool-use id and input.
type RecallCall struct {
	ID    string `json:"id"`
	Input string `json:"input"`
}

// RecallCaller is implemented by a Folder that remembers the calls of the
// added recall tool, which the front reads from the model's answers before
// the agent sees them: some clients rewrite a call of a tool they do not
// know (OpenCode renames it "invalid" and drops its input), and Apply puts
// such a call back as the model made it, and answers it.
type RecallCaller interface {
	RecordRecallCalls(ctx context.Context, calls []RecallCall) error
	RecallCalls(ctx context.Context, ids []string) (map[string]RecallCall, error)
}

// Binder is optionally implemented by a State that binds branches to the
// session that created them (fold.Manager's does). For each branch_create
// answer in the conversation, Apply asks BindSpan with the request's
// model session (Options.Session), the branch id and the seal the answer
// carries ("" when none); on false the span is not a branch's: the answer
// is plain content, nothing in it is charged, ended or folded. Without a
// Binder every answer naming a branch is taken at its word.
type Binder interface {
	BindSpan(ctx context.Context, modelSession, branchID, seal string) (bool, error)
}
