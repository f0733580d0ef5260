// synergyd dashboard pages: poll the JSON views every POLL_MS and redraw (no page reload).
"use strict";
const POLL_MS = 2000;
const sort = {key: "id", asc: true};

async function getJSON(path) {
  const r = await fetch(path, {credentials: "same-origin"});
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
}

const fmt = (x, d = 1) => (x === null || x === undefined) ? "" : Number(x).toFixed(d).replace(/\.0+$/, "");
const when = (t) => t ? new Date(t * 1000).toLocaleTimeString() : "";

function summary(c) {
  const counts = Object.entries(c.job_counts).map(([s, n]) => `${n} ${s}`).join(", ") || "no jobs";
  document.getElementById("summary").textContent =
    `policy ${c.policy} / ${c.mechanism}, round ${c.round_index} (${c.round_s} s) | ${counts}`;
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

// One node: a horizontal stacked bar per resource (as % of the node's capacity of it), a
// segment per job, and a black tick where each job's GPU-proportional share would end.
function drawNode(box, n) {
  const rows = [["GPUs", "gpus"], ["CPUs", "cpus"], ["memory GB", "mem_gb"]];
  const y = rows.map((r) => r[0]);
  const pct = (key, v) => n.capacity[key] > 0 ? 100 * v / n.capacity[key] : 0;
  const traces = [];
  const ticks = {x: [], y: [], text: []};
  const offset = {gpus: 0, cpus: 0, mem_gb: 0};
  for (const j of n.jobs) {
    traces.push({type: "bar", orientation: "h", y, x: rows.map(([, k]) => pct(k, j.held[k])),
      name: `job ${j.id} ${j.name}`, customdata: rows.map(([, k]) => fmt(j.held[k], 2)),
      hovertemplate: `job ${j.id} ${j.name}: %{customdata} %{y}<extra></extra>`});
    if (j.share) for (const [label, key] of rows) {
      ticks.x.push(pct(key, offset[key] + j.share[key])); ticks.y.push(label);
      ticks.text.push(`job ${j.id} proportional share: ${fmt(j.share[key], 2)} ${label}`);
    }
    for (const [, key] of rows) offset[key] += j.held[key];
  }
  traces.push({type: "bar", orientation: "h", y, name: "free", marker: {color: "#e0e0e0"}, hoverinfo: "name",
    x: rows.map(([, k]) => pct(k, Math.max(0, n.capacity[k] - n.allocated[k])))});
  traces.push({type: "scatter", mode: "markers", x: ticks.x, y: ticks.y, text: ticks.text, hoverinfo: "text",
    name: "proportional share", marker: {symbol: "line-ns-open", size: 22, color: "#000", line: {width: 3}}});
  Plotly.react(box, traces, Charts.layout("", {barmode: "stack", height: 150, margin: {l: 80, r: 10, t: 6, b: 24},
    xaxis: {range: [0, 101], ticksuffix: "%"}, legend: {orientation: "v", x: 1.01, y: 1}}), Charts.config);
}

function renderNodes(c) {
  const root = document.getElementById("nodes");
  const seen = new Set();
  for (const n of c.nodes) {
    seen.add(n.id);
    let box = document.getElementById("node-" + n.id);
    if (!box) {
      box = el("div", {class: "node", id: "node-" + n.id}, el("div", {class: "meta"}), el("div", {class: "bars"}));
      root.append(box);
    }
    const bw = n.mem_bandwidth ? `${fmt(n.mem_bandwidth.gb_per_s, 2)} GB/s (${n.mem_bandwidth.source})` : "n/a";
    const peak = n.peak_mem_bandwidth ? ` of ${fmt(n.peak_mem_bandwidth.gb_per_s, 1)}` : "";
    const meta = box.querySelector(".meta");
    meta.replaceChildren(
      el("strong", {}, n.id), el("span", {class: "badge " + n.state}, n.state),
      el("span", {}, `GPU type ${n.gpu_type || "untyped"}`),
      n.loaned ? el("span", {class: "badge loaned"}, "loaned") : el("span", {}, `pool ${n.pool}`),
      el("span", {}, `CPU ${n.cpu_util_pct === null || n.cpu_util_pct === undefined ? "n/a" : fmt(n.cpu_util_pct) + "%"}`),
      el("span", {}, `mem bw ${bw}${peak}`),
      el("span", {}, `${n.jobs.length} job(s)`),
      n.throttled_tasks ? el("span", {class: "badge lost"}, `${n.throttled_tasks} throttled`) : "");
    drawNode(box.querySelector(".bars"), n);
  }
  for (const box of Array.from(root.children)) if (!seen.has(box.id.slice(5))) box.remove();
}

function vsShare(alloc, share, key) {
  if (!alloc) return el("span", {class: "muted"}, share ? `(${fmt(share[key])})` : "");
  const cls = share ? (alloc[key] > share[key] + 1e-6 ? "over" : alloc[key] < share[key] - 1e-6 ? "under" : "") : "";
  return el("span", {class: cls}, `${fmt(alloc[key])}${share ? " (" + fmt(share[key]) + ")" : ""}`);
}

function sortValue(j, key) {
  if (key === "cpus") return j.allocated ? j.allocated.cpus : -1;
  if (key === "mem") return j.allocated ? j.allocated.mem_gb : -1;
  return j[key];
}

function renderJobs(data) {
  const text = document.getElementById("filter").value.toLowerCase();
  const state = document.getElementById("state-filter").value;
  const rows = data.jobs.filter((j) => (!state || j.state === state) &&
    (!text || [j.id, j.name, j.user, j.state, j.waiting_reason, j.profile_source].join(" ").toLowerCase().includes(text)));
  rows.sort((a, b) => {
    const x = sortValue(a, sort.key), y = sortValue(b, sort.key);
    return (x < y ? -1 : x > y ? 1 : 0) * (sort.asc ? 1 : -1);
  });
  document.querySelector("#jobs tbody").replaceChildren(...rows.map((j) => el("tr", {"data-job": j.id, "data-state": j.state},
    el("td", {}, el("a", {href: "/jobs/" + j.id}, String(j.id))), el("td", {}, j.name), el("td", {}, j.user),
    el("td", {}, el("span", {class: "badge " + j.state}, j.state)), el("td", {}, String(j.gpus)),
    el("td", {class: "cpus"}, vsShare(j.allocated, j.share, "cpus")), el("td", {class: "mem"}, vsShare(j.allocated, j.share, "mem_gb")),
    el("td", {}, fmt(j.samples_per_s)), el("td", {}, j.waiting_reason), el("td", {}, j.profile_source))));
  document.getElementById("jobs-note").textContent = data.finished_not_listed ?
    `${data.finished_not_listed} older finished jobs not listed ("synergy jobs" lists every job)` : "";
  for (const th of document.querySelectorAll("#jobs th")) {
    th.classList.toggle("sorted", th.dataset.key === sort.key);
    th.classList.toggle("asc", th.dataset.key === sort.key && sort.asc);
  }
}

let lastJobs = null;
async function refreshCluster() {
  const win = document.getElementById("window").value;
  const [c, jobs, hist] = await Promise.all([getJSON("/api/cluster"), getJSON("/api/jobs"),
    getJSON("/api/history?window=" + win)]);
  summary(c);
  renderNodes(c);
  lastJobs = jobs;
  renderJobs(jobs);
  Charts.utilisation("chart-util", hist.samples, false);
  Charts.runningQueued("chart-jobs", hist.samples, false);
  Charts.jctCdf("chart-jct", {"finished jobs": hist.jcts});
}

async function refreshJob() {
  const id = location.pathname.split("/").pop();
  const [c, j] = await Promise.all([getJSON("/api/cluster"), getJSON("/api/jobs/" + id)]);
  summary(c);
  document.title = `Synergy job ${j.id} ${j.name}`;
  document.getElementById("job-meta").replaceChildren(
    el("h2", {}, `Job ${j.id}: ${j.name} `, el("span", {class: "badge " + j.state, id: "job-state"}, j.state)),
    el("div", {class: "meta"}, `user ${j.user || "-"} | ${j.gpus} GPU(s) | attempt ${j.attempt} | ` +
      `preemptions ${j.preemptions} | migrations ${j.migrations} | nodes ${j.nodes.join(", ") || "-"} | ` +
      `profile ${j.profile_source} | ${j.reason}`));
  document.querySelector("#history tbody").replaceChildren(...j.history.map((t) => el("tr", {},
    el("td", {}, when(t.at)), el("td", {}, t.from || ""), el("td", {}, t.to), el("td", {}, t.reason))));
  const x = j.samples.map((s) => Charts.toDate(s.t));
  Plotly.react("chart-alloc", [
    {x, y: j.samples.map((s) => s.gpus), name: "GPUs", mode: "lines", line: {shape: "hv"}},
    {x, y: j.samples.map((s) => s.cpus), name: "CPUs", mode: "lines", line: {shape: "hv"}},
    {x, y: j.samples.map((s) => s.mem_gb), name: "memory GB", mode: "lines", line: {shape: "hv"}},
  ], Charts.layout("Allocation over time"), Charts.config);
  Plotly.react("chart-throughput", [{x, y: j.samples.map((s) => s.samples_per_s), name: "samples/s", mode: "lines"}],
    Charts.layout("Throughput over time (samples/s)"), Charts.config);
  if (j.profile) Charts.profileHeatmap("profile", j.profile);
  document.getElementById("log").textContent = j.log.text;
  document.getElementById("log-note").textContent = j.log.note || (j.log.node ? `from node ${j.log.node}` : "");
}

function poll(refresh) {
  const tick = async () => {
    try { await refresh(); document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1); }
    catch (e) { document.getElementById("updated").textContent = "update failed: " + e.message; }
    setTimeout(tick, POLL_MS);
  };
  tick();
}

window.addEventListener("DOMContentLoaded", () => {
  if (document.body.dataset.page === "job") return poll(refreshJob);
  for (const th of document.querySelectorAll("#jobs th")) th.addEventListener("click", () => {
    sort.asc = sort.key === th.dataset.key ? !sort.asc : true;
    sort.key = th.dataset.key;
    if (lastJobs) renderJobs(lastJobs);
  });
  for (const id of ["filter", "state-filter"]) document.getElementById(id).addEventListener("input", () => lastJobs && renderJobs(lastJobs));
  poll(refreshCluster);
});
