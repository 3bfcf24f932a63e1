//! Straightforward references for the bundled examples, written from the models' textbook
//! definitions and not from their `.pto` modules: naive softmax attention, the LLaMA layer as
//! plain matrix products, a dense mixture of experts, and decode attention over the whole KV
//! sequence. Each reads the run's inputs by tensor name, computes in `f64` from the inputs as
//! stored (so the inputs' rounding is shared), and gives the expected values of the outputs it
//! names; `compute::run` compares them with the run's, within a tolerance per element type
//! ([`tolerance`]). That checks that a module describes the computation it claims to.

use ptovm_vm::{DType, RuntimeParams, Verified};

use super::kernels::{rope_angle, RMS_EPS};
use super::Memory;

/// A model's expected output.
#[derive(Clone, Debug)]
pub struct Expected {
    /// The tensor it is compared with.
    pub tensor: String,
    /// Its values, row-major over the whole tensor.
    pub values: Vec<f64>,
}

/// What a model reads: the run's tensors by name and its runtime parameters by name.
pub struct Inputs<'a> {
    memory: &'a Memory,
    v: &'a Verified<'a>,
    p: &'a RuntimeParams<'a>,
}

type R<T> = Result<T, String>;

impl<'a> Inputs<'a> {
    /// The inputs of a run of `v` with parameters `p` on `memory`.
    pub fn new(memory: &'a Memory, v: &'a Verified<'a>, p: &'a RuntimeParams<'a>) -> Inputs<'a> {
        Inputs { memory, v, p }
    }

    /// Tensor `name` as `f64`s and its shape, with the rank the model expects.
    fn tensor(&self, name: &str, rank: usize) -> R<(Vec<f64>, Vec<usize>)> {
        let t = self
            .memory
            .tensor(name)
            .ok_or_else(|| format!("the module has no tensor {name}"))?;
        if t.dims.len() != rank {
            return Err(format!(
                "tensor {name} has rank {}, the model expects {rank}",
                t.dims.len()
            ));
        }
        Ok((
            (0..t.len()).map(|i| f64::from(t.get(i))).collect(),
            t.dims.iter().map(|&d| d as usize).collect(),
        ))
    }

    fn slot(&self, name: &str) -> R<usize> {
        self.v
            .params()
            .iter()
            .position(|e| self.v.name(e.name_off.get(), e.name_len.get() as u32) == name)
            .ok_or_else(|| format!("the module has no runtime parameter {name}"))
    }

    /// Runtime scalar `name`.
    fn scalar(&self, name: &str) -> R<u32> {
        Ok(self.p.scalar(self.slot(name)?))
    }

    /// Runtime array `name`.
    fn array(&self, name: &str) -> R<Vec<i64>> {
        Ok(self
            .p
            .array(self.slot(name)?)
            .iter()
            .map(|&x| i64::from(x))
            .collect())
    }
}

/// A model of a workload.
#[derive(Debug)]
pub struct Model {
    /// The workload it checks (`@workload NAME`).
    pub workload: &'static str,
    /// What it computes, in a phrase.
    pub what: &'static str,
    /// Its expected outputs.
    pub outputs: fn(&Inputs<'_>) -> R<Vec<Expected>>,
}

/// The models, by workload name.
pub const MODELS: &[Model] = &[
    Model {
        workload: "attention",
        what: "naive softmax attention per (batch, head)",
        outputs: attention,
    },
    Model {
        workload: "llama_layer",
        what: "the LLaMA layer as plain matrix products",
        outputs: llama_layer,
    },
    Model {
        workload: "moe",
        what: "a dense mixture of experts masked by the routing",
        outputs: moe,
    },
    Model {
        workload: "moe_routed",
        what: "a dense mixture of experts masked by the top-2 routing of its own logits",
        outputs: moe_routed,
    },
    Model {
        workload: "deepseek_indexer",
        what: "the prologs as matrix products, the indexer's top-k of its scores, attention over those keys",
        outputs: deepseek_indexer,
    },
    Model {
        workload: "flash_decode",
        what: "decode attention over each request's whole KV sequence",
        outputs: flash_decode,
    },
    Model {
        workload: "decode_planned",
        what: "decode attention over each request's whole KV sequence",
        outputs: decode_planned,
    },
];

/// The model of workload `name`.
pub fn model(name: &str) -> Option<&'static Model> {
    MODELS.iter().find(|m| m.workload == name)
}

/// The largest error allowed, relative to the largest magnitude of the expected output
/// (`max |run − expected| ≤ tolerance · max |expected|`), for an output of element type `t`:
/// the kernels round every intermediate tensor to its element type, the model does not.
pub fn tolerance(t: DType) -> f64 {
    match t {
        DType::F64 | DType::F32 => 1e-4,
        DType::F16 => 2e-2,
        DType::Bf16 => 5e-2,
        // Integer outputs: exact up to rounding of the last step.
        _ => 1e-6,
    }
}

/// `a` (m×k) · `b` (k×n).
fn matmul(a: &[f64], m: usize, k: usize, b: &[f64], n: usize) -> Vec<f64> {
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
        }
    }
    y
}

fn softmax(row: &mut [f64]) {
    let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = row.iter().map(|x| (x - mx).exp()).sum();
    row.iter_mut().for_each(|x| *x = (*x - mx).exp() / sum);
}

/// Softmax attention of `q` (sq×d) over `k`, `v` (sk×d).
fn attend(q: &[f64], k: &[f64], v: &[f64], sq: usize, sk: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; sq * d];
    for i in 0..sq {
        let mut s: Vec<f64> = (0..sk)
            .map(|j| (0..d).map(|x| q[i * d + x] * k[j * d + x]).sum::<f64>() / (d as f64).sqrt())
            .collect();
        softmax(&mut s);
        for x in 0..d {
            out[i * d + x] = (0..sk).map(|j| s[j] * v[j * d + x]).sum();
        }
    }
    out
}

fn attention(x: &Inputs<'_>) -> R<Vec<Expected>> {
    let (q, shape) = x.tensor("Q", 4)?;
    let (k, ks) = x.tensor("K", 4)?;
    let (v, vs) = x.tensor("V", 4)?;
    if ks != vs || ks[..2] != shape[..2] || ks[3] != shape[3] {
        return Err(format!("Q {shape:?}, K {ks:?} and V {vs:?} do not fit"));
    }
    let (heads, sq, sk, d) = (shape[0] * shape[1], shape[2], ks[2], shape[3]);
    let mut o = Vec::with_capacity(heads * sq * d);
    for h in 0..heads {
        o.extend(attend(
            &q[h * sq * d..(h + 1) * sq * d],
            &k[h * sk * d..(h + 1) * sk * d],
            &v[h * sk * d..(h + 1) * sk * d],
            sq,
            sk,
            d,
        ));
    }
    Ok(vec![Expected {
        tensor: "O".into(),
        values: o,
    }])
}

fn rmsnorm(x: &[f64], d: usize) -> Vec<f64> {
    x.chunks(d)
        .flat_map(|row| {
            let ms = row.iter().map(|a| a * a).sum::<f64>() / d as f64;
            let r = 1.0 / (ms + f64::from(RMS_EPS)).sqrt();
            row.iter().map(move |a| a * r)
        })
        .collect()
}

fn rope(x: &mut [f64], d: usize) {
    for (pos, row) in x.chunks_mut(d).enumerate() {
        for i in 0..d / 2 {
            let (s, c) = rope_angle(pos as f64, i, d).sin_cos();
            let (a, b) = (row[2 * i], row[2 * i + 1]);
            row[2 * i] = a * c - b * s;
            row[2 * i + 1] = a * s + b * c;
        }
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn llama_layer(x: &Inputs<'_>) -> R<Vec<Expected>> {
    let (xs, xd) = x.tensor("X", 2)?;
    let (n, d) = (xd[0], xd[1]);
    let (wqkv, _) = x.tensor("Wqkv", 3)?;
    let (wo, _) = x.tensor("Wo", 2)?;
    let (wgu, gd) = x.tensor("Wgu", 3)?;
    let (wd, _) = x.tensor("Wd", 2)?;
    let f = gd[2];
    let w = |i: usize| &wqkv[i * d * d..(i + 1) * d * d];
    let xn = rmsnorm(&xs, d);
    let mut q = matmul(&xn, n, d, w(0), d);
    let mut k = matmul(&xn, n, d, w(1), d);
    let v = matmul(&xn, n, d, w(2), d);
    rope(&mut q, d);
    rope(&mut k, d);
    let a = attend(&q, &k, &v, n, n, d);
    let mut h = matmul(&a, n, d, &wo, d);
    h.iter_mut().zip(&xs).for_each(|(h, x)| *h += x);
    let hn = rmsnorm(&h, d);
    let g = matmul(&hn, n, d, &wgu[..d * f], f);
    let u = matmul(&hn, n, d, &wgu[d * f..], f);
    let gu: Vec<f64> = g.iter().zip(&u).map(|(g, u)| silu(*g) * u).collect();
    let mut y = matmul(&gu, n, f, &wd, d);
    y.iter_mut().zip(&h).for_each(|(y, h)| *y += h);
    Ok(vec![
        Expected {
            tensor: "A".into(),
            values: a,
        },
        Expected {
            tensor: "H".into(),
            values: h,
        },
        Expected {
            tensor: "Y".into(),
            values: y,
        },
    ])
}

fn moe(x: &Inputs<'_>) -> R<Vec<Expected>> {
    let routes = x.array("token_experts")?;
    let (out, _) = moe_layer(x, |_, _| Ok(routes.clone()))?;
    Ok(vec![Expected {
        tensor: "out".into(),
        values: out,
    }])
}

/// The mixture of experts with its routing computed from the router's logits, as
/// `route_top2` does (each token's two largest logits among the experts below `active`,
/// expert `hot` first when it is one of them; ties to the lower expert), and the routing
/// itself: by token and as the CSR matrix by expert the workload reads back.
fn moe_routed(x: &Inputs<'_>) -> R<Vec<Expected>> {
    let active = x.scalar("active")? as usize;
    let hot = x.scalar("hot")? as usize;
    let (out, (routes, e)) = moe_layer(x, |logits, e| {
        let t = logits.len() / e;
        let mut routes = Vec::with_capacity(2 * t);
        for tok in 0..t {
            let score = |c: usize| {
                if c == hot {
                    f64::INFINITY
                } else {
                    logits[tok * e + c]
                }
            };
            // Stable: among equal scores the lower expert comes first.
            let mut order: Vec<usize> = (0..active.clamp(2, e)).collect();
            order.sort_by(|&a, &b| score(b).total_cmp(&score(a)));
            routes.extend([order[0] as i64, order[1] as i64]);
        }
        Ok(routes)
    })?;
    let mut ptr = vec![0.0; e + 1];
    let mut by_expert = vec![];
    for c in 0..e {
        for (i, &r) in routes.iter().enumerate() {
            if r as usize == c {
                by_expert.push((i / 2) as f64);
            }
        }
        ptr[c + 1] = by_expert.len() as f64;
    }
    Ok(vec![
        Expected {
            tensor: "out".into(),
            values: out,
        },
        Expected {
            tensor: "token_experts".into(),
            values: routes.iter().map(|&r| r as f64).collect(),
        },
        Expected {
            tensor: "expert_ptr".into(),
            values: ptr,
        },
        Expected {
            tensor: "expert_tokens".into(),
            values: by_expert,
        },
    ])
}

/// A routing: each token's experts, k per token, and the expert count.
type Routing = (Vec<i64>, usize);

/// A mixture-of-experts layer over tensors `x`, `w_router`, `w_gate` and `w_down`: every
/// expert's FFN on every token, combined per token over the experts `route` gives it (k per
/// token, from the router's logits and the expert count) weighted by the softmax of their
/// logits. Returns the output and the routing with the expert count.
fn moe_layer(
    x: &Inputs<'_>,
    route: impl FnOnce(&[f64], usize) -> R<Vec<i64>>,
) -> R<(Vec<f64>, Routing)> {
    let (xs, xd) = x.tensor("x", 2)?;
    let (t, d) = (xd[0], xd[1]);
    let (wr, wrd) = x.tensor("w_router", 2)?;
    let e = wrd[1];
    let (wg, wgd) = x.tensor("w_gate", 3)?;
    let f = wgd[2];
    let (wdn, _) = x.tensor("w_down", 3)?;
    let logits = matmul(&xs, t, d, &wr, e);
    let routes = route(&logits, e)?;
    // Dense: every expert on every token.
    let ffn: Vec<Vec<f64>> = (0..e)
        .map(|ex| {
            let h: Vec<f64> = matmul(&xs, t, d, &wg[ex * d * f..(ex + 1) * d * f], f)
                .into_iter()
                .map(silu)
                .collect();
            matmul(&h, t, f, &wdn[ex * f * d..(ex + 1) * f * d], d)
        })
        .collect();
    if t == 0 || routes.len() % t != 0 {
        return Err(format!(
            "token_experts has {} entries for {t} tokens",
            routes.len()
        ));
    }
    let k = routes.len() / t;
    let mut out = vec![0.0; t * d];
    for tok in 0..t {
        let chosen = &routes[tok * k..(tok + 1) * k];
        if let Some(bad) = chosen.iter().find(|&&c| c < 0 || c as usize >= e) {
            return Err(format!(
                "token {tok} is routed to expert {bad}, not one of {e}"
            ));
        }
        let mut g: Vec<f64> = chosen
            .iter()
            .map(|&c| logits[tok * e + c as usize])
            .collect();
        softmax(&mut g);
        for (&c, gi) in chosen.iter().zip(&g) {
            for j in 0..d {
                out[tok * d + j] += gi * ffn[c as usize][tok * d + j];
            }
        }
    }
    Ok((out, (routes, e)))
}

/// DeepSeek V3.2's indexer attention, causal: the prologs' products (compared with the run's
/// within the tolerance), the indexer's choice — each query's `K` keys of largest score among
/// keys `0 ..= t`, `Σ_h wt[t,h]·relu(qi[t,h]·ki[s])`, ties to the lower key, -1 past them —
/// computed in `f64` from the run's stored indexer tensors (a choice between two nearly equal
/// scores must not depend on the model's own rounding; the stored tensors are themselves
/// compared), exactly; and attention over the chosen keys from the model's own q and kv.
fn deepseek_indexer(x: &Inputs<'_>) -> R<Vec<Expected>> {
    let (xs, xd) = x.tensor("x", 2)?;
    let (s, d) = (xd[0], xd[1]);
    let (wq, wqd) = x.tensor("w_q", 2)?;
    let dk = wqd[1];
    let (wkv, _) = x.tensor("w_kv", 2)?;
    let (wqi, wqid) = x.tensor("w_qi", 2)?;
    let (wki, wkid) = x.tensor("w_ki", 2)?;
    let (ww, wwd) = x.tensor("w_w", 2)?;
    let (qn, di, heads) = (wqid[1], wkid[1], wwd[1]);
    if heads * di != qn {
        return Err(format!(
            "{qn} indexer query columns for {heads} heads of {di}"
        ));
    }
    let q = matmul(&xs, s, d, &wq, dk);
    let kv = matmul(&xs, s, d, &wkv, dk);
    // The indexer's inputs as the run stored them decide the choice.
    let (qi, _) = x.tensor("qi", 2)?;
    let (ki, _) = x.tensor("ki", 2)?;
    let (wt, _) = x.tensor("wt", 2)?;
    let (_, idxd) = x.tensor("idx", 2)?;
    let k = idxd[1];
    let mut idx = vec![-1.0; s * k];
    let mut o = vec![0.0; s * dk];
    for t in 0..s {
        let score = |key: usize| -> f64 {
            (0..heads)
                .map(|h| {
                    let dot: f64 = (0..di)
                        .map(|j| qi[t * qn + h * di + j] * ki[key * di + j])
                        .sum();
                    wt[t * heads + h] * dot.max(0.0)
                })
                .sum()
        };
        let mut keys: Vec<(f64, usize)> = (0..=t).map(|key| (score(key), key)).collect();
        // Larger score first; equal scores: the lower key first.
        keys.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let chosen: Vec<usize> = keys.iter().take(k).map(|&(_, key)| key).collect();
        for (i, &key) in chosen.iter().enumerate() {
            idx[t * k + i] = key as f64;
        }
        let mut sc: Vec<f64> = chosen
            .iter()
            .map(|&key| {
                (0..dk)
                    .map(|j| q[t * dk + j] * kv[key * dk + j])
                    .sum::<f64>()
                    / (dk as f64).sqrt()
            })
            .collect();
        softmax(&mut sc);
        for (&key, w) in chosen.iter().zip(&sc) {
            for j in 0..dk {
                o[t * dk + j] += w * kv[key * dk + j];
            }
        }
    }
    let expected = |tensor: &str, values: Vec<f64>| Expected {
        tensor: tensor.into(),
        values,
    };
    Ok(vec![
        expected("q", q),
        expected("kv", kv),
        expected("qi", matmul(&xs, s, d, &wqi, qn)),
        expected("ki", matmul(&xs, s, d, &wki, di)),
        expected("wt", matmul(&xs, s, d, &ww, heads)),
        expected("idx", idx),
        expected("o", o),
    ])
}

fn flash_decode(x: &Inputs<'_>) -> R<Vec<Expected>> {
    // `[B, pages, H, page, D]`: token j of head h is row j % page of page j / page.
    decode_attention(
        x,
        5,
        |kd| kd[1] * kd[3],
        |kd, r, h, j| ((r * kd[1] + j / kd[3]) * kd[2] + h) * kd[3] + j % kd[3],
    )
}

/// `examples/decode_planned.pto`: each request's first `kv_len[b]` tokens of its contiguous
/// KV cache (`[B, H, max_len, D]`), whatever chunks the plan cut them into; no token, a zero
/// output.
fn decode_planned(x: &Inputs<'_>) -> R<Vec<Expected>> {
    decode_attention(x, 4, |kd| kd[2], |kd, r, h, j| (r * kd[1] + h) * kd[2] + j)
}

/// Decode attention per (request, head): the query `q[b, h]` over the request's first
/// `kv_len[b]` tokens (at most `capacity(k's shape)`), token `j` of head `h` of request `r`
/// being row `row(k's shape, r, h, j)` of the `rank`-dimensional caches `k_cache`, `v_cache`.
fn decode_attention(
    x: &Inputs<'_>,
    rank: usize,
    capacity: impl Fn(&[usize]) -> usize,
    row: impl Fn(&[usize], usize, usize, usize) -> usize,
) -> R<Vec<Expected>> {
    let (q, qd) = x.tensor("q", 3)?;
    let (k, kd) = x.tensor("k_cache", rank)?;
    let (v, _) = x.tensor("v_cache", rank)?;
    let lens = x.array("kv_len")?;
    let (b, heads, d) = (qd[0], qd[1], qd[2]);
    if lens.len() != b {
        return Err(format!(
            "kv_len has {} entries for {b} requests",
            lens.len()
        ));
    }
    let mut out = Vec::with_capacity(b * heads * d);
    for (r, &len) in lens.iter().enumerate() {
        let len = len.clamp(0, capacity(&kd) as i64) as usize;
        for h in 0..heads {
            let rows = |cache: &[f64]| -> Vec<f64> {
                (0..len)
                    .flat_map(|j| {
                        let at = row(&kd, r, h, j) * d;
                        cache[at..at + d].to_vec()
                    })
                    .collect()
            };
            let qh = &q[(r * heads + h) * d..(r * heads + h + 1) * d];
            out.extend(attend(qh, &rows(&k), &rows(&v), 1, len, d));
        }
    }
    Ok(vec![Expected {
        tensor: "out".into(),
        values: out,
    }])
}
