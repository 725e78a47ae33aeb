//! Vector arithmetic the store needs: unit length, int8 storage, dot products.

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    // Summed in f64: squares of large values (an endpoint's unnormalised output) would overflow
    // f32 and scale the vector to zeros.
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
}

/// A vector stored as int8 with one scale: `x[i] ≈ q[i] * scale`. A quarter of f32's size, with
/// no measurable change in recall.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantized {
    /// The scale.
    pub scale: f32,
    /// The values.
    pub q: Vec<i8>,
}

/// Quantizes symmetrically to int8.
pub fn quantize(v: &[f32]) -> Quantized {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    Quantized { scale, q: v.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8).collect() }
}

/// The dot product of two int8 vectors, as i32.
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum()
}

/// The dot products of `query` with each row of `rows` (rows of `query.len()` values, one after
/// the other), appended to `out`. The scan behind exact vector search: with AVX2 (detected at run
/// time) 100,000 rows of 384 take a few milliseconds.
pub fn dot_i8_rows(query: &[i8], rows: &[i8], out: &mut Vec<i32>) {
    let dim = query.len();
    if dim == 0 {
        return;
    }
    assert_eq!(rows.len() % dim, 0, "whole rows");
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was just detected.
        unsafe { dot_rows_avx2(query, rows, out) };
        return;
    }
    out.extend(rows.chunks_exact(dim).map(|r| dot_i8(query, r)));
}

/// The scan with AVX2: each row's bytes widened to i16 and multiplied-added with the (widened)
/// query, 16 values an instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_rows_avx2(query: &[i8], rows: &[i8], out: &mut Vec<i32>) {
    use std::arch::x86_64::*;
    let dim = query.len();
    let chunks = dim / 16;
    out.reserve(rows.len() / dim);
    // SAFETY (all loads): `c * 16 + 16 <= chunks * 16 <= dim`, within the query and each row.
    let wide: Vec<__m256i> = (0..chunks)
        .map(|c| unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(query.as_ptr().add(c * 16).cast())) })
        .collect();
    for r in rows.chunks_exact(dim) {
        let (mut a, mut b) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let mut c = 0;
        while c + 1 < chunks {
            let x = unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(r.as_ptr().add(c * 16).cast())) };
            let y = unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(r.as_ptr().add(c * 16 + 16).cast())) };
            a = _mm256_add_epi32(a, _mm256_madd_epi16(x, wide[c]));
            b = _mm256_add_epi32(b, _mm256_madd_epi16(y, wide[c + 1]));
            c += 2;
        }
        if c < chunks {
            let x = unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(r.as_ptr().add(c * 16).cast())) };
            a = _mm256_add_epi32(a, _mm256_madd_epi16(x, wide[c]));
        }
        let acc = _mm256_add_epi32(a, b);
        let s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        let mut sum = _mm_cvtsi128_si32(s);
        for i in chunks * 16..dim {
            sum += i32::from(query[i]) * i32::from(r[i]);
        }
        out.push(sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizing_large_values_gives_a_unit_vector() {
        let mut v = vec![3e30f32, 4e30];
        normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6, "{v:?}");
        let mut zero = vec![0f32; 4];
        normalize(&mut zero);
        assert_eq!(zero, vec![0f32; 4]);
    }

    #[test]
    fn int8_keeps_the_cosine() {
        let mut a: Vec<f32> = (0..384).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let mut b: Vec<f32> = (0..384).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
        normalize(&mut a);
        normalize(&mut b);
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let (qa, qb) = (quantize(&a), quantize(&b));
        let approx = dot_i8(&qa.q, &qb.q) as f32 * qa.scale * qb.scale;
        assert!((exact - approx).abs() < 0.01, "{exact} vs {approx}");
        let mut rows = qb.q.repeat(3);
        rows.extend(qa.q.iter());
        // Lengths that are not a multiple of 16 or 32 take the tail paths.
        for dim in [5usize, 16, 40, 48] {
            let (q, r) = (&qa.q[..dim], &qb.q[..dim]);
            let mut out = Vec::new();
            dot_i8_rows(q, r, &mut out);
            assert_eq!(out, vec![dot_i8(q, r)], "{dim}");
        }
        let mut out = Vec::new();
        dot_i8_rows(&qa.q, &rows, &mut out);
        assert_eq!(out, vec![dot_i8(&qa.q, &qb.q), dot_i8(&qa.q, &qb.q), dot_i8(&qa.q, &qb.q), dot_i8(&qa.q, &qa.q)]);
    }
}
