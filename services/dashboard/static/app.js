// borg-orchestrator live dashboard. Hand-written, no framework, no network access beyond this server.
//
// Data: /events (server-sent events) sends one "snapshot" on connect, then at most one "diff" per
// second with only what changed since. Messages are merged into plain Maps; rendering happens in
// requestAnimationFrame, only for the sections that changed, and the node list is virtualised (only
// the rows in view exist in the DOM), so hundreds or thousands of nodes do not freeze the page.
"use strict";
(() => {
  const ROW_H = 30;
  const MAX_DECISION_ROWS = 200;
  // index = the server's sparkline value (services/dashboard/nodes.py: REGIMES, then "unknown")
  const REGIMES = ["none", "llc", "membw", "core", "mixed", "unknown"];
  const AGENTS = ["reliability", "efficiency", "admission"];

  const S = {
    config: { jaeger_url: "http://127.0.0.1:16686", stale_ms: 60000, history_ms: 600000, max_decisions: 500 },
    version: 0,
    clockOffset: 0, // server time minus browser time
    decisions: new Map(),
    decisionOrder: [],
    seenDecisions: new Set(),
    nodes: new Map(),
    nodeOrder: [],
    cluster: { clusters: [], unlisted: [] },
    pipeline: null,
    deadletters: { by_source: [], last: [] },
    load: new Map(), // node -> {live, forecast, chart, error} (services/dashboard/load.py)
    loadSummary: null,
    drift: [], // one entry per model: {model, report (drift.v1 as dumped), history}
    rollouts: [], // one entry per model: {model, latest (rollouts.v1 as dumped), moves (newest first)}
    counts: {},
    connected: false,
    lastMessage: 0,
    stats: { messages: 0, maxApplyMs: 0, maxRenderMs: 0, maxLoadDriftMs: 0, renders: 0 }, // main-thread cost, for tests and curiosity
  };
  const dirty = { header: true, decisions: true, order: true, nodes: true, cluster: true, pipeline: true, deadletters: true, load: true, drift: true, rollouts: true };
  let frame = 0;
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------ helpers

  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (v) => (v === null || v === undefined ? "" : String(v).replace(/[&<>"']/g, (c) => ESC[c]));
  const serverNow = () => Date.now() + S.clockOffset;
  const pad = (n) => String(n).padStart(2, "0");
  function clock(ms) {
    const d = new Date(ms);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  function age(ms) {
    if (!ms) return "–";
    const s = Math.max(0, Math.round((serverNow() - ms) / 1000));
    if (s < 90) return `${s}s`;
    if (s < 5400) return `${Math.round(s / 60)}m`;
    return `${Math.round(s / 3600)}h`;
  }
  const fmt = (v, d = 2) => (typeof v === "number" ? v.toFixed(d) : "–");
  const horizon = (s) => (s >= 3600 && s % 3600 === 0 ? `${s / 3600}h` : s >= 60 && s % 60 === 0 ? `${s / 60}m` : `${s}s`);
  const traceUrl = (id) => `${S.config.jaeger_url}/trace/${encodeURIComponent(id)}`;
  const targetText = (t) => (t.namespace ? `${t.kind} ${t.namespace}/${t.name}` : `${t.kind} ${t.name}`);

  function schedule(...parts) {
    for (const p of parts) dirty[p] = true;
    if (!frame) frame = requestAnimationFrame(render);
  }

  // sparkline over the configured history, ending at server time now
  function spark(points, cls, max) {
    const t1 = serverNow();
    const t0 = t1 - S.config.history_ms;
    if (!points || points.length === 0) return '<svg class="spark" viewBox="0 0 64 18"></svg>';
    const top = Math.max(max || 0, ...points.map((p) => p[1]), 1e-9);
    const xy = points
      .filter((p) => p[0] >= t0)
      .map((p) => `${(((p[0] - t0) / (t1 - t0)) * 64).toFixed(1)},${(17 - (p[1] / top) * 15).toFixed(1)}`);
    const line = xy.length === 1 ? `${xy[0]} ${(64).toFixed(1)},${xy[0].split(",")[1]}` : xy.join(" ");
    return `<svg class="spark" viewBox="0 0 64 18" preserveAspectRatio="none"><polyline class="${cls}" points="${line}"/></svg>`;
  }

  // a sparkline over the points' own time span (drift reports carry traffic time, not wall time)
  function sparkSpan(points, cls, max) {
    if (!points || points.length === 0) return '<svg class="spark" viewBox="0 0 64 18"></svg>';
    const t0 = points[0][0];
    const t1 = Math.max(points[points.length - 1][0], t0 + 1);
    const top = Math.max(max || 0, ...points.map((p) => p[1]), 1e-9);
    const xy = points.map((p) => `${(((p[0] - t0) / (t1 - t0)) * 64).toFixed(1)},${(17 - (p[1] / top) * 15).toFixed(1)}`);
    const line = xy.length === 1 ? `0,${xy[0].split(",")[1]} 64,${xy[0].split(",")[1]}` : xy.join(" ");
    const limit = max ? `<line x1="0" x2="64" y1="${(17 - (max / top) * 15).toFixed(1)}" y2="${(17 - (max / top) * 15).toFixed(1)}"/>` : "";
    return `<svg class="spark" viewBox="0 0 64 18" preserveAspectRatio="none">${limit}<polyline class="${cls}" points="${line}"/></svg>`;
  }

  function regimeStrip(points) {
    const t1 = serverNow();
    const t0 = t1 - S.config.history_ms;
    if (!points || points.length === 0) return '<svg class="spark" viewBox="0 0 64 18"></svg>';
    const rects = [];
    for (let i = 0; i < points.length; i++) {
      const [ts, idx] = points[i];
      if (ts < t0) continue;
      const next = i + 1 < points.length ? points[i + 1][0] : t1;
      const x = ((ts - t0) / (t1 - t0)) * 64;
      const w = Math.max(1, ((Math.min(next, t1) - ts) / (t1 - t0)) * 64);
      rects.push(`<rect class="r-${REGIMES[idx] || "none"}" x="${x.toFixed(1)}" y="2" width="${w.toFixed(1)}" height="14"/>`);
    }
    return `<svg class="spark" viewBox="0 0 64 18" preserveAspectRatio="none">${rects.join("")}</svg>`;
  }

  // a series on the wire is {s: first bucket ms, d: bucket ms, v: [value or null per bucket]}
  function expand(c) {
    const out = [];
    if (!c || c.s === null) return out;
    for (let k = 0; k < c.v.length; k++) if (c.v[k] !== null) out.push([c.s + k * c.d, c.v[k]]);
    return out;
  }

  // merge changed sparkline points (same bucket replaced, newer appended) and drop what left the window
  function mergePoints(old, fresh) {
    if (!old || old.length === 0) return fresh;
    if (fresh.length === 0) return old;
    const byTs = new Map(old.map((p) => [p[0], p]));
    for (const p of fresh) byTs.set(p[0], p);
    const merged = [...byTs.values()].sort((a, b) => a[0] - b[0]);
    const cutoff = merged[merged.length - 1][0] - S.config.history_ms;
    return merged.filter((p) => p[0] >= cutoff);
  }

  // ------------------------------------------------------------------ data

  function apply(msg) {
    const t0 = performance.now();
    applyMessage(msg);
    S.stats.messages++;
    S.stats.maxApplyMs = Math.max(S.stats.maxApplyMs, performance.now() - t0);
  }

  function applyMessage(msg) {
    const full = msg.type === "snapshot";
    if (full) {
      S.decisions.clear();
      S.nodes.clear();
      S.load.clear();
      if (msg.config) S.config = msg.config;
    }
    S.version = msg.version;
    S.clockOffset = msg.now_ms - Date.now();
    S.lastMessage = Date.now();
    if (msg.decisions.length) {
      for (const row of msg.decisions) S.decisions.set(row.id, row);
      S.decisionOrder = [...S.decisions.values()].sort((a, b) => b.ts - a.ts);
      while (S.decisionOrder.length > S.config.max_decisions) S.decisions.delete(S.decisionOrder.pop().id);
      dirty.decisions = true;
    }
    if (msg.nodes.length || msg.removed_nodes.length || full) {
      for (const row of msg.nodes) {
        // a diff carries only the signals and series that changed: merge them into what we have
        const old = full ? null : S.nodes.get(row.node);
        const merged = old ? { ...old, ...row, series: { ...old.series } } : { regime: null, anomaly: null, risk: null, pod_regime: null, ...row, series: {} };
        for (const k of Object.keys(row.series)) {
          const fresh = expand(row.series[k]);
          merged.series[k] = old ? mergePoints(old.series[k], fresh) : fresh;
        }
        S.nodes.set(row.node, merged);
      }
      for (const name of msg.removed_nodes) S.nodes.delete(name);
      dirty.order = true;
    }
    if (msg.load && (msg.load.length || msg.removed_load.length || full)) {
      // a diff carries the live part always and the chart part only when it changed: merge by key
      for (const row of msg.load) S.load.set(row.node, { ...(S.load.get(row.node) || {}), ...row });
      for (const name of msg.removed_load) S.load.delete(name);
      dirty.load = true;
    }
    if (msg.load_summary) {
      S.loadSummary = msg.load_summary;
      dirty.load = true;
    }
    if (msg.drift) {
      S.drift = msg.drift;
      dirty.drift = true;
    }
    if (msg.rollouts) {
      S.rollouts = msg.rollouts;
      dirty.rollouts = true;
    }
    if (msg.cluster) {
      S.cluster = msg.cluster;
      dirty.cluster = true;
    }
    S.pipeline = msg.pipeline;
    if (msg.pipeline.deadletters) {
      S.deadletters = msg.pipeline.deadletters;
      dirty.deadletters = true;
    }
    S.counts = msg.counts;
    schedule("header", "nodes", "pipeline");
  }

  function connect() {
    const source = new EventSource("/events");
    const onMessage = (e) => {
      S.connected = true;
      apply(JSON.parse(e.data));
    };
    source.addEventListener("snapshot", onMessage);
    source.addEventListener("diff", onMessage);
    source.onopen = () => schedule("header");
    source.onerror = () => {
      S.connected = false; // EventSource reconnects by itself; the server then sends a fresh snapshot
      schedule("header");
    };
  }

  // ------------------------------------------------------------------ rendering

  function render() {
    frame = 0;
    const t0 = performance.now();
    if (dirty.header) renderHeader();
    if (dirty.decisions && !$("decision-pause").checked) renderDecisions();
    if (dirty.order) sortNodes();
    if (dirty.nodes) renderNodes();
    if (dirty.cluster) renderCluster();
    if (dirty.pipeline) renderPipeline();
    if (dirty.deadletters) renderDeadLetters();
    const t1 = performance.now();
    if (dirty.load) renderLoad();
    if (dirty.drift) renderDrift();
    if (dirty.rollouts) renderRollouts();
    S.stats.maxLoadDriftMs = Math.max(S.stats.maxLoadDriftMs, performance.now() - t1);
    document.body.dataset.version = String(S.version);
    S.stats.renders++;
    S.stats.maxRenderMs = Math.max(S.stats.maxRenderMs, performance.now() - t0);
  }

  function renderHeader() {
    dirty.header = false;
    const live = S.connected && Date.now() - S.lastMessage < 5000;
    const conn = $("conn");
    conn.className = `conn ${live ? "conn-live" : "conn-off"}`;
    conn.textContent = live ? "live" : S.lastMessage ? `reconnecting (last update ${age(S.lastMessage + S.clockOffset)} ago)` : "connecting…";
    const c = S.counts;
    if (c.nodes !== undefined) {
      let stale = 0;
      const now = serverNow();
      for (const n of S.nodes.values()) if (now - n.last_ts > S.config.stale_ms) stale++;
      $("summary").innerHTML =
        `<b>${c.nodes}</b> nodes (<b>${stale}</b> stale` +
        (c.unknown_nodes ? `, <b>${c.unknown_nodes}</b> unknown` : "") +
        (c.risk_out_of_range ? `, <b>${c.risk_out_of_range}</b> risk out of range` : "") +
        `) · <b>${c.decisions_seen}</b> decisions` +
        ` · <b>${c.deadletters}</b> dead letters` + (S.config.topic_prefix ? ` · topics <b>${esc(S.config.topic_prefix)}*</b>` : "");
    }
    const j = $("jaeger-link");
    j.href = S.config.jaeger_url;
  }

  function decisionMatches(d, q) {
    if (!q) return true;
    const hay = [
      d.target.key, d.action, d.reason, d.mode, d.result ? d.result.outcome : "awaiting",
      ...d.proposals.map((p) => `${p.agent} ${p.kind}`),
    ].join(" ").toLowerCase();
    return q.split(/\s+/).every((w) => hay.includes(w));
  }

  function proposalHtml(p) {
    const payload = Object.entries(p.payload || {}).map(([k, v]) => `${k}=${v}`).join(" ");
    const evidence = p.evidence.join("\n") + (p.evidence_more ? `\n… ${p.evidence_more} more` : "");
    const title = `${p.agent} ${p.kind} ${p.target}\nscore ${p.score}${payload ? `\n${payload}` : ""}${evidence ? `\nevidence:\n${evidence}` : ""}`;
    return (
      `<div class="proposal agent-${esc(p.agent)}${p.chosen ? " chosen" : ""}" data-agent="${esc(p.agent)}" data-kind="${esc(p.kind)}" title="${esc(title)}">` +
      `<span class="agent">${esc(p.agent)}</span><span class="score">${fmt(p.score)}</span>` +
      `<span class="kind">${esc(p.kind)}${payload ? ` <span class="muted">${esc(payload)}</span>` : ""}</span>` +
      `<span class="ptarget">${esc(p.target)}${p.chosen ? ' · <span class="tick">✓ chosen</span>' : ""}</span>` +
      `<span class="bar" style="width:${Math.round(p.score * 100)}%"></span></div>`
    );
  }

  function renderDecisions() {
    dirty.decisions = false;
    const q = $("decision-filter").value.trim().toLowerCase();
    const rows = [];
    let matched = 0;
    for (const d of S.decisionOrder) {
      if (!decisionMatches(d, q)) continue;
      matched++;
      if (rows.length >= MAX_DECISION_ROWS) continue;
      const r = d.result;
      const outcome = r ? r.outcome : "awaiting";
      const fresh = !S.seenDecisions.has(d.id);
      S.seenDecisions.add(d.id);
      // the trace page here (a waterfall from Jaeger's query API); Jaeger's own UI where it has one
      const trace = d.trace_id
        ? `<a class="trace" href="/trace/${encodeURIComponent(d.id)}" target="_blank" rel="noopener">trace ↗</a>` +
          `<a class="jaeger" href="${esc(traceUrl(d.trace_id))}" target="_blank" rel="noopener">jaeger</a>`
        : '<span class="muted">no trace</span>';
      const proposals = d.proposals.length ? d.proposals.map(proposalHtml).join("") : '<span class="muted">no proposals</span>';
      rows.push(
        `<article class="decision${fresh ? " fresh" : ""}" data-decision-id="${esc(d.id)}" data-outcome="${esc(outcome)}">` +
        `<div class="d-head"><time title="${esc(new Date(d.ts).toISOString())}">${clock(d.ts)}</time>` +
        `<span class="d-target">${esc(targetText(d.target))}</span>` +
        `<span class="d-action${d.action === "none" ? " none" : ""}">${esc(d.action)}</span>` +
        `<span class="badge o-${esc(outcome)}" title="ActionResult outcome">${esc(r ? outcome : "awaiting result")}</span>` +
        `<span class="d-mode">${esc(d.mode)} · ${d.proposals.length} weighed${d.duplicates ? ` · replayed ×${d.duplicates}` : ""}</span>` +
        `<span class="d-links">${trace}<a href="/api/decisions/${encodeURIComponent(d.id)}" target="_blank" rel="noopener">json</a></span></div>` +
        `<div class="reason">${esc(d.reason)}</div>` +
        `<div class="proposals">${proposals}</div>` +
        (r ? `<div class="result-msg" title="${esc(r.message)}">${r.api_status ? `API ${r.api_status} · ` : ""}${esc(r.message)}</div>` : "") +
        `</article>`,
      );
    }
    const box = $("decisions");
    box.innerHTML = rows.length ? rows.join("") : `<p class="empty">${S.decisions.size ? "no decision matches the filter" : "waiting for decisions…"}</p>`;
    $("decision-count").textContent = `${Math.min(matched, MAX_DECISION_ROWS)} shown of ${matched}${q ? " matching" : ""} (${S.decisions.size} held)`;
  }

  function attention(n) {
    // "unknown" (the model abstained) and out-of-range risk are no information: they draw no attention
    const regime = n.regime && n.regime.label !== "none" && n.regime.label !== "unknown" ? Math.min(1, (n.regime.slowdown - 1) / 2 + 0.3) : 0;
    return Math.max(n.anomaly ? n.anomaly.score : 0, n.risk && n.risk.in_range !== false ? n.risk.max : 0, regime);
  }

  function sortNodes() {
    dirty.order = false;
    const q = $("node-filter").value.trim().toLowerCase();
    const how = $("node-sort").value;
    const now = serverNow();
    let list = [...S.nodes.values()];
    if (q) list = list.filter((n) => n.node.toLowerCase().includes(q) || (n.regime && n.regime.label === q));
    const byName = (a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0);
    const key = {
      attention: (n) => attention(n),
      anomaly: (n) => (n.anomaly ? n.anomaly.score : -1),
      risk: (n) => (n.risk ? n.risk.max : -1),
      regime: (n) => (n.regime ? REGIMES.indexOf(n.regime.label) : -1),
    }[how];
    if (!key) list.sort(byName);
    else {
      list.sort((a, b) => {
        const sa = now - a.last_ts > S.config.stale_ms;
        const sb = now - b.last_ts > S.config.stale_ms;
        if (sa !== sb) return sa ? 1 : -1; // stale nodes last
        return key(b) - key(a) || byName(a, b);
      });
    }
    S.nodeOrder = list;
    $("node-count").textContent = `${list.length}${q ? ` of ${S.nodes.size}` : ""} nodes`;
    dirty.nodes = true;
  }

  function nodeRow(n, i) {
    const now = serverNow();
    const staleMs = S.config.stale_ms;
    const old = (sig) => (sig && now - sig.ts > staleMs ? " cell-stale" : "");
    const rg = n.regime;
    const abstain = rg && rg.abstain && rg.abstain.length ? rg.abstain.map((r) => r.replace(/_/g, " ")).join(", ") : "";
    const regime = !rg
      ? '<span class="muted">–</span>'
      : rg.label === "unknown"
        ? `<span class="regime r-unknown" title="the model abstained (treated as neutral: no taint, no penalty) · ${esc(abstain)}${rg.ood_score !== null && rg.ood_score !== undefined ? ` · ood score ${fmt(rg.ood_score)} (1 = threshold)` : ""} · model ${esc(rg.model)}">unknown</span><span class="conf abstain">${esc(abstain)}</span>`
        : `<span class="regime r-${esc(rg.label)}" title="raw ${esc(rg.raw)} · worst class ${esc(rg.worst_class)} ×${fmt(rg.slowdown)} · model ${esc(rg.model)}">${esc(rg.label)}</span><span class="conf">${fmt(rg.confidence)}</span>`;
    // the pod-relative model's label (podregimes.v1): a shadow beside the node model's, nothing acts on it
    const pr = n.pod_regime;
    const podRegime = !pr
      ? ""
      : `<span class="pod-regime${old(pr)}" title="pod-relative model (each pod against its own job's pods; shadow, not acted on) · ${pr.label === "unknown" ? esc(pr.abstain.map((r) => r.replace(/_/g, " ")).join(", ")) : `confidence ${fmt(pr.confidence)}`} · model ${esc(pr.model)}">pods: ${esc(pr.label)}</span>`;
    const an = n.anomaly;
    const anomaly = an ? `<span class="${an.is_anomaly ? "anom-hot" : ""}" title="threshold ${fmt(an.threshold)}">${fmt(an.score)}</span>` : '<span class="muted">–</span>';
    const rk = n.risk;
    const oor = rk && rk.in_range === false;
    const risk = !rk
      ? '<span class="muted">–</span>'
      : oor
        ? `<span class="risk-oor" title="computed from inputs outside the model's training range (${rk.tasks_out_of_range} of ${rk.tasks} tasks): shown, never acted on">out of range</span>` +
          rk.horizons.map(([h, p]) => `<span class="risk-h risk-ignored" title="P(failure within ${h}s) = ${fmt(p, 3)} (out of range, ignored)"><i>${horizon(h)}</i> ${fmt(p).replace(/^0\./, ".")}</span>`).join("")
        : rk.horizons.map(([h, p]) => `<span class="risk-h ${p >= 0.7 ? "risk-hot" : p >= 0.4 ? "risk-warm" : ""}" title="P(failure within ${h}s) = ${fmt(p, 3)}"><i>${horizon(h)}</i> ${fmt(p).replace(/^0\./, ".")}</span>`).join("");
    const stale = now - n.last_ts > staleMs;
    return (
      `<div class="nrow node-grid${stale ? " stale" : ""}" style="top:${i * ROW_H}px" data-node="${esc(n.node)}" data-stale="${stale}">` +
      `<span class="name" title="${esc(n.node)}">${esc(n.node)}</span>` +
      `<span class="regime-cell${old(rg)}" data-regime="${rg ? esc(rg.label) : ""}">${regime}${podRegime}</span>` +
      `<span>${regimeStrip(n.series.regime)}</span>` +
      `<span class="num${old(an)}">${anomaly}</span>` +
      `<span>${spark(n.series.anomaly, "a", 1)}</span>` +
      `<span class="${old(rk)}">${risk}</span>` +
      `<span>${spark(n.series.risk, "k", 1)}</span>` +
      `<span class="num muted">${age(n.last_ts)}</span></div>`
    );
  }

  function renderNodes() {
    dirty.nodes = false;
    const box = $("nodes");
    const list = S.nodeOrder;
    $("nodes-spacer").style.height = `${list.length * ROW_H}px`;
    const first = Math.max(0, Math.floor(box.scrollTop / ROW_H) - 5);
    const last = Math.min(list.length, Math.ceil((box.scrollTop + box.clientHeight) / ROW_H) + 5);
    const html = [];
    for (let i = first; i < last; i++) html.push(nodeRow(list[i], i));
    $("nodes-rows").innerHTML = list.length ? html.join("") : `<p class="empty">${S.nodes.size ? "no node matches the filter" : "no node data yet (regimes.v2, anomalies.v1, risk.v2)"}</p>`;
  }

  function intentText(i) {
    if (!i) return '<span class="muted">–</span>';
    const to = i.replicas !== null ? ` → ${i.from_replicas !== null ? `${i.from_replicas}→` : ""}${i.replicas}` : "";
    return `${esc(i.action)}${to} <span class="badge o-${esc(i.outcome || "awaiting")}">${esc(i.outcome || "awaiting result")}</span> <span class="muted">${age(i.ts)} ago</span>`;
  }

  function renderCluster() {
    dirty.cluster = false;
    const parts = [];
    for (const c of S.cluster.clusters) {
      const ns = c.namespace_intent;
      parts.push(
        `<div class="cluster-head" data-cluster="${esc(c.key)}"><b>${esc(c.cluster)}${c.namespace ? ` / ${esc(c.namespace)}` : ""}</b>` +
        `<span>pending pods <b>${c.pending_pods}</b>${c.pending_pods ? ` (oldest ${Math.round(c.oldest_pending_s)}s)` : ""}</span>` +
        `<span>running <b>${c.running_pods}</b></span>` +
        `<span>queue <b class="q-${esc(c.queue_health)}">${esc(c.queue_health)}</b></span>` +
        `<span>nodes ready <b>${c.nodes_ready}/${c.nodes_total}</b></span>` +
        `<span class="muted">reported ${age(c.ts)} ago</span>` +
        (ns ? `<span>orchestrator on namespace: ${intentText(ns)}</span>` : "") + `</div>`,
      );
      if (c.deployments.length) {
        parts.push('<table class="t"><thead><tr><th>deployment</th><th class="num">k8s desired</th><th class="num">ready</th>' +
          '<th class="num">available</th><th>orchestrator\'s latest decision</th><th>relation</th></tr></thead><tbody>');
        for (const d of c.deployments) {
          parts.push(
            `<tr data-deployment="${esc(d.key)}"><td>${esc(d.namespace)}/${esc(d.name)}</td><td class="num">${d.desired}</td>` +
            `<td class="num">${d.ready}</td><td class="num">${d.available}</td><td>${intentText(d.intent)}</td>` +
            `<td><span class="badge s-${esc(d.status)}">${esc(d.status)}</span></td></tr>`,
          );
        }
        parts.push("</tbody></table>");
      }
    }
    if (S.cluster.unlisted.length) {
      parts.push('<div class="subhead">decided on, not in any cluster state</div><table class="t"><tbody>');
      for (const d of S.cluster.unlisted) {
        parts.push(`<tr data-deployment="${esc(d.key)}"><td>${esc(d.key)}</td><td>${intentText(d.intent)}</td><td><span class="badge s-${esc(d.status)}">${esc(d.status)}</span></td></tr>`);
      }
      parts.push("</tbody></table>");
    }
    $("cluster").innerHTML = parts.length ? parts.join("") : '<p class="empty">no cluster state yet (clusterstate.v1)</p>';
  }

  function renderPipeline() {
    dirty.pipeline = false;
    const p = S.pipeline;
    if (!p) return;
    const r = p.reader;
    $("reader-status").innerHTML =
      (r.connected ? (r.caught_up ? "reader live" : "reader catching up…") : '<span class="err">reader disconnected</span>') +
      (r.error ? ` · <span class="err">${esc(r.error)}</span>` : "") +
      (r.monitor_error ? ` · <span class="err">offsets: ${esc(r.monitor_error)}</span>` : "");
    const topics = p.topics.map((t) =>
      `<tr data-topic="${esc(t.topic)}" title="end offset ${t.total}; read by this dashboard: ${t.read}"><td>${esc(t.topic)}` +
      `${t.bad ? ` <span class="err">(${t.bad} undecodable)</span>` : ""}</td><td class="num">${fmt(t.rate, 1)}</td>` +
      `<td class="num">${t.total}</td><td>${spark(expand(t.series), "t")}</td></tr>`).join("");
    const groups = p.groups.map((g) => {
      const top = Object.entries(g.topics).slice(0, 3).map(([k, v]) => `${esc(k)} ${v}`).join(", ");
      return `<tr data-group="${esc(g.group)}" title="${top}"><td>${esc(g.group)}<div class="muted">${top}</div></td>` +
        `<td class="num${g.lag > 1000 ? " err" : ""}">${g.lag}</td><td>${spark(expand(g.series), "k")}</td></tr>`;
    }).join("");
    const bad = r.last_bad.length ? `<div class="subhead">undecodable records read here</div>` + r.last_bad.map((b) => `<div class="err" style="padding:0 10px">${esc(b)}</div>`).join("") : "";
    $("pipeline-topics").innerHTML =
      '<div class="subhead">messages/s per topic</div><table class="t"><thead><tr><th>topic</th><th class="num">msg/s</th>' +
      '<th class="num">offset</th><th>history</th></tr></thead><tbody>' +
      (topics || '<tr><td colspan="4" class="muted">no offsets yet</td></tr>') + "</tbody></table>" + bad;
    $("pipeline-groups").innerHTML =
      '<div class="subhead">consumer lag per group</div><table class="t"><thead><tr><th>group</th><th class="num">lag</th>' +
      '<th>history</th></tr></thead><tbody>' +
      (groups || '<tr><td colspan="3" class="muted">no consumer group commits on these topics</td></tr>') + "</tbody></table>";
  }

  function renderDeadLetters() {
    dirty.deadletters = false;
    const d = S.deadletters;
    const total = S.pipeline ? S.pipeline.deadletter_total : 0;
    const by = d.by_source.map((b) => `<tr><td>${esc(b.source_topic)}</td><td>${esc(b.kind)}</td><td>${esc(b.service)}</td><td class="num">${b.count}</td></tr>`).join("");
    const last = d.last.map((l) =>
      `<details class="dl" data-source="${esc(l.source_topic)}"><summary><span class="muted">${clock(l.ts)}</span> ` +
      `<b>${esc(l.source_topic)}</b>[${l.partition}]@${l.offset} <span class="badge o-failed">${esc(l.kind)}</span> ` +
      `${esc(l.service)}: ${esc(l.error.slice(0, 160))}</summary>` +
      `<pre>${esc(l.error)}</pre>${l.value !== null ? `<div class="muted">original value${l.key !== null ? ` (key ${esc(l.key)})` : ""}:</div><pre>${esc(l.value)}</pre>` : ""}</details>`).join("");
    $("deadletters").innerHTML =
      `<div class="subhead">dead letters: ${total}</div>` +
      (by ? '<table class="t"><thead><tr><th>source topic</th><th>kind</th><th>service</th><th class="num">count</th></tr></thead><tbody>' + by + "</tbody></table>" : "") +
      (last ? `<div class="subhead">last ${d.last.length}</div>${last}` : '<p class="empty">none — nothing was dropped</p>');
  }

  // ------------------------------------------------------------------ load: forecast vs actual

  const HORIZONS = [300, 900, 1800];
  const MAX_LOAD_ROWS = 60;
  const pct = (v) => (typeof v === "number" ? `${(v * 100).toFixed(0)}%` : "–");

  function wapeText(e) {
    if (!e || e.wape === null || e.wape === undefined) return "–";
    return `${e.wape.toFixed(2)}`;
  }

  // actual 5-minute means (solid) and the p50 forecast made 5/15/30 min before each bucket (dashed)
  function loadChart(chart, resource) {
    const W = 130, H = 34;
    if (!chart || chart.s === null || chart.s === undefined) return `<svg class="fc-chart" viewBox="0 0 ${W} ${H}"></svg>`;
    const actual = chart.actual[resource] || [];
    const n = actual.length;
    const series = HORIZONS.map((h) => (chart.forecast[String(h)] || {})[resource] || []);
    let top = 0.05;
    for (const arr of [actual, ...series]) for (const v of arr) if (typeof v === "number") top = Math.max(top, v);
    top = Math.min(1, top * 1.1);
    const x = (k) => (n <= 1 ? W / 2 : (k / (n - 1)) * (W - 4) + 2);
    const y = (v) => (H - 2 - (v / top) * (H - 4)).toFixed(1);
    const line = (arr, cls, until) => {
      const pts = [];
      for (let k = 0; k < arr.length && k <= until; k++) if (typeof arr[k] === "number") pts.push(`${x(k).toFixed(1)},${y(arr[k])}`);
      if (pts.length === 1) pts.push(`${(parseFloat(pts[0]) + 2).toFixed(1)},${pts[0].split(",")[1]}`);
      return pts.length ? `<polyline class="${cls}" points="${pts.join(" ")}"/>` : "";
    };
    const openK = chart.open_end !== null ? Math.round((chart.open_end - chart.s) / chart.d) : n - 1;
    const now = openK >= 0 && openK < n ? `<line class="now" x1="${x(openK).toFixed(1)}" x2="${x(openK).toFixed(1)}" y1="0" y2="${H}"/>` : "";
    // the open bucket's mean is partial: the solid line stops at the last closed bucket
    return `<svg class="fc-chart" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">${now}` +
      HORIZONS.map((h, i) => line(series[i], `f${h}`, n)).join("") + line(actual, "actual", openK - 1) + "</svg>";
  }

  function loadKey(r, resource) {
    // highest p90 at 30 min first (what the efficiency agent and the extender act on), unknown next
    const f = r.forecast;
    if (!f) return -2;
    if (f.status !== "ok") return -1;
    const q = (f.quantiles[resource] || []).find((x) => x[0] === 1800) || (f.quantiles[resource] || []).slice(-1)[0];
    return q ? q[2] : -1;
  }

  function renderLoad() {
    dirty.load = false;
    const resource = $("load-resource").value;
    const q = $("load-filter").value.trim().toLowerCase();
    const sm = S.loadSummary;
    if (sm) {
      const err = sm.error[resource] || {};
      $("load-summary").innerHTML =
        `<span>fleet ${esc(resource)}: ` + HORIZONS.map((h) => {
          const e = err[String(h)];
          return `<span class="fc-w key-${h}" data-h="${h}"><i>${horizon(h)}</i> WAPE <b>${wapeText(e)}</b>` +
            (e ? ` <span class="muted">p90 cov ${fmt(e.p90_coverage)} · n ${e.n}</span>` : "") + "</span>";
        }).join(" · ") + "</span>" +
        `<span>${sm.forecasts} forecasts` + (sm.unknown ? `, <b>${sm.unknown}</b> unknown (` +
          Object.entries(sm.reasons).map(([k, v]) => `${esc(k.replace(/_/g, " "))} ${v}`).join(", ") + ")" : "") + "</span>" +
        (sm.other_schema ? `<span class="err">${sm.other_schema} vectors of another feature schema ignored</span>` : "");
    }
    let list = [...S.load.values()];
    if (q) list = list.filter((r) => r.node.toLowerCase().includes(q) || (r.forecast && r.forecast.status === q));
    list.sort((a, b) => loadKey(b, resource) - loadKey(a, resource) || (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
    $("load-count").textContent = `${Math.min(list.length, MAX_LOAD_ROWS)} shown of ${list.length}${q ? ` matching` : ""} nodes`;
    if (!list.length) {
      $("load").innerHTML = `<p class="empty">${S.load.size ? "no node matches the filter" : "no load data yet (forecasts.v1, features.v1)"}</p>`;
      return;
    }
    const rk = resource === "cpu" ? "cpu" : "memory";
    const rows = list.slice(0, MAX_LOAD_ROWS).map((r) => {
      const lv = r.live;
      const actual = lv ? `<b>${pct(lv[rk])}</b> <span class="muted" title="mean of the open 5-minute bucket so far">5m ${pct(lv["bucket_" + rk])}</span>` : '<span class="muted">–</span>';
      const f = r.forecast;
      let status = '<span class="muted">no forecast</span>';
      let cells = HORIZONS.map(() => '<td class="fc-q muted">–</td>').join("");
      if (f && f.status !== "ok") {
        const why = (f.reason || "").replace(/_/g, " ");
        status = `<span class="fc-unknown" title="no forecast: nothing acts on it · ${f.history_buckets} buckets of history · model ${esc(f.model)}">unknown</span> <span class="muted">${esc(why)}</span>`;
      } else if (f) {
        status = `<span class="muted" title="made at ${esc(new Date(f.window_end).toISOString())} · model ${esc(f.model)}">${age(f.ts)} ago</span>`;
        cells = HORIZONS.map((h) => {
          const x = (f.quantiles[rk] || []).find((e) => e[0] === h);
          return x
            ? `<td class="fc-q" data-h="${h}" title="${horizon(h)} ahead: p50 ${pct(x[1])}, p90 ${pct(x[2])}"><span class="${x[2] >= 0.85 ? "fc-hot" : ""}">${pct(x[1])}</span> <span class="fc-p90">/${pct(x[2])}</span></td>`
            : `<td class="fc-q muted" data-h="${h}">–</td>`;
        }).join("");
      }
      const err = (r.error || {})[rk] || {};
      const wape = '<td class="num">' + HORIZONS.map((h) => `<span class="fc-w key-${h}" data-h="${h}" title="${horizon(h)}: ${err[String(h)] ? `n ${err[String(h)].n} · p90 coverage ${fmt(err[String(h)].p90_coverage)}` : "no scored bucket yet"}">${wapeText(err[String(h)])}</span>`).join(" ") + "</td>";
      return `<tr data-load-node="${esc(r.node)}" data-status="${f ? esc(f.status) : "none"}"><td>${esc(r.node)}</td>` +
        `<td class="num">${actual}</td>${cells}<td class="fc-status">${status}</td>` +
        `<td>${loadChart(r.chart, rk)}</td>${wape}</tr>`;
    }).join("");
    $("load").innerHTML =
      '<table class="t"><thead><tr><th>node</th><th class="num" title="newest 10 s mean">actual</th>' +
      HORIZONS.map((h) => `<th title="p50 / p90 forecast ${horizon(h)} ahead">${horizon(h)}</th>`).join("") +
      '<th>forecast</th><th title="actual (solid) vs p50 forecast made 5 / 15 / 30 min earlier (dashed: blue / amber / pink)">' +
      '<span class="key-300">5m</span> <span class="key-900">15m</span> <span class="key-1800">30m</span> vs actual</th>' +
      '<th class="num" title="rolling WAPE of the p50 on this node at 5 / 15 / 30 min (hover a value: scored buckets, p90 coverage)">WAPE 5/15/30m</th>' +
      `</tr></thead><tbody>${rows}</tbody></table>`;
  }

  // ------------------------------------------------------------------ drift (drift.v1)

  // fields drawn explicitly; any other field of the report (added to drift.v1 later) is listed generically
  const DRIFT_KNOWN = new Set(["model", "model_version", "ts_ms", "window_s", "samples", "prediction_samples", "status",
    "reasons", "data_score", "data_threshold", "max_psi", "features_over", "feature_threshold", "features",
    "prediction_psi", "prediction_threshold", "predictions", "missing_rate", "reference_missing_rate"]);

  function genericValue(v) {
    if (v === null || v === undefined) return '<span class="muted">–</span>';
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(3);
    if (typeof v !== "object") return esc(String(v).replace(/_/g, " "));
    if (Array.isArray(v)) {
      if (!v.length) return '<span class="muted">none</span>';
      if (v.every((e) => e && typeof e === "object" && !Array.isArray(e))) {
        const cols = [...new Set(v.flatMap((e) => Object.keys(e)))];
        return `<table class="t"><thead><tr>${cols.map((c) => `<th>${esc(c)}</th>`).join("")}</tr></thead><tbody>` +
          v.map((e) => `<tr>${cols.map((c) => `<td class="num" data-col="${esc(c)}">${genericValue(e[c])}</td>`).join("")}</tr>`).join("") +
          "</tbody></table>";
      }
      return v.map(genericValue).join(", ");
    }
    return Object.entries(v).map(([k, x]) => `${esc(k)} ${genericValue(x)}`).join(" · ");
  }

  function vsThreshold(label, v, limit, title) {
    if (v === null || v === undefined) return `<span title="${esc(title)}">${label} <b class="muted">–</b></span>`;
    const over = limit !== null && limit !== undefined && v > limit;
    return `<span title="${esc(title)}">${label} <b class="${over ? "over" : ""}">${fmt(v, 3)}</b>` +
      (limit !== null && limit !== undefined ? ` <span class="muted">/ ${fmt(limit, 2)}</span>` : "") + "</span>";
  }

  function renderDrift() {
    dirty.drift = false;
    const models = S.drift;
    const drifting = models.filter((m) => m.report.status === "drift").length;
    $("drift-count").textContent = models.length ? `${models.length} models · ${drifting} drifting` : "";
    if (!models.length) {
      $("drift").innerHTML = '<p class="empty">no drift report yet (drift.v1)</p>';
      return;
    }
    $("drift").innerHTML = models.map((m) => {
      const r = m.report;
      const hist = m.history.filter((h) => h.data_score !== null).map((h) => [h.ts, h.data_score]);
      const predHist = m.history.filter((h) => h.prediction_psi !== null).map((h) => [h.ts, h.prediction_psi]);
      const feats = (r.features || []).slice(0, 5).map((f) =>
        `<span class="${f.psi > r.feature_threshold ? "over" : ""}" title="missing ${fmt(f.missing_rate, 3)} (ref ${fmt(f.reference_missing_rate, 3)})">${esc(f.feature)} ${fmt(f.psi, 3)}</span>`).join(" · ");
      const preds = Object.entries(r.predictions || {}).map(([k, v]) => `${esc(k)} ${pct(v)}`).join(" · ");
      const extra = Object.keys(r).filter((k) => !DRIFT_KNOWN.has(k) && r[k] !== null && !(Array.isArray(r[k]) && !r[k].length));
      const extraHtml = extra.map((k) =>
        `<div class="drift-field" data-field="${esc(k)}"><span class="subhead" style="padding:4px 0">${esc(k.replace(/_/g, " "))}</span> ${genericValue(r[k])}</div>`).join("");
      return `<article class="drift-model" data-model="${esc(m.model)}" data-status="${esc(r.status)}">` +
        `<div class="d-head"><b>${esc(m.model)}</b><span class="badge st-${esc(r.status)}">${esc(r.status.replace(/_/g, " "))}</span>` +
        `<span class="muted">version ${esc(r.model_version)} · ${r.samples} inputs, ${r.prediction_samples} answers over ${Math.round(r.window_s)}s · ${age(r.ts_ms)} ago</span></div>` +
        `<div class="drift-facts">` +
        vsThreshold("data score (mean PSI)", r.data_score, r.data_threshold, "multivariate score: mean PSI over the inputs / threshold") +
        `<span title="data score history (dotted: threshold)">${sparkSpan(hist, "a", r.data_threshold)}</span>` +
        vsThreshold("prediction PSI", r.prediction_psi, r.prediction_threshold, "PSI of the answers' distribution / threshold") +
        `<span title="prediction PSI history (dotted: threshold)">${sparkSpan(predHist, "k", r.prediction_threshold)}</span>` +
        vsThreshold("missing rate", r.missing_rate, null, `reference ${fmt(r.reference_missing_rate, 3)}`) +
        `<span class="muted">ref ${fmt(r.reference_missing_rate, 3)}</span>` +
        `<span>inputs over ${fmt(r.feature_threshold, 2)}: <b>${r.features_over}</b></span></div>` +
        (feats ? `<div class="drift-reasons">top PSI: ${feats}</div>` : "") +
        (preds ? `<div class="drift-reasons">answers: ${preds}</div>` : "") +
        (r.reasons && r.reasons.length ? `<div class="drift-reasons">${r.reasons.map(esc).join(" · ")}</div>` : "") +
        (extraHtml ? `<div class="drift-extra">${extraHtml}</div>` : "") + "</article>";
    }).join("");
  }

  // ------------------------------------------------------------------ rollouts (rollouts.v1)

  function renderRollouts() {
    dirty.rollouts = false;
    const models = S.rollouts;
    const active = models.filter((m) => ["shadow", "running", "paused"].includes(m.latest.status)).length;
    $("rollouts-count").textContent = models.length ? `${models.length} models · ${active} under way` : "";
    if (!models.length) {
      $("rollouts").innerHTML = '<p class="empty">no rollout yet (rollouts.v1)</p>';
      return;
    }
    $("rollouts").innerHTML = models.map((m) => {
      const r = m.latest;
      const metrics = Object.entries(r.metrics || {}).map(([k, v]) => `${esc(k.replace(/_/g, " "))} ${fmt(v, 3)}`).join(" · ");
      const moves = m.moves.map((e) =>
        `<tr><td>${age(e.ts)} ago</td><td>${esc(e.candidate)}</td><td>${esc(e.status.replace(/_/g, " "))}</td>` +
        `<td class="num">${e.step}/${e.steps}</td><td class="num">${pct(e.fraction)}</td><td>${esc(e.origin)}</td>` +
        `<td>${esc(e.reason)}</td></tr>`).join("");
      return `<article class="rollout-model" data-model="${esc(m.model)}" data-status="${esc(r.status)}">` +
        `<div class="d-head"><b>${esc(m.model)}</b><span class="badge ro-${esc(r.status)}">${esc(r.status.replace(/_/g, " "))}</span>` +
        `<span class="muted">version ${esc(r.candidate)} (baseline ${esc(r.baseline || "–")}) · step ${r.step}/${r.steps} · ` +
        `<b class="ro-fraction">${pct(r.fraction)}</b> of nodes · ${age(r.ts_ms)} ago</span></div>` +
        (r.reason ? `<div class="drift-reasons ro-reason">${esc(r.reason)}</div>` : "") +
        `<div class="drift-reasons">${r.compared} compared, ${r.labelled} labelled${metrics ? " · " + metrics : ""}</div>` +
        `<table class="t"><thead><tr><th>when</th><th>version</th><th>status</th><th>step</th><th>nodes</th><th>by</th><th>reason</th></tr></thead>` +
        `<tbody>${moves}</tbody></table></article>`;
    }).join("");
  }

  // ------------------------------------------------------------------ benefit (arena results)

  // metrics where a lower value is the better one (slowdowns, violations, cost); others: higher is better
  const LOWER_IS_BETTER = /violation|slowdown|inflation|eviction|cost|_us|latency|pending|nodes_used/;

  function renderBenefit(view) {
    S.arena = view;
    const box = $("benefit");
    if (!view.available) {
      box.innerHTML = `<p class="empty">${esc(view.reason)}</p>`;
      $("benefit-source").textContent = "";
      return;
    }
    const policies = view.policies;
    const base = view.baseline;
    const head = `<tr><th>metric</th>${policies.map((p) => `<th class="num">${esc(p)}</th>`).join("")}</tr>`;
    const rows = view.table.map((r) => {
      const lower = LOWER_IS_BETTER.test(r.metric);
      const cells = policies.map((p) => {
        const v = r.values[p];
        if (v === undefined || v === null) return `<td class="num">–</td>`;
        const ratio = r.vs_baseline[p];
        let cls = "";
        if (base && p !== base && ratio !== undefined && Math.abs(ratio - 1) > 0.005) {
          cls = (ratio < 1) === lower ? "better" : "worse";
        }
        const shown = Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(3);
        const rel = base && p !== base && ratio !== undefined ? `<span class="ratio">${ratio.toFixed(2)}×</span>` : "";
        return `<td class="num ${cls}" data-policy="${esc(p)}">${shown}${rel}</td>`;
      }).join("");
      return `<tr data-metric="${esc(r.metric)}"><td title="${esc(r.unit)}">${esc(r.metric)}${r.unit ? ` <span class="muted">${esc(r.unit)}</span>` : ""}</td>${cells}</tr>`;
    }).join("");
    box.innerHTML = `<table class="t">${head}${rows}</table>`;
    const m = view.machine || {};
    $("benefit-source").textContent = `${view.source} · ${new Date(view.mtime_ms).toISOString().slice(0, 16)}Z` +
      (m.commit ? ` · commit ${m.commit}` : "") + (base ? ` · ratios vs ${base}` : "");
  }

  async function loadBenefit() {
    try {
      const r = await fetch("/api/arena", { cache: "no-store" });
      renderBenefit(await r.json());
    } catch (e) {
      $("benefit").innerHTML = `<p class="empty err">arena results unavailable: ${esc(e)}</p>`;
    }
  }

  // ------------------------------------------------------------------ wiring

  $("decision-filter").addEventListener("input", () => schedule("decisions"));
  $("decision-pause").addEventListener("change", () => schedule("decisions"));
  $("node-filter").addEventListener("input", () => { $("nodes").scrollTop = 0; schedule("order"); });
  $("node-sort").addEventListener("change", () => schedule("order"));
  $("load-resource").addEventListener("change", () => schedule("load"));
  $("load-filter").addEventListener("input", () => schedule("load"));
  $("nodes").addEventListener("scroll", () => schedule("nodes"), { passive: true });
  window.addEventListener("resize", () => schedule("nodes"));
  // ages, staleness and the connection badge move with time even when no message arrives
  setInterval(() => schedule("header", "order", "cluster"), 1000);
  window.__dashboard = S;
  connect();
  loadBenefit();
  setInterval(loadBenefit, 60000); // a new arena run shows up within a minute
})();
