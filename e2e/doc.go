// Package e2e holds foldproxy's end-to-end tests: the real binary, built
// once by TestMain, between real MCP clients (mcp-go's, the MCP Inspector's
// CLI, the official conformance suite) and real MCP servers (the reference
// servers from npm, pinned in package.json, and the Go helper servers under
// servers/). On the model wire, the real Claude Code CLI (its native binary
// from node_modules) talks to foldproxy's model front, which forwards to
// servers/model, a scripted Messages API that records what it receives: no
// model is reachable from here.
//
// The npm packages come from e2e/package-lock.json only: run
// "npm ci --prefix e2e" first (make test does). Nothing is downloaded while
// the tests run, and every address used is on the loopback interface.
//
// How the reference servers start (read from their dist/ sources):
//
//	server-everything:  node node_modules/@modelcontextprotocol/server-everything/dist/index.js [stdio|sse|streamableHttp]
//	                    stdio is the default. sse serves GET /sse and POST /message,
//	                    streamableHttp serves /mcp (POST, GET, DELETE); both listen on
//	                    the port in $PORT (default 3001). Express binds every interface,
//	                    the tests only ever connect to 127.0.0.1. In streamableHttp mode
//	                    it logs to stdout as well as stderr.
//	server-filesystem:  node node_modules/@modelcontextprotocol/server-filesystem/dist/index.js DIR...
//	                    stdio only. When the client declares roots, the roots it
//	                    returns replace the DIR arguments (an empty list keeps them).
//	conformance:        node_modules/node/bin/node node_modules/@modelcontextprotocol/conformance/dist/index.js
//	                    server --url URL [--scenario NAME] --output-dir DIR
//	                    (needs Node 22: the "node" npm package puts one in node_modules/node/bin/node).
//	inspector CLI:      npm exec --prefix e2e --no -- mcp-inspector --cli URL --transport http --method tools/list
//
// The package itself has no code besides its tests.
package e2e
