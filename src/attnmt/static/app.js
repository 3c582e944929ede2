// attnmt attention explorer: plain ES modules, no dependencies, no build step.
//
// Talks to the JSON API of `attnmt serve` (/models, /translate, /trace, /beam, /attention, /score,
// /saliency). This module wires the form to the views:
//   api.js      fetch and its errors            dom.js     element and SVG helpers, colour scales
//   heatmap.js  the attention heatmap           panels.js  the translation panels (two to compare)
//   score.js    how probable a translation is, token by token (/score)
//   steps.js    the decoding step by step       beam.js    the beam search tree (layout, drawing)
//   layers.js   a Transformer's layers and heads   words.js   subword pieces merged into words
//   pairs.js    a sentence-pair model (/classify)   speech.js  audio: spectrogram, attention, steps
//   saliency.js attention beside gradients (/saliency)

import { api, ApiError } from "./api.js";
import { renderBeam, renderBeamError } from "./beam.js";
import { $, clear, el } from "./dom.js";
import { LayersView } from "./layers.js";
import { PairView } from "./pairs.js";
import { describeModel, renderPanel, renderPanelError } from "./panels.js";
import { SaliencyView } from "./saliency.js";
import { ScoreView } from "./score.js";
import { SpeechView } from "./speech.js";
import { StepView } from "./steps.js";

const TOP_K = 5;

const state = {
  models: [], // the answer of /models
  requestId: 0, // of the latest translation asked for: older answers are dropped
  shown: new Map(), // panel element -> [model name, /translate answer] it shows, redrawn when "words" changes
  asked: null, // [the /translate body of the first model's translation shown, its text]: the heads-off view's
};
const steps = new StepView();
const layers = new LayersView((heads) => translateWithout(heads));
const pairs = new PairView();
const speech = new SpeechView();
const scoring = new ScoreView();
const saliency = new SaliencyView();

function modelByName(name) {
  return state.models.find((m) => m.name === name);
}

function showErrors(errors) {
  const box = $("error");
  clear(box);
  box.hidden = errors.length === 0;
  for (const err of errors) box.append(el("p", {}, err.message || String(err)));
}

/** The same error (e.g. an empty text) from several endpoints, once per status and detail. */
function distinct(errors) {
  const seen = new Set();
  return errors.filter((e) => {
    const key = `${e.status} ${e.detail}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

function setBusy(busy) {
  $("translate").disabled = busy;
  labelButton();
}

/** The main button's label: Translate, or Transcribe for a speech model; "…ing…" while it works. */
function labelButton() {
  const speech = modelByName($("model").value)?.task === "speech", busy = $("translate").disabled;
  $("translate").textContent = speech ? (busy ? "Transcribing…" : "Transcribe") : (busy ? "Translating…" : "Translate");
}

// ---------------------------------------------------------------------------------------------
// the main action: every view of one sentence, asked for at once

async function transcribe(model, beam) {
  document.body.dataset.state = "busy";
  setBusy(true);
  showErrors([]);
  try {
    await speech.transcribe(model, beam, modelByName(model)?.beam);
    document.body.dataset.state = "done";
  } catch (err) {
    showErrors([err]);
    document.body.dataset.state = "error";
  }
  setBusy(false);
}

async function translateAll() {
  if (modelByName($("model").value)?.task === "speech") {
    const beamValue = $("beam").value.trim();
    return transcribe($("model").value, beamValue === "" ? null : Number(beamValue));
  }
  const text = $("source").value;
  const modelA = $("model").value || null;
  const compare = $("compare").checked && $("model-b").value;
  const modelB = compare ? $("model-b").value : null;
  const beamValue = $("beam").value.trim();
  const beam = beamValue === "" ? null : Number(beamValue);
  const id = ++state.requestId;
  document.body.dataset.state = "busy";
  setBusy(true);
  showErrors([]);

  const prefix = $("prefix").value || null; // the start every view's output must have
  const tag = tagOf(modelA); // before the source, for each model trained with it
  const constraints = phrases(); // what the translation and the beam tree must contain (null: nothing)
  const translateBody = (model) => ({ text, model, beam, n_best: 1, attention: true, align: true, prefix,
    tag: tagOf(model), constraints });
  $("steps-unconstrained").hidden = constraints === null;
  const jobs = [
    api("/translate", translateBody(modelA), `translate (${modelA})`),
    modelB ? api("/translate", translateBody(modelB), `translate (${modelB})`) : Promise.resolve(null),
    api("/trace", { text, model: modelA, top_k: TOP_K, prefix, tag }, `trace (${modelA})`),
    api("/beam", { text, model: modelA, beam: beam ?? (modelByName(modelA)?.beam ?? 5), prefix, tag, constraints },
      `beam (${modelA})`),
  ];
  // A Transformer's layers and heads, for the translation shown (forced), once it is known (an
  // ensemble's are several models': none).
  if (modelByName(modelA)?.type === "transformer" && !modelByName(modelA)?.ensemble) {
    jobs.push(jobs[0].then((answer) => {
      const shown = answer.translations[0].candidates[0].text;
      return api("/attention", { text, model: modelA, translation: shown.trim() ? shown : null, tag },
        `attention (${modelA})`);
    }));
  }
  const [ta, tb, tr, bm, at] = await Promise.allSettled(jobs);
  if (id !== state.requestId) return; // a newer request was sent meanwhile
  const errors = [];

  const panelA = $("panel-a"), panelB = $("panel-b");
  state.shown.clear();
  state.asked = null;
  if (ta.status === "fulfilled") {
    state.shown.set(panelA, [modelA, ta.value]);
    state.asked = [translateBody(modelA), ta.value.translations[0].candidates[0].text];
    scoring.offer(modelA, text, ta.value.translations[0].candidates[0].text, tag);
    saliency.offer(modelA, text, ta.value.translations[0].candidates[0].text);
  }
  else { errors.push(ta.reason); renderPanelError(panelA, modelA, ta.reason); }
  panelB.hidden = !modelB;
  if (modelB) {
    if (tb.status === "fulfilled") state.shown.set(panelB, [modelB, tb.value]);
    else { errors.push(tb.reason); renderPanelError(panelB, modelB, tb.reason); }
  }
  drawPanels();

  steps.words = $("words").checked;
  if (tr.status === "fulfilled") steps.show(tr.value, modelByName(modelA));
  else { errors.push(tr.reason); steps.showError(tr.reason); }

  if (at && at.status === "fulfilled") {
    layers.show(at.value);
    if (layers.off.length) translateWithout(layers.off);
  }
  else { layers.show(null); if (at) errors.push(at.reason); }

  if (bm.status === "fulfilled") renderBeam(bm.value, beam ?? modelByName(modelA)?.beam);
  else { errors.push(bm.reason); renderBeamError(bm.reason); }

  showErrors(distinct(errors));
  document.body.dataset.state = errors.length ? "error" : "done";
  setBusy(false);
}

/** The first model's sentence translated again with these heads switched off (the Layers and heads
 *  card), beside its translation with every head; nothing to do before a translation is shown. */
async function translateWithout(heads) {
  if (!heads.length || !state.asked) return;
  const [body, withAll] = state.asked, id = state.requestId;
  try {
    const answer = await api("/translate", { ...body, attention: false, align: false, mask_heads: heads.join(",") },
      `translate without ${heads.join(", ")} (${body.model})`);
    if (id === state.requestId && layers.off.join(",") === heads.join(",")) {
      layers.showWithout(answer.translations[0].candidates[0].text, withAll);
    }
  } catch (err) {
    if (id === state.requestId) layers.showWithout(err, withAll);
  }
}

/** The translation panels shown, with heatmaps of words or of pieces as "words" says; two panels
 *  side by side get compact heatmaps, so that a sentence fits in half the card. */
function drawPanels() {
  const words = $("words").checked, compact = !$("panel-b").hidden;
  for (const [panel, [name, answer]] of state.shown) renderPanel(panel, name, modelByName(name), answer, words, compact);
}

// ---------------------------------------------------------------------------------------------
// start

function fillModels(models) {
  state.models = models;
  clear($("model"));
  for (const m of models) $("model").append(el("option", { value: m.name }, m.name));
  $("model").value = models[0].name;
  onModelChange();
}

/** The second model's list: the translation models (compare shows two /translate answers side by
 *  side; a sentence-pair or speech model has none to give). Compare is off, and says why, unless
 *  the first model and at least one other are translation models. */
function fillCompareList() {
  const first = modelByName($("model").value);
  const others = state.models.filter((m) => m.task === "translation");
  const select = $("model-b"), previous = select.value;
  clear(select);
  for (const m of others) select.append(el("option", { value: m.name }, m.name));
  const fallback = others.find((m) => m.name !== first?.name) || others[0];
  if (fallback) select.value = others.some((m) => m.name === previous) ? previous : fallback.name;
  const why = state.models.length < 2 ? "the server has only one model"
    : first?.task !== "translation" ? `only translation models can be compared ('${first?.name}' is a ${first?.task} model)`
      : others.length < 2 ? "the server has only one translation model" : "";
  $("compare").disabled = Boolean(why);
  if (why) $("compare").checked = false;
  $("compare").title = why;
  select.disabled = !$("compare").checked;
}

/** The phrases of "Must contain", separated by ";" (blank ones left out), or null for none. */
function phrases() {
  const list = $("constraints").value.split(";").map((p) => p.trim()).filter((p) => p);
  return list.length ? list : null;
}

/** The tag chosen, for `model` if it was trained with it, else null (each model knows its own). */
function tagOf(model) {
  const tag = $("tag").value;
  return tag && (modelByName(model)?.tags ?? []).includes(tag) ? tag : null;
}

/** The tags of the first model (GET /models: tags), "none" first; the field is hidden without any. */
function fillTags(m) {
  const select = $("tag"), previous = select.value, tags = m?.tags ?? [];
  clear(select);
  select.append(el("option", { value: "" }, "none"));
  for (const tag of tags) select.append(el("option", { value: tag }, tag));
  select.value = tags.includes(previous) ? previous : "";
  $("tag-field").hidden = !tags.length;
}

function onModelChange() {
  const m = modelByName($("model").value);
  if (m?.name !== state.asked?.[0].model) layers.reset(); // (another model's heads: none off)
  fillTags(m);
  speech.setVisible(m?.task === "speech");
  pairs.toggle(m);
  scoring.toggle(m);
  saliency.toggle(m);
  fillCompareList();
  labelButton();
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
  for (const box of ["source", "prefix", "constraints"]) {
    $(box).addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        translateAll();
      }
    });
  }
  $("words").addEventListener("change", () => {
    drawPanels();
    steps.setWords($("words").checked);
  });
  $("model").addEventListener("change", onModelChange);
  $("model-b").addEventListener("change", onModelChange);
  $("compare").addEventListener("change", onModelChange);

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
