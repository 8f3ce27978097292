// posenc explore: the page's logic. Reads the registry from /api/schemes, sends the settings to /api/view and
// /api/properties, draws with plotly.js, and keeps every visible text in the chosen language (texts.js).
"use strict";

const state = {
  lang: "en",
  schemes: [],          // [{name, family, options: [{name, type, default, optional, choices}]}]
  view: null,           // last /api/view answer
  props: null,          // last /api/properties answer
  error: null,          // last {field, en, ko}
  seq: 0,               // request generation: late answers of older requests are dropped
  timing: { view: null, props: null },
};
const PLOT_CONFIG = { displayModeBar: false, responsive: true };
const $ = (id) => document.getElementById(id);

function t(key, vars) {
  let s = (TEXTS[state.lang] && TEXTS[state.lang][key]) ?? TEXTS.en[key] ?? key;
  for (const [k, v] of Object.entries(vars || {})) s = s.replaceAll(`{${k}}`, String(v));
  return s;
}

function fmt(x) {
  if (x === null || x === undefined) return t("na");
  if (typeof x === "boolean") return x ? t("yes") : t("no");
  if (typeof x !== "number") return String(x);
  if (x === 0) return "0";
  const a = Math.abs(x);
  return a >= 1e4 || a < 1e-3 ? x.toExponential(2) : x.toPrecision(4).replace(/\.?0+$/, "");
}

// -- language ---------------------------------------------------------------------------------------------

function applyTexts() {
  document.documentElement.lang = state.lang;
  document.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(el.dataset.i18n); });
  document.querySelectorAll("[data-i18n-placeholder]").forEach((el) => {
    el.placeholder = t(el.dataset.i18nPlaceholder);
  });
  fillSchemes();
  renderOptionsHints();
  renderError();
  if (state.view) drawView();
  if (state.props) drawProps();
  renderStatus();
}

function setLang(lang) {
  state.lang = lang === "ko" ? "ko" : "en";
  try { localStorage.setItem("posenc-explore-lang", state.lang); } catch (e) { /* private mode */ }
  applyTexts();
}

// -- controls ---------------------------------------------------------------------------------------------

function fillSchemes() {
  const select = $("scheme");
  const current = select.value || "sinusoidal";
  select.textContent = "";
  for (const family of ["additive", "rotary", "bias", "none"]) {
    const group = document.createElement("optgroup");
    group.label = t(`family_${family}`);
    for (const s of state.schemes.filter((s) => s.family === family)) {
      const opt = document.createElement("option");
      opt.value = s.name;
      opt.textContent = s.name;
      group.appendChild(opt);
    }
    if (group.children.length) select.appendChild(group);
  }
  select.value = current;
  const scheme = currentScheme();
  $("family").textContent = scheme ? t(`family_${scheme.family}`) : "";
}

function currentScheme() {
  return state.schemes.find((s) => s.name === $("scheme").value);
}

function buildOptions() {
  const box = $("options");
  box.textContent = "";
  const scheme = currentScheme();
  $("base").disabled = !scheme || !scheme.options.some((o) => o.name === "base");
  for (const o of scheme ? scheme.options.filter((o) => o.name !== "base") : []) {
    const label = document.createElement("label");
    const name = document.createElement("span");
    name.textContent = o.name;
    label.appendChild(name);
    let input;
    if (o.type === "choice" || o.type === "bool") {
      input = document.createElement("select");
      for (const c of o.type === "bool" ? ["true", "false"] : o.choices) {
        const opt = document.createElement("option");
        opt.value = String(c);
        opt.textContent = String(c);
        input.appendChild(opt);
      }
      input.value = String(o.default);
    } else {
      input = document.createElement("input");
      input.type = "text";
      input.inputMode = o.type === "int" ? "numeric" : "decimal";
      input.value = o.default === null ? "" : Array.isArray(o.default) ? o.default.join(",") : String(o.default);
      if (o.optional) input.dataset.optional = "1";
    }
    input.name = `opt.${o.name}`;
    input.id = `opt-${o.name}`;
    input.addEventListener("input", schedule);
    input.addEventListener("change", schedule);
    label.appendChild(input);
    box.appendChild(label);
  }
  renderOptionsHints();
}

function renderOptionsHints() {
  const box = $("options");
  if (!box.children.length) {
    const p = document.createElement("p");
    p.className = "hint";
    p.dataset.i18n = "no_options";
    box.appendChild(p);
  }
  box.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(el.dataset.i18n); });
  box.querySelectorAll("input[data-optional]").forEach((el) => { el.placeholder = t("optional_hint"); });
}

function fillHeads(heads) {
  const select = $("head");
  const keep = select.value || "0";
  if (select.options.length === heads) return;
  select.textContent = "";
  for (let h = 0; h < heads; h++) {
    const opt = document.createElement("option");
    opt.value = String(h);
    opt.textContent = String(h);
    select.appendChild(opt);
  }
  select.value = Number(keep) < heads ? keep : "0";
}

function query() {
  const q = new URLSearchParams();
  const scheme = currentScheme();
  q.set("scheme", $("scheme").value);
  for (const id of ["dim", "length", "start", "window", "head", "seed", "scale"]) q.set(id, $(id).value);
  if (scheme && scheme.options.some((o) => o.name === "base")) q.set("base", $("base").value);
  $("options").querySelectorAll("[name^='opt.']").forEach((el) => q.set(el.name, el.value));
  return q.toString();
}

// -- requests ---------------------------------------------------------------------------------------------

let timer = null;
function schedule() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 120);
}

async function fetchJson(path, q) {
  const started = performance.now();
  const response = await fetch(`${path}?${q}`);
  const body = await response.json();
  return { ok: response.ok, body, ms: Math.round(performance.now() - started) };
}

async function refresh() {
  const seq = ++state.seq;
  const q = query();
  state.busy = true;
  renderStatus();
  const view = fetchJson("/api/view", q);
  const props = fetchJson("/api/properties", q);
  try {
    const v = await view;
    if (seq !== state.seq) return;
    if (!v.ok) {
      showError(v.body.error);
      return;
    }
    showError(null);
    state.view = v.body;
    state.timing.view = v.ms;
    fillHeads(v.body.heads);
    drawView();
    const p = await props;
    if (seq !== state.seq) return;
    if (!p.ok) {
      state.props = { refused: p.body.error };  // too large for the page: said in the property panel
    } else {
      state.props = p.body;
      state.timing.props = p.ms;
    }
    drawProps();
  } catch (err) {
    if (seq === state.seq) showError({ field: "server", en: String(err), ko: String(err) });
  } finally {
    if (seq === state.seq) {  // the answer to the latest settings is on the page (drawn or refused)
      state.busy = false;
      renderStatus();
      document.body.dataset.renders = String(Number(document.body.dataset.renders) + 1);
    }
  }
}

function showError(error) {
  state.error = error || null;
  renderError();
}

function renderError() {
  document.querySelectorAll("[aria-invalid=true]").forEach((el) => el.removeAttribute("aria-invalid"));
  const box = $("error");
  if (!state.error) { box.hidden = true; return; }
  box.hidden = false;
  $("error-text").textContent = `${state.error.field}: ${state.error[state.lang] || state.error.en}`;
  const field = state.error.field.startsWith("opt.") ? $(`opt-${state.error.field.slice(4)}`) : $(state.error.field);
  if (field) field.setAttribute("aria-invalid", "true");
}

function renderStatus() {
  if (state.busy) { $("status").textContent = t("computing"); return; }
  const { view, props } = state.timing;
  $("status").textContent = view === null ? "" : t("took", { view, props: props ?? t("na") });
}

// -- plots ------------------------------------------------------------------------------------------------

function heat(h) {
  return h.z.map((row) => row.map((v) => (v === null ? null : v * h.unit)));
}

function layout(xTitle, yTitle, extra) {
  return Object.assign({
    margin: { l: 60, r: 20, t: 10, b: 45 },
    xaxis: { title: { text: xTitle } },
    yaxis: { title: { text: yTitle } },
    legend: { orientation: "h", y: 1.12 },
    font: { family: "system-ui, 'Noto Sans KR', sans-serif", size: 12 },
  }, extra || {});
}

function drawView() {
  const v = state.view;
  drawTable(v);
  drawProfile(v.profile);
  drawSimilarity(v.similarity);
  drawAttention(v.attention);
  drawNaive(v.naive);
}

function drawTable(v) {
  const kind = v.table ? v.table.kind : "none";
  $("table-title").textContent = t(`table_title_${kind}`);
  $("table-help").textContent = t(`table_help_${kind}`);
  if (!v.table) {
    $("table-note").textContent = "";
    Plotly.purge("plot-table");
    return;
  }
  $("table-note").textContent = v.table.row_step > 1 ? t("rows_every", { step: v.table.row_step }) : "";
  const yTitle = kind === "bias" ? t("ax_query") : t("ax_position");
  const xTitle = kind === "table" ? t("ax_coordinate") : kind === "angles" ? t("ax_pair") : t("ax_key");
  const x = kind === "bias" ? v.table.rows : v.table.cols;
  Plotly.react("plot-table", [{ type: "heatmap", z: heat(v.table), x, y: v.table.rows,
    colorscale: kind === "angles" ? "Picnic" : "RdBu", reversescale: kind !== "angles" }],
  layout(xTitle, yTitle, { yaxis: { title: { text: yTitle }, autorange: "reversed" } }), PLOT_CONFIG);
}

function drawProfile(p) {
  $("profile-stats").textContent = t("profile_stats", { increases: p.increases, steps: p.distance.length - 1,
    min: fmt(p.min), argmin: p.argmin, last: fmt(p.last) });
  const rises = p.rises.slice(0, 5000);
  Plotly.react("plot-profile", [
    { type: "scatter", mode: "lines", x: p.distance, y: p.mean, name: t("lg_profile"), line: { color: "#2456a6" } },
    { type: "scatter", mode: "markers", x: rises.map((i) => i + 1), y: rises.map((i) => p.mean[i + 1]),
      name: t("lg_rises"), marker: { color: "#d62728", size: 5 } },
  ], layout(t("ax_distance"), t("ax_similarity")), PLOT_CONFIG);
}

function drawSimilarity(s) {
  if (s.error) {
    $("similarity-note").textContent = s.error;
    Plotly.purge("plot-similarity");
    return;
  }
  $("similarity-note").textContent = s.translation_invariant ? t("invariant_yes") : t("invariant_no");
  Plotly.react("plot-similarity", [{ type: "heatmap", z: heat(s), x: s.positions, y: s.positions,
    colorscale: "Viridis" }],
  layout(t("ax_key"), t("ax_query"), { yaxis: { title: { text: t("ax_query") }, autorange: "reversed" } }),
  PLOT_CONFIG);
}

function drawAttention(a) {
  const body = $("attention-numbers").querySelector("tbody");
  body.textContent = "";
  if (a.error) {
    const row = body.insertRow();
    row.insertCell().textContent = a.error;
    Plotly.purge("plot-attention");
    return;
  }
  const tokens = a.positions.map((p, i) => `${t("ax_token")} ${i} (${p})`);
  Plotly.react("plot-attention", [
    { type: "bar", x: tokens, y: a.row0_without, name: t("lg_without"), marker: { color: "#9aa5b5" } },
    { type: "bar", x: tokens, y: a.row0_with, name: t("lg_with"), marker: { color: "#2456a6" } },
  ], layout(t("ax_token"), t("ax_attention"), { barmode: "group", yaxis: { title: { text: t("ax_attention") },
    range: [0, 1] } }), PLOT_CONFIG);
  for (const [key, label] of [["row0_without", t("lg_without")], ["row0_with", t("lg_with")]]) {
    const row = body.insertRow();
    const th = document.createElement("th");
    th.textContent = label;
    row.appendChild(th);
    a[key].forEach((x, i) => {
      const cell = row.insertCell();
      cell.textContent = x.toFixed(3);
      cell.dataset.key = `${key}.${i}`;
      cell.dataset.value = String(x);
    });
  }
}

function drawNaive(n) {
  const here = n.windows[n.windows.length - 1];
  $("naive-stats").textContent = t("naive_stats", { start: here.start, end: here.start + 5,
    pos: fmt(here.position_spread), content: fmt(here.content_spread), prob: fmt(here.max_prob) });
  const c = n.curve;
  Plotly.react("plot-naive", [
    { type: "scatter", mode: "lines", x: c.starts, y: c.position_spread, name: t("lg_position_part") },
    { type: "scatter", mode: "lines", x: c.starts, y: c.content_spread, name: t("lg_content_part") },
    { type: "scatter", mode: "markers", x: [here.start], y: [here.position_spread], name: t("lg_here"),
      marker: { color: "#d62728", size: 9 } },
  ], layout(t("ax_start"), t("ax_spread"), { yaxis: { title: { text: t("ax_spread") }, type: "log" } }),
  PLOT_CONFIG);
}

const PROPS = ["norm_constant", "translation_invariant", "monotone_decay", "symmetric", "shift_residual",
  "defined_beyond"];

function drawProps() {
  const head = $("props").querySelector("thead tr");
  const row = $("props").querySelector("tbody tr");
  head.textContent = "";
  row.textContent = "";
  const refused = state.props && state.props.refused;
  $("props-note").textContent = refused ? refused[state.lang] || refused.en : "";
  for (const key of PROPS) {
    const th = document.createElement("th");
    th.textContent = t(`prop_${key}`);
    head.appendChild(th);
    const td = row.insertCell();
    const value = state.props && !refused ? state.props.row[key] : null;
    td.dataset.key = key;
    td.dataset.value = JSON.stringify(value ?? null);
    td.textContent = state.props && !refused ? fmt(value) : t("na");
  }
}

// -- start ------------------------------------------------------------------------------------------------

function link(rangeId, inputId) {
  $(rangeId).addEventListener("input", () => { $(inputId).value = $(rangeId).value; schedule(); });
  $(inputId).addEventListener("input", () => { $(rangeId).value = $(inputId).value; schedule(); });
}

async function start() {
  let saved = null;
  try { saved = localStorage.getItem("posenc-explore-lang"); } catch (e) { /* private mode */ }
  const asked = new URLSearchParams(location.search).get("lang");
  const prefer = (navigator.language || "en").toLowerCase().startsWith("ko") ? "ko" : "en";
  state.lang = ["en", "ko"].includes(asked) ? asked : ["en", "ko"].includes(saved) ? saved : prefer;
  const registry = await (await fetch("/api/schemes")).json();
  state.schemes = registry.schemes;
  state.defaults = registry.defaults;
  $("controls").addEventListener("submit", (e) => e.preventDefault());
  $("lang").addEventListener("click", () => setLang(state.lang === "en" ? "ko" : "en"));
  $("scheme").addEventListener("change", () => {
    buildOptions();
    $("family").textContent = t(`family_${currentScheme().family}`);
    schedule();
  });
  link("dim-range", "dim");
  link("length-range", "length");
  link("start-range", "start");
  for (const id of ["base", "window", "head", "seed", "scale"]) $(id).addEventListener("input", schedule);
  $("head").addEventListener("change", schedule);
  $("reset").addEventListener("click", () => {
    for (const [k, v] of Object.entries(state.defaults)) if ($(k)) $(k).value = String(v);
    $("scale").value = "";
    buildOptions();
    schedule();
  });
  fillSchemes();
  fillHeads(4);
  buildOptions();
  applyTexts();
  refresh();
}

document.addEventListener("DOMContentLoaded", start);
