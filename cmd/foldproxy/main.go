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
	"runtime/pprof"
	"strconv"
	"strings"
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
  foldproxy run    [--config FILE] [--state DIR] [--agent KIND] [--print] -- <agent> [args...]
  foldproxy import [--from PATH] [--write] [--project DIR] [--name ENTRY] [--out FILE]
  foldproxy report [--audit FILE] [--state DIR] [--session S] [--json]
  foldproxy memory list|show|forget|export|import [--config FILE] [--state DIR] [--project P]
  foldproxy checkpoint list|show|delete [--config FILE] [--state DIR] [ID...]
  foldproxy ca     (--config FILE | --state DIR) [--cert]
  foldproxy version

Run "foldproxy <command> -h" for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	stopProfile := startCPUProfile(os.Getenv(cpuProfileEnv), os.Stderr)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	stopProfile()
	os.Exit(code)
}

// cpuProfileEnv names the environment variable that makes a foldproxy
// process write a CPU profile (go tool pprof) of its whole life to the file
// it names, once it exits normally (end of stdin, SIGTERM, SIGINT). "%p" in
// the name becomes the process id, so that a relay and the daemon it starts
// (which inherits the variable) write one file each.
const cpuProfileEnv = "FOLDPROXY_CPUPROFILE"

// startCPUProfile starts the CPU profile asked for by path ("" for none)
// and returns what stops it; a profile that cannot start is reported on
// stderr and skipped, since it must not keep foldproxy from serving.
func startCPUProfile(path string, stderr io.Writer) (stop func()) {
	if path == "" {
		return func() {}
	}
	path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "foldproxy: %s: %v\n", cpuProfileEnv, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "foldproxy: %s: %v\n", cpuProfileEnv, err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "foldproxy: %s: %v\n", cpuProfileEnv, err)
		}
	}
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
	case "run":
		cmd = &runCommand{stdout: stdout, stderr: stderr}
	case "import":
		cmd = &importCommand{stdout: stdout, stderr: stderr}
	case "report":
		cmd = &reportCommand{stdout: stdout, stderr: stderr}
	case "memory":
		cmd = &memoryCommand{stdin: stdin, stdout: stdout, stderr: stderr}
	case "checkpoint":
		cmd = &checkpointCommand{stdout: stdout, stderr: stderr}
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
