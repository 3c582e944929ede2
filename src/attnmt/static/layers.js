// A Transformer's layers and heads (/attention; weights are [layer][head][query][key]): for the chosen
// kind of attention, layer and head, a head view (lines from queries to keys) beside a heatmap, and a
// grid of every layer x head. Heads can be switched off ("KIND.LAYER.HEAD", the mask_heads of
// /translate): the sentence is then translated without them, beside its translation with all heads.

import { $, blue, clear, el, svg } from "./dom.js";
import { Heatmap } from "./heatmap.js";

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

export class LayersView {
  /** onHeadsOff(names): called when the heads switched off change (names: "cross.1.0", ...). */
  constructor(onHeadsOff) {
    this.data = null; // the /attention answer shown, or null
    this.off = []; // the heads switched off, as KIND.LAYER.HEAD
    this.onHeadsOff = onHeadsOff;
    $("att-kind").addEventListener("change", () => {
      this.fillSelects();
      this.draw();
    });
    $("att-layer").addEventListener("change", () => this.draw());
    $("att-head").addEventListener("change", () => this.draw());
    $("head-off").addEventListener("click", () => {
      const name = `${$("att-kind").value}.${$("att-layer").value}.${$("att-head").value}`;
      if (!this.off.includes(name)) this.setOff([...this.off, name]);
    });
    $("heads-on").addEventListener("click", () => this.setOff([]));
  }

  /** Switches these heads off (and every other on), and says so to onHeadsOff. */
  setOff(names) {
    this.off = names;
    this.reset(names);
    this.onHeadsOff(names);
  }

  /** The list of heads off, without asking for a translation (a new model: none off). */
  reset(names = []) {
    this.off = names;
    const list = $("heads-off-list");
    clear(list);
    for (const name of names) {
      const chip = el("button", { type: "button", class: "chip head-chip", "data-head": name,
        title: "switch this head on again" }, `${name} ×`);
      chip.addEventListener("click", () => this.setOff(this.off.filter((n) => n !== name)));
      list.append(chip);
    }
    $("heads-off").hidden = !names.length;
    if (!names.length) clear($("heads-off-result"));
    this.draw();
  }

  /** The translation without the heads switched off, beside the one with all heads (or an error). */
  showWithout(without, withAll) {
    const box = $("heads-off-result");
    clear(box);
    if (without instanceof Error) {
      box.append(el("span", { class: "error-text" }, without.message));
      return;
    }
    const changed = without !== withAll;
    box.append(el("span", { class: "muted" }, "Without them: "),
      el("span", { class: `without${changed ? " changed" : ""}`, id: "heads-off-translation" }, without),
      el("br"), el("span", { class: "muted" }, `With every head${changed ? "" : " (the same)"}: `),
      el("span", { class: "with-all" }, withAll));
  }

  /** Shows an /attention answer; null hides the card (an RNN model). */
  show(result) {
    this.data = result;
    $("layers-card").hidden = !result;
    clear($("layers-view"));
    if (!result) return;
    this.fillSelects();
    this.draw();
  }

  /** Layer and head choices for the chosen kind (the encoder and decoder may differ in depth); the
   *  previous choice is kept when it still exists, else the last layer and the average of the heads. */
  fillSelects() {
    if (!this.data) return;
    const weights = this.data[$("att-kind").value];
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

  select(layer, head) {
    $("att-layer").value = String(layer);
    $("att-head").value = String(head);
    this.draw();
  }

  draw() {
    const data = this.data;
    if (!data) return;
    const kind = $("att-kind").value, layer = Number($("att-layer").value), head = $("att-head").value;
    $("head-off").disabled = head === "mean" || this.off.includes(`${kind}.${layer}.${head}`);
    const k = KINDS[kind];
    const matrix = headMatrix(data[kind], layer, head);
    const which = head === "mean" ? "all heads averaged" : `head ${head}`;
    const view = $("layers-view");
    clear(view);
    // rows are the queries, columns the keys: the corner names them as the head view's sides do
    const heatmap = new Heatmap(data[k.keys], data[k.queries], matrix,
      { name: data.model, caption: `${k.name} · layer ${layer} · ${which}`, compact: true,
        names: { rows: k.sides[0], columns: k.sides[1] } });
    view.append(
      el("div", { class: "layers-top" }, headView(data[k.queries], data[k.keys], matrix, kind), heatmap.element),
      el("div", { class: "head-grid-wrap" }, headGrid(data[kind], kind, layer, head, (l, h) => this.select(l, h),
        this.off)));
  }
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

/** Every layer (rows) x head (columns) as a small canvas heatmap; a click calls onSelect(layer, head)
 *  (head "mean" for a layer's label: its heads averaged); the heads in ``off`` are marked switched off. */
function headGrid(weights, kind, layer, head, onSelect, off) {
  const layers = weights.length, heads = weights[0].length;
  const grid = el("div", { class: "head-grid", style: `grid-template-columns: auto repeat(${heads}, 76px)`,
    "data-kind": kind, "data-layers": layers, "data-heads": heads });
  grid.append(el("span"));
  for (let h = 0; h < heads; h++) grid.append(el("span", { class: "grid-label" }, `head ${h}`));
  for (let l = 0; l < layers; l++) {
    const mean = el("span", { class: "grid-label mean-row", title: "all heads of this layer averaged" }, `layer ${l}`);
    mean.addEventListener("click", () => onSelect(l, "mean"));
    grid.append(mean);
    for (let h = 0; h < heads; h++) {
      const matrix = weights[l][h];
      const rows = matrix.length, cols = rows ? matrix[0].length : 0;
      const px = Math.max(1, Math.floor(72 / Math.max(rows, cols, 1)));
      const isOff = off.includes(`${kind}.${l}.${h}`);
      const canvas = el("canvas", {
        class: `grid-cell${l === layer && String(h) === head ? " selected" : ""}${isOff ? " off" : ""}`,
        width: Math.max(1, cols * px), height: Math.max(1, rows * px), "data-layer": l, "data-head": h,
        title: `layer ${l} head ${h}${isOff ? " (switched off)" : ""}: click to select` });
      const ctx = canvas.getContext("2d");
      matrix.forEach((row, i) => row.forEach((w, j) => {
        ctx.fillStyle = blue(w);
        ctx.fillRect(j * px, i * px, px, px);
      }));
      canvas.addEventListener("click", () => onSelect(l, h));
      grid.append(canvas);
    }
  }
  return grid;
}
