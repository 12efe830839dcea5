// tools/dashboard_page.hpp: the one page `manta dashboard` serves. It polls
// /api/status and the 200 largest objects of /api/memory every second (the
// token travels in each URL; the whole list only when asked for)
// and charts the rate of finished tasks with Chart.js, served by the tool from
// Debian's libjs-chart.js: the page needs no network.
#pragma once

namespace manta::tools {

inline constexpr const char* dashboard_page = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>manta dashboard</title>
<style>
  body { font-family: sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.4em; margin-bottom: 0.2em; }
  h2 { font-size: 1.1em; margin-top: 1.4em; }
  table { border-collapse: collapse; font-size: 0.9em; }
  td, th { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
  th { background: #f0f0f0; }
  .num { text-align: right; font-variant-numeric: tabular-nums; }
  #error { color: #b00; }
  #chart-box { width: 800px; height: 260px; }
</style>
</head>
<body>
<h1>manta runtime <span id="driver-pid"></span></h1>
<div>up <span id="uptime">?</span> s; log_dir <span id="log-dir"></span>; <span id="error"></span></div>

<h2>Tasks</h2>
<table>
  <tr><th>running</th><th>queued</th><th>waiting for arguments</th><th>finished</th><th>failed</th><th>retried</th><th>tasks/s</th></tr>
  <tr><td class="num" id="tasks-running"></td><td class="num" id="tasks-queued"></td>
      <td class="num" id="tasks-waiting"></td><td class="num" id="tasks-finished"></td>
      <td class="num" id="tasks-failed"></td><td class="num" id="tasks-retried"></td>
      <td class="num" id="tasks-rate"></td></tr>
</table>
<div id="chart-box"><canvas id="throughput"></canvas></div>
<div>chart points: <span id="chart-points">0</span></div>

<h2>Functions (the 20 busiest)</h2>
<table id="functions"><thead><tr><th>function</th><th>finished</th><th>failed</th><th>running</th><th>mean</th><th>p95</th></tr></thead><tbody></tbody></table>

<h2>Processes</h2>
<table id="processes"><thead><tr><th>slot</th><th>pid</th><th>kind</th><th>state</th><th>running</th></tr></thead><tbody></tbody></table>

<h2>Resources and objects</h2>
<table>
  <tr><th>resource</th><th>in use</th><th>total</th></tr>
  <tbody id="resources"></tbody>
</table>
<p>objects: <span id="objects-count"></span>; arena <span id="arena-used"></span> of <span id="arena-capacity"></span> in use;
   spilled: <span id="spilled-objects"></span> objects, <span id="spilled-bytes"></span> on disk;
   processes lost: <span id="processes-lost"></span></p>

<h2>Actors</h2>
<table id="actors"><thead><tr><th>class</th><th>name</th><th>state</th><th>pid</th><th>queued calls</th><th>restarts</th></tr></thead><tbody></tbody></table>

<h2>The largest objects</h2>
<table id="memory"><thead><tr><th>id</th><th>size</th><th>where</th><th>pinned</th><th>refs</th><th>owner</th><th>made by</th></tr></thead><tbody></tbody></table>
<p id="memory-summary"></p>
<p><a id="all-objects" href="/api/memory?limit=0&amp;token=__TOKEN__">every object (JSON)</a></p>

<script src="/chart.js?token=__TOKEN__"></script>
<script>
const token = "__TOKEN__";
const set = (id, v) => { document.getElementById(id).textContent = v; };
// A run time as the manta command prints it.
function seconds(s) {
  return s < 1e-3 ? (s * 1e6).toFixed(0) + " us" : s < 1 ? (s * 1e3).toFixed(1) + " ms" : s.toFixed(2) + " s";
}
// Bytes in IEC units, as the manta command prints them.
function iec(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  return u ? b.toFixed(1) + " " + units[u] : b.toFixed(0) + " B";
}
let chart = null, last = null;
if (typeof Chart !== "undefined") {
  chart = new Chart(document.getElementById("throughput"), {
    type: "line",
    data: { datasets: [{ label: "tasks finished per second", data: [], borderColor: "#3366cc", tension: 0.2 }] },
    // A linear axis of seconds up: ticks at round values, never one label twice.
    options: { animation: false, maintainAspectRatio: false,
               scales: { x: { type: "linear", ticks: { maxTicksLimit: 12, callback: v => v + " s" } },
                         y: { beginAtZero: true } } }
  });
} else {
  set("error", "Chart.js is not available: no chart");
}
function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
  return tr;
}
async function poll() {
  try {
    const s = await (await fetch("/api/status?token=" + token)).json();
    set("driver-pid", "(driver pid " + s.runtime.pid + ")");
    set("uptime", s.runtime.uptime_s.toFixed(1));
    set("log-dir", s.runtime.log_dir);
    set("tasks-running", s.tasks.running);
    set("tasks-queued", s.tasks.queued);
    set("tasks-waiting", s.tasks.waiting_for_arguments);
    set("tasks-finished", s.tasks.finished);
    set("tasks-failed", s.tasks.failed);
    set("tasks-retried", s.tasks.retried);
    set("objects-count", s.objects.count);
    set("arena-used", iec(s.objects.arena_used_bytes));
    set("arena-capacity", iec(s.objects.arena_capacity_bytes));
    set("spilled-objects", s.objects.spilled_objects);
    set("spilled-bytes", iec(s.objects.spilled_bytes));
    set("processes-lost", s.processes_lost);
    const now = s.runtime.uptime_s;
    if (last) {
      const rate = (s.tasks.finished - last.finished) / Math.max(now - last.at, 1e-3);
      set("tasks-rate", rate.toFixed(1));
      if (chart) {
        chart.data.datasets[0].data.push({ x: now, y: rate });
        if (chart.data.datasets[0].data.length > 120) chart.data.datasets[0].data.shift();
        chart.update();
        set("chart-points", chart.data.datasets[0].data.length);
      }
    }
    last = { finished: s.tasks.finished, at: now };
    const procs = document.querySelector("#processes tbody");
    procs.replaceChildren(...s.processes.map(p => row([p.slot, p.pid, p.kind, p.state,
      (p.actor ? p.actor + (p.current.length ? ": " : "") : "") + p.current.join(", ")])));
    const res = document.getElementById("resources");
    const amount = (k, v) => k === "memory" ? iec(v) : v;
    res.replaceChildren(...Object.keys(s.resources.total).map(k =>
      row([k, amount(k, s.resources.total[k] - (s.resources.available[k] ?? 0)), amount(k, s.resources.total[k])])));
    const f = await (await fetch("/api/summary?limit=20&token=" + token)).json();
    document.querySelector("#functions tbody").replaceChildren(...f.functions.map(x =>
      row([x.name, x.finished, x.failed, x.running, x.runs ? seconds(x.mean_s) : "-", x.runs ? seconds(x.p95_s) : "-"])));
    document.querySelector("#actors tbody").replaceChildren(...s.actors.map(a =>
      row([a.class, a.name ?? "", a.state, a.pid ?? "", a.queued_calls, a.restarts])));
    // The largest 200 only: the whole list of 100k objects was 13 MB a poll.
    const m = await (await fetch("/api/memory?limit=200&sort=size&token=" + token)).json();
    document.querySelector("#memory tbody").replaceChildren(...m.objects.map(o =>
      row([o.id, iec(o.size), o.where, o.pinned, o.references, o.owner_pid, o.made_by])));
    const total = m.summary.total ?? m.summary.listed;
    set("memory-summary", total + " objects; " + iec(m.summary.arena_bytes) + " in the arena, " +
        iec(m.summary.spilled_bytes) + " spilled, " + iec(m.summary.driver_heap_bytes) + " in the driver's heap" +
        (m.summary.listed < total ? " (the largest " + m.summary.listed + " shown)" : ""));
    set("error", "");
  } catch (e) {
    set("error", "the runtime does not answer: " + e);
  }
}
poll();
setInterval(poll, 1000);
</script>
</body>
</html>
)html";

}  // namespace manta::tools
