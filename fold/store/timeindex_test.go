package store

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// openHeldStore opens a store whose write-ahead log is committed only by
// reads (barrier), so that a test decides where commit groups end.
func openHeldStore(t *testing.T) *BadgerStore {
	t.Helper()
	s, err := OpenBadgerWith(t.TempDir(), nil, BadgerOptions{HoldCommits: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keysUnder returns the keys and values under prefix in s's Badger.
func keysUnder(t *testing.T, s *BadgerStore, prefix string) map[string][]byte {
	t.Helper()
	if err := s.barrier(); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, []byte(prefix), true, func(k, v []byte) error {
			out[string(k)] = v
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// groupedPairs returns the number of index entries each group holds.
func groupedPairs(t *testing.T, s *BadgerStore) []int {
	t.Helper()
	var n []int
	for k, v := range keysUnder(t, s, string(timeGroupPrefix)) {
		pairs, err := decodeTimeGroup(v)
		if err != nil {
			t.Fatalf("group %q: %v", k, err)
		}
		n = append(n, len(pairs))
	}
	return n
}

func seqsOf(t *testing.T, s *BadgerStore, branch string) []int {
	t.Helper()
	calls, err := s.Calls(t.Context(), branch, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int
	for _, c := range calls {
		seqs = append(seqs, c.Seq)
	}
	return seqs
}

// The calls of a commit transaction have their time index entries in one
// group, none under its own key; Prune drops the old ones from the groups
// (a group that keeps some is written again, an emptied one deleted).
func TestTimeIndexGrouped(t *testing.T) {
	ctx := t.Context()
	s := openHeldStore(t)
	defer s.Close()
	old := time.Now().Add(-2 * time.Hour)
	for i := 1; i <= 50; i++ {
		rec := &CallRecord{Name: "n", Result: "r" + strconv.Itoa(i)}
		if i <= 30 {
			rec.Time = old
		}
		if i == 26 {
			rec.Result = bigResult(6000, "archived") // in the archive files: its size is in the index too
		}
		if _, err := s.AppendCall(ctx, "b-1", rec); err != nil {
			t.Fatal(err)
		}
		if i == 25 {
			if err := s.barrier(); err != nil { // the first group ends here
				t.Fatal(err)
			}
		}
	}
	if direct := keysUnder(t, s, "t/"); len(direct) != 0 {
		t.Fatalf("%d time index entries under their own keys; want all in groups", len(direct))
	}
	if got := fmt.Sprint(groupedPairs(t, s)); got != "[25 25]" {
		t.Fatalf("entries by group: %s; want two groups of 25", got)
	}
	if err := s.Prune(ctx, time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(groupedPairs(t, s)); got != "[20]" {
		t.Fatalf("entries by group after pruning calls 1-30: %s; want the second group with 20 left (the first deleted)", got)
	}
	seqs := seqsOf(t, s, "b-1")
	if len(seqs) != 20 || seqs[0] != 31 || seqs[19] != 50 {
		t.Fatalf("calls left: %v; want 31-50", seqs)
	}
	// Everything: the last group goes too.
	if err := s.Prune(ctx, time.Nanosecond, 0); err != nil {
		t.Fatal(err)
	}
	if got := groupedPairs(t, s); len(got) != 0 {
		t.Fatalf("groups after pruning everything: %v", got)
	}
	if seqs := seqsOf(t, s, "b-1"); len(seqs) != 0 {
		t.Fatalf("calls left after pruning everything: %v", seqs)
	}
}

// A store written before the index was grouped holds an entry per call
// under its own key: Prune reads those beside the groups, in one time
// order, and deletes them with their calls.
func TestTimeIndexOldEntries(t *testing.T) {
	ctx := t.Context()
	s := openHeldStore(t)
	defer s.Close()
	old := time.Now().Add(-2 * time.Hour)
	for i := range 5 {
		if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Name: "old", Time: old.Add(time.Duration(i) * time.Second), Result: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	// Into the old form: each entry under its own key, no group.
	groups := keysUnder(t, s, string(timeGroupPrefix))
	err := s.db.Update(func(txn *badger.Txn) error {
		for k, v := range groups {
			pairs, err := decodeTimeGroup(v)
			if err != nil {
				return err
			}
			for _, p := range pairs {
				if err := txn.Set(p[0], p[1]); err != nil {
					return err
				}
			}
			if err := txn.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Name: "new", Result: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(keysUnder(t, s, "t/")); n != 5 {
		t.Fatalf("%d entries under their own keys; want the 5 old ones", n)
	}
	// By size first: the oldest go, whatever holds their entries. The
	// old entries' keys sort by time: the first three are calls 1-3.
	var total, oldest3 int64
	sizes := func(m map[string][]byte, first int) {
		keys := slices.Sorted(maps.Keys(m))
		for i, k := range keys {
			n, err := strconv.ParseInt(string(m[k]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += n
			if i < first {
				oldest3 += n
			}
		}
	}
	sizes(keysUnder(t, s, "t/"), 3)
	for _, v := range keysUnder(t, s, string(timeGroupPrefix)) {
		pairs, err := decodeTimeGroup(v)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string][]byte{}
		for _, p := range pairs {
			m[string(p[0])] = p[1]
		}
		sizes(m, 0)
	}
	if err := s.Prune(ctx, 0, total-oldest3); err != nil {
		t.Fatal(err)
	}
	if seqs := seqsOf(t, s, "b-1"); fmt.Sprint(seqs) != "[4 5 6 7 8 9 10]" {
		t.Fatalf("calls left after pruning the size of the 3 oldest: %v; want 4-10", seqs)
	}
	if n := len(keysUnder(t, s, "t/")); n != 2 {
		t.Fatalf("%d old entries left; want 2", n)
	}
	if err := s.Prune(ctx, time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	if n := len(keysUnder(t, s, "t/")); n != 0 {
		t.Fatalf("%d old entries left after pruning them by age", n)
	}
	if seqs := seqsOf(t, s, "b-1"); fmt.Sprint(seqs) != "[6 7 8 9 10]" {
		t.Fatalf("calls left after pruning by age: %v; want the 5 new ones", seqs)
	}
	if got := fmt.Sprint(groupedPairs(t, s)); got != "[5]" {
		t.Fatalf("groups: %s; want the new calls' one", got)
	}
}

// Records applied twice (a replay after the log's position stayed behind)
// put their entries in two groups: Prune counts each entry once, and takes
// a dropped one out of every group holding it.
func TestTimeIndexAppliedTwice(t *testing.T) {
	ctx := t.Context()
	s := openWALStore(t, t.TempDir(), nil)
	defer s.Close()
	base := time.Now().Add(-time.Minute)
	var recs []walRecord
	for i := range 10 {
		at := base.Add(time.Duration(i) * time.Millisecond)
		data, err := marshalStoredCall(&storedCall{CallRecord: CallRecord{Seq: i + 1, Time: at, Name: "n", Result: "r"}})
		if err != nil {
			t.Fatal(err)
		}
		key := callKey("b-1", i+1)
		recs = append(recs, walRecord{
			ops:  []walOp{set(key, data), set(timeKey(at, key), []byte("100"))},
			file: 1, end: int64(100 * (i + 1)), size: 200,
		})
	}
	if err := s.applyRecords(recs); err != nil {
		t.Fatal(err)
	}
	if err := s.applyRecords(recs[3:]); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(groupedPairs(t, s)); got != "[10 7]" && got != "[7 10]" {
		t.Fatalf("entries by group: %s; want 10 and 7", got)
	}
	// 1,000 bytes in all, counted once: down to 500 drops the 5 oldest.
	if err := s.Prune(ctx, 0, 500); err != nil {
		t.Fatal(err)
	}
	if seqs := seqsOf(t, s, "b-1"); fmt.Sprint(seqs) != "[6 7 8 9 10]" {
		t.Fatalf("calls left: %v; want 6-10", seqs)
	}
	if got := fmt.Sprint(groupedPairs(t, s)); got != "[5 5]" {
		t.Fatalf("entries by group after the prune: %s; want 5 and 5", got)
	}
	if err := s.Prune(ctx, 0, 200); err != nil {
		t.Fatal(err)
	}
	if seqs := seqsOf(t, s, "b-1"); fmt.Sprint(seqs) != "[9 10]" {
		t.Fatalf("calls left: %v; want 9 and 10", seqs)
	}
}

func TestTimeGroupDecode(t *testing.T) {
	pairs := [][2][]byte{{[]byte("t/00000000000000000001/c/b/1"), []byte("12")}, {[]byte("t/00000000000000000002/x/h"), []byte("7@3")}}
	got, err := decodeTimeGroup(encodeTimeGroup(pairs))
	if err != nil || fmt.Sprintf("%q", got) != fmt.Sprintf("%q", pairs) {
		t.Fatalf("decode(encode) = %q, %v", got, err)
	}
	for _, bad := range []string{"\x05t/", "\x03t/1\x09ab", "\x01x\x00"} {
		if _, err := decodeTimeGroup([]byte(bad)); err == nil {
			t.Errorf("decode(%q): no error", bad)
		}
	}
}

// A transaction whose changes leave no room for its group: the group is
// committed in a transaction of its own, with the log's position, and
// nothing is lost.
func TestTimeIndexGroupOverflow(t *testing.T) {
	ctx := t.Context()
	s := openHeldStore(t)
	defer s.Close()
	// As many changes as one transaction takes (it counts itself as one,
	// and refuses the MaxBatchCount-th), then a time index entry: its
	// group does not fit.
	n := int(s.db.MaxBatchCount()) - 2
	ops := make([]walOp, 0, n+2)
	for i := range n {
		ops = append(ops, set(fmt.Appendf(nil, "x/k%06d", i), []byte("v")))
	}
	at := time.Now()
	data, err := marshalStoredCall(&storedCall{CallRecord: CallRecord{Seq: 1, Time: at, Name: "n", Result: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	ops = append(ops, set(timeKey(at, callKey("b-1", 1)), []byte("100")))
	rec := walRecord{ops: ops, file: 7, end: 1234, size: 1}
	if err := s.applyRecords([]walRecord{rec, {ops: []walOp{set(callKey("b-1", 1), data)}, file: 7, end: 1300, size: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(groupedPairs(t, s)); got != "[1]" {
		t.Fatalf("entries by group: %s; want the one", got)
	}
	if _, err := s.GetCut(ctx, fmt.Sprintf("k%06d", n-1)); err != nil {
		t.Fatalf("the last change of the full transaction: %v", err)
	}
	if pos, err := s.readApplied(); err != nil || pos != (walPos{7, 1300}) {
		t.Fatalf("the log's position: %v, %v; want file 7 at 1300", pos, err)
	}
	if err := s.Prune(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if seqs := seqsOf(t, s, "b-1"); len(seqs) != 0 {
		t.Fatalf("calls left after pruning to 1 byte: %v", seqs)
	}
}

// A group's value read back from a damaged store is an error, never a
// panic, and what decodes survives encoding and decoding again.
func FuzzDecodeTimeGroup(f *testing.F) {
	f.Add(encodeTimeGroup([][2][]byte{{[]byte("t/00000000000000000001/c/b/1"), []byte("12")}}))
	f.Add([]byte("\x05t/"))
	f.Add([]byte{})
	f.Add([]byte("\x80\x00\x80\x00")) // lengths in more bytes than needed
	f.Fuzz(func(t *testing.T, v []byte) {
		pairs, err := decodeTimeGroup(v)
		if err != nil {
			return
		}
		again, err := decodeTimeGroup(encodeTimeGroup(pairs))
		if err != nil || fmt.Sprintf("%q", again) != fmt.Sprintf("%q", pairs) {
			t.Fatalf("decode(encode(%q)) = %q, %v", pairs, again, err)
		}
	})
}
