package store

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The free-space check measures for every write near the reserve, and far
// above it at most every freeRecheckAfter or freeRecheckBytes of writes;
// a refusal is the same ErrStoreFull as an unthrottled check's.
func TestFreeGuard(t *testing.T) {
	const reserve = 64 << 20
	free, stats := int64(0), 0
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	g := newFreeGuard("/state/badger", reserve)
	g.stat = func(string) (int64, bool) { stats++; return free, true }
	g.now = func() time.Time { return clock }
	write := func(size int64) error {
		t.Helper()
		return g.check(size)
	}

	// Near the reserve: every write measures.
	free = reserve + 100<<20
	for range 3 {
		if err := write(4096); err != nil {
			t.Fatal(err)
		}
	}
	if stats != 3 {
		t.Errorf("%d measurements for 3 writes within %d MiB of the reserve; want 3", stats, (free-reserve)>>20)
	}
	free = reserve + 4096
	if err := write(8192); !errors.Is(err, ErrStoreFull) || !strings.Contains(err.Error(), "/state/badger") ||
		!strings.Contains(err.Error(), "free some space") {
		t.Fatalf("a write over the reserve: %v; want ErrStoreFull naming the folder", err)
	}

	// Far above it: measured again only after freeRecheckAfter, or after
	// freeRecheckBytes of writes.
	free = reserve + 10<<30
	stats = 0
	for range 100 {
		if err := write(4096); err != nil {
			t.Fatal(err)
		}
	}
	if stats != 1 {
		t.Errorf("%d measurements for 100 small writes in no time, far above the reserve; want 1", stats)
	}
	clock = clock.Add(freeRecheckAfter)
	if err := write(4096); err != nil || stats != 2 {
		t.Errorf("after %v: %d measurements, %v; want 2", freeRecheckAfter, stats, err)
	}
	for range 2 {
		if err := write(freeRecheckBytes / 2); err != nil {
			t.Fatal(err)
		}
	}
	if stats != 3 {
		t.Errorf("after %d MiB of writes: %d measurements; want 3", freeRecheckBytes>>20, stats)
	}

	// checkNow measures whatever the last measurement showed.
	for range 2 {
		if err := g.checkNow(valueLogFileSize); err != nil {
			t.Fatal(err)
		}
	}
	if stats != 5 {
		t.Errorf("after two checkNow: %d measurements; want 5", stats)
	}

	// The disk filled meanwhile (another process): the next measurement
	// refuses, and so does every write until space is freed.
	free = reserve - 1
	clock = clock.Add(freeRecheckAfter)
	for range 2 {
		if err := write(1); !errors.Is(err, ErrStoreFull) {
			t.Fatalf("a write on a full disk: %v", err)
		}
	}
	free = reserve + 10<<30
	if err := write(4096); err != nil {
		t.Fatalf("a write once space was freed: %v", err)
	}

	// A file system whose free space is not known: no refusal.
	g.stat = func(string) (int64, bool) { return 0, false }
	clock = clock.Add(freeRecheckAfter)
	if err := write(4096); err != nil {
		t.Fatal(err)
	}
	// No reserve: no measurement.
	g = newFreeGuard("/x", 0)
	g.stat = func(string) (int64, bool) { t.Fatal("measured with no reserve"); return 0, false }
	if err := g.check(1 << 40); err != nil {
		t.Fatal(err)
	}
	if err := g.checkNow(1 << 40); err != nil || g.on() {
		t.Fatalf("checkNow with no reserve: %v, on %v", err, g.on())
	}
}
