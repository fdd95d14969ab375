// Package tokens is foldproxy's tokenizer: the Counter counts the tokens
// of text and of MCP results exactly as the configured encoding
// (o200k_base by default, via tiktoken-go) counts them, and cuts a result
// to a token limit at a clean boundary.
//
// It owns counting (counter.go: texts counted in chunks that end where
// the pre-tokenizer always splits), the fast paths that count without the
// codec (fast.go: a hand-written pre-tokenizer and piece cache; bpe.go:
// the byte-pair merge over the codec's ranks), what a result costs by
// method and shape (result.go), cutting a text or a result to fit
// (cut.go), and the count of a whole exchange (exchange.go), which reads
// texts the secrets scan decoded already through the Decoded interface.
//
// It must never decide a budget, a cut point in tokens or a warning (that
// is fold.Fit's); it only measures and cuts where it is told to. It must
// never change a byte of a result it does not cut: a cut result keeps
// every member and item it keeps byte for byte. Counts are exact: the fast
// paths are checked against the codec (fuzzed).
package tokens
