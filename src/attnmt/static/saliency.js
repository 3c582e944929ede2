// Attention or gradients? The first model's translation read two ways (/saliency): each output
// piece's attention over the source (what the translation panel shows) beside its saliency, how much
// each source piece's embedding moves that piece's log-probability (gradient x input, rows summing
// to 1). Asked for on a click: it costs a backward pass per output piece.

import { api } from "./api.js";
import { $, clear, el } from "./dom.js";
import { Heatmap } from "./heatmap.js";

/** The column of each row's largest weight. */
function argmaxes(matrix) {
  return matrix.map((row) => row.indexOf(Math.max(...row)));
}

export class SaliencyView {
  constructor() {
    this.request = null; // {text, model, translation} of the translation offered
    this.requestId = 0;
    this.button = el("button", { type: "button", id: "saliency-run", disabled: true }, "Compare with saliency");
    this.result = el("div", { id: "saliency-result" });
    this.card = el("section", { class: "card", id: "saliency-card", hidden: true },
      el("h2", {}, "Attention or gradients? ", el("span", { class: "muted small" }, "first model (/saliency)")),
      el("p", { class: "hint" }, "Where does each output piece come from? Left, where the decoder looked (its "
        + "attention); right, which source pieces the piece depends on: how much each source piece's embedding "
        + "moves its log-probability (gradient × input, each row summing to 1). Where the two disagree, the "
        + "attention was not the explanation. One backward pass per output piece."),
      el("div", { class: "controls" }, this.button), this.result);
    $("layers-card").before(this.card);
    this.button.addEventListener("click", () => this.run());
  }

  /** Shown for translation models (one model: an ensemble has no one gradient). */
  toggle(model) {
    this.card.hidden = model?.task !== "translation" || Boolean(model?.ensemble);
  }

  /** A new translation of `text` by `model`: ready to be compared (nothing asked yet). */
  offer(model, text, translation) {
    this.request = { text, model, translation: translation.trim() ? translation : null };
    this.button.disabled = false;
    clear(this.result);
  }

  async run() {
    if (!this.request) return;
    const id = ++this.requestId;
    this.button.disabled = true;
    this.button.textContent = "Computing…";
    try {
      const answer = await api("/saliency", this.request, `saliency (${this.request.model})`);
      if (id === this.requestId) this.render(answer);
    } catch (err) {
      if (id === this.requestId) {
        clear(this.result);
        this.result.append(el("p", { class: "error-text" }, err.message));
      }
    }
    this.button.disabled = false;
    this.button.textContent = "Compare with saliency";
  }

  render(answer) {
    clear(this.result);
    const options = (caption) => ({ name: answer.model, caption, compact: true });
    const attention = new Heatmap(answer.source_tokens, answer.tokens, answer.attention, options("attention"));
    const saliency = new Heatmap(answer.source_tokens, answer.tokens, answer.saliency,
      options("saliency (gradient × input)"));
    const [a, s] = [argmaxes(answer.attention), argmaxes(answer.saliency)];
    const same = a.filter((j, i) => j === s[i]).length;
    this.result.append(el("div", { class: "saliency-pair" }, attention.element, saliency.element),
      el("p", { id: "saliency-agreement", class: "muted" },
        `${same} of ${a.length} output pieces look most at the same source piece in both.`));
  }
}
