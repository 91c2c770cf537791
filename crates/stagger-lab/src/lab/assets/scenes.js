// stagger lab, scenes 4 to 7 and the page's setup (app.js, loaded first,
// has the helpers and scenes 1 to 3).
"use strict";

// -------------------------------------------------------------- 4 Contention

async function updateContention() {
  await run("co", async (current) => {
    const params = { model: "contention", clients: `1..${$("co-clients").value}`, base: `${$("co-base").value}ms`, runs: $("co-runs").value, seed: 1 };
    const { query, doc } = await api("simulate", params);
    if (!current()) return "";
    lab.last.contention = { query, doc };
    const names = [...new Set(doc.strategies.map((r) => r.strategy))];
    const counts = [...new Set(doc.strategies.map((r) => r.clients))].sort((a, b) => a - b);
    const box = $("co-panels");
    box.innerHTML = "";
    for (const [field, title, label] of [["calls", "calls made until every client succeeded", "calls"], ["completion_ms", "time until the last client succeeded", "ms"]]) {
      const data = [counts];
      const series = [{ label: "clients" }];
      names.forEach((n, i) => {
        data.push(counts.map((c) => {
          const r = doc.strategies.find((x) => x.strategy === n && x.clients === c);
          return r ? r[field] : null;
        }));
        series.push({ label: n, stroke: PALETTE[i % PALETTE.length], width: 2, value: (u, v) => fmt(v, 0) });
      });
      const pn = panel(box, title);
      const el = document.createElement("div");
      pn.appendChild(el);
      replaceChart(`co-${field}`, {
        width: Math.max(420, Math.floor((avail(box) - 60) / 2)),
        height: 280,
        scales: { x: { time: false }, y: { range: (u, lo, hi) => [0, hi * 1.05] } },
        axes: axes("racing clients", label),
        series,
        hooks: { draw: [zeroLine] },
      }, data, el);
    }
    return `${doc.params.runs} runs per point`;
  });
}

// -------------------------------------------------------------- 5 Metastable

async function updateMetastable() {
  await run("me", async (current) => {
    const params = {
      model: "metastable", strategy: $("me-strategy").value, rate: $("me-rate").value, capacity: $("me-capacity").value,
      attempts: $("me-attempts").value, server_skips_expired: $("me-skip").checked ? "1" : "0", runs: $("me-runs").value, seed: 1,
    };
    const { query, doc } = await api("simulate", params);
    if (!current()) return "";
    lab.last.metastable = { query, doc };
    const r = doc.strategies[0];
    const p = doc.params;
    const box = $("me-panels");
    box.innerHTML = "";
    const pn = panel(box, `${r.strategy}${p.server_skips_expired ? ", server skips expired work" : ""}`);
    cards(pn, [
      { key: "goodput_before", value: r.goodput_before, text: fmt(r.goodput_before, 0), label: "answers in time / s before" },
      { key: "goodput_after", value: r.goodput_after, text: fmt(r.goodput_after, 0), label: "answers in time / s, last 20 s", cls: r.recovered ? "good" : "bad" },
      { key: "recovered", value: r.recovered, text: r.recovered ? "yes" : "no", label: "recovered in every run", cls: r.recovered ? "good" : "bad" },
      { key: "amplification", value: r.amplification, text: `${fmt(r.amplification)}×`, label: "amplification" },
    ]);
    const s = r.series;
    const el = document.createElement("div");
    pn.appendChild(el);
    // What the clients sent (first attempts and retries, as they left) is
    // drawn beside what reached the server: during the slowdown the link
    // holds it, so nothing arrives while the clients keep sending.
    const sent = s.sent;
    const sentMax = Math.max(0, ...sent);
    // Fit the axis to what happens after the slowdown (the finding) and to
    // everything the clients sent; the spike of held attempts delivered as
    // the slowdown ends is clipped unless asked for.
    let spike = 0, after = 0;
    s.load.forEach((v, i) => {
      if (s.t_s[i] >= p.outage_end_s + 3) after = Math.max(after, v);
      else spike = Math.max(spike, v);
    });
    const fit = Math.max(after * 1.15, p.capacity * 1.6, sentMax * 1.05);
    const clip = !$("me-fullscale").checked && spike > fit;
    const top = clip ? fit : Math.max(spike, after, p.capacity, sentMax) * 1.1;
    replaceChart("me", {
      width: Math.min(1100, avail(box) - 20),
      height: 320,
      scales: { x: { time: false }, y: { range: () => [0, top] } },
      axes: axes(`time (s); slowdown ${fmt(p.outage_start_s)}–${fmt(p.outage_end_s)} s (requests held, delivered as it ends)`, "per second"),
      series: [
        { label: "t", value: (u, v) => (v == null ? "–" : `${fmt(v)} s`) },
        { label: "attempts arriving at the server", stroke: C.retry, fill: C.retry + "55", width: 1.5 },
        { label: "of which retries", stroke: C.first, width: 1.5 },
        { label: "sent by the clients (first attempts + retries)", stroke: C.sent, width: 2, dash: [2, 3] },
        { label: "successes", stroke: C.ok, width: 2 },
        { label: "capacity", stroke: C.cap, width: 1.5, dash: [6, 4] },
      ],
      hooks: { drawClear: [outageShade(p.outage_start_s, p.outage_end_s)], draw: [zeroLine] },
    }, [s.t_s, s.load, s.retries, sent, s.successes, s.t_s.map(() => p.capacity)], el);
    lab.last.metastable.chart = { top, clipped: clip, spike, sentMax };
    if (clip) {
      const note = document.createElement("div");
      note.className = "note";
      note.id = "me-clip-note";
      note.textContent = `As the slowdown ends, the ${fmt(spike, 0)} attempts per second held during it arrive at once, above the top of this axis (${fmt(top, 0)}): the axis is fitted to what the clients sent and to what happens afterwards. Tick "show the whole spike" to see it.`;
      pn.appendChild(note);
    }
    return `${p.runs} runs`;
  });
}

// ------------------------------------------------------------------ 6 Decide

function decideParams() {
  const kind = $("de-kind").value;
  const q = { method: $("de-method").value, attempt: $("de-attempt").value, attempts: $("de-attempts").value, budget: $("de-budget").value };
  q[kind] = $(`de-${kind}`).value;
  if ($("de-key").checked) q.idempotency_key = "1";
  // Each protocol's hint in its own unit: HTTP's Retry-After in seconds
  // (or a date), gRPC's pushback in milliseconds.
  const retryAfter = $("de-retry-after").value.trim();
  const pushback = $("de-pushback").value.trim();
  if (retryAfter && kind === "status") q.retry_after = retryAfter;
  if (pushback && kind === "grpc") q.pushback = pushback;
  const rem = $("de-remaining").value.trim();
  if (rem) q.remaining = rem;
  return q;
}

async function updateDecide() {
  const box = $("de-answer");
  for (const k of ["status", "io", "grpc"]) $(`de-${k}-l`).hidden = $("de-kind").value !== k;
  $("de-retry-after-l").hidden = $("de-kind").value !== "status";
  $("de-pushback-l").hidden = $("de-kind").value !== "grpc";
  try {
    const { query, doc } = await api("decide", decideParams());
    lab.last.decide = { query, doc };
    box.innerHTML = "";
    const v = document.createElement("div");
    v.className = `verdict ${doc.decision}`;
    v.id = "de-verdict";
    v.textContent = doc.summary;
    box.appendChild(v);
    const facts = document.createElement("div");
    facts.className = "facts";
    facts.textContent = `facts given to the engine: class ${doc.facts.class ?? "none (not a failure)"}; hint ${doc.facts.hint ?? "none"}; ${doc.facts.not_sent ? "never sent; " : ""}idempotency ${doc.facts.idempotency}; attempt ${doc.attempt} of at most ${doc.max_attempts}`;
    box.appendChild(facts);
    const why = document.createElement("ul");
    for (const w of doc.why) {
      const li = document.createElement("li");
      li.textContent = w;
      why.appendChild(li);
    }
    box.appendChild(why);
    if (doc.steps.length > 1) {
      const st = document.createElement("div");
      st.className = "facts";
      st.textContent = "the call so far (earlier attempts failed the same way): " + doc.steps.map((s) => `#${s.attempt} at ${fmt(s.at_ms, 0)} ms → ${s.decision}`).join("; ");
      box.appendChild(st);
    }
  } catch (e) {
    lab.last.decide = { error: e.message };
    box.innerHTML = "";
    const d = document.createElement("div");
    d.className = "status err";
    d.textContent = e.message;
    box.appendChild(d);
  }
}

// ----------------------------------------------------------------- 7 Hedging

// Requests per strategy the page asks for: well inside the API's bound and
// enough for a steady p99.9 (20 calls beyond it).
const HEDGE_REQUESTS = 20000;

function hedgingParams() {
  const d = `${$("he-delay").value}ms`;
  const pct = $("he-pct").value;
  const list = ["none", d, pct];
  if ($("he-budget").checked) list.push(`${d}+budget`, `${pct}+budget`);
  const params = {
    model: "hedging", strategy: list.join(","), stall_prob: $("he-stall").value,
    capacity: $("he-capacity").value, cancel: $("he-cancel").value, requests: HEDGE_REQUESTS, seed: 1,
  };
  // Utilisation only means something with a fixed number of servers.
  if (params.capacity !== "inf") params.utilisation = $("he-util").value;
  $("he-util").disabled = params.capacity === "inf";
  return params;
}

// One sentence per hedging strategy against `none`: tail cut, or storm.
function hedgingVerdict(base, r, p) {
  const load = `${fmt(r.extra_load * 100, 1)} % more attempts`;
  if (r.p99_ms > base.p99_ms * 1.05 || r.p50_ms > base.p50_ms * 1.5) {
    return `<b>${r.strategy}</b> storms: p99 ${fmt(r.p99_ms, 1)} ms against ${fmt(base.p99_ms, 1)} ms without hedging, for ${load}` +
      (p.cancel === "queued" && p.capacity !== "inf" ? " — the losers keep their servers busy, the queue grows and more hedges fire on queueing delay." : ".");
  }
  if (r.p999_ms < base.p999_ms * 0.5) {
    return `<b>${r.strategy}</b> cuts the tail: p99.9 ${fmt(r.p999_ms, 1)} ms against ${fmt(base.p999_ms, 1)} ms, for ${load}.`;
  }
  if (r.p99_ms < base.p99_ms * 0.5) {
    return `<b>${r.strategy}</b> cuts the p99 (${fmt(r.p99_ms, 1)} ms against ${fmt(base.p99_ms, 1)} ms) but not the p99.9 (${fmt(r.p999_ms, 1)} ms), for ${load}` +
      (r.strategy.includes("+budget") ? ": the budget was spent when some stalled calls needed it." : ".");
  }
  return `<b>${r.strategy}</b> changes little here (p99 ${fmt(r.p99_ms, 1)} ms, p99.9 ${fmt(r.p999_ms, 1)} ms), for ${load}.`;
}

async function updateHedging() {
  await run("he", async (current) => {
    const { query, doc } = await api("simulate", hedgingParams());
    if (!current()) return "";
    lab.last.hedging = { query, doc };
    const p = doc.params;
    const box = $("he-panels");
    box.innerHTML = "";
    for (const r of doc.strategies) {
      const pn = panel(box, r.strategy);
      pn.dataset.strategy = r.strategy;
      cards(pn, [
        { key: "p50_ms", value: r.p50_ms, text: `${fmt(r.p50_ms, 1)} ms`, label: "p50" },
        { key: "p99_ms", value: r.p99_ms, text: `${fmt(r.p99_ms, 1)} ms`, label: "p99" },
        { key: "p999_ms", value: r.p999_ms, text: `${fmt(r.p999_ms, 1)} ms`, label: "p99.9" },
        { key: "extra_load", value: r.extra_load, text: `${fmt(r.extra_load * 100, 1)} %`, label: "extra load" },
      ]);
    }
    const base = doc.strategies.find((r) => r.strategy === "none");
    const lines = base ? doc.strategies.filter((r) => r !== base).map((r) => hedgingVerdict(base, r, p)) : [];
    $("he-verdict").innerHTML = lines.join("<br>");
    const where = p.capacity === "inf" ? "unlimited capacity" : `${p.capacity} servers at ${fmt(p.utilisation * 100, 0)} % utilisation, cancel ${p.cancel}`;
    return `${fmt(p.requests, 0)} requests per strategy, ${where}`;
  });
}

// A step of a scene's story: sets the controls it names (a checkbox to
// true or false, anything else to its value), then redraws the scene once.
function step(button, update) {
  const set = JSON.parse(button.dataset.set);
  for (const [id, v] of Object.entries(set)) {
    const el = $(id);
    if (el.type === "checkbox") el.checked = Boolean(v);
    else el.value = String(v);
    const out = el.parentElement.querySelector("output");
    if (out) out.textContent = el.value;
  }
  update();
}

// -------------------------------------------------------------------- setup

const scenes = {
  failover: updateFailover, jitter: updateJitter, layers: updateLayers,
  contention: updateContention, metastable: updateMetastable, decide: updateDecide,
  hedging: updateHedging, priority: updatePriority,
};
const shown = {};

function show(name) {
  for (const b of document.querySelectorAll("#nav button")) b.classList.toggle("on", b.dataset.scene === name);
  for (const s of document.querySelectorAll(".scene")) s.classList.toggle("on", s.id === `scene-${name}`);
  lab.scene = name;
  if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
  if (!shown[name]) {
    shown[name] = true;
    scenes[name]();
  }
}

function setup() {
  options($("fo-strategy"), STRATEGIES, "exponential");
  options($("fo-strategy2"), STRATEGIES, "full+budget+breaker");
  options($("me-strategy"), ["none", "immediate", "exponential", "full", "full+budget", "full+breaker", "full+budget+breaker"], "exponential");
  wire(["fo-burst", "fo-capacity", "fo-base", "fo-attempts", "fo-outage", "fo-runs"], updateFailover);
  for (const id of ["fo-capacity", "fo-outage"]) $(id).addEventListener("input", failoverWords);
  for (const b of document.querySelectorAll("#scene-failover .step")) b.addEventListener("click", () => step(b, updateFailover));
  for (const b of document.querySelectorAll("#scene-metastable .step")) b.addEventListener("click", () => step(b, updateMetastable));
  for (const id of ["fo-strategy", "fo-strategy2", "fo-compare", "fo-fullscale"]) $(id).addEventListener("change", updateFailover);
  wire(["ji-base", "ji-cap", "ji-retries"], updateJitter);
  wire(["la-layers", "la-attempts", "la-runs"], updateLayers);
  wire(["co-clients", "co-base", "co-runs"], updateContention);
  wire(["me-rate", "me-capacity", "me-attempts", "me-runs"], updateMetastable);
  for (const id of ["me-strategy", "me-skip", "me-fullscale"]) $(id).addEventListener("change", updateMetastable);
  wire(["he-delay", "he-stall", "he-util"], updateHedging);
  for (const id of ["he-pct", "he-budget", "he-capacity", "he-cancel"]) $(id).addEventListener("change", updateHedging);
  setupPriority();
  for (const el of document.querySelectorAll("#scene-decide select, #scene-decide input")) {
    el.addEventListener("change", updateDecide);
    el.addEventListener("input", debounce(updateDecide, 200));
  }
  for (const b of document.querySelectorAll("#nav button")) b.addEventListener("click", () => show(b.dataset.scene));
  window.addEventListener("resize", debounce(() => { for (const n of Object.keys(shown)) scenes[n](); }, 300));
  const first = location.hash.slice(1);
  show(scenes[first] ? first : "failover");
}

setup();
