package qdrant

import (
	"fmt"
	"testing"

	"github.com/foldproxy/foldproxy/fold/memory/storetest"
	"github.com/foldproxy/foldproxy/policy"
)

// BenchmarkInject: injection latency at 1,000 and 100,000 memories through
// the Qdrant backend and the gRPC stand-in on loopback (the stand-in's
// scoring walks an inverted index as Qdrant's sparse index does; real
// Qdrant's own figures differ).
func BenchmarkInject(b *testing.B) {
	trajs := storetest.Trajectories(b)
	queries := storetest.Queries(trajs)
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("qdrant-standin-%d", n), func(b *testing.B) {
			_, cfg := startStandIn(b)
			s, err := Open(b.Context(), Options{Settings: policy.Qdrant{Collection: "bench"}, Project: "p", Config: cfg})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.BenchInject(b, s, storetest.Corpus(b, trajs, "p", n), queries)
		})
	}
}
