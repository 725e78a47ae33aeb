//! The one product the forward pass spends its time in, `out = x Wᵀ + b` with W stored as int8
//! rows (`[out][in]`, one scale a row), read in place. A general sgemm would want W as f32 and
//! packs it on every call, which for a short query costs more than the arithmetic; here four
//! tokens' rows of x stay in L1 while the rows of W stream past, three at a time, converted on
//! the fly: twelve independent sums keep the FMA units busy, with AVX2/FMA when the processor has
//! them (checked at run time, so the binary runs everywhere). For a 150-token passage this is
//! ~10% faster than sgemm on f32 copies of W, which are not kept (they would cost ~42 MB).

/// `out[t][o] = b[o] + x[t] · w[o]` for `t < n`, `o < outs`, rows of length `k`, with W as int8
/// rows and one scale per row (`w[o][i] = q[o][i] · scale[o]`), the outputs shared among
/// `threads` threads.
#[allow(clippy::too_many_arguments)]
pub fn linear_q8(
    x: &[f32],
    q: &[u8],
    scales: &[f32],
    b: &[f32],
    n: usize,
    k: usize,
    outs: usize,
    out: &mut [f32],
    threads: usize,
) {
    assert!(
        x.len() >= n * k && q.len() >= outs * k && scales.len() >= outs && b.len() >= outs && out.len() >= n * outs
    );
    let threads = threads.clamp(1, outs.max(1));
    let out = SharedOut(out.as_mut_ptr());
    let per = outs.div_ceil(threads);
    let run = move |rows: std::ops::Range<usize>| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") && k.is_multiple_of(8) {
                // SAFETY: the features were just detected; bounds asserted above; disjoint outputs.
                unsafe { linear_q8_avx2(x, q, scales, b, n, k, outs, rows, out.ptr()) };
                return;
            }
        }
        for o in rows {
            let row = &q[o * k..(o + 1) * k];
            for t in 0..n {
                let xt = &x[t * k..(t + 1) * k];
                let dot: f32 = xt.iter().zip(row).map(|(a, c)| a * f32::from(*c as i8)).sum();
                // SAFETY: bounds asserted above; disjoint outputs.
                unsafe { *out.ptr().add(t * outs + o) = b[o] + dot * scales[o] };
            }
        }
    };
    if threads == 1 {
        run(0..outs);
        return;
    }
    std::thread::scope(|s| {
        for start in (0..outs).step_by(per) {
            s.spawn(move || run(start..(start + per).min(outs)));
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn linear_q8_avx2(
    x: &[f32],
    q: &[u8],
    scales: &[f32],
    b: &[f32],
    n: usize,
    k: usize,
    outs: usize,
    rows: std::ops::Range<usize>,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i)))
    }
    let xp = x.as_ptr();
    let qp = q.as_ptr();
    let zeros = vec![0f32; k];
    // Four tokens a block, the block's rows of x kept in L1 while every output row of W streams
    // past: each load of x feeds two outputs, each converted load of W four tokens.
    let mut t = 0;
    while t < n {
        // The last block is padded with rows of zeros (not stored).
        let at = |j: usize| if t + j < n { xp.add((t + j) * k) } else { zeros.as_ptr() };
        let x4 = [at(0), at(1), at(2), at(3)];
        let tokens = (n - t).min(4);
        let mut o = rows.start;
        // Three outputs by four tokens: twelve independent sums, enough to keep both FMA pipes
        // busy through an FMA's latency, with the rows of W in three registers.
        while o + 3 <= rows.end {
            let (r0, r1, r2) = (qp.add(o * k), qp.add((o + 1) * k), qp.add((o + 2) * k));
            let z = _mm256_setzero_ps();
            let mut acc = [[z; 3]; 4];
            let mut i = 0;
            while i < k {
                let w0 = load8(r0.add(i));
                let w1 = load8(r1.add(i));
                let w2 = load8(r2.add(i));
                for (a, xj) in acc.iter_mut().zip(x4) {
                    let v = _mm256_loadu_ps(xj.add(i));
                    a[0] = _mm256_fmadd_ps(v, w0, a[0]);
                    a[1] = _mm256_fmadd_ps(v, w1, a[1]);
                    a[2] = _mm256_fmadd_ps(v, w2, a[2]);
                }
                i += 8;
            }
            for (j, a) in acc.iter().enumerate().take(tokens) {
                let row = out.add((t + j) * outs);
                for (c, sum) in a.iter().enumerate() {
                    *row.add(o + c) = *b.get_unchecked(o + c) + hsum(*sum) * *scales.get_unchecked(o + c);
                }
            }
            o += 3;
        }
        while o < rows.end {
            // The last output rows, one at a time.
            let r0 = qp.add(o * k);
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i < k {
                let w0 = load8(r0.add(i));
                for (a, xj) in acc.iter_mut().zip(x4) {
                    *a = _mm256_fmadd_ps(_mm256_loadu_ps(xj.add(i)), w0, *a);
                }
                i += 8;
            }
            for (j, a) in acc.iter().enumerate().take(tokens) {
                *out.add((t + j) * outs + o) = *b.get_unchecked(o) + hsum(*a) * *scales.get_unchecked(o);
            }
            o += 1;
        }
        t += 4;
    }
}

/// `out`, written by several threads at distinct places.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: every thread writes its own outputs only (see `linear_q8`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not its field).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The int8 kernel against a plain loop over the dequantized weights: a padded last block of
    /// tokens, outputs in blocks of three and left over, and two threads splitting them.
    #[test]
    fn the_int8_kernel_agrees_with_dequantized_weights() {
        for (n, k, outs, threads) in [(6, 32, 9, 2), (7, 64, 10, 1), (1, 384, 5, 1), (13, 1536, 8, 2)] {
            let x: Vec<f32> = (0..n * k).map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0).collect();
            let q: Vec<u8> = (0..outs * k).map(|i| ((i * 7 % 255) as i32 - 127) as i8 as u8).collect();
            let scales: Vec<f32> = (0..outs).map(|i| 0.01 * (i + 1) as f32).collect();
            let b: Vec<f32> = (0..outs).map(|i| i as f32 / 10.0).collect();
            let mut got = vec![0.0; n * outs];
            linear_q8(&x, &q, &scales, &b, n, k, outs, &mut got, threads);
            for t in 0..n {
                for o in 0..outs {
                    let dot: f32 = (0..k).map(|i| x[t * k + i] * f32::from(q[o * k + i] as i8) * scales[o]).sum();
                    let want = b[o] + dot;
                    let g = got[t * outs + o];
                    assert!((g - want).abs() < 1e-3 * want.abs().max(1.0), "n {n} k {k}: [{t}][{o}] {g} vs {want}");
                }
            }
        }
    }
}
