package upstreams

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system time so far: the child's work
// is not in it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCallStdio measures a call's round trip to a stdio server (the
// raw test server, a child process) for results of several sizes: the
// request written, the response read and handed back raw. cpu-ns/op is
// this process's CPU time per call, the child's excluded.
func BenchmarkCallStdio(b *testing.B) {
	for _, n := range []int{16, 1 << 10, 100 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			u := New(selfEntry(b, "raw", "raw"), Options{Logger: slog.New(slog.DiscardHandler)})
			startUpstream(b, u)
			params := json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))
			ctx := context.Background()
			res, err := u.Call(ctx, "big", params)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(res)))
			b.ResetTimer()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := u.Call(ctx, "big", params); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
