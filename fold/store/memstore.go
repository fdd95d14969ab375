package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// ErrStoreClosed is returned by a Store after Close.
var ErrStoreClosed = errors.New("fold: store is closed")

// MemStore is an in-memory Store for tests. Records are kept JSON-encoded,
// as in the Badger store, so that a test sees exactly what a round trip
// through the durable store would give back and never aliases a record it
// handed in. It is safe for concurrent use; nothing survives the process.
type MemStore struct {
	mu       sync.Mutex
	closed   bool
	branches map[string][]byte
	calls    map[string][]memArchived // by branch, in sequence order
	cuts     map[string]memArchived
	sessions map[string][]byte
	records  map[string]memArchived // by kind + "/" + id
}

// memArchived is one archived call or cut remainder.
type memArchived struct {
	seq  int
	time time.Time
	data []byte
	keep bool // never pruned
}

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore {
	return &MemStore{
		branches: make(map[string][]byte),
		calls:    make(map[string][]memArchived),
		cuts:     make(map[string]memArchived),
		sessions: make(map[string][]byte),
		records:  make(map[string]memArchived),
	}
}

// PutRecord stores one of fold's own records.
func (s *MemStore) PutRecord(ctx context.Context, kind, id string, data []byte) error {
	if kind == "" || id == "" {
		return fmt.Errorf("%w: fold: PutRecord needs a kind and an id", ErrInvalidArgument)
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	// Records put one by one are not pruned (the Badger store keeps no
	// time index entry for them).
	s.records[kind+"/"+id] = memArchived{time: time.Now(), data: slices.Clone(data), keep: true}
	return nil
}

// GetRecord returns a record, or an error wrapping ErrRecordNotFound.
func (s *MemStore) GetRecord(ctx context.Context, kind, id string) ([]byte, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	a, ok := s.records[kind+"/"+id]
	if !ok {
		return nil, fmt.Errorf("%w: %s %q", ErrRecordNotFound, kind, id)
	}
	return slices.Clone(a.data), nil
}

// Records lists the records of a kind, by id.
func (s *MemStore) Records(ctx context.Context, kind string) ([]Record, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []Record
	for k, v := range s.records {
		if id, ok := strings.CutPrefix(k, kind+"/"); ok {
			out = append(out, Record{ID: id, Data: slices.Clone(v.data)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// DeleteRecord removes a record.
func (s *MemStore) DeleteRecord(ctx context.Context, kind, id string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	delete(s.records, kind+"/"+id)
	return nil
}

// begin locks the store for one operation and checks that it may proceed.
func (s *MemStore) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrStoreClosed
	}
	return nil
}

// PutBranch stores b, replacing any earlier version.
func (s *MemStore) PutBranch(ctx context.Context, b *Branch) error {
	if b == nil || b.ID == "" {
		return fmt.Errorf("%w: fold: PutBranch needs a branch with an id", ErrInvalidArgument)
	}
	data, err := marshalBranch(b)
	if err != nil {
		return fmt.Errorf("fold: encode branch %s: %w", b.ID, err)
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.branches[b.ID] = data
	return nil
}

// GetBranch returns the branch id, or an error wrapping ErrBranchNotFound.
func (s *MemStore) GetBranch(ctx context.Context, id string) (*Branch, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	data, ok := s.branches[id]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: branch %q is not in the store", ErrBranchNotFound, id)
	}
	return decodeBranch(data)
}

// Branches lists the branches of session, or of every session when session
// is "", in creation order.
func (s *MemStore) Branches(ctx context.Context, session string) ([]*Branch, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	raw := make([][]byte, 0, len(s.branches))
	for _, data := range s.branches {
		raw = append(raw, data)
	}
	s.mu.Unlock()
	var out []*Branch
	for _, data := range raw {
		b, err := decodeBranch(data)
		if err != nil {
			return nil, err
		}
		if session == "" || b.Session == session {
			out = append(out, b)
		}
	}
	sortBranches(out)
	return out, nil
}

// AppendCall archives rec as the next call of branch and returns its
// sequence number, starting at 1.
func (s *MemStore) AppendCall(ctx context.Context, branch string, rec *CallRecord) (int, error) {
	if rec == nil {
		return 0, fmt.Errorf("%w: fold: AppendCall needs a record", ErrInvalidArgument)
	}
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	return s.appendLocked(branch, rec)
}

// appendLocked archives a call; the caller holds s.mu.
func (s *MemStore) appendLocked(branch string, rec *CallRecord) (int, error) {
	list := s.calls[branch]
	seq := 1
	if len(list) > 0 {
		seq = list[len(list)-1].seq + 1
	}
	c := *rec
	c.Seq = seq
	if c.Time.IsZero() {
		c.Time = time.Now()
	}
	// The hand encoder of the Badger store: the bytes json.Marshal gives
	// (FuzzEncodeStoredCall), without its reflection on every call.
	data, err := marshalStoredCall(&storedCall{CallRecord: c})
	if err != nil {
		return 0, fmt.Errorf("fold: encode call %d of %s: %w", seq, branch, err)
	}
	s.calls[branch] = append(list, memArchived{seq: seq, time: c.Time, data: data})
	return seq, nil
}

// Batch applies the writes of one operation together.
func (s *MemStore) Batch(ctx context.Context, b *Batch) error {
	if err := b.validate(); err != nil {
		return err
	}
	encoded := make([][]byte, len(b.Branches))
	for i, br := range b.Branches {
		data, err := marshalBranch(br)
		if err != nil {
			return fmt.Errorf("fold: encode branch %s: %w", br.ID, err)
		}
		encoded[i] = data
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for _, c := range b.Cuts {
		s.cuts[c.Handle] = memArchived{time: time.Now(), data: slices.Clone(c.Rest)}
	}
	for _, c := range b.Calls {
		seq, err := s.appendLocked(c.Branch, c.Rec)
		if err != nil {
			return err
		}
		c.Rec.Seq = seq
	}
	for i, br := range b.Branches {
		s.branches[br.ID] = encoded[i]
	}
	for _, r := range b.Records {
		s.records[r.Kind+"/"+r.ID] = memArchived{time: time.Now(), data: slices.Clone(r.Value), keep: r.Keep}
	}
	return nil
}

// GetRecords returns the records of kind among ids that exist, by id.
func (s *MemStore) GetRecords(ctx context.Context, kind string, ids []string) (map[string][]byte, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make(map[string][]byte)
	for _, id := range ids {
		if a, ok := s.records[kind+"/"+id]; ok {
			out[id] = slices.Clone(a.data)
		}
	}
	return out, nil
}

// Calls returns up to limit calls of branch from sequence number fromSeq
// on; a limit of zero or less means all of them.
func (s *MemStore) Calls(ctx context.Context, branch string, fromSeq, limit int) ([]*CallRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var raw [][]byte
	for _, a := range s.calls[branch] {
		if a.seq < fromSeq {
			continue
		}
		if limit > 0 && len(raw) >= limit {
			break
		}
		raw = append(raw, a.data)
	}
	s.mu.Unlock()
	out := make([]*CallRecord, 0, len(raw))
	for _, data := range raw {
		var c CallRecord
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, fmt.Errorf("fold: decode call of %s: %w", branch, err)
		}
		out = append(out, &c)
	}
	return out, nil
}

// PutCut stores the remainder of a cut result under handle.
func (s *MemStore) PutCut(ctx context.Context, handle string, rest []byte) error {
	if handle == "" {
		return fmt.Errorf("%w: fold: PutCut needs a handle", ErrInvalidArgument)
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.cuts[handle] = memArchived{time: time.Now(), data: slices.Clone(rest)}
	return nil
}

// GetCut returns the remainder stored under handle, or an error wrapping
// ErrCutNotFound.
func (s *MemStore) GetCut(ctx context.Context, handle string) ([]byte, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	a, ok := s.cuts[handle]
	if !ok {
		return nil, fmt.Errorf("%w: handle %q is unknown or was pruned", ErrCutNotFound, handle)
	}
	return slices.Clone(a.data), nil
}

// PutSession stores a session record.
func (s *MemStore) PutSession(ctx context.Context, rec *SessionRecord) error {
	if rec == nil || rec.ID == "" {
		return fmt.Errorf("%w: fold: PutSession needs a record with an id", ErrInvalidArgument)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("fold: encode session %s: %w", rec.ID, err)
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.sessions[rec.ID] = data
	return nil
}

// GetSession returns a session record, or an error wrapping
// ErrSessionNotFound.
func (s *MemStore) GetSession(ctx context.Context, id string) (*SessionRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	data, ok := s.sessions[id]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: session %q is not in the store", ErrSessionNotFound, id)
	}
	return decodeSession(data)
}

// Sessions lists every session record, ordered by id.
func (s *MemStore) Sessions(ctx context.Context) ([]*SessionRecord, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	raw := make([][]byte, 0, len(s.sessions))
	for _, data := range s.sessions {
		raw = append(raw, data)
	}
	s.mu.Unlock()
	out := make([]*SessionRecord, 0, len(raw))
	for _, data := range raw {
		rec, err := decodeSession(data)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// DeleteSession removes a session record; removing an absent one is not an
// error.
func (s *MemStore) DeleteSession(ctx context.Context, id string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	delete(s.sessions, id)
	return nil
}

// Prune removes archived calls and cut remainders older than maxAge, closed
// branch records closed before then, and then the oldest archives until
// their total size is at most maxBytes. A maxAge or maxBytes of zero or less
// disables that rule. Active branches are never removed.
func (s *MemStore) Prune(ctx context.Context, maxAge time.Duration, maxBytes int64) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	now := time.Now()
	type entry struct {
		branch, handle string
		record         string
		seq            int
		t              time.Time
		size           int64
	}
	var all []entry
	for b, list := range s.calls {
		for _, a := range list {
			all = append(all, entry{branch: b, seq: a.seq, t: a.time, size: int64(len(a.data))})
		}
	}
	for h, a := range s.cuts {
		all = append(all, entry{handle: h, t: a.time, size: int64(len(a.data))})
	}
	for k, a := range s.records {
		if !a.keep {
			all = append(all, entry{record: k, t: a.time, size: int64(len(a.data))})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].t.Before(all[j].t) })
	var total int64
	for _, e := range all {
		total += e.size
	}
	drop := func(e entry) {
		total -= e.size
		if e.record != "" {
			delete(s.records, e.record)
			return
		}
		if e.handle != "" {
			delete(s.cuts, e.handle)
			return
		}
		s.calls[e.branch] = slices.DeleteFunc(s.calls[e.branch], func(a memArchived) bool { return a.seq == e.seq })
		if len(s.calls[e.branch]) == 0 {
			delete(s.calls, e.branch)
		}
	}
	i := 0
	if maxAge > 0 {
		cutoff := now.Add(-maxAge)
		for ; i < len(all) && all[i].t.Before(cutoff); i++ {
			drop(all[i])
		}
		for id, data := range s.branches {
			b, err := decodeBranch(data)
			if err != nil {
				return err
			}
			if b.Status != StatusActive && !b.Closed.IsZero() && b.Closed.Before(cutoff) {
				delete(s.branches, id)
			}
		}
	}
	if maxBytes > 0 {
		for ; i < len(all) && total > maxBytes; i++ {
			drop(all[i])
		}
	}
	return nil
}

// Close makes every later call fail with ErrStoreClosed.
func (s *MemStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func decodeBranch(data []byte) (*Branch, error) {
	var b Branch
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("fold: decode branch record: %w", err)
	}
	// A record written before CutCount was kept lists every cut.
	b.CutCount = max(b.CutCount, len(b.Cuts))
	if len(b.Cuts) > ListedCuts {
		b.Cuts = slices.Clone(b.Cuts[len(b.Cuts)-ListedCuts:])
	}
	return &b, nil
}

func decodeSession(data []byte) (*SessionRecord, error) {
	var rec SessionRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("fold: decode session record: %w", err)
	}
	return &rec, nil
}

// sortBranches orders branches by creation time, then id, so that listings
// are stable.
func sortBranches(bs []*Branch) {
	sort.SliceStable(bs, func(i, j int) bool {
		if !bs[i].Created.Equal(bs[j].Created) {
			return bs[i].Created.Before(bs[j].Created)
		}
		return bs[i].ID < bs[j].ID
	})
}
