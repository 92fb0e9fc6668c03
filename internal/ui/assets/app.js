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
  fill("members", memberRows(st.members), (tr, m) => {
    if (m.group) return groupRow(tr, m);
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

// A tree of more than groupAt nodes lists each site's data members under
// one row (its count and health), opened with a click: the redirectors
// and every site are always shown, a thousand servers are not laid out
// every two seconds.
const groupAt = 200;
const opened = new Set();
let shown = 0;

function memberRows(members) {
  shown = 0;
  if (members.length <= groupAt) {
    shown = members.length;
    return members;
  }
  const out = [], groups = new Map();
  for (const m of members) {
    if (m.role === "redirector" || !m.site) {
      out.push(m);
      shown++;
      continue;
    }
    let g = groups.get(m.site + "\x00" + m.parent);
    if (!g) {
      g = {group: true, site: m.site, depth: m.depth, members: [], failed: 0, drained: 0};
      groups.set(m.site + "\x00" + m.parent, g);
      out.push(g);
    }
    g.members.push(m);
    if (m.status === "failed") g.failed++;
    if (m.status === "drained") g.drained++;
    shown++;
    if (opened.has(m.site)) out.push(m);
  }
  return out;
}

function groupRow(tr, g) {
  tr.className = "group";
  tr.dataset.site = g.site;
  tr.dataset.members = g.members.length;
  const c = cell(tr, (opened.has(g.site) ? "▾ " : "▸ ") + g.members.length + " members of " + g.site, "url");
  c.style.paddingLeft = (0.5 + 1.5 * g.depth) + "em";
  c.colSpan = 3;
  const ok = g.members.length - g.failed - g.drained;
  cell(tr, ok + " ok" + (g.failed ? ", " + g.failed + " failed" : "") + (g.drained ? ", " + g.drained + " drained" : ""),
    "status " + (g.failed ? "failed" : "ok"));
}

// One listener for the table: its rows are laid out anew at every refresh.
document.getElementById("members").addEventListener("click", (e) => {
  const tr = e.target.closest("tr.group");
  if (!tr) return;
  const site = tr.dataset.site;
  if (opened.has(site)) opened.delete(site); else opened.add(site);
  refresh();
});

// uiMembers is how many nodes of the tree the page shows (a group
// row counts its members).
function uiMembers() { return shown; }

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
