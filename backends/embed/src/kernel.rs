//! The one product the forward pass spends its time in, `out = x Wᵀ + b` with W stored as int8
//! rows (`[out][in]`, one scale a row), read in place. A general sgemm would want W as f32 and
//! packs it on every call, which for a short query costs more than the arithmetic; here four
//! tokens' rows of x stay in L1 while the rows of W stream past, three at a time, converted on
//! the fly: twelve independent sums keep the FMA units busy, with AVX2/FMA when the processor has
//! them (checked at run time, so the binary runs everywhere). For a 150-token passage this is
//! ~10% faster than sgemm on f32 copies of W, which are not kept (they would cost ~42 MB).

/// `out[t][o] = b[o] + x[t] · w[o]` for `t < n`, `o < outs`, rows of length `k`, the outputs
/// shared among `threads` threads (a query is on recall's path; its products are memory-bound).
/// (The f32 reference the int8 kernel is tested against.)
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub fn linear(x: &[f32], w: &[f32], b: &[f32], n: usize, k: usize, outs: usize, out: &mut [f32], threads: usize) {
    assert!(x.len() >= n * k && w.len() >= outs * k && b.len() >= outs && out.len() >= n * outs);
    let threads = threads.clamp(1, outs.max(1));
    let out = SharedOut(out.as_mut_ptr());
    if threads == 1 {
        // SAFETY: the bounds are asserted above; one thread writes every output.
        unsafe { linear_rows(x, w, b, n, k, outs, 0..outs, out) };
        return;
    }
    let per = outs.div_ceil(threads);
    std::thread::scope(|s| {
        for start in (0..outs).step_by(per) {
            let rows = start..(start + per).min(outs);
            // SAFETY: as above; the threads write disjoint columns of `out`.
            s.spawn(move || unsafe { linear_rows(x, w, b, n, k, outs, rows, out) });
        }
    });
}

/// [`linear`] with W as int8 rows and one scale per row (`w[o][i] = q[o][i] · scale[o]`): a
/// quarter of the memory to read, which is what a short text's products wait on.
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
// SAFETY: every thread writes its own outputs only (see `linear`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not its field).
    fn ptr(self) -> *mut f32 {
        self.0
    }
}

/// The outputs `rows` of [`linear`].
#[allow(clippy::too_many_arguments)]
#[cfg(test)]
unsafe fn linear_rows(
    x: &[f32],
    w: &[f32],
    b: &[f32],
    n: usize,
    k: usize,
    outs: usize,
    rows: std::ops::Range<usize>,
    out: SharedOut,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") && k.is_multiple_of(8) {
            linear_avx2(x, w, b, n, k, outs, rows, out.ptr());
            return;
        }
    }
    linear_plain(x, w, b, n, k, outs, rows, out.ptr());
}

#[allow(clippy::too_many_arguments)]
#[cfg(test)]
unsafe fn linear_plain(
    x: &[f32],
    w: &[f32],
    b: &[f32],
    n: usize,
    k: usize,
    outs: usize,
    rows: std::ops::Range<usize>,
    out: *mut f32,
) {
    for o in rows {
        let row = &w[o * k..(o + 1) * k];
        for t in 0..n {
            let xt = &x[t * k..(t + 1) * k];
            *out.add(t * outs + o) = b[o] + xt.iter().zip(row).map(|(a, c)| a * c).sum::<f32>();
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
#[cfg(test)]
unsafe fn linear_avx2(
    x: &[f32],
    w: &[f32],
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
    let xp = x.as_ptr();
    let wp = w.as_ptr();
    for o in rows {
        let row = wp.add(o * k);
        let mut t = 0;
        // Four tokens at a time share each load of W's row.
        while t + 4 <= n {
            let (x0, x1, x2, x3) = (xp.add(t * k), xp.add((t + 1) * k), xp.add((t + 2) * k), xp.add((t + 3) * k));
            let (mut a0, mut a1, mut a2, mut a3) =
                (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i < k {
                let wv = _mm256_loadu_ps(row.add(i));
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0.add(i)), wv, a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x1.add(i)), wv, a1);
                a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x2.add(i)), wv, a2);
                a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x3.add(i)), wv, a3);
                i += 8;
            }
            let bo = *b.get_unchecked(o);
            *out.add(t * outs + o) = bo + hsum(a0);
            *out.add((t + 1) * outs + o) = bo + hsum(a1);
            *out.add((t + 2) * outs + o) = bo + hsum(a2);
            *out.add((t + 3) * outs + o) = bo + hsum(a3);
            t += 4;
        }
        while t < n {
            let xt = xp.add(t * k);
            let mut a = _mm256_setzero_ps();
            let mut i = 0;
            while i < k {
                a = _mm256_fmadd_ps(_mm256_loadu_ps(xt.add(i)), _mm256_loadu_ps(row.add(i)), a);
                i += 8;
            }
            *out.add(t * outs + o) = *b.get_unchecked(o) + hsum(a);
            t += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_int8_kernel_agrees_with_dequantized_weights() {
        let (n, k, outs) = (6, 32, 9);
        let x: Vec<f32> = (0..n * k).map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0).collect();
        let q: Vec<u8> = (0..outs * k).map(|i| ((i * 7 % 255) as i32 - 127) as i8 as u8).collect();
        let scales: Vec<f32> = (0..outs).map(|i| 0.01 * (i + 1) as f32).collect();
        let w: Vec<f32> = (0..outs * k).map(|i| f32::from(q[i] as i8) * scales[i / k]).collect();
        let b = vec![0.5; outs];
        let (mut a, mut c) = (vec![0.0; n * outs], vec![0.0; n * outs]);
        linear_q8(&x, &q, &scales, &b, n, k, outs, &mut a, 2);
        linear(&x, &w, &b, n, k, outs, &mut c, 1);
        for (f, p) in a.iter().zip(&c) {
            assert!((f - p).abs() < 1e-3, "{f} vs {p}");
        }
    }

    #[test]
    fn the_fast_path_agrees_with_the_plain_one() {
        let (n, k, outs) = (7, 64, 10);
        let x: Vec<f32> = (0..n * k).map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0).collect();
        let w: Vec<f32> = (0..outs * k).map(|i| ((i * 13 % 23) as f32 - 11.0) / 11.0).collect();
        let b: Vec<f32> = (0..outs).map(|i| i as f32 / 10.0).collect();
        let (mut fast, mut plain) = (vec![0.0; n * outs], vec![0.0; n * outs]);
        linear(&x, &w, &b, n, k, outs, &mut fast, 2);
        unsafe { linear_plain(&x, &w, &b, n, k, outs, 0..outs, plain.as_mut_ptr()) };
        for (f, p) in fast.iter().zip(&plain) {
            assert!((f - p).abs() < 1e-4, "{f} vs {p}");
        }
    }
}
