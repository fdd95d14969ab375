package badger

import (
	"fmt"
	"testing"

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
