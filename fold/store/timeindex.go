package store

import (
	"encoding/binary"
	"fmt"
)

// The archive's time index (what Prune reads) in groups.
//
// Every archived call and cut remainder has an entry in the time index:
// timeKey(time, its key) → its size (and archive segment). The write
// that archives it carries that entry as an ordinary set in its
// write-ahead log record, but the committer does not give Badger one
// entry each: the index entries that one commit transaction sets are
// held together in one Badger entry under timeGroupKey, a "group" (see
// applyRecords). Badger's work is per entry (its transaction, value log,
// memtable, flushes and compactions), and a call had three: its record,
// its index entry and its branch's record (the last shared by the calls
// of a transaction, which Badger keeps once). Grouping the index entries
// took a tiny call's chain from 19.7 to 16.4 µs of CPU
// (BenchmarkPipelineChainTiny/badger, 300,000 calls, medians of 5
// interleaved rounds); the full call path over the trajectories moved
// within the noise (83.9 → 82.8 ms a pass, 12 rounds), its calls being
// mostly scrubbing and counting. The tree also holds half the keys.
//
// A proxy of an earlier version reads the index under its own keys only:
// on a store written by this one it prunes nothing.
//
// A group's value is its entries one after the other, each the index
// key and its value, each as a uvarint length and the bytes. Its key
// names the first entry it holds by position: the write-ahead log record
// (file and end offset) and the entry's place among that record's
// changes. A record applied twice (a replay after the log's position
// stayed behind) may put its entries in two groups; Prune counts an
// entry once whatever holds it. Prune drops entries from a group by
// writing the group again without them, or deleting it once empty.
// Stores written before the grouping hold index entries under their own
// timeKey; Prune reads both.

// timeGroupPrefix starts the key of every group of time index entries.
var timeGroupPrefix = []byte("tg/")

// isTimeKey reports whether k is a time index key (timeKey's form).
func isTimeKey(k []byte) bool { return len(k) > 2 && k[0] == 't' && k[1] == '/' }

// timeGroupKey is the key of the group whose first entry is change op of
// the log record ending at end in log file file.
func timeGroupKey(file uint32, end int64, op int) []byte {
	k := append(make([]byte, 0, 48), timeGroupPrefix...)
	k = append20(k, int64(file))
	k = append(k, '/')
	k = append20(k, end)
	k = append(k, '/')
	return append20(k, int64(op))
}

// timeGroup gathers the time index entries of one commit transaction.
type timeGroup struct {
	key []byte // nil while empty
	val []byte
}

// add appends the entry k → v; file, end and op name it when it is the
// group's first.
func (g *timeGroup) add(k, v []byte, file uint32, end int64, op int) {
	if g.key == nil {
		g.key = timeGroupKey(file, end, op)
	}
	g.val = appendTimePair(g.val, k, v)
}

// reset empties g for the next transaction (its value is Badger's now).
func (g *timeGroup) reset() { g.key, g.val = nil, nil }

func appendTimePair(b, k, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(k)))
	b = append(b, k...)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// decodeTimeGroup returns the entries of a group's value: index keys and
// their values, views of v.
func decodeTimeGroup(v []byte) ([][2][]byte, error) {
	var out [][2][]byte
	for len(v) > 0 {
		k, err := lengthPrefixed(&v, "value")
		if err != nil {
			return nil, err
		}
		val, err := lengthPrefixed(&v, "value")
		if err != nil {
			return nil, err
		}
		if !isTimeKey(k) {
			return nil, fmt.Errorf("an entry whose key %q is not a time index key", k)
		}
		out = append(out, [2][]byte{k, val})
	}
	return out, nil
}

// encodeTimeGroup is the value of a group holding pairs.
func encodeTimeGroup(pairs [][2][]byte) []byte {
	var b []byte
	for _, p := range pairs {
		b = appendTimePair(b, p[0], p[1])
	}
	return b
}
