//! Attention: the flash-attention steps of the LLaMA layer (score, online softmax, P·V,
//! finalize), whole-head attention, and FlashInfer-style decode with split-KV and a merge by
//! log-sum-exp.

use super::{check, param, product};
use crate::compute::View;
use crate::kernel::{Call, KernelError};

/// `attn_init`: the running statistics of a query tile (`out stat`, m×2: running max −∞,
/// running sum 0) and its accumulator (`out acc`) zeroed.
pub fn attn_init(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [stat, acc] = c.views(&d)?;
    check(
        stat.matrix().1 == 2,
        &stat,
        "the statistics have two columns (max, sum)",
    )?;
    let s: Vec<f32> = (0..stat.len())
        .map(|i| if i % 2 == 0 { f32::NEG_INFINITY } else { 0.0 })
        .collect();
    stat.store(&s)?;
    acc.store(&vec![0.0; acc.len()])
}

/// Checks that `stat` holds the running (max, sum) of `m` rows.
fn statistics(stat: &View<'_>, m: usize) -> Result<(), KernelError> {
    check(
        stat.matrix() == (m, 2),
        stat,
        format_args!("statistics (max, sum) for {m} rows"),
    )
}

/// `qk_matmul`: scores `s = q · kᵀ / √d` of an m×d query tile and an n×d key tile (m×n).
pub fn qk_matmul(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [q, k, s] = c.views(&d)?;
    let (n, dk) = k.matrix();
    let kt = transpose(&k.load(), n, dk);
    let mut out = product(&q.load(), q.matrix(), &kt, (dk, n), s.matrix(), &s)?;
    let scale = 1.0 / (dk as f32).sqrt();
    out.iter_mut().for_each(|v| *v *= scale);
    s.store(&out)
}

/// `online_softmax`: one key tile's step of the online softmax (`in s` m×n, `inout stat`
/// m×2, `out p` m×n, `inout acc` m×d). Per row: the new max `M = max(max, max s)`,
/// `p = exp(s − M)`, the accumulator and the running sum scaled by `exp(max − M)`, the sum
/// increased by `Σ p`.
pub fn online_softmax(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [s, stat, p, acc] = c.views(&d)?;
    let (m, n) = s.matrix();
    statistics(&stat, m)?;
    check(
        p.matrix() == (m, n),
        &p,
        format_args!("probabilities of {m}×{n} scores"),
    )?;
    let (ma, dim) = acc.matrix();
    check(ma == m, &acc, format_args!("an accumulator of {m} rows"))?;
    let scores = s.load();
    let mut st = stat.load();
    let mut a = acc.load();
    let mut probs = vec![0f32; m * n];
    for r in 0..m {
        let row = &scores[r * n..(r + 1) * n];
        let (old_max, old_sum) = (st[2 * r], st[2 * r + 1]);
        let new_max = row.iter().copied().fold(old_max, f32::max);
        let alpha = if old_max == f32::NEG_INFINITY {
            0.0
        } else {
            (old_max - new_max).exp()
        };
        let mut sum = 0f32;
        for (pv, &x) in probs[r * n..(r + 1) * n].iter_mut().zip(row) {
            *pv = (x - new_max).exp();
            sum += *pv;
        }
        st[2 * r] = new_max;
        st[2 * r + 1] = old_sum * alpha + sum;
        a[r * dim..(r + 1) * dim]
            .iter_mut()
            .for_each(|v| *v *= alpha);
    }
    stat.store(&st)?;
    p.store(&probs)?;
    acc.store(&a)
}

/// `pv_matmul`: `acc += p · v` (`in p` m×n, `in v` n×d, `inout acc` m×d).
pub fn pv_matmul(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [p, v, acc] = c.views(&d)?;
    let add = product(
        &p.load(),
        p.matrix(),
        &v.load(),
        v.matrix(),
        acc.matrix(),
        &acc,
    )?;
    let mut a = acc.load();
    a.iter_mut().zip(&add).for_each(|(a, b)| *a += b);
    acc.store(&a)
}

/// `attn_finalize`: `a = acc / sum` per row (`in acc` m×d, `in stat` m×2, `out a` m×d).
pub fn attn_finalize(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [acc, stat, a] = c.views(&d)?;
    let (m, dim) = acc.matrix();
    statistics(&stat, m)?;
    check(
        a.matrix() == (m, dim),
        &a,
        format_args!("an output of {m}×{dim}"),
    )?;
    let st = stat.load();
    let mut v = acc.load();
    for (r, row) in v.chunks_mut(dim.max(1)).enumerate() {
        let l = st[2 * r + 1];
        row.iter_mut().for_each(|x| *x /= l);
    }
    a.store(&v)
}

/// `attn_kernel(b, h)`: softmax attention of one head, `o = softmax(q · kᵀ / √d) · v`, on
/// regions of shape `[batch, heads, seq, d]` (`in q, in k, in v, out o`). A region that is
/// one head (`Q[b, h]`) is used as it is; a whole tensor (`resources(Q, K, V, O)`, as PTO-WSP
/// passes them) is indexed at head `(b, h)`, the task's first two parameters.
pub fn attn_kernel(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [q, k, v, o] = c.views(&d)?;
    let head = |x: &View<'_>| -> Result<(Vec<f32>, usize, usize, usize), KernelError> {
        let shape = x.shape();
        check(shape.len() >= 2, x, "attention needs [.., seq, d] regions")?;
        let (lead, rows) = shape.split_at(shape.len() - 2);
        let (s, dim) = (rows[0] as usize, rows[1] as usize);
        let mut block = 0usize;
        if lead.iter().any(|&e| e > 1) {
            for (i, &e) in lead.iter().enumerate() {
                let at = param(&d, i)?;
                check(
                    (0..i64::from(e)).contains(&at),
                    x,
                    format_args!("parameter {i} ({at}) is outside dimension {i}"),
                )?;
                block = block * e as usize + at as usize;
            }
        }
        Ok((x.load(), block * s * dim, s, dim))
    };
    let (qa, qb, sq, dq) = head(&q)?;
    let (ka, kb, sk, dk) = head(&k)?;
    let (va, vb, sv, dv) = head(&v)?;
    check(
        dq == dk && sk == sv,
        &k,
        "q, k and v heads of one length and d",
    )?;
    let out = attend(
        &qa[qb..qb + sq * dq],
        sq,
        &ka[kb..kb + sk * dk],
        &va[vb..vb + sv * dv],
        sk,
        dq,
        dv,
    );
    // A whole output tensor: head (b, h) is written, the rest kept.
    let (mut all, ob, so, d_o) = head(&o)?;
    check(
        (so, d_o) == (sq, dv),
        &o,
        format_args!("an output head of {sq}×{dv}"),
    )?;
    all[ob..ob + sq * dv].copy_from_slice(&out);
    o.store(&all)
}

/// Softmax attention of `sq` query rows over `sk` keys (rows of `d`), values rows of `dv`;
/// row-major `sq`×`dv`.
fn attend(q: &[f32], sq: usize, k: &[f32], v: &[f32], sk: usize, d: usize, dv: usize) -> Vec<f32> {
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0f32; sq * dv];
    let mut p = vec![0f32; sk];
    for r in 0..sq {
        let qr = &q[r * d..(r + 1) * d];
        for (j, pj) in p.iter_mut().enumerate() {
            *pj = qr
                .iter()
                .zip(&k[j * d..(j + 1) * d])
                .map(|(a, b)| a * b)
                .sum::<f32>()
                * scale;
        }
        let mx = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        p.iter_mut().for_each(|x| {
            *x = (*x - mx).exp();
            sum += *x;
        });
        let row = &mut out[r * dv..(r + 1) * dv];
        for (j, &pj) in p.iter().enumerate() {
            for (o, &x) in row.iter_mut().zip(&v[j * dv..(j + 1) * dv]) {
                *o += pj * x;
            }
        }
        row.iter_mut().for_each(|o| *o /= sum);
    }
    out
}

/// The valid tokens of a KV page of `page` tokens: `min(page, len − first)`, 0 below, or the
/// whole page without a length.
fn valid(len: Option<i64>, first: i64, page: usize) -> usize {
    match len {
        None => page,
        Some(l) => (l - first).clamp(0, page as i64) as usize,
    }
}

/// One query against the first `n` keys of a page: the normalised output and the
/// log-sum-exp of the scaled scores (−∞ and zeros with no key).
fn decode(q: &[f32], k: &[f32], v: &[f32], n: usize, d: usize) -> (Vec<f32>, f32) {
    if n == 0 {
        return (vec![0.0; d], f32::NEG_INFINITY);
    }
    let scale = 1.0 / (d as f32).sqrt();
    let s: Vec<f32> = (0..n)
        .map(|j| {
            q.iter()
                .zip(&k[j * d..(j + 1) * d])
                .map(|(a, b)| a * b)
                .sum::<f32>()
                * scale
        })
        .collect();
    let mx = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    let mut o = vec![0f32; d];
    for (j, &sj) in s.iter().enumerate() {
        let p = (sj - mx).exp();
        sum += p;
        o.iter_mut()
            .zip(&v[j * d..(j + 1) * d])
            .for_each(|(o, x)| *o += p * x);
    }
    o.iter_mut().for_each(|x| *x /= sum);
    (o, mx + sum.ln())
}

/// A decode task's query (one row of `dim`) and a page of `page` keys and values.
struct Page {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    page: usize,
    dim: usize,
}

impl Page {
    /// The regions' values, their shapes checked.
    fn load(q: &View<'_>, k: &View<'_>, v: &View<'_>) -> Result<Page, KernelError> {
        let dim = q.len();
        let (page, dk) = k.matrix();
        check(
            dk == dim,
            k,
            format_args!("keys of the query's length {dim}"),
        )?;
        check(
            v.matrix() == (page, dim),
            v,
            format_args!("values for {page} keys of {dim}"),
        )?;
        Ok(Page {
            q: q.load(),
            k: k.load(),
            v: v.load(),
            page,
            dim,
        })
    }

    /// Attention of the query over the first `n` keys.
    fn attend(&self, n: usize) -> (Vec<f32>, f32) {
        decode(&self.q, &self.k, &self.v, n, self.dim)
    }
}

/// `decode_chunk(b, h, c[, len])`: one KV chunk (page `c`) of a decode request: attention of
/// the query over the chunk's valid tokens (`min(page, len − c·page)`; the whole page
/// without `len`), the partial output (`out o`) and its log-sum-exp (`out lse`).
pub fn decode_chunk(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [q, k, v, o, lse] = c.views(&d)?;
    let pg = Page::load(&q, &k, &v)?;
    let (page, dim) = (pg.page, pg.dim);
    let chunk = param(&d, 2)?;
    let len = d.params().get(3).copied();
    let (out, l) = pg.attend(valid(len, chunk.saturating_mul(page as i64), page));
    check(o.len() == dim, &o, format_args!("an output of {dim}"))?;
    check(lse.len() == 1, &lse, "one log-sum-exp")?;
    o.store(&out)?;
    lse.store(&[l])
}

/// `decode_full(b, h[, len])`: a request of one chunk: attention of the query over the first
/// `min(page, len)` tokens of page 0 (`out o`).
pub fn decode_full(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [q, k, v, o] = c.views(&d)?;
    let pg = Page::load(&q, &k, &v)?;
    let dim = pg.dim;
    let (out, _) = pg.attend(valid(d.params().get(2).copied(), 0, pg.page));
    check(o.len() == dim, &o, format_args!("an output of {dim}"))?;
    o.store(&out)
}

/// `merge_states(b, h, n)`: merges `n` partial outputs (`in o`, n×d) by their log-sum-exps
/// (`in lse`, n): `out = Σ exp(lseᵢ − M) oᵢ / Σ exp(lseᵢ − M)`, `M` the largest.
pub fn merge_states(c: &Call<'_>) -> Result<(), KernelError> {
    let d = c.descriptor();
    let [o, lse, out] = c.views(&d)?;
    let (n, dim) = o.matrix();
    check(lse.len() == n, &lse, format_args!("{n} log-sum-exps"))?;
    check(out.len() == dim, &out, format_args!("an output of {dim}"))?;
    let parts = o.load();
    let l = lse.load();
    let mx = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut acc = vec![0f32; dim];
    let mut sum = 0f32;
    if mx > f32::NEG_INFINITY {
        for (i, &li) in l.iter().enumerate() {
            let w = (li - mx).exp();
            sum += w;
            acc.iter_mut()
                .zip(&parts[i * dim..(i + 1) * dim])
                .for_each(|(a, x)| *a += w * x);
        }
        acc.iter_mut().for_each(|a| *a /= sum);
    }
    out.store(&acc)
}

fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; a.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = a[r * cols + c];
        }
    }
    t
}
