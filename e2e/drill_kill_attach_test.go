//go:build drills

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/intercept"
)

// Drill 1b: kill -9 of the project's daemon under a steady load of stdio
// sessions attached to it, as agents run foldproxy by default, with the
// daemon serving the agents' pipes itself and with the stdio processes
// relaying. Unlike drill 1 the clients never stop: each stdio process
// takes its session to the next daemon. Every request is answered (a
// result, or an error saying it may or may not have run), and nothing
// acknowledged is lost: every branch_create and branch_return answered is
// in the store with its status, every answered forwarded call is counted
// in its branch and has its call record in the audit log.

const (
	attachDrillClients = 3
	attachDrillCycles  = 3
	attachDrillLoad    = 3 * time.Second
	attachDrillEmit    = 300
	// attachDrillCallTimeout bounds one call: a call without an answer
	// by then is a request left without one.
	attachDrillCallTimeout = 60 * time.Second
)

func TestDrillKill9Attached(t *testing.T) {
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) { drillKill9Attached(t, mode.env) })
	}
}

// attachLedger is what one client was told.
type attachLedger struct {
	created     []string
	returnSent  map[string]bool
	returned    map[string]bool
	calls       map[string]int // answered forwarded calls, by branch
	mayHaveRun  int            // requests answered "may or may not have been carried out"
	ops         atomic.Int64   // operations answered
	err         error
	unknownBack map[string]bool // branch_return answered "may or may not"
}

// mayHaveRun reports whether err is the answer to a request the daemon
// took and died before answering.
func mayHaveRun(err error) bool {
	return err != nil && strings.Contains(err.Error(), "may or may not have been carried out")
}

func drillKill9Attached(t *testing.T, env []string) {
	ctx := testContext(t, 5*time.Minute)
	state := t.TempDir()
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, state) })
	cfg := writeConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{
		"fold": map[string]any{"createsPerMinute": 1000000, "maxActivePerSession": 1000, "maxActivePerInstance": 10000, "maxBudget": 1 << 30},
	})
	procs := make([]*attachedProcess, attachDrillClients)
	ledgers := make([]*attachLedger, attachDrillClients)
	roots := make([]string, attachDrillClients)
	for i := range procs {
		procs[i] = newAttached(t, fmt.Sprintf("drill session %d", i), cfg, state, env...)
		if err := procs[i].start(ctx); err != nil {
			t.Fatal(err)
		}
		foldWaitTools(ctx, t, procs[i].peer, "replay__emit")
		roots[i] = foldSessionTree(ctx, t, procs[i].peer).Tree.BranchID
		ledgers[i] = &attachLedger{returnSent: map[string]bool{}, returned: map[string]bool{}, calls: map[string]int{}, unknownBack: map[string]bool{}}
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	for i, a := range procs {
		wg.Go(func() { ledgers[i].err = attachDrillLoop(ctx, a.peer, roots[i], i, ledgers[i], &stop) })
	}
	for cycle := 1; cycle <= attachDrillCycles; cycle++ {
		before := make([]int64, len(ledgers))
		for i, led := range ledgers {
			before[i] = led.ops.Load()
		}
		select {
		case <-time.After(attachDrillLoad):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		d := daemonsOf(t, state)
		if len(d) != 1 {
			t.Fatalf("cycle %d: daemons %v, want one", cycle, d)
		}
		if err := syscall.Kill(d[0], syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 the daemon %d: %v", d[0], err)
		}
		for processAlive(d[0]) {
			select {
			case <-ctx.Done():
				t.Fatalf("the daemon %d survived kill -9", d[0])
			case <-time.After(20 * time.Millisecond):
			}
		}
		for i, led := range ledgers {
			if led.ops.Load() == before[i] {
				t.Errorf("cycle %d: client %d answered nothing before the kill", cycle, i)
			}
		}
	}
	// The load goes on with the next daemon: each client gets answers
	// again before it stops.
	after := make([]int64, len(ledgers))
	for i, led := range ledgers {
		after[i] = led.ops.Load()
	}
	for i, led := range ledgers {
		for led.ops.Load() < after[i]+3 && led.err == nil {
			select {
			case <-ctx.Done():
				t.Fatalf("client %d answered nothing after the last kill", i)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	stop.Store(true)
	wg.Wait()

	var creates, returns, calls, unsure int
	var lostBranches, wrongStatus, lostCalls int
	for i, led := range ledgers {
		if led.err != nil {
			t.Errorf("client %d: %v", i, led.err)
		}
		creates += len(led.created)
		returns += len(led.returned)
		unsure += led.mayHaveRun
		for _, b := range led.created {
			calls += led.calls[b]
			r, err := foldCallRaw(ctx, procs[i].peer, "branch_status", map[string]any{"branch_id": b})
			if err != nil || r.isError {
				lostBranches++
				t.Errorf("client %d: acknowledged branch %s: %v %s", i, b, err, r.text())
				continue
			}
			var v foldView
			r.decode(t, &v)
			want := "active"
			if led.returned[b] {
				want = "returned"
			}
			if v.Status != want && !led.unknownBack[b] {
				wrongStatus++
				t.Errorf("client %d: branch %s is %s, want %s", i, b, v.Status, want)
			}
			if v.Calls < led.calls[b] {
				lostCalls += led.calls[b] - v.Calls
				t.Errorf("client %d: branch %s counts %d calls, %d were answered", i, b, v.Calls, led.calls[b])
			}
		}
	}
	// Every answered forwarded call has its record in the audit log.
	records := map[string]int{}
	files, err := intercept.AuditFiles(filepath.Join(state, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := intercept.ReadAuditStats(files, func(r intercept.Record) error {
		if r.Kind == intercept.KindCall && r.Upstream == "replay" && r.Tool == "emit" {
			records[r.Branch]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	lostRecords := 0
	for _, led := range ledgers {
		for b, n := range led.calls {
			if records[b] < n {
				lostRecords += n - records[b]
				t.Errorf("branch %s: %d calls answered, %d call records in the audit log", b, n, records[b])
			}
		}
	}
	if creates == 0 || calls == 0 {
		t.Fatalf("no load: %d creates, %d calls answered", creates, calls)
	}
	for i, a := range procs {
		for _, l := range strings.Split(a.stderr.String(), "\n") {
			if strings.Contains(l, "relay: the foldproxy daemon went away") {
				t.Logf("client %d: %s", i, l)
			}
		}
	}
	t.Logf("DRILL kill9 attached: %d sessions, %d kills of the daemon, load %v each; acknowledged: %d branch_create, %d branch_return, %d forwarded calls; "+
		"%d requests answered \"may or may not have been carried out\"; lost: %d branches, %d wrong statuses, %d calls in branches, %d audit call records",
		attachDrillClients, attachDrillCycles, attachDrillLoad, creates, returns, calls, unsure, lostBranches, wrongStatus, lostCalls, lostRecords)
}

// attachDrillLoop loops create → two calls in the branch → return (every
// fourth branch left active) until stop, through the daemon's deaths. A
// request answered "may or may not have been carried out" is not
// acknowledged; any other failure, or a request left without an answer,
// ends the loop with an error.
func attachDrillLoop(ctx context.Context, p *peer, root string, client int, led *attachLedger, stop *atomic.Bool) error {
	call := func(name string, args map[string]any) (foldReply, error) {
		cctx, cancel := context.WithTimeout(ctx, attachDrillCallTimeout)
		defer cancel()
		r, err := foldCallRaw(cctx, p, name, args)
		if errors.Is(err, context.DeadlineExceeded) {
			return r, fmt.Errorf("%s: no answer in %v", name, attachDrillCallTimeout)
		}
		if err == nil {
			led.ops.Add(1)
		}
		return r, err
	}
	for it := 0; !stop.Load(); it++ {
		r, err := call("branch_create", map[string]any{"description": fmt.Sprintf("drill client %d iteration %d", client, it), "parent_branch_id": root, "budget": 1 << 29})
		if mayHaveRun(err) {
			led.mayHaveRun++
			continue
		}
		if err != nil || r.isError {
			return fmt.Errorf("branch_create: %v %s", err, r.text())
		}
		var cr foldCreated
		if err := decodeReply(r, &cr); err != nil || cr.BranchID == "" {
			return fmt.Errorf("branch_create answer %s: %v", truncate(r.text(), 300), err)
		}
		b := cr.BranchID
		led.created = append(led.created, b)
		for range 2 {
			r, err := call("replay__emit", map[string]any{"bytes": attachDrillEmit, "kind": "log", "branch_id": b})
			if mayHaveRun(err) {
				led.mayHaveRun++
				continue
			}
			if err != nil || r.isError || len(r.text()) != attachDrillEmit {
				return fmt.Errorf("replay__emit in %s: %v %.300s", b, err, r.text())
			}
			led.calls[b]++
		}
		if it%4 == 3 {
			continue
		}
		led.returnSent[b] = true
		r, err = call("branch_return", map[string]any{"branch_id": b, "message": fmt.Sprintf("iteration %d done", it)})
		if mayHaveRun(err) {
			led.mayHaveRun++
			led.unknownBack[b] = true
			continue
		}
		if err != nil || r.isError {
			return fmt.Errorf("branch_return %s: %v %s", b, err, r.text())
		}
		led.returned[b] = true
	}
	return nil
}

// decodeReply reads a fold answer (its structuredContent, or its JSON
// text).
func decodeReply(r foldReply, v any) error {
	src := r.sc
	if (len(src) == 0 || string(src) == "null") && len(r.texts) > 0 {
		src = []byte(r.texts[0])
	}
	return json.Unmarshal(src, v)
}
