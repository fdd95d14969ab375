// Package policy owns every number and rule a user can set in foldproxy:
// budgets, depth, timeouts, warning thresholds, rate limits, tool allow and
// deny lists, scrub settings, the token encoding, audit and metrics options.
//
// It holds the defaults, validates a configuration with errors that name the
// offending field, and makes the small decisions that follow from the numbers
// (which warning level a budget is at, whether a tool is allowed).
//
// policy imports nothing else of foldproxy's and never performs I/O beyond
// decoding the bytes it is handed: reading files and environment lookups are
// the caller's job.
package policy
