//! The integer kernel with AVX-512 VNNI (checked at run time): the same int16 × int8 products as
//! the AVX2 kernel in [`crate::kernel`], bit for bit, but 32 multiply-adds an instruction
//! (`vpdpwssd` multiplies pairs of int16 and adds them into int32 lanes in one step, where AVX2
//! needs `vpmaddwd` and then `vpaddd` for 16), and 32 registers, so a block of six tokens by four
//! rows of W keeps 24 sums in registers: each widened load of W feeds six products, each load of
//! x four.

use std::arch::x86_64::*;

use crate::kernel::{IntegerProduct, Product};

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

/// The product's outputs `rows` for every token, like the AVX2 kernel. The int32 sums cannot
/// overflow: each lane adds `k / 16` pairs of products of at most 128 · 32767, under 2³¹ for any
/// `k` up to 4,096 (MiniLM's longest row is 1,536).
///
/// # Safety
/// [`available`] must be true, `k` a multiple of 32, and the product's operands and `out` of
/// the sizes its shapes say; only the outputs in `rows` are written (so threads with disjoint
/// `rows` may share `out`).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn linear_q8_vnni(ip: &IntegerProduct<'_>, rows: std::ops::Range<usize>) {
    let Product { q, n, k, outs, .. } = ip.p;
    assert!(k.is_multiple_of(32) && ip.x.q().len() >= n * k && q.len() >= outs * k && rows.end <= outs);
    let mut t = 0;
    while n - t >= TOKENS {
        tokens::<TOKENS>(ip, t, rows.clone());
        t += TOKENS;
    }
    // The last tokens in a block of their own size (a short query padded to a whole block would
    // do up to five times the work it needs).
    match n - t {
        0 => {}
        1 => tokens::<1>(ip, t, rows),
        2 => tokens::<2>(ip, t, rows),
        3 => tokens::<3>(ip, t, rows),
        4 => tokens::<4>(ip, t, rows),
        _ => tokens::<5>(ip, t, rows),
    }
}

/// Tokens `t..t + T` against the output rows `rows`, `OUTPUTS` rows of W at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tokens<const T: usize>(ip: &IntegerProduct<'_>, t: usize, rows: std::ops::Range<usize>) {
    let k = ip.p.k;
    let xt: [*const i16; T] = std::array::from_fn(|j| ip.x.q().as_ptr().add((t + j) * k));
    let mut o = rows.start;
    while o + OUTPUTS <= rows.end {
        store_block(ip, t, o, &tile::<T, OUTPUTS>(ip, xt, o));
        o += OUTPUTS;
    }
    match rows.end - o {
        0 => {}
        1 => ip.store(t, o, &tile::<T, 1>(ip, xt, o)),
        2 => ip.store(t, o, &tile::<T, 2>(ip, xt, o)),
        _ => ip.store(t, o, &tile::<T, 3>(ip, xt, o)),
    }
}

/// The sums `x[j] · w[o + c]` for a block of `T` rows of x and `O` rows of W.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn tile<const T: usize, const O: usize>(ip: &IntegerProduct<'_>, x: [*const i16; T], o: usize) -> [[i32; O]; T] {
    let k = ip.p.k;
    let w: [*const u8; O] = std::array::from_fn(|c| ip.p.q.as_ptr().add((o + c) * k));
    let mut acc = [[_mm512_setzero_si512(); O]; T];
    let mut i = 0;
    while i < k {
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

/// Writes a whole block's outputs, four at a time: the same operations, in the same order, as
/// [`IntegerProduct::store`] (so the same values), which LLVM leaves as scalar code here.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn store_block<const T: usize>(ip: &IntegerProduct<'_>, t: usize, o: usize, sums: &[[i32; OUTPUTS]; T]) {
    const { assert!(OUTPUTS == 4) };
    let scales = _mm_loadu_ps(ip.p.scales.as_ptr().add(o));
    let bias = _mm_loadu_ps(ip.p.b.as_ptr().add(o));
    for (j, row) in sums.iter().enumerate() {
        let both = _mm_mul_ps(_mm_set1_ps(*ip.x.scales.get_unchecked(t + j)), scales);
        let sum = _mm_cvtepi32_ps(_mm_loadu_si128(row.as_ptr() as *const __m128i));
        _mm_storeu_ps(ip.out.add((t + j) * ip.p.outs + o), _mm_add_ps(bias, _mm_mul_ps(sum, both)));
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
