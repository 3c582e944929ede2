// The step-by-step view of a greedy decoding (/trace): for step t the output so far, the attention
// scores and weights as bars, the encoder states, context and decoder state, the top-k next tokens,
// and the heatmap of the rows decoded so far. ◀ ▶ buttons and the arrow keys walk through the steps.
// With words on, the bars and the heatmap are over words (words.js); the decoder still writes one
// piece per step, and the vectors stay those of the pieces. A model whose attention reads the coverage
// (coverage attention, csparsemax) shows it too, under the bars of the pieces.

import { $, blue, clear, diverging, el, fmt, maxAbs, shortWeight, svg } from "./dom.js";
import { Heatmap, noAttentionNotice } from "./heatmap.js";
import { logSumExpColumns, mergePieces, sumColumns, wordSpans } from "./words.js";

export class StepView {
  constructor() {
    this.trace = null; // the /trace answer shown, or null
    this.info = null; // the model's entry of /models (what its attention reads), or null
    this.step = 0;
    this.heatmap = null;
    this.scales = null; // the largest magnitude of each kind of vector, for their colours
    this.parts = null; // the containers redrawn at each step
    this.words = false; // bars and heatmap over words rather than subword pieces
    this.merged = null; // with words: the heatmap of the whole decoding in words, and the source's word spans
    $("step-back").addEventListener("click", () => this.go(this.step - 1));
    $("step-next").addEventListener("click", () => this.go(this.step + 1));
    document.addEventListener("keydown", (event) => {
      const tag = event.target && event.target.tagName;
      if (["TEXTAREA", "INPUT", "SELECT"].includes(tag) || event.altKey || event.ctrlKey || event.metaKey) return;
      if (event.key === "ArrowRight" && this.trace) { event.preventDefault(); this.go(this.step + 1); }
      if (event.key === "ArrowLeft" && this.trace) { event.preventDefault(); this.go(this.step - 1); }
    });
  }

  /** Shows a /trace answer at its first step (null: no steps); `info`: the model's entry of /models. */
  show(trace, info = null) {
    this.trace = trace;
    this.info = info;
    this.step = 0;
    const view = $("step-view");
    clear(view);
    if (!trace || trace.steps.length === 0) {
      view.append(el("p", { class: "placeholder muted" }, "No decoding steps."));
      this.trace = null;
      this.updateButtons();
      return;
    }
    const hasAttention = trace.steps[0].weights !== null && trace.steps[0].weights !== undefined;
    this.scales = {
      context: maxAbs(trace.steps.map((s) => s.context)),
      state: maxAbs(trace.steps.map((s) => s.state)),
      encoder: maxAbs(trace.encoder_states),
    };
    const matrix = hasAttention ? trace.steps.map((s) => s.weights) : null;
    this.merged = hasAttention && this.words
      ? { ...mergePieces(trace.source_tokens, trace.tokens, matrix), spans: wordSpans(trace.source_tokens) } : null;
    const [source, target] = this.merged ? [this.merged.source, this.merged.target] : [trace.source_tokens, trace.tokens];
    this.heatmap = hasAttention
      ? new Heatmap(source, target, this.merged ? this.merged.matrix : matrix,
        { name: trace.model, caption: "attention so far (rows up to the current step)", compact: true,
          unit: this.words ? "word" : "token" })
      : null;
    this.parts = {
      output: el("div", { class: "step-output" }),
      attention: el("div", { class: "step-attention" }),
      vectors: el("div", { class: "step-vectors" }),
      topk: el("div", { class: "step-topk" }),
    };
    view.append(
      el("div", { class: "step-grid" },
        el("div", { class: "step-main" }, this.parts.output, this.parts.attention, this.parts.vectors),
        el("div", { class: "step-side" }, this.parts.topk),
        this.heatmap ? el("div", { class: "step-map" }, this.heatmap.element) : null));
    this.go(0);
  }

  /** Bars and heatmap over words (true) or subword pieces; keeps the step shown. */
  setWords(words) {
    this.words = words;
    if (!this.trace) return;
    const t = this.step;
    this.show(this.trace, this.info);
    this.go(t);
  }

  /** In place of the steps, the error of /trace. */
  showError(err) {
    this.show(null);
    clear($("step-view"));
    $("step-view").append(el("p", { class: "error-inline" }, err.message));
    $("step-index").textContent = "—";
    clear($("step-token-line"));
  }

  /** Shows step t (counting from 0, kept within the steps). */
  go(t) {
    const trace = this.trace;
    if (!trace) return;
    t = Math.max(0, Math.min(trace.steps.length - 1, t));
    this.step = t;
    const step = trace.steps[t];
    const n = trace.steps.length;
    const index = $("step-index");
    index.dataset.step = String(t + 1);
    index.dataset.total = String(n);
    index.textContent = `step ${t + 1} / ${n}`;
    const line = $("step-token-line");
    clear(line);
    // (the note only for a step the prefix chose: Element.append writes a null as the text "null")
    line.append("writes ", el("span", { id: "step-token", class: `tok big${step.constrained ? " constrained" : ""}` },
      step.token), el("span", { class: "muted" }, ` p = ${fmt(step.probability, 3)}`),
    ...(step.constrained ? [el("span", { id: "step-constrained", class: "muted small" }, constrainedNote(step))] : []));
    this.updateButtons();

    const { output, attention, vectors, topk } = this.parts;
    clear(output);
    output.append(el("span", { class: "muted small label" }, "output"));
    trace.tokens.forEach((tok, i) => {
      const cls = (i < t ? "chip done" : i === t ? "chip current" : "chip future")
        + (i <= t && trace.steps[i].constrained ? " constrained" : ""); // (a prefix's: dashed)
      output.append(el("span", { class: cls, "data-index": i }, i <= t ? tok : "·"));
    });
    clear(attention);
    const hasWeights = step.weights !== null && step.weights !== undefined;
    if (!hasWeights) attention.append(noAttentionNotice());
    else if (this.merged) {
      // A word's score is the log-sum-exp of its pieces' (softmax of the word scores = the word
      // weights); sparsemax and entmax have no such rule: their words show weights only.
      const { spans, source } = this.merged;
      const wordScores = normalizerOf(trace) === "softmax" && step.scores && logSumExpColumns(step.scores, spans);
      attention.append(attentionBars(source, wordScores || null, sumColumns(step.weights, spans), normalizerOf(trace)));
    } else {
      attention.append(attentionBars(trace.source_tokens, step.scores, step.weights, normalizerOf(trace)));
      const use = coverageUse(this.info);
      if (use && hasWeights) attention.append(coverageBars(trace, t, use));
    }
    clear(vectors);
    vectors.append(vectorsView(trace, step, this.scales));
    clear(topk);
    topk.append(topKTable(step, t));
    if (this.merged) this.showWordsSoFar(t);
    else if (this.heatmap) this.heatmap.setProgress(t);
    if (this.heatmap) this.revealCurrentColumn();
  }

  /** Scrolls the matrix so sideways that the column the current row attends to most is in view. */
  revealCurrentColumn() {
    const row = this.heatmap.matrix[this.heatmap.progress];
    if (row) this.heatmap.revealColumn(row.indexOf(Math.max(...row)));
  }

  /** With words, the heatmap at step t: the rows of the words begun, each the mean of its pieces
   *  decoded so far (the current word's row changes as its pieces come), the others still to come. */
  showWordsSoFar(t) {
    const trace = this.trace;
    const sofar = mergePieces(trace.source_tokens, trace.tokens.slice(0, t + 1), trace.steps.slice(0, t + 1).map((s) => s.weights));
    this.heatmap.setMatrix([...sofar.matrix, ...this.merged.matrix.slice(sofar.matrix.length)]);
    this.heatmap.setProgress(sofar.matrix.length - 1);
  }

  updateButtons() {
    $("step-back").disabled = !this.trace || this.step <= 0;
    $("step-next").disabled = !this.trace || this.step >= this.trace.steps.length - 1;
  }
}

/** The most probable next tokens of a step, with bars for their probabilities. */
function topKTable(step, t) {
  const table = el("table", { class: "topk" },
    el("caption", {}, `top ${step.top_k.length} next tokens at step ${t + 1}`));
  for (const [tok, p] of step.top_k) {
    table.append(el("tr", { class: tok === step.token ? "chosen" : "" },
      el("td", { class: "tok" }, tok),
      el("td", { class: "bar-cell" }, el("span", { class: "pbar", style: `width:${Math.max(1, p * 100).toFixed(1)}%` })),
      el("td", { class: "num" }, fmt(p, 3))));
  }
  return table;
}

// The source labels under the bars: 13px monospace, whose characters are MONO_CHAR wide (wide ones,
// CJK and the like, twice); a label rotated to read bottom to top needs LINE pixels across, which a
// column always has. Labels longer than LABEL_CHARS are cut, the whole token in their tooltip.
const MONO_CHAR = 7.8, LINE = 17, LABEL_CHARS = 12;
const AXIS = 92; // the width of the axis titles left of the bars

/** A source label: its text (cut) and its width in pixels when horizontal. */
function sourceLabel(tok) {
  const chars = [...tok];
  const text = chars.length > LABEL_CHARS ? `${chars.slice(0, LABEL_CHARS - 1).join("")}…` : tok;
  return { text, width: [...text].reduce((w, c) => w + (c.codePointAt(0) >= 0x1100 ? 2 : 1), 0) * MONO_CHAR };
}

/** What made a trace's weights of its scores: softmax, sparsemax or entmax15 (a server before
 *  `normalizer` sent none: softmax where there are scores); null for a Transformer's steps. */
function normalizerOf(trace) {
  if (trace.normalizer) return trace.normalizer;
  return trace.steps.length && Array.isArray(trace.steps[0].scores) ? "softmax" : null;
}

/** Two bar charts over the source tokens: the scores e_j (signed) and the weights a_j = normalizer(e)_j
 *  (softmax, sparsemax or entmax15; null: a Transformer's averaged heads, weights only).
 *  Any number of tokens stays readable: columns at least LINE + 3 pixels wide (the chart scrolls),
 *  labels rotated when they would not fit side by side, numbers over the bars only where they fit. */
function attentionBars(sourceTokens, scores, weights, normalizer) {
  const colW = Math.max(LINE + 3, Math.min(56, Math.floor(600 / sourceTokens.length)));
  const labels = sourceTokens.map(sourceLabel);
  const longest = Math.max(...labels.map((l) => l.width));
  const rotated = longest > colW - 4;
  const left = 4; // the axis titles are in an svg of their own, AXIS wide, which stays in view
  const width = left + colW * sourceTokens.length + 8;
  // A Transformer's step has weights (its last layer's cross-attention averaged over the heads)
  // but no scores: there is no single score vector before one softmax. Then only the weights.
  const hasScores = Array.isArray(scores);
  const scoreH = hasScores ? 90 : 0, gap = hasScores ? 30 : 0, weightH = 90, top = 16;
  const labelH = rotated ? longest + 14 : 30;
  const height = top + scoreH + gap + weightH + labelH;
  const root = svg("svg", { class: "bars", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "attention scores and weights of this step" });
  const axis = svg("svg", { class: "bars-axis", width: AXIS, height, viewBox: `0 0 ${AXIS} ${height}` });

  const best = weights.indexOf(Math.max(...weights));
  if (hasScores) drawScores(root, axis, scores, { left, width, top, scoreH, colW, best, normalizer });

  // weights in [0, 1]
  const wTop = top + scoreH + gap;
  const zeros = weights.filter((w) => w === 0).length;
  const notes = !normalizer ? ["last layer,", "heads averaged"] // lines that fit in AXIS
    : normalizer === "softmax" ? ["softmax(e)"]
      : [`${normalizer}(${normalizer === "csparsemax" ? "e, u" : "e"})`, `${zeros} of ${weights.length} are 0`];
  axis.append(svg("text", { x: 4, y: wTop + 12, class: "axis-title" }, "weights aⱼ"),
    ...notes.map((note, k) => svg("text", { x: 4, y: wTop + 28 + 13 * k, class: "axis-note" }, note)));
  root.append(svg("line", { x1: left, x2: width - 4, y1: wTop + weightH, y2: wTop + weightH, class: "zero" }));
  weights.forEach((w, j) => {
    const x = left + j * colW + 4;
    const h = Math.max(1, w * weightH);
    root.append(svg("rect", { x, y: wTop + weightH - h, width: colW - 8, height: h, class: `bar weight${j === best ? " best" : ""}`,
      "data-col": j, fill: blue(0.25 + 0.75 * w) }, svg("title", {}, `a = ${w.toFixed(4)}`)));
    if (colW >= 24) root.append(svg("text", { x: x + (colW - 8) / 2, y: wTop + weightH - h - 3, class: "val" }, shortWeight(w)));
  });

  // source labels
  labels.forEach(({ text }, j) => {
    const x = left + j * colW + colW / 2, y = wTop + weightH + (rotated ? 6 : 18);
    const turn = rotated ? { transform: `rotate(-90 ${x} ${y})` } : {}; // read bottom to top, hanging from y
    root.append(svg("text", { x, y, ...turn, class: `tok-label${rotated ? " rotated" : ""}${j === best ? " best" : ""}`,
      "data-token": sourceTokens[j] },
      text, svg("title", {}, sourceTokens[j])));
  });
  return el("div", { class: "bars-wrap" }, axis, root);
}

/** What a model's attention reads of the coverage C_j = Σ_{t'<t} a_t'(j), the attention each source
 *  token has had before the step: coverage attention its score (divided by a fertility with N > 0;
 *  with NN-based coverage, d > 0, a vector that a GRU updates from each step's a_j, of which the sum is
 *  what the bars show), csparsemax its bounds u_j = f - C_j; null for the others (or an unknown model). */
function coverageUse(info) {
  if (!info) return null;
  if (info.attention_normalizer === "csparsemax") return { bound: info.fertility_bound };
  if (info.attention === "coverage") return { fertility: info.coverage_fertility || 0, dim: info.coverage_dim || 0 };
  return null;
}

/** Bars of the coverage before step t (grey) with the step's own weights on top (blue), over the
 *  same columns as the attention bars; with csparsemax a dashed line at the bound f, which no token
 *  but the last (the sink, unbounded) passes. */
function coverageBars(trace, t, use) {
  const tokens = trace.source_tokens, n = tokens.length;
  const coverage = tokens.map((_, j) => trace.steps.slice(0, t).reduce((sum, s) => sum + s.weights[j], 0));
  const weights = trace.steps[t].weights;
  const colW = Math.max(LINE + 3, Math.min(56, Math.floor(600 / n)));
  const left = 4, top = 10, barH = 60, width = left + colW * n + 8, height = top + barH + 8;
  const most = Math.max(use.bound ?? 1, ...coverage.map((c, j) => c + weights[j]));
  const yOf = (v) => top + barH - (v / most) * barH;
  const root = svg("svg", { class: "bars coverage", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "the attention each source token has had before this step" });
  const axis = svg("svg", { class: "bars-axis", width: AXIS, height, viewBox: `0 0 ${AXIS} ${height}` });
  const notes = ["Σ a before", "+ this step"].concat(use.bound !== undefined ? [`bound f = ${use.bound}`]
    : use.fertility ? ["÷ fertility Φⱼ", "in the score"]
    : use.dim ? [`score: a GRU's`, `Cⱼ (d ${use.dim}) of it`] : ["in the score"]);
  axis.append(svg("text", { x: 4, y: top + 2, class: "axis-title" }, "coverage Cⱼ"),
    ...notes.map((note, k) => svg("text", { x: 4, y: top + 18 + 13 * k, class: "axis-note" }, note)));
  root.append(svg("line", { x1: left, x2: width - 4, y1: yOf(0), y2: yOf(0), class: "zero" }));
  coverage.forEach((c, j) => {
    const x = left + j * colW + 4, sink = use.bound !== undefined && j === n - 1;
    root.append(svg("rect", { x, y: yOf(c), width: colW - 8, height: yOf(0) - yOf(c), "data-col": j,
      "data-value": c.toFixed(6), class: `bar covered${sink ? " sink" : ""}` },
    svg("title", {}, `C = ${c.toFixed(4)}${sink ? " (the sink: unbounded)" : ""}`)));
    root.append(svg("rect", { x, y: yOf(c + weights[j]), width: colW - 8, height: yOf(c) - yOf(c + weights[j]),
      "data-col": j, class: "bar current" }, svg("title", {}, `a = ${weights[j].toFixed(4)} at this step`)));
  });
  if (use.bound !== undefined) {
    root.append(svg("line", { x1: left, x2: width - 4, y1: yOf(use.bound), y2: yOf(use.bound), class: "bound" }));
  }
  return el("div", { class: "bars-wrap" }, axis, root);
}

/** The scores e_j as signed bars, the zero line inside [min, max]. */
function drawScores(root, axis, scores, { left, width, top, scoreH, colW, best, normalizer }) {
  const lo = Math.min(0, ...scores), hi = Math.max(0, ...scores);
  const span = hi - lo || 1;
  const yOf = (v) => top + ((hi - v) / span) * scoreH;
  const zero = yOf(0);
  axis.append(svg("text", { x: 4, y: top + 12, class: "axis-title" }, "scores eⱼ"),
    ...["before the", normalizer].map((note, k) => svg("text", { x: 4, y: top + 28 + 13 * k, class: "axis-note" }, note)));
  root.append(svg("line", { x1: left, x2: width - 4, y1: zero, y2: zero, class: "zero" }));
  scores.forEach((v, j) => {
    if (v === null) return; // -inf (JSON null): outside an attention window, no score
    const x = left + j * colW + 4;
    const y = Math.min(zero, yOf(v));
    const h = Math.max(1, Math.abs(yOf(v) - zero));
    root.append(svg("rect", { x, y, width: colW - 8, height: h, class: `bar score${v < 0 ? " neg" : ""}${j === best ? " best" : ""}`, "data-col": j },
      svg("title", {}, `e = ${v.toFixed(4)}`)));
    if (colW >= 6 * fmt(v, 1).length + 6) { // the number, where it fits (10px digits)
      root.append(svg("text", { x: x + (colW - 8) / 2, y: v >= 0 ? y - 3 : y + h + 10, class: "val" }, fmt(v, 1)));
    }
  });
}

function vectorRow(values, scale, label, attrs = {}) {
  const width = Math.max(2, Math.min(10, Math.floor(560 / values.length)));
  const cells = values.map((v, k) => el("span", {
    class: "vcell", style: `width:${width}px;background-color:${diverging(v / scale)}`, title: `[${k}] ${v.toFixed(4)}`,
  }));
  return el("div", { class: "vrow", ...attrs }, el("span", { class: "vlabel", title: label || null }, label),
    el("span", { class: "vcells" }, ...cells));
}

function vectorsView(trace, step, scales) {
  const box = el("div", { class: "vectors" });
  if (step.weights) {
    box.append(el("p", { class: "muted small" }, "encoder states hⱼ, faded by their weight aⱼ; context c = Σⱼ aⱼ hⱼ"));
    const wmax = Math.max(...step.weights);
    trace.encoder_states.forEach((h, j) => {
      const row = vectorRow(h, scales.encoder, "", { "data-col": j });
      const label = row.querySelector(".vlabel");
      label.append(el("span", { class: "tok" }, trace.source_tokens[j]), el("span", { class: "muted" }, ` ${shortWeight(step.weights[j])}`));
      label.title = `${trace.source_tokens[j]} ${shortWeight(step.weights[j])}`;
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

/** What a step that the prefix chose says: set by the prefix, and what the model would have written. */
function constrainedNote(step) {
  const [top] = step.top_k[0] ?? [null];
  return top === null || top === step.token ? " set by the prefix (the model's choice too)"
    : ` set by the prefix; the model would write ${top}`;
}
