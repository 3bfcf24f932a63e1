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
    let (xs, xd) = x.tensor("x", 2)?;
    let (t, d) = (xd[0], xd[1]);
    let (wr, wrd) = x.tensor("w_router", 2)?;
    let e = wrd[1];
    let (wg, wgd) = x.tensor("w_gate", 3)?;
    let f = wgd[2];
    let (wdn, _) = x.tensor("w_down", 3)?;
    let routes = x.array("token_experts")?;
    let logits = matmul(&xs, t, d, &wr, e);
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
    Ok(vec![Expected {
        tensor: "out".into(),
        values: out,
    }])
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
