// Package jsonrpc owns foldproxy's JSON-RPC 2.0: the message and its
// envelopes, ids and the key that compares them by value, the error codes
// foldproxy sends and the one error type, Error, that carries a JSON-RPC
// error from wherever it was answered (an upstream, the agent, foldproxy
// itself) to wherever it goes, unchanged in type.
//
// Both sides use it: proxy, which talks to the agent, and upstreams, which
// talks to the MCP servers. Members that are relayed untouched (params,
// results, an error object as it came) stay raw: an envelope is built by
// appending them to fixed bytes, never by encoding them again, so that no
// number is rounded, no key reordered and no string re-escaped.
//
// The package must never decode params or results it does not need, never
// log, and imports nothing of foldproxy's: it is a leaf under policy/. The
// quick scanners that read a message in one pass (policy/jsonscan) are
// called by the packages at the edge, which hand their findings to the
// types here.
package jsonrpc
