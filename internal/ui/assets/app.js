// The dashboard's page: asks /ui/api/state every two seconds and lays it
// out; the charts are SVG drawn by the server.
"use strict";

function render(st) {
  document.getElementById("redirector").textContent = st.redirector;
  document.getElementById("updated").textContent = "sampled " + new Date(st.time).toLocaleTimeString();
  fill("sites", st.sites, (tr, s) => {
    tr.dataset.site = s.site;
    tr.dataset.probe = s.probe || "";
    cell(tr, s.site);
    cell(tr, s.members);
    cell(tr, s.failed, s.failed > 0 ? "failed" : "");
    cell(tr, s.probe ? s.probe + (s.probe_reason ? ": " + s.probe_reason : "") : "", s.probe ? "status " + s.probe : "");
    cell(tr, rate(s.out_bytes_per_s));
    cell(tr, rate(s.in_bytes_per_s));
  });
  fill("members", st.members, (tr, m) => {
    tr.dataset.url = m.url;
    tr.dataset.status = m.status;
    const name = cell(tr, m.url, "url");
    name.style.paddingLeft = (0.5 + 1.5 * m.depth) + "em";
    cell(tr, m.role);
    cell(tr, m.site || "");
    const s = cell(tr, m.status + (m.reason ? ": " + m.reason : ""), "status " + m.status);
    s.title = m.reason || "";
    cell(tr, (m.exports || []).join(" "));
    cell(tr, m.active);
    cell(tr, m.connections);
    cell(tr, m.open_files);
    cell(tr, m.total_bytes ? bytes(m.free_bytes) + " of " + bytes(m.total_bytes) : "");
    cell(tr, rate(m.out_bytes_per_s));
    cell(tr, rate(m.in_bytes_per_s));
    cell(tr, m.requests_per_s.toFixed(1));
    cell(tr, m.requests_per_s > 0 ? pct(m.error_ratio) : "", m.error_ratio > 0.05 ? "failed" : "");
    cell(tr, Object.entries(m.error_classes || {}).sort((a, b) => b[1] - a[1]).slice(0, 4)
      .map(([k, v]) => k + " " + v.toFixed(1)).join(", "));
    cell(tr, m.cache_hit_ratio === undefined ? "" : pct(m.cache_hit_ratio));
    cell(tr, (m.last_seen_ms_ago / 1000).toFixed(1) + " s ago");
  });
  const probes = [];
  for (const s of st.probes || []) for (const r of s.results) probes.push(r);
  fill("probes", probes, (tr, r) => {
    cell(tr, r.site);
    cell(tr, r.target, "url");
    cell(tr, r.kind);
    cell(tr, r.ok ? "ok" : "failed: " + r.reason, "status " + (r.ok ? "ok" : "failed"));
    cell(tr, r.server || "", "url");
    cell(tr, r.seconds.toFixed(3));
    cell(tr, new Date(r.since).toLocaleTimeString());
  });
  fill("failures", st.failures, (tr, f) => {
    cell(tr, new Date(f.time).toLocaleTimeString());
    cell(tr, f.member);
    cell(tr, f.site || "");
    cell(tr, f.reason);
  });
}

let charts = 0;
async function refresh() {
  try {
    const resp = await fetch("api/state", {cache: "no-store"});
    if (!resp.ok) throw new Error(resp.status + " " + resp.statusText);
    render(await resp.json());
    if (++charts % 3 === 0) {
      for (const id of ["chart-out", "chart-in"]) {
        const img = document.getElementById(id);
        img.src = img.src.replace(/&t=\d+$/, "") + "&t=" + Date.now();
      }
    }
  } catch (e) {
    document.getElementById("updated").textContent = "the redirector does not answer (" + e.message + ")";
  }
}
refresh();
setInterval(refresh, 2000);
