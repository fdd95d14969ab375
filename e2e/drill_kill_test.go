//go:build drills

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept"
)

// Drill 1: kill -9 of foldproxy under a steady load of forwarded calls and
// branch operations over HTTP, then a restart on the same state folder,
// kill9Cycles times: from the second cycle on the load runs on the sessions
// resumed after the previous kill.
// Nothing acknowledged may be lost: every branch_create and branch_return a
// client got an answer for is in the store with the acknowledged status (as
// branch_status shows it on the resumed HTTP sessions), and every answered
// forwarded call has its "call" record in the audit log. The audit log is
// read before the restart, so that nothing the new process writes can
// stand in for a lost record.
//
// The drill runs with the default audit fsync ("interval") and with
// "always": a record is handed to the kernel with write(2) before the
// response leaves, so both must survive the death of the process (only a
// machine crash tells them apart).

const (
	kill9Clients = 4               // concurrent HTTP sessions
	kill9Load    = 3 * time.Second // load before each kill
	kill9Emit    = 300             // bytes of each forwarded call's result
)

func TestDrillKill9UnderLoad(t *testing.T) {
	for _, fsync := range []string{"", "always"} {
		name := "audit-fsync-default-interval"
		if fsync != "" {
			name = "audit-fsync-" + fsync
		}
		t.Run(name, func(t *testing.T) { drillKill9(t, fsync) })
	}
}

// kill9Ledger is what one client was told: the acknowledged state.
type kill9Ledger struct {
	client     int
	session    string
	created    []string        // branches whose branch_create was answered, in order
	returnSent map[string]bool // branch_return sent (answered or not)
	returned   map[string]bool // branch_return answered
	calls      map[string]int  // answered forwarded calls, by branch
	err        error           // why the client stopped
	errAt      time.Time
}

func drillKill9(t *testing.T, auditFsync string) {
	ctx := testContext(t, 4*time.Minute)
	state := t.TempDir()
	settings := map[string]any{
		"fold": map[string]any{
			"createsPerMinute":     1000000,
			"maxActivePerSession":  1000,
			"maxActivePerInstance": 10000,
			// Every branch_status answer is charged to the innermost
			// active branch (issue 10), and the drill pages through trees
			// of hundreds of branches after each restart: its branches get
			// room for that, so the checks never exhaust the branch they
			// go on to use.
			"maxBudget": 1 << 30,
		},
	}
	if auditFsync != "" {
		settings["audit"] = map[string]any{"fsync": auditFsync}
	}
	cfg := writeConfig(t, map[string]any{"replay": replayEntry(t)}, settings)
	px := startDrillProxy(t, cfg, state)
	hc := drillHTTPClient(2 * kill9Clients)

	ledgers := make([]*kill9Ledger, kill9Clients)
	clients := make([]*drillClient, kill9Clients)
	for i := range clients {
		clients[i] = &drillClient{hc: hc, url: px.url}
		if err := clients[i].initialize(ctx); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		ledgers[i] = &kill9Ledger{client: i, session: clients[i].sid,
			returnSent: map[string]bool{}, returned: map[string]bool{}, calls: map[string]int{}}
	}
	clients[0].waitTools(ctx, t, "replay__emit")

	fsync := auditFsync
	if fsync == "" {
		fsync = "interval (default)"
	}
	for cycle := 1; cycle <= kill9Cycles; cycle++ {
		// The load runs on the sessions the clients opened in the first
		// cycle: from the second on, they are sessions resumed after a kill.
		for _, c := range clients {
			c.url = px.url
		}
		st := kill9Cycle(ctx, t, px, clients, ledgers)

		// The audit log as the killed process left it.
		audit := kill9ReadAudit(t, filepath.Join(state, "audit.jsonl"))
		lost := kill9CheckAudit(t, audit, ledgers)
		// The store as the killed process left it, read by foldproxy
		// report --state before any proxy opens it again: it replays the
		// writes left in the store's write-ahead log (acknowledged, not
		// yet committed to Badger when the process died), and every
		// answered call must be archived.
		walLeft := kill9WALBytes(t, state)
		archived := kill9CheckReport(ctx, t, state, ledgers)

		// Restart on the same state and resume every session by its id.
		px = startDrillProxy(t, cfg, state)
		after := kill9CheckResumed(ctx, t, hc, px, ledgers)
		if px.p.exited() {
			t.Fatalf("the restarted foldproxy exited: %v", px.p.err)
		}
		t.Logf("DRILL kill9 [audit fsync %s] cycle %d/%d: %d clients, load %v; acknowledged so far: %d branch_create, %d branch_return, %d forwarded calls, %d branches left active; "+
			"audit log: %d records (%d torn lines skipped); lost: %s; store's write-ahead log at the kill: %d bytes; report --state: %s; after restart: %s",
			fsync, cycle, kill9Cycles, kill9Clients, kill9Load, st.creates, st.returns, st.calls, st.leftActive,
			audit.records, audit.skipped, lost, walLeft, archived, after)
	}
}

// kill9Cycles is how many times the proxy is killed and restarted on the
// same state.
const kill9Cycles = 3

// kill9Stats are the ledgers' totals.
type kill9Stats struct{ creates, returns, calls, leftActive int }

// kill9Cycle runs the load until kill9Load has passed, kills the proxy with
// SIGKILL and waits for the clients to stop, and returns the acknowledged
// totals so far.
func kill9Cycle(ctx context.Context, t *testing.T, px *drillProxy, clients []*drillClient, ledgers []*kill9Ledger) kill9Stats {
	t.Helper()
	// The load: each client loops create → two calls in the branch →
	// return, leaving every fourth branch active, until the proxy dies.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for i, c := range clients {
		led := ledgers[i]
		led.err = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			led.err = kill9Loop(loadCtx, c, led)
			led.errAt = time.Now()
		}()
	}
	select {
	case <-time.After(kill9Load):
	case <-px.p.done:
		t.Fatalf("foldproxy exited under load before the kill: %v", px.p.err)
	}
	killAt := time.Now()
	if err := syscall.Kill(px.pid(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", px.pid(), err)
	}
	select {
	case <-px.p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("foldproxy (pid %d) still running 15s after SIGKILL", px.pid())
	}
	// The upstream is foldproxy's child, in its process group: end it too.
	if err := killGroup(px.p.cmd); err != nil {
		t.Logf("%v", err)
	}
	loadDone := make(chan struct{})
	go func() { wg.Wait(); close(loadDone) }()
	select {
	case <-loadDone:
	case <-time.After(30 * time.Second):
		stopLoad()
		t.Fatalf("the load clients did not stop 30s after the proxy died")
	}

	var st kill9Stats
	for _, led := range ledgers {
		if led.err == nil {
			t.Errorf("client %d stopped without an error: it should have seen the proxy die", led.client)
		} else if led.errAt.Before(killAt) {
			t.Errorf("client %d failed before the kill: %v", led.client, led.err)
		}
		st.creates += len(led.created)
		st.returns += len(led.returned)
		for _, n := range led.calls {
			st.calls += n
		}
		for _, b := range led.created {
			if !led.returnSent[b] {
				st.leftActive++
			}
		}
	}
	if st.creates == 0 || st.calls == 0 {
		t.Fatalf("no load before the kill: %d creates, %d calls answered", st.creates, st.calls)
	}
	return st
}

// kill9CheckAudit checks that every acknowledged call and branch event is
// in the audit log, and says what was lost.
func kill9CheckAudit(t *testing.T, audit *kill9Audit, ledgers []*kill9Ledger) string {
	t.Helper()
	var lostCalls, lostCreated, lostReturned, lostFoldCalls int
	for _, led := range ledgers {
		for b, n := range led.calls {
			if got := audit.calls[led.session+"/"+b]; got < n {
				lostCalls += n - got
				t.Errorf("session %s branch %s: %d forwarded calls answered, %d call records in the audit log", led.session, b, n, got)
			}
		}
		for _, b := range led.created {
			if !audit.created[b] {
				lostCreated++
				t.Errorf("session %s: branch %s was acknowledged but has no \"created\" audit record", led.session, b)
			}
			if led.returned[b] && !audit.returned[b] {
				lostReturned++
				t.Errorf("session %s: the return of branch %s was acknowledged but has no \"returned\" audit record", led.session, b)
			}
		}
		if got := audit.foldCalls[led.session+"/branch_create"]; got < len(led.created) {
			lostFoldCalls += len(led.created) - got
			t.Errorf("session %s: %d branch_create answered, %d call records", led.session, len(led.created), got)
		}
		if got := audit.foldCalls[led.session+"/branch_return"]; got < len(led.returned) {
			lostFoldCalls += len(led.returned) - got
			t.Errorf("session %s: %d branch_return answered, %d call records", led.session, len(led.returned), got)
		}
	}
	return fmt.Sprintf("%d call records, %d created events, %d returned events, %d fold-tool call records",
		lostCalls, lostCreated, lostReturned, lostFoldCalls)
}

// kill9WALBytes is the size of the records in the store's write-ahead
// log: writes acknowledged before the kill whose commit to Badger may not
// have run.
func kill9WALBytes(t *testing.T, state string) int64 {
	t.Helper()
	n, err := store.WALBytes(filepath.Join(state, "badger"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// kill9CheckReport runs foldproxy report --state on the killed proxy's
// state and checks that every branch the clients were told of is there
// with at least the calls they got answers for archived (branch_recall
// reads them), and says what it found.
func kill9CheckReport(ctx context.Context, t *testing.T, state string, ledgers []*kill9Ledger) string {
	t.Helper()
	rep := reportState(ctx, t, state, "after kill -9")
	archived := map[string]int{}
	for _, b := range rep.Store.Branches {
		archived[b.Branch] = b.Archived
	}
	var branches, calls, lostCalls int
	for _, led := range ledgers {
		for _, b := range led.created {
			branches++
			n, ok := archived[b]
			if !ok {
				t.Errorf("report --state after kill -9: acknowledged branch %s is not in the store", b)
				continue
			}
			calls += led.calls[b]
			if n < led.calls[b] {
				lostCalls += led.calls[b] - n
				t.Errorf("report --state after kill -9: branch %s has %d archived calls, %d were answered", b, n, led.calls[b])
			}
		}
	}
	return fmt.Sprintf("%d acknowledged branches and %d answered calls checked, %d archived calls missing", branches, calls, lostCalls)
}

// kill9CheckResumed resumes every session on the restarted proxy, checks
// its tree against the ledger, and uses one branch left active before the
// kill (a call in it, then its return, both recorded in the ledger). It
// says what it found.
func kill9CheckResumed(ctx context.Context, t *testing.T, hc *http.Client, px *drillProxy, ledgers []*kill9Ledger) string {
	t.Helper()
	var lostBranches, wrongStatus, lostArchived, extraBranches, used int
	for i, led := range ledgers {
		c := &drillClient{hc: hc, url: px.url, sid: led.session}
		if i == 0 {
			c.waitTools(ctx, t, "replay__emit")
		}
		tree := map[string]kill9View{}
		for offset := 0; ; {
			out, err := c.callTool(ctx, "branch_status", map[string]any{"offset": offset})
			if err != nil || out.failed() {
				t.Fatalf("session %s after the restart: branch_status: %v %s", led.session, err, outText(out))
			}
			next, err := kill9Tree(out.answer(), tree)
			if err != nil {
				t.Fatalf("session %s: branch_status: %v: %s", led.session, err, truncate(out.text, 500))
			}
			if next == 0 {
				break
			}
			offset = next
		}
		acked := map[string]bool{}
		resume := ""
		for _, b := range led.created {
			acked[b] = true
			v, ok := tree[b]
			if !ok {
				lostBranches++
				t.Errorf("session %s: acknowledged branch %s is not in the resumed session's tree", led.session, b)
				continue
			}
			want := []string{"active"}
			switch {
			case led.returned[b]:
				want = []string{"returned"}
			case led.returnSent[b]:
				want = []string{"active", "returned"} // the return was in flight at the kill
			}
			if !slices.Contains(want, v.Status) {
				wrongStatus++
				t.Errorf("session %s: branch %s is %q after the restart, want %v (return sent %v, answered %v)",
					led.session, b, v.Status, want, led.returnSent[b], led.returned[b])
			}
			if v.Calls < led.calls[b] {
				lostArchived += led.calls[b] - v.Calls
				t.Errorf("session %s: branch %s has %d archived calls after the restart, %d were answered", led.session, b, v.Calls, led.calls[b])
			}
			if v.Status == "active" && !led.returnSent[b] {
				resume = b
			}
		}
		for id, v := range tree {
			if v.Depth > 0 && !acked[id] {
				extraBranches++ // a create in flight at the kill that landed: allowed
			}
		}
		if resume == "" {
			continue
		}
		// The resumed session goes on working in a branch left active
		// before the kill.
		out, err := c.callTool(ctx, "replay__emit", map[string]any{"bytes": kill9Emit, "kind": "log", "branch_id": resume})
		if err != nil || out.failed() {
			t.Errorf("session %s: a call in branch %s after the restart: %v %s", c.sid, resume, err, outText(out))
			continue
		}
		led.calls[resume]++
		led.returnSent[resume] = true
		out, err = c.callTool(ctx, "branch_return", map[string]any{"branch_id": resume, "message": "resumed after kill -9"})
		if err != nil || out.failed() {
			t.Errorf("session %s: branch_return %s after the restart: %v %s", c.sid, resume, err, outText(out))
			continue
		}
		led.returned[resume] = true
		used++
	}
	return fmt.Sprintf("%d branches missing, %d with a wrong status, %d archived calls missing, %d unacknowledged creates that landed; %d resumed branches used and returned",
		lostBranches, wrongStatus, lostArchived, extraBranches, used)
}

// kill9Loop is one client's load. It returns the error that stopped it:
// with the proxy killed, a transport error.
func kill9Loop(ctx context.Context, c *drillClient, led *kill9Ledger) error {
	root := fold.RootID(c.sid)
	for it := 0; it < 100000; it++ {
		out, err := c.callTool(ctx, "branch_create", map[string]any{
			"description": fmt.Sprintf("drill client %d iteration %d", led.client, it), "parent_branch_id": root, "budget": 1 << 29,
		})
		if err != nil {
			return err
		}
		if out.failed() {
			return fmt.Errorf("branch_create refused: %s", out.describe())
		}
		var ans struct {
			BranchID string `json:"branch_id"`
		}
		if err := json.Unmarshal(out.answer(), &ans); err != nil || ans.BranchID == "" {
			return fmt.Errorf("branch_create answer without branch_id (%v): %s", err, truncate(out.text, 300))
		}
		b := ans.BranchID
		led.created = append(led.created, b)
		for k := 0; k < 2; k++ {
			out, err := c.callTool(ctx, "replay__emit", map[string]any{"bytes": kill9Emit, "kind": "log", "branch_id": b})
			if err != nil {
				return err
			}
			if out.failed() || len(out.text) != kill9Emit {
				return fmt.Errorf("replay__emit in %s: %d bytes, failed %v: %s", b, len(out.text), out.failed(), truncate(out.describe(), 300))
			}
			led.calls[b]++
		}
		if it%4 == 3 {
			continue // leave this one active
		}
		led.returnSent[b] = true
		out, err = c.callTool(ctx, "branch_return", map[string]any{"branch_id": b, "message": fmt.Sprintf("iteration %d done", it)})
		if err != nil {
			return err
		}
		if out.failed() {
			return fmt.Errorf("branch_return %s refused: %s", b, out.describe())
		}
		led.returned[b] = true
	}
	return errors.New("the loop ran out of iterations before the kill")
}

// kill9Audit is what the audit log holds, indexed for the checks.
type kill9Audit struct {
	records, skipped int
	calls            map[string]int  // "session/branch" → forwarded call records
	foldCalls        map[string]int  // "session/tool" → fold tool call records
	created          map[string]bool // branch → a "created" event
	returned         map[string]bool // branch → a "returned" event
}

func kill9ReadAudit(t *testing.T, path string) *kill9Audit {
	t.Helper()
	a := &kill9Audit{calls: map[string]int{}, foldCalls: map[string]int{}, created: map[string]bool{}, returned: map[string]bool{}}
	files, err := intercept.AuditFiles(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	st, err := intercept.ReadAuditStats(files, func(r intercept.Record) error {
		switch {
		case r.Kind == intercept.KindCall && r.Upstream == "replay" && r.Tool == "emit":
			a.calls[r.Session+"/"+r.Branch]++
		case r.Kind == intercept.KindCall && r.Upstream == "":
			a.foldCalls[r.Session+"/"+r.Tool]++
		case r.Kind == intercept.KindBranch && r.Event == "created":
			a.created[r.Branch] = true
		case r.Kind == intercept.KindBranch && r.Event == "returned":
			a.returned[r.Branch] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	a.records, a.skipped = st.Records, st.Skipped
	return a
}

// kill9View is the part of a branch_status view the drill checks.
type kill9View struct {
	BranchID string      `json:"branch_id"`
	Status   string      `json:"status"`
	Depth    int         `json:"depth"`
	Calls    int         `json:"calls"`
	Branches []kill9View `json:"branches"`
}

// kill9Tree adds the branches of one page of a branch_status answer to
// out: the tree of active branches and the closed ones listed beside it
// (closed branches are never the root: they get depth 1). It returns the
// offset of the next page, 0 when this was the last.
func kill9Tree(answer json.RawMessage, out map[string]kill9View) (int, error) {
	var ans struct {
		Tree       *kill9View  `json:"tree"`
		Closed     []kill9View `json:"closed"`
		NextOffset int         `json:"next_offset"`
	}
	if err := json.Unmarshal(answer, &ans); err != nil {
		return 0, err
	}
	if ans.Tree == nil {
		return 0, errors.New("no tree in the answer")
	}
	var walk func(v kill9View, closed bool)
	walk = func(v kill9View, closed bool) {
		if closed {
			v.Depth = max(v.Depth, 1)
		}
		out[v.BranchID] = v
		for _, c := range v.Branches {
			walk(c, closed)
		}
	}
	walk(*ans.Tree, false)
	for _, c := range ans.Closed {
		walk(c, true)
	}
	return ans.NextOffset, nil
}
