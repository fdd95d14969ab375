// Package modelwire is the context manager F of context folding, applied to
// requests on the model wire (Anthropic Messages, OpenAI Chat Completions,
// OpenAI Responses) before they are forwarded.
//
// Spans. A branch's span starts after the results of the turn that called
// a tool whose name (joined to its Responses namespace, as Codex calls MCP
// tools) ends in branch_create (the branch id is read from that
// result) and ends with the results of the turn whose branch_return closed
// it, whose result carried its forced-return notice, or whose result the
// model wire cut (State's Branch.EndCall). Closing a span closes the spans
// nested in it. A closed span is folded: its messages go (Responses input
// items this package does not know, such as Codex's additional_tools,
// stay where they were), and the branch_create result becomes the
// branch's summary; what the span's last
// user message held besides tool results (text the user typed, reminders)
// moves to the message of the branch_create result, and a cache breakpoint
// the removed messages carried moves to its last block. When the turn that
// ends a span also creates a new branch, the fold ends before that turn.
//
// Budgets. Every tool result inside an open span is charged to the
// innermost open branch through State.ChargeResult, keyed by its tool-use
// id, so the resent history costs nothing twice; the results of tools that
// Options.ChargedOnMCP names (foldproxy's own MCP tools) were charged and
// scrubbed on the MCP wire and are left alone here, and the fold tools'
// own answers are never charged. A Decision cuts a result (replaced by a
// string: the kept text and the notice) or adds a notice.
//
// Scrubbing runs over every other tool result that stays, through
// Options.Scrub; an error withholds the result (fail closed).
//
// Guidance adds reminders to the main thread (see guidance.go).
//
// It is pure: it imports nothing of foldproxy's but the policy/jsonscan
// leaf (the one JSON scanner), keeps the original bytes
// of everything it does not change (it edits byte ranges of the request,
// never re-encodes it), and depends on the fold state only through State,
// so the same request and state give the same bytes, and a request with
// nothing to fold, charge, scrub or remind is returned as it came. It must
// never produce an invalid request: Check states what valid means, and the
// fuzz tests hold every output to it.
package modelwire
