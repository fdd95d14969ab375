package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"

	badger "github.com/dgraph-io/badger/v4"
)

// GetRecords returns the records of kind among ids that exist, by id.
func (s *BadgerStore) GetRecords(ctx context.Context, kind string, ids []string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	err := s.view(ctx, func(txn *badger.Txn) error {
		for _, id := range ids {
			item, err := txn.Get(recordKey(kind, id))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			out[id] = v
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fold: read %s records: %w", kind, err)
	}
	return out, nil
}

// PutSession stores a session record.
func (s *BadgerStore) PutSession(ctx context.Context, rec *SessionRecord) error {
	if rec == nil || rec.ID == "" {
		return fmt.Errorf("%w: fold: PutSession needs a record with an id", ErrInvalidArgument)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("fold: encode session %s: %w", rec.ID, err)
	}
	return s.write(ctx, "put session "+rec.ID, set(sessionKey(rec.ID), data))
}

// GetSession returns a session record, or an error wrapping
// ErrSessionNotFound.
func (s *BadgerStore) GetSession(ctx context.Context, id string) (*SessionRecord, error) {
	var rec *SessionRecord
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(sessionKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: session %q is not in the store", ErrSessionNotFound, id)
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			rec, err = decodeSession(v)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// Sessions lists every session record, ordered by id.
func (s *BadgerStore) Sessions(ctx context.Context) ([]*SessionRecord, error) {
	var out []*SessionRecord
	err := s.view(ctx, func(txn *badger.Txn) error {
		return scan(txn, []byte("sess/"), true, func(_ []byte, v []byte) error {
			rec, err := decodeSession(v)
			if err != nil {
				return err
			}
			out = append(out, rec)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// DeleteSession removes a session record; removing an absent one is not an
// error.
func (s *BadgerStore) DeleteSession(ctx context.Context, id string) error {
	return s.write(ctx, "delete session "+id, del(sessionKey(id)))
}

// PutRecord stores one of fold's own records.
func (s *BadgerStore) PutRecord(ctx context.Context, kind, id string, data []byte) error {
	if kind == "" || id == "" {
		return fmt.Errorf("%w: fold: PutRecord needs a kind and an id", ErrInvalidArgument)
	}
	return s.write(ctx, "put "+kind+" "+id, set(recordKey(kind, id), data))
}

// GetRecord returns a record, or an error wrapping ErrRecordNotFound.
func (s *BadgerStore) GetRecord(ctx context.Context, kind, id string) ([]byte, error) {
	var out []byte
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(recordKey(kind, id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: %s %q", ErrRecordNotFound, kind, id)
		}
		if err != nil {
			return err
		}
		out, err = item.ValueCopy(nil)
		return err
	})
	return out, err
}

// Records lists the records of a kind, by id.
func (s *BadgerStore) Records(ctx context.Context, kind string) ([]Record, error) {
	var out []Record
	prefix := []byte("r/" + esc(kind) + "/")
	err := s.view(ctx, func(txn *badger.Txn) error {
		return scan(txn, prefix, true, func(k, v []byte) error {
			id, err := url.PathUnescape(string(k[len(prefix):]))
			if err != nil {
				return err
			}
			out = append(out, Record{ID: id, Data: bytes.Clone(v)})
			return nil
		})
	})
	return out, err
}

// DeleteRecord removes a record; removing an absent one is not an error.
func (s *BadgerStore) DeleteRecord(ctx context.Context, kind, id string) error {
	return s.write(ctx, "delete "+kind+" "+id, del(recordKey(kind, id)))
}
