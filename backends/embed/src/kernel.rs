//! The one product the forward pass spends its time in, `out = x Wᵀ + b` with W stored as int8
//! rows (`[out][in]`, one scale a row), read in place. A general sgemm would want W as f32 and
//! packs it on every call, which for a short query costs more than the arithmetic. Here, with
//! AVX2 (checked at run time, so the binary runs everywhere), x is rounded to int16 rows once a
//! call and the products are integer: five tokens' rows of x stay in L1 while the rows of W
//! stream past two at a time, widened to int16 on the fly, `vpmaddwd` doing sixteen
//! multiply-adds an instruction. Against the float kernel it replaced (W converted to f32 on the
//! fly, FMAs) this embeds passages 20–40% faster; against sgemm on f32 copies of W (~42 MB, not
//! kept) more still. Where the processor has AVX-512 VNNI, [`crate::kernel_vnni`] does the same
//! products a third faster again (see [`Kernel`]).

/// The integer kernels, fastest first. Each gives the same sums (the same int16 × int8 products
/// added in int32); they differ in how many products an instruction does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 VNNI: `vpdpwssd`, 32 multiply-adds an instruction ([`crate::kernel_vnni`]).
    Vnni,
    /// AVX2: `vpmaddwd` then `vpaddd`, 16 multiply-adds in two instructions.
    Avx2,
    /// Plain loops over the dequantized weights, for any other processor.
    Portable,
}

impl Kernel {
    /// The fastest kernel this processor runs (detected once).
    pub fn best() -> Kernel {
        static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Kernel::available()[0])
    }

    /// Every kernel this processor runs, fastest first (the portable one always).
    pub fn available() -> Vec<Kernel> {
        [Kernel::Vnni, Kernel::Avx2, Kernel::Portable].into_iter().filter(|k| k.runs_here()).collect()
    }

    /// Whether this processor runs it (VNNI implies AVX2 here: the VNNI kernel hands rows that
    /// are not a multiple of 32 down to the AVX2 one).
    pub fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::is_x86_feature_detected!("avx2");
            match self {
                Kernel::Vnni => avx2 && crate::kernel_vnni::available(),
                Kernel::Avx2 => avx2,
                Kernel::Portable => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Kernel::Portable
        }
    }

    /// Its name in benchmarks and logs.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Vnni => "avx512-vnni",
            Kernel::Avx2 => "avx2",
            Kernel::Portable => "portable",
        }
    }

    /// The kernel that runs rows of length `k`: the integer kernels read 32 (VNNI) or 16 (AVX2)
    /// elements at a time and hand other lengths down.
    fn for_rows(self, k: usize) -> Kernel {
        match self {
            Kernel::Vnni if k.is_multiple_of(32) => Kernel::Vnni,
            Kernel::Vnni | Kernel::Avx2 if k.is_multiple_of(16) => Kernel::Avx2,
            _ => Kernel::Portable,
        }
    }
}

/// The operands of one product `out[t][o] = b[o] + x[t] · w[o]`: x as `n` rows of `k` values,
/// W as `outs` int8 rows of `k` with one scale each (`w[o][i] = q[o][i] · scales[o]`), read in
/// place, and the bias.
#[derive(Debug, Clone, Copy)]
pub struct Product<'a> {
    /// x, `n` rows of `k`.
    pub x: &'a [f32],
    /// W's int8 values (stored as bytes), `outs` rows of `k`.
    pub q: &'a [u8],
    /// W's row scales.
    pub scales: &'a [f32],
    /// The bias, one an output.
    pub b: &'a [f32],
    /// Rows of x (tokens).
    pub n: usize,
    /// The rows' length.
    pub k: usize,
    /// Rows of W (outputs).
    pub outs: usize,
}

/// The product (`out` is `n` rows of `outs`), the outputs shared among `threads` threads, on the
/// fastest kernel this processor runs.
pub fn linear_q8(p: &Product<'_>, out: &mut [f32], threads: usize) {
    linear_q8_on(Kernel::best(), p, out, threads)
}

/// [`linear_q8`] on a given kernel, which must run here ([`Kernel::runs_here`]; benchmarks and
/// tests compare them).
pub fn linear_q8_on(kernel: Kernel, p: &Product<'_>, out: &mut [f32], threads: usize) {
    let Product { x, q, scales, b, n, k, outs } = *p;
    // Products checked, not wrapped: a wrapped one passed the check and the kernels read past the
    // slices (a safe function must not, whatever the shapes say).
    let holds = |len: usize, rows: usize, cols: usize| rows.checked_mul(cols).is_some_and(|need| len >= need);
    assert!(
        holds(x.len(), n, k)
            && holds(q.len(), outs, k)
            && scales.len() >= outs
            && b.len() >= outs
            && holds(out.len(), n, outs)
    );
    assert!(kernel.runs_here(), "the {} kernel does not run here", kernel.name());
    let kernel = kernel.for_rows(k);
    let threads = threads.clamp(1, outs.max(1));
    let out = SharedOut(out.as_mut_ptr());
    let per = outs.div_ceil(threads);
    #[cfg(target_arch = "x86_64")]
    let wide = (kernel != Kernel::Portable)
        // SAFETY: both integer kernels run only where AVX2 was detected, on multiples of 16.
        .then(|| unsafe { Int16Rows::quantize(x, n, k) });
    let run = |rows: std::ops::Range<usize>| {
        #[cfg(target_arch = "x86_64")]
        if let Some(wide) = &wide {
            let integer = IntegerProduct { x: wide, p: *p, out: out.ptr() };
            if kernel == Kernel::Vnni {
                // SAFETY: the features were detected (`runs_here`), `k` is a multiple of 32;
                // bounds asserted above; disjoint outputs.
                unsafe { crate::kernel_vnni::linear_q8_vnni(&integer, rows) };
            } else {
                // SAFETY: AVX2 was detected (`runs_here`), `k` is a multiple of 16; bounds
                // asserted above; disjoint outputs.
                unsafe { linear_q8_avx2(&integer, rows) };
            }
            return;
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
            let run = &run;
            s.spawn(move || run(start..(start + per).min(outs)));
        }
    });
}

/// A product as the integer kernels take it: x rounded to int16 rows, the [`Product`] for W,
/// the bias and the shapes (its `x` is not read again), and where the outputs go.
#[cfg(target_arch = "x86_64")]
pub(crate) struct IntegerProduct<'a> {
    /// x as int16 rows.
    pub(crate) x: &'a Int16Rows,
    pub(crate) p: Product<'a>,
    /// `out[t][o]` is at `out.add(t * outs + o)`; each thread writes its own outputs only.
    pub(crate) out: *mut f32,
}

#[cfg(target_arch = "x86_64")]
impl IntegerProduct<'_> {
    /// Writes the outputs `o..o + O` of tokens `t..t + T`: the bias plus the integer sum times
    /// both rows' scales.
    ///
    /// # Safety
    /// The tokens and outputs are within the product's shapes.
    #[inline]
    pub(crate) unsafe fn store<const T: usize, const O: usize>(&self, t: usize, o: usize, sums: &[[i32; O]; T]) {
        for (j, row) in sums.iter().enumerate() {
            let xs = *self.x.scales.get_unchecked(t + j);
            for (c, sum) in row.iter().enumerate() {
                let at = self.out.add((t + j) * self.p.outs + o + c);
                *at = *self.p.b.get_unchecked(o + c) + *sum as f32 * (xs * *self.p.scales.get_unchecked(o + c));
            }
        }
    }
}

/// Rows of x as int16, one scale a row (`x[t][i] ≈ q[t][i] · scale[t]`): 15 bits, far finer than
/// the int8 weights they meet, so the products lose nothing measurable.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Int16Rows {
    q: Vec<i16>,
    pub(crate) scales: Vec<f32>,
}

#[cfg(target_arch = "x86_64")]
impl Int16Rows {
    /// The first `n` rows of length `k` of `x`.
    ///
    /// # Safety
    /// The processor must have AVX2, and `k` must be a multiple of 16.
    unsafe fn quantize(x: &[f32], n: usize, k: usize) -> Int16Rows {
        let mut q = vec![0i16; n * k];
        let mut scales = vec![0f32; n];
        for ((row, qrow), scale) in x.chunks_exact(k).take(n).zip(q.chunks_exact_mut(k)).zip(&mut scales) {
            // SAFETY: the caller guarantees AVX2 and the length.
            *scale = unsafe { quantize_row_avx2(row, qrow) };
        }
        Int16Rows { q, scales }
    }

    /// The values, row after row.
    pub(crate) fn q(&self) -> &[i16] {
        &self.q
    }
}

/// Writes `row` as int16 (rounded to nearest) scaled so its largest magnitude is `i16::MAX`, and
/// returns the scale (0 for a row of zeros or one that is not finite, written as zeros).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_avx2(row: &[f32], out: &mut [i16]) -> f32 {
    use std::arch::x86_64::*;
    debug_assert!(row.len().is_multiple_of(16) && out.len() == row.len());
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_setzero_ps();
    for c in row.chunks_exact(8) {
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(c.as_ptr())));
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m);
    let max = lanes.iter().fold(0f32, |a, b| a.max(*b));
    if max == 0.0 || !max.is_finite() {
        out.iter_mut().for_each(|o| *o = 0);
        return 0.0;
    }
    let scale = max / f32::from(i16::MAX);
    let inv = _mm256_set1_ps(1.0 / scale);
    for (c, o) in row.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
        let a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), inv));
        let b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(c.as_ptr().add(8)), inv));
        // packs works within 128-bit lanes: a0-3 b0-3 a4-7 b4-7, put back in order.
        let p = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0b11_01_10_00);
        _mm256_storeu_si256(o.as_mut_ptr() as *mut __m256i, p);
    }
    scale
}

/// Tokens a block of the integer kernel: their rows of x stay in L1 while W's rows stream past.
const TOKENS: usize = 5;
/// W's rows a block: each widened load of W feeds `TOKENS` sums, each load of x `OUTPUTS`.
const OUTPUTS: usize = 2;

/// The integer kernel: x as int16 rows, W's int8 rows widened to int16 as they stream past, and
/// `vpmaddwd` doing sixteen multiply-adds an instruction where an FMA does eight (and W needs no
/// conversion to float). The int32 sums cannot overflow: each lane adds `k / 8` products of at
/// most 127 · 32767, under 2³¹ for any `k` up to 4,128 (MiniLM's longest row is 1,536).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn linear_q8_avx2(ip: &IntegerProduct<'_>, rows: std::ops::Range<usize>) {
    let (n, k) = (ip.p.n, ip.p.k);
    assert!(k.is_multiple_of(16) && ip.x.q().len() >= n * k);
    let mut t = 0;
    while n - t >= TOKENS {
        tokens_block::<TOKENS>(ip, t, rows.clone());
        t += TOKENS;
    }
    // The last tokens in a block of their own size (a query of 11 tokens padded to 15 would do
    // a third more work than it needs).
    match n - t {
        0 => {}
        1 => tokens_block::<1>(ip, t, rows),
        2 => tokens_block::<2>(ip, t, rows),
        3 => tokens_block::<3>(ip, t, rows),
        _ => tokens_block::<4>(ip, t, rows),
    }
}

/// Tokens `t..t + T` against the output rows `rows`, `OUTPUTS` rows of W at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tokens_block<const T: usize>(ip: &IntegerProduct<'_>, t: usize, rows: std::ops::Range<usize>) {
    let k = ip.p.k;
    let qp = ip.p.q.as_ptr();
    let xt: [*const i16; T] = std::array::from_fn(|j| ip.x.q().as_ptr().add((t + j) * k));
    let mut o = rows.start;
    while o + OUTPUTS <= rows.end {
        let w: [*const u8; OUTPUTS] = std::array::from_fn(|c| qp.add((o + c) * k));
        ip.store(t, o, &tile::<T, OUTPUTS>(xt, w, k));
        o += OUTPUTS;
    }
    // The last output rows, one at a time.
    while o < rows.end {
        ip.store(t, o, &tile::<T, 1>(xt, [qp.add(o * k)], k));
        o += 1;
    }
}

/// The sums `x[j] · w[c]` for a block of `T` rows of x and `O` rows of W: `T · O`
/// independent accumulators (with the widened rows of W and a product, within the 16 registers:
/// more spills them to the stack, which costs more than the loads a bigger block saves).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile<const T: usize, const O: usize>(x: [*const i16; T], w: [*const u8; O], k: usize) -> [[i32; O]; T] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_si256(); O]; T];
    let mut i = 0;
    while i < k {
        let wv: [__m256i; O] =
            std::array::from_fn(|c| _mm256_cvtepi8_epi16(_mm_loadu_si128(w[c].add(i) as *const __m128i)));
        for (a, xj) in acc.iter_mut().zip(x) {
            let v = _mm256_loadu_si256(xj.add(i) as *const __m256i);
            for (s, wc) in a.iter_mut().zip(wv) {
                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(v, wc));
            }
        }
        i += 16;
    }
    // Reduced four accumulators at a time (three horizontal adds give the four sums), which
    // costs a quarter of reducing each alone: at k = 384 that was a tenth of the kernel's work.
    // Plain loops, not closures: a closure around intrinsics does not inherit AVX2 and was
    // called, not inlined (a tenth of the time before this was written so).
    let flat = acc.as_flattened();
    // Room for the widest block (T at most TOKENS, O at most OUTPUTS), in whole chunks of four.
    let mut reduced = [0i32; TOKENS * OUTPUTS + 4];
    debug_assert!(T <= TOKENS && O <= OUTPUTS);
    for (c, chunk) in flat.chunks(4).enumerate() {
        // The last chunk padded with zeros.
        let mut v = [_mm256_setzero_si256(); 4];
        v[..chunk.len()].copy_from_slice(chunk);
        let ab = _mm256_hadd_epi32(v[0], v[1]);
        let cd = _mm256_hadd_epi32(v[2], v[3]);
        let abcd = _mm256_hadd_epi32(ab, cd);
        let four = _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
        _mm_storeu_si128(reduced.as_mut_ptr().add(4 * c) as *mut __m128i, four);
    }
    let mut sums = [[0i32; O]; T];
    for (j, row) in sums.iter_mut().enumerate() {
        row.copy_from_slice(&reduced[j * O..(j + 1) * O]);
    }
    sums
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

    /// Shapes whose products wrap are refused before any kernel reads (they passed the check).
    #[test]
    fn a_shape_whose_size_wraps_is_refused() {
        let p = Product { x: &[], q: &[], scales: &[1.0; 2], b: &[0.0; 2], n: 2, k: 1 << 63, outs: 2 };
        let mut out = [0.0f32; 4];
        let refused =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| linear_q8_on(Kernel::Portable, &p, &mut out, 1)));
        assert!(refused.is_err());
    }

    /// Every kernel this processor runs against a plain loop over the dequantized weights: whole
    /// blocks of tokens and last blocks of every smaller size, outputs in whole blocks and left
    /// over, two threads splitting them, and row lengths that send VNNI (k not a multiple of 32)
    /// and AVX2 (not of 16) to the next kernel down.
    #[test]
    fn the_int8_kernels_agree_with_dequantized_weights() {
        let kernels = Kernel::available();
        assert_eq!(kernels.last(), Some(&Kernel::Portable));
        eprintln!("kernels here: {:?}", kernels.iter().map(|k| k.name()).collect::<Vec<_>>());
        let shapes = (1..=13).map(|n| (n, 384, 11, 1)).chain([
            (6, 32, 9, 2),
            (7, 64, 10, 1),
            (1, 384, 5, 1),
            (13, 1536, 8, 2),
            (9, 48, 6, 1),
            (3, 24, 5, 2),
            (12, 96, 24, 2),
            (25, 1536, 7, 1),
        ]);
        let mut integer: Option<((usize, usize, usize), Vec<f32>)> = None;
        for ((n, k, outs, threads), kernel) in shapes.flat_map(|s| kernels.iter().map(move |k| (s, *k))) {
            let x: Vec<f32> = (0..n * k).map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0).collect();
            let q: Vec<u8> = (0..outs * k).map(|i| ((i * 7 % 255) as i32 - 127) as i8 as u8).collect();
            let scales: Vec<f32> = (0..outs).map(|i| 0.01 * (i + 1) as f32).collect();
            let b: Vec<f32> = (0..outs).map(|i| i as f32 / 10.0).collect();
            let mut got = vec![0.0; n * outs];
            let product = Product { x: &x, q: &q, scales: &scales, b: &b, n, k, outs };
            linear_q8_on(kernel, &product, &mut got, threads);
            for t in 0..n {
                for o in 0..outs {
                    let w = |i: usize| f32::from(q[o * k + i] as i8) * scales[o];
                    let want = b[o] + (0..k).map(|i| x[t * k + i] * w(i)).sum::<f32>();
                    // x is rounded to 16 bits: each element by at most half a step of its row's
                    // largest magnitude over 32,767.
                    let max_x = x[t * k..(t + 1) * k].iter().fold(0f32, |m, v| m.max(v.abs()));
                    let bound = 0.5 * max_x / 32767.0 * (0..k).map(|i| w(i).abs()).sum::<f32>();
                    let g = got[t * outs + o];
                    assert!(
                        (g - want).abs() <= bound + 1e-4 * want.abs().max(1.0),
                        "{}: n {n} k {k}: [{t}][{o}] {g} vs {want}",
                        kernel.name()
                    );
                }
            }
            // The integer kernels add the same int32 products: their outputs are equal, bit for bit.
            if kernel.for_rows(k) != Kernel::Portable {
                match &integer {
                    Some((shape, first)) if *shape == (n, k, outs) => assert_eq!(first, &got, "n {n} k {k}"),
                    _ => integer = Some(((n, k, outs), got)),
                }
            }
        }
    }
}
