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
//
// The folder policy/ is also the floor of the tree: the small shared leaves
// that several packages above need, and that import nothing of
// foldproxy's, live under it as subpackages, each the only copy of its
// idea:
//   - jsonscan: the one JSON scanner and unescaper (members, strings,
//     escapes) read by the model wire, the scrubber, the store and the
//     codecs;
//   - jsonrpc: the one JSON-RPC 2.0 codec (message, envelope, id key, error
//     codes and error type) both the downstream and the upstream side use;
//   - rawio: writing whole messages to pipes and files without copies;
//   - redact: removing an upstream's credentials from every text written;
//   - statedir: the state folder made and checked as the user's own.
//
// e2e/layers pins these imports.
package policy
