// tools/dashboard_page.hpp: the one page `manta dashboard` serves. It polls
// /api/status and /api/memory every second (the token travels in each URL)
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

<h2>Processes</h2>
<table id="processes"><thead><tr><th>slot</th><th>pid</th><th>kind</th><th>state</th><th>running</th></tr></thead><tbody></tbody></table>

<h2>Resources and objects</h2>
<table>
  <tr><th>resource</th><th>in use</th><th>total</th></tr>
  <tbody id="resources"></tbody>
</table>
<p>objects: <span id="objects-count"></span>; arena <span id="arena-used"></span> of <span id="arena-capacity"></span> bytes in use;
   spilled: <span id="spilled-objects"></span> objects, <span id="spilled-bytes"></span> bytes on disk;
   processes lost: <span id="processes-lost"></span></p>

<h2>Objects in the arena and the spill file</h2>
<table id="memory"><thead><tr><th>id</th><th>size</th><th>where</th><th>pinned</th><th>refs</th><th>owner</th><th>made by</th></tr></thead><tbody></tbody></table>
<p id="memory-summary"></p>

<script src="/chart.js?token=__TOKEN__"></script>
<script>
const token = "__TOKEN__";
const set = (id, v) => { document.getElementById(id).textContent = v; };
let chart = null, last = null;
if (typeof Chart !== "undefined") {
  chart = new Chart(document.getElementById("throughput"), {
    type: "line",
    data: { labels: [], datasets: [{ label: "tasks finished per second", data: [], borderColor: "#3366cc", tension: 0.2 }] },
    options: { animation: false, maintainAspectRatio: false, scales: { y: { beginAtZero: true } } }
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
    set("arena-used", s.objects.arena_used_bytes);
    set("arena-capacity", s.objects.arena_capacity_bytes);
    set("spilled-objects", s.objects.spilled_objects);
    set("spilled-bytes", s.objects.spilled_bytes);
    set("processes-lost", s.processes_lost);
    const now = s.runtime.uptime_s;
    if (last) {
      const rate = (s.tasks.finished - last.finished) / Math.max(now - last.at, 1e-3);
      set("tasks-rate", rate.toFixed(1));
      if (chart) {
        chart.data.labels.push(now.toFixed(0) + " s");
        chart.data.datasets[0].data.push(rate);
        if (chart.data.labels.length > 120) { chart.data.labels.shift(); chart.data.datasets[0].data.shift(); }
        chart.update();
        set("chart-points", chart.data.datasets[0].data.length);
      }
    }
    last = { finished: s.tasks.finished, at: now };
    const procs = document.querySelector("#processes tbody");
    procs.replaceChildren(...s.processes.map(p => row([p.slot, p.pid, p.kind, p.state,
      (p.actor ? p.actor + (p.current.length ? ": " : "") : "") + p.current.join(", ")])));
    const res = document.getElementById("resources");
    res.replaceChildren(...Object.keys(s.resources.total).map(k =>
      row([k, s.resources.total[k] - (s.resources.available[k] ?? 0), s.resources.total[k]])));
    const m = await (await fetch("/api/memory?token=" + token)).json();
    document.querySelector("#memory tbody").replaceChildren(...m.objects.slice(0, 200).map(o =>
      row([o.id, o.size, o.where, o.pinned, o.references, o.owner_pid, o.made_by])));
    set("memory-summary", m.summary.listed + " objects; " + m.summary.arena_bytes + " bytes in the arena, " +
        m.summary.spilled_bytes + " spilled, " + m.summary.driver_heap_bytes + " in the driver's heap" +
        (m.objects.length > 200 ? " (the first 200 shown)" : ""));
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
