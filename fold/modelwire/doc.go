// Package modelwire is the context manager F of context folding, applied to
// requests on the model wire (Anthropic Messages, OpenAI Chat Completions,
// OpenAI Responses) before they are forwarded.
//
// Spans. A branch's span starts after the results of the turn that called
// a tool whose name (joined to its Responses namespace, as Codex calls MCP
// tools) ends in branch_create (the branch id is read from that
// result), when the State binds it (Binder: fold.Manager honours a span
// only for an answer whose seal verifies, in the model session that first
// showed it; any other answer naming a branch is plain content), and ends with the results of the turn whose branch_return closed
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
// Scrubbing runs over every tool result that stays, through
// Options.Scrub, those charged on the MCP wire and the fold tools' answers
// included (a name proves nothing), in every shape the model reads
// (text parts, documents, search results, server tool results, Chat's
// role "function", the Responses shell outputs; shapes.go), the parts of
// one result as one text (Options.ScrubAcross), and over the text of every
// user message (file contents; scrubtext.go); an error withholds the
// result or text (fail closed). A request with a key twice in one object
// is refused (DuplicateKeyError); ScrubJSON scrubs the bodies the front
// relays without folding.
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
