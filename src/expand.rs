//! `ptovm expand`: per-AICPU expansion of a program, checked against the reference expander,
//! with the dependency graph.

use std::fmt::Write as _;

use ptovm_assembler::Module;
use ptovm_host_sim::{edges, reference_expand, DepMode, Edge, RefTask};
use ptovm_vm::{Dir, Interpreter, ParamKind, RuntimeParams, Sink, Status, Task, Value, Verified};
use serde_json::json;

use crate::{launch_err, run_err, Exit, Fail};

/// Most tasks `expand` holds in memory (the reference expansion keeps every task: ~1 KB each
/// with its regions, so 4 M tasks is about 4 GB).
pub const MAX_TASKS: u64 = 4_000_000;

/// The runtime values that [`parse_params`]'s result stands for (borrowing its arrays).
pub fn values(owned: &[(ParamKind, u32, Vec<u32>)]) -> Vec<Value<'_>> {
    owned
        .iter()
        .map(|(k, s, a)| match k {
            ParamKind::Scalar => Value::Scalar(*s),
            ParamKind::Array => Value::Array(a),
        })
        .collect()
}

/// Parses `--param name=value` arguments against the program's slots: a scalar is a u32, an
/// array a comma-separated list of u32 (`[1,2,3]` or `1,2,3`; empty for no entries). A slot
/// given no value takes its default (`@param` in the module); one with neither is an error.
pub fn parse_params(
    m: &Module,
    given: &[String],
) -> Result<Vec<(ParamKind, u32, Vec<u32>)>, String> {
    let mut vals: Vec<Option<(ParamKind, u32, Vec<u32>)>> = vec![None; m.params.len()];
    for g in given {
        let Some((name, value)) = g.split_once('=') else {
            return Err(format!("--param {g:?}: expected NAME=VALUE"));
        };
        if m.plans.iter().any(|p| p.name == name) {
            return Err(format!(
                "--param {name}: `{name}` is a planned value (`@plan`), computed at launch from the runtime parameters; it cannot be given"
            ));
        }
        let Some(slot) = m.params.iter().position(|p| p.name == name) else {
            let names: Vec<&str> = m.params.iter().map(|p| p.name.as_str()).collect();
            return Err(format!(
                "--param {name}: the program has no runtime parameter `{name}` (it has: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ));
        };
        if vals[slot].is_some() {
            return Err(format!("--param {name}: given twice"));
        }
        let kind = m.params[slot].kind;
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("--param {name}: {s:?} is not an unsigned 32-bit integer"))
        };
        vals[slot] = Some(match kind {
            ParamKind::Scalar => (kind, num(value)?, vec![]),
            ParamKind::Array => {
                let inner = value.trim().trim_start_matches('[').trim_end_matches(']');
                let items = if inner.trim().is_empty() {
                    vec![]
                } else {
                    inner
                        .split(',')
                        .map(num)
                        .collect::<Result<Vec<u32>, String>>()?
                };
                (kind, 0, items)
            }
        });
    }
    vals.into_iter()
        .enumerate()
        .map(|(i, v)| {
            let p = &m.params[i];
            let default = p.default.as_ref().map(|d| match p.kind {
                ParamKind::Scalar => (p.kind, d.first().copied().unwrap_or(0), vec![]),
                ParamKind::Array => (p.kind, 0, d.clone()),
            });
            v.or(default).ok_or_else(|| {
                let example = if p.kind == ParamKind::Scalar {
                    "4"
                } else {
                    "1,2,3"
                };
                format!(
                    "missing runtime parameter `{}` ({}): pass --param {}={example}, or give it a default in the module (`@param {} = {}`)",
                    p.name,
                    p.kind.name(),
                    p.name,
                    p.name,
                    if p.kind == ParamKind::Scalar { "4" } else { "[1, 2, 3]" }
                )
            })
        })
        .collect()
}

/// What to print.
pub struct Opts {
    pub aicpus: Option<u32>,
    pub aicpu: Option<u32>,
    pub deps: DepMode,
    pub json: bool,
    pub limit: Option<usize>,
    pub summary: bool,
}

/// Checks each emitted task against the reference: owner and contents.
struct Check<'r> {
    aicpu: u32,
    reference: &'r [RefTask],
    bad: Option<String>,
}

impl Sink for Check<'_> {
    fn task(&mut self, t: &Task) -> bool {
        if self.bad.is_none() {
            let r = self.reference.get(t.id as usize);
            let mine = RefTask::from_task(t, self.aicpu);
            if r != Some(&mine) {
                self.bad = Some(format!(
                    "AICPU {} emitted task {} differently from the reference expander",
                    self.aicpu, t.id
                ));
            }
        }
        true
    }
}

/// Runs the expansion and renders it.
pub fn run(v: &Verified<'_>, m: &Module, vals: &[Value<'_>], o: &Opts) -> Result<String, Fail> {
    let p = RuntimeParams::new(v, vals)
        .map_err(|e| Fail(Exit::Params, format!("error: runtime parameters: {e}")))?;
    let n = o.aicpus.unwrap_or(v.config().num_aicpus.get() as u32);
    if n == 0 || n > 64 {
        return Err(Fail(
            Exit::Usage,
            format!("error: --aicpus {n} is outside 1..=64"),
        ));
    }
    if let Some(i) = o.aicpu {
        if i >= n {
            return Err(Fail(
                Exit::Usage,
                format!("error: --aicpu {i} is not below the AICPU count {n}"),
            ));
        }
    }
    // The bound on work, known before anything is expanded.
    crate::budget::check(
        v,
        &p,
        MAX_TASKS,
        &format!("the {MAX_TASKS} `expand` holds in memory"),
    )?;
    let reference = reference_expand(v, &p, n, MAX_TASKS).map_err(run_err)?;
    let mut per = vec![0u64; n as usize];
    let mut visits = vec![0u64; n as usize];
    for i in 0..n {
        let mut it = Interpreter::new(*v, p, i, n).map_err(launch_err)?;
        let mut c = Check {
            aicpu: i,
            reference: &reference,
            bad: None,
        };
        // A READBACK keeps the launch's values here (no task computes).
        while it.run(&mut c, u64::MAX).map_err(run_err)? != Status::Done {}
        if let Some(b) = c.bad {
            return Err(Fail(Exit::Internal, format!("internal error: {b}")));
        }
        per[i as usize] = it.stats().emitted;
        visits[i as usize] = it.stats().visits;
    }
    for (i, c) in per.iter().enumerate() {
        let want = reference.iter().filter(|t| t.owner == i as u32).count() as u64;
        if *c != want {
            return Err(Fail(
                Exit::Internal,
                format!(
                    "internal error: AICPU {i} emitted {c} tasks, the reference gives it {want}"
                ),
            ));
        }
    }
    let es = edges(&reference, o.deps);
    let mut preds: Vec<Vec<u64>> = vec![vec![]; reference.len()];
    for e in &es {
        preds[e.to as usize].push(e.from);
    }
    let listed: Vec<&RefTask> = if o.summary {
        vec![]
    } else {
        reference
            .iter()
            .filter(|t| o.aicpu.is_none_or(|i| t.owner == i))
            .take(o.limit.unwrap_or(usize::MAX))
            .collect()
    };
    let cube = reference
        .iter()
        .filter(|t| t.pool == ptovm_vm::Pool::Cube)
        .count();
    let count = |k: ptovm_host_sim::EdgeKind| es.iter().filter(|e| e.kind == k).count();
    let mode = match o.deps {
        DepMode::Exact => "exact",
        DepMode::Overlap => "overlap",
    };
    let region = |io: &ptovm_vm::Io| {
        let name = &m.tensors[io.tensor as usize].name;
        let dims: Vec<String> = io
            .dims()
            .iter()
            .map(|(a, b)| {
                if b - a == 1 {
                    a.to_string()
                } else {
                    format!("{a}:{b}")
                }
            })
            .collect();
        if dims.is_empty() {
            name.clone()
        } else {
            format!("{name}[{}]", dims.join(", "))
        }
    };
    if o.json {
        let tasks: Vec<serde_json::Value> = listed
            .iter()
            .map(|t| {
                json!({
                    "id": t.id,
                    "kernel": m.kernels[t.kernel as usize].name,
                    "pool": t.pool.name(),
                    "tier": t.tier,
                    "params": t.params,
                    "regions": t.io.iter().map(|io| json!({
                        "tensor": m.tensors[io.tensor as usize].name,
                        "dir": io.direction().name(),
                        "ranges": io.dims().iter().map(|(a, b)| [a, b]).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                    "owner": t.owner,
                    "preds": preds[t.id as usize],
                })
            })
            .collect();
        let edge_list: Vec<serde_json::Value> = if o.summary {
            vec![]
        } else {
            es.iter()
                .map(|e: &Edge| json!([e.from, e.to, e.kind.name()]))
                .collect()
        };
        let out = json!({
            "workload": m.workload,
            "aicpus": n,
            "deps": mode,
            "bytecode_bytes": v.bytes().len(),
            // A task's descriptor packed in a window slot (the largest task site's), in words.
            "descriptor_words": ptovm_vm::desc::slot_words(v),
            "tasks_total": reference.len(),
            "cube_tasks": cube,
            "vector_tasks": reference.len() - cube,
            "edges_total": es.len(),
            "raw_edges": count(ptovm_host_sim::EdgeKind::Raw),
            "waw_edges": count(ptovm_host_sim::EdgeKind::Waw),
            "war_edges": count(ptovm_host_sim::EdgeKind::War),
            "cross_aicpu_edges": es.iter().filter(|e| reference[e.from as usize].owner != reference[e.to as usize].owner).count(),
            "per_aicpu": per,
            "visits_per_aicpu": visits,
            "tasks": tasks,
            "edges": edge_list,
        });
        return Ok(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n");
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} tasks ({} cube, {} vector) from {} bytes of bytecode on {} AICPUs",
        m.workload,
        reference.len(),
        cube,
        reference.len() - cube,
        v.bytes().len(),
        n
    );
    let cross = es
        .iter()
        .filter(|e| reference[e.from as usize].owner != reference[e.to as usize].owner)
        .count();
    let _ = writeln!(
        s,
        "dependencies ({mode} regions): {} edges: {} RAW, {} WAW, {} WAR; {} cross AICPUs",
        es.len(),
        count(ptovm_host_sim::EdgeKind::Raw),
        count(ptovm_host_sim::EdgeKind::Waw),
        count(ptovm_host_sim::EdgeKind::War),
        cross
    );
    for i in 0..n as usize {
        let _ = writeln!(
            s,
            "  AICPU {i}: {} tasks, {} loop-index visits",
            per[i], visits[i]
        );
    }
    if !listed.is_empty() {
        let _ = writeln!(s);
    }
    for t in &listed {
        let params: Vec<String> = t.params.iter().map(|p| p.to_string()).collect();
        let regions: Vec<String> =
            t.io.iter()
                .map(|io| {
                    let d = match io.direction() {
                        Dir::In => "in",
                        Dir::Out => "out",
                        Dir::InOut => "inout",
                    };
                    format!("{d} {}", region(io))
                })
                .collect();
        let pr = &preds[t.id as usize];
        let after = if pr.is_empty() {
            String::new()
        } else {
            format!(
                "  after {}",
                pr.iter()
                    .map(|x| format!("#{x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        };
        let _ = writeln!(
            s,
            "#{:<6} AICPU {:<2} {:<6} {}({})  {}{}",
            t.id,
            t.owner,
            t.pool.name(),
            m.kernels[t.kernel as usize].name,
            params.join(", "),
            regions.join(", "),
            after
        );
    }
    let shown = listed.len();
    let all = reference
        .iter()
        .filter(|t| o.aicpu.is_none_or(|i| t.owner == i))
        .count();
    if !o.summary && shown < all {
        let _ = writeln!(
            s,
            "... {} more tasks (raise --limit or use --summary)",
            all - shown
        );
    }
    Ok(s)
}
