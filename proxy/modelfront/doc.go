// Package modelfront is foldproxy's model front: the model APIs (Anthropic
// Messages, OpenAI Chat Completions and the OpenAI Responses API) served on
// the HTTP listener, beside the MCP front of package proxy, and behind the
// forward proxy of package proxy/transparent for intercepted model hosts.
//
// It owns:
//   - the routing of a request to its dialect and its model API
//     (Handler, model.go): POST /v1/messages, /v1/messages/count_tokens,
//     /v1/chat/completions and /v1/responses are folded; any other /v1/
//     path is relayed with its JSON body scrubbed (model_passthrough.go);
//     every other path gets 404, or in transparent mode is relayed as it is;
//   - the application of the context manager (fold/modelwire's Apply) to
//     each body, with memos of what the scrubber and the token counter made
//     of each text an agent resends (model_memo.go);
//   - relaying the model API's answer byte for byte, an event stream
//     flushed event by event as it arrives, every header untouched in both
//     directions (hop-by-hop headers and TokenHeader aside);
//   - the usage figures read from the answer as it passes (model_usage.go),
//     the model session a request belongs to and the prompt-cache bill of
//     its input (model_ledger.go), told to an Observer as an Event;
//   - the recall tool the context manager adds: its calls are read from
//     the answer and answered in the proxy (model_recall.go);
//   - the front's own access check, with package proxy/guard: foldproxy's
//     token in TokenHeader and the Host and Origin headers; the Responses
//     API's WebSocket upgrade is refused (model.go says why).
//
// modelfront must never log or store the agent's credentials (the
// Authorization and x-api-key headers belong to the model API and pass
// through untouched; no header or body is logged, and a model session is
// named by a digest). It must never forward a body it could not scan: a
// folded request whose body is too large, compressed, not JSON, has a key
// twice in one object, or that the scrubber or the fold state failed on
// is refused, and nothing reaches the model API; so is a relayed JSON
// body that could not be scrubbed (a relayed body that is not JSON, such as
// a file upload, has no strings to scrub and goes as it is). It must never
// re-encode a body it does not change: an unchanged body is forwarded as
// the agent's own bytes, and an answer's bytes go to the agent as they
// came (the front reads a copy, for the usage figures and recall calls).
//
// Which tools are foldproxy's own it learns from the MCP front through
// fold/modelwire's options (proxy.ServedTools, passed in by cmd/foldproxy),
// never by importing package proxy: it depends on fold/modelwire and
// proxy/guard only.
package modelfront
