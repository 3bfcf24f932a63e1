//! Mixture of experts: the router's logits, the top-2 routing computed on the device, an
//! expert's FFN, and the top-k combine.

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

/// The largest number of experts `route_top2` routes among.
const MAX_EXPERTS: usize = 64;

/// `route_top2(active, hot)`: each token's two experts from the router's logits (`in logits`
/// T×E), as the routing the rest of the workload reads back (`wait`): `out experts` (2T) gets
/// token t's two experts, the larger logit first; `out ptr` (E + 1) and `out tokens` (2T) the
/// same by expert, a CSR matrix — expert e's tokens are `tokens[ptr[e] .. ptr[e+1]]`, in token
/// order. Only experts below `active` are chosen (the others get no token), and expert `hot`
/// (if below E) is every token's first (all tokens on one expert); ties go to the lower expert.
pub fn route_top2(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [logits, ptr, tokens, experts] = c.views(&d)?;
    let (t, e) = logits.matrix();
    check(
        (2..=MAX_EXPERTS).contains(&e),
        &logits,
        format_args!("logits of 2 ..= {MAX_EXPERTS} experts"),
    )?;
    check(ptr.len() == e + 1, &ptr, format_args!("{} entries", e + 1))?;
    check(
        tokens.len() == 2 * t,
        &tokens,
        format_args!("{} entries", 2 * t),
    )?;
    check(
        experts.len() == 2 * t,
        &experts,
        format_args!("{} entries", 2 * t),
    )?;
    let active = param(&d, 0)?.clamp(0, e as i64) as usize;
    let hot = param(&d, 1)?;
    check(
        active >= 2,
        &logits,
        "at least two active experts (parameter 0)",
    )?;
    let lg = logits.load();
    let mut chosen = vec![0f32; 2 * t];
    let mut count = [0usize; MAX_EXPERTS];
    for tok in 0..t {
        let row = &lg[tok * e..(tok + 1) * e];
        let score = |x: usize| {
            if hot >= 0 && x as i64 == hot {
                f32::INFINITY
            } else {
                row[x]
            }
        };
        // The best two of the active experts (`>`: the lower index wins a tie).
        let (mut first, mut second) = (0usize, 1usize);
        if score(second) > score(first) {
            (first, second) = (second, first);
        }
        for x in 2..active {
            if score(x) > score(first) {
                (first, second) = (x, first);
            } else if score(x) > score(second) {
                second = x;
            }
        }
        chosen[2 * tok] = first as f32;
        chosen[2 * tok + 1] = second as f32;
        count[first] += 1;
        count[second] += 1;
    }
    let mut p = vec![0f32; e + 1];
    for x in 0..e {
        p[x + 1] = p[x] + count[x] as f32;
    }
    let mut next: Vec<usize> = p[..e].iter().map(|&v| v as usize).collect();
    let mut by_expert = vec![0f32; 2 * t];
    for tok in 0..t {
        for k in 0..2 {
            let x = chosen[2 * tok + k] as usize;
            by_expert[next[x]] = tok as f32;
            next[x] += 1;
        }
    }
    experts.store(&chosen)?;
    ptr.store(&p)?;
    tokens.store(&by_expert)
}
