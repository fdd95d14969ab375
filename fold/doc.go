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
