// The replay page of `dilemmax view`: reads the run's index (#run-index) and, when an episode is
// picked, inflates its payload (#ep-<n>: zlib JSON in base64, dilemmax/view/trace.py) once.
"use strict";

const RUN = JSON.parse(document.getElementById("run-index").textContent);
const cache = new Map();
const state = { episode: 0, t: 0, data: null, timer: null };
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(+v.toPrecision(4));
  if (Array.isArray(v)) return "[" + v.map(fmt).join(", ") + "]";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

async function inflate(text) {
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return JSON.parse(await new Response(stream).text());
}

async function episodeData(n) {
  if (!cache.has(n)) {
    const raw = await inflate(document.getElementById("ep-" + n).textContent.trim());
    cache.set(n, prepare(raw, RUN.envs[RUN.episodes[n].env]));
  }
  return cache.get(n);
}

// Cumulative returns, event totals and grid checkpoints, computed once per episode.
function prepare(d, env) {
  d.env = env;
  d.returns = d.rewards.map((row) => {
    const out = new Float64Array(row.length + 1);
    row.forEach((r, t) => { out[t + 1] = out[t] + r; });
    return out;
  });
  d.totals = {};
  for (const [name, v] of Object.entries(d.events)) {
    d.totals[name] = Array.isArray(v[0])
      ? v[0].map((_, t) => v.reduce((s, row) => s + row[t], 0)) : v;
  }
  if (d.grid) {
    const g = d.grid, cells = new Uint8Array(g.height * g.width);
    let i = 0;
    for (let k = 0; k < g.start.length; k += 2) cells.fill(g.start[k], i, i + g.start[k + 1]), i += g.start[k + 1];
    g.every = 64;  // a copy of the grid every 64 steps: any step is at most 64 deltas away
    g.checkpoints = [cells.slice()];
    g.changes.forEach((ch, t) => {
      for (let k = 0; k < ch.length; k += 2) cells[ch[k]] = ch[k + 1];
      if ((t + 1) % g.every === 0) g.checkpoints.push(cells.slice());
    });
  }
  return d;
}

function gridAt(g, t) {
  const base = Math.floor(t / g.every);
  const cells = g.checkpoints[base].slice();
  for (let s = base * g.every; s < t; s++) {
    const ch = g.changes[s];
    for (let k = 0; k < ch.length; k += 2) cells[ch[k]] = ch[k + 1];
  }
  return cells;
}

const BEAM_TINT = [255, 255, 170];  // grid_render.render_cells' highlight colour

function rgb(c) { return `rgb(${c[0]},${c[1]},${c[2]})`; }

function drawGrid(d, t) {
  const g = d.grid, env = d.env, canvas = $("frame");
  const size = Math.max(8, Math.min(28, Math.floor(560 / g.width)));
  canvas.width = g.width * size; canvas.height = g.height * size;
  const ctx = canvas.getContext("2d");
  const cells = gridAt(g, t), lit = new Set(g.beams[t]);
  for (let r = 0; r < g.height; r++) for (let c = 0; c < g.width; c++) {
    let colour = env.palette[cells[r * g.width + c]] || [255, 0, 255];
    // a beam fired on the last step: half-way to pale yellow, as render_rgb tints it
    if (lit.has(r * g.width + c)) colour = colour.map((v, k) => Math.floor((v + BEAM_TINT[k]) / 2));
    ctx.fillStyle = rgb(colour);
    ctx.fillRect(c * size, r * size, size, size);
  }
  const pos = g.positions[t], facing = g.facings[t], frozen = g.frozen[t];
  env.agents.forEach((_, i) => {
    const r = pos[2 * i], c = pos[2 * i + 1];
    if (r < 0 || c < 0 || r >= g.height || c >= g.width) return;
    const cx = c * size + size / 2, cy = r * size + size / 2, h = size * 0.42;
    const pts = [[0, -h], [h, h], [-h, h]];  // north; turned clockwise per facing
    const turn = (facing[i] % 4) * Math.PI / 2;
    ctx.beginPath();
    pts.forEach(([x, y], k) => {
      const X = cx + x * Math.cos(turn) - y * Math.sin(turn), Y = cy + x * Math.sin(turn) + y * Math.cos(turn);
      if (k === 0) ctx.moveTo(X, Y); else ctx.lineTo(X, Y);
    });
    ctx.closePath();
    ctx.fillStyle = frozen[i] ? "rgb(170,170,170)" : rgb(env.colours[i]);
    ctx.fill(); ctx.lineWidth = 1.5; ctx.strokeStyle = "rgb(20,20,24)"; ctx.stroke();
    ctx.font = `bold ${Math.round(size * 0.5)}px sans-serif`;
    ctx.textAlign = "center"; ctx.textBaseline = "middle";
    ctx.lineWidth = 3; ctx.strokeStyle = "#fff"; ctx.strokeText(env.letters[i], cx, cy + size * 0.12);
    ctx.fillStyle = "#000"; ctx.fillText(env.letters[i], cx, cy + size * 0.12);
  });
}

function drawBoard(d, t) {
  $("boardText").textContent = d.board.text[t];
  const body = $("fields");
  body.replaceChildren();
  for (const [k, v] of Object.entries(d.board.fields[t])) body.append(el("tr", {}, el("td", {}, k), el("td", {}, fmt(v))));
}

function legalNames(word, names) {
  const bits = BigInt("0x" + word), out = [];
  names.forEach((n, a) => { if ((bits >> BigInt(a)) & 1n) out.push(n); });
  return out.join(", ");
}

function drawAgents(d, t) {
  const env = d.env, body = $("agents").querySelector("tbody"), ep = RUN.episodes[state.episode];
  body.replaceChildren();
  const acting = t < d.steps;
  env.agents.forEach((agent, i) => {
    const a = acting ? d.actions[i][t] : null;
    const name = a === null ? "–" : `${env.actions[a] !== undefined ? env.actions[a] : a} (${a})`;
    const row = el("tr", { "data-agent": agent },
      el("td", {}, el("span", { class: "swatch", style: env.colours ? `background:${rgb(env.colours[i])}` : "" }), `${env.letters[i]} ${agent}`),
      el("td", {}, (ep.seats || {})[agent] || ""),
      el("td", { class: "action", "data-action": a === null ? "" : a }, name),
      el("td", { class: "num reward" }, acting ? fmt(d.rewards[i][t]) : "–"),
      el("td", { class: "num return" }, fmt(d.returns[i][Math.min(t + (acting ? 1 : 0), d.steps)])),
      el("td", { class: "legal" }, acting ? legalNames(d.legal[i][t], env.actions) : "–"));
    for (const [name, v] of Object.entries(d.events)) {
      if (Array.isArray(v[0])) row.append(el("td", { class: "num" }, acting ? fmt(v[i][t]) : "–"));
    }
    body.append(row);
  });
  const head = $("agents").querySelector("thead tr");
  head.replaceChildren(...["agent", "seat", "action", "reward", "return", "legal actions"].map((h) => el("th", {}, h)));
  for (const [name, v] of Object.entries(d.events)) if (Array.isArray(v[0])) head.append(el("th", {}, name));
}

function drawCalls(d, t) {
  const box = $("calls");
  box.replaceChildren();
  const now = d.calls.filter((c) => c.step === t);
  if (!d.calls.length) { box.append(el("p", { class: "muted" }, "no model seat in this episode")); return; }
  if (!now.length) box.append(el("p", { class: "muted" }, "no model call at this step"));
  for (const c of now) box.append(callBox(c, d.env));
  const notes = d.calls.filter((c) => c.kind !== "act" && c.step < t);
  if (notes.length) {
    const list = el("div", { id: "notes" }, el("h2", {}, "notes carried between trials (before this step)"));
    for (const c of notes) list.append(el("div", { class: "note", "data-agent": c.agent },
      el("b", {}, `${c.agent} after step ${c.step} (${c.kind}): `), el("pre", {}, c.reply || "")));
    box.append(list);
  }
}

function callBox(c, env) {
  const action = c.action === undefined || c.action === null ? "–"
    : `${env.actions[c.action] !== undefined ? env.actions[c.action] : c.action} (${c.action})`;
  const tokens = `${c.prompt_tokens || 0} + ${c.completion_tokens || 0}` + (c.reasoning_tokens ? ` (${c.reasoning_tokens} reasoning)` : "");
  return el("div", { class: "call" + (c.valid === false ? " invalid" : ""), "data-agent": c.agent, "data-kind": c.kind },
    el("div", { class: "meta" }, el("b", {}, `${c.agent} · ${c.seat || ""} · ${c.kind}`),
      ` · parsed `, el("span", { class: "parsed", "data-action": c.action ?? "" }, action),
      ` · `, el("span", { class: "validity" }, c.valid === false ? "invalid" : "valid"),
      c.parse_error ? ` (${c.parse_error})` : "", c.error ? ` · error ${c.error}` : "",
      ` · retries ${c.retries || 0} · tokens ${tokens} · ${fmt(c.latency_s)} s`),
    el("details", {}, el("summary", {}, "prompt"), el("pre", { class: "prompt" }, (c.system ? c.system + "\n\n" : "") + (c.prompt || ""))),
    el("pre", { class: "reply" }, c.reply || ""),
    c.fields && Object.keys(c.fields).length ? el("pre", { class: "fields" }, JSON.stringify(c.fields)) : null);
}

const SERIES_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// Returns per agent and each key event (summed over agents) over the episode, drawn once per
// episode as polylines of at most ~600 points; the marker moves with the slider.
function drawSeries(d) {
  const box = $("series");
  box.replaceChildren();
  const W = 760, n = d.steps, x = (t) => 40 + (W - 50) * t / Math.max(n, 1);
  const plot = (title, lines, height) => {
    const s = svg("svg", { width: W, height, class: "plot" });
    let lo = 0, hi = 0;
    for (const l of lines) for (const v of l.values) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (hi === lo) hi = lo + 1;
    const y = (v) => height - 14 - (height - 24) * (v - lo) / (hi - lo);
    const stride = Math.max(1, Math.floor(l0(lines) / 600));
    lines.forEach((l, k) => {
      const pts = [];
      for (let t = 0; t < l.values.length; t += stride) {
        pts.push(`${x(t).toFixed(1)},${y(l.values[t]).toFixed(1)}`);
        // a per-step event holds over its step: a flat segment to the next step
        if (l.steps) pts.push(`${x(Math.min(t + stride, n)).toFixed(1)},${y(l.values[t]).toFixed(1)}`);
      }
      s.append(svg("polyline", { points: pts.join(" "), fill: "none", stroke: l.colour || SERIES_COLOURS[k % 10], "stroke-width": 1.5 }));
    });
    const label = svg("text", { x: 44, y: 12, "font-size": 11 }); label.textContent = `${title} (${fmt(lo)} … ${fmt(hi)})`;
    s.append(label, svg("line", { class: "marker", x1: x(0), x2: x(0), y1: 0, y2: height, stroke: "#c00", "stroke-width": 1 }));
    box.append(s);
  };
  const l0 = (lines) => Math.max(...lines.map((l) => l.values.length));
  plot("return per agent", d.returns.map((r, i) => ({ values: Array.from(r), colour: d.env.colours ? rgb(d.env.colours[i]) : undefined })), 110);
  for (const [name, v] of Object.entries(d.totals)) plot(name + (Array.isArray(d.events[name][0]) ? " (all agents)" : ""), [{ values: v, steps: true }], 48);
}

function moveMarkers(d, t) {
  const W = 760, x = 40 + (W - 50) * t / Math.max(d.steps, 1);
  for (const m of document.querySelectorAll("#series .marker")) { m.setAttribute("x1", x); m.setAttribute("x2", x); }
}

function drawTrials(d) {
  const box = $("trials");
  box.replaceChildren();
  const entries = Object.entries(d.trials || {});
  box.parentElement.style.display = entries.length ? "" : "none";
  for (const [name, table] of entries) {
    const K = table.length, A = d.env.agents.length, W = 300, H = 110;
    const s = svg("svg", { width: W, height: H });
    let hi = 0; table.forEach((row) => row.forEach((v) => { if (v !== null) hi = Math.max(hi, v); }));
    hi = hi || 1;
    const band = (W - 30) / K, bar = band / (A + 1);
    table.forEach((row, k) => row.forEach((v, i) => {
      const h = (H - 30) * (v || 0) / hi;
      s.append(svg("rect", { x: 25 + k * band + i * bar, y: H - 15 - h, width: bar - 1, height: h, fill: d.env.colours ? rgb(d.env.colours[i]) : SERIES_COLOURS[i % 10] }));
    }));
    for (let k = 0; k < K; k++) { const tx = svg("text", { x: 25 + k * band + band / 2 - 8, y: H - 2, "font-size": 10 }); tx.textContent = `t${k + 1}`; s.append(tx); }
    const label = svg("text", { x: 25, y: 11, "font-size": 11 }); label.textContent = `${name} per trial (max ${fmt(hi)})`;
    s.append(label);
    box.append(el("div", { class: "trial-figure", "data-name": name }, s));
  }
}

function drawMetrics(n) {
  const body = $("metrics").querySelector("tbody");
  body.replaceChildren();
  const axes = RUN.envs[RUN.episodes[n].env].metric_axes || {};  // "per trial and agent", ...
  for (const [k, v] of Object.entries(RUN.episodes[n].metrics || {})) body.append(el("tr", {}, el("td", {}, k), el("td", {}, axes[k] || ""), el("td", {}, fmt(v))));
}

function show(t) {
  const d = state.data;
  t = Math.max(0, Math.min(d.steps, t | 0));
  state.t = t;
  $("step").value = t;
  const trial = d.trial ? d.trial[Math.min(t, d.steps - 1)] : null;
  $("stepLabel").textContent = `step ${t} / ${d.steps}` + (trial !== null ? ` · trial ${trial + 1}` : "");
  if (d.trial) $("trial").value = String(trial);
  if (d.grid) drawGrid(d, t); else drawBoard(d, t);
  drawAgents(d, t);
  drawCalls(d, t);
  moveMarkers(d, t);
}

async function pick(n) {
  stop();
  state.episode = n;
  state.data = await episodeData(n);
  const d = state.data;
  $("episode").value = String(n);
  $("group").value = RUN.episodes[n].group;
  $("step").max = d.steps;
  $("gridPanel").style.display = d.grid ? "" : "none";
  $("boardPanel").style.display = d.grid ? "none" : "";
  const trials = $("trial");
  trials.replaceChildren();
  if (d.trial) {
    const seen = [...new Set(d.trial)];
    for (const k of seen) trials.append(el("option", { value: k }, `trial ${k + 1}`));
  }
  trials.parentElement.style.display = d.trial ? "" : "none";
  drawMetrics(n);
  drawSeries(d);
  drawTrials(d);
  show(0);
  document.body.dataset.ready = String(n);
  // When the first episode was drawn (the size benchmark reads it: benchmarks/view_size.py).
  if (!document.body.dataset.firstMs) document.body.dataset.firstMs = performance.now().toFixed(1);
}

function fillEpisodes(group) {
  const box = $("episode");
  box.replaceChildren();
  RUN.episodes.forEach((e, n) => { if (e.group === group) box.append(el("option", { value: n }, e.label)); });
}

function play() {
  if (state.timer) return stop();
  $("play").textContent = "pause";
  state.timer = setInterval(() => {
    if (state.t >= state.data.steps) return stop();
    show(state.t + 1);
  }, 1000 / Math.max(1, +$("speed").value));
}

function stop() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
  $("play").textContent = "play";
}

function init() {
  $("title").textContent = RUN.title;
  $("kind").textContent = `${RUN.kind} · ${RUN.episodes.length} episode(s)`;
  const groups = [...new Set(RUN.episodes.map((e) => e.group))];
  for (const g of groups) $("group").append(el("option", { value: g }, g));
  $("group").addEventListener("change", (e) => { fillEpisodes(e.target.value); pick(+$("episode").value); });
  $("episode").addEventListener("change", (e) => pick(+e.target.value));
  $("trial").addEventListener("change", (e) => show(state.data.trial.indexOf(+e.target.value)));
  $("step").addEventListener("input", (e) => { stop(); show(+e.target.value); });
  $("prev").addEventListener("click", () => { stop(); show(state.t - 1); });
  $("next").addEventListener("click", () => { stop(); show(state.t + 1); });
  $("play").addEventListener("click", play);
  document.addEventListener("keydown", (e) => {
    // Menus and the slider move with the arrows themselves (the slider then fires "input").
    if (["SELECT", "INPUT"].includes(e.target.tagName) || !state.data) return;
    if (e.key === "ArrowRight") { stop(); show(state.t + 1); e.preventDefault(); }
    else if (e.key === "ArrowLeft") { stop(); show(state.t - 1); e.preventDefault(); }
    else if (e.key === " ") { play(); e.preventDefault(); }
  });
  fillEpisodes(groups[0]);
  pick(0);
}

// What the page shows now, for scripts that drive it (the tests).
window.viewState = () => ({
  t: state.t, episode: state.episode, steps: state.data && state.data.steps,
  grid: state.data && state.data.grid,
});

init();
