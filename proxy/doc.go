// Package proxy is foldproxy's downstream side: it accepts the agent's
// sessions over stdio or streamable HTTP, negotiates the protocol, serves the
// merged catalogue of every upstream plus the fold tools, routes each request
// to its upstream through the intercept chain, and relays notifications and
// server-to-client requests in both directions.
//
// proxy speaks raw JSON-RPC on both sides so that upstream schemas, results
// and _meta pass through byte for byte; it decodes only what it must route.
// In stdio mode nothing but JSON-RPC may ever reach stdout.
//
// On the same HTTP listener, the model front (ModelHandler) serves the
// model APIs (Anthropic Messages, OpenAI Chat Completions and Responses):
// each request goes through the context manager (fold/modelwire) and on to
// the real API, every header untouched (the agent's credentials are never
// logged or stored), the answer relayed byte for byte as it streams. The
// JSON body of any other /v1/ request is scrubbed before it is relayed
// (model_passthrough.go); foldproxy's own tools are told from others by
// what the MCP front served (ServedTools). The
// Responses API's WebSocket upgrade is refused (model.go says why).
//
// Many stdio sessions of one project share one process (attach.go): the
// project's daemon serves each attached stdio process as its own session
// over a unix socket (AttachServer). On Linux the stdio process passes the
// agent's stdin and stdout to the daemon (SCM_RIGHTS) with a journal of
// the session in shared memory (journal.go), and only waits: the daemon
// reads and writes the agent's pipes itself. Elsewhere, or with
// FOLDPROXY_ATTACH=relay, the stdio process is a Relay of JSON-RPC lines
// between the agent and the socket. Either way, when the daemon dies the
// stdio process resumes the session on the next daemon (TransportAttach
// sessions are Resumable); from the journal it knows what the daemon read
// and did not handle (it is read again) and what it took and did not
// answer (answered with an error, or sent again when it changes nothing).
// The journal must never be mapped by the relay while the daemon serves
// the session. A holding connection (AttachHello.Hold, what "foldproxy
// run" gives its agent) serves no session and keeps the daemon up; every
// welcome names the address of the daemon's HTTP listener, whose model
// front serves the project's stdio sessions. Catalogue requests never wait on upstreams for more than
// Options.ReadyWait; the instructions and branch_status name the upstreams
// that are not up.
//
// Transparent mode (forward.go) is an HTTPS proxy: configured model hosts
// are intercepted into the model front; remote MCP servers the agent's
// client connects to itself are intercepted into RemoteFront (remote.go),
// whose calls take the same intercept chains as the MCP front's while the
// client keeps its own session and credentials; every other host is
// tunnelled, never decrypted.
package proxy
