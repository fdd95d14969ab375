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
// an intercepted remote MCP server's go to RemoteFront, whose calls take
// the core's intercept chains and fold tools (proxy.CallFoldTool) while
// the client keeps its own MCP session and credentials.
//
// transparent must never decrypt a host that is not configured for
// interception (InterceptHosts, or the remote MCP servers): every other
// allowed host is tunnelled byte for byte. It never relays plain-HTTP
// proxy requests (foldproxy is not an open relay), never tunnels to a
// port not allowed, never reads a proxy from the environment (foldproxy
// would be its own proxy), never relays a message from a remote server
// that it could not scan, and never logs or stores a header or a body.
//
// RemoteFront still keeps its own fold sessions (one per client MCP
// session) beside the core's Server: it is not yet a transport of the
// one core.
package transparent
