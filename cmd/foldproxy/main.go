// Command foldproxy is one MCP server entry that wraps all of an agent's
// other MCP servers and adds context folding. See the README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand. Each lives in its own file with its own
// flag.FlagSet, and writes only to the writers it was built with.
type command interface {
	Run(ctx context.Context, args []string) error
}

const usage = `foldproxy: one MCP entry that wraps all your MCP servers and adds context folding.

Usage:
  foldproxy serve  --config FILE [--listen ADDR] [--state DIR] [--metrics ADDR]
  foldproxy import [--from PATH] [--write] [--project DIR] [--name ENTRY] [--out FILE]
  foldproxy report [--audit FILE] [--state DIR] [--session S] [--json]
  foldproxy memory list|show|forget|export|import [--config FILE] [--state DIR] [--project P]
  foldproxy ca     (--config FILE | --state DIR) [--cert]
  foldproxy version

Run "foldproxy <command> -h" for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var cmd command
	switch args[0] {
	case "serve":
		cmd = &serveCommand{stdin: stdin, stdout: stdout, stderr: stderr}
	case "import":
		cmd = &importCommand{stdout: stdout, stderr: stderr}
	case "report":
		cmd = &reportCommand{stdout: stdout, stderr: stderr}
	case "memory":
		cmd = &memoryCommand{stdin: stdin, stdout: stdout, stderr: stderr}
	case "ca":
		cmd = &caCommand{stdout: stdout, stderr: stderr}
	case "version":
		fmt.Fprintln(stdout, "foldproxy", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "foldproxy: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err := cmd.Run(ctx, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "foldproxy %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
