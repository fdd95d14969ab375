# foldproxy's developer entry points. GNU make.
#
#   make build   build bin/foldproxy
#   make install install foldproxy into $(go env GOBIN), or $(go env GOPATH)/bin
#   make run     serve foldproxy over HTTP on 127.0.0.1:8765, wrapping server-filesystem on this folder
#   make test    all tests, with the race detector (installs e2e/node_modules first)
#   make bench   the benchmarks
#   make fuzz    every fuzz target in the tree for $(FUZZTIME) each
#   make fuzz-ci the fronts', the fast message parser's, the long-piece counter's and the write-ahead log reader's fuzz targets, a fixed number of inputs each (CI runs it)
#   make drills  the operational drills: kill -9, crashing upstream, soak, frame fuzzing
#   make drills-quick the same drills, shortened for CI (a minute or two)
#   make lint    gofmt, go vet (every build tag), and a build for windows and darwin
#   make clean   remove what the targets above made

GO        ?= go
NPM       ?= npm
TAGS      := gore2regex
BIN       := bin/foldproxy
LISTEN    ?= 127.0.0.1:8765
FUZZTIME  ?= 10s
TESTFLAGS ?=
# The e2e suite builds the binary and starts real MCP servers: give it room.
TESTTIMEOUT ?= 30m

NODE_STAMP := e2e/node_modules/.package-lock.json
E2E_NODE   := $(CURDIR)/e2e/node_modules/node/bin/node
FS_SERVER  := $(CURDIR)/e2e/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js

.PHONY: all build install run test bench fuzz fuzz-ci drills drills-quick lint clean e2e/node_modules

all: build

build:
	$(GO) build -tags $(TAGS) -o $(BIN) ./cmd/foldproxy

# foldproxy import writes the absolute path of the binary it runs from into
# .mcp.json: run it from the installed one.
install:
	$(GO) install -tags $(TAGS) ./cmd/foldproxy
	@dir=$$($(GO) env GOBIN); [ -n "$$dir" ] || dir=$$($(GO) env GOPATH)/bin; \
	echo "installed $$dir/foldproxy"; \
	case ":$$PATH:" in *":$$dir:"*) ;; *) echo "note: $$dir is not on PATH; run it as $$dir/foldproxy or add the folder to PATH";; esac

# npm ci again whenever package.json or the lock changed since the last one.
# On Node older than 22, npm warns EBADENGINE for the packages that want
# Node 22 (the Inspector and its dependencies): they run on the pinned Node
# 22 in e2e/node_modules/node, so those warnings are dropped and one line
# says why. npm 11's "install-scripts ... not yet covered by allowScripts"
# notices announce a policy to come; the scripts run (they install the
# clients' binaries): dropped too, and said. Every other warning and error
# is shown.
$(NODE_STAMP): SHELL := /bin/bash
$(NODE_STAMP): .SHELLFLAGS := -o pipefail -c
$(NODE_STAMP): e2e/package.json e2e/package-lock.json
	@echo "==> installing the pinned npm packages (MCP servers, Claude Code, Codex, OpenCode, a Node 22) into e2e/node_modules"
	@major=$$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0); \
	if [ "$$major" -lt 22 ]; then \
		echo "    node $$(node --version) is older than 22: npm's EBADENGINE warnings are hidden (those packages run on the pinned Node 22 in e2e/node_modules/node)"; \
	fi; \
	echo "    npm's install-scripts notices are hidden: the packages' install scripts run (they install the clients' binaries)"; \
	$(NPM) ci --prefix e2e --no-audit --no-fund 2>&1 | { if [ "$$major" -lt 22 ]; then { grep -v 'npm warn EBADENGINE' || true; }; else cat; fi; } | { grep -v 'npm warn install-scripts' || true; }
	@touch $@

e2e/node_modules: $(NODE_STAMP)

# What make run serves: server-filesystem on this folder, the state in
# bin/state, and the model settings (where requests go; the daemon's
# address, so that foldproxy run finds the same endpoint whether make run
# serves or not).
define RUN_CONFIG
{
  "mcpServers": {
    "fs": {
      "type": "stdio",
      "command": "$(E2E_NODE)",
      "args": ["$(FS_SERVER)", "$(CURDIR)"]
    }
  },
  "foldproxy": {
    "stateDir": "state",
    "daemonListen": "$(LISTEN)",
    "model": {"anthropicURL": "https://api.anthropic.com", "openaiURL": "https://api.openai.com"}
  }
}
endef
export RUN_CONFIG

# The banner: the whole setup for each agent, the model endpoint included.
define RUN_BANNER

foldproxy serves on http://$(LISTEN) (Ctrl-C stops it):
  MCP (streamable HTTP)  http://$(LISTEN)/mcp
  model APIs             http://$(LISTEN) (Anthropic), http://$(LISTEN)/v1 (OpenAI)
  live page              http://$(LISTEN)/ui
  audit log              bin/state/audit.jsonl   (bin/foldproxy report --audit bin/state/audit.jsonl)

Connect an agent, from another terminal in this folder (foldproxy run sets
its model endpoint and MCP entry, then runs it):
  Claude Code   bin/foldproxy run --config bin/run.mcp.json -- claude
  Codex CLI     bin/foldproxy run --config bin/run.mcp.json -- codex
  OpenCode      bin/foldproxy run --config bin/run.mcp.json -- opencode
  OpenAI SDKs   OPENAI_BASE_URL=http://$(LISTEN)/v1
or by hand (README: "Folding on the model wire"):
  claude mcp add --transport http foldproxy http://$(LISTEN)/mcp
  ANTHROPIC_BASE_URL=http://$(LISTEN) claude
List the tools with the MCP Inspector CLI:
  npx --prefix e2e mcp-inspector --cli http://$(LISTEN)/mcp --transport http --method tools/list

endef
export RUN_BANNER

# The Inspector is run by its bin name: with --prefix, npm 11's npx does not
# find "npx --prefix e2e @modelcontextprotocol/inspector" (its default bin).
run: e2e/node_modules
	@echo "==> building bin/foldproxy (the first build compiles every dependency: 2-3 minutes on two cores; go lists each package as it builds it)"
	$(GO) build -v -tags $(TAGS) -o $(BIN) ./cmd/foldproxy
	@mkdir -p -m 700 bin/state && chmod 700 bin/state
	@printf '%s\n' "$$RUN_CONFIG" > bin/run.mcp.json
	@echo "==> wrote bin/run.mcp.json: server-filesystem on $(CURDIR), state in bin/state, the model APIs' addresses"
	@printf '%s\n' "$$RUN_BANNER"
	./$(BIN) serve --config bin/run.mcp.json --listen $(LISTEN)

test: e2e/node_modules
	$(GO) test -race -tags $(TAGS) -timeout $(TESTTIMEOUT) $(TESTFLAGS) ./...

# The benchmark table (e2e/cmd/bench): builds foldproxy and the replay
# server, measures every figure next to its baseline in the same run, and
# prints one table on stdout. BENCHFLAGS passes flags through, e.g.
# BENCHFLAGS='-quick', '-only pipeline,cut', '-rounds 7 -json bench.json'.
# The Go benchmarks behind it, for profiling: go test -tags $(TAGS) -run '^$$'
# -bench Pipeline -cpuprofile cpu.prof ./intercept
BENCHFLAGS ?=
bench:
	$(GO) run -tags $(TAGS) ./e2e/cmd/bench $(BENCHFLAGS)

# Every fuzz target of every package, FUZZTIME each (go test -fuzz takes one
# target at a time).
fuzz:
	@set -e; found=0; \
	for pkg in $$($(GO) list -tags $(TAGS) ./...); do \
		for target in $$($(GO) test -tags $(TAGS) -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			found=$$((found + 1)); \
			echo "== $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test -tags $(TAGS) -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done; \
	echo "fuzzed $$found targets"

# The fronts parse everything the agent sends, the counter's long-piece
# merge must equal the library's on any text, and the store's write-ahead
# log is read back from whatever a crash left on the disk: CI fuzzes them
# briefly on every run (make test runs only their seed corpus). package:target:inputs
# triples, each about 15 s on two cores here.
#
# The budgets are counts, not durations: Go 1.26's fuzzing coordinator can
# fail a duration-bounded run with a bare "context deadline exceeded" and
# no failing input when -fuzztime ends (go.dev/issue/75804, fixed in Go
# 1.27). A count has no deadline to race. Minimizing a new interesting
# input is capped too, so that it cannot stall the fuzzing for up to its
# default minute. A real hang still fails: the worker panics after 10 s on
# one input and the input is written to testdata/fuzz.
FUZZCI_TARGETS := ./proxy/:FuzzStdioFront:40000x ./proxy/:FuzzHTTPFront:40000x \
	./proxy/modelfront/:FuzzModelFront:40000x ./proxy/:FuzzParseOneFast:40000x ./intercept/tokens/:FuzzLongPieceExact:1500x \
	./fold/store/:FuzzScanWAL:20000x
fuzz-ci:
	@set -e; for triple in $(FUZZCI_TARGETS); do \
		pkg=$${triple%%:*}; rest=$${triple#*:}; target=$${rest%%:*}; count=$${rest#*:}; \
		echo "== $$pkg $$target ($$count)"; \
		out=$$($(GO) test -tags $(TAGS) -run '^$$' -fuzz "^$$target\$$" -fuzztime $$count -fuzzminimizetime 200x $$pkg 2>&1) || { echo "$$out"; exit 1; }; \
		echo "$$out"; \
		if echo "$$out" | grep -q 'no fuzz tests to fuzz'; then echo "fuzz-ci: $$pkg has no fuzz target $$target (moved? update FUZZCI_TARGETS)"; exit 1; fi; \
	done

# Issue 5's drills against the real binary (e2e/drill*_test.go, build tag
# "drills"): kill -9 under load and restart, an upstream crashing every
# third call, a 200-session soak, generated malformed frames into both
# fronts. Not part of make test; a few minutes on two cores.
drills:
	$(GO) test -race -tags '$(TAGS) drills' -run Drill -timeout 15m -v ./e2e/

# The drills with fewer frames, sessions and calls: what CI runs on every run.
drills-quick:
	FOLDPROXY_DRILL_FRAMES=400 FOLDPROXY_DRILL_SOAK_SESSIONS=40 FOLDPROXY_DRILL_SOAK_CALLS=5 \
		$(GO) test -race -tags '$(TAGS) drills' -run Drill -timeout 8m -v ./e2e/

# Besides the default tags: the test hooks the e2e suite builds the binary
# with (foldproxy_e2e), the drills (drills), and the bench's stdlib-regexp
# child (built without gore2regex). The product and the bench build for
# windows and darwin too (test files are unix-only: not built there).
lint:
	@unformatted=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need formatting:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet -tags $(TAGS) ./...
	$(GO) vet -tags '$(TAGS) foldproxy_e2e drills' ./cmd/foldproxy/ ./e2e/...
	$(GO) vet ./e2e/cmd/bench/
	GOOS=windows $(GO) build -tags $(TAGS) ./...
	GOOS=darwin $(GO) build -tags $(TAGS) ./...

clean:
	rm -rf bin
	$(GO) clean -testcache -fuzzcache
