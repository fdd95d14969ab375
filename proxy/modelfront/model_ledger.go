package modelfront

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// Model sessions. A model request belongs to the conversation its client
// names: Claude Code's X-Claude-Code-Session-Id header, a session_id or
// conversation_id header (Codex), or, for a client that sends none, what
// the body ties to its conversation (modelwire.ConversationKey: OpenAI's
// prompt_cache_key, the session in Anthropic's metadata.user_id, or a
// digest of the conversation's start). The session's name is a digest of
// that key ("ms-" and 16 hex digits), so no header value is logged or
// stored.

// modelSessionHeaders are the headers that name a client's conversation,
// in order of preference.
var modelSessionHeaders = []string{"X-Claude-Code-Session-Id", "Session_id", "Session-Id", "Conversation_id", "Conversation-Id", "X-Session-Id"}

// modelSession names the session of a request.
func modelSession(r *http.Request, d modelwire.Dialect, body []byte) string {
	key := ""
	for _, h := range modelSessionHeaders {
		if v := strings.TrimSpace(r.Header.Get(h)); v != "" {
			key = "header:" + v
			break
		}
	}
	if key == "" {
		key = modelwire.ConversationKey(d, body)
	}
	sum := sha256.Sum256([]byte("foldproxy model session\x00" + key))
	return "ms-" + hex.EncodeToString(sum[:8])
}

// modelLedger remembers, per model session, the layout of the request
// forwarded last and the size of the conversation received last, for the
// prompt-cache model of each request's bill (see Bill). It holds at
// most ledgerSessions sessions, forgetting the least recently seen.
type modelLedger struct {
	mu   sync.Mutex
	seq  uint64
	sess map[string]*ledgerEntry
}

type ledgerEntry struct {
	seen     uint64
	pieces   []modelwire.Piece
	received int // tokens of the conversation as the client sent it
}

const ledgerSessions = 4096

// Bill is the prompt-cache model of one request's input, in the
// front's token count (o200k_base): a request reads from the cache what
// it shares with the session's request before it, up to the first piece
// (the head, or a message) that changed, and writes the rest. Held is the
// tokens read; Billed weighs them at the prices; Without is the same
// request's bill had foldproxy changed nothing, the client's own requests
// being taken to grow by appending (the previous one wholly read, the
// growth written).
type Bill struct {
	Held, Billed, Without float64
}

// observe records a forwarded request and returns its bill.
func (l *modelLedger) observe(session string, body []byte, pieces []modelwire.Piece, received, forwarded int, read, write float64) Bill {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess == nil {
		l.sess = map[string]*ledgerEntry{}
	}
	l.seq++
	e := l.sess[session]
	if e == nil {
		if len(l.sess) >= ledgerSessions {
			var old string
			var oldSeen uint64
			for k, v := range l.sess {
				if old == "" || v.seen < oldSeen {
					old, oldSeen = k, v.seen
				}
			}
			delete(l.sess, old)
		}
		e = &ledgerEntry{}
		l.sess[session] = e
	}
	heldBytes := 0
	for i, p := range pieces {
		if i >= len(e.pieces) || e.pieces[i] != p {
			heldBytes = p.Start
			break
		}
		if i == len(pieces)-1 {
			heldBytes = len(body)
		}
	}
	if e.pieces == nil {
		heldBytes = 0
	}
	var b Bill
	if len(body) > 0 {
		b.Held = float64(forwarded) * float64(heldBytes) / float64(len(body))
	}
	b.Billed = read*b.Held + write*(float64(forwarded)-b.Held)
	prev := min(e.received, received)
	b.Without = read*float64(prev) + write*float64(received-prev)
	e.pieces = append(e.pieces[:0], pieces...)
	e.received, e.seen = received, l.seq
	return b
}
