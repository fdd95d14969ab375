//go:build gore2regex

package main

// regexEngine names the regexp engine gitleaks was built with in this
// binary (the gore2regex build tag).
const regexEngine = "go-re2"
