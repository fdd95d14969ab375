// Package fold owns branches: the tree of branches of each downstream
// session, their budgets and deadlines, forced returns, the archive of every
// call made inside a branch, and the durable state of all of it behind the
// Store interface it declares (types.go), which the storage engine in
// fold/store implements (Badger in production, MemStore in tests).
//
// The rule fold never breaks: a state change is in the store before the
// caller, and so the agent, hears of it (in the Badger store: appended to
// its write-ahead log, which a background committer applies to Badger and
// the next open replays after a crash; see fold/store). fold never sees raw secrets: what it
// is handed has already been scrubbed by the intercept chain, and it scans
// return messages again through the Scanner it is given (fold-time scan).
package fold

// The Manager (manager.go) is the package's entry point. Its methods, used by
// proxy and intercept:
//
//	NewManager(ctx, Options) (*Manager, error)
//	(*Manager).Recover(ctx, resumable func(session string) bool) error
//	(*Manager).OpenSession(ctx, SessionRecord) error
//	(*Manager).ResumeSession(ctx, id string) (*SessionRecord, error)
//	(*Manager).TouchSession(ctx, id string)
//	(*Manager).EndSession(ctx, id string) error
//	(*Manager).Attribute(ctx, session, explicit string) (*Branch, error)
//	(*Manager).Charge(ctx, session, branch string, fit func(Budget) (Charge, error)) (*ChargeResult, error)
//	(*Manager).Tools() []json.RawMessage
//	(*Manager).CallTool(ctx, session, name string, args json.RawMessage) (json.RawMessage, error)
//	(*Manager).Close() error
//	(*Manager).ModelState() modelwire.State (modelstate.go: the model wire's view; it binds
//	each branch to the model session that first showed its sealed branch_create answer, modelseal.go)
//	(*Manager).RecordModelOutput(ctx, branchID string, tokens int) error (usage.go: the model's output tokens, for the usage breakdown)
//
// Budgets of parents and children: a child's budget is not reserved out of
// its parent's; it must only not exceed what the parent has left when the
// child is created. The child's tool results are charged to the child
// alone. When it returns, the parent is charged what it receives, the
// return message and return value (counted by the Counter), and that
// exchange is archived in the parent. A forced return charges the parent
// nothing at once: its automatic summary is handed to the parent's next
// Charge (Budget.Summaries), whose tokens the parent pays. The fold tools'
// own answers (branch_create, branch_status, branch_recall) are not charged
// by fold; branch_return's message is, by Return itself, so the proxy must
// not charge it again.
//
// The budget decision is fold's too, written once (fit.go): Fit decides
// what of one result reaches the agent (whole, capped below the budget, cut
// to fit with its notice, or refused with the spent notice), what it costs
// and the warning level after it, and the notices that say so (notices.go;
// the warning levels are policy's). It is pure: each wire calls it from its
// fit function with its own ways to cut a result and attach notices, the
// budget interceptor for MCP results and ModelState for the model wire's.
// No caller may decide a budget, a cut or a warning by itself.
//
// Other exported helpers: the optional Batcher and RecordReader extensions
// of Store, ToolNames, IsTool and ChargedTool, and (*Manager).Prune.
//
// fold decides what is kept; fold/store keeps it. The storage engine
// (store.OpenBadger and its variants, store.NewMemStore,
// store.NewUnwritableStore) is imported by fold and never imports it. The
// records it persists (Branch, CallRecord, SessionRecord, Record,
// ModelContext, Status, the Batch types) and its sentinel errors
// (ErrBranchNotFound, ErrSessionNotFound, ErrCutNotFound, ErrStoreFull,
// ErrRecordNotFound, ErrInvalidArgument) are declared there and named
// here by alias, so fold.Branch is store.Branch and errors.Is matches
// either name.
//
// Beside the branch tools, the Manager serves checkpoints
// (checkpoint.go: checkpoint_save, checkpoint_list, checkpoint_resume, kept
// as Store records of KindCheckpoint, seen by their principal only),
// lists orphans (orphans.go: branches of ended sessions, in branch_status),
// proposes learned budgets and scores strategies (learned.go:
// StrategyScore), and breaks usage down by kind (usage.go).
//
// Memories (fold/memory, Options.Memory) hook into branch_create
// (injection, charged to the new branch), branch_return (extraction), the
// closing of a branch (confidence, anti-patterns) and the memory_record,
// memory_search and remediation_record tools; see memory.go.
