package badger

import (
	"fmt"
	"testing"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/fold/memory/storetest"
)

// BenchmarkInject: injection latency at 1,000 and 100,000 memories in the
// embedded backend (go test -tags gore2regex -run '^$' -bench Inject ./fold/memory/...).
func BenchmarkInject(b *testing.B) {
	trajs := storetest.Trajectories(b)
	queries := storetest.Queries(trajs)
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("embedded-%d", n), func(b *testing.B) {
			db := openDB(b, "")
			defer db.Close()
			s, err := Open(b.Context(), db)
			if err != nil {
				b.Fatal(err)
			}
			storetest.BenchInject(b, s, storetest.Corpus(b, trajs, "p", n), queries)
		})
	}
}

// BenchmarkPutFive: what a branch_create that injects five memories writes
// for them (MarkUsed), one Put each against one PutAll, on a database in a
// folder as the proxy's (go test -tags gore2regex -run '^$' -bench PutFive ./fold/memory/badger/).
func BenchmarkPutFive(b *testing.B) {
	for _, sync := range []bool{false, true} {
		db := openDBSync(b, b.TempDir(), sync)
		s, err := Open(b.Context(), db)
		if err != nil {
			b.Fatal(err)
		}
		var ms []*memory.Memory
		for i := range 5 {
			ms = append(ms, storetest.Mem(fmt.Sprintf("m-%d", i), "p", fmt.Sprintf("lesson %d", i), "use the fixture in tests", 0.8))
		}
		b.Run(fmt.Sprintf("fsync=%v/put", sync), func(b *testing.B) {
			for b.Loop() {
				for _, m := range ms {
					if err := s.Put(b.Context(), m); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("fsync=%v/putall", sync), func(b *testing.B) {
			for b.Loop() {
				if err := s.PutAll(b.Context(), ms); err != nil {
					b.Fatal(err)
				}
			}
		})
		db.Close()
	}
}
