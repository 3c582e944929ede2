// The audio view, for speech models (task: speech): a WAV file uploaded, played, sent as base64 to
// /translate (transcript and attention, beam) and /trace (spectrogram and every greedy step); drawn as
// the attention of each character of the beam transcript above the spectrogram, on one time axis
// across the card's width, with the greedy decoding's steps to walk through.

import { api } from "./api.js";
import { $, clear, el } from "./dom.js";

const TOP_K = 5;
const ROW = 14; // pixels per output character of the attention
const SPECTROGRAM = 160; // pixels of height of the spectrogram
const LABEL = 28; // left margin for the character labels
const AXIS = 18; // pixels under the spectrogram for the time labels
const TICK_SPACING = 64; // pixels at least between two time labels
const TICK_STEPS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300];

/** The times (seconds) to label on an axis of `duration` seconds drawn `width` pixels wide: every
 *  multiple of the smallest round step that leaves TICK_SPACING pixels between labels. */
export function timeTicks(duration, width) {
  const step = TICK_STEPS.find((s) => (s / duration) * width >= TICK_SPACING) || duration;
  const ticks = [];
  for (let k = 0; k * step <= duration + 1e-9; k++) ticks.push(Number((k * step).toFixed(3)));
  return ticks;
}

/** The bytes of a File as base64, in chunks (String.fromCharCode of millions of arguments fails). */
async function base64Of(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

/** A value in [0, 1] as a colour from dark purple to yellow (close to matplotlib's magma). */
function magma(v) {
  const r = Math.round(255 * Math.min(1, 1.6 * v)), g = Math.round(255 * Math.max(0, 1.4 * v - 0.4));
  const b = Math.round(255 * (v < 0.5 ? 0.3 + v : 1.1 - v));
  return [r, g, b];
}

function label(token) {
  return token === "▁" || token === " " ? "␣" : token.replaceAll("▁", "␣");
}

export class SpeechView {
  constructor(onError) {
    this.onError = onError;
    this.audio = null; // base64 of the chosen file
    this.result = null; // {translation, trace}
    this.step = 0;
    this.drawnWidth = 0; // the width of #audio-view drawn for: redrawn when the card's width changes
    new ResizeObserver(() => {
      if (this.result && $("audio-view").clientWidth !== this.drawnWidth) this.draw();
    }).observe($("audio-view"));
    $("audio-file").addEventListener("change", () => this.choose($("audio-file").files[0]));
    $("audio-step-back").addEventListener("click", () => this.go(this.step - 1));
    $("audio-step-next").addEventListener("click", () => this.go(this.step + 1));
  }

  setVisible(visible) {
    $("audio-card").hidden = !visible;
    $("results-card").hidden = visible;
    $("steps-card").hidden = visible;
    $("beam-card").hidden = visible;
    $("input-card").classList.toggle("speech", visible);
  }

  async choose(file) {
    if (!file) return;
    $("audio-player").src = URL.createObjectURL(file);
    $("audio-player").hidden = false;
    $("audio-name").textContent = `${file.name} (${(file.size / 1024).toFixed(0)} kB)`;
    this.audio = await base64Of(file);
  }

  /** Transcribes the chosen file with `model` and `beam` (null: the model's, `defaultBeam`): the
   *  beam search's transcript (/translate) and the greedy decoding's steps (/trace). */
  async transcribe(model, beam, defaultBeam) {
    if (!this.audio) throw new Error("choose a WAV file first");
    const [translated, traced] = await Promise.all([
      api("/translate", { audio: this.audio, model, beam, n_best: 1, attention: true }, `transcribe (${model})`),
      api("/trace", { audio: this.audio, model, top_k: TOP_K }, `trace (${model})`),
    ]);
    this.result = { candidate: translated.translations[0].candidates[0], trace: traced };
    const used = beam ?? defaultBeam;
    $("audio-transcript-how").textContent = used === 1 ? "(beam 1: greedy)" : `(beam search, beam ${used ?? "of the model"})`;
    $("audio-transcript").textContent = this.result.candidate.text || "(empty transcript)";
    $("audio-greedy").textContent = traced.text || "(empty transcript)";
    this.go(0);
  }

  go(step) {
    const steps = this.result ? this.result.trace.steps.length : 0;
    this.step = Math.max(0, Math.min(step, steps - 1));
    $("audio-step-back").disabled = this.step <= 0;
    $("audio-step-next").disabled = this.step >= steps - 1;
    $("audio-step-index").textContent = steps ? `step ${this.step + 1} / ${steps}` : "—";
    this.draw();
  }

  draw() {
    const { candidate, trace } = this.result;
    const frames = trace.features.length, bins = trace.features[0].length;
    const perState = trace.frames_per_state;
    this.drawnWidth = $("audio-view").clientWidth;
    const width = Math.max(160, this.drawnWidth - LABEL); // the card's width: the time axis as long as it can be
    const x = (frame) => LABEL + (frame / frames) * width;
    const rows = candidate.tokens.length;
    const duration = (frames * trace.hop_ms) / 1000;
    const ticks = timeTicks(duration, width);
    const canvas = el("canvas", { id: "audio-canvas", width: LABEL + width, height: rows * ROW + SPECTROGRAM + 4 + AXIS,
      "data-ticks": ticks.join(" "), "data-duration": duration.toFixed(3) });
    const ctx = canvas.getContext("2d");
    ctx.font = "11px sans-serif";
    // attention: row t, column j covers frames j*perState .. (j+1)*perState
    candidate.tokens.forEach((token, t) => {
      ctx.fillStyle = "#222";
      ctx.fillText(label(token), 2, t * ROW + 11);
      (candidate.attention[t] || []).forEach((w, j) => {
        ctx.fillStyle = `rgba(33, 102, 172, ${w})`;
        ctx.fillRect(x(j * perState), t * ROW, x((j + 1) * perState) - x(j * perState) + 0.5, ROW - 1);
      });
    });
    // the spectrogram below, low frequencies at the bottom
    const top = rows * ROW + 4;
    let low = Infinity, high = -Infinity;
    for (const frame of trace.features) for (const v of frame) { low = Math.min(low, v); high = Math.max(high, v); }
    const image = ctx.createImageData(frames, bins);
    trace.features.forEach((frame, f) => frame.forEach((v, b) => {
      const [r, g, bl] = magma((v - low) / (high - low || 1));
      const i = 4 * ((bins - 1 - b) * frames + f);
      image.data.set([r, g, bl, 255], i);
    }));
    const buffer = el("canvas", { width: frames, height: bins });
    buffer.getContext("2d").putImageData(image, 0, 0);
    ctx.drawImage(buffer, LABEL, top, width, SPECTROGRAM);
    // the step: its weights as a white curve over the spectrogram, its row marked
    const step = trace.steps[this.step];
    if (step && step.weights) {
      ctx.strokeStyle = "#fff";
      ctx.lineWidth = 2;
      ctx.beginPath();
      step.weights.forEach((w, j) => {
        const px = x((j + 0.5) * perState), py = top + SPECTROGRAM - w * SPECTROGRAM;
        if (j === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
      });
      ctx.stroke();
    }
    drawTimeAxis(ctx, ticks, duration, { left: LABEL, width, y: top + SPECTROGRAM });
    clear($("audio-view"));
    $("audio-view").append(canvas);
    const stepLine = $("audio-step-line");
    clear(stepLine);
    if (step) {
      const written = trace.steps.slice(0, this.step).map((s) => label(s.token)).join("");
      stepLine.append(`after “${written}” writes “${label(step.token)}” — `,
        step.top_k.map(([token, p]) => `${label(token)} ${p.toFixed(2)}`).join(", "));
    }
  }
}

/** Tick marks and labels ("0.5 s") under the spectrogram, the first left-aligned and the last
 *  right-aligned so that none is cut at the canvas's edges. */
function drawTimeAxis(ctx, ticks, duration, { left, width, y }) {
  ctx.fillStyle = "#555";
  ctx.strokeStyle = "#98a2b3";
  ctx.lineWidth = 1;
  ticks.forEach((t, k) => {
    const px = left + (t / duration) * width;
    ctx.beginPath();
    ctx.moveTo(px, y);
    ctx.lineTo(px, y + 4);
    ctx.stroke();
    ctx.textAlign = k === 0 ? "left" : px > left + width - 24 ? "right" : "center";
    ctx.fillText(`${t} s`, px, y + 15);
  });
  ctx.textAlign = "left";
}
