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
	// ChargedOnMCP reports whether the results of the named tool were
	// already scrubbed and charged on the MCP wire, so that the model wire
	// neither charges nor scrubs them again. nil means: names beginning
	// with "mcp__" (Claude Code's names for MCP tools; foldproxy wraps all
	// of the agent's MCP servers).
	ChargedOnMCP func(name string) bool
	// Guidance configures the reminders that suggest a branch.
	Guidance Guidance
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
}
