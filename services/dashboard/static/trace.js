// The decision trace page: /api/trace/<decision id> drawn as a waterfall. No framework, nothing from elsewhere.
"use strict";
(() => {
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (v) => (v === null || v === undefined ? "" : String(v).replace(/[&<>"']/g, (c) => ESC[c]));
  const ms = (us) => (us >= 1e6 ? `${(us / 1e6).toFixed(2)} s` : us >= 1000 ? `${(us / 1000).toFixed(1)} ms` : `${us} µs`);
  const $ = (id) => document.getElementById(id);
  const decisionId = decodeURIComponent(location.pathname.replace(/^\/trace\//, ""));
  const api = `/api/trace/${encodeURIComponent(decisionId)}`;
  $("trace-json").href = api;

  function render(view) {
    window.__trace = view;
    const total = Math.max(view.duration_us, 1);
    const byId = new Map(view.spans.map((s) => [s.span_id, s]));
    $("trace-title").textContent = `decision ${view.decision_id} · trace ${view.trace_id} · ${view.spans.length} spans in ` +
      `${view.services.length} services · ${ms(view.duration_us)}` + (view.truncated ? " · truncated" : "");
    $("trace-jaeger").href = view.jaeger_url;
    const pct = (us) => `${((us / total) * 100).toFixed(3)}%`;
    const rows = view.spans.map((s) => {
      const parent = s.parent ? byId.get(s.parent) : null;
      const parentEnd = parent ? parent.offset_us + parent.duration_us : null;
      const wait = parentEnd !== null && s.offset_us > parentEnd ? s.offset_us - parentEnd : 0;
      const gap = wait ? `<span class="gap" style="left:${pct(parentEnd)};width:${pct(wait)}" title="waited ${ms(wait)}"></span>` : "";
      const links = s.links.map((l) => {
        const here = byId.has(l.span_id);
        return `<a class="link" href="${here ? `#span-${esc(l.span_id)}` : "#"}" data-span="${esc(l.span_id)}"` +
          ` title="${here ? "linked span in this trace" : `trace ${esc(l.trace_id)}`}">⇢ ${esc(l.span_id.slice(0, 8))}</a>`;
      }).join(" ");
      const attrs = Object.entries(s.attributes).map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(JSON.stringify(v))}</td></tr>`).join("");
      return `<div class="span-row" id="span-${esc(s.span_id)}" data-span="${esc(s.span_id)}" data-service="${esc(s.service)}"` +
        ` data-wait-us="${wait}">` +
        `<div class="span-label" style="padding-left:${s.depth * 14}px"><b>${esc(s.service)}</b> ${esc(s.name)} ${links}</div>` +
        `<div class="span-track">${gap}<span class="bar" style="left:${pct(s.offset_us)};width:max(2px,${pct(s.duration_us)})"` +
        ` title="${esc(s.name)}: ${ms(s.duration_us)} at +${ms(s.offset_us)}"></span>` +
        `<span class="span-time">${ms(s.duration_us)}${wait ? ` · waited ${ms(wait)}` : ""}</span></div>` +
        `<table class="t span-attrs" hidden>${attrs}</table></div>`;
    }).join("");
    $("waterfall").innerHTML = rows || '<p class="empty">no spans</p>';
  }

  $("waterfall").addEventListener("click", (e) => {
    const row = e.target.closest(".span-row");
    if (!row || e.target.closest("a")) return;
    const table = row.querySelector(".span-attrs");
    table.hidden = !table.hidden;
  });

  fetch(api, { cache: "no-store" }).then(async (r) => {
    if (!r.ok) throw new Error(await r.text());
    render(await r.json());
  }).catch((e) => {
    $("trace-title").textContent = `decision ${decisionId}`;
    $("waterfall").innerHTML = `<p class="empty err">${esc(e.message || e)}</p>`;
  });
})();
