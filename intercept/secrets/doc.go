// Package secrets is foldproxy's secret scanner: the engine that finds
// secrets in text and JSON with gitleaks' rules (its defaults plus the
// user's .gitleaks.toml) and replaces each with [REDACTED:<rule-id>].
//
// It owns everything that finds secrets: loading and merging the gitleaks
// configuration (config.go), the keyword prefilter and the rules' windows
// (keywords.go, prefilter.go, windows.go, regex.go), rules run over the
// whole text (whole.go), encoded segments (encoded.go), gitleaks run over
// a window and its findings located (detect.go), the views of a text with
// its JSON escaping undone and the redaction (view.go), secrets split
// across a result's items or hidden in gzip (split.go), and the scan
// itself, in pieces, in parallel, bounded by a deadline (scrubber.go,
// scan.go, run.go). Its Scrubber serves the Scrub interceptor, fold's
// fold-time scans and the model wire alike: one decision, one copy.
//
// JSON strings are decoded with policy/jsonscan, the module's one JSON
// scanner; view.go keeps only the map from decoded offsets back to the
// raw text.
//
// It must never return or log any of the text it failed to scan: a scan
// that errors, panics or overruns its deadline is a *ScanError whose
// message holds none of the text, and the caller withholds the content
// (fail closed). It knows nothing of exchanges, budgets or the wire: what
// to do with a failed scan is the caller's decision.
package secrets
