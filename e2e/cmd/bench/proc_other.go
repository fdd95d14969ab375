//go:build !unix

package main

import (
	"os/exec"
	"time"
)

// Without process groups or SIGTERM (Windows), the bench can only kill
// the process it started: what that process started itself may be left
// running. The bench is meant for unix; this keeps the module building
// everywhere.

func ownGroup(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) error { return cmd.Process.Kill() }

func termGroup(cmd *exec.Cmd) error { return cmd.Process.Kill() }

func terminate(cmd *exec.Cmd) error { return cmd.Process.Kill() }

func selfCPU() (time.Duration, bool) { return 0, false }
