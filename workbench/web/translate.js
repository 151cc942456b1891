// The book's page "Translate in your browser": the shipped small-de-en, exported by `workbench export --to onnx`,
// run by ONNX Runtime Web (WebAssembly, one thread), with the BPE tokenizer of @huggingface/tokenizers.
// Greedy search and beam search follow workbench.translation.decode (greedy_decode, beam_search for one sentence).
// Everything is loaded from this folder (_static/translate/): nothing is fetched from the network.
import * as ort from "./ort.wasm.bundle.min.mjs";
import { Tokenizer } from "./tokenizers.min.mjs";

const BASE = new URL(".", import.meta.url);
const $ = (id) => document.getElementById(id);
const t0 = performance.now();
// milliseconds since this script started: files fetched, encoder session made, both made, first translation done
export const timing = { fetched_ms: null, encoder_session_ms: null, model_loaded_ms: null, first_translation_ms: null,
                        last_translation_ms: null };

async function fetchBytes(name) {
  const r = await fetch(new URL(name, BASE));
  if (!r.ok) throw new Error(`${name}: HTTP ${r.status}`);
  return new Uint8Array(await r.arrayBuffer());
}

function makeTokenizer(text) {
  // the workbench encodes a typed "<eos>" as text, not as the control token (encode_special_tokens = True):
  // without its added_tokens list the JS tokenizer does the same; ids 0-3 stay in the BPE vocabulary
  const json = JSON.parse(text);
  json.added_tokens = [];
  return new Tokenizer(json, {});
}

async function load() {
  // only the .wasm is fetched: its JavaScript glue is inside ort.wasm.bundle.min.mjs
  ort.env.wasm.wasmPaths = { wasm: new URL("ort-wasm-simd-threaded.wasm", BASE).href };
  ort.env.wasm.numThreads = 1; // threads need a cross-origin-isolated page, which a static host does not give
  const [info, tok, enc, dec, weights] = await Promise.all([
    fetch(new URL("model/model.json", BASE)).then((r) => r.json()),
    fetch(new URL("model/tokenizer.json", BASE)).then((r) => r.json()),
    fetchBytes("model/encoder.onnx"), fetchBytes("model/decoder.onnx"), fetchBytes("model/weights.bin"),
  ]);
  const options = {
    executionProviders: ["wasm"], graphOptimizationLevel: "all",
    externalData: [{ path: "weights.bin", data: weights }],
    // fold the int8 weights' DequantizeLinear nodes at load, as workbench.bridges.onnx.SESSION_CONFIG does
    extra: { session: { disable_quant_qdq: "1" } },
  };
  timing.fetched_ms = performance.now() - t0;
  const encoder = await ort.InferenceSession.create(enc, options);
  timing.encoder_session_ms = performance.now() - t0;
  const decoder = await ort.InferenceSession.create(dec, options);
  const src = makeTokenizer(tok.src);
  const tgt = tok.tgt ? makeTokenizer(tok.tgt) : src;
  return { info, encoder, decoder, src, tgt };
}

// -- tensors -------------------------------------------------------------------------------------------------------
const i64 = (values, dims) => new ort.Tensor("int64", BigInt64Array.from(values.map((v) => BigInt(v))), dims);
const f32 = (data, dims) => new ort.Tensor("float32", data, dims);

function gateTensors(m, off) {
  const L = { enc_self: m.info.n_enc_layers, dec_self: m.info.n_dec_layers, cross: m.info.n_dec_layers };
  const H = m.info.n_heads;
  const g = {};
  for (const kind of Object.keys(L)) g[kind] = new Float32Array(L[kind] * H).fill(1);
  for (const [kind, layer, head] of off || []) g[kind][layer * H + head] = 0;
  return { enc: f32(g.enc_self, [L.enc_self, H]), self: f32(g.dec_self, [L.dec_self, H]), cross: f32(g.cross, [L.cross, H]) };
}

// rows `index` of a (L, B, ...) tensor along dim 1: the cache of the beams each new row extends
function gatherRows(t, index) {
  const [L, B, ...rest] = t.dims;
  const row = rest.reduce((a, b) => a * b, 1);
  const out = new Float32Array(L * index.length * row);
  for (let l = 0; l < L; l++)
    for (let j = 0; j < index.length; j++)
      out.set(t.data.subarray((l * B + index[j]) * row, (l * B + index[j] + 1) * row), (l * index.length + j) * row);
  return f32(out, [L, index.length, ...rest]);
}

class Decoder {
  constructor(m, srcIds, off) {
    this.m = m; this.srcIds = srcIds; this.gates = gateTensors(m, off);
    const i = m.info;
    this.limit = Math.max(1, Math.min(srcIds.length + i.max_extra, i.max_len - 1));
  }
  async start() {
    const r = await this.m.encoder.run({ src: i64(this.srcIds, [1, this.srcIds.length]), enc_gate: this.gates.enc });
    this.cross_k = r.cross_k; this.cross_v = r.cross_v;
    const i = this.m.info;
    this.past_k = f32(new Float32Array(0), [i.n_dec_layers, 1, i.n_heads, 0, i.d_head]);
    this.past_v = f32(new Float32Array(0), [i.n_dec_layers, 1, i.n_heads, 0, i.d_v]);
    this.t = 0;
  }
  // one step for every row: logits (B, V) as rows of a Float32Array, cross weights (L, B, H, S)
  async step(tokens) {
    const r = await this.m.decoder.run({
      tokens: i64(tokens, [tokens.length, 1]), offset: i64([this.t], [1]), past_k: this.past_k, past_v: this.past_v,
      cross_k: this.cross_k, cross_v: this.cross_v, self_gate: this.gates.self, cross_gate: this.gates.cross,
    });
    this.past_k = r.present_k; this.past_v = r.present_v; this.t += 1;
    return { logits: r.logits.data, V: r.logits.dims[1], weights: r.cross_weights };
  }
  reorder(index) {
    this.past_k = gatherRows(this.past_k, index); this.past_v = gatherRows(this.past_v, index);
    if (this.cross_k.dims[1] !== index.length || index.some((v, j) => v !== j)) {
      this.cross_k = gatherRows(this.cross_k, index); this.cross_v = gatherRows(this.cross_v, index);
    }
  }
}

function argmax(a, from, to) {  // the first maximum, as torch.argmax
  let best = from;
  for (let k = from + 1; k < to; k++) if (a[k] > a[best]) best = k;
  return best - from;
}

function logSoftmax(a, from, to) {
  let max = -Infinity;
  for (let k = from; k < to; k++) if (a[k] > max) max = a[k];
  let sum = 0;
  for (let k = from; k < to; k++) sum += Math.exp(a[k] - max);
  const lse = max + Math.log(sum);
  const out = new Float64Array(to - from);
  for (let k = from; k < to; k++) out[k - from] = a[k] - lse;
  return out;
}

function stepWeights(w, row) {  // (L, B, H, S) -> [L][H][S] of one row
  const [L, B, H, S] = w.dims;
  const out = [];
  for (let l = 0; l < L; l++) {
    const heads = [];
    for (let h = 0; h < H; h++) heads.push(Array.from(w.data.subarray(((l * B + row) * H + h) * S, ((l * B + row) * H + h + 1) * S)));
    out.push(heads);
  }
  return out;
}

async function greedy(m, srcIds, off) {
  const d = new Decoder(m, srcIds, off);
  await d.start();
  const i = m.info, ids = [], weights = [];
  let token = i.bos_id;
  for (let t = 0; t < d.limit; t++) {
    const r = await d.step([token]);
    weights.push(stepWeights(r.weights, 0));
    token = t + 1 >= d.limit ? i.eos_id : argmax(r.logits, 0, r.V);
    if (token === i.eos_id) break;
    ids.push(token);
  }
  return { ids, weights };
}

function topK(a, K) {  // indices of the K largest values, largest first (the lower index first on a tie)
  const best = [];
  for (let k = 0; k < a.length; k++) {
    if (best.length === K && a[k] <= a[best[K - 1]]) continue;
    let j = best.length < K ? best.length : K - 1;
    while (j > 0 && a[best[j - 1]] < a[k]) { if (j < K) best[j] = best[j - 1]; j--; }
    best[j] = k;
    if (best.length > K) best.length = K;
  }
  return best;
}

const lengthPenalty = (n, alpha) => Math.pow((5 + n) / 6, alpha);

async function beamSearch(m, srcIds, off, K, alpha) {
  const i = m.info, d = new Decoder(m, srcIds, off);
  await d.start();
  let seqs = [[]], scores = [0], lengths = [0], done = [false];
  for (let t = 0; t < d.limit; t++) {
    const last = seqs.map((s) => (s.length ? s[s.length - 1] : i.bos_id));
    const r = await d.step(t === 0 ? [i.bos_id] : last);
    const cand = [];
    const over = t + 1 >= d.limit;
    for (let b = 0; b < seqs.length; b++) {
      if (done[b]) { cand.push([scores[b], b, i.pad_id]); continue; }       // a finished beam extends with padding
      if (over) { cand.push([scores[b], b, i.eos_id]); continue; }          // out of budget: it must end
      const lp = logSoftmax(r.logits, b * r.V, (b + 1) * r.V);
      for (const k of topK(lp, K)) cand.push([scores[b] + lp[k], b, k]);  // this beam's K best extensions
    }
    cand.sort((x, y) => y[0] - x[0]);
    const keep = cand.slice(0, K);
    const origin = keep.map((c) => c[1]);
    d.reorder(origin);
    seqs = keep.map(([, b, k]) => (done[b] ? seqs[b] : [...seqs[b], k]));
    lengths = keep.map(([, b]) => lengths[b] + (done[b] ? 0 : 1));
    done = keep.map(([, b, k]) => done[b] || k === i.eos_id);
    scores = keep.map((c) => c[0]);
    // stop when the best finished hypothesis beats what any unfinished one could still reach
    let finished = -Infinity, bound = -Infinity;
    for (let b = 0; b < keep.length; b++) {
      if (done[b]) finished = Math.max(finished, scores[b] / lengthPenalty(lengths[b], alpha));
      else bound = Math.max(bound, scores[b] / lengthPenalty(d.limit, alpha));
    }
    if (finished >= bound) break;
  }
  let best = 0;
  for (let b = 1; b < seqs.length; b++)
    if (scores[b] / lengthPenalty(lengths[b], alpha) > scores[best] / lengthPenalty(lengths[best], alpha)) best = b;
  const ids = seqs[best].filter((k) => k !== i.eos_id && k !== i.pad_id);
  return { ids, weights: await forced(m, srcIds, off, ids) };
}

async function forced(m, srcIds, off, ids) {  // the cross-attention of every step of a given output
  const d = new Decoder(m, srcIds, off);
  await d.start();
  const weights = [];
  for (const token of [m.info.bos_id, ...ids]) weights.push(stepWeights((await d.step([token])).weights, 0));
  return weights;
}

function decodeText(tok, ids) {
  const content = ids.filter((k) => k > 3);
  if (!content.length) return "";
  const text = tok.decode(content, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
  return text.split(/\s+/).filter(Boolean).join(" ");
}

// invisible format characters, removed before tokenizing as workbench.translation.tokenizer.visible_text does
const INVISIBLE = /[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]/g;

// the workbench's encode_src without eos: the same ids for the same text
export function encodeSource(m, text) {
  return m.src.encode(text.replace(INVISIBLE, ""), { add_special_tokens: false });
}

export async function translate(m, text, { beam = 1, alpha = m.info.alpha, off = [] } = {}) {
  const start = performance.now();
  if (!text.replace(INVISIBLE, "").trim()) return { text: "", ids: [], srcIds: [], srcPieces: [], tgtPieces: [], weights: [], ms: 0 };
  const enc = encodeSource(m, text);
  const srcIds = [...enc.ids, m.info.eos_id];
  if (srcIds.length > m.info.max_len) throw new Error(`the sentence is ${srcIds.length} subword tokens long, more than the model's max_len=${m.info.max_len}: split it`);
  const r = beam === 1 ? await greedy(m, srcIds, off) : await beamSearch(m, srcIds, off, beam, alpha);
  const tgtPieces = [...r.ids.map((k) => m.tgt.id_to_token(k) ?? "<unk>"), "<eos>"];
  return { text: decodeText(m.tgt, r.ids), ids: r.ids, srcIds, srcPieces: [...enc.tokens, "<eos>"], tgtPieces,
           weights: r.weights, ms: performance.now() - start };
}

// -- the page --------------------------------------------------------------------------------------------------------
function headGrid(m) {
  const box = $("wb-heads");
  const kinds = [["enc_self", "encoder self-attention", m.info.n_enc_layers], ["dec_self", "decoder self-attention", m.info.n_dec_layers],
                 ["cross", "cross-attention", m.info.n_dec_layers]];
  for (const [kind, title, L] of kinds) {
    const table = document.createElement("table");
    table.className = "wb-head-table";
    table.innerHTML = `<caption>${title}</caption>`;
    for (let l = 0; l < L; l++) {
      const tr = document.createElement("tr");
      tr.innerHTML = `<th>layer ${l}</th>`;
      for (let h = 0; h < m.info.n_heads; h++) {
        const td = document.createElement("td");
        td.innerHTML = `<label title="${kind} layer ${l} head ${h}"><input type="checkbox" checked data-kind="${kind}" data-layer="${l}" data-head="${h}">${h}</label>`;
        tr.appendChild(td);
      }
      table.appendChild(tr);
    }
    box.appendChild(table);
  }
}

const headsOff = () => Array.from(document.querySelectorAll("#wb-heads input:not(:checked)"))
  .map((el) => [el.dataset.kind, Number(el.dataset.layer), Number(el.dataset.head)]);

let last = null;

function draw() {
  if (!last || !window.Plotly || !last.weights.length) return;
  const layer = Number($("wb-layer").value), head = Number($("wb-head").value), word = Number($("wb-word").value);
  const rows = last.tgtPieces.map((p, k) => `${k}: ${p}`);
  const cols = last.srcPieces.map((p, k) => `${k}: ${p}`);
  const z = last.weights.map((step) => step[layer][head]);
  const layout = (title, h) => ({ title: { text: title, font: { size: 13 } }, height: h, margin: { l: 110, r: 20, t: 40, b: 90 },
                                 yaxis: { autorange: "reversed", type: "category" }, xaxis: { type: "category", tickangle: -45 } });
  window.Plotly.react($("wb-heatmap"), [{ type: "heatmap", z, x: cols, y: rows, colorscale: "Blues", reversescale: true, zmin: 0, zmax: 1,
    hovertemplate: "output %{y}<br>source %{x}<br>weight %{z:.3f}<extra></extra>" }],
    layout(`cross-attention, decoder layer ${layer}, head ${head}: each output piece (row) over the source (columns)`, 120 + 24 * rows.length),
    { displaylogo: false, responsive: true });
  const heads = last.weights[word][layer];
  window.Plotly.react($("wb-word-heatmap"), [{ type: "heatmap", z: heads, x: cols, y: heads.map((_, h) => `head ${h}`),
    colorscale: "Blues", reversescale: true, zmin: 0, zmax: 1, hovertemplate: "%{y}<br>source %{x}<br>weight %{z:.3f}<extra></extra>" }],
    layout(`every head of layer ${layer} while writing "${last.tgtPieces[word]}"`, 120 + 24 * heads.length),
    { displaylogo: false, responsive: true });
}

function show(r) {
  last = r;
  $("wb-out").textContent = r.text;
  const pieces = (list) => list.map((p) => `<span class="wb-piece">${p.replace(/&/g, "&amp;").replace(/</g, "&lt;")}</span>`).join(" ");
  $("wb-src-pieces").innerHTML = pieces(r.srcPieces);
  $("wb-tgt-pieces").innerHTML = pieces(r.tgtPieces);
  const word = $("wb-word");
  word.innerHTML = r.tgtPieces.map((p, k) => `<option value="${k}">${k}: ${p.replace(/</g, "&lt;")}</option>`).join("");
  draw();
}

async function main() {
  const root = $("wb-translate");
  if (!root) return;
  if (location.protocol === "file:") {
    $("wb-file-note").hidden = false;
    $("wb-status").textContent = "not available from file:// (see above)";
    return;
  }
  let m;
  try {
    m = await load();
  } catch (e) {
    $("wb-status").textContent = `the model did not load: ${e.message || e}`;
    throw e;
  }
  timing.model_loaded_ms = performance.now() - t0;
  $("wb-warning").textContent = m.info.domain_warning || "";
  $("wb-alpha").value = m.info.alpha;
  $("wb-alpha-value").textContent = m.info.alpha;
  for (let l = 0; l < m.info.n_dec_layers; l++) $("wb-layer").add(new Option(String(l), String(l)));
  for (let h = 0; h < m.info.n_heads; h++) $("wb-head").add(new Option(String(h), String(h)));
  headGrid(m);
  const run = async () => {
    $("wb-translate-btn").disabled = true;
    $("wb-status").textContent = "translating…";
    try {
      const beam = Number($("wb-beam").value);
      const r = await translate(m, $("wb-src").value, { beam, alpha: Number($("wb-alpha").value), off: headsOff() });
      show(r);
      timing.last_translation_ms = r.ms;
      if (timing.first_translation_ms === null) timing.first_translation_ms = performance.now() - t0;
      $("wb-status").textContent = `${beam === 1 ? "greedy" : `beam ${beam}`}, ${r.ms.toFixed(0)} ms`;
      $("wb-timing").textContent = `model loaded ${(timing.model_loaded_ms / 1000).toFixed(2)} s after the page started; first translation at ${(timing.first_translation_ms / 1000).toFixed(2)} s`;
      root.dataset.translations = String(Number(root.dataset.translations || 0) + 1);
    } catch (e) {
      $("wb-status").textContent = `error: ${e.message || e}`;
    } finally {
      $("wb-translate-btn").disabled = false;
    }
  };
  $("wb-translate-btn").addEventListener("click", run);
  $("wb-alpha").addEventListener("input", () => { $("wb-alpha-value").textContent = $("wb-alpha").value; });
  for (const id of ["wb-layer", "wb-head", "wb-word"]) $(id).addEventListener("change", draw);
  $("wb-heads-reset").addEventListener("click", () => {
    document.querySelectorAll("#wb-heads input").forEach((el) => { el.checked = true; });
    run();
  });
  window.wbTranslator = { model: m, translate: (text, opts) => translate(m, text, opts),
                          encode: (text) => encodeSource(m, text), timing };
  await run();  // the example sentence, so the page opens with a translation and its attention
}

window.wbReady = main();
