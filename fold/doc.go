// Package fold owns branches: the tree of branches of each downstream
// session, their budgets and deadlines, forced returns, the archive of every
// call made inside a branch, and the durable state of all of it behind the
// Store interface (Badger in production).
//
// The rule fold never breaks: a state change is in the store before the
// caller, and so the agent, hears of it. fold never sees raw secrets: what it
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
