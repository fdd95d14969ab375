// Package transparent is foldproxy's transparent mode: an HTTPS forward
// proxy (ForwardProxy, what the agent's HTTPS_PROXY names), the local
// certificate authority (CA) whose certificates it answers intercepted
// hosts with, and the front of the remote MCP servers the agent's client
// connects to itself (RemoteFront).
//
// It owns the CONNECT decisions (the token in Proxy-Authorization, checked
// with proxy/guard; the allowed ports; which hosts are intercepted) and the
// CA's files. An intercepted model host's requests go to a model front
// (the Model function of ForwardOptions, proxy/modelfront's Handler);
// an intercepted remote MCP server's go to RemoteFront, a transport of the
// one core (proxy.Server): the core holds the fold session of each client
// MCP session and answers the fold tools, the calls and every message
// relayed pass the core's intercept chain, while the client keeps its own
// MCP session and credentials and transparent keeps the transport (the
// client's own server reached with the client's own headers, answers on
// the POST's stream or on the GET stream).
//
// transparent must never decrypt a host that is not configured for
// interception (InterceptHosts, or the remote MCP servers): every other
// allowed host is tunnelled byte for byte. It never relays plain-HTTP
// proxy requests (foldproxy is not an open relay), never tunnels to a
// port not allowed, never reads a proxy from the environment (foldproxy
// would be its own proxy), never relays a message from a remote server
// that it could not scan, and never logs or stores a header or a body.
//
// RemoteFront never opens, touches or ends a fold session itself, nor
// answers a fold tool: those are the core's. Every JSON-RPC message of a
// server's 2xx answer (JSON body or event stream) passes the chain; it
// scrubs directly only what is not such a message (error statuses, other
// content types, events of other names, event fields).
package transparent
