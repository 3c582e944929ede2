// The pair view: a sentence-pair model (task: pairs, /classify) in place of the translation views.
// Two text boxes (premise, hypothesis), the label with every class's probability, and the attention
// between the two sentences as a heatmap. Its rows are the sentence whose words attend: the premise
// (softmax over the hypothesis, each row sums to 1) or, in the other direction, the hypothesis
// (softmax over the premise); hover or click a word to see what it attends to.

import { api } from "./api.js";
import { $, clear, el } from "./dom.js";
import { Heatmap } from "./heatmap.js";

const TRANSLATION_CARDS = ["results-card", "steps-card", "beam-card", "layers-card"];

export class PairView {
  constructor() {
    this.answer = null;
    this.requestId = 0;
    this.premise = el("textarea", { id: "premise", rows: 2, spellcheck: "false", "aria-label": "premise",
      placeholder: "a premise: three red dogs are running in the park" });
    this.hypothesis = el("textarea", { id: "hypothesis", rows: 2, spellcheck: "false", "aria-label": "hypothesis",
      placeholder: "a hypothesis: three blue dogs are running in the park" });
    this.direction = el("select", { id: "pair-direction", "aria-label": "attention direction" },
      el("option", { value: "premise" }, "premise words attend to the hypothesis"),
      el("option", { value: "hypothesis" }, "hypothesis words attend to the premise"));
    this.button = el("button", { id: "classify", type: "submit" }, "Classify");
    this.result = el("div", { id: "pair-result" },
      el("p", { class: "placeholder muted" }, "Give a premise and a hypothesis to see the label and the attention."));
    this.error = el("div", { id: "pair-error", class: "error", role: "alert", hidden: true });
    const form = el("form", { id: "pair-form", autocomplete: "off" },
      el("label", { for: "premise", class: "field-label" }, "Premise"), this.premise,
      el("label", { for: "hypothesis", class: "field-label" }, "Hypothesis"), this.hypothesis,
      el("div", { class: "controls" }, el("label", {}, "Attention ", this.direction), this.button));
    this.card = el("section", { class: "card", id: "pair-card", hidden: true },
      el("h2", {}, "Sentence pair ", el("span", { class: "muted small" }, "decomposable attention (/classify)")),
      form, this.error, this.result);
    $("input-card").after(this.card);
    form.addEventListener("submit", (event) => { event.preventDefault(); this.classify(); });
    for (const box of [this.premise, this.hypothesis]) {
      box.addEventListener("keydown", (event) => {
        if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); this.classify(); }
      });
    }
    this.direction.addEventListener("change", () => this.render());
  }

  /** Shows the pair view (and hides the translation views) for a sentence-pair model. */
  toggle(model) {
    const pairs = model?.type === "decomposable";
    this.model = pairs ? model.name : null;
    this.card.hidden = !pairs;
    document.body.classList.toggle("pairs-mode", pairs); // hides the source box (style.css)
    // after SpeechView.setVisible, which shows the cards of translation models
    if (pairs) for (const id of TRANSLATION_CARDS) $(id).hidden = true;
  }

  async classify() {
    const id = ++this.requestId;
    document.body.dataset.state = "busy";
    this.button.disabled = true;
    this.error.hidden = true;
    try {
      const answer = await api("/classify", { premise: this.premise.value, hypothesis: this.hypothesis.value,
        model: this.model }, `classify (${this.model})`);
      if (id !== this.requestId) return;
      this.answer = answer;
      this.render();
      document.body.dataset.state = "done";
    } catch (err) {
      if (id !== this.requestId) return;
      clear(this.error);
      this.error.append(el("p", {}, err.message));
      this.error.hidden = false;
      document.body.dataset.state = "error";
    } finally {
      this.button.disabled = false;
    }
  }

  render() {
    const a = this.answer;
    if (!a) return;
    clear(this.result);
    const classes = Object.entries(a.probabilities).map(([label, p]) => el("div", {
      class: `class-bar${label === a.label ? " chosen" : ""}`, "data-label": label, "data-probability": p.toFixed(6) },
    el("span", { class: "class-name" }, label),
    el("span", { class: "bar", style: `width:${(100 * p).toFixed(1)}%` }),
    el("span", { class: "class-p" }, p.toFixed(3))));
    const premiseRows = this.direction.value === "premise";
    // Rows: the words that attend; the hypothesis direction's matrix (columns sum to 1) transposed.
    const matrix = premiseRows ? a.premise_attention
      : a.hypothesis_tokens.map((_, j) => a.premise_tokens.map((__, i) => a.hypothesis_attention[i][j]));
    const [rows, columns] = premiseRows ? [a.premise_tokens, a.hypothesis_tokens]
      : [a.hypothesis_tokens, a.premise_tokens];
    const heatmap = new Heatmap(columns.map(word), rows.map(word), matrix, {
      name: a.model, names: premiseRows ? { rows: "premise", columns: "hypothesis" }
        : { rows: "hypothesis", columns: "premise" } });
    this.result.append(el("div", { class: "output" }, el("span", { class: "muted small" }, "label "),
      el("strong", { id: "pair-label" }, a.label)), el("div", { class: "classes" }, ...classes), heatmap.element);
  }
}

/** A subword piece as shown: without sentencepiece's start-of-word mark. */
const word = (piece) => (piece === "\u2581" ? piece : piece.replace(/^\u2581/, ""));
