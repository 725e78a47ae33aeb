//! The built-in embedder: all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0), a 6-layer BERT
//! with 384-dimensional output, compiled into the binary from `model/` (int8 weights with per-row
//! scales, 23 MB; see `model/README.md` for where they come from and how they were converted).
//!
//! The forward pass is written here (int8 products in [`crate::kernel`], self-attention of a long
//! text in [`crate::attention`] with AVX-512, else on `matrixmultiply`'s sgemm) rather than taken from a tensor framework: every weight
//! matrix stays int8 and is read in place from the binary, which keeps the loaded model small (a
//! framework's `BertModel` wants it all as f32, 90 MB); a one-text query runs without a framework's
//! per-operation overhead (it is on recall's path); and the build stays small. It matches the
//! reference vectors computed with PyTorch from the same files (a test checks them).

use safetensors::tensor::{Dtype, SafeTensors};
use tokenizers::Tokenizer;

use crate::activation::{gelu_in_place, softmax};
use crate::attention::{self, Heads};
use crate::kernel::{linear_q8, Product};
use crate::vector::normalize;
use crate::{EmbedError, Embedder};

static WEIGHTS: &[u8] = include_bytes!("../model/model-int8.safetensors");
static TOKENIZER: &[u8] = include_bytes!("../model/tokenizer.json");

const HIDDEN: usize = 384;
const HEADS: usize = 12;
const HEAD_DIM: usize = HIDDEN / HEADS;
const _: () = assert!(HEAD_DIM == attention::HEAD_DIM);
const LAYERS: usize = 6;
const FFN: usize = 1536;
const EPS: f32 = 1e-12;
const MAX_POSITIONS: usize = 512;
/// From this many tokens on, self-attention's products go through the AVX-512 loops or sgemm
/// (which packs its operands first) instead of plain loops.
const SGEMM_FROM: usize = 64;

/// The built-in model, loaded.
pub struct MiniLm {
    tokenizer: Tokenizer,
    words: Int8Rows,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    embeddings_norm: Norm,
    layers: Vec<Layer>,
    threads: usize,
    /// The ids of `[UNK]`, `[CLS]` and `[SEP]`.
    unknown: u32,
    frame: [u32; 2],
}

/// A table kept as int8 rows with one scale each, read in place.
struct Int8Rows {
    q: &'static [u8],
    scales: Vec<f32>,
    cols: usize,
}

impl Int8Rows {
    fn row_into(&self, r: usize, out: &mut [f32]) {
        let row = &self.q[r * self.cols..(r + 1) * self.cols];
        let s = self.scales[r];
        for (o, q) in out.iter_mut().zip(row) {
            *o += f32::from(*q as i8) * s;
        }
    }
}

/// `y = x Wᵀ + b`, W stored as PyTorch does: `[out][in]`, both as f32 (for sgemm on long texts)
/// and as the file's int8 rows (read in place, for short ones).
/// A dense layer, its weights as int8 rows read in place from the binary (never as f32: the
/// blocked int8 kernel is as fast as sgemm on f32 copies even for a long text, and the copies
/// would cost ~42 MB).
struct Linear {
    q: Int8Rows,
    b: Vec<f32>,
    out: usize,
    inp: usize,
}

struct Norm {
    gain: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    up: Linear,
    down: Linear,
    out_norm: Norm,
}

impl MiniLm {
    /// The id stored with its vectors.
    pub const MODEL_ID: &'static str = "builtin:all-MiniLM-L6-v2-int8";
    /// Its vectors' length.
    pub const DIM: usize = HIDDEN;

    /// Loads the model compiled into the binary (a few hundred milliseconds: do it off the
    /// request path). `threads` texts of a batch are embedded at once.
    pub fn load(threads: usize) -> Result<MiniLm, EmbedError> {
        let bad = |e: String| EmbedError::Invalid(format!("the built-in model does not load: {e}"));
        let tokenizer = Tokenizer::from_bytes(TOKENIZER).map_err(|e| bad(e.to_string()))?;
        let st = SafeTensors::deserialize(WEIGHTS).map_err(|e| bad(e.to_string()))?;
        let w = Weights(&st);
        let words = w.int8_rows("embeddings.word_embeddings.weight").map_err(bad)?;
        let positions = w.matrix("embeddings.position_embeddings.weight").map_err(bad)?;
        let token_type = w.matrix("embeddings.token_type_embeddings.weight").map_err(bad)?[..HIDDEN].to_vec();
        let embeddings_norm = w.norm("embeddings.LayerNorm").map_err(bad)?;
        let mut layers = Vec::with_capacity(LAYERS);
        for l in 0..LAYERS {
            let p = format!("encoder.layer.{l}");
            layers.push(Layer {
                query: w.linear(&format!("{p}.attention.self.query")).map_err(bad)?,
                key: w.linear(&format!("{p}.attention.self.key")).map_err(bad)?,
                value: w.linear(&format!("{p}.attention.self.value")).map_err(bad)?,
                attention_out: w.linear(&format!("{p}.attention.output.dense")).map_err(bad)?,
                attention_norm: w.norm(&format!("{p}.attention.output.LayerNorm")).map_err(bad)?,
                up: w.linear(&format!("{p}.intermediate.dense")).map_err(bad)?,
                down: w.linear(&format!("{p}.output.dense")).map_err(bad)?,
                out_norm: w.norm(&format!("{p}.output.LayerNorm")).map_err(bad)?,
            });
        }
        if positions.len() != MAX_POSITIONS * HIDDEN || layers[0].up.out != FFN {
            return Err(bad("unexpected shapes".into()));
        }
        let id = |token: &str| tokenizer.token_to_id(token).ok_or_else(|| bad(format!("no {token} token")));
        let (unknown, frame) = (id("[UNK]")?, [id("[CLS]")?, id("[SEP]")?]);
        Ok(MiniLm {
            tokenizer,
            words,
            positions,
            token_type,
            embeddings_norm,
            layers,
            threads: threads.max(1),
            unknown,
            frame,
        })
    }

    /// The token ids of a text, `[CLS] … [SEP]`, cut at 256 tokens.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let enc =
            self.tokenizer.encode(text, true).map_err(|e| EmbedError::Invalid(format!("cannot tokenize: {e}")))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Whether the model knows too few of a text's tokens to place it: more than half of them
    /// are `[UNK]` (most ideographs of Chinese, Japanese and Korean, emoji, a "word" of over 100
    /// characters). Such a text's vector sits with every other one the model cannot read, close
    /// to any question it cannot read either: a 5,000-letter string outranked the passage a
    /// Chinese question asked for, which BM25 alone finds first. Its vector is all zeros: no
    /// direction, similar to nothing (and a question given one is answered by its words).
    fn unreadable(&self, ids: &[u32]) -> bool {
        let tokens = ids.iter().filter(|id| !self.frame.contains(id)).count();
        let unknown = ids.iter().filter(|id| **id == self.unknown).count();
        unknown * 2 > tokens
    }

    /// The unit-length vector of one tokenized text, its products shared among `threads`.
    pub fn embed_ids(&self, ids: &[u32], threads: usize) -> Vec<f32> {
        let ids = &ids[..ids.len().min(MAX_POSITIONS)];
        let n = ids.len();
        if n == 0 || self.unreadable(ids) {
            return vec![0.0; HIDDEN];
        }
        let mut x = vec![0f32; n * HIDDEN];
        for (t, id) in ids.iter().enumerate() {
            let row = &mut x[t * HIDDEN..(t + 1) * HIDDEN];
            self.words.row_into(*id as usize, row);
            for ((o, p), tt) in row.iter_mut().zip(&self.positions[t * HIDDEN..]).zip(&self.token_type) {
                *o += p + tt;
            }
        }
        layer_norm(&mut x, &self.embeddings_norm);
        let mut scratch = Scratch::new(n);
        for layer in &self.layers {
            layer.forward(&mut x, n, &mut scratch, threads);
        }
        let mut pooled = vec![0f32; HIDDEN];
        for row in x.chunks_exact(HIDDEN) {
            pooled.iter_mut().zip(row).for_each(|(p, v)| *p += v);
        }
        pooled.iter_mut().for_each(|p| *p /= n as f32);
        normalize(&mut pooled);
        pooled
    }
}

impl Embedder for MiniLm {
    fn model_id(&self) -> &str {
        Self::MODEL_ID
    }

    fn dim(&self) -> usize {
        HIDDEN
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.token_ids(t)).collect::<Result<_, _>>()?;

        if ids.len() <= 1 || self.threads == 1 {
            // One text (a query) on this thread: its products are too small to be worth sharing.
            return Ok(ids.iter().map(|i| self.embed_ids(i, 1)).collect());
        }
        // Texts of a batch on their own threads (each one's products are too small to split),
        // each thread taking the next text left: texts differ in length, halves would not.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut out = vec![Vec::new(); ids.len()];
        let done: Vec<Vec<(usize, Vec<f32>)>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..self.threads.min(ids.len()))
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(text) = ids.get(i) else { break mine };
                            mine.push((i, self.embed_ids(text, 1)));
                        }
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().expect("an embedding thread panicked")).collect()
        });
        for (i, v) in done.into_iter().flatten() {
            out[i] = v;
        }
        Ok(out)
    }
}

/// Buffers one text's forward pass reuses from layer to layer.
struct Scratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    ctx: Vec<f32>,
    /// `n × padded(n)`: attention scores (sgemm uses `n × n` of it).
    scores: Vec<f32>,
    /// A head's keys transposed (`HEAD_DIM × padded(n)`) for the AVX-512 attention.
    kt: Vec<f32>,
    hidden: Vec<f32>,
    up: Vec<f32>,
}

impl Scratch {
    fn new(n: usize) -> Scratch {
        Scratch {
            q: vec![0.0; n * HIDDEN],
            k: vec![0.0; n * HIDDEN],
            v: vec![0.0; n * HIDDEN],
            ctx: vec![0.0; n * HIDDEN],
            scores: vec![0.0; n * attention::padded(n)],
            kt: vec![0.0; HEAD_DIM * attention::padded(n)],
            hidden: vec![0.0; n * HIDDEN],
            up: vec![0.0; n * FFN],
        }
    }
}

impl Layer {
    fn forward(&self, x: &mut [f32], n: usize, s: &mut Scratch, threads: usize) {
        self.query.apply(x, n, &mut s.q, threads);
        self.key.apply(x, n, &mut s.k, threads);
        self.value.apply(x, n, &mut s.v, threads);
        let scale = 1.0 / (HEAD_DIM as f32).sqrt();
        if n <= SGEMM_FROM {
            attention_direct(n, scale, s);
        } else if attention::avx512_here() {
            let heads = Heads { q: &s.q, k: &s.k, v: &s.v, n, hidden: HIDDEN, scale };
            attention::attend_avx512(&heads, &mut s.ctx, &mut s.kt, &mut s.scores);
        } else {
            self.attention_sgemm(n, scale, s);
        }
        self.attention_out.apply(&s.ctx, n, &mut s.hidden, threads);
        s.hidden.iter_mut().zip(x.iter()).for_each(|(h, r)| *h += r);
        layer_norm(&mut s.hidden, &self.attention_norm);
        self.up.apply(&s.hidden, n, &mut s.up, threads);
        gelu_in_place(&mut s.up);
        self.down.apply(&s.up, n, x, threads);
        x.iter_mut().zip(&s.hidden).for_each(|(o, h)| *o += h);
        layer_norm(x, &self.out_norm);
    }

    fn attention_sgemm(&self, n: usize, scale: f32, s: &mut Scratch) {
        for h in 0..HEADS {
            let off = h * HEAD_DIM;
            // scores = Q_h K_hᵀ / √d
            // SAFETY: the strides and lengths describe slices of the sizes given above.
            unsafe {
                matrixmultiply::sgemm(
                    n,
                    HEAD_DIM,
                    n,
                    scale,
                    s.q.as_ptr().add(off),
                    HIDDEN as isize,
                    1,
                    s.k.as_ptr().add(off),
                    1,
                    HIDDEN as isize,
                    0.0,
                    s.scores.as_mut_ptr(),
                    n as isize,
                    1,
                );
            }
            for row in s.scores.chunks_exact_mut(n) {
                softmax(row);
            }
            // ctx_h = P V_h
            // SAFETY: as above.
            unsafe {
                matrixmultiply::sgemm(
                    n,
                    n,
                    HEAD_DIM,
                    1.0,
                    s.scores.as_ptr(),
                    n as isize,
                    1,
                    s.v.as_ptr().add(off),
                    HIDDEN as isize,
                    1,
                    0.0,
                    s.ctx.as_mut_ptr().add(off),
                    HIDDEN as isize,
                    1,
                );
            }
        }
    }
}

/// Self-attention of a short text with plain loops: a few dozen tiny products, where calling
/// sgemm (and its packing) would cost more than the arithmetic.
fn attention_direct(n: usize, scale: f32, s: &mut Scratch) {
    for h in 0..HEADS {
        let off = h * HEAD_DIM;
        for i in 0..n {
            let qi = &s.q[i * HIDDEN + off..i * HIDDEN + off + HEAD_DIM];
            let row = &mut s.scores[i * n..(i + 1) * n];
            for (j, score) in row.iter_mut().enumerate() {
                let kj = &s.k[j * HIDDEN + off..j * HIDDEN + off + HEAD_DIM];
                *score = scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>();
            }
            softmax(row);
            let ctx = &mut s.ctx[i * HIDDEN + off..i * HIDDEN + off + HEAD_DIM];
            ctx.iter_mut().for_each(|c| *c = 0.0);
            for (j, p) in row.iter().enumerate() {
                let vj = &s.v[j * HIDDEN + off..j * HIDDEN + off + HEAD_DIM];
                ctx.iter_mut().zip(vj).for_each(|(c, v)| *c += p * v);
            }
        }
    }
}

impl Linear {
    /// `out[n][self.out] = x[n][self.inp] Wᵀ + b`, on `threads` threads.
    fn apply(&self, x: &[f32], n: usize, out: &mut [f32], threads: usize) {
        let q = &self.q;
        let product = Product { x, q: q.q, scales: &q.scales, b: &self.b, n, k: self.inp, outs: self.out };
        linear_q8(&product, out, threads);
    }
}

fn layer_norm(x: &mut [f32], norm: &Norm) {
    for row in x.chunks_exact_mut(HIDDEN) {
        let mean = sum_lanes(row, |v| v) / HIDDEN as f32;
        let var = sum_lanes(row, |v| (v - mean) * (v - mean)) / HIDDEN as f32;
        let inv = 1.0 / (var + EPS).sqrt();
        for ((v, g), b) in row.iter_mut().zip(&norm.gain).zip(&norm.bias) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

/// `Σ f(v)` over a row of `HIDDEN` (a multiple of 8), in eight lanes the compiler vectorizes: a
/// plain `sum` of floats must add them one at a time, in order.
fn sum_lanes(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; 8];
    for chunk in row.chunks_exact(8) {
        for (l, v) in lanes.iter_mut().zip(chunk) {
            *l += f(*v);
        }
    }
    lanes.iter().sum()
}

/// Reading the weights file.
struct Weights<'a>(&'a SafeTensors<'static>);

impl Weights<'_> {
    fn raw(&self, name: &str) -> Result<(Dtype, Vec<usize>, &'static [u8]), String> {
        let t = self.0.tensor(name).map_err(|e| format!("{name}: {e}"))?;
        Ok((t.dtype(), t.shape().to_vec(), t.data()))
    }

    /// A 1-D tensor (f16 or f32) as f32.
    fn vector(&self, name: &str) -> Result<Vec<f32>, String> {
        let (dtype, _, data) = self.raw(name)?;
        match dtype {
            Dtype::F16 => Ok(data.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect()),
            Dtype::F32 => Ok(data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()),
            other => Err(format!("{name}: unexpected dtype {other:?}")),
        }
    }

    fn int8_rows(&self, name: &str) -> Result<Int8Rows, String> {
        let (dtype, shape, q) = self.raw(name)?;
        if dtype != Dtype::I8 || shape.len() != 2 {
            return Err(format!("{name}: expected a 2-D int8 tensor, found {dtype:?} {shape:?}"));
        }
        let scales = self.vector(&format!("{name}.scale"))?;
        if scales.len() != shape[0] {
            return Err(format!("{name}: {} scales for {} rows", scales.len(), shape[0]));
        }
        Ok(Int8Rows { q, scales, cols: shape[1] })
    }

    /// A 2-D int8 tensor, dequantized to f32.
    fn matrix(&self, name: &str) -> Result<Vec<f32>, String> {
        let rows = self.int8_rows(name)?;
        let n = rows.scales.len();
        let mut out = vec![0f32; n * rows.cols];
        for (r, chunk) in out.chunks_exact_mut(rows.cols).enumerate() {
            rows.row_into(r, chunk);
        }
        Ok(out)
    }

    fn linear(&self, prefix: &str) -> Result<Linear, String> {
        let (_, shape, _) = self.raw(&format!("{prefix}.weight"))?;
        let q = self.int8_rows(&format!("{prefix}.weight"))?;
        let b = self.vector(&format!("{prefix}.bias"))?;
        if b.len() != shape[0] {
            return Err(format!("{prefix}: bias of {} for {} outputs", b.len(), shape[0]));
        }
        Ok(Linear { q, b, out: shape[0], inp: shape[1] })
    }

    fn norm(&self, prefix: &str) -> Result<Norm, String> {
        Ok(Norm { gain: self.vector(&format!("{prefix}.weight"))?, bias: self.vector(&format!("{prefix}.bias"))? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_vectors() {
        let reference: serde_json::Value =
            serde_json::from_slice(include_bytes!("../model/reference-vectors.json")).unwrap();
        let model = MiniLm::load(2).unwrap();
        for case in reference["texts"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let want_ids: Vec<u32> =
                case["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            assert_eq!(model.token_ids(text).unwrap(), want_ids, "{text}");
            let want: Vec<f32> =
                case["vector"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            let got = model.embed(&[text]).unwrap().remove(0);
            let cos: f32 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
            // The reference was computed from the f16 weights; these are the int8 ones.
            assert!(cos > 0.998, "{text}: cosine {cos}");
        }
        // What the model cannot read has no direction, not one beside everything else unread.
        let zero = |v: &[f32]| v.iter().all(|x| *x == 0.0);
        for text in ["🦀🚀🔥😀 🦀🚀", &"qwertyuiop".repeat(500), "鳄鱼火箭密码是什么？"] {
            assert!(zero(&model.embed(&[text]).unwrap()[0]), "{text}");
            let batch = model.embed(&["ping", text]).unwrap();
            assert!(!zero(&batch[0]) && zero(&batch[1]), "{text}");
        }
        for text in ["We deploy with cargo-dist 🚀", "what is the crocodile rocket password 鳄鱼火箭"] {
            assert!(!zero(&model.embed(&[text]).unwrap()[0]), "{text}");
        }
        // A batch gives the same vectors as one at a time.
        let texts: Vec<&str> =
            reference["texts"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap()).collect();
        let batch = model.embed(&texts).unwrap();
        for (t, v) in texts.iter().zip(&batch) {
            assert_eq!(&model.embed(&[t]).unwrap()[0], v);
        }
    }
}
