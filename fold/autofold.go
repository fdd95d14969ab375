package fold

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// Automatic folds of the model wire (modelwire.Folder), kept by the
// Manager.
//
// A fold's decision is a record of kind "af" (observe mode's, kind "ao",
// kept apart) in the store, under the result's handle ("/fold" appended for
// a whole fold, alone for an oversize cut), written with the text it hides
// (archived like a cut's remainder, under the same handle) in one commit
// before the request that decided it is forwarded. Records and texts are
// pruned with the archive (fold.archiveMaxAge, fold.archiveMaxBytes).
//
// Handles are "af~" and 18 decimal digits: an HMAC-SHA256 of the tool-use id
// and the text under a key kept in the store (made once, at random). The
// same result always has the same handle, so a stub never changes; a
// handle cannot be guessed without the result, so it is a capability:
// branch_recall reads a fold for whoever names its handle, from any
// session, as only the conversation that holds the stub knows it. (Model
// requests carry no MCP session, and the MCP session that recalls is not
// the model wire's.)

// Record kinds.
const (
	recordFold        = "af"
	recordFoldObserve = "ao"
	recordKindKey     = "key"
)

// foldHandlePrefix starts every fold handle.
const foldHandlePrefix = "af~"

// isFoldHandle reports whether h names a fold of the model wire.
func isFoldHandle(h string) bool {
	if !strings.HasPrefix(h, foldHandlePrefix) || len(h) != len(foldHandlePrefix)+18 {
		return false
	}
	for _, c := range h[len(foldHandlePrefix):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// foldBook caches fold records by key: those read or written (found), and
// the keys the store does not hold (missing). Each map is dropped whole
// when it passes foldBookMax entries (the store still holds the records).
type foldBook struct {
	keyMu sync.Mutex
	key   atomic.Pointer[[]byte]

	mu       sync.Mutex
	found    [2]map[string]modelwire.FoldRecord // [on, observe]
	missing  [2]map[string]bool
	archived map[string]bool // handles whose text is archived

	// The model sessions branches are bound to (modelseal.go).
	bindMu sync.Mutex
	bound  map[string]string
}

const foldBookMax = 1 << 17

func (b *foldBook) init() {
	for i := range b.found {
		if b.found[i] == nil {
			b.found[i] = map[string]modelwire.FoldRecord{}
			b.missing[i] = map[string]bool{}
		}
	}
	if b.archived == nil {
		b.archived = map[string]bool{}
	}
}

func modeIndex(observe bool) int {
	if observe {
		return 1
	}
	return 0
}

// foldKey returns the key of the handles' HMAC, read from the store or
// made there on first use; a failure is retried on the next call.
func (m *Manager) foldKey(ctx context.Context) ([]byte, error) {
	b := &m.folds
	if k := b.key.Load(); k != nil {
		return *k, nil
	}
	b.keyMu.Lock()
	defer b.keyMu.Unlock()
	if k := b.key.Load(); k != nil {
		return *k, nil
	}
	rr, ok := m.store.(RecordReader)
	if !ok {
		return nil, errors.New("fold: the store keeps no records, so it cannot keep automatic folds")
	}
	got, err := rr.GetRecords(ctx, recordKindKey, []string{"autofold"})
	if err != nil {
		return nil, err
	}
	k, ok := got["autofold"]
	if !ok || len(k) != 32 {
		k = make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		if err := m.commit(context.WithoutCancel(ctx), &Batch{Records: []BatchRecord{{Kind: recordKindKey, ID: "autofold", Value: k, Keep: true}}}); err != nil {
			return nil, fmt.Errorf("fold: store the key of fold handles: %w", err)
		}
	}
	b.key.Store(&k)
	return k, nil
}

// FoldHandle implements modelwire.Folder.
func (s modelState) FoldHandle(toolUseID, text string) string {
	k, err := s.m.foldKey(context.Background())
	if err != nil {
		// Folds return the same error; a handle made without the key is
		// never stored.
		k = nil
	}
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(toolUseID))
	mac.Write([]byte{0})
	mac.Write([]byte(text))
	// 18 decimal digits (about 60 bits): o200k_base reads digits three
	// to a token, so the handle costs 10 tokens where 16 hex digits cost 19.
	return fmt.Sprintf("%s%018d", foldHandlePrefix, binary.BigEndian.Uint64(mac.Sum(nil)[:8])%1e18)
}

// Folds implements modelwire.Folder.
func (s modelState) Folds(ctx context.Context, observe bool, keys []string) (map[string]modelwire.FoldRecord, error) {
	m := s.m
	if _, err := m.foldKey(ctx); err != nil {
		return nil, err
	}
	i := modeIndex(observe)
	b := &m.folds
	out := map[string]modelwire.FoldRecord{}
	var ask []string
	b.mu.Lock()
	b.init()
	for _, k := range keys {
		if r, ok := b.found[i][k]; ok {
			out[k] = r
		} else if !b.missing[i][k] {
			ask = append(ask, k)
		}
	}
	b.mu.Unlock()
	if len(ask) == 0 {
		return out, nil
	}
	kind := recordFold
	if observe {
		kind = recordFoldObserve
	}
	got, err := m.store.(RecordReader).GetRecords(ctx, kind, ask)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	if len(b.found[i])+len(got) > foldBookMax {
		b.found[i] = map[string]modelwire.FoldRecord{}
	}
	if len(b.missing[i])+len(ask) > foldBookMax {
		b.missing[i] = map[string]bool{}
	}
	for _, k := range ask {
		v, ok := got[k]
		if !ok {
			b.missing[i][k] = true
			continue
		}
		var fr foldRecord
		if err := json.Unmarshal(v, &fr); err != nil {
			return nil, fmt.Errorf("fold: decode fold record %s: %w", k, err)
		}
		b.found[i][k] = fr.FoldRecord
		out[k] = fr.FoldRecord
	}
	return out, nil
}

// foldRecord is a fold's record as stored.
type foldRecord struct {
	modelwire.FoldRecord
	Time time.Time `json:"time"`
}

// RecordFolds implements modelwire.Folder.
func (s modelState) RecordFolds(ctx context.Context, observe bool, recs []modelwire.FoldRecord, texts []string) error {
	m := s.m
	if _, err := m.foldKey(ctx); err != nil {
		return err
	}
	kind := recordFold
	if observe {
		kind = recordFoldObserve
	}
	now := m.now()
	var batch Batch
	b := &m.folds
	keys := make([]string, len(recs))
	b.mu.Lock()
	b.init()
	for x, r := range recs {
		keys[x] = r.Handle
		if r.Kind != modelwire.FoldOversized {
			keys[x] = r.Handle + "/fold"
		}
		v, err := json.Marshal(foldRecord{FoldRecord: r, Time: now})
		if err != nil {
			b.mu.Unlock()
			return fmt.Errorf("fold: encode fold record: %w", err)
		}
		batch.Records = append(batch.Records, BatchRecord{Kind: kind, ID: keys[x], Value: v})
		if !observe && !b.archived[r.Handle] {
			batch.Cuts = append(batch.Cuts, BatchCut{Handle: r.Handle, Rest: []byte(texts[x])})
		}
	}
	b.mu.Unlock()
	if err := m.commit(context.WithoutCancel(ctx), &batch); err != nil {
		return fmt.Errorf("fold: record %d automatic folds: %w", len(recs), err)
	}
	i := modeIndex(observe)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	if len(b.found[i])+len(recs) > foldBookMax {
		b.found[i] = map[string]modelwire.FoldRecord{}
	}
	if len(b.archived)+len(recs) > foldBookMax {
		b.archived = map[string]bool{}
	}
	for x, r := range recs {
		b.found[i][keys[x]] = r
		delete(b.missing[i], keys[x])
		if !observe {
			b.archived[r.Handle] = true
		}
	}
	return nil
}

// RecallFold implements modelwire.Folder: branch_recall's answer for a
// fold's handle, as the MCP tool gives it.
func (s modelState) RecallFold(ctx context.Context, handle string, offset, maxTokens int) (string, error) {
	m := s.m
	limit := m.set.RecallPageTokens
	if maxTokens > 0 {
		limit = min(maxTokens, limit)
	}
	if !isFoldHandle(handle) {
		return "", fmt.Errorf("%w: handle %q is not the handle of a folded result (af~ and 18 digits)", ErrCutNotFound, handle)
	}
	p, err := m.recallFold(ctx, handle, offset, limit)
	if err != nil {
		return "", err
	}
	text, err := answerText(p)
	if err != nil {
		return "", err
	}
	return text, nil
}

// recallFold reads a page of a fold's archived text.
func (m *Manager) recallFold(ctx context.Context, handle string, offset, limit int) (*recallPage, error) {
	data, err := m.store.GetCut(ctx, handle)
	if err != nil {
		if refusal(err) != nil {
			return nil, fmt.Errorf("%w: handle %q is unknown or its text was pruned", ErrCutNotFound, handle)
		}
		return nil, fmt.Errorf("fold: read fold %s: %w", handle, err)
	}
	return m.recallPage(handle, data, offset, limit)
}

var _ modelwire.Folder = modelState{}

// recordRecallCall is the kind of the records of the added recall tool's
// calls (modelwire.RecallCaller), by tool-use id.
const recordRecallCall = "rc"

var _ modelwire.RecallCaller = modelState{}

// RecordRecallCalls implements modelwire.RecallCaller.
func (s modelState) RecordRecallCalls(ctx context.Context, calls []modelwire.RecallCall) error {
	var b Batch
	for _, c := range calls {
		if c.ID == "" {
			continue
		}
		b.Records = append(b.Records, BatchRecord{Kind: recordRecallCall, ID: c.ID, Value: []byte(c.Input)})
	}
	if len(b.Records) == 0 {
		return nil
	}
	if err := s.m.commit(context.WithoutCancel(ctx), &b); err != nil {
		return fmt.Errorf("fold: record %d recall calls: %w", len(b.Records), err)
	}
	return nil
}

// RecallCalls implements modelwire.RecallCaller.
func (s modelState) RecallCalls(ctx context.Context, ids []string) (map[string]modelwire.RecallCall, error) {
	rr, ok := s.m.store.(RecordReader)
	if !ok {
		return nil, nil
	}
	got, err := rr.GetRecords(ctx, recordRecallCall, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]modelwire.RecallCall, len(got))
	for id, v := range got {
		out[id] = modelwire.RecallCall{ID: id, Input: string(v)}
	}
	return out, nil
}
