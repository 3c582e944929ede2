// The score view: how probable the first model finds a translation of the source (/score, forced
// decoding). Each output token is a cell coloured by its probability p(y_t | y_<t, x), the least
// probable one outlined: the token that surprised the model. After a translation the box holds the
// model's own output, scored at once; edit it (a reference, a variant) and score it against that.

import { api } from "./api.js";
import { $, blue, clear, el, fmt } from "./dom.js";

export class ScoreView {
  constructor() {
    this.requestId = 0;
    this.source = null; // the source and model of the last translation
    this.model = null;
    this.own = null; // the /score answer for the model's own translation, for comparison
    this.box = el("textarea", { id: "score-translation", rows: 1, spellcheck: "false", "aria-label": "translation to score",
      placeholder: "a translation of the source sentence" });
    this.button = el("button", { id: "score", type: "submit", disabled: true }, "Score");
    this.result = el("div", { id: "score-result" },
      el("p", { class: "placeholder muted" }, "Translate a sentence: its translation is scored here, and any other you type."));
    this.error = el("div", { id: "score-error", class: "error", role: "alert", hidden: true });
    const form = el("form", { id: "score-form", autocomplete: "off" },
      el("label", { for: "score-translation", class: "field-label" }, "Translation"),
      el("div", { class: "score-input" }, this.box, this.button));
    this.card = el("section", { class: "card", id: "score-card" },
      el("h2", {}, "How probable is a translation? ", el("span", { class: "muted small" }, "first model (/score)")),
      el("p", { class: "hint" }, "Each token of the translation, forced through the decoder, coloured by the probability the "
        + "model gave it after the source and the tokens before it; the outlined token is the least probable. "
        + "log p is the sum of the tokens' log-probabilities; per token, translations of different lengths compare."),
      form, this.error, this.result);
    $("results-card").after(this.card);
    form.addEventListener("submit", (event) => { event.preventDefault(); this.score(); });
    this.box.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); this.score(); }
    });
  }

  /** Shown for translation models only (speech models have audio, pair models no translation). */
  toggle(model) {
    this.card.hidden = model?.task !== "translation";
  }

  /** A new translation of `source` by `model` (its source after `tag`, if not null): its own output
   *  scored, as the comparison for others. */
  offer(model, source, translation, tag = null) {
    Object.assign(this, { model, source, tag, own: null });
    this.box.value = translation.trim() ? translation : "";
    this.button.disabled = false;
    clear(this.result);
    return this.box.value ? this.score() : null; // an empty output: nothing to score until one is typed
  }

  async score() {
    if (this.source === null) return;
    const id = ++this.requestId, translation = this.box.value;
    this.error.hidden = true;
    try {
      const body = { text: this.source, translation, model: this.model, tag: this.tag };
      const answer = await api("/score", body, `score (${this.model})`);
      if (id !== this.requestId) return;
      if (this.own === null) this.own = answer.scores[0];
      this.render(answer.scores[0]);
    } catch (err) {
      if (id !== this.requestId) return;
      clear(this.error);
      this.error.append(el("p", {}, err.message));
      this.error.hidden = false;
    }
  }

  render(scored) {
    clear(this.result);
    const least = scored.log_probs.indexOf(Math.min(...scored.log_probs));
    const cells = scored.tokens.map((token, t) => {
      const p = Math.exp(scored.log_probs[t]);
      return el("span", { class: `score-token${t === least ? " least" : ""}`, "data-p": p.toFixed(4),
        title: `p = ${fmt(p, 3)}, log p = ${fmt(scored.log_probs[t], 3)}` },
        el("span", { class: "tok", style: `background:${blue(p)};color:${p > 0.6 ? "#fff" : "inherit"}` }, token),
        el("span", { class: "score-p muted small" }, fmt(p, 2)));
    });
    const line = (s) => `log p = ${fmt(s.log_prob, 3)} · per token ${fmt(s.per_token, 3)} · perplexity ${fmt(s.perplexity, 2)}`;
    this.result.append(el("div", { class: "score-tokens" }, cells), el("p", { id: "score-summary" }, line(scored)));
    if (this.own && this.own.translation !== scored.translation) {
      this.result.append(el("p", { id: "score-own", class: "muted small" },
        `the model's own translation "${this.own.translation}": ${line(this.own)}`));
    }
  }
}
