// The audio view, for speech models (task: speech): a WAV file uploaded, played, sent as base64 to
// /translate (transcript and attention, beam) and /trace (spectrogram and every greedy step); drawn as
// the attention of each output character above the spectrogram, on one time axis, with step-through.

import { api } from "./api.js";
import { $, clear, el } from "./dom.js";

const TOP_K = 5;
const ROW = 14; // pixels per output character of the attention
const SPECTROGRAM = 160; // pixels of height of the spectrogram
const LABEL = 28; // left margin for the character labels

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
    $("translate").textContent = visible ? "Transcribe" : "Translate";
  }

  async choose(file) {
    if (!file) return;
    $("audio-player").src = URL.createObjectURL(file);
    $("audio-player").hidden = false;
    $("audio-name").textContent = `${file.name} (${(file.size / 1024).toFixed(0)} kB)`;
    this.audio = await base64Of(file);
  }

  /** Transcribes the chosen file with `model` (beam, or the model's); errors go to onError. */
  async transcribe(model, beam) {
    if (!this.audio) throw new Error("choose a WAV file first");
    const [translated, traced] = await Promise.all([
      api("/translate", { audio: this.audio, model, beam, n_best: 1, attention: true }, `transcribe (${model})`),
      api("/trace", { audio: this.audio, model, top_k: TOP_K }, `trace (${model})`),
    ]);
    this.result = { candidate: translated.translations[0].candidates[0], trace: traced };
    $("audio-transcript").textContent = this.result.candidate.text || "(empty transcript)";
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
    const width = Math.max(300, Math.min(1100, frames * 2));
    const x = (frame) => LABEL + (frame / frames) * width;
    const rows = candidate.tokens.length;
    const canvas = el("canvas", { id: "audio-canvas", width: LABEL + width, height: rows * ROW + SPECTROGRAM + 24 });
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
    ctx.fillStyle = "#555";
    ctx.fillText(`${(frames * trace.hop_ms / 1000).toFixed(2)} s`, LABEL + width - 40, top + SPECTROGRAM + 14);
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
