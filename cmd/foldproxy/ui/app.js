// foldproxy's live page: reads /ui/data every 2 s and renders it. Every
// text goes in with textContent (never as HTML); every figure carries a
// data-figure name, so that a test can read what the page shows.
"use strict";

const fmt = new Intl.NumberFormat("en");

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "figure") e.dataset.figure = v;
    else if (k === "css") Object.assign(e.style, v); // CSSOM: allowed by the page's CSP, unlike a style attribute
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function num(n, figure) {
  return el("td", { class: "num", figure }, fmt.format(n || 0));
}

function head(...names) {
  return el("tr", {}, ...names.map((n) => el("th", { class: n.startsWith("#") ? "num" : "" }, n.replace(/^#/, ""))));
}

function fill(id, rows, empty) {
  const t = document.getElementById(id);
  t.replaceChildren(...rows);
  if (rows.length <= 1 && empty) t.append(el("tr", {}, el("td", { class: "none", colspan: "9" }, empty)));
}

function when(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? "" : d.toLocaleTimeString();
}

function left(deadline, now) {
  if (!deadline) return "no deadline";
  const s = Math.round((new Date(deadline) - now) / 1000);
  return s > 0 ? s + " s left" : "deadline passed";
}

function renderSessions(data) {
  const roots = new Map();
  for (const s of data.sessions) {
    const root = s.branches.find((b) => b.depth === 0);
    if (root) roots.set(s.session, root);
  }
  const rows = [head("session", "#calls", "#received", "#forwarded", "#cuts", "#branches", "#model context before", "#after folding")];
  for (const s of data.report.sessions) {
    const f = "session/" + s.session + "/";
    const mc = (roots.get(s.session) || {}).model_context;
    rows.push(el("tr", {},
      el("td", { class: "id" }, s.session || "-"),
      num(s.calls, f + "calls"), num(s.result_tokens, f + "result_tokens"), num(s.delivered_tokens, f + "delivered_tokens"),
      num(s.cuts, f + "cuts"), num(s.branches, f + "branches"),
      mc ? num(mc.tokens_before, f + "model_before") : el("td", { class: "num muted" }, "-"),
      mc ? num(mc.tokens_after, f + "model_after") : el("td", { class: "num muted" }, "-")));
  }
  fill("sessions", rows, "no tool call yet");
}

function renderTrees(data) {
  const now = new Date();
  const box = document.getElementById("trees");
  const trees = data.sessions.map((s) => {
    const nodes = s.branches.map((b) => {
      const pct = b.budget_total > 0 ? Math.min(100, (100 * b.budget_used) / b.budget_total) : 0;
      const f = "branch/" + b.id + "/";
      return el("div", { class: "node level-" + (b.level || "normal") },
        el("div", { css: { paddingLeft: b.depth * 1.2 + "rem" } },
          el("span", { class: "id" }, b.id), " ", b.description || (b.depth === 0 ? "main thread" : "")),
        el("div", {},
          el("span", { figure: f + "used" }, fmt.format(b.budget_used)), " / ",
          el("span", { figure: f + "budget" }, b.budget_total > 0 ? fmt.format(b.budget_total) : "unlimited"),
          el("div", { class: "bar" }, el("span", { css: { width: pct.toFixed(1) + "%" } }))),
        el("div", { figure: f + "level" }, b.level || "normal"),
        el("div", { class: "status-" + b.status, figure: f + "status" }, b.status),
        el("div", { class: "muted" }, b.status === "active" ? left(b.deadline, now) : "closed " + when(b.closed)),
        el("div", { class: "muted" }, b.reason || "", b.cut_count ? " · " + b.cut_count + " cut (recall " + (b.cut_handles || []).join(", ") + ")" : ""));
    });
    return el("div", { class: "tree" }, el("h3", {}, "session ", el("span", { class: "id" }, s.session)), ...nodes);
  });
  box.replaceChildren(...(trees.length ? trees : [el("div", { class: "none" }, "no session yet")]));
}

function renderFolds(data) {
  const rows = [head("session", "branch", "status", "#received inside (hidden)", "#returned to parent", "recall")];
  for (const b of data.report.branches) {
    if (b.depth === 0 || !b.status || b.status === "active") continue;
    const f = "fold/" + b.session + "/" + b.branch + "/";
    rows.push(el("tr", {},
      el("td", { class: "id" }, b.session), el("td", { class: "id" }, b.branch),
      el("td", { class: "status-" + b.status, figure: f + "status" }, b.status + (b.reason ? " (" + b.reason + ")" : "")),
      num(b.delivered_tokens, f + "hidden"), num(b.returned_tokens, f + "returned"),
      el("td", {}, el("code", {}, 'branch_recall {"branch_id":"' + b.branch + '"}'))));
  }
  fill("folds", rows, "no branch has returned yet");
  const auto = document.getElementById("autofolds");
  const af = [head("time", "session", "kind", "tool", "what it hid", "#tokens", "recall handle")];
  for (const a of data.report.model.folds) {
    af.push(el("tr", {}, el("td", {}, when(a.time)), el("td", { class: "id" }, a.session), el("td", {}, a.kind), el("td", {}, a.tool || ""),
      el("td", {}, a.brief || ""), num(a.tokens, "autofold/" + a.handle + "/tokens"), el("td", { class: "id" }, a.handle)));
  }
  const t = el("table", {});
  fill1(t, af, "no automatic fold yet");
  auto.replaceChildren(el("h3", {}, "Automatic folds of the model wire"), t);
}

function fill1(t, rows, empty) {
  t.replaceChildren(...rows);
  if (rows.length <= 1 && empty) t.append(el("tr", {}, el("td", { class: "none", colspan: "9" }, empty)));
}

// The model wire, per model session and in total: tokens of the
// conversations as the agent sent them and as forwarded, automatic folds,
// and the input the model APIs billed as their answers' usage reports it
// (at the configured cache prices), against the estimate without
// foldproxy.
function renderBilling(data) {
  const box = document.getElementById("billing");
  const m = data.report.model;
  const rows = [head("session", "#requests", "#received", "#forwarded", "#folds", "#input", "#cache read", "#cache write", "#output", "#billed", "#without (est.)", "#saved")];
  const row = (name, s, f) => {
    const saved = s.billed_input_without_estimate > 0 ? (100 * (1 - s.billed_input / s.billed_input_without_estimate)).toFixed(1) + "%" : "-";
    return el("tr", {}, el("td", { class: "id" }, name), num(s.requests, f + "requests"), num(s.tokens_received, f + "received"),
      num(s.tokens_forwarded, f + "forwarded"), num(s.folds, f + "folds"), num(s.usage_input, f + "input"), num(s.usage_cache_read, f + "cache_read"),
      num(s.usage_cache_write, f + "cache_write"), num(s.usage_output, f + "output"), num(Math.round(s.billed_input), f + "billed"),
      num(Math.round(s.billed_input_without_estimate), f + "without"), el("td", { class: "num", figure: f + "saved" }, saved));
  };
  for (const s of m.sessions) rows.push(row(s.session, s, "model/" + s.session + "/"));
  if (m.sessions.length > 0) rows.push(row("(total)", m.total, "model/total/"));
  const t = el("table", {});
  fill1(t, rows, "no model request yet");
  const parts = [t];
  if (m.total.observe_would_fold > 0) {
    parts.push(el("p", { class: "muted" }, "observe mode, nothing folded: would have folded " + fmt.format(m.total.observe_would_fold) +
      " results, keeping " + fmt.format(m.total.observe_would_save_tokens) + " tokens out of the requests"));
  }
  parts.push(el("p", { class: "muted" }, "Estimate without foldproxy: " + m.estimate_method));
  box.replaceChildren(...parts);
}

function renderRest(data) {
  const c = data.report.compression;
  fill("compression", [
    el("tr", {}, el("td", {}, "tokens received inside branches"), num(c.tokens_inside_branches, "compression/inside")),
    el("tr", {}, el("td", {}, "tokens returned to parents"), num(c.tokens_returned, "compression/returned")),
    el("tr", {}, el("td", {}, "ratio"), el("td", { class: "num", figure: "compression/ratio" }, c.ratio ? c.ratio.toFixed(1) + ":1" : "n/a")),
  ]);
  const rows = [head("time", "upstream", "tool", "#result", "#delivered", "outcome", "branch")];
  data.report.largest_results.forEach((r, i) => {
    const f = "largest/" + i + "/";
    rows.push(el("tr", {}, el("td", {}, when(r.time)), el("td", {}, r.upstream || "(foldproxy)"), el("td", { figure: f + "tool" }, r.tool || r.method),
      num(r.result_tokens, f + "result_tokens"), num(r.delivered_tokens, f + "delivered_tokens"), el("td", {}, r.outcome), el("td", { class: "id" }, r.branch)));
  });
  fill("largest", rows, "no result yet");
  const red = [head("rule", "#count")];
  for (const r of data.report.redactions) red.push(el("tr", {}, el("td", {}, r.rule), num(r.count, "redaction/" + r.rule)));
  fill("redactions", red, "none");
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const resp = await fetch("/ui/data", { cache: "no-store", credentials: "same-origin" });
    if (!resp.ok) throw new Error(resp.status + " " + (await resp.text()).trim());
    const data = await resp.json();
    renderSessions(data);
    renderTrees(data);
    renderFolds(data);
    renderBilling(data);
    renderRest(data);
    status.textContent = data.report.records + " audit records · updated " + when(data.generated);
    document.body.dataset.loaded = data.generated;
  } catch (err) {
    status.textContent = "cannot read /ui/data: " + err.message;
  }
}

refresh();
setInterval(refresh, 2000);
