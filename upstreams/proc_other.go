//go:build !unix

package upstreams

import "os/exec"

// setProcessGroup does nothing where process groups are not available.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup does nothing where process groups are not available; the
// transport has already ended the child itself.
func killProcessGroup(*exec.Cmd) {}
