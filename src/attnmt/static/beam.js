// The beam search tree (/beam) as an SVG: one column per step, a box per candidate, lines from each
// candidate to the hypothesis it extends. The layout (where each box goes) and the path of the best
// translation are pure functions of the nodes, apart from the drawing.

import { $, clear, el, fmt, svg } from "./dom.js";

/** Sizes of the drawing, in pixels: a column per step, a row per candidate of the step. */
export const BOX = { colW: 116, nodeW: 94, nodeH: 20, rowH: 25, pad: 14, head: 18 };
const GAP = 4; // pixels at least between a box's token and its score

const measure = document.createElement("canvas").getContext("2d");

/** The width in pixels of `text` drawn in `font` (a CSS font), as the SVG will draw it. */
function textWidth(text, font) {
  measure.font = font;
  return measure.measureText(text).width;
}

/** `label`, cut with "…" to what fits in `room` pixels in `font` (the whole of it when it fits). */
export function fitLabel(label, font, room) {
  const chars = [...label];
  if (textWidth(label, font) <= room) return label;
  for (let n = chars.length - 1; n > 0; n--) {
    const cut = `${chars.slice(0, n).join("")}…`;
    if (textWidth(cut, font) <= room) return cut;
  }
  return "…";
}

/** The ids of the nodes on the path of the best translation (its `tokens`), the root included: the
 *  path ending at a finished node if there is one, else at a kept one; empty if none spells them. */
export function bestPath(nodes, tokens) {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const pathOf = (n) => {
    const path = [];
    for (let cur = n; cur && cur.parent !== null && cur.parent !== undefined; cur = byId.get(cur.parent)) path.unshift(cur);
    return path;
  };
  const ends = nodes.filter((n) => n.step === tokens.length && n.status !== "pruned" && n.status !== "root");
  ends.sort((a, b) => (a.status === "finished" ? 0 : 1) - (b.status === "finished" ? 0 : 1));
  for (const n of ends) {
    const path = pathOf(n);
    if (path.length === tokens.length && path.every((p, i) => p.token === tokens[i])) {
      return new Set([0, ...path.map((p) => p.id)].concat(nodes.filter((m) => m.status === "root").map((m) => m.id)));
    }
  }
  return new Set();
}

/** Where each node goes: {columns (the nodes of each step, in drawing order), pos (id -> {x, y} of
 *  its box's top left corner), width, height}. A step's nodes follow the order of their parents, so
 *  that lines do not cross, and within a parent go from the most probable down; each column is
 *  centred on the tallest. */
export function layoutBeam(nodes, box = BOX) {
  const columns = [];
  for (const n of nodes) (columns[n.step] ||= []).push(n);
  const order = new Map();
  columns.forEach((list, s) => {
    if (!list) return;
    list.sort((a, b) => (s === 0 ? 0 : order.get(a.parent) - order.get(b.parent)) || b.log_prob - a.log_prob);
    list.forEach((n, i) => order.set(n.id, i));
  });
  const maxCount = Math.max(...columns.filter(Boolean).map((l) => l.length));
  const pos = new Map();
  columns.forEach((list, s) => {
    if (!list) return;
    const offset = ((maxCount - list.length) * box.rowH) / 2;
    list.forEach((n, i) => pos.set(n.id, { x: box.pad + s * box.colW, y: box.pad + box.head + offset + i * box.rowH }));
  });
  return {
    columns, pos,
    width: box.pad * 2 + columns.length * box.colW,
    height: box.pad * 2 + maxCount * box.rowH + box.head,
  };
}

/** Draws a /beam answer into #beam-view: a summary line, the tree, and the final hypotheses. */
export function renderBeam(result, beamSize) {
  const view = $("beam-view");
  clear(view);
  const nodes = result.nodes;
  const best = bestPath(nodes, result.translation && result.translation.candidates.length
    ? result.translation.candidates[0].tokens : []);
  const count = (s) => nodes.filter((n) => n.status === s).length;
  view.append(
    el("p", { class: "beam-summary" },
      `beam ${beamSize} · ${nodes.length - 1} candidates looked at: `,
      el("span", { class: "swatch kept" }), ` ${count("kept")} kept · `,
      el("span", { class: "swatch finished" }), ` ${count("finished")} finished (ended in </s>) · `,
      el("span", { class: "swatch pruned" }), ` ${count("pruned")} pruned (fell out of the beam) · `,
      el("span", { class: "swatch best" }), " path of the best translation"),
    el("p", { class: "muted small" }, "Each column is a step, each box a candidate with its token and cumulative log-probability; children of a box extend its hypothesis. Hover a box for details."),
    el("div", { class: "beam-scroll" }, drawTree(nodes, layoutBeam(nodes), best)));
  if (result.translation) view.append(finalsTable(result.translation.candidates));
}

export function renderBeamError(err) {
  const view = $("beam-view");
  clear(view);
  view.append(el("p", { class: "error-inline" }, err.message));
}

function drawTree(nodes, { columns, pos, width, height }, best) {
  const { colW, nodeW, nodeH, pad } = BOX;
  const root = svg("svg", { class: "beam-tree", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": "beam search tree" });
  // The fonts of style.css (svg.beam-tree .node .tok and .lp): a token gets the room its score leaves.
  const mono = getComputedStyle(document.documentElement).getPropertyValue("--mono").trim() || "monospace";
  const tokFont = `650 12px ${mono}`, lpFont = "10px system-ui, sans-serif";
  columns.forEach((list, s) => root.append(svg("text", { x: pad + s * colW + nodeW / 2, y: pad + 4, class: "step-label" },
    s === 0 ? "start" : `step ${s}`)));
  const edges = svg("g", { class: "edges" });
  const group = svg("g", { class: "nodes" });
  root.append(edges, group);
  for (const n of nodes) {
    const p = pos.get(n.id);
    const onPath = best.has(n.id) ? " best" : "";
    if (n.parent !== null && n.parent !== undefined && pos.has(n.parent)) {
      const q = pos.get(n.parent);
      const x1 = q.x + nodeW, y1 = q.y + nodeH / 2, x2 = p.x, y2 = p.y + nodeH / 2, mx = (x1 + x2) / 2;
      edges.append(svg("path", { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, class: `edge ${n.status}${onPath}` }));
    }
    const label = n.status === "root" ? "<s>" : n.token;
    const score = n.status === "root" ? null : fmt(n.log_prob, 2);
    const room = nodeW - 6 - 5 - (score === null ? 0 : textWidth(score, lpFont) + GAP);
    group.append(svg("g", { class: `node ${n.status}${onPath}`, "data-id": n.id, "data-status": n.status,
      "data-step": n.step, transform: `translate(${p.x},${p.y})` },
    svg("title", {}, `step ${n.step} · ${label} · log p = ${n.log_prob.toFixed(4)} · ${n.status}`
      + (n.met === null || n.met === undefined ? "" : ` · constraint tokens written: ${n.met}`)),
    svg("rect", { width: nodeW, height: nodeH, rx: 4 }),
    svg("text", { x: 6, y: 14, class: "tok" }, fitLabel(label, tokFont, room)),
    score === null ? null : svg("text", { x: nodeW - 5, y: 14, class: "lp" }, score)));
  }
  return root;
}

function finalsTable(candidates) {
  const table = el("table", { class: "finals" }, el("caption", {}, "final hypotheses (best first)"),
    el("tr", {}, el("th", {}, "#"), el("th", {}, "translation"), el("th", {}, "score")));
  candidates.forEach((c, i) => table.append(el("tr", {},
    el("td", { class: "num" }, i + 1), el("td", { class: "translation-cell" }, c.text), el("td", { class: "num" }, fmt(c.score, 3)))));
  return table;
}
