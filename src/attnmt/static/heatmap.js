// Heatmap of attention weights (an HTML table): one cell per (output token, source token), with
// the tokens a row attends to, or the rows that attend to a column, highlighted on hover or click.

import { blue, clear, el, fmt, shortWeight } from "./dom.js";

export const HIGHLIGHT_RATIO = 0.5; // a source token is "attended to" when its weight >= ratio * the row's maximum

/** The columns a row of weights attends to: weight >= HIGHLIGHT_RATIO * max of the row. */
export function attendedColumns(row) {
  const top = Math.max(...row);
  if (!(top > 0)) return [];
  return row.flatMap((w, j) => (w >= HIGHLIGHT_RATIO * top ? [j] : []));
}

export class Heatmap {
  /**
   * @param {string[]} sourceTokens columns
   * @param {string[]} targetTokens rows
   * @param {number[][]} matrix rows = target tokens, columns = source tokens
   */
  constructor(sourceTokens, targetTokens, matrix,
              { name = "", caption = null, compact = false, unit = "token", names = null, links = null } = {}) {
    this.names = names || { columns: "source", rows: "output" }; // what the columns and rows are, in the labels
    this.source = sourceTokens;
    this.target = targetTokens;
    this.pinned = null; // {kind: "row"|"col", index}
    this.hovered = null;
    this.progress = null; // rows after it are not decoded yet (step view)

    const vertical = sourceTokens.some((t) => t !== "</s>" && [...t].length > 3);
    this.table = el("table", {
      class: `heatmap${vertical ? " vertical-labels" : ""}${compact ? " compact" : ""}`, "data-model": name,
      "data-rows": targetTokens.length, "data-cols": sourceTokens.length, "data-unit": unit,
    });
    if (caption) this.table.append(el("caption", {}, caption));
    this.corner = el("th", { class: "corner", scope: "col" },
      el("span", { class: "axis" }, `${this.names.columns} →`), el("span", { class: "axis" }, `${this.names.rows} ↓`));
    const head = el("tr", {}, this.corner);
    this.sourceLabels = sourceTokens.map((tok, j) => {
      const th = el("th", { class: "src-label", scope: "col", "data-col": j, title: `${this.names.columns} ${unit} ${j + 1}: ${tok}` },
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
      const th = el("th", { class: "tgt-label", scope: "row", "data-row": i, title: `${this.names.rows} ${unit} ${i + 1}: ${tok}` }, tok);
      th.addEventListener("mouseenter", () => this.hover({ kind: "row", index: i }));
      th.addEventListener("mouseleave", () => this.hover(null));
      th.addEventListener("click", () => this.pin({ kind: "row", index: i }));
      this.targetLabels.push(th);
      const cells = sourceTokens.map((_, j) => el("td", { class: "cell", "data-row": i, "data-col": j }));
      for (const [row, col] of links || []) if (row === i && cells[col]) cells[col].classList.add("link");
      this.cells.push(cells);
      const tr = el("tr", { "data-row": i }, th, ...cells);
      this.rows.push(tr);
      body.append(tr);
    });
    this.table.append(el("thead", {}, head), body);

    this.info = el("p", { class: "focus-info" });
    this.scroller = el("div", { class: "heatmap-scroll" }, this.table);
    this.scrollNote = el("p", { class: "scroll-note", hidden: true });
    this.scroller.addEventListener("scroll", () => this.updateScrollNote(), { passive: true });
    new ResizeObserver(() => this.updateScrollNote()).observe(this.scroller);
    this.element = el("div", { class: "heatmap-block" },
      this.scroller, this.scrollNote,
      el("div", { class: "legend" }, el("span", {}, "0"), el("span", { class: "ramp" }), el("span", {}, "1"),
        el("span", { class: "muted" }, ` weight · highlighted: ≥ ${HIGHLIGHT_RATIO} × the row's largest weight`),
        ...(links ? [el("span", { class: "link-key muted", title: "the word alignment of attnmt translate --report-align" },
          ` · ● link: the source ${unit} each output ${unit} attends to most`)] : [])),
      this.info);
    this.setMatrix(matrix);
  }

  /** New weights for the same tokens (the step view's rows decoded so far); redraws. */
  setMatrix(matrix) {
    this.matrix = matrix;
    this.attended = matrix.map(attendedColumns);
    this.cells.forEach((row, i) => row.forEach((td, j) => {
      const w = matrix[i][j];
      td.dataset.weight = w.toFixed(6);
      td.title = `${this.target[i]} → ${this.source[j]}: ${w.toFixed(3)}`;
      td.classList.toggle("dark", w > 0.55);
    }));
    this.render();
  }

  /** The columns in view, when not all are: "columns 3–17 of 40 shown", so that a cut-off look
   *  (a phone hides scroll bars) reads as what it is, a box to scroll. */
  updateScrollNote() {
    const box = this.scroller;
    const overflowing = box.scrollWidth > box.clientWidth + 1;
    this.scrollNote.hidden = !overflowing;
    if (!overflowing) return;
    const shown = this.visibleColumns();
    const range = shown.length ? `${shown[0] + 1}–${shown[shown.length - 1] + 1}` : "none";
    this.scrollNote.textContent = `columns ${range} of ${this.source.length} shown · scroll sideways for the others`;
  }

  /** The indices of the columns wholly in view, right of the sticky row labels. */
  visibleColumns() {
    const box = this.scroller.getBoundingClientRect();
    const left = this.corner.getBoundingClientRect().right;
    return this.sourceLabels.flatMap((th, j) => {
      const r = th.getBoundingClientRect();
      return r.left >= left - 1 && r.right <= box.right + 1 ? [j] : [];
    });
  }

  /** Scrolls the heatmap sideways (not the page) so that column j is in view beside the row labels. */
  revealColumn(j) {
    const box = this.scroller, th = this.sourceLabels[j];
    if (!th || box.scrollWidth <= box.clientWidth) return;
    const boxLeft = box.getBoundingClientRect().left;
    const labels = this.corner.getBoundingClientRect().right - boxLeft; // the sticky labels' width
    const r = th.getBoundingClientRect();
    const left = r.left - boxLeft, right = r.right - boxLeft;
    const margin = 2 * r.width; // a column or two of context on the side it was reached from
    if (left < labels) box.scrollLeft -= labels - left + margin;
    else if (right > box.clientWidth) box.scrollLeft += right - box.clientWidth + margin;
    this.updateScrollNote();
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
      this.info.append(`${capital(this.names.rows)} `, el("span", { class: "tok" }, this.target[i]),
        ` (row ${i + 1}) attends to: `, ...parts);
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
      this.info.append(`${capital(this.names.columns)} `, el("span", { class: "tok" }, this.source[j]),
        ` (column ${j + 1}) is attended to by: `, ...(parts.length ? parts
          : [el("span", { class: "muted" }, `no ${this.names.rows} token (never among a row's largest weights)`)]));
    }
  }
}

const capital = (word) => word.charAt(0).toUpperCase() + word.slice(1);

/** In place of a heatmap, for a model without attention. */
export function noAttentionNotice() {
  return el("div", { class: "notice no-attention" },
    el("strong", {}, "no attention — fixed context"),
    el("span", {}, ": this model has no attention; the decoder sees the same context (the final encoder state) at every step, so there are no weights to draw."));
}
