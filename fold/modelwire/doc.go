// Package modelwire is the context manager F of context folding, applied to
// requests on the model wire (Anthropic Messages, OpenAI Chat Completions,
// OpenAI Responses): it folds each closed branch span of the conversation to
// its summary, charges tool results inside open branches, cuts them at the
// budget, scrubs them, and adds guidance.
//
// It is pure: it imports nothing of foldproxy's, keeps the original bytes of
// everything it does not change, and depends on the fold state only through
// the State interface, so the same request and state always give the same
// bytes.
package modelwire
