// Package proxy is foldproxy's downstream side: it accepts the agent's
// sessions over stdio or streamable HTTP, negotiates the protocol, serves the
// merged catalogue of every upstream plus the fold tools, routes each request
// to its upstream through the intercept chain, and relays notifications and
// server-to-client requests in both directions.
//
// proxy speaks raw JSON-RPC on both sides so that upstream schemas, results
// and _meta pass through byte for byte; it decodes only what it must route.
// The message, the envelopes, the id key and the one error type (Message
// and Error are aliases) are policy/jsonrpc's. Every message to the agent
// from an upstream passes the intercept chain: results of calls
// (server_calls.go), notifications and server-to-client requests
// (upstream_traffic.go), as an exchange that says its kind. The
// negotiation of the client capabilities upstreams are told about is
// proxy's too (AdvertiseClientCaps).
// In stdio mode nothing but JSON-RPC may ever reach stdout.
//
// The MCP front over streamable HTTP is HTTPHandler (http.go; its session
// registry in http_session.go, the answers of a POST in http_post.go).
// The core that every front hands its messages to is Server (server.go;
// the calls to upstreams and fold tools in server_calls.go, waiting for
// upstreams in server_ready.go).
//
// On the same HTTP listener, cmd/foldproxy mounts the model front of
// package proxy/modelfront (the model APIs: Anthropic Messages, OpenAI
// Chat Completions and Responses). proxy does not import it; what the model
// front learns of the MCP front is which tools foldproxy served
// (ServedTools, served.go), filled by the catalogues Server builds and
// handed to the model front by cmd/foldproxy through fold/modelwire's
// options.
//
// Many stdio sessions of one project share one process: package
// proxy/attach serves each attached stdio process as its own session of
// this core, through the seam of attached.go (ServeAttached over the
// agent's own pipes, the Journal interface the stdio writer records its
// answers in, the line reader and writer a relay uses). TransportAttach
// sessions are Resumable: when the daemon dies, the stdio process resumes
// the session on the next one.
//
// Catalogue requests never wait on upstreams for more than
// Options.ReadyWait; the instructions and branch_status name the upstreams
// that are not up.
//
// Transparent mode is package proxy/transparent: an HTTPS proxy whose
// intercepted model hosts go to proxy/modelfront and whose intercepted
// remote MCP servers go to its RemoteFront, a transport of this core
// through the seam of remote_seam.go: the core opens, touches and ends
// the fold session of each client MCP session there (sessions it sends
// nothing, as they are not among liveSessions), serves the fold tools'
// entries and calls, and records the tools served (ServedTools); every
// other host is tunnelled, never decrypted.
//
// Every front on the HTTP listener, and the forward proxy, checks its
// token and the Host and Origin headers with package proxy/guard
// (access.go adapts it); proxy never compares a token itself.
package proxy
