//! DeepSeek V3.2's sparse attention (seed 002 §8): the MLA prolog (a token's query and its
//! compressed key-value latent), the indexer prolog (the lightning indexer's queries, key and
//! head weights), the lightning indexer (each query's top-k keys by the indexer's score) and
//! the sparse attention over those keys.

use super::dense::product;
use super::{check, param};
use crate::kernel::{Call, KernelError};

/// `mla_prolog(t)`: `q = x · w_q` and `kv = x · w_kv` for the token rows of `x` (`in x` m×D,
/// `in w_q` D×Dk, `in w_kv` D×Dk, `out q` m×Dk, `out kv` m×Dk): the query and the latent
/// that serves as both key and value (MLA's absorbed form).
pub fn mla_prolog(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [x, wq, wkv, q, kv] = c.views(&d)?;
    let xs = x.load();
    q.store(&product(
        &xs,
        x.matrix(),
        &wq.load(),
        wq.matrix(),
        q.matrix(),
        &q,
    )?)?;
    kv.store(&product(
        &xs,
        x.matrix(),
        &wkv.load(),
        wkv.matrix(),
        kv.matrix(),
        &kv,
    )?)
}

/// `indexer_prolog(t)`: the lightning indexer's inputs for the token rows of `x`: its queries
/// `qi = x · w_qi` (m × H·d, H heads of d), its key `ki = x · w_ki` (m×d, one for all heads)
/// and its head weights `wt = x · w_w` (m×H).
pub fn indexer_prolog(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [x, wqi, wki, ww, qi, ki, wt] = c.views(&d)?;
    let xs = x.load();
    qi.store(&product(
        &xs,
        x.matrix(),
        &wqi.load(),
        wqi.matrix(),
        qi.matrix(),
        &qi,
    )?)?;
    ki.store(&product(
        &xs,
        x.matrix(),
        &wki.load(),
        wki.matrix(),
        ki.matrix(),
        &ki,
    )?)?;
    wt.store(&product(
        &xs,
        x.matrix(),
        &ww.load(),
        ww.matrix(),
        wt.matrix(),
        &wt,
    )?)
}

/// The lightning indexer's score of key row `s` for a query: `Σ_h w[h] · relu(q_h · k_s)`,
/// in `f64` so that the order of two keys does not depend on rounding.
pub fn indexer_score(q: &[f32], w: &[f32], k: &[f32], heads: usize, dim: usize) -> f64 {
    (0..heads)
        .map(|h| {
            let dot: f64 = (0..dim)
                .map(|j| f64::from(q[h * dim + j]) * f64::from(k[j]))
                .sum();
            f64::from(w[h]) * dot.max(0.0)
        })
        .sum()
}

/// The `count` keys of largest score among `scores` (index order for equal scores), in
/// decreasing score; -1 past the keys there are.
pub fn top_k(scores: &[f64], count: usize) -> Vec<i64> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    (0..count)
        .map(|i| order.get(i).map_or(-1, |&s| s as i64))
        .collect()
}

/// `lightning_indexer(t)`: query `t`'s top-k keys among keys `0 ..= t` (`in qi` 1 × H·d,
/// `in wt` 1×H, `in ki` (t+1)×d, `out idx` 1×k of i32), by [`indexer_score`]; -1 past the
/// `t + 1` keys when `k` is more.
pub fn lightning_indexer(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [qi, wt, ki, idx] = c.views(&d)?;
    let t = param(&d, 0)?;
    let (keys, dim) = ki.matrix();
    let heads = wt.len();
    check(
        qi.len() == heads * dim,
        &qi,
        format_args!("{heads} heads of {dim}"),
    )?;
    check(
        t >= 0 && keys as i64 == t + 1,
        &ki,
        format_args!("keys 0 ..= {t} (causal)"),
    )?;
    let (q, w, k) = (qi.load(), wt.load(), ki.load());
    let scores: Vec<f64> = (0..keys)
        .map(|s| indexer_score(&q, &w, &k[s * dim..(s + 1) * dim], heads, dim))
        .collect();
    let chosen: Vec<f32> = top_k(&scores, idx.len())
        .into_iter()
        .map(|s| s as f32)
        .collect();
    idx.store(&chosen)
}

/// `sparse_attn(t)`: query `t`'s attention over the keys the indexer chose (`in q` 1×Dk,
/// `in kv` (t+1)×Dk, `in idx` 1×k, `out o` 1×Dk): `softmax(q·kvᵢ/√Dk)` over the chosen rows
/// `i` (an index of -1 is none), times those rows.
pub fn sparse_attn(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [q, kv, idx, o] = c.views(&d)?;
    let (rows, dim) = kv.matrix();
    check(q.len() == dim, &q, format_args!("a query of {dim}"))?;
    check(o.len() == dim, &o, format_args!("an output of {dim}"))?;
    let (qs, ks) = (q.load(), kv.load());
    let mut chosen = Vec::new();
    for &i in &idx.load() {
        if i < 0.0 {
            continue;
        }
        let i = i as usize;
        check(
            i < rows,
            &idx,
            format_args!("index {i} is past the {rows} keys"),
        )?;
        chosen.push(i);
    }
    let scale = 1.0 / (dim as f32).sqrt();
    let s: Vec<f32> = chosen
        .iter()
        .map(|&i| (0..dim).map(|j| qs[j] * ks[i * dim + j]).sum::<f32>() * scale)
        .collect();
    let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
    let sum: f32 = w.iter().sum();
    let mut out = vec![0f32; dim];
    for (&i, &wi) in chosen.iter().zip(&w) {
        for j in 0..dim {
            out[j] += wi / sum * ks[i * dim + j];
        }
    }
    o.store(&out)
}
