//! The integer kernel with AVX-512 VNNI (checked at run time): the same int16 × int8 products as
//! the AVX2 kernel in [`crate::kernel`], bit for bit, but 32 multiply-adds an instruction
//! (`vpdpwssd` multiplies pairs of int16 and adds them into int32 lanes in one step, where AVX2
//! needs `vpmaddwd` and then `vpaddd` for 16), and 32 registers, so a block of six tokens by four
//! rows of W keeps 24 sums in registers: each widened load of W feeds six products, each load of
//! x four.

use std::arch::x86_64::*;

use crate::kernel::Int16Rows;

/// Tokens a block: their rows of x stay in L1 while W's rows stream past.
const TOKENS: usize = 6;
/// W's rows a block. `TOKENS · OUTPUTS` sums, `OUTPUTS` widened rows of W and a row of x fit
/// the 32 registers.
const OUTPUTS: usize = 4;

/// Whether this processor runs [`linear_q8_vnni`].
pub(crate) fn available() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vnni")
}

/// `out[t][o] = b[o] + x[t] · w[o]` for the tokens `t < n` and the output rows `rows`, like
/// `linear_q8_avx2`. The int32 sums cannot overflow: each lane adds `k / 16` pairs of products of
/// at most 128 · 32767, under 2³¹ for any `k` up to 4,096 (MiniLM's longest row is 1,536).
///
/// # Safety
/// [`available`] must be true, `k` a multiple of 32, `x` and `q` hold `n` and `outs` rows of
/// `k`, and `out` has room for `n · outs` values, of which this call writes only the columns in
/// `rows` (so threads with disjoint `rows` may share it).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn linear_q8_vnni(
    x: &Int16Rows,
    q: &[u8],
    scales: &[f32],
    b: &[f32],
    n: usize,
    k: usize,
    outs: usize,
    rows: std::ops::Range<usize>,
    out: *mut f32,
) {
    assert!(k.is_multiple_of(32) && x.q.len() >= n * k && q.len() >= outs * k && rows.end <= outs);
    let block = Block { x, q, scales, b, k, outs, out };
    let mut t = 0;
    while n - t >= TOKENS {
        block.tokens::<TOKENS>(t, rows.clone());
        t += TOKENS;
    }
    // The last tokens in a block of their own size (a short query padded to a whole block would
    // do up to five times the work it needs).
    match n - t {
        0 => {}
        1 => block.tokens::<1>(t, rows),
        2 => block.tokens::<2>(t, rows),
        3 => block.tokens::<3>(t, rows),
        4 => block.tokens::<4>(t, rows),
        _ => block.tokens::<5>(t, rows),
    }
}

/// What every block of one product shares.
struct Block<'a> {
    x: &'a Int16Rows,
    q: &'a [u8],
    scales: &'a [f32],
    b: &'a [f32],
    k: usize,
    outs: usize,
    out: *mut f32,
}

impl Block<'_> {
    /// Tokens `t..t + T` against the output rows `rows`, `OUTPUTS` rows of W at a time.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tokens<const T: usize>(&self, t: usize, rows: std::ops::Range<usize>) {
        let xt: [*const i16; T] = std::array::from_fn(|j| self.x.q.as_ptr().add((t + j) * self.k));
        let mut o = rows.start;
        while o + OUTPUTS <= rows.end {
            self.store::<T, OUTPUTS>(t, o, &self.tile::<T, OUTPUTS>(xt, o));
            o += OUTPUTS;
        }
        match rows.end - o {
            0 => {}
            1 => self.store::<T, 1>(t, o, &self.tile::<T, 1>(xt, o)),
            2 => self.store::<T, 2>(t, o, &self.tile::<T, 2>(xt, o)),
            _ => self.store::<T, 3>(t, o, &self.tile::<T, 3>(xt, o)),
        }
    }

    /// The sums `x[j] · w[o + c]` for a block of `T` rows of x and `O` rows of W.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn tile<const T: usize, const O: usize>(&self, x: [*const i16; T], o: usize) -> [[i32; O]; T] {
        let w: [*const u8; O] = std::array::from_fn(|c| self.q.as_ptr().add((o + c) * self.k));
        let mut acc = [[_mm512_setzero_si512(); O]; T];
        let mut i = 0;
        while i < self.k {
            let wv: [__m512i; O] =
                std::array::from_fn(|c| _mm512_cvtepi8_epi16(_mm256_loadu_si256(w[c].add(i) as *const __m256i)));
            for (a, xj) in acc.iter_mut().zip(x) {
                let v = _mm512_loadu_si512(xj.add(i) as *const __m512i);
                for (s, wc) in a.iter_mut().zip(wv) {
                    dpwssd(s, v, wc);
                }
            }
            i += 32;
        }
        let mut sums = [[0i32; O]; T];
        let reduced = reduce(acc.as_flattened());
        for (j, row) in sums.iter_mut().enumerate() {
            row.copy_from_slice(&reduced[j * O..(j + 1) * O]);
        }
        sums
    }

    /// Writes the block's outputs: bias plus the integer sum times both rows' scales.
    #[inline]
    unsafe fn store<const T: usize, const O: usize>(&self, t: usize, o: usize, sums: &[[i32; O]; T]) {
        for (j, row) in sums.iter().enumerate() {
            let xs = *self.x.scales.get_unchecked(t + j);
            for (c, sum) in row.iter().enumerate() {
                let at = self.out.add((t + j) * self.outs + o + c);
                *at = *self.b.get_unchecked(o + c) + *sum as f32 * (xs * *self.scales.get_unchecked(o + c));
            }
        }
    }
}

/// `acc += ` the pairwise products of `x` and `w` (`vpdpwssd`), written as assembly: LLVM
/// otherwise splits the intrinsic back into `vpmaddwd` and `vpaddd` (two instructions where the
/// processor has one), which measured as slow as the AVX2 kernel.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn dpwssd(acc: &mut __m512i, x: __m512i, w: __m512i) {
    std::arch::asm!(
        "vpdpwssd {acc}, {x}, {w}",
        acc = inout(zmm_reg) *acc,
        x = in(zmm_reg) x,
        w = in(zmm_reg) w,
        options(pure, nomem, nostack, preserves_flags),
    );
}

/// The sum of each vector's sixteen lanes, in order, for up to `TOKENS · OUTPUTS` vectors.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn reduce(v: &[__m512i]) -> [i32; 32] {
    debug_assert!(v.len() <= 32);
    let mut out = [0i32; 32];
    for (g, group) in v.chunks(16).enumerate() {
        let mut padded = [_mm512_setzero_si512(); 16];
        padded[..group.len()].copy_from_slice(group);
        _mm512_storeu_si512(out.as_mut_ptr().add(16 * g) as *mut __m512i, reduce16(&padded));
    }
    out
}

/// Sixteen vectors' lane sums as one vector (lane `j` is the sum of `v[j]`), by a tree of
/// interleaving adds: about three instructions a vector, where reducing each alone takes eight.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn reduce16(v: &[__m512i; 16]) -> __m512i {
    // Pairs: each 128-bit lane holds two partial sums of each of the two vectors.
    let pairs: [__m512i; 8] = std::array::from_fn(|p| {
        let (a, b) = (v[2 * p], v[2 * p + 1]);
        _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b))
    });
    // Quads: each 128-bit lane holds one partial sum of each of four vectors, in order.
    let quads: [__m512i; 4] = std::array::from_fn(|p| {
        let (a, b) = (pairs[2 * p], pairs[2 * p + 1]);
        _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b))
    });
    // Then the four 128-bit lanes of each quad are added: halves first, then the rest.
    let halves = |a: __m512i, b: __m512i| {
        _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0b10_00_10_00), _mm512_shuffle_i32x4(a, b, 0b11_01_11_01))
    };
    let (h01, h23) = (halves(quads[0], quads[1]), halves(quads[2], quads[3]));
    halves(h01, h23)
}
