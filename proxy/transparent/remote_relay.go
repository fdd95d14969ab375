package transparent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/proxy"
)

// servePost serves a POST of a client: the streamable HTTP endpoint, or a
// legacy SSE session's message endpoint (sess.inject set).
func (f *RemoteFront) servePost(w http.ResponseWriter, r *http.Request, sess *remoteSession) {
	body, err := io.ReadAll(io.LimitReader(r.Body, f.maxMsg+1))
	if err != nil {
		proxyRefusal(w, http.StatusBadRequest, "foldproxy could not read the request: "+err.Error())
		return
	}
	if int64(len(body)) > f.maxMsg {
		proxyRefusal(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("foldproxy: the message is larger than foldproxy.maxMessageBytes (%d)", f.maxMsg))
		return
	}
	msgs, batch, perr := proxy.ParseMessages(body)
	if perr != nil {
		// The server answers malformed messages as it would directly.
		f.forwardPost(w, r, sess, body, nil)
		return
	}
	if batch {
		for _, m := range msgs {
			if m.IsRequest() && (chained(m.Method) || f.isFoldCall(sess, m)) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(proxy.Response(nil, nil, proxy.Errorf(proxy.CodeInvalidRequest,
					"foldproxy (transparent mode) does not relay %s in a JSON-RPC batch: send it in a request of its own", m.Method)))
				return
			}
		}
		f.notePosted(sess, msgs)
		f.forwardPost(w, r, sess, body, nil)
		return
	}
	msg := msgs[0]
	var local []byte
	var pc *pendingCall
	switch {
	case msg.IsRequest() && f.isFoldCall(sess, msg):
		local = f.foldCall(r.Context(), sess, msg)
	case msg.IsRequest() && chained(msg.Method):
		pc = f.startCall(sess, msg)
		select {
		case <-pc.forward:
		case <-pc.done:
			local, pc = pc.final, nil
		case <-r.Context().Done():
			if pc.cancel != nil {
				pc.cancel(errors.New("the client went away"))
			}
			return
		}
	default:
		f.notePosted(sess, msgs)
	}
	if local != nil {
		if sess.inject != nil {
			// Legacy SSE: answers travel on the GET stream.
			select {
			case sess.inject <- local:
				w.WriteHeader(http.StatusAccepted)
				_, _ = io.WriteString(w, "Accepted")
			case <-sess.ctx.Done():
				proxyRefusal(w, http.StatusNotFound, "foldproxy: the SSE session ended")
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(local)
		return
	}
	f.forwardPost(w, r, sess, body, pc)
}

// notePosted remembers tools/list requests (whose answers get the fold
// tools) and cancels the calls the client cancels.
func (f *RemoteFront) notePosted(sess *remoteSession, msgs []*proxy.Message) {
	for _, m := range msgs {
		switch {
		case m.IsRequest() && m.Method == "tools/list":
			sess.mu.Lock()
			sess.lists[string(m.ID)] = true
			sess.mu.Unlock()
		case m.Method == "notifications/cancelled":
			id, _ := jsonscan.Field(m.Params, "requestId")
			sess.mu.Lock()
			pc := sess.pending[string(id)]
			sess.mu.Unlock()
			if pc != nil && pc.cancel != nil {
				pc.cancel(errors.New("cancelled by the client"))
			}
		}
	}
}

// upstreamRequest is r as sent to the real server: the client's headers
// as they are (its credentials included), bodies unencoded so that
// foldproxy can read the answer.
func upstreamRequest(ctx context.Context, r *http.Request, target string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, "https://"+target+r.URL.RequestURI(), rd)
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	for _, k := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		out.Header.Del(k)
	}
	out.Header.Set("Accept-Encoding", "identity")
	out.Host = r.Host
	if body != nil {
		out.ContentLength = int64(len(body))
	}
	return out, nil
}

// forwardPost sends a POST to the server and relays its answer, each
// message through transform; pc is the chained call it carries, if any.
func (f *RemoteFront) forwardPost(w http.ResponseWriter, r *http.Request, sess *remoteSession, body []byte, pc *pendingCall) {
	target, _ := r.Context().Value(mitmTargetKey{}).(string)
	fail := func(err error) {
		if pc != nil && pc.cancel != nil {
			pc.cancel(err)
			<-pc.done
		}
	}
	req, err := upstreamRequest(r.Context(), r, target, body)
	if err != nil {
		fail(err)
		proxyRefusal(w, http.StatusBadGateway, "foldproxy: "+err.Error())
		return
	}
	resp, err := f.opts.Transport.RoundTrip(req)
	if err != nil {
		fail(fmt.Errorf("foldproxy could not reach the server: %w", err))
		if pc != nil && sess.inject == nil {
			// The client sees the chain's answer (audited as an error).
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(pc.final)
			return
		}
		proxyRefusal(w, http.StatusBadGateway, "foldproxy could not reach "+r.Host+": "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		// OAuth challenges (401 with WWW-Authenticate), expired sessions
		// (404) and the like reach the client with the server's status
		// and headers, the body scrubbed: clients quote it in their
		// errors.
		fail(fmt.Errorf("the server answered HTTP %d", resp.StatusCode))
		f.relayScrubbed(w, r.Context(), sess.srv, resp)
		return
	}
	f.relayMessages(w, r, resp, sess)
	if pc != nil && sess.inject == nil {
		// Streamable HTTP answers a request on its own POST: an answer
		// stream that ended without it will not bring it.
		fail(errors.New("the server's answer ended without the response"))
	}
}

// mediaType is the media type of h's Content-Type as clients read it (the
// TypeScript SDK's mediaTypeEssence): the part before ';', trimmed, lower
// case; "" when there is none. A strict parser would give up on
// "application/json; charset=" where clients read JSON.
func mediaType(h http.Header) string {
	mt, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// encoded reports whether resp's body is in a content coding foldproxy
// does not read (it asks for identity; a server may send another anyway).
func encoded(resp *http.Response) bool {
	ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	return ce != "" && ce != "identity"
}

// withholdAnswer answers the client in place of a server's answer that
// foldproxy could not scan: nothing of it is relayed.
func (f *RemoteFront) withholdAnswer(w http.ResponseWriter, s *remoteServer, why string) {
	f.log.Warn("transparent MCP: an answer of the server was withheld", "server", s.name, "why", why)
	proxyRefusal(w, http.StatusBadGateway, "foldproxy withheld the server's answer: "+why)
}

// relayScrubbed relays an answer of a server's MCP endpoint that is not a
// 2xx JSON body or event stream (an error status, another content type or
// none): its status and headers as they are, its body scrubbed, as JSON
// when it is JSON, as text otherwise. A body that cannot be read whole
// (within foldproxy.maxMessageBytes), decoded or scanned is withheld.
func (f *RemoteFront) relayScrubbed(w http.ResponseWriter, ctx context.Context, s *remoteServer, resp *http.Response) {
	if encoded(resp) {
		f.withholdAnswer(w, s, "it is in a content coding foldproxy does not read ("+resp.Header.Get("Content-Encoding")+")")
		return
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, f.maxMsg+1))
	if err != nil || int64(len(data)) > f.maxMsg {
		f.withholdAnswer(w, s, "it could not be read whole (or it is larger than foldproxy.maxMessageBytes)")
		return
	}
	clean := data
	if len(bytes.TrimSpace(data)) > 0 {
		if clean = f.scrubAny(ctx, s, "http "+strconv.Itoa(resp.StatusCode), data); clean == nil {
			f.withholdAnswer(w, s, "it could not be scanned for secrets")
			return
		}
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(clean)
}

// relayMessages relays a 2xx answer: a JSON body or an event stream, each
// JSON-RPC message through transform; anything else scrubbed
// (relayScrubbed).
func (f *RemoteFront) relayMessages(w http.ResponseWriter, r *http.Request, resp *http.Response, sess *remoteSession) {
	mt := mediaType(resp.Header)
	if (mt == "application/json" || mt == "text/event-stream") && encoded(resp) {
		f.withholdAnswer(w, sess.srv, "it is in a content coding foldproxy does not read ("+resp.Header.Get("Content-Encoding")+")")
		return
	}
	switch mt {
	case "application/json":
		data, err := io.ReadAll(io.LimitReader(resp.Body, f.maxMsg+1))
		if err != nil || int64(len(data)) > f.maxMsg {
			f.withholdAnswer(w, sess.srv, "it could not be read whole (or it is larger than foldproxy.maxMessageBytes)")
			return
		}
		out := f.transformBody(r.Context(), sess, data, false)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	case "text/event-stream":
		f.relayStream(w, r, resp, sess, nil)
	default:
		f.relayScrubbed(w, r.Context(), sess.srv, resp)
	}
}

// transformBody transforms a JSON body: one message or a batch.
// For an event's data (stream), a message withheld is dropped (nil); a
// JSON body always gets an answer.
func (f *RemoteFront) transformBody(ctx context.Context, sess *remoteSession, data []byte, stream bool) []byte {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var raws []json.RawMessage
		if json.Unmarshal(trimmed, &raws) != nil {
			if stream {
				return nil
			}
			return f.withheld(nil)
		}
		out := make([]json.RawMessage, 0, len(raws))
		for _, m := range raws {
			if b := f.transform(ctx, sess, m); b != nil {
				out = append(out, b)
			}
		}
		return proxy.MarshalNoEscape(out)
	}
	if b := f.transform(ctx, sess, trimmed); b != nil || stream {
		return b
	}
	return f.withheld(nil)
}

// withheld is the answer that replaces a message foldproxy could not scan.
func (f *RemoteFront) withheld(id json.RawMessage) []byte {
	return proxy.Response(id, nil, proxy.Errorf(proxy.CodeInternalError, "foldproxy withheld the server's message: it could not be scanned for secrets"))
}

// transform is what the client gets of one message from the server: a
// call's response after the chain, a tools/list answer with the fold
// tools, anything else scrubbed. nil: drop it.
func (f *RemoteFront) transform(ctx context.Context, sess *remoteSession, raw []byte) []byte {
	msg, perr := proxy.ParseOne(raw)
	if perr != nil {
		f.log.Debug("transparent MCP: a message from the server that is not JSON-RPC was withheld", "server", sess.srv.name)
		return nil
	}
	if msg.IsResponse() {
		key := string(msg.ID)
		sess.mu.Lock()
		pc := sess.pending[key]
		if pc != nil {
			delete(sess.pending, key)
		}
		list := sess.lists[key]
		delete(sess.lists, key)
		sess.mu.Unlock()
		if pc != nil {
			pc.resp <- msg
			<-pc.done
			return pc.final
		}
		clean := f.relayed(ctx, sess, msg, raw)
		if clean == nil {
			return f.withheld(msg.ID)
		}
		if list {
			clean = f.listed(sess.srv, clean)
		}
		return clean
	}
	return f.relayed(ctx, sess, msg, raw)
}

// relayed passes msg (raw), a message from the server that is not a
// chained call's response, through the relay chain as the core passes
// what its upstreams relay (proxy's upstream_traffic.go): a notification
// (MessageNotification) or a server-to-client request (MessageRequest)
// by its params, re-encoded around what the chain leaves of them; any
// other answer whole (MessageAnswer, method "response"). nil: withheld, it
// could not be scanned.
func (f *RemoteFront) relayed(ctx context.Context, sess *remoteSession, msg *proxy.Message, raw []byte) []byte {
	ex := &intercept.Exchange{Session: sess.foldID(), Upstream: sess.srv.name, Method: msg.Method, Params: msg.Params}
	switch {
	case msg.IsNotification():
		ex.Kind = intercept.MessageNotification
	case msg.IsRequest():
		ex.Kind = intercept.MessageRequest
	default:
		ex.Kind, ex.Method, ex.Params = intercept.MessageAnswer, "response", raw
	}
	if err := f.relayChain(ctx, ex); err != nil || ex.Err != nil {
		return nil
	}
	switch ex.Kind {
	case intercept.MessageNotification:
		return proxy.Notification(msg.Method, ex.Params)
	case intercept.MessageRequest:
		return proxy.Request(msg.ID, msg.Method, ex.Params)
	}
	return ex.Params
}

// errRelayWithheld withholds a relayed message that could not be scanned.
var errRelayWithheld = errors.New("foldproxy withheld this message: it could not be scanned for secrets")

// scrubRelayed is the innermost handler of the relay chain: it scrubs the
// exchange's params (reporting redactions to the Observer), or withholds
// the message (ex.Err).
func (f *RemoteFront) scrubRelayed(ctx context.Context, ex *intercept.Exchange) error {
	if len(ex.Params) == 0 {
		return nil
	}
	srv := &remoteServer{name: ex.Upstream}
	clean := f.scrubJSON(ctx, srv, ex.Method, ex.Params)
	if clean == nil {
		ex.Err = errRelayWithheld
		ex.Outcome = intercept.OutcomeWithheld
		return ex.Err
	}
	ex.Params = clean
	return nil
}

// scrubAny scrubs data, as JSON when it is valid JSON, else as text; nil
// when it could not be scanned.
func (f *RemoteFront) scrubAny(ctx context.Context, s *remoteServer, what string, data []byte) []byte {
	if jsonscan.Valid(data) {
		return f.scrubJSON(ctx, s, what, data)
	}
	// The scrubber reads JSON: text goes in as one JSON string.
	clean := f.scrubJSON(ctx, s, what, jsonscan.Quote(string(data)))
	if clean == nil {
		return nil
	}
	var text string
	if json.Unmarshal(clean, &text) != nil {
		return nil
	}
	return []byte(text)
}

// scrubJSON scrubs raw, a JSON value from server s; nil when it could not
// be scanned.
func (f *RemoteFront) scrubJSON(ctx context.Context, s *remoteServer, method string, raw []byte) []byte {
	d := f.opts.Settings.Scrub.Timeout.D()
	if d <= 0 {
		d = policy.Default().Scrub.Timeout.D()
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	clean, red, err := f.opts.Scrubber.ScrubJSON(sctx, raw)
	if err != nil {
		f.log.Warn("transparent MCP: a message from the server was withheld: it could not be scanned for secrets", "server", s.name, "method", method, "err", err)
		return nil
	}
	if len(red) > 0 && f.opts.Observer != nil {
		f.opts.Observer.Relayed(s.name, method, red)
	}
	return clean
}

// listed is what the client gets of a tools/list answer (scrubbed) of
// server s: with foldTools, the fold tools appended to its last page. The
// tools it serves are recorded with the core (Options.Served), so that the
// model front knows their results were charged here, on the MCP wire.
func (f *RemoteFront) listed(s *remoteServer, raw []byte) []byte {
	res, ok := jsonscan.Field(raw, "result")
	if !ok {
		return raw
	}
	var tools []json.RawMessage
	if t, ok := jsonscan.Field(res, "tools"); !ok || json.Unmarshal(t, &tools) != nil {
		return raw
	}
	if _, more := jsonscan.Field(res, "nextCursor"); !s.foldTools || more && jsonscan.StringField(res, "nextCursor") != "" {
		f.opts.Core.AddServed(tools)
		return raw
	}
	have := map[string]bool{}
	for _, t := range tools {
		have[jsonscan.StringField(t, "name")] = true
	}
	for _, t := range f.opts.Core.FoldTools() {
		if !have[jsonscan.StringField(t, "name")] {
			tools = append(tools, t)
		}
	}
	f.opts.Core.AddServed(tools)
	res2, err := jsonscan.SetField(res, "tools", proxy.MarshalNoEscape(tools))
	if err != nil {
		return raw
	}
	out, err := jsonscan.SetField(raw, "result", res2)
	if err != nil {
		return raw
	}
	return out
}

// send forwards r, bodiless, to the server it was meant for; when that
// fails the client has been answered 502 and ok is false.
func (f *RemoteFront) send(w http.ResponseWriter, r *http.Request) (resp *http.Response, ok bool) {
	target, _ := r.Context().Value(mitmTargetKey{}).(string)
	req, err := upstreamRequest(r.Context(), r, target, nil)
	if err != nil {
		proxyRefusal(w, http.StatusBadGateway, "foldproxy: "+err.Error())
		return nil, false
	}
	resp, err = f.opts.Transport.RoundTrip(req)
	if err != nil {
		proxyRefusal(w, http.StatusBadGateway, "foldproxy could not reach "+r.Host+": "+err.Error())
		return nil, false
	}
	return resp, true
}

// serveGet serves a GET of a server's endpoint: the standalone stream of
// streamable HTTP, or the legacy SSE transport's stream, whose first event
// announces the endpoint its POSTs go to.
func (f *RemoteFront) serveGet(w http.ResponseWriter, r *http.Request, s *remoteServer, conn net.Conn) {
	resp, ok := f.send(w, r)
	if !ok {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 || mediaType(resp.Header) != "text/event-stream" {
		f.relayScrubbed(w, r.Context(), s, resp)
		return
	}
	if encoded(resp) {
		f.withholdAnswer(w, s, "it is in a content coding foldproxy does not read ("+resp.Header.Get("Content-Encoding")+")")
		return
	}
	var sess *remoteSession
	if r.Header.Get("Mcp-Session-Id") != "" {
		sess = f.streamableSession(s, r, conn)
	}
	f.relayStream(w, r, resp, sess, s)
}

// serveDelete forwards a client's DELETE of its session and ends the fold
// session with it.
func (f *RemoteFront) serveDelete(w http.ResponseWriter, r *http.Request, s *remoteServer, conn net.Conn) {
	resp, ok := f.send(w, r)
	if !ok {
		return
	}
	defer resp.Body.Close()
	if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
		f.mu.Lock()
		sess := f.sessions["s:"+hashKey(s.name, sid)]
		f.mu.Unlock()
		if sess != nil {
			f.endSession(sess, "deleted by the client")
		}
	}
	f.relayScrubbed(w, r.Context(), s, resp)
}

// serveOther forwards a request of another method to a server's MCP
// endpoint (OPTIONS, say) and relays its answer scrubbed.
func (f *RemoteFront) serveOther(w http.ResponseWriter, r *http.Request, s *remoteServer) {
	body, err := io.ReadAll(io.LimitReader(r.Body, f.maxMsg+1))
	if err != nil || int64(len(body)) > f.maxMsg {
		proxyRefusal(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("foldproxy could not read the request whole (or it is larger than foldproxy.maxMessageBytes, %d)", f.maxMsg))
		return
	}
	if len(body) == 0 {
		body = nil
	}
	target, _ := r.Context().Value(mitmTargetKey{}).(string)
	req, err := upstreamRequest(r.Context(), r, target, body)
	if err != nil {
		proxyRefusal(w, http.StatusBadGateway, "foldproxy: "+err.Error())
		return
	}
	resp, err := f.opts.Transport.RoundTrip(req)
	if err != nil {
		proxyRefusal(w, http.StatusBadGateway, "foldproxy could not reach "+r.Host+": "+err.Error())
		return
	}
	defer resp.Body.Close()
	f.relayScrubbed(w, r.Context(), s, resp)
}
