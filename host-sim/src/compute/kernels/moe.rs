//! Mixture of experts: the router's logits, an expert's FFN, and the top-k combine.

use super::{check, param};
use crate::kernel::{Call, KernelError};

/// `combine_topk(t, e₀, …, e_{k−1})`: the output of tokens routed to experts `e₀…e_{k−1}`
/// (the routing the launch was given): per row, the gates are the softmax of the router's
/// logits of those k experts (Mixtral's top-k gating), and `out = Σ gᵢ · y[eᵢ]` (`in logits`
/// m×E, `in y` m×E×D, `out out` m×D).
pub fn combine_topk(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [logits, y, out] = c.views(&d)?;
    let (m, experts) = logits.matrix();
    let (m2, dim) = out.matrix();
    check(m2 == m, &out, format_args!("an output of {m} rows"))?;
    check(
        y.len() == m * experts * dim,
        &y,
        format_args!("expert outputs of {m}×{experts}×{dim}"),
    )?;
    let k = d.params().len().saturating_sub(1);
    check(k > 0, &out, "no expert is given (parameters e₀… after t)")?;
    let mut chosen = Vec::with_capacity(k);
    for i in 1..=k {
        let e = param(&d, i)?;
        check(
            (0..experts as i64).contains(&e),
            &logits,
            format_args!("expert {e} (parameter {i}) is not one of the {experts}"),
        )?;
        chosen.push(e as usize);
    }
    let lg = logits.load();
    let ys = y.load();
    let mut o = vec![0f32; m * dim];
    for r in 0..m {
        let l: Vec<f32> = chosen.iter().map(|&e| lg[r * experts + e]).collect();
        let mx = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f32> = l.iter().map(|x| (x - mx).exp()).collect();
        let sum: f32 = w.iter().sum();
        let row = &mut o[r * dim..(r + 1) * dim];
        for (&e, &wi) in chosen.iter().zip(&w) {
            let g = wi / sum;
            let base = (r * experts + e) * dim;
            row.iter_mut()
                .zip(&ys[base..base + dim])
                .for_each(|(o, x)| *o += g * x);
        }
    }
    out.store(&o)
}
