package fold

import (
	"bytes"
	"encoding/json"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/fold/store"
)

// The store's cost per call (issue 13): the Manager's Charge of the
// trajectories' results to the root branch, on Badger (as serve opens it,
// fold.fsync false) and on the in-memory store. Besides ns/op it reports
// cpu-ns/op, the process's CPU time (user and system, every goroutine:
// the write-ahead log's committer and Badger's flushes and compactions
// included) per op, which a loaded machine disturbs less than wall time.

// storeCostResults returns every step output of the repository's
// trajectories as a tools/call result.
func storeCostResults(tb testing.TB) [][]byte {
	tb.Helper()
	trajs, err := trajectory.LoadRepo()
	if err != nil {
		tb.Fatal(err)
	}
	var res [][]byte
	for _, tr := range trajs {
		for _, s := range tr.Steps {
			b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": s.Output}}})
			res = append(res, b)
		}
	}
	return res
}

// chargeOne charges result to root in session s1, as a call of the
// replay upstream's tool run.
func chargeOne(b *testing.B, e *testEnv, root string, result []byte) {
	if _, err := e.m.Charge(b.Context(), "s1", root, func(Budget) (Charge, error) {
		return Charge{Upstream: "replay", Method: "tools/call", Name: "run", Result: result}, nil
	}); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func storeCostStores() []struct {
	name  string
	store func(b *testing.B) Store
} {
	return []struct {
		name  string
		store func(b *testing.B) Store
	}{
		{"badger", func(b *testing.B) Store { return openBadgerNoFsyncT(b, b.TempDir()) }},
		{"mem", func(*testing.B) Store { return store.NewMemStore() }},
	}
}

// BenchmarkStoreChargeMix charges every result of the trajectories (about
// 2,000 calls, 2 MB) per op.
func BenchmarkStoreChargeMix(b *testing.B) {
	res := storeCostResults(b)
	var total int64
	for _, r := range res {
		total += int64(len(r))
	}
	for _, tt := range storeCostStores() {
		b.Run(tt.name, func(b *testing.B) {
			s := tt.store(b)
			defer s.Close()
			e := newEnvStore(b, s, nil)
			root := RootID("s1")
			b.SetBytes(total)
			cpu0 := cpuTime(b)
			for b.Loop() {
				for _, r := range res {
					chargeOne(b, e, root, r)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkStoreChargeTiny charges a 10-byte result per op.
func BenchmarkStoreChargeTiny(b *testing.B) {
	for _, tt := range storeCostStores() {
		b.Run(tt.name, func(b *testing.B) {
			s := tt.store(b)
			defer s.Close()
			e := newEnvStore(b, s, nil)
			root := RootID("s1")
			result := []byte(`"10 bytes!"`)
			cpu0 := cpuTime(b)
			for b.Loop() {
				chargeOne(b, e, root, result)
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkStoreChargeTinyCommitted is BenchmarkStoreChargeTiny with each
// charge committed to Badger before the next, as calls spaced in time
// are (the committer runs after each).
func BenchmarkStoreChargeTinyCommitted(b *testing.B) {
	s := openBadgerNoFsyncT(b, b.TempDir())
	defer s.Close()
	e := newEnvStore(b, s, nil)
	root := RootID("s1")
	result := []byte(`"10 bytes!"`)
	cpu0 := cpuTime(b)
	for b.Loop() {
		chargeOne(b, e, root, result)
		if err := s.CommitPending(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkStoreChargeFsync charges a 1 KiB result per op to a store that
// fsyncs every write (fold.fsync): "reply" is the charge alone (the
// committer runs beside it), "committed" commits each before the next.
func BenchmarkStoreChargeFsync(b *testing.B) {
	for _, each := range []bool{false, true} {
		name := "reply"
		if each {
			name = "committed"
		}
		b.Run(name, func(b *testing.B) {
			s := openBadgerT(b, b.TempDir())
			defer s.Close()
			e := newEnvStore(b, s, nil)
			root := RootID("s1")
			result := bytes.Repeat([]byte("x"), 1024)
			cpu0 := cpuTime(b)
			for b.Loop() {
				chargeOne(b, e, root, result)
				if !each {
					continue
				}
				if err := s.CommitPending(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkChargeAfterCuts charges a 10-byte result to a main thread that
// already cut 0 or 1,000 results: what a charge costs must not grow with
// the cuts (the branch's record lists only its latest, listedCuts).
func BenchmarkChargeAfterCuts(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s := openBadgerNoFsyncT(b, b.TempDir())
			defer s.Close()
			e := newEnvStore(b, s, nil)
			cutRoot(b, e, n)
			result := []byte(`"10 bytes!"`)
			cpu0 := cpuTime(b)
			for b.Loop() {
				chargeOne(b, e, RootID("s1"), result)
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
