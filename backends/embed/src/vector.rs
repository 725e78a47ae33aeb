//! Vector arithmetic the store needs: unit length, int8 storage, dot products.

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
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

/// The dot product of two int8 vectors, as i32 (the compiler vectorizes this loop).
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
