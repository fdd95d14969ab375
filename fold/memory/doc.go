// Package memory owns what one branch learned for the next: the domain
// types (Memory, Provenance), the Store interface that every backend
// implements, the lexical sparse representation used for retrieval, the
// ranking and injection budget, confidence updates from outcomes, near-
// duplicate merging, and the flagging of prompt-injection patterns.
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
