package fold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/foldproxy/foldproxy/fold/memory"
	membadger "github.com/foldproxy/foldproxy/fold/memory/badger"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/policy"
)

// failingStore is a memory store whose searches fail.
type failingStore struct{ memory.Store }

func (failingStore) Search(context.Context, memory.Query) ([]memory.Hit, error) {
	return nil, errors.New("disk on fire")
}

// newMemEnv returns a test environment whose Manager has memories on a
// Badger store in memory; wrap, when not nil, wraps the memory store.
func newMemEnv(t testing.TB, wrap func(memory.Store) memory.Store) (*testEnv, *memory.Service) {
	t.Helper()
	db, err := badgerdb.Open(badgerdb.DefaultOptions("").WithInMemory(true).WithLogger(nil).WithMemTableSize(4 << 20).WithValueThreshold(64 << 10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var st memory.Store
	if st, err = membadger.Open(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		st = wrap(st)
	}
	svc, err := memory.New(memory.Options{
		Settings: policy.Memory{Project: "p", Principal: "alice"}, Store: st,
		Count: wordCounter{}.CountText,
		Scrub: func(ctx context.Context, s string) (string, error) {
			clean, _, err := fakeScanner{}.ScrubText(ctx, s)
			return clean, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	store := store.NewMemStore()
	set := policy.Default().Fold
	set.CreatesPerMinute = 100
	m, err := NewManager(t.Context(), Options{
		Settings: set, Store: store, Scanner: fakeScanner{}, Counter: wordCounter{},
		PruneInterval: -1, Memory: svc,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.OpenSession(t.Context(), SessionRecord{ID: "s1", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	return &testEnv{m: m, store: store, events: &events{}}, svc
}

func injectedOf(t testing.TB, ans map[string]any) []memory.Brief {
	t.Helper()
	v, ok := ans["injected_context"]
	if !ok {
		return []memory.Brief{} // an empty injected_context is left out of the answer
	}
	raw, _ := json.Marshal(v)
	var items []memory.Brief
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		t.Fatalf("injected_context %s: %v", raw, err)
	}
	return items
}

func TestMemoryExtractAndInject(t *testing.T) {
	e, svc := newMemEnv(t, nil)
	// Without memories, a branch gets an empty injected_context.
	ans := e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "fix the django admin changelist filter", "budget": 1000})
	if items := injectedOf(t, ans); len(items) != 0 {
		t.Fatalf("injected %v from an empty store", items)
	}
	id := ans["branch_id"].(string)
	ret := e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": id, "extract_memory": true,
		"message": "The changelist filter needed list_select_related on the admin; the SECRET was in settings.py."})
	if ret["memory_queued"] != true {
		t.Fatalf("memory_queued = %v, want true", ret["memory_queued"])
	}
	mems, _ := svc.Store().List(t.Context(), "p", false)
	if len(mems) != 1 || mems[0].Provenance.Branch != id || mems[0].Provenance.Origin != memory.OriginExtracted ||
		mems[0].Provenance.Session != "s1" || mems[0].Provenance.Principal != "alice" || strings.Contains(mems[0].Content, "SECRET") {
		t.Fatalf("extracted %+v", mems)
	}
	// A return without extract_memory whose message teaches nothing
	// queues nothing; one that carries a lesson is a candidate
	// (memory.autoExtract), and the answer does not say so.
	id2 := e.create(t, map[string]any{"description": "read sympy printing code"})
	if ret := e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": id2, "message": "StrPrinter handles Pow"}); ret["memory_queued"] != nil { // false is left out of the answer
		t.Fatalf("memory_queued = %v without extract_memory", ret["memory_queued"])
	}
	if n, _ := svc.Store().Count(t.Context(), "p"); n != 1 {
		t.Fatalf("%d memories after a return that teaches nothing, want 1", n)
	}
	id3 := e.create(t, map[string]any{"description": "read sympy latex printing code"})
	if ret := e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": id3, "message": "LatexPrinter._print_Pow wraps the base in parentheses when it is a Function; see sympy/printing/latex.py."}); ret["memory_queued"] != nil {
		t.Fatalf("memory_queued = %v on a quiet extraction", ret["memory_queued"])
	}
	if n, _ := svc.Store().Count(t.Context(), "p"); n != 2 {
		t.Fatalf("%d memories after a return that carries a lesson, want 2", n)
	}
	id4 := e.create(t, map[string]any{"description": "read sympy pretty printing code"})
	e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": id4, "extract_memory": false, "message": "PrettyPrinter._print_Pow stacks the exponent above the base in sympy/printing/pretty/pretty.py."})
	if n, _ := svc.Store().Count(t.Context(), "p"); n != 2 {
		t.Fatalf("%d memories after extract_memory false, want 2", n)
	}
	// A related branch gets it injected, briefly, charged to its budget.
	ans = e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "fix the django admin changelist filter", "prompt": "it needs list_select_related", "budget": 1000})
	items := injectedOf(t, ans)
	if len(items) != 1 || items[0].ID != mems[0].ID || items[0].Type != "" || items[0].Lesson == "" || len(items[0].Lesson) > memory.MaxLesson {
		t.Fatalf("injected %+v", items)
	}
	raw, _ := json.Marshal(items[0])
	b := e.branch(t, ans["branch_id"].(string))
	if b.Used != wordCounter.CountText(wordCounter{}, string(raw)) || b.Used > 200 || len(b.Injected) != 1 {
		t.Fatalf("branch used %d, injected %v; want the %d tokens of %s charged", b.Used, b.Injected, wordCounter{}.CountText(string(raw)), raw)
	}
	// Its success raises the memory's confidence.
	e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": b.ID, "message": "done"})
	if m, _ := svc.Store().Get(t.Context(), mems[0].ID); m.Confidence != 0.85 || m.Successes != 1 || m.Injected != 1 {
		t.Fatalf("after success: %+v", m)
	}
	// inject_memories:false opts out; a budget too small for the memory gets none.
	ans = e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "fix the django admin changelist filter", "prompt": "it needs list_select_related", "inject_memories": false})
	if items := injectedOf(t, ans); len(items) != 0 {
		t.Fatalf("inject_memories false: %v", items)
	}
	e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "x"})
	ans = e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "fix the django admin changelist filter", "prompt": "it needs list_select_related", "budget": 20})
	if items := injectedOf(t, ans); len(items) != 0 {
		t.Fatalf("budget 20 (4 tokens for memories): %v", items)
	}
}

func TestMemoryForcedBranchLeavesAntiPattern(t *testing.T) {
	e, svc := newMemEnv(t, nil)
	rec := e.mustCall(t, "s1", ToolMemoryRecord, map[string]any{"title": "astropy units conversion", "content": "to find why units convert wrongly, read every units module file one by one", "tags": []string{"astropy"}})
	memID := rec["memory_id"].(string)
	ans := e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "astropy units conversion bug", "prompt": "find why units convert wrongly", "budget": 100})
	id := ans["branch_id"].(string)
	if items := injectedOf(t, ans); len(items) != 1 || items[0].ID != memID {
		t.Fatalf("injected %v, want the recorded memory", items)
	}
	if res, _, err := e.charge(t, "s1", id, 500); err != nil || !res.Forced {
		t.Fatalf("charge: %+v %v", res, err)
	}
	m, _ := svc.Store().Get(t.Context(), memID)
	if m.Confidence != 0.65 || m.Failures != 1 {
		t.Fatalf("after a forced return: confidence %v failures %d", m.Confidence, m.Failures)
	}
	mems, _ := svc.Store().List(t.Context(), "p", false)
	var anti *memory.Memory
	for _, x := range mems {
		if x.Kind == memory.KindAntiPattern {
			anti = x
		}
	}
	if anti == nil || !strings.Contains(anti.Title, "astropy units conversion bug") || !strings.Contains(anti.Content, ReasonBudget) ||
		!strings.Contains(anti.Content, "find why units convert wrongly") || anti.Provenance.Branch != id {
		t.Fatalf("anti-pattern %+v", anti)
	}
	// memory_search finds both, with the anti-pattern typed as such.
	found := e.mustCall(t, "s1", ToolMemorySearch, map[string]any{"query": "astropy units", "limit": 5})
	raw, _ := json.Marshal(found["memories"])
	if !strings.Contains(string(raw), `"type":"anti_pattern"`) || !strings.Contains(string(raw), memID) {
		t.Fatalf("memory_search: %s", raw)
	}
	if found := e.mustCall(t, "s1", ToolMemorySearch, map[string]any{"query": "astropy", "tags": []string{"astropy"}}); len(found["memories"].([]any)) != 1 {
		t.Fatalf("memory_search by tag: %v", found)
	}
	if _, text, ok := e.call(t, "s1", ToolMemoryRecord, map[string]any{"title": "x", "content": "y", "outcome": "maybe"}); ok || !strings.HasPrefix(text, "ErrInvalidArgument") {
		t.Fatalf("bad outcome: %s", text)
	}
	if _, text, ok := e.call(t, "s1", ToolMemoryRecord, map[string]any{"title": "x", "content": "FAILSCAN"}); ok || !strings.HasPrefix(text, "ErrScanFailed") {
		t.Fatalf("unscannable content: %s", text)
	}
}

func TestMemoryStoreFailureDoesNotFailCreate(t *testing.T) {
	e, _ := newMemEnv(t, func(s memory.Store) memory.Store { return failingStore{s} })
	ans := e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "anything at all"})
	if items := injectedOf(t, ans); len(items) != 0 {
		t.Fatalf("injected %v", items)
	}
	// A failing store is an internal failure of memory_search, a Go error.
	if out, err := e.m.CallTool(t.Context(), "s1", ToolMemorySearch, json.RawMessage(`{"query":"x"}`)); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("memory_search on a failing store: %s, %v", out, err)
	}
}

func TestMemoryToolsListedOnlyWhenOn(t *testing.T) {
	e := newEnv(t, nil)
	for _, raw := range e.m.Tools() {
		if strings.Contains(string(raw), ToolMemoryRecord) {
			t.Fatal("memory_record listed without memories")
		}
	}
	if _, text, ok := e.call(t, "s1", ToolMemorySearch, map[string]any{"query": "x"}); ok || !strings.Contains(text, "disabled") {
		t.Fatalf("memory_search without memories: %s", text)
	}
	em, _ := newMemEnv(t, nil)
	n := 0
	for _, raw := range em.m.Tools() {
		if strings.Contains(string(raw), `"name":"memory_`) {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d memory tools listed, want 2", n)
	}
}

// BenchmarkCreateReturnMemories: a branch_create that injects memories
// (their use recorded, MarkUsed) and its return (their confidence moved,
// Outcome), on the state store as serve opens it, with the embedded
// memory backend writing a Badger transaction per change ("txn", as before
// WriteKeys) or through the store's write-ahead log ("log", as serve wires
// it). go test -tags gore2regex -run '^$' -bench CreateReturnMemories ./fold/
func BenchmarkCreateReturnMemories(b *testing.B) {
	for _, tt := range []struct {
		name string
		open func(ctx context.Context, s *store.BadgerStore) (*membadger.Store, error)
	}{
		{"txn", func(ctx context.Context, s *store.BadgerStore) (*membadger.Store, error) {
			return membadger.Open(ctx, s.DB())
		}},
		{"log", func(ctx context.Context, s *store.BadgerStore) (*membadger.Store, error) {
			return membadger.OpenWith(ctx, s.DB(), s.WriteKeys)
		}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s := openBadgerNoFsyncT(b, b.TempDir())
			defer s.Close()
			st, err := tt.open(b.Context(), s)
			if err != nil {
				b.Fatal(err)
			}
			svc, err := memory.New(memory.Options{
				Settings: policy.Memory{Project: "p", Principal: "alice"}, Store: st, Count: wordCounter{}.CountText,
			})
			if err != nil {
				b.Fatal(err)
			}
			for i := range 5 {
				if _, _, err := svc.Add(b.Context(), memory.Candidate{Title: fmt.Sprintf("django admin lesson %d", i),
					Content: fmt.Sprintf("the changelist filter needs list_select_related (%d)", i)}); err != nil {
					b.Fatal(err)
				}
			}
			m, err := NewManager(b.Context(), Options{
				Settings: policy.Default().Fold, Store: s, Scanner: fakeScanner{}, Counter: wordCounter{},
				PruneInterval: -1, Memory: svc,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			m.set.CreatesPerMinute = 1 << 30
			if err := m.OpenSession(b.Context(), SessionRecord{ID: "s1", Transport: "stdio"}); err != nil {
				b.Fatal(err)
			}
			budget := 30000
			for b.Loop() {
				ans, err := m.create(b.Context(), "s1", createArgs{Description: "django admin changelist filter", Budget: &budget})
				if err != nil {
					b.Fatal(err)
				}
				if len(ans.InjectedContext) == 0 {
					b.Fatal("no memories injected")
				}
				if _, err := m.ret(b.Context(), "s1", returnArgs{Message: "done"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
