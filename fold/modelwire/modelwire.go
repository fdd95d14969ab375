package modelwire

import (
	"context"
	"fmt"
)

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

// Options configure Apply.
type Options struct {
	Scrub func(ctx context.Context, text string) (string, error) // nil: no scrubbing; error: fail closed
	Count func(text string) int                                  // token counter (o200k_base)
}

// Result is what Apply made of a request.
type Result struct {
	Body         []byte // the request to forward (== input when nothing changed)
	Changed      bool
	Folded       []string // branch ids folded
	TokensBefore int      // tokens of the conversation as the client sent it
	TokensAfter  int      // as forwarded
	Guidance     bool     // a reminder was added
}

// Apply is the context manager F: a pure function of the request and the state.
func Apply(ctx context.Context, d Dialect, body []byte, st State, opt Options) (Result, error) {
	switch d {
	case Anthropic, OpenAIChat, OpenAIResponses:
	default:
		return Result{}, fmt.Errorf("modelwire: unknown dialect %q", d)
	}
	return Result{Body: body}, nil
}
