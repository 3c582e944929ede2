// Element and SVG helpers, number formats and colour scales.
//
// Every token coming from the server is put into the page as a text node (never innerHTML).

export const $ = (id) => document.getElementById(id);

/** Creates an element; attrs go to setAttribute (dataset via "data-*"), children are nodes or strings
 *  (strings become text nodes, so they are never parsed as HTML). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined) continue;
    node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

export const fmt = (x, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits).replace("-", "−") : String(x));
// "0" only for a weight that is exactly 0 (sparsemax, entmax, outside a window); ".00" for one below .005
export const shortWeight = (w) => (w === 0 ? "0" : w >= 0.995 ? "1" : w.toFixed(2).replace(/^0/, ""));

/** Sequential colour scale (white -> dark blue) for weights in [0, 1]. */
const BLUES = [[255, 255, 255], [222, 235, 247], [158, 202, 225], [66, 146, 198], [8, 81, 156], [8, 48, 107]];

export function blue(w) {
  const x = Math.min(1, Math.max(0, w)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(x));
  const f = x - i;
  const [a, b] = [BLUES[i], BLUES[i + 1]];
  return `rgb(${a.map((v, k) => Math.round(v + f * (b[k] - v))).join(",")})`;
}

/** Diverging colour scale (red - white - blue) for values in [-1, 1]. */
export function diverging(v) {
  const x = Math.min(1, Math.max(-1, v));
  const target = x < 0 ? [178, 24, 43] : [33, 102, 172];
  const f = Math.abs(x);
  return `rgb(${target.map((t) => Math.round(255 + f * (t - 255))).join(",")})`;
}

export const maxAbs = (rows) => rows.reduce((m, row) => row.reduce((n, v) => Math.max(n, Math.abs(v)), m), 0) || 1;
