package fold

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// Branches are bound to the session that created them, on the model wire
// as on the MCP wire. branch_create's answer carries a seal: 12 decimal
// digits of an HMAC-SHA256, under the key kept in the store (foldKey), of
// the creating session and the branch id. The model wire honours a
// branch's span only for an answer whose seal verifies, and only in the
// model session that first showed it (BindSpan): that binding is a record
// of the store, so it survives a restart. Another session replaying the
// answer, a forged answer and an upstream tool's answer that names a
// branch are plain content there: nothing of the branch is charged,
// force-returned or folded into them.

// recordBinding is the record kind of a branch's model session (id: the
// branch id, value: the model session).
const recordBinding = "mb"

var _ modelwire.Binder = modelState{}

// seal returns the seal of branch id created in session sess, "" when the
// store keeps no key (the model wire then never folds the branch).
func (m *Manager) seal(ctx context.Context, sess, id string) string {
	k, err := m.foldKey(ctx)
	if err != nil {
		m.log.Warn("fold: branch_create's answer goes without its seal; the model wire will not fold the branch", "branch", id, "err", err)
		return ""
	}
	return sealWith(k, sess, id)
}

func sealWith(key []byte, sess, id string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("foldproxy branch seal\x00"))
	mac.Write([]byte(sess))
	mac.Write([]byte{0})
	mac.Write([]byte(id))
	n := binary.BigEndian.Uint64(mac.Sum(nil)[:8]) % 1_000_000_000_000
	return fmt.Sprintf("%012d", n)
}

// BindSpan implements modelwire.Binder: it reports whether model session
// modelSession may see branch id's span, given the seal its branch_create
// answer carries. The seal must be the branch's; the first model session
// that shows a sealed answer is bound to the branch, durably, and only it
// is answered true afterwards.
func (s modelState) BindSpan(ctx context.Context, modelSession, id, seal string) (bool, error) {
	m := s.m
	if len(seal) != 12 {
		return false, nil
	}
	var sess string
	if n := m.lookup(id); n != nil {
		sess = n.cur.Load().Session
	} else {
		b, err := m.store.GetBranch(ctx, id)
		if errors.Is(err, ErrBranchNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("fold: look up branch %q: %w", id, err)
		}
		sess = b.Session
	}
	k, err := m.foldKey(ctx)
	if err != nil {
		return false, err
	}
	if !hmac.Equal([]byte(sealWith(k, sess, id)), []byte(seal)) {
		return false, nil
	}
	fb := &m.folds
	fb.bindMu.Lock()
	defer fb.bindMu.Unlock()
	if bound, ok := fb.bound[id]; ok {
		return bound == modelSession, nil
	}
	got, err := m.store.(RecordReader).GetRecords(ctx, recordBinding, []string{id})
	if err != nil {
		return false, fmt.Errorf("fold: read the model session of branch %s: %w", id, err)
	}
	bound, ok := got[id]
	if !ok {
		bound = []byte(modelSession)
		rec := BatchRecord{Kind: recordBinding, ID: id, Value: bound, Keep: true}
		if err := m.commit(context.WithoutCancel(ctx), &Batch{Records: []BatchRecord{rec}}); err != nil {
			return false, fmt.Errorf("fold: bind branch %s to its model session: %w", id, err)
		}
	}
	if fb.bound == nil || len(fb.bound) > foldBookMax {
		fb.bound = map[string]string{}
	}
	fb.bound[id] = string(bound)
	return string(bound) == modelSession, nil
}
