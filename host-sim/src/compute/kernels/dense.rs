//! Dense layers: matrix multiplication, RMSNorm, rotary embedding, residual add, SwiGLU.

use super::{check, param};
use crate::kernel::{Call, KernelError};

/// `y = x · w`: `x` is m×k, `w` k×n, `y` m×n (each region as a matrix: rows are every
/// dimension but the last). Sums run over `k` in order, in `f32`.
pub fn matmul(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [x, w, y] = c.views(&d)?;
    let out = product(&x.load(), x.matrix(), &w.load(), w.matrix(), y.matrix(), &y)?;
    y.store(&out)
}

/// `y = silu(x · w)` (an expert's up projection with its activation).
pub fn matmul_silu(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [x, w, y] = c.views(&d)?;
    let mut out = product(&x.load(), x.matrix(), &w.load(), w.matrix(), y.matrix(), &y)?;
    out.iter_mut().for_each(|v| *v = silu(*v));
    y.store(&out)
}

/// The m×n product of an m×k and a k×n matrix, both row-major, shapes checked against `out`.
pub(crate) fn product(
    a: &[f32],
    (m, k): (usize, usize),
    b: &[f32],
    (k2, n): (usize, usize),
    (m2, n2): (usize, usize),
    out: &crate::compute::View<'_>,
) -> Result<Vec<f32>, KernelError> {
    check(
        k == k2 && m == m2 && n == n2,
        out,
        format_args!("a {m}×{k} by {k2}×{n} product does not fit a {m2}×{n2} result"),
    )?;
    let mut y = vec![0f32; m * n];
    for i in 0..m {
        let row = &mut y[i * n..(i + 1) * n];
        for p in 0..k {
            let s = a[i * k + p];
            for (o, &w) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *o += s * w;
            }
        }
    }
    Ok(y)
}

/// RMSNorm of each row, without a learned scale: `y = x / sqrt(mean(x²) + 1e-6)`.
pub fn rmsnorm(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [x, y] = c.views(&d)?;
    let (m, n) = x.matrix();
    check(
        y.matrix() == (m, n),
        &y,
        format_args!("rmsnorm of a {m}×{n} input"),
    )?;
    let mut v = x.load();
    for row in v.chunks_mut(n.max(1)) {
        let ms = row.iter().map(|a| a * a).sum::<f32>() / n as f32;
        let r = 1.0 / (ms + RMS_EPS).sqrt();
        row.iter_mut().for_each(|a| *a *= r);
    }
    y.store(&v)
}

/// RMSNorm's epsilon.
pub const RMS_EPS: f32 = 1e-6;

/// Rotary position embedding in place (`inout x`), parameter 0 the tile `t`: row `r` of the
/// m×d region is at position `t·m + r`, and each pair `(x[2i], x[2i+1])` turns by
/// `position · 10000^(−2i/d)`.
pub fn rope(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [x] = c.views(&d)?;
    let t = param(&d, 0)?;
    let (m, n) = x.matrix();
    check(n % 2 == 0, &x, "rope needs an even row length")?;
    let mut v = x.load();
    for (r, row) in v.chunks_mut(n.max(1)).enumerate() {
        let pos = (t as f64) * m as f64 + r as f64;
        for i in 0..n / 2 {
            let (s, co) = rope_angle(pos, i, n).sin_cos();
            let (a, b) = (row[2 * i] as f64, row[2 * i + 1] as f64);
            row[2 * i] = (a * co - b * s) as f32;
            row[2 * i + 1] = (a * s + b * co) as f32;
        }
    }
    x.store(&v)
}

/// The angle of pair `i` of a row of `n` at `pos`.
pub fn rope_angle(pos: f64, i: usize, n: usize) -> f64 {
    pos * 10000f64.powf(-2.0 * i as f64 / n as f64)
}

/// `y = x + y` (`in x, inout y`, the same number of elements).
pub fn residual(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [x, y] = c.views(&d)?;
    check(
        x.len() == y.len(),
        &y,
        format_args!("residual of {} elements", x.len()),
    )?;
    let a = x.load();
    let mut b = y.load();
    b.iter_mut().zip(&a).for_each(|(b, a)| *b += a);
    y.store(&b)
}

/// `z = x + y` (`in x, in y, out z`, the same number of elements).
pub fn add(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [x, y, z] = c.views(&d)?;
    check(
        x.len() == z.len() && y.len() == z.len(),
        &z,
        format_args!("add of {} and {} elements", x.len(), y.len()),
    )?;
    let b = y.load();
    let mut a = x.load();
    a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
    z.store(&a)
}

/// SwiGLU's gate: `g = silu(g) · u` (`inout g, in u`).
pub fn silu_mul(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [g, u] = c.views(&d)?;
    check(
        g.len() == u.len(),
        &u,
        format_args!("silu_mul of {} elements", g.len()),
    )?;
    let b = u.load();
    let mut a = g.load();
    a.iter_mut().zip(&b).for_each(|(a, b)| *a = silu(*a) * b);
    g.store(&a)
}

/// `x · sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}
