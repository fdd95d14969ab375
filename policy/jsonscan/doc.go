// Package jsonscan is foldproxy's one JSON scanner: it finds the byte spans
// of JSON values, lists an object's members and an array's elements,
// decodes and encodes strings (and single escape sequences: AppendEscape,
// with which the secret scanner undoes the escaping of whole JSON texts),
// and edits one member of an object in place, so that every byte a caller
// does not change passes through as it came (key order, number spelling,
// escapes, white space).
//
// It lives under policy/ because policy is at the bottom of the dependency
// table: fold (and fold/modelwire), intercept, upstreams, proxy and cmd may
// all import it, and it imports nothing of foldproxy's. It is the only copy
// of this code in the module; a package that needs to walk JSON bytes uses
// it rather than growing its own.
//
// Two levels of checking, chosen for speed where results are megabytes:
//
//   - Valid checks exactly what encoding/json's Valid checks (a fuzz test
//     compares the two on every input).
//   - The walkers (SkipValue, Object, Array and the field helpers) check
//     the structure they walk, numbers and literals included, but skip
//     strings by looking for their closing quote (with bytes.IndexByte), so
//     they accept raw control characters and bad escapes inside strings.
//     Unquote reports bad escapes when a string is decoded. Callers that
//     need strict JSON check with Valid first.
//
// Strings decode as encoding/json decodes them: invalid UTF-8 and lone
// surrogates become U+FFFD. Quote encodes as encoding/json's Encoder with
// SetEscapeHTML(false): '<', '>' and '&' stay as they are.
//
// Nesting deeper than MaxDepth is refused, as encoding/json refuses it, so
// hostile input cannot exhaust the stack. Nothing here panics on any input
// (fuzzed), and nothing keeps state between calls except a Scanner's cache.
package jsonscan
