package transparent

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/foldproxy/foldproxy/fold"
)

// fakeFold is a test double of the fold engine (as in the core's tests).
type fakeFold struct {
	mu      sync.Mutex
	opened  []string
	ended   []string
	records map[string]fold.SessionRecord
}

func (f *fakeFold) Tools() []json.RawMessage {
	return []json.RawMessage{json.RawMessage(`{"name":"branch_create","inputSchema":{"type":"object"}}`)}
}
func (f *fakeFold) CallTool(ctx context.Context, session, name string, args json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"content":[{"type":"text","text":"created"}]}`), nil
}
func (f *fakeFold) OpenSession(ctx context.Context, rec fold.SessionRecord) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened = append(f.opened, rec.ID)
	if f.records == nil {
		f.records = map[string]fold.SessionRecord{}
	}
	f.records[rec.ID] = rec
	return nil
}
func (f *fakeFold) ResumeSession(ctx context.Context, id string) (*fold.SessionRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.records[id]; ok {
		return &r, nil
	}
	return nil, fold.ErrSessionNotFound
}
func (f *fakeFold) TouchSession(ctx context.Context, id string) {}
func (f *fakeFold) EndSession(ctx context.Context, id string) error {
	f.mu.Lock()
	f.ended = append(f.ended, id)
	f.mu.Unlock()
	return nil
}
