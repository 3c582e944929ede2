// The translation panels: a model's translation and its attention heatmap (two panels to compare).

import { clear, el, fmt } from "./dom.js";
import { Heatmap, noAttentionNotice } from "./heatmap.js";
import { linkedCells, mergePieces } from "./words.js";

/** One line about a model of /models. */
export function describeModel(m) {
  if (!m) return "";
  const bound = m.attention_normalizer === "csparsemax" ? ` (fertility ${m.fertility_bound})` : "";
  const sparse = m.attention_normalizer && m.attention_normalizer !== "softmax" ? ` ${m.attention_normalizer}${bound}` : "";
  if (m.type === "decomposable") return `sentence pairs · decomposable${sparse} attention · labels ${m.labels.join(", ")}`;
  // after this model's figures: the models it decodes with (attnmt serve --ensemble), its tags
  const after = (m.ensemble ? ` · ensemble with ${m.ensemble.join(", ")} (mean attention)` : "")
    + (m.tags?.length ? ` · tags ${m.tags.join(", ")}` : "");
  if (m.type === "transformer") {
    return `Transformer${sparse ? ` ·${sparse} attention` : ""} · d_model ${m.d_model} · ${m.heads} heads · ` +
      `${m.encoder_layers} encoder + ${m.decoder_layers} decoder layers · ${m.norm}-norm · default beam ${m.beam}${after}`;
  }
  const local = m.local_attention && m.local_attention !== "none" ? ` ${m.local_attention} (D ${m.local_window})` : "";
  const fertility = m.coverage_fertility ? ` (fertility N ${m.coverage_fertility})`
    : m.coverage_dim ? ` (NN-based, d ${m.coverage_dim})` : "";
  const attention = m.attention === "none" ? "no attention" : `${m.attention}${fertility}${local}${sparse} attention`;
  const feeding = m.attention.startsWith("luong") ? (m.input_feeding ? " · input feeding" : " · no input feeding") : "";
  return `${attention} · ${m.rnn_type.toUpperCase()} · decoder ${m.decoder_hidden}${feeding} · default beam ${m.beam}` +
    after;
}

/** The best translation of a /translate answer, with its heatmap (of words when `words`, else of
 *  subword pieces; with smaller cells when `compact`, for two panels side by side); `info` is the
 *  model's entry of /models. */
export function renderPanel(panel, modelName, info, result, words = false, compact = false) {
  clear(panel);
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
  const { source, target, matrix } = words ? mergePieces(translation.source_tokens, best.tokens, best.attention)
    : { source: translation.source_tokens, target: best.tokens, matrix: best.attention };
  const links = best.alignment ? linkedCells(source, target, matrix, best.alignment, words) : null;
  const heatmap = new Heatmap(source, target, matrix, { name: modelName, unit: words ? "word" : "token", compact, links });
  panel.append(heatmap.element);
}

export function renderPanelError(panel, modelName, err) {
  clear(panel);
  panel.append(el("div", { class: "panel-head" }, el("span", { class: "model-name" }, modelName)),
    el("p", { class: "error-inline" }, err.message));
}
