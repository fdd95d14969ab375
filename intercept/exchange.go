package intercept

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
)

// Outcome values recorded for an exchange.
const (
	OutcomeOK       = "ok"       // forwarded, delivered whole
	OutcomeError    = "error"    // upstream answered with an error (JSON-RPC or isError)
	OutcomeRefused  = "refused"  // foldproxy refused the call (closed branch, limits)
	OutcomeCut      = "cut"      // delivered, but cut to fit the branch budget
	OutcomeWithheld = "withheld" // scrubbing failed: nothing was delivered (fail closed)
	OutcomeCanceled = "canceled" // the call ended (agent's cancel, deadline) before its result was ready
)

// MessageKind says what an exchange carries to the agent.
type MessageKind uint8

const (
	// MessageResult is a call the agent made (tools/call, resources/read,
	// prompts/get, completion/complete) and the result it gets back: the
	// zero value, and the only kind the budget, tokens, audit and metrics
	// interceptors act on.
	MessageResult MessageKind = iota
	// MessageNotification is a notification from an upstream on its way to
	// the agent (progress, a log message, resources/updated), Params
	// holding its params.
	MessageNotification
	// MessageRequest is a server-to-client request from an upstream
	// (sampling/createMessage, elicitation/create, roots/list) on its way
	// to the agent, Params holding its params.
	MessageRequest
	// MessageAnswer is an upstream's answer to a request of the agent that
	// foldproxy relays without charging it (initialize, tools/list, a call
	// foldproxy does not chain), Params holding the whole JSON-RPC
	// response: the remote MCP front of transparent mode relays these.
	MessageAnswer
)

func (k MessageKind) String() string {
	switch k {
	case MessageResult:
		return "result"
	case MessageNotification:
		return "notification"
	case MessageRequest:
		return "request"
	case MessageAnswer:
		return "answer"
	}
	return fmt.Sprintf("MessageKind(%d)", uint8(k))
}

// Exchange is one message on its way to the agent through foldproxy: most
// often a request the agent sent and the answer it gets back (MessageResult),
// or else a notification or a server-to-client request from an upstream
// (Kind says which), or an answer relayed as it is (MessageAnswer). For a result, the proxy fills the request half, the
// innermost handler calls the upstream and fills Result, and each
// interceptor reads and amends it on the way in and on the way out. For a
// relayed message, the proxy fills Upstream, Method and Params, the
// innermost handler scrubs Params (or withholds the message, setting Err),
// and the proxy relays Params as the chain leaves them.
//
// An Exchange is owned by one goroutine at a time; interceptors must not keep
// it past their return.
type Exchange struct {
	// Filled by the proxy before the chain runs.
	Kind     MessageKind     // what the exchange carries; MessageResult unless set
	Session  string          // downstream session id
	Upstream string          // upstream entry name; "" for foldproxy's own tools
	Method   string          // tools/call, resources/read, prompts/get, completion/complete
	Name     string          // the upstream's own tool or prompt name, or the resource URI
	Params   json.RawMessage // params as forwarded (branch_id already stripped)
	Args     json.RawMessage // tools/call arguments, for counting and the archive; scrubbed by Scrub once the upstream has answered
	// ExplicitBranch is the branch_id the call carried, "" when none.
	ExplicitBranch string
	Start          time.Time

	// Filled by the budget interceptor on the way in.
	Branch    string // the branch charged; the session's root id for the main thread
	Parent    string
	Depth     int
	Remaining int // tokens left in the branch before this result; -1 when unlimited

	// Filled by the handler that calls the upstream.
	Result          json.RawMessage // the JSON-RPC result object; interceptors may replace it
	RPCError        error           // a JSON-RPC error from the upstream; Result is nil then
	UpstreamLatency time.Duration

	// Filled by the interceptors on the way out.

	// WorkDeadline ends the per-result work, scrubbing and counting
	// together: the Scrub interceptor sets it to when the result arrived
	// plus scrub.timeout, and the Tokens interceptor withholds a result it
	// cannot count by then. Zero: no bound (scrubbing disabled).
	WorkDeadline    time.Time
	ArgTokens       int            // tokens of Args
	ResultTokens    int            // tokens of the result as the upstream sent it (after scrub), capped when Over
	Over            bool           // ResultTokens stopped counting at the cut point: the result exceeds Remaining
	DeliveredTokens int            // tokens of what the agent finally receives, notices included
	Redactions      map[string]int // secrets removed, by gitleaks rule id
	ScrubTime       time.Duration
	Outcome         string // one of the Outcome constants
	CutHandle       string // recall handle of a cut result's remainder
	BudgetUsed      int    // the branch's used tokens after this exchange
	BudgetTotal     int    // the branch's budget; 0 when unlimited
	Err             error  // the error the agent gets instead of Result, if any

	// decoded holds the strings of Result as Scrub decoded them to scan
	// them, when it left Result as it was: Tokens counts from it instead of
	// decoding the texts again. Only good while decoded.Of(Result).
	decoded *secrets.Decoded
	// resultErr is whether resultErrOf, the Result that Tokens counted,
	// has "isError": true, as Tokens found it parsing the result (unknown
	// when it could not): Budget reads it rather than parsing the result
	// again, while Result is still resultErrOf.
	resultErr   tokens.IsError
	resultErrOf []byte
}

// Handler processes an exchange: the innermost one forwards it upstream.
// It returns a non-nil error only for failures that leave no result to
// deliver; the error is then also stored in ex.Err.
type Handler func(ctx context.Context, ex *Exchange) error

// Interceptor wraps a Handler.
type Interceptor func(next Handler) Handler

// Chain builds the handler that runs the interceptors around h, the first
// listed outermost, as go-sdk's middleware and chi's do: Chain(h, a, b)
// runs a, then b, then h on the way in, and a result comes back through b,
// then a. A nil interceptor is skipped. foldproxy's standard list is
// NewChain's: metrics, audit, budget, tokens, scrub.
func Chain(h Handler, interceptors ...Interceptor) Handler {
	for i := len(interceptors) - 1; i >= 0; i-- {
		if ic := interceptors[i]; ic != nil {
			h = ic(h)
		}
	}
	return h
}
