// Command relay is the floor of the bench's stdio overhead table: a bare
// stdio relay that starts the command in its arguments and copies bytes
// both ways, with no parsing at all. Any stdio proxy costs at least this.
//
//	relay COMMAND [ARG...]
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: relay COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	go func() { _, _ = io.Copy(in, os.Stdin); in.Close() }()
	_, _ = io.Copy(os.Stdout, out)
	_ = cmd.Wait()
}
