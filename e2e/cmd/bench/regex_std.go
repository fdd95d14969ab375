//go:build !gore2regex

package main

// regexEngine names the regexp engine gitleaks was built with in this
// binary (no gore2regex build tag: the standard library's).
const regexEngine = "stdlib regexp"
