//go:build foldproxy_e2e

package main

import "os"

// holdStoreCommits keeps the store's background committer from running
// when FOLDPROXY_TEST_HOLD_STORE_COMMITS=1, for the e2e test that kills
// foldproxy between a reply and the store's commit of what it recorded
// (e2e TestKill9BetweenReplyAndCommit). Only the binary the e2e tests
// build (with the tag foldproxy_e2e) has it; the one that ships does not
// read the variable.
func holdStoreCommits() bool { return os.Getenv("FOLDPROXY_TEST_HOLD_STORE_COMMITS") == "1" }
