//go:build !foldproxy_e2e

package main

// holdStoreCommits is false in the binary that ships: it has no test hook.
// The e2e tests build theirs with the tag foldproxy_e2e (testhooks_e2e.go).
func holdStoreCommits() bool { return false }
