// stagger lab: draws what the lab's JSON API answers. Every number comes
// from the server (the library's simulator and engine); this file only asks,
// lays out and labels.
"use strict";

const lab = (window.lab = { charts: {}, last: {}, busy: {}, errors: [] });
window.addEventListener("error", (e) => lab.errors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => lab.errors.push(String(e.reason)));

const C = { first: "#4477aa", retry: "#ee7733", ok: "#228833", cap: "#222222", sent: "#aa3377" };
const PALETTE = ["#4477aa", "#ee7733", "#228833", "#aa3377", "#66ccee", "#ccbb44", "#bbbbbb", "#332288"];
const $ = (id) => document.getElementById(id);

function fmt(v, digits = 2) {
  if (v == null || Number.isNaN(v)) return "–";
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits });
}

// GET /api/<path>?<params>: the parsed document, or an Error whose message
// names the bad parameter.
async function api(path, params) {
  const query = new URLSearchParams(params).toString();
  const r = await fetch(`/api/${path}?${query}`);
  const text = await r.text();
  if (!r.ok) {
    let msg = `${r.status} ${text}`;
    try {
      const j = JSON.parse(text);
      msg = (j.parameter ? `${j.parameter}: ` : "") + j.error;
    } catch (_) { /* not JSON: keep the text */ }
    throw new Error(msg);
  }
  return { query, doc: JSON.parse(text) };
}

// Runs `work` for scene `name`, dropping answers that a newer request
// overtook; `lab.busy[name]` is true while one is in flight.
const seq = {};
async function run(name, work) {
  const n = (seq[name] = (seq[name] || 0) + 1);
  const status = $(`${name}-status`);
  lab.busy[name] = true;
  status.className = "status";
  status.textContent = "simulating…";
  const t0 = performance.now();
  try {
    const out = await work(() => n === seq[name]);
    if (n === seq[name]) {
      status.textContent = `answered in ${fmt(performance.now() - t0, 0)} ms${out ? " · " + out : ""}`;
    }
  } catch (e) {
    if (n === seq[name]) {
      status.className = "status err";
      status.textContent = e.message;
    }
  } finally {
    if (n === seq[name]) lab.busy[name] = false;
  }
}

function debounce(f, ms) {
  let t = null;
  return () => {
    clearTimeout(t);
    t = setTimeout(f, ms);
  };
}

// Wires range inputs to their <output> and `update` (debounced).
function wire(ids, update) {
  const later = debounce(update, 120);
  for (const id of ids) {
    const el = $(id);
    const out = el.parentElement.querySelector("output");
    const show = () => { if (out) out.textContent = el.value; };
    show();
    el.addEventListener("input", () => { show(); later(); });
    el.addEventListener("change", later);
  }
}

function options(select, list, value) {
  select.innerHTML = "";
  for (const s of list) {
    const o = document.createElement("option");
    o.textContent = s;
    select.appendChild(o);
  }
  select.value = value;
}

// Draws a horizontal line at y = 0 so the zero line is visible on every chart.
function zeroLine(u) {
  const y = Math.round(u.valToPos(0, "y", true));
  if (!Number.isFinite(y)) return;
  const ctx = u.ctx;
  ctx.save();
  ctx.strokeStyle = "#000";
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(u.bbox.left, y + 0.5);
  ctx.lineTo(u.bbox.left + u.bbox.width, y + 0.5);
  ctx.stroke();
  ctx.restore();
}

// The width a scene's panels may use, even while the scene is hidden.
function avail(box) {
  return Math.max(640, box.clientWidth || document.body.clientWidth - 48);
}

function replaceChart(key, opts, data, el) {
  if (lab.charts[key]) lab.charts[key].destroy();
  lab.charts[key] = new uPlot(opts, data, el);
  return lab.charts[key];
}

function panel(container, title) {
  const p = document.createElement("div");
  p.className = "panel";
  const h = document.createElement("h3");
  h.textContent = title;
  p.appendChild(h);
  container.appendChild(p);
  return p;
}

function cards(parent, list) {
  const box = document.createElement("div");
  box.className = "cards";
  for (const c of list) {
    const d = document.createElement("div");
    d.className = "card" + (c.cls ? " " + c.cls : "");
    d.dataset.key = c.key;
    d.dataset.value = c.value == null ? "null" : String(c.value);
    d.innerHTML = `<div class="v"></div><div class="l"></div>`;
    d.querySelector(".v").textContent = c.text;
    d.querySelector(".l").textContent = c.label;
    box.appendChild(d);
  }
  parent.appendChild(box);
  return box;
}

const axisFont = "12px system-ui, sans-serif";
function axes(xLabel, yLabel, yValues) {
  const y = { label: yLabel, font: axisFont, labelFont: axisFont, border: { show: true, stroke: "#000", width: 1 }, size: 60 };
  if (yValues) y.values = yValues;
  return [
    { label: xLabel, font: axisFont, labelFont: axisFont, border: { show: true, stroke: "#000", width: 1 } },
    y,
  ];
}

// ---------------------------------------------------------------- 1 Failover

const STRATEGIES = [
  "none", "immediate", "exponential", "full", "equal", "decorrelated",
  "full+budget", "full+breaker", "full+budget+breaker",
  "exponential+budget+breaker", "immediate+budget+breaker", "full+throttle",
];

function failoverParams() {
  const s1 = $("fo-strategy").value;
  const compare = $("fo-compare").checked;
  const s2 = $("fo-strategy2").value;
  return {
    model: "failover",
    strategy: compare ? `${s1},${s2}` : s1,
    burst: $("fo-burst").value,
    capacity: $("fo-capacity").value,
    base: `${$("fo-base").value}ms`,
    attempts: $("fo-attempts").value,
    outage_end: `${$("fo-outage").value}s`,
    runs: $("fo-runs").value,
    seed: "1",
  };
}

// Mean of load ÷ capacity over the last quarter of the run: where the
// system settled once the outage was long over.
function settled(row, capacity) {
  const l = row.series.load;
  const from = Math.floor(l.length * 0.75);
  const tail = l.slice(from);
  if (!tail.length) return null;
  return tail.reduce((a, b) => a + b, 0) / tail.length / capacity;
}

// Shades the outage behind the bars, so the chart shows where it is and
// the text's "from 2 s to 5 s" can be checked against it; the span drawn,
// in canvas pixels, is kept on the chart as `u.shaded`.
function outageShade(from, to) {
  return (u) => {
    const x0 = u.valToPos(from, "x", true), x1 = u.valToPos(to, "x", true);
    if (!Number.isFinite(x0) || !Number.isFinite(x1)) return;
    const ctx = u.ctx;
    ctx.save();
    ctx.fillStyle = "rgba(120, 120, 120, 0.16)";
    ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
    ctx.restore();
    u.shaded = [x0, x1];
  };
}

function failoverChart(key, el, row, params, ymax, width) {
  const s = row.series;
  const first = s.load.map((v, i) => v - s.retries[i]);
  const cap = s.t_s.map(() => params.capacity);
  const stepped = uPlot.paths.stepped({ align: 1 });
  const opts = {
    width,
    height: 320,
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: false }, y: { range: () => [0, ymax] } },
    axes: axes("time (s) — drag to zoom, double-click to reset", "attempts per tick"),
    series: [
      { label: "t", value: (u, v) => (v == null ? "–" : `${fmt(v)} s`) },
      {
        label: "retries", stroke: C.retry, fill: C.retry + "bb", width: 1, paths: stepped,
        value: (u, v, si, i) => (i == null ? "–" : fmt(u.data[1][i] - u.data[2][i])),
      },
      { label: "first attempts", stroke: C.first, fill: C.first + "dd", width: 1, paths: stepped },
      { label: "successes", stroke: C.ok, width: 2, paths: stepped },
      { label: "capacity", stroke: C.cap, width: 1.5, dash: [6, 4] },
    ],
    hooks: { drawClear: [outageShade(params.outage_start_s, params.outage_end_s)], draw: [zeroLine] },
  };
  // data[1] is the whole load (first attempts + retries): drawn first, the
  // first attempts painted over it, so the retries show stacked on top.
  return replaceChart(key, opts, [s.t_s, s.load, first, s.successes, cap], el);
}

// The scene's words that name a setting say what the sliders say.
function failoverWords() {
  const capacity = Number($("fo-capacity").value);
  const end = Number($("fo-outage").value);
  $("fo-t-capacity").textContent = fmt(capacity, 0);
  $("fo-t-busy").textContent = fmt((8 / capacity) * 100, 0);
  $("fo-t-end").textContent = fmt(end, 1);
  $("fo-t-length").textContent = fmt(end - 2, 1);
}

async function updateFailover() {
  failoverWords();
  await run("fo", async (current) => {
    const params = failoverParams();
    const { query, doc } = await api("simulate", params);
    if (!current()) return "";
    const p = doc.params;
    const rows = doc.strategies;
    const outageEnd = p.outage_end_s;
    // One y scale for every panel: the finding (post-outage load) in view,
    // the burst clipped unless asked for.
    let burstPeak = 0, after = 0;
    for (const r of rows) {
      r.series.load.forEach((v, i) => {
        if (r.series.t_s[i] >= outageEnd) after = Math.max(after, v);
        else burstPeak = Math.max(burstPeak, v);
      });
    }
    const finding = Math.max(after * 1.15, p.capacity * 1.6, 1);
    const full = Math.max(burstPeak, after) * 1.05;
    const clip = !$("fo-fullscale").checked && burstPeak > finding;
    let ymax = clip ? finding : Math.max(full, finding);
    // Steps that change only the strategy compare on one y scale: the
    // scale grows to the largest seen, never shrinks, so a lower chart is
    // lower load, not a new axis ("the spikes are gone" was partly the axis).
    const same = JSON.stringify({ ...params, strategy: null, full: $("fo-fullscale").checked });
    if (lab.foScale && lab.foScale.same === same) ymax = Math.max(ymax, lab.foScale.ymax);
    lab.foScale = { same, ymax };
    const box = $("fo-panels");
    box.innerHTML = "";
    // Side by side in compare mode, one column otherwise.
    box.style.display = "grid";
    box.style.gridTemplateColumns = rows.length > 1 ? "1fr 1fr" : "minmax(0, 1140px)";
    for (const k of Object.keys(lab.charts)) {
      if (k.startsWith("fo-")) { lab.charts[k].destroy(); delete lab.charts[k]; }
    }
    const width = rows.length > 1 ? Math.max(420, Math.floor((avail(box) - 64) / 2)) : Math.min(1100, avail(box) - 20);
    rows.forEach((r, i) => {
      const pn = panel(box, r.strategy);
      pn.dataset.strategy = r.strategy;
      pn.style.minWidth = "0";
      const tail = settled(r, p.capacity);
      cards(pn, [
        { key: "amplification", value: r.amplification, text: `${fmt(r.amplification)}×`, label: "amplification (attempts ÷ requests)" },
        { key: "request_success", value: r.request_success, text: `${fmt(r.request_success * 100, 1)} %`, label: "requests that succeeded" },
        { key: "post_outage_peak_over_capacity", value: r.post_outage_peak_over_capacity, text: `${fmt(r.post_outage_peak_over_capacity)}×`, label: "peak load ÷ capacity after the outage", cls: r.post_outage_peak_over_capacity > 1 ? "bad" : "good" },
        { key: "settled", value: tail, text: `${fmt(tail)}×`, label: "mean load ÷ capacity, last quarter", cls: tail > 1 ? "bad" : "good" },
        { key: "recovery_s", value: r.recovery_s, text: r.recovery_s == null ? "never" : `${fmt(r.recovery_s)} s`, label: "recovery after the outage", cls: r.recovery_s == null ? "bad" : "good" },
      ]);
      const el = document.createElement("div");
      pn.appendChild(el);
      failoverChart(`fo-${i}`, el, r, p, ymax, width);
      if (clip) {
        const note = document.createElement("div");
        note.className = "note";
        note.textContent = `The burst reaches ${fmt(burstPeak, 0)} attempts per tick during the outage, above the top of this axis (${fmt(ymax, 0)}): the axis is fitted to what happens after the outage. Tick "show the whole burst" to see it.`;
        pn.appendChild(note);
      }
    });
    lab.last.failover = { query, doc, ymax, clipped: clip };
    const words = rows.map((r) => {
      const tail = settled(r, p.capacity);
      return r.recovery_s == null
        ? `<b>${r.strategy}</b>: after the outage ends at ${fmt(outageEnd)} s the load stays at about ${fmt(tail, 1)}× capacity to the end of the run — the retries alone keep the dependency overloaded (metastable), and only ${fmt(r.request_success * 100, 0)} % of requests succeed.`
        : `<b>${r.strategy}</b>: the dependency recovers ${fmt(r.recovery_s, 1)} s after the outage ends; ${fmt(r.request_success * 100, 0)} % of requests succeed, ${fmt(r.amplification)} attempts per request.`;
    });
    $("fo-finding").innerHTML = words.join("<br>");
    return `${rows.length} strateg${rows.length > 1 ? "ies" : "y"} × ${p.runs} runs, seed ${p.seed}`;
  });
}

// ------------------------------------------------------------------ 2 Jitter

const JITTERS = ["none", "full", "equal", "decorrelated"];

async function updateJitter() {
  await run("ji", async (current) => {
    const retries = Number($("ji-retries").value);
    const common = { base: `${$("ji-base").value}ms`, cap: `${$("ji-cap").value}ms`, attempts: retries + 1, samples: 4000, seed: 1 };
    const answers = [];
    for (const j of JITTERS) answers.push(await api("schedule", { ...common, jitter: j }));
    if (!current()) return "";
    let max = 0;
    for (const a of answers) for (const r of a.doc.retries) for (const x of r.samples_ms) max = Math.max(max, x);
    const bins = 60;
    const w = max / bins || 1;
    // Bin edges, each value held from its bin's left edge to the next, so
    // a bar sits exactly over the delays it counts (drawn from the bins'
    // centres, the bars stood half a bin off their range).
    const xs = Array.from({ length: bins + 1 }, (_, i) => i * w);
    const box = $("ji-panels");
    box.innerHTML = "";
    lab.last.jitter = {};
    JITTERS.forEach((j, k) => {
      const doc = answers[k].doc;
      lab.last.jitter[j] = { query: answers[k].query, doc };
      const pn = panel(box, `${j} jitter`);
      const series = [{ label: "delay", value: (u, v) => (v == null ? "–" : `${fmt(v, 0)}–${fmt(v + w, 0)} ms`) }];
      const data = [xs];
      doc.retries.forEach((r, i) => {
        // The last edge closes the last bin (its value repeats the bin's).
        const h = new Array(bins + 1).fill(0);
        for (const x of r.samples_ms) h[Math.min(bins - 1, Math.floor(x / w))] += 1;
        h[bins] = h[bins - 1];
        data.push(h.map((c) => (100 * c) / r.samples_ms.length));
        // Decorrelated jitter draws from the previous delay, not from b_n: its label gives its range.
        const about = j === "decorrelated" ? `${fmt(r.min_ms, 0)}–${fmt(r.max_ms, 0)} ms` : `b=${fmt(r.backoff_ms, 0)} ms`;
        series.push({ label: `retry ${r.retry} (${about})`, stroke: PALETTE[i % PALETTE.length], width: 2, paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => (v == null ? "–" : `${fmt(v, 1)} %`) });
      });
      const el = document.createElement("div");
      pn.appendChild(el);
      replaceChart(`ji-${j}`, {
        width: Math.max(420, Math.floor((avail(box) - 60) / 2)),
        height: 220,
        scales: { x: { time: false, range: [0, max] }, y: { range: (u, lo, hi) => [0, Math.max(hi * 1.05, 1)] } },
        axes: axes("delay before the retry (ms)", "% of calls"),
        series,
        hooks: { draw: [zeroLine] },
      }, data, el);
    });
    return `${common.samples} calls per jitter, seed 1`;
  });
}

// ------------------------------------------------------------------ 3 Layers

// The log axis is marked where the scene's numbers are: attempts per
// layer to the power 0, 1, … layers (1, 4, 16, 64 for 3 layers of 4), so
// attempts^layers is labelled; powers of 10 when a layer makes one attempt.
function layerMarks(params, top) {
  const a = Number(params.attempts);
  const marks = [];
  if (a >= 2) {
    for (let k = 0, v = 1; k <= Number(params.layers) && v <= top; k++, v *= a) marks.push(v);
  } else {
    for (let v = 1; v <= top; v *= 10) marks.push(v);
  }
  return marks;
}

async function updateLayers() {
  await run("la", async (current) => {
    const params = { model: "layers", layers: $("la-layers").value, attempts: $("la-attempts").value, runs: $("la-runs").value, seed: 1 };
    const { query, doc } = await api("simulate", params);
    if (!current()) return "";
    lab.last.layers = { query, doc };
    const rates = doc.params.failure_rates;
    const keys = [];
    for (const r of doc.strategies) {
      const k = `${r.strategy} · ${r.retry_at}`;
      if (!keys.includes(k)) keys.push(k);
    }
    // Failure rates on a log axis (0.01, 0.1, 0.5, 1 evenly spaced read as
    // a linear scale); one at 0 falls back to evenly spaced categories.
    const logX = rates.every((f) => f > 0);
    const data = [logX ? rates.slice() : rates.map((_, i) => i)];
    const rateOf = (v) => (logX ? v : rates[v]);
    const series = [{ label: "dependency failure rate", value: (u, v) => (v == null || rateOf(v) == null ? "–" : String(rateOf(v))) }];
    keys.forEach((k, i) => {
      data.push(rates.map((f) => {
        const r = doc.strategies.find((x) => `${x.strategy} · ${x.retry_at}` === k && x.failure_rate === f);
        return r ? r.bottom_attempts_per_request : null;
      }));
      series.push({ label: k, stroke: PALETTE[i % PALETTE.length], width: 2, points: { size: 7 }, value: (u, v) => fmt(v, 3) });
    });
    const box = $("la-panels");
    box.innerHTML = "";
    const pn = panel(box, `attempts reaching the dependency per user request (${doc.params.layers} layers × ${doc.params.attempts} attempts)`);
    const el = document.createElement("div");
    pn.appendChild(el);
    replaceChart("la", {
      width: Math.min(1000, avail(box) - 20),
      height: 300,
      scales: {
        x: logX
          ? { time: false, distr: 3, range: [Math.min(...rates) / 1.6, Math.max(...rates) * 1.6] }
          : { time: false, range: [-0.2, rates.length - 0.8] },
        y: { distr: 3, range: (u, lo, hi) => [1, Math.max(hi * 1.3, 2)] },
      },
      axes: [
        { label: `probability that the dependency fails an attempt${logX ? " (log)" : ""}`, font: axisFont, labelFont: axisFont, splits: () => data[0].slice(), filter: (u, splits) => splits, values: (u, vs) => vs.map((v) => (rateOf(v) == null ? "" : String(rateOf(v)))), border: { show: true, stroke: "#000", width: 1 } },
        { label: "attempts per request (log)", font: axisFont, labelFont: axisFont, size: 60, border: { show: true, stroke: "#000", width: 1 }, splits: (u) => layerMarks(doc.params, u.scales.y.max), filter: (u, splits) => splits, values: (u, vs) => vs.map((v) => fmt(v, 0)) },
      ],
      series,
    }, data, el);
    const t = $("la-table");
    t.innerHTML = "<tr><th>strategy</th><th>retry at</th><th>failure rate</th><th>dependency attempts per request</th><th>success</th></tr>";
    for (const r of doc.strategies) {
      const tr = document.createElement("tr");
      for (const v of [r.strategy, r.retry_at, r.failure_rate, fmt(r.bottom_attempts_per_request, 3), `${fmt(r.request_success * 100, 1)} %`]) {
        const td = document.createElement("td");
        td.textContent = v;
        tr.appendChild(td);
      }
      t.appendChild(tr);
    }
    return `${doc.params.runs} runs per row`;
  });
}
