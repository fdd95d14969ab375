// Package intercept holds the interceptors every forwarded result passes on
// its way back to the agent, one per file, in a fixed and tested order:
// scrub (execution-time secret removal) → tokens (counting) → budget
// (charging the branch; warn, cut, force-return) → audit (the JSONL record)
// → metrics (Prometheus). chain.go builds the standard chain and
// exchange.go holds the Exchange they pass along. The audit log's encoding
// and reading (audit_encode.go, audit_read.go) and the model wire's
// figures (metrics_model.go) sit beside the interceptor they belong to.
//
// The engines they drive are subpackages: intercept/secrets finds and
// redacts secrets, intercept/tokens counts and cuts. The interceptors stay
// thin: they apply an engine to an exchange and record what it did.
//
// Scrubbing comes first so that nothing after it (the archive, the audit
// log, the store) ever holds a raw secret.
//
// Every kind of message on its way to the agent passes the chain NewChain
// builds (serve's, the daemon's and the benchmarks' alike, the heap
// trimmer's wake included through Parts.AfterCall): an Exchange says
// whether it carries a result, a notification or a server-to-client
// request (MessageKind). The five interceptors act on results; a relayed
// message is scrubbed by the innermost handler the proxy gives it, and
// its redactions are recorded by Observer. An upstream's JSON-RPC error
// stays a *jsonrpc.Error (policy/jsonrpc) throughout: Scrub replaces one
// that held a secret with another of the same type and code. The package
// must never forward content it failed to scan, and never log or record a
// secret.
//
// The budget interceptor measures a result and shapes it (cuts it with the
// Counter, appends notices as content blocks, resource contents or prompt
// messages); what fits, what is cut and which notices go is decided by
// fold.Fit, the one budget decision, which the model wire calls too. The
// package must never decide a budget, a cut or a warning level by itself.
package intercept
