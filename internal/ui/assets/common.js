// Shared by the dashboard's pages: table filling and number formats.
"use strict";

function bytes(n) {
  if (!n) return "0";
  const u = ["B", "KB", "MB", "GB", "TB", "PB"];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return n.toFixed(n < 10 && i > 0 ? 1 : 0) + " " + u[i];
}
function rate(n) { return bytes(n) + "/s"; }
function pct(x) { return (100 * x).toFixed(x < 0.1 && x > 0 ? 1 : 0) + "%"; }

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fill(id, rows, build) {
  const tbody = document.querySelector("#" + id + " tbody");
  const fresh = document.createElement("tbody");
  for (const r of rows) {
    const tr = document.createElement("tr");
    build(tr, r);
    fresh.appendChild(tr);
  }
  tbody.replaceWith(fresh);
}
