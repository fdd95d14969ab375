// A cut result through foldproxy, as the official TypeScript SDK client
// (which Claude Code uses) receives it. Usage:
//   node ts_cut_client.mjs SDK_DIR FOLDPROXY CONFIG STATE FILE BUDGET
// It prints one JSON line: what the client saw, for the Go test to check.
import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdk, bin, config, state, file, budget] = process.argv.slice(2);
const esm = (p) => pathToFileURL(path.join(sdk, "dist/esm", p)).href;
const { Client } = await import(esm("client/index.js"));
const { StdioClientTransport } = await import(esm("client/stdio.js"));

const transport = new StdioClientTransport({ command: bin, args: ["serve", "--config", config, "--state", state], stderr: "inherit" });
const client = new Client({ name: "foldproxy-e2e-ts", version: "1.0.0" });
await client.connect(transport);

const out = {};
// The client learns the tools' output schemas from tools/list; wait for
// the upstream's tools to appear.
for (let i = 0; ; i++) {
  const { tools } = await client.listTools();
  const t = tools.find((t) => t.name === "fs__read_text_file");
  if (t) { out.outputSchema = !!t.outputSchema; break; }
  if (i > 400) throw new Error("fs__read_text_file never listed");
  await new Promise((r) => setTimeout(r, 50));
}
const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text);
const created = JSON.parse(text(await client.callTool({ name: "branch_create", arguments: { description: "read a large file", budget: Number(budget) } }))[0]);
out.branch = created.branch_id;
try {
  const res = await client.callTool({ name: "fs__read_text_file", arguments: { path: file } });
  out.isError = !!res.isError;
  out.texts = text(res);
  out.structured = res.structuredContent !== undefined;
} catch (e) {
  out.error = String(e);
}
const notice = (out.texts || []).find((t) => t.startsWith("[foldproxy]") && t.includes("branch_recall"));
const m = notice && notice.match(/handle "([^"]+)"/);
if (m) {
  out.handle = m[1];
  let offset = 0, rest = "";
  for (let i = 0; i < 1000; i++) {
    const page = JSON.parse(text(await client.callTool({ name: "branch_recall", arguments: { handle: out.handle, offset } }))[0]);
    rest += page.text;
    if (page.done) break;
    offset = page.next_offset;
  }
  out.rest = rest;
}
console.log(JSON.stringify(out));
await client.close();
