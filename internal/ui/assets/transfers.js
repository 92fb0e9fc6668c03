// The transfer service's page: asks /ui/api/state every two seconds.
"use strict";

const stateClass = {FAILED: "failed", FINISHEDDIRTY: "drained", CANCELED: "drained", FINISHED: "ok", ACTIVE: "ok", SUBMITTED: ""};

function render(st) {
  document.getElementById("updated").textContent = "at " + new Date(st.time).toLocaleTimeString();
  fill("links", st.links, (tr, l) => {
    tr.dataset.link = l.link;
    cell(tr, l.link, "url");
    cell(tr, l.limit);
    cell(tr, l.active);
    cell(tr, l.queued);
    cell(tr, l.rate_mb_s.toFixed(1) + " MB/s");
    cell(tr, (100 * l.success).toFixed(0) + "%");
    cell(tr, l.reason);
  });
  fill("jobs", st.jobs, (tr, j) => {
    tr.dataset.job = j.job_id;
    tr.dataset.state = j.state;
    let total = 0, done = 0;
    for (const [s, n] of Object.entries(j.files || {})) {
      total += n;
      if (s === "FINISHED") done += n;
    }
    cell(tr, j.job_id, "url");
    cell(tr, j.submitter);
    cell(tr, j.state, "status " + (stateClass[j.state] || ""));
    cell(tr, j.priority);
    cell(tr, Object.entries(j.files || {}).filter(([, n]) => n > 0).map(([s, n]) => s + " " + n).join(", "));
    cell(tr, total ? done + " of " + total : "");
    cell(tr, new Date(j.created).toLocaleTimeString());
    cell(tr, new Date(j.updated).toLocaleTimeString());
  });
}

async function refresh() {
  try {
    const resp = await fetch("api/state", {cache: "no-store"});
    if (!resp.ok) throw new Error(resp.status + " " + resp.statusText);
    render(await resp.json());
  } catch (e) {
    document.getElementById("updated").textContent = "the service does not answer (" + e.message + ")";
  }
}
refresh();
setInterval(refresh, 2000);
