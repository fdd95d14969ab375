// A remote MCP server through foldproxy's forward proxy (transparent mode),
// as the official TypeScript SDK client reaches it. Usage:
//   HTTPS_PROXY=... NODE_USE_ENV_PROXY=1 NODE_EXTRA_CA_CERTS=<foldproxy CA> \
//   SECRET=... node ts_remote_client.mjs SDK_DIR http|sse URL
// Node's fetch reads no proxy variable by default: NODE_USE_ENV_PROXY=1
// (Node 22.21+, 24.5+) makes it use HTTPS_PROXY, as a user must set it.
// It prints one JSON line: what the client saw, for the Go test to check.
import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdk, mode, url] = process.argv.slice(2);
const esm = (p) => pathToFileURL(path.join(sdk, "dist/esm", p)).href;
const { Client } = await import(esm("client/index.js"));
// The client's own credentials (an OAuth access token in real use).
const requestInit = { headers: { Authorization: process.env.AUTH } };
let transport;
if (mode === "sse") {
  const { SSEClientTransport } = await import(esm("client/sse.js"));
  transport = new SSEClientTransport(new URL(url), { requestInit });
} else {
  const { StreamableHTTPClientTransport } = await import(esm("client/streamableHttp.js"));
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
}
const client = new Client({ name: "foldproxy-e2e-ts-remote", version: "1.0.0" });
await client.connect(transport);

const out = {};
const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text);
const { tools } = await client.listTools();
out.tools = tools.map((t) => t.name);
const created = JSON.parse(text(await client.callTool({ name: "branch_create", arguments: { description: "echo through the proxy", budget: 4000 } }))[0]);
out.branch = created.branch_id;
const echo = await client.callTool({ name: "echo", arguments: { message: "the key is " + process.env.SECRET } });
out.echo = text(echo);
out.status = text(await client.callTool({ name: "branch_status", arguments: {} })).join("\n");
out.returned = text(await client.callTool({ name: "branch_return", arguments: { message: "echoed" } })).join("\n");
out.sessionId = transport.sessionId || "";
if (mode !== "sse") {
  await transport.terminateSession();
}
await client.close();
console.log(JSON.stringify(out));
