// attnmt attention explorer: plain ES module, no dependencies, no build step.
//
// Talks to the JSON API of `attnmt serve` (/models, /translate, /trace, /beam, /attention). Every token
// coming from the server is put into the page with textContent (never innerHTML).

const HIGHLIGHT_RATIO = 0.5; // a source token is "attended to" when its weight >= ratio * the row's maximum
const TOP_K = 5;

// ---------------------------------------------------------------------------------------------
// small helpers

const $ = (id) => document.getElementById(id);

/** Creates an element; attrs go to setAttribute (dataset via "data-*"), children are nodes or strings
 *  (strings become text nodes, so they are never parsed as HTML). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined) continue;
    node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

const fmt = (x, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits).replace("-", "−") : String(x));
const shortWeight = (w) => (w >= 0.995 ? "1" : w.toFixed(2).replace(/^0/, ""));

/** Sequential colour scale (white -> dark blue) for weights in [0, 1]. */
const BLUES = [[255, 255, 255], [222, 235, 247], [158, 202, 225], [66, 146, 198], [8, 81, 156], [8, 48, 107]];

function blue(w) {
  const x = Math.min(1, Math.max(0, w)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(x));
  const f = x - i;
  const [a, b] = [BLUES[i], BLUES[i + 1]];
  return `rgb(${a.map((v, k) => Math.round(v + f * (b[k] - v))).join(",")})`;
}

/** Diverging colour scale (red - white - blue) for values in [-1, 1]. */
function diverging(v) {
  const x = Math.min(1, Math.max(-1, v));
  const target = x < 0 ? [178, 24, 43] : [33, 102, 172];
  const f = Math.abs(x);
  return `rgb(${target.map((t) => Math.round(255 + f * (t - 255))).join(",")})`;
}

const maxAbs = (rows) => rows.reduce((m, row) => row.reduce((n, v) => Math.max(n, Math.abs(v)), m), 0) || 1;

/** The columns a row of weights attends to: weight >= HIGHLIGHT_RATIO * max of the row. */
export function attendedColumns(row) {
  const top = Math.max(...row);
  if (!(top > 0)) return [];
  return row.flatMap((w, j) => (w >= HIGHLIGHT_RATIO * top ? [j] : []));
}

// ---------------------------------------------------------------------------------------------
// the API

class ApiError extends Error {
  constructor(status, detail, what) {
    super(`${what}: ${status ? `HTTP ${status} — ` : ""}${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

async function api(path, body, what = path) {
  let response;
  try {
    response = await fetch(path, body === undefined ? {} : {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `the server cannot be reached (${err.message})`, what);
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: handled below */ }
  if (!response.ok) {
    let detail = data && data.detail !== undefined ? data.detail : text || response.statusText;
    if (typeof detail !== "string") detail = JSON.stringify(detail);
    throw new ApiError(response.status, detail, what);
  }
  if (data === null) throw new ApiError(response.status, "the answer is not JSON", what);
  return data;
}

// ---------------------------------------------------------------------------------------------
// state

const state = {
  models: [],
  trace: null,
  step: 0,
  stepHeatmap: null,
  layers: null, // the /attention answer of a Transformer (every layer and head), or null
  requestId: 0,
};

function showErrors(errors) {
  const box = $("error");
  clear(box);
  box.hidden = errors.length === 0;
  for (const err of errors) box.append(el("p", {}, err.message || String(err)));
}

function modelByName(name) {
  return state.models.find((m) => m.name === name);
}

function describeModel(m) {
  if (!m) return "";
  if (m.type === "transformer") {
    return `Transformer · d_model ${m.d_model} · ${m.heads} heads · ${m.encoder_layers} encoder + ` +
      `${m.decoder_layers} decoder layers · ${m.norm}-norm · default beam ${m.beam}`;
  }
  const attention = m.attention === "none" ? "no attention" : `${m.attention} attention`;
  const feeding = m.attention.startsWith("luong") ? (m.input_feeding ? " · input feeding" : " · no input feeding") : "";
  return `${attention} · ${m.rnn_type.toUpperCase()} · decoder ${m.decoder_hidden}${feeding} · default beam ${m.beam}`;
}

// ---------------------------------------------------------------------------------------------
// heatmap (HTML table): one cell per (target token, source token)

class Heatmap {
  /**
   * @param {string[]} sourceTokens columns
   * @param {string[]} targetTokens rows
   * @param {number[][]} matrix rows = target tokens, columns = source tokens
   */
  constructor(sourceTokens, targetTokens, matrix, { name = "", caption = null, compact = false } = {}) {
    this.source = sourceTokens;
    this.target = targetTokens;
    this.matrix = matrix;
    this.attended = matrix.map(attendedColumns);
    this.pinned = null; // {kind: "row"|"col", index}
    this.hovered = null;
    this.progress = null; // rows after it are not decoded yet (step view)

    const vertical = sourceTokens.some((t) => t !== "</s>" && [...t].length > 3);
    this.table = el("table", {
      class: `heatmap${vertical ? " vertical-labels" : ""}${compact ? " compact" : ""}`, "data-model": name,
      "data-rows": targetTokens.length, "data-cols": sourceTokens.length,
    });
    if (caption) this.table.append(el("caption", {}, caption));
    const head = el("tr", {}, el("th", { class: "corner", scope: "col" },
      el("span", { class: "axis" }, "source →"), el("span", { class: "axis" }, "output ↓")));
    this.sourceLabels = sourceTokens.map((tok, j) => {
      const th = el("th", { class: "src-label", scope: "col", "data-col": j, title: `source token ${j + 1}: ${tok}` },
        el("span", {}, tok));
      th.addEventListener("mouseenter", () => this.hover({ kind: "col", index: j }));
      th.addEventListener("mouseleave", () => this.hover(null));
      th.addEventListener("click", () => this.pin({ kind: "col", index: j }));
      return th;
    });
    head.append(...this.sourceLabels);
    this.targetLabels = [];
    this.cells = [];
    this.rows = [];
    const body = el("tbody");
    targetTokens.forEach((tok, i) => {
      const th = el("th", { class: "tgt-label", scope: "row", "data-row": i, title: `output token ${i + 1}: ${tok}` }, tok);
      th.addEventListener("mouseenter", () => this.hover({ kind: "row", index: i }));
      th.addEventListener("mouseleave", () => this.hover(null));
      th.addEventListener("click", () => this.pin({ kind: "row", index: i }));
      this.targetLabels.push(th);
      const cells = matrix[i].map((w, j) => {
        const td = el("td", {
          class: "cell", "data-row": i, "data-col": j, "data-weight": w.toFixed(6),
          title: `${tok} → ${sourceTokens[j]}: ${w.toFixed(3)}`,
          style: `background-color:${blue(w)}`,
        });
        if (w > 0.55) td.classList.add("dark");
        return td;
      });
      this.cells.push(cells);
      const tr = el("tr", { "data-row": i }, th, ...cells);
      this.rows.push(tr);
      body.append(tr);
    });
    this.table.append(el("thead", {}, head), body);

    this.info = el("p", { class: "focus-info" });
    this.element = el("div", { class: "heatmap-block" },
      el("div", { class: "heatmap-scroll" }, this.table),
      el("div", { class: "legend" }, el("span", {}, "0"), el("span", { class: "ramp" }), el("span", {}, "1"),
        el("span", { class: "muted" }, ` weight · highlighted: ≥ ${HIGHLIGHT_RATIO} × the row's largest weight`)),
      this.info);
    this.render();
  }

  hover(focus) {
    this.hovered = focus;
    this.render();
  }

  pin(focus) {
    const same = this.pinned && this.pinned.kind === focus.kind && this.pinned.index === focus.index;
    this.pinned = same ? null : focus;
    this.render();
  }

  setProgress(t) {
    this.progress = t;
    if (this.pinned && this.pinned.kind === "row" && this.pinned.index > t) this.pinned = null;
    this.render();
  }

  render() {
    const focus = this.hovered || this.pinned;
    const live = (i) => this.progress === null || i <= this.progress;
    this.table.classList.toggle("focused", Boolean(focus));
    for (const th of [...this.sourceLabels, ...this.targetLabels]) th.classList.remove("highlight", "selected");
    this.rows.forEach((tr, i) => {
      tr.classList.toggle("future", !live(i));
      tr.classList.toggle("current", this.progress === i);
    });
    this.cells.forEach((row, i) => row.forEach((td, j) => {
      td.classList.remove("highlight", "in-focus");
      td.textContent = "";
      td.style.backgroundColor = live(i) ? blue(this.matrix[i][j]) : "";
    }));
    clear(this.info);
    if (!focus) {
      this.info.append(el("span", { class: "muted" }, "Hover or click a token label."));
      return;
    }
    if (focus.kind === "row") {
      const i = focus.index;
      if (!live(i)) return;
      this.targetLabels[i].classList.add("selected");
      this.cells[i].forEach((td, j) => {
        td.classList.add("in-focus");
        td.textContent = shortWeight(this.matrix[i][j]);
      });
      const parts = [];
      for (const j of [...this.attended[i]].sort((a, b) => this.matrix[i][b] - this.matrix[i][a])) {
        this.sourceLabels[j].classList.add("highlight");
        this.cells[i][j].classList.add("highlight");
        parts.push(el("span", { class: "pair" }, el("span", { class: "tok" }, this.source[j]), ` ${fmt(this.matrix[i][j])}`));
      }
      this.info.append("Output ", el("span", { class: "tok" }, this.target[i]), ` (row ${i + 1}) attends to: `, ...parts);
    } else {
      const j = focus.index;
      this.sourceLabels[j].classList.add("selected");
      const parts = [];
      this.cells.forEach((row, i) => {
        if (!live(i)) return;
        row[j].classList.add("in-focus");
        row[j].textContent = shortWeight(this.matrix[i][j]);
        if (this.attended[i].includes(j)) {
          this.targetLabels[i].classList.add("highlight");
          row[j].classList.add("highlight");
          parts.push(el("span", { class: "pair" }, el("span", { class: "tok" }, this.target[i]), ` ${fmt(this.matrix[i][j])}`));
        }
      });
      this.info.append("Source ", el("span", { class: "tok" }, this.source[j]), ` (column ${j + 1}) is attended to by: `,
        ...(parts.length ? parts : [el("span", { class: "muted" }, "no output token (never among a row's largest weights)")]));
    }
  }
}

function noAttentionNotice() {
  return el("div", { class: "notice no-attention" },
    el("strong", {}, "no attention — fixed context"),
    el("span", {}, ": this model has no attention; the decoder sees the same context (the final encoder state) at every step, so there are no weights to draw."));
}

// ---------------------------------------------------------------------------------------------
// translation panels

function renderPanel(panel, modelName, result) {
  clear(panel);
  const info = modelByName(modelName);
  panel.dataset.model = modelName;
  panel.append(el("div", { class: "panel-head" },
    el("span", { class: "model-name" }, modelName),
    el("span", { class: "muted small" }, describeModel(info))));
  if (!result) return;
  const translation = result.translations[0];
  const best = translation.candidates[0];
  panel.append(el("div", { class: "output" },
    el("span", { class: "muted small" }, "translation"),
    el("span", { class: "translation" }, best.text),
    el("span", { class: "score muted small", title: "log-probability / length penalty" }, `score ${fmt(best.score, 3)}`)));
  if (best.attention === null || best.attention === undefined) {
    panel.append(noAttentionNotice());
    return;
  }
  const heatmap = new Heatmap(translation.source_tokens, best.tokens, best.attention, { name: modelName });
  panel.append(heatmap.element);
}

function renderPanelError(panel, modelName, err) {
  clear(panel);
  panel.append(el("div", { class: "panel-head" }, el("span", { class: "model-name" }, modelName)),
    el("p", { class: "error-inline" }, err.message));
}

// ---------------------------------------------------------------------------------------------
// step-by-step view (/trace)

function renderTrace(trace) {
  state.trace = trace;
  state.step = 0;
  const view = $("step-view");
  clear(view);
  if (!trace || trace.steps.length === 0) {
    view.append(el("p", { class: "placeholder muted" }, "No decoding steps."));
    state.trace = null;
    updateStepButtons();
    return;
  }
  const hasAttention = trace.steps[0].weights !== null && trace.steps[0].weights !== undefined;
  state.stepScales = {
    context: maxAbs(trace.steps.map((s) => s.context)),
    state: maxAbs(trace.steps.map((s) => s.state)),
    encoder: maxAbs(trace.encoder_states),
  };
  state.stepHeatmap = hasAttention
    ? new Heatmap(trace.source_tokens, trace.tokens, trace.steps.map((s) => s.weights),
      { name: trace.model, caption: "attention so far (rows up to the current step)", compact: true })
    : null;
  state.stepParts = {
    output: el("div", { class: "step-output" }),
    attention: el("div", { class: "step-attention" }),
    vectors: el("div", { class: "step-vectors" }),
    topk: el("div", { class: "step-topk" }),
  };
  view.append(
    el("div", { class: "step-grid" },
      el("div", { class: "step-main" }, state.stepParts.output, state.stepParts.attention, state.stepParts.vectors),
      el("div", { class: "step-side" }, state.stepParts.topk,
        state.stepHeatmap ? state.stepHeatmap.element : null)));
  showStep(0);
}

function showStep(t) {
  const trace = state.trace;
  if (!trace) return;
  t = Math.max(0, Math.min(trace.steps.length - 1, t));
  state.step = t;
  const step = trace.steps[t];
  const n = trace.steps.length;
  const index = $("step-index");
  index.dataset.step = String(t + 1);
  index.dataset.total = String(n);
  index.textContent = `step ${t + 1} / ${n}`;
  const line = $("step-token-line");
  clear(line);
  line.append("writes ", el("span", { id: "step-token", class: "tok big" }, step.token),
    el("span", { class: "muted" }, ` p = ${fmt(step.probability, 3)}`));
  updateStepButtons();

  // output so far
  const out = state.stepParts.output;
  clear(out);
  out.append(el("span", { class: "muted small label" }, "output"));
  trace.tokens.forEach((tok, i) => {
    const cls = i < t ? "chip done" : i === t ? "chip current" : "chip future";
    out.append(el("span", { class: cls, "data-index": i }, i <= t ? tok : "·"));
  });

  // scores and weights
  const att = state.stepParts.attention;
  clear(att);
  if (step.weights === null || step.weights === undefined) {
    att.append(noAttentionNotice());
  } else {
    att.append(attentionBars(trace.source_tokens, step.scores, step.weights));
  }

  // encoder states weighted, context, decoder state
  const vec = state.stepParts.vectors;
  clear(vec);
  vec.append(vectorsView(trace, step));

  // top-k
  const topk = state.stepParts.topk;
  clear(topk);
  const table = el("table", { class: "topk" },
    el("caption", {}, `top ${step.top_k.length} next tokens at step ${t + 1}`));
  for (const [tok, p] of step.top_k) {
    table.append(el("tr", { class: tok === step.token ? "chosen" : "" },
      el("td", { class: "tok" }, tok),
      el("td", { class: "bar-cell" }, el("span", { class: "pbar", style: `width:${Math.max(1, p * 100).toFixed(1)}%` })),
      el("td", { class: "num" }, fmt(p, 3))));
  }
  topk.append(table);

  if (state.stepHeatmap) state.stepHeatmap.setProgress(t);
}

function updateStepButtons() {
  const trace = state.trace;
  $("step-back").disabled = !trace || state.step <= 0;
  $("step-next").disabled = !trace || state.step >= trace.steps.length - 1;
}

/** Two bar charts over the source tokens: the scores e_j (signed) and the weights a_j = softmax(e)_j. */
function attentionBars(sourceTokens, scores, weights) {
  const colW = Math.max(26, Math.min(56, Math.floor(600 / sourceTokens.length)));
  const left = 96;
  const width = left + colW * sourceTokens.length + 8;
  // A Transformer's step has weights (its last layer's cross-attention averaged over the heads)
  // but no scores: there is no single score vector before one softmax. Then only the weights.
  const hasScores = Array.isArray(scores);
  const scoreH = hasScores ? 90 : 0, gap = hasScores ? 30 : 0, weightH = 90, labelH = 30, top = 16;
  const height = top + scoreH + gap + weightH + labelH;
  const root = svg("svg", { class: "bars", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "attention scores and weights of this step" });

  const best = weights.indexOf(Math.max(...weights));
  if (hasScores) drawScores(root, scores, { left, width, top, scoreH, colW, best });

  // weights in [0, 1]
  const wTop = top + scoreH + gap;
  root.append(svg("text", { x: 4, y: wTop + 12, class: "axis-title" }, "weights aⱼ"),
    svg("text", { x: 4, y: wTop + 28, class: "axis-note" }, hasScores ? "softmax(e)" : "last layer, heads averaged"),
    svg("line", { x1: left, x2: width - 4, y1: wTop + weightH, y2: wTop + weightH, class: "zero" }));
  weights.forEach((w, j) => {
    const x = left + j * colW + 4;
    const h = Math.max(1, w * weightH);
    root.append(svg("rect", { x, y: wTop + weightH - h, width: colW - 8, height: h, class: `bar weight${j === best ? " best" : ""}`,
      "data-col": j, fill: blue(0.25 + 0.75 * w) }, svg("title", {}, `a = ${w.toFixed(4)}`)));
    root.append(svg("text", { x: x + (colW - 8) / 2, y: wTop + weightH - h - 3, class: "val" }, shortWeight(w)));
  });

  // source labels
  sourceTokens.forEach((tok, j) => {
    root.append(svg("text", { x: left + j * colW + colW / 2, y: wTop + weightH + 18, class: `tok-label${j === best ? " best" : ""}` },
      tok.length > 6 ? `${tok.slice(0, 5)}…` : tok));
  });
  return el("div", { class: "bars-wrap" }, root);
}

/** The scores e_j as signed bars, the zero line inside [min, max]. */
function drawScores(root, scores, { left, width, top, scoreH, colW, best }) {
  const lo = Math.min(0, ...scores), hi = Math.max(0, ...scores);
  const span = hi - lo || 1;
  const yOf = (v) => top + ((hi - v) / span) * scoreH;
  const zero = yOf(0);
  root.append(svg("text", { x: 4, y: top + 12, class: "axis-title" }, "scores eⱼ"),
    svg("text", { x: 4, y: top + 28, class: "axis-note" }, "before softmax"),
    svg("line", { x1: left, x2: width - 4, y1: zero, y2: zero, class: "zero" }));
  scores.forEach((v, j) => {
    const x = left + j * colW + 4;
    const y = Math.min(zero, yOf(v));
    const h = Math.max(1, Math.abs(yOf(v) - zero));
    root.append(svg("rect", { x, y, width: colW - 8, height: h, class: `bar score${v < 0 ? " neg" : ""}${j === best ? " best" : ""}`, "data-col": j },
      svg("title", {}, `e = ${v.toFixed(4)}`)));
    root.append(svg("text", { x: x + (colW - 8) / 2, y: v >= 0 ? y - 3 : y + h + 10, class: "val" }, fmt(v, 1)));
  });
}

function vectorRow(values, scale, label, attrs = {}) {
  const width = Math.max(2, Math.min(10, Math.floor(560 / values.length)));
  const cells = values.map((v, k) => el("span", {
    class: "vcell", style: `width:${width}px;background-color:${diverging(v / scale)}`, title: `[${k}] ${v.toFixed(4)}`,
  }));
  return el("div", { class: "vrow", ...attrs }, el("span", { class: "vlabel" }, label), el("span", { class: "vcells" }, ...cells));
}

function vectorsView(trace, step) {
  const scales = state.stepScales;
  const box = el("div", { class: "vectors" });
  if (step.weights) {
    box.append(el("p", { class: "muted small" }, "encoder states hⱼ, faded by their weight aⱼ; context c = Σⱼ aⱼ hⱼ"));
    const wmax = Math.max(...step.weights);
    trace.encoder_states.forEach((h, j) => {
      const row = vectorRow(h, scales.encoder, "", { "data-col": j });
      const label = row.querySelector(".vlabel");
      label.append(el("span", { class: "tok" }, trace.source_tokens[j]), el("span", { class: "muted" }, ` ${shortWeight(step.weights[j])}`));
      row.style.opacity = String(0.15 + 0.85 * (step.weights[j] / (wmax || 1)));
      box.append(row);
    });
  } else {
    box.append(el("p", { class: "muted small" }, "without attention the context is the final encoder state, the same at every step"));
  }
  box.append(vectorRow(step.context, scales.context, "context cₜ", { class: "vrow context", "data-kind": "context" }));
  box.append(vectorRow(step.state, scales.state, "state sₜ", { class: "vrow state", "data-kind": "state" }));
  box.append(el("div", { class: "legend" }, el("span", {}, "−"), el("span", { class: "ramp diverging" }), el("span", {}, "+"),
    el("span", { class: "muted" }, " value (scaled by the largest magnitude of each kind of vector)")));
  return box;
}

// ---------------------------------------------------------------------------------------------
// Transformer: layers and heads (/attention). Weights are [layer][head][query][key].

const KINDS = {
  encoder: { name: "encoder self-attention", queries: "source_tokens", keys: "source_tokens", colour: "#2b6cb0",
    sides: ["source", "source"] },
  decoder: { name: "decoder self-attention", queries: "tokens", keys: "decoder_tokens", colour: "#2f855a",
    sides: ["output", "decoder input"] },
  cross: { name: "cross-attention", queries: "tokens", keys: "source_tokens", colour: "#c05621",
    sides: ["output", "source"] },
};

/** The matrix of one layer and head, or with head "mean" the average of the layer's heads. */
export function headMatrix(weights, layer, head) {
  const heads = weights[layer];
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, i) => row.map((_, j) => heads.reduce((sum, h) => sum + h[i][j], 0) / heads.length));
}

function renderLayers(result) {
  state.layers = result;
  $("layers-card").hidden = !result;
  clear($("layers-view"));
  if (!result) return;
  fillLayerSelects();
  drawLayers();
}

/** Layer and head choices for the chosen kind (the encoder and decoder may differ in depth); the
 *  previous choice is kept when it still exists, else the last layer and the average of the heads. */
function fillLayerSelects() {
  if (!state.layers) return;
  const weights = state.layers[$("att-kind").value];
  const layers = weights.length, heads = weights[0].length;
  const layerSelect = $("att-layer"), headSelect = $("att-head");
  const [oldLayer, oldHead] = [layerSelect.value, headSelect.value];
  clear(layerSelect);
  clear(headSelect);
  for (let l = 0; l < layers; l++) layerSelect.append(el("option", { value: l }, `layer ${l}`));
  headSelect.append(el("option", { value: "mean" }, "all heads averaged"));
  for (let h = 0; h < heads; h++) headSelect.append(el("option", { value: h }, `head ${h}`));
  layerSelect.value = oldLayer !== "" && Number(oldLayer) < layers ? oldLayer : String(layers - 1);
  headSelect.value = oldHead === "mean" || (oldHead !== "" && Number(oldHead) < heads) ? oldHead : "mean";
}

function selectLayerHead(layer, head) {
  $("att-layer").value = String(layer);
  $("att-head").value = String(head);
  drawLayers();
}

function drawLayers() {
  const data = state.layers;
  if (!data) return;
  const kind = $("att-kind").value, layer = Number($("att-layer").value), head = $("att-head").value;
  const k = KINDS[kind];
  const matrix = headMatrix(data[kind], layer, head);
  const which = head === "mean" ? "all heads averaged" : `head ${head}`;
  const view = $("layers-view");
  clear(view);
  const heatmap = new Heatmap(data[k.keys], data[k.queries], matrix,
    { name: data.model, caption: `${k.name} · layer ${layer} · ${which}`, compact: true });
  view.append(
    el("div", { class: "layers-top" }, headView(data[k.queries], data[k.keys], matrix, kind), heatmap.element),
    headGrid(data[kind], kind, layer, head));
}

/** Two columns of tokens, queries left and keys right, a line for each pair with its weight as
 *  opacity: a row's lines share one unit of ink, so a sharp head shows one dark line per token. */
function headView(queryTokens, keyTokens, matrix, kind) {
  const k = KINDS[kind];
  const rowH = 22, top = 26, textW = 120, gap = 170;
  const xq = textW, xk = textW + gap;
  const width = xk + textW, height = top + rowH * Math.max(queryTokens.length, keyTokens.length, 1) + 6;
  const y = (i) => top + i * rowH + rowH / 2;
  const root = svg("svg", { class: "head-view", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `head view of the ${k.name}`, "data-kind": kind });
  root.append(svg("text", { x: xq, y: 14, class: "side-title", "text-anchor": "end" }, k.sides[0]),
    svg("text", { x: xk, y: 14, class: "side-title" }, k.sides[1]));
  const lines = svg("g", { class: "lines" });
  matrix.forEach((row, i) => row.forEach((w, j) => {
    if (!(w > 0)) return; // exactly 0 where the query may not look (the decoder's later positions)
    lines.append(svg("line", { class: "att-line", x1: xq + 6, y1: y(i), x2: xk - 6, y2: y(j), stroke: k.colour,
      "stroke-opacity": w.toFixed(4), "data-query": i, "data-key": j, "data-weight": w.toFixed(6) }));
  }));
  root.append(lines);
  const labels = [];
  const focus = (side, index) => {
    root.classList.toggle("focus", index !== null);
    for (const line of lines.children) line.classList.toggle("on", index !== null && line.dataset[side] === String(index));
    for (const label of labels) label.classList.toggle("on", index !== null && label.dataset[side] === String(index));
  };
  const addLabels = (tokens, side, x) => tokens.forEach((tok, i) => {
    const label = svg("text", { x, y: y(i) + 4, class: `tok ${side}`, [`data-${side}`]: i }, tok);
    label.addEventListener("mouseenter", () => focus(side, i));
    label.addEventListener("mouseleave", () => focus(side, null));
    labels.push(label);
    root.append(label);
  });
  addLabels(queryTokens, "query", xq);
  addLabels(keyTokens, "key", xk);
  return el("div", { class: "head-view-wrap" }, root);
}

/** Every layer (rows) x head (columns) as a small canvas heatmap; a click selects it. */
function headGrid(weights, kind, layer, head) {
  const layers = weights.length, heads = weights[0].length;
  const grid = el("div", { class: "head-grid", style: `grid-template-columns: auto repeat(${heads}, 76px)`,
    "data-kind": kind, "data-layers": layers, "data-heads": heads });
  grid.append(el("span"));
  for (let h = 0; h < heads; h++) grid.append(el("span", { class: "grid-label" }, `head ${h}`));
  for (let l = 0; l < layers; l++) {
    const mean = el("span", { class: "grid-label mean-row", title: "all heads of this layer averaged" }, `layer ${l}`);
    mean.addEventListener("click", () => selectLayerHead(l, "mean"));
    grid.append(mean);
    for (let h = 0; h < heads; h++) {
      const matrix = weights[l][h];
      const rows = matrix.length, cols = rows ? matrix[0].length : 0;
      const px = Math.max(1, Math.floor(72 / Math.max(rows, cols, 1)));
      const canvas = el("canvas", { class: `grid-cell${l === layer && String(h) === head ? " selected" : ""}`,
        width: Math.max(1, cols * px), height: Math.max(1, rows * px), "data-layer": l, "data-head": h,
        title: `layer ${l} head ${h}: click to select` });
      const ctx = canvas.getContext("2d");
      matrix.forEach((row, i) => row.forEach((w, j) => {
        ctx.fillStyle = blue(w);
        ctx.fillRect(j * px, i * px, px, px);
      }));
      canvas.addEventListener("click", () => selectLayerHead(l, h));
      grid.append(canvas);
    }
  }
  return grid;
}

// ---------------------------------------------------------------------------------------------
// beam search tree (/beam): an SVG with one column per step

function renderBeam(result, beamSize) {
  const view = $("beam-view");
  clear(view);
  const nodes = result.nodes;
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const steps = [];
  for (const n of nodes) (steps[n.step] ||= []).push(n);
  const order = new Map();
  steps.forEach((list, s) => {
    if (!list) return;
    list.sort((a, b) => (s === 0 ? 0 : order.get(a.parent) - order.get(b.parent)) || b.log_prob - a.log_prob);
    list.forEach((n, i) => order.set(n.id, i));
  });

  // the path of the best translation
  const bestTokens = result.translation && result.translation.candidates.length
    ? result.translation.candidates[0].tokens : [];
  const pathOf = (n) => {
    const path = [];
    for (let cur = n; cur && cur.parent !== null && cur.parent !== undefined; cur = byId.get(cur.parent)) path.unshift(cur);
    return path;
  };
  let bestPath = new Set();
  const candidates = nodes.filter((n) => n.step === bestTokens.length && n.status !== "pruned" && n.status !== "root");
  candidates.sort((a, b) => (a.status === "finished" ? 0 : 1) - (b.status === "finished" ? 0 : 1));
  for (const n of candidates) {
    const path = pathOf(n);
    if (path.length === bestTokens.length && path.every((p, i) => p.token === bestTokens[i])) {
      bestPath = new Set([0, ...path.map((p) => p.id)].concat(nodes.filter((m) => m.status === "root").map((m) => m.id)));
      break;
    }
  }

  const colW = 104, nodeW = 82, nodeH = 20, rowH = 25, pad = 14;
  const maxCount = Math.max(...steps.filter(Boolean).map((l) => l.length));
  const width = pad * 2 + steps.length * colW;
  const height = pad * 2 + maxCount * rowH + 18;
  const pos = new Map();
  steps.forEach((list, s) => {
    if (!list) return;
    const offset = ((maxCount - list.length) * rowH) / 2;
    list.forEach((n, i) => pos.set(n.id, { x: pad + s * colW, y: pad + 18 + offset + i * rowH }));
  });

  const root = svg("svg", { class: "beam-tree", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "beam search tree" });
  steps.forEach((list, s) => root.append(svg("text", { x: pad + s * colW + nodeW / 2, y: pad + 4, class: "step-label" },
    s === 0 ? "start" : `step ${s}`)));
  const edges = svg("g", { class: "edges" });
  const group = svg("g", { class: "nodes" });
  root.append(edges, group);
  for (const n of nodes) {
    const p = pos.get(n.id);
    if (n.parent !== null && n.parent !== undefined && pos.has(n.parent)) {
      const q = pos.get(n.parent);
      const x1 = q.x + nodeW, y1 = q.y + nodeH / 2, x2 = p.x, y2 = p.y + nodeH / 2, mx = (x1 + x2) / 2;
      edges.append(svg("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`,
        class: `edge ${n.status}${bestPath.has(n.id) ? " best" : ""}` }));
    }
    const label = n.status === "root" ? "<s>" : n.token;
    const g = svg("g", { class: `node ${n.status}${bestPath.has(n.id) ? " best" : ""}`, "data-id": n.id,
      "data-status": n.status, "data-step": n.step, transform: `translate(${p.x},${p.y})` },
    svg("title", {}, `step ${n.step} · ${label} · log p = ${n.log_prob.toFixed(4)} · ${n.status}`),
    svg("rect", { width: nodeW, height: nodeH, rx: 4 }),
    svg("text", { x: 6, y: 14, class: "tok" }, label.length > 6 ? `${label.slice(0, 5)}…` : label),
    n.status === "root" ? null : svg("text", { x: nodeW - 5, y: 14, class: "lp" }, fmt(n.log_prob, 2)));
    group.append(g);
  }

  const count = (s) => nodes.filter((n) => n.status === s).length;
  view.append(
    el("p", { class: "beam-summary" },
      `beam ${beamSize} · ${nodes.length - 1} candidates looked at: `,
      el("span", { class: "swatch kept" }), ` ${count("kept")} kept · `,
      el("span", { class: "swatch finished" }), ` ${count("finished")} finished (ended in </s>) · `,
      el("span", { class: "swatch pruned" }), ` ${count("pruned")} pruned (fell out of the beam) · `,
      el("span", { class: "swatch best" }), " path of the best translation"),
    el("p", { class: "muted small" }, "Each column is a step, each box a candidate with its token and cumulative log-probability; children of a box extend its hypothesis. Hover a box for details."),
    el("div", { class: "beam-scroll" }, root));
  if (result.translation) {
    const table = el("table", { class: "finals" }, el("caption", {}, "final hypotheses (best first)"),
      el("tr", {}, el("th", {}, "#"), el("th", {}, "translation"), el("th", {}, "score")));
    result.translation.candidates.forEach((c, i) => table.append(el("tr", {},
      el("td", { class: "num" }, i + 1), el("td", { class: "translation-cell" }, c.text), el("td", { class: "num" }, fmt(c.score, 3)))));
    view.append(table);
  }
}

function renderBeamError(err) {
  const view = $("beam-view");
  clear(view);
  if (err.status === 501) {
    view.append(el("p", { class: "notice", id: "beam-notice" },
      el("strong", {}, "Beam tree not available on this server"), ` (HTTP 501): ${err.detail}`));
  } else {
    view.append(el("p", { class: "error-inline" }, err.message));
  }
}

// ---------------------------------------------------------------------------------------------
// the main action

async function translateAll() {
  const text = $("source").value;
  const modelA = $("model").value || null;
  const compare = $("compare").checked && $("model-b").value;
  const modelB = compare ? $("model-b").value : null;
  const beamValue = $("beam").value.trim();
  const beam = beamValue === "" ? null : Number(beamValue);
  const id = ++state.requestId;
  document.body.dataset.state = "busy";
  $("translate").disabled = true;
  $("translate").textContent = "Translating…";
  showErrors([]);

  const translateBody = (model) => ({ text, model, beam, n_best: 1, attention: true });
  const jobs = [
    api("/translate", translateBody(modelA), `translate (${modelA})`),
    modelB ? api("/translate", translateBody(modelB), `translate (${modelB})`) : Promise.resolve(null),
    api("/trace", { text, model: modelA, top_k: TOP_K }, `trace (${modelA})`),
    api("/beam", { text, model: modelA, beam: beam ?? (modelByName(modelA)?.beam ?? 5) }, `beam (${modelA})`),
  ];
  // A Transformer's layers and heads, for the translation shown (forced), once it is known.
  if (modelByName(modelA)?.type === "transformer") {
    jobs.push(jobs[0].then((answer) => {
      const shown = answer.translations[0].candidates[0].text;
      return api("/attention", { text, model: modelA, translation: shown.trim() ? shown : null }, `attention (${modelA})`);
    }));
  }
  const [ta, tb, tr, bm, at] = await Promise.allSettled(jobs);
  if (id !== state.requestId) return; // a newer request was sent meanwhile
  const errors = [];

  const panelA = $("panel-a"), panelB = $("panel-b");
  if (ta.status === "fulfilled") renderPanel(panelA, modelA, ta.value);
  else { errors.push(ta.reason); renderPanelError(panelA, modelA, ta.reason); }
  panelB.hidden = !modelB;
  if (modelB) {
    if (tb.status === "fulfilled") renderPanel(panelB, modelB, tb.value);
    else { errors.push(tb.reason); renderPanelError(panelB, modelB, tb.reason); }
  }

  if (tr.status === "fulfilled") renderTrace(tr.value);
  else {
    errors.push(tr.reason);
    renderTrace(null);
    clear($("step-view"));
    $("step-view").append(el("p", { class: "error-inline" }, tr.reason.message));
    $("step-index").textContent = "—";
    clear($("step-token-line"));
  }

  if (!at || at.status === "rejected") renderLayers(null);
  if (at && at.status === "fulfilled") renderLayers(at.value);
  else if (at) errors.push(at.reason);

  if (bm.status === "fulfilled") renderBeam(bm.value, beam ?? modelByName(modelA)?.beam);
  else {
    renderBeamError(bm.reason);
    if (bm.reason.status !== 501) errors.push(bm.reason);
  }

  // the same error (e.g. an empty text) from several endpoints is shown once per detail
  const seen = new Set();
  showErrors(errors.filter((e) => {
    const key = `${e.status} ${e.detail}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  }));
  document.body.dataset.state = errors.length ? "error" : "done";
  $("translate").disabled = false;
  $("translate").textContent = "Translate";
}

// ---------------------------------------------------------------------------------------------
// start

function fillModels(models) {
  state.models = models;
  for (const [select, preferred] of [[$("model"), 0], [$("model-b"), 1]]) {
    clear(select);
    for (const m of models) select.append(el("option", { value: m.name }, m.name));
    select.value = models[Math.min(preferred, models.length - 1)].name;
  }
  onModelChange();
  $("compare").disabled = models.length < 2;
  $("compare").title = models.length < 2 ? "the server has only one model" : "";
}

function onModelChange() {
  const m = modelByName($("model").value);
  if (m) $("beam").value = String(m.beam);
  const lines = [describeModel(m)];
  if ($("compare").checked) lines.push(`vs ${$("model-b").value}: ${describeModel(modelByName($("model-b").value))}`);
  $("model-info").textContent = lines.join("  ·  ");
}

function init() {
  $("translate-form").addEventListener("submit", (event) => {
    event.preventDefault();
    translateAll();
  });
  $("source").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      translateAll();
    }
  });
  $("model").addEventListener("change", onModelChange);
  $("model-b").addEventListener("change", onModelChange);
  $("compare").addEventListener("change", () => {
    $("model-b").disabled = !$("compare").checked;
    onModelChange();
  });
  $("att-kind").addEventListener("change", () => {
    fillLayerSelects();
    drawLayers();
  });
  $("att-layer").addEventListener("change", drawLayers);
  $("att-head").addEventListener("change", drawLayers);
  $("step-back").addEventListener("click", () => showStep(state.step - 1));
  $("step-next").addEventListener("click", () => showStep(state.step + 1));
  document.addEventListener("keydown", (event) => {
    const tag = event.target && event.target.tagName;
    if (["TEXTAREA", "INPUT", "SELECT"].includes(tag) || event.altKey || event.ctrlKey || event.metaKey) return;
    if (event.key === "ArrowRight" && state.trace) { event.preventDefault(); showStep(state.step + 1); }
    if (event.key === "ArrowLeft" && state.trace) { event.preventDefault(); showStep(state.step - 1); }
  });

  api("/models", undefined, "list models").then((models) => {
    if (!models.length) throw new ApiError(0, "the server has no model", "list models");
    fillModels(models);
    $("server-status").textContent = `${models.length} model${models.length > 1 ? "s" : ""}`;
    document.body.dataset.state = "ready";
  }).catch((err) => {
    $("server-status").textContent = "server not reachable";
    showErrors([err]);
    document.body.dataset.state = "error";
  });
}

init();
