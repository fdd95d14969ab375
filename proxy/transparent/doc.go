// Package transparent is foldproxy's transparent mode: an HTTPS forward
// proxy (ForwardProxy, what the agent's HTTPS_PROXY names) and the local
// certificate authority (CA) whose certificates it answers intercepted
// hosts with.
//
// It owns the CONNECT decisions (the token in Proxy-Authorization, the
// allowed ports, which hosts are intercepted) and the CA's files. An
// intercepted model host's requests go to a model front (the Model
// function of ForwardOptions, the core's proxy.ModelHandler); an
// intercepted remote MCP server's go to a Remote (proxy.RemoteFront),
// which serves them with the core's intercept chains.
//
// transparent must never decrypt a host that is not configured for
// interception (InterceptHosts, or a Remote's servers): every other
// allowed host is tunnelled byte for byte. It never relays plain-HTTP
// proxy requests (foldproxy is not an open relay), never tunnels to a
// port not allowed, never reads a proxy from the environment (foldproxy
// would be its own proxy), and never logs a header or a body. It must not
// import the core (proxy): the core's fronts reach it through the Model
// function and the Remote interface.
package transparent
