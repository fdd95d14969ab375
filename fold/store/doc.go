// Package store is fold's storage engine: the durable state of branches,
// the archive of every call made inside a branch, cut remainders,
// downstream sessions and fold's own records (checkpoints, the model
// wire's automatic folds), behind the interfaces package fold declares
// (fold.Store, fold.Batcher, fold.RecordReader).
//
// It owns:
//
//   - BadgerStore (badger*.go), the durable store: an embedded Badger
//     database with its own write-ahead log (wal.go, walcommit.go,
//     walmap_*.go), append-only archive files for large results
//     (archive.go, pwritev_*.go), a free-space guard (freeguard.go,
//     diskfree_*.go), the grouped time index pruning reads (timeindex.go,
//     prune.go), the hand-written record encoders (callcodec.go) and a
//     close that ends when Badger cannot (close.go). OpenBadgerReader and
//     OpenBadgerReadOnly serve the read-only subcommands.
//   - MemStore (memstore.go), the same contract in memory, for tests and
//     benchmarks, and
//     UnwritableStore (unwritable.go), what serve runs on when the state
//     store cannot be opened for lack of space.
//   - The records it persists (records.go): Branch, CallRecord,
//     SessionRecord, Record, ModelContext, Status and the Batch types, and
//     its sentinel errors. Package fold names them by alias (fold.Branch is
//     Branch), so fold's callers need not import this package but to open
//     a store.
//
// storetest is the conformance suite every store runs (Run, and
// RunDurable for a store kept in a folder).
//
// What it must never do:
//
//   - Lose an acknowledged write: a write that returned nil is in the
//     write-ahead log, in the operating system (and fsynced with
//     fold.fsync), and the next open replays what a crash left there; a
//     write that could not be made returns an error and changes nothing.
//   - Crash on a full disk: a full disk (or one below the free-space
//     guard) is an error wrapping ErrStoreFull, never a SIGBUS or a panic;
//     bad input is an error wrapping ErrInvalidArgument.
//   - Decide anything about branches: budgets, cuts, warning levels,
//     statuses and what is pruned when are fold's and policy's; the store
//     keeps what it is given and prunes by the age and size it is told.
//   - Import fold or anything above it: fold imports store, so the store's
//     imports are the standard library, Badger and policy's leaves
//     (policy/rawio, policy/jsonscan).
//   - Log a record's contents: what it is given is already scrubbed, but
//     its logs name keys, sizes and files only.
package store
