#include "proxy/status/status_page.hpp"

namespace nackguard::status {

namespace {

// The refresh period below is kPageRefreshSeconds (3 s).
constexpr std::string_view kPage = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nackguard status</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; background: #fafbfc; }
h1 { font-size: 1.3em; margin: 0 0 .2em; }
h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
.meta { color: #5b6475; }
table { border-collapse: collapse; background: #fff; min-width: 40em; }
th, td { border: 1px solid #d9dde5; padding: .25em .6em; text-align: left; white-space: nowrap; }
th { background: #eef1f5; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.wrap { white-space: normal; min-width: 30em; }
tr.outage td { background: #fff1f0; }
.dead_letter { color: #b3261e; font-weight: 600; }
.delay { color: #8a5a00; }
#error { display: none; background: #b3261e; color: #fff; padding: .4em .8em; margin: .6em 0; }
.id { font-family: ui-monospace, monospace; }
</style>
</head>
<body>
<h1>nackguard status</h1>
<div class="meta" id="meta">loading&hellip;</div>
<div id="error"></div>
<h2>Messages returned most (top 50 in the tracker)</h2>
<table id="top"><thead><tr><th>queue</th><th>message</th><th>returns</th><th>deliveries</th>
<th>first return</th><th>last return</th><th>next</th></tr></thead><tbody></tbody></table>
<h2 id="queues-title">Queues</h2>
<table id="queues"><thead><tr><th>queue</th><th>deliveries</th><th>returns</th><th>requeued</th>
<th>delayed</th><th>republished</th><th>dead-lettered (by reason)</th><th>fallbacks</th>
<th>outage</th><th>policy</th><th>delivery limit</th></tr></thead><tbody></tbody></table>
<h2 id="queue-limits-title">Delivery limits (the broker's, per queue)</h2>
<table id="queue-limits"><thead><tr><th>vhost</th><th>queue</th><th>type</th><th>limit</th>
<th>source</th><th>learnt from</th><th>state</th><th>error</th></tr></thead><tbody></tbody></table>
<h2>Limits</h2>
<table id="limits"><tbody></tbody></table>
<h2>Config</h2>
<table id="config"><tbody></tbody></table>
<script>
"use strict";
const REFRESH_MS = 3000;
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}
function fill(id, rows, draw) {
  const body = document.querySelector("#" + id + " tbody");
  const fresh = document.createElement("tbody");
  for (const item of rows) { const tr = document.createElement("tr"); draw(tr, item); fresh.appendChild(tr); }
  body.replaceWith(fresh);
}
function when(t) { return t ? t.replace("T", " ").replace(/\.\d+Z$/, "Z") : ""; }
function nextText(n) {
  if (!n) return "";
  let text = n.action;
  if (n.action === "delay") text += " " + n.delay_ms + " ms";
  if (n.reason) text += " (" + n.reason + ")";
  if (n.when === "next_delivery") text += " at next delivery";
  return text;
}
function deadLetters(d) {
  const parts = [];
  for (const [reason, n] of Object.entries(d)) if (n) parts.push(reason + " " + n);
  return parts.length ? parts.join(", ") : "0";
}
function sum(d) { return Object.values(d).reduce((a, b) => a + b, 0); }
function draw(s) {
  document.getElementById("meta").textContent = "nackguard " + s.nackguard.version + " on " +
      s.nackguard.host + ", started " + when(s.nackguard.started_at) + "; updated " +
      when(s.nackguard.now) + "; refreshed every " + REFRESH_MS / 1000 + " s";
  fill("top", s.top, (tr, m) => {
    tr.dataset.id = m.id;
    cell(tr, m.queue === null ? "(forgotten)" : m.queue, "queue");
    cell(tr, m.identity !== undefined ? m.identity : "#" + m.id, "id");
    cell(tr, m.returns, "n returns");
    cell(tr, m.deliveries, "n");
    cell(tr, when(m.first_return));
    cell(tr, when(m.last_return));
    cell(tr, nextText(m.next), m.next ? m.next.action : "");
  });
  document.getElementById("queues-title").textContent =
      "Queues (last " + s.window_seconds + " s; totals since start in the tooltip)";
  fill("queues", s.queues, (tr, q) => {
    const w = q.window || q.total;
    if (q.outage) tr.className = "outage";
    tr.title = "since start: " + q.total.deliveries + " deliveries, " + q.total.returns +
        " returns, " + sum(q.total.dead_letters) + " dead-lettered";
    cell(tr, q.queue, "queue");
    cell(tr, w.deliveries, "n");
    cell(tr, w.returns, "n");
    cell(tr, w.returns_became.forwarded, "n");
    cell(tr, w.returns_became.delayed, "n");
    cell(tr, w.returns_became.republished, "n");
    cell(tr, deadLetters(w.dead_letters));
    cell(tr, w.fallbacks, "n");
    cell(tr, q.outage ? "yes, ratio " + q.outage_ratio.toFixed(2) :
        q.outage_ratio === null ? "no" : "no, ratio " + q.outage_ratio.toFixed(2));
    cell(tr, q.policy);
    const dl = q.delivery_limit;
    cell(tr, dl ? (dl.limit === null ? "none" : String(dl.limit)) + " (" + dl.from + ")" : "");
  });
  const queueLimits = s.queue_limits || [];
  for (const id of ["queue-limits-title", "queue-limits"]) {
    document.getElementById(id).style.display = queueLimits.length ? "" : "none";
  }
  fill("queue-limits", queueLimits, (tr, q) => {
    if (q.state === "failed") tr.className = "outage";
    cell(tr, q.vhost);
    cell(tr, q.queue, "queue");
    cell(tr, q.type);
    cell(tr, q.limit === null ? "none" : q.limit, "n");
    cell(tr, q.source);
    cell(tr, q.learnt_from);
    cell(tr, q.state);
    cell(tr, q.error, "wrap");
  });
  const l = s.limits;
  const limits = [
    ["tracker entries", l.tracker_entries + " of " + l.tracker_max_entries + " (" +
        l.tracker_evictions + " evicted)"],
    ["retained body bytes", l.retained_body_bytes + " of " + l.retained_body_bytes_limit +
        " (" + l.retained_body_refusals + " refused)"],
    ["client connections", l.client_connections],
    ["queues", l.queues + " (labels up to " + l.max_queue_labels + ")"]];
  fill("limits", limits, (tr, r) => { cell(tr, r[0]); cell(tr, r[1]); });
  const c = s.config;
  const r = c.last_reload;
  const config = [["config file", c.file], ["policies", c.policies + " from " + c.policies_dir],
      ["last reload", r ? when(r.at) + ": " + r.result + (r.message ? ": " + r.message : "") :
          "none since start"],
      ["reloads", c.reloads.ok + " ok, " + c.reloads.error + " failed"],
      ["identities", c.show_identities ? "shown" : "hidden (metrics.show_identities: false)"]];
  fill("config", config, (tr, r) => { cell(tr, r[0]); cell(tr, r[1]); });
}
async function refresh() {
  const error = document.getElementById("error");
  try {
    const reply = await fetch("status.json", {cache: "no-store"});
    if (!reply.ok) throw new Error("status.json answered " + reply.status);
    draw(await reply.json());
    error.style.display = "none";
  } catch (e) {
    error.textContent = "cannot refresh: " + e.message + " (showing the last data)";
    error.style.display = "block";
  }
}
refresh();
setInterval(refresh, REFRESH_MS);
</script>
</body>
</html>
)html";

}  // namespace

std::string_view status_page() {
  return kPage;
}

}  // namespace nackguard::status
