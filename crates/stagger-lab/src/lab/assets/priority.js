// stagger lab, scene 8: shed what matters least first (the simulator's
// `priority` model). Loaded after app.js and before scenes.js, which lists
// it among the scenes and calls setupPriority().
"use strict";

// The loads the chart's x axis spans, as multiples of the capacity.
const PRIORITY_LOADS = [0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75, 3];
// The server without priorities (today's limit) in the model's report.
const PRIORITY_WITHOUT = "limit (no priorities)";

function priorityParams() {
  return {
    model: "priority", load: PRIORITY_LOADS.join(","), critical_share: $("pr-critical").value,
    duration: `${$("pr-duration").value}s`, runs: 5, seed: 1,
  };
}

// The highest load up to which `ys` (success in %, at `xs`) stays at or
// above `floor` at every load from the first; null when the first is below.
function holdsUpTo(xs, ys, floor) {
  let last = null;
  for (let i = 0; i < xs.length; i++) {
    if (ys[i] == null || ys[i] < floor) break;
    last = xs[i];
  }
  return last;
}

// Marks the load the caption speaks of with a vertical line.
function markLoad(load) {
  return (u) => {
    const x = Math.round(u.valToPos(load, "x", true));
    if (!Number.isFinite(x)) return;
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = "#888";
    ctx.setLineDash([3, 3]);
    ctx.beginPath();
    ctx.moveTo(x + 0.5, u.bbox.top);
    ctx.lineTo(x + 0.5, u.bbox.top + u.bbox.height);
    ctx.stroke();
    ctx.restore();
  };
}

// The caption, from the chart's own data arrays: every number is read from
// what is drawn, at the marked load. Each number is a span carrying its
// raw value (data-key, data-value) so a test can compare it with the chart.
function priorityCaption(u, load, withName) {
  const [xs, critWith, shedWith, critWithout, shedWithout] = u.data;
  const i = xs.indexOf(load);
  const v = (key, value, digits = 1) =>
    `<span data-key="${key}" data-value="${value == null ? "null" : value}">${value == null ? "–" : fmt(value, digits)}</span>`;
  const upTo = (key, ys) => {
    const x = holdsUpTo(xs, ys, 99);
    return x == null ? `${v(key, null)} (below 99 % from the lowest load)` : `${v(key, x, 2)}×`;
  };
  return `At ${v("load", load, 2)}× capacity, <b>critical</b> requests succeed ${v("crit_with", critWith[i])} % with ` +
    `priorities (${withName}) against ${v("crit_without", critWithout[i])} % without; <b>sheddable</b> ones ` +
    `${v("shed_with", shedWith[i])} % against ${v("shed_without", shedWithout[i])} %. Critical success stays at ` +
    `or above 99 % up to ${upTo("crit_with_upto", critWith)} capacity with priorities and up to ` +
    `${upTo("crit_without_upto", critWithout)} without.`;
}

async function updatePriority() {
  await run("pr", async (current) => {
    const { query, doc } = await api("simulate", priorityParams());
    if (!current()) return "";
    lab.last.priority = { query, doc };
    const withName = $("pr-with").value;
    const loads = doc.params.loads;
    const at = (server, field) => loads.map((l) => {
      const r = doc.rows.find((x) => x.server === server && x.load === l);
      return r ? r[field] * 100 : null;
    });
    const data = [
      loads,
      at(withName, "critical_mean"), at(withName, "sheddable_mean"),
      at(PRIORITY_WITHOUT, "critical_mean"), at(PRIORITY_WITHOUT, "sheddable_mean"),
    ];
    const marked = Number($("pr-load").value);
    const box = $("pr-panels");
    box.innerHTML = "";
    const pn = panel(box, `success by priority, ${fmt(doc.params.critical_share * 100, 0)} % critical`);
    const el = document.createElement("div");
    pn.appendChild(el);
    const pct = (u, v) => (v == null ? "–" : `${fmt(v, 1)} %`);
    const u = replaceChart("pr", {
      width: Math.min(1100, avail(box) - 20),
      height: 320,
      scales: { x: { time: false }, y: { range: () => [0, 102] } },
      axes: axes(`arrivals, × the server's capacity (${fmt(doc.params.capacity_rps, 0)} requests/s on ${doc.params.cores} cores)`, "answered in time (%)"),
      series: [
        { label: "load", value: (u, v) => (v == null ? "–" : `${fmt(v, 2)}×`) },
        { label: "critical, with priorities", stroke: C.ok, width: 2.5, value: pct },
        { label: "sheddable, with priorities", stroke: C.retry, width: 2.5, value: pct },
        { label: "critical, without", stroke: C.ok, width: 1.5, dash: [6, 4], value: pct },
        { label: "sheddable, without", stroke: C.retry, width: 1.5, dash: [6, 4], value: pct },
      ],
      hooks: { draw: [zeroLine, markLoad(marked)] },
    }, data, el);
    $("pr-caption").innerHTML = priorityCaption(u, marked, withName);
    return `${doc.seeds.length} seeds per point, ${fmt(doc.params.duration_s, 0)} s simulated each, the mean drawn`;
  });
}

function setupPriority() {
  wire(["pr-critical", "pr-load"], updatePriority);
  for (const id of ["pr-with", "pr-duration"]) $(id).addEventListener("change", updatePriority);
}
