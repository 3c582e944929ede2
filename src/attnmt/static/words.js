// From subword pieces to words, by the rule of the figures (attnmt.viz.words, `attnmt plot --merge-words`):
// a word starts at each piece that begins with "▁"; special tokens ("</s>", "<s>", "<pad>") are words
// of their own; the first piece always starts a word. The attention a SOURCE word receives is the SUM
// of its pieces' columns; the attention a TARGET word pays is the MEAN of its pieces' rows, so rows
// that summed to 1 still sum to 1. tests/test_explorer.py checks this module against the Python one.

export const WORD_START = "\u2581";
const SPECIAL_TOKENS = new Set(["</s>", "<s>", "<pad>"]);

/** The words of a list of pieces, as half-open [start, end) index ranges covering every piece. */
export function wordSpans(tokens) {
  const spans = [];
  let start = 0;
  for (let i = 1; i < tokens.length; i++) {
    if (tokens[i].startsWith(WORD_START) || SPECIAL_TOKENS.has(tokens[i]) || SPECIAL_TOKENS.has(tokens[i - 1])) {
      spans.push([start, i]);
      start = i;
    }
  }
  if (tokens.length) spans.push([start, tokens.length]);
  return spans;
}

/** The text of one word: its pieces joined without the "▁" marks ("▁" alone stays "▁"). */
export function joinPieces(pieces) {
  const text = pieces.join("").replaceAll(WORD_START, "");
  return !text && pieces.length ? WORD_START : text;
}

const wordsOf = (tokens, spans) => spans.map(([a, b]) => joinPieces(tokens.slice(a, b)));
const sum = (values) => values.reduce((s, v) => s + v, 0);

/** A row over source pieces as a row over source words: each word the sum of its pieces. */
export function sumColumns(row, spans) {
  return spans.map(([a, b]) => sum(row.slice(a, b)));
}

/** Attention scores e_j over source pieces as scores over words: log Σ_j exp(e_j) of each word's
 *  pieces, so that softmax of the word scores is the word weights (the sums of the pieces' weights). */
export function logSumExpColumns(scores, spans) {
  return spans.map(([a, b]) => {
    const part = scores.slice(a, b);
    const top = Math.max(...part);
    return top + Math.log(sum(part.map((e) => Math.exp(e - top))));
  });
}

/** {source, target, matrix}: the matrix (rows = target pieces, columns = source pieces) of words. */
export function mergePieces(sourceTokens, targetTokens, matrix) {
  const sourceSpans = wordSpans(sourceTokens), targetSpans = wordSpans(targetTokens);
  const columns = matrix.map((row) => sumColumns(row, sourceSpans));
  const rows = targetSpans.map(([a, b]) => sourceSpans.map((_, j) => sum(columns.slice(a, b).map((r) => r[j])) / (b - a)));
  return { source: wordsOf(sourceTokens, sourceSpans), target: wordsOf(targetTokens, targetSpans), matrix: rows };
}

/** The heatmap cells [row, column] of the hard links: over words, one cell per word link [i, j]
 *  (source word i, output word j: the "alignment" of /translate); over pieces, each output piece's
 *  most attended source piece ("</s>" left out on both sides, as attnmt.seq2seq.links.output_links with
 *  words=False), since a word link spread over all the pieces of two words would mark pieces that
 *  do not align (a date's digits against every digit of a year). */
export function linkedCells(sourceTokens, targetTokens, matrix, links, words) {
  if (words) return links.map(([i, j]) => [j, i]);
  const columns = sourceTokens.flatMap((tok, j) => (tok === "</s>" ? [] : [j]));
  return targetTokens.flatMap((tok, row) => {
    if (tok === "</s>" || !columns.length) return [];
    const best = columns.reduce((a, b) => (matrix[row][b] > matrix[row][a] ? b : a));
    return [[row, best]];
  });
}
