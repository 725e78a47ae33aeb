//! Self-attention's two products for a passage, with AVX-512 where the processor has it.
//!
//! Per head they are small (a 164-token passage: 164 × 32 by 32 × 164, then 164 × 164 by
//! 164 × 32), so `matrixmultiply`'s sgemm spent nearly as long packing its operands as
//! multiplying them (6.8% and 8.6% of a passage's time). Here a head's keys are transposed once
//! into a zero-padded block, and both products are broadcast-and-FMA loops over 16 lanes on data
//! that stays in the L1 cache. Elsewhere sgemm runs as before.

use crate::activation::softmax;

/// Dimensions of one head.
pub(crate) const HEAD_DIM: usize = 32;
/// Lanes of a 512-bit register of f32.
const LANES: usize = 16;

/// One text's queries, keys and values (`[n][hidden]`, heads side by side).
pub(crate) struct Heads<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    /// Tokens.
    pub n: usize,
    /// Row width of all four (heads × [`HEAD_DIM`]).
    pub hidden: usize,
    /// `1/√HEAD_DIM`.
    pub scale: f32,
}

/// The row stride of the score and transposed-key blocks for `n` tokens.
pub(crate) fn padded(n: usize) -> usize {
    n.div_ceil(LANES) * LANES
}

/// Whether [`attend_avx512`] can run here.
pub(crate) fn avx512_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Every head's attention into `ctx` (`[n][hidden]`). `kt` holds `HEAD_DIM × padded(n)` floats,
/// `scores` `n × padded(n)`. Call only where [`avx512_here`] holds.
#[cfg(target_arch = "x86_64")]
pub(crate) fn attend_avx512(h: &Heads<'_>, ctx: &mut [f32], kt: &mut [f32], scores: &mut [f32]) {
    assert!(avx512_here(), "attend_avx512 without AVX-512F");
    let stride = padded(h.n);
    assert!(kt.len() >= HEAD_DIM * stride && scores.len() >= h.n * stride);
    assert!(h.q.len() >= h.n * h.hidden && h.k.len() >= h.n * h.hidden && h.v.len() >= h.n * h.hidden);
    assert!(ctx.len() >= h.n * h.hidden && h.hidden.is_multiple_of(HEAD_DIM));
    for off in (0..h.hidden).step_by(HEAD_DIM) {
        // SAFETY: AVX-512F is there (asserted above) and the lengths were checked.
        unsafe {
            transpose_keys(h, off, kt, stride);
            head_scores(h, off, kt, scores, stride);
        }
        for row in scores.chunks_exact_mut(stride).take(h.n) {
            softmax(&mut row[..h.n]);
        }
        // SAFETY: as above.
        unsafe { head_contexts(h, off, scores, stride, ctx) };
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn attend_avx512(_h: &Heads<'_>, _ctx: &mut [f32], _kt: &mut [f32], _scores: &mut [f32]) {
    unreachable!("attend_avx512 without AVX-512F")
}

/// `kt[d][j]` = the head's key `d` of token `j`; zero past the last token.
///
/// # Safety
/// `kt` holds `HEAD_DIM × stride` floats and `h.k` `n × hidden`.
#[cfg(target_arch = "x86_64")]
unsafe fn transpose_keys(h: &Heads<'_>, off: usize, kt: &mut [f32], stride: usize) {
    for d in 0..HEAD_DIM {
        let row = &mut kt[d * stride..(d + 1) * stride];
        for (j, slot) in row.iter_mut().enumerate().take(h.n) {
            *slot = *h.k.get_unchecked(j * h.hidden + off + d);
        }
        row[h.n..].iter_mut().for_each(|x| *x = 0.0);
    }
}

/// `scores[i][j] = scale · q_i · k_j` over the head, four query rows at a time.
///
/// # Safety
/// AVX-512F; the buffers as [`attend_avx512`] checks them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn head_scores(h: &Heads<'_>, off: usize, kt: &[f32], scores: &mut [f32], stride: usize) {
    use std::arch::x86_64::*;
    let scale = _mm512_set1_ps(h.scale);
    let kt = kt.as_ptr();
    let q = h.q.as_ptr();
    let out = scores.as_mut_ptr();
    let mut i = 0;
    while i + 4 <= h.n {
        let rows = [0, 1, 2, 3].map(|r| q.add((i + r) * h.hidden + off));
        for jb in (0..stride).step_by(LANES) {
            let mut acc = [_mm512_setzero_ps(); 4];
            for d in 0..HEAD_DIM {
                let keys = _mm512_loadu_ps(kt.add(d * stride + jb));
                for r in 0..4 {
                    acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(*rows[r].add(d)), keys, acc[r]);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(out.add((i + r) * stride + jb), _mm512_mul_ps(*a, scale));
            }
        }
        i += 4;
    }
    for i in i..h.n {
        let row = q.add(i * h.hidden + off);
        for jb in (0..stride).step_by(LANES) {
            let mut acc = _mm512_setzero_ps();
            for d in 0..HEAD_DIM {
                acc = _mm512_fmadd_ps(_mm512_set1_ps(*row.add(d)), _mm512_loadu_ps(kt.add(d * stride + jb)), acc);
            }
            _mm512_storeu_ps(out.add(i * stride + jb), _mm512_mul_ps(acc, scale));
        }
    }
}

/// `ctx_i = Σ_j p_ij v_j` over the head, four rows at a time (a head's 32 values are two
/// registers).
///
/// # Safety
/// AVX-512F; the buffers as [`attend_avx512`] checks them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn head_contexts(h: &Heads<'_>, off: usize, scores: &[f32], stride: usize, ctx: &mut [f32]) {
    use std::arch::x86_64::*;
    let v = h.v.as_ptr();
    let p = scores.as_ptr();
    let ctx = ctx.as_mut_ptr();
    let mut i = 0;
    while i + 4 <= h.n {
        let mut lo = [_mm512_setzero_ps(); 4];
        let mut hi = [_mm512_setzero_ps(); 4];
        for j in 0..h.n {
            let vj = v.add(j * h.hidden + off);
            let (v0, v1) = (_mm512_loadu_ps(vj), _mm512_loadu_ps(vj.add(LANES)));
            for r in 0..4 {
                let pr = _mm512_set1_ps(*p.add((i + r) * stride + j));
                lo[r] = _mm512_fmadd_ps(pr, v0, lo[r]);
                hi[r] = _mm512_fmadd_ps(pr, v1, hi[r]);
            }
        }
        for r in 0..4 {
            let out = ctx.add((i + r) * h.hidden + off);
            _mm512_storeu_ps(out, lo[r]);
            _mm512_storeu_ps(out.add(LANES), hi[r]);
        }
        i += 4;
    }
    for i in i..h.n {
        let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        for j in 0..h.n {
            let vj = v.add(j * h.hidden + off);
            let pr = _mm512_set1_ps(*p.add(i * stride + j));
            lo = _mm512_fmadd_ps(pr, _mm512_loadu_ps(vj), lo);
            hi = _mm512_fmadd_ps(pr, _mm512_loadu_ps(vj.add(LANES)), hi);
        }
        let out = ctx.add(i * h.hidden + off);
        _mm512_storeu_ps(out, lo);
        _mm512_storeu_ps(out.add(LANES), hi);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention by definition, in f64.
    fn reference(h: &Heads<'_>) -> Vec<f32> {
        let mut ctx = vec![0.0f32; h.n * h.hidden];
        for off in (0..h.hidden).step_by(HEAD_DIM) {
            for i in 0..h.n {
                let dot = |j: usize| -> f64 {
                    (0..HEAD_DIM)
                        .map(|d| f64::from(h.q[i * h.hidden + off + d]) * f64::from(h.k[j * h.hidden + off + d]))
                        .sum()
                };
                let scores: Vec<f64> = (0..h.n).map(|j| dot(j) * f64::from(h.scale)).collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for d in 0..HEAD_DIM {
                    let c: f64 = (0..h.n).map(|j| exps[j] / sum * f64::from(h.v[j * h.hidden + off + d])).sum();
                    ctx[i * h.hidden + off + d] = c as f32;
                }
            }
        }
        ctx
    }

    #[test]
    fn avx512_attention_matches_the_definition() {
        if !avx512_here() {
            eprintln!("no AVX-512F here: the sgemm path runs instead");
            return;
        }
        let mut seed = 0x9e37_79b9_u64;
        let mut next = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        };
        let hidden = 3 * HEAD_DIM;
        // Lengths around the blocks: 4 rows, 16 lanes, and a passage's usual 164 and 256.
        for n in [1, 3, 4, 15, 16, 17, 65, 77, 164, 256] {
            let [q, k, v]: [Vec<f32>; 3] = std::array::from_fn(|_| (0..n * hidden).map(|_| next()).collect());
            let h = Heads { q: &q, k: &k, v: &v, n, hidden, scale: 1.0 / (HEAD_DIM as f32).sqrt() };
            let (mut kt, mut scores) = (vec![f32::NAN; HEAD_DIM * padded(n)], vec![f32::NAN; n * padded(n)]);
            let mut ctx = vec![f32::NAN; n * hidden];
            attend_avx512(&h, &mut ctx, &mut kt, &mut scores);
            let want = reference(&h);
            let worst = ctx.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "{n} tokens: off by {worst}");
        }
    }
}
