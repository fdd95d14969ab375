// Package memory owns what one branch learned for the next: the domain
// types (Memory, Provenance), the Store interface that every backend
// implements, the lexical sparse representation used for retrieval, the
// ranking, the relevance floor and injection budget (a ceiling) of the
// briefs a branch is given, confidence updates from outcomes, near-
// duplicate merging, and the screen that flags prompt injections
// (patterns.go: normalised text, lookalike letters, decoded base64, ten
// languages).
//
// Backends are subpackages, each opening with
//
//	var _ memory.Store = (*Store)(nil)
//
// memory/badger keeps memories in the project's embedded Badger store with
// an in-memory inverted index (the default); memory/qdrant keeps them in a
// Qdrant collection for teams whose agents run on many machines.
//
// What the package must never do: import anything of foldproxy's but
// policy, store text that was not passed through the scrubber it was given,
// or hand a memory flagged as suspicious to a branch while
// memory.blockSuspicious is on.
package memory
