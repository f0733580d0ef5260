// Charts shared by synergyd's dashboard and `synergy-sim --html` reports (plotly.js draws them).
// Each function takes an element id and plain data; Plotly.react redraws in place on updates.
"use strict";
const Charts = (() => {
  const layout = (title, extra) => Object.assign({
    title: {text: title, font: {size: 14}}, margin: {l: 50, r: 20, t: 36, b: 40}, height: 260,
    legend: {orientation: "h", y: -0.25}, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fafafa",
  }, extra || {});
  const config = {displaylogo: false, responsive: true, displayModeBar: false};
  const toDate = (t) => new Date(t * 1000);

  // samples: [{t, gpus, gpus_allocated, cpus, cpus_allocated, mem_gb, mem_gb_allocated}]; t in
  // seconds (unix for the daemon; `relative` for simulated hours).
  function utilisation(id, samples, relative, title) {
    const x = samples.map((s) => relative ? s.t / 3600 : toDate(s.t));
    const pct = (a, c) => samples.map((s) => s[c] > 0 ? 100 * s[a] / s[c] : 0);
    Plotly.react(id, [
      {x, y: pct("gpus_allocated", "gpus"), name: "GPUs", mode: "lines"},
      {x, y: pct("cpus_allocated", "cpus"), name: "CPUs", mode: "lines"},
      {x, y: pct("mem_gb_allocated", "mem_gb"), name: "memory", mode: "lines"},
    ], layout(title || "Allocated (% of capacity)", {yaxis: {range: [0, 105], ticksuffix: "%"},
      xaxis: relative ? {title: {text: "hours"}} : {}}), config);
  }

  function runningQueued(id, samples, relative, title) {
    const x = samples.map((s) => relative ? s.t / 3600 : toDate(s.t));
    Plotly.react(id, [
      {x, y: samples.map((s) => s.running), name: "running", mode: "lines", line: {shape: "hv"}},
      {x, y: samples.map((s) => s.queued), name: "queued", mode: "lines", line: {shape: "hv"}},
    ], layout(title || "Jobs running and queued", {xaxis: relative ? {title: {text: "hours"}} : {}}), config);
  }

  // series: {label: [job completion times in seconds]}; the axis in s, min or h by the longest.
  function jctCdf(id, series) {
    const longest = Math.max(0, ...Object.values(series).flat());
    const [unit, per] = longest < 120 ? ["seconds", 1] : longest < 7200 ? ["minutes", 60] : ["hours", 3600];
    const traces = Object.entries(series).map(([name, jcts]) => {
      const xs = jcts.slice().sort((a, b) => a - b).map((s) => s / per);
      return {x: xs, y: xs.map((_, i) => (i + 1) / xs.length), name, mode: "lines", line: {shape: "hv"}};
    });
    Plotly.react(id, traces, layout("JCT CDF (finished jobs)", {xaxis: {title: {text: unit}, rangemode: "tozero"},
      yaxis: {range: [0, 1.02], title: {text: "fraction"}}}), config);
  }

  // rows: [{label, values: {metric: number}}] side by side
  function comparison(id, rows, metric, title) {
    Plotly.react(id, [{x: rows.map((r) => r.label), y: rows.map((r) => r.values[metric]), type: "bar"}],
      layout(title), config);
  }

  // profile: {cpus_per_gpu, mem_gb_per_gpu, throughput[i][j]} -> CPU (y) x memory (x) heat map
  function profileHeatmap(id, profile) {
    Plotly.react(id, [{
      type: "heatmap", z: profile.throughput, y: profile.cpus_per_gpu.map(String),
      x: profile.mem_gb_per_gpu.map(String), colorscale: "Viridis", colorbar: {title: {text: "speed"}},
    }], layout(`Sensitivity: ${profile.model} (${profile.source})`, {height: 320,
      xaxis: {title: {text: "memory GB per GPU"}, type: "category"},
      yaxis: {title: {text: "CPUs per GPU"}, type: "category"}}), config);
  }

  return {layout, config, toDate, utilisation, runningQueued, jctCdf, comparison, profileHeatmap};
})();
