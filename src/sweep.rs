//! `ptovm sweep`: one workload modelled (spec/runtime.md §9) under every combination of the
//! schedule knobs given, so a user picks a schedule by what it would cost on the NPU. Points
//! run on the host's cores; the output — a table best first, CSV in sweep order, JSON — is the
//! same for the same inputs.

use std::path::{Path, PathBuf};

use ptovm_assembler::{Module, Options as AsmOptions};
use ptovm_host_sim::model::{self, ModelReport};
use ptovm_host_sim::sim;
use ptovm_vm::Verified;
use serde_json::json;

use crate::model::{duration, machine_and_costs, ModelArgs};
use crate::{Exit, Fail};

/// The knobs a sweep varies, in the order the table shows them.
pub const KNOBS: [&str; 8] = [
    "dispatch",
    "aicpus",
    "cores",
    "window",
    "start",
    "pipeline_depth",
    "stealing",
    "batch_deps",
];

/// The most points one sweep runs.
pub const MAX_POINTS: usize = 4096;

/// What `ptovm sweep` was asked for.
pub struct Ask {
    /// The module's text (`None`: bytecode, whose dispatch is compiled) and its name.
    pub source: Option<(String, String)>,
    /// The program as given (its own dispatch).
    pub bytes: Vec<u8>,
    /// `--param NAME=VALUE`.
    pub params: Vec<String>,
    /// `--vary KNOB=V1,V2,...`, in the order given.
    pub vary: Vec<String>,
    /// The machine and the cost table.
    pub model: ModelArgs,
    /// Where to write CSV.
    pub csv: Option<PathBuf>,
    /// JSON instead of the table.
    pub json: bool,
    /// The task budget of each point.
    pub max_tasks: u64,
}

/// One knob's values: (name, values as given).
type Axis = (String, Vec<String>);

/// Splits `KNOB=V1,V2,...` at commas outside parentheses (`dispatch=affinity(t),hash(b, h)`).
fn parse_vary(arg: &str) -> Result<Axis, Fail> {
    let usage = |m: String| Fail(Exit::Usage, format!("error: --vary {arg}: {m}"));
    let (knob, list) = arg
        .split_once('=')
        .ok_or_else(|| usage("expected KNOB=VALUE,VALUE,...".into()))?;
    let knob = knob.trim();
    if !KNOBS.contains(&knob) {
        return Err(usage(format!(
            "unknown knob `{knob}` (the knobs: {})",
            KNOBS.join(", ")
        )));
    }
    let mut values = vec![];
    let (mut depth, mut cur) = (0i32, String::new());
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                values.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    values.push(cur.trim().to_string());
    if values.iter().any(|v| v.is_empty()) {
        return Err(usage("an empty value".into()));
    }
    Ok((knob.to_string(), values))
}

/// One point of the sweep: a value for each varied knob.
#[derive(Clone, Debug)]
struct Point(Vec<(String, String)>);

impl Point {
    fn get(&self, knob: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == knob)
            .map(|(_, v)| v.as_str())
    }

    fn label(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A point's settings on top of the program's schedule.
fn options(v: &Verified<'_>, p: &Point) -> Result<sim::Options, Fail> {
    let mut o = sim::Options::of_program(v, 24, 48, ptovm_host_sim::DepMode::Overlap);
    let bad = |knob: &str, value: &str, why: &str| {
        Fail(Exit::Usage, format!("error: --vary {knob}={value}: {why}"))
    };
    for (k, value) in &p.0 {
        let num = |lo: u64, hi: u64| {
            value
                .parse::<u64>()
                .ok()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| bad(k, value, &format!("expected an integer in {lo}..={hi}")))
        };
        match k.as_str() {
            "aicpus" => o.aicpus = num(1, 64)? as u32,
            "window" => o.window = num(1, 65_536)? as usize,
            "pipeline_depth" => o.pipeline_depth = num(0, u32::MAX as u64)? as u32,
            "batch_deps" => o.batch_deps = num(0, u32::MAX as u64)? as u32,
            "start" => o.start = crate::parse_start(value).map_err(|e| bad(k, value, &e))?,
            "cores" => {
                o.cores = match value.as_str() {
                    "shared" => sim::CoreAlloc::Shared,
                    "partition" => sim::CoreAlloc::Partition,
                    _ => return Err(bad(k, value, "expected shared or partition")),
                }
            }
            "stealing" => {
                o.work_steal = match value.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad(k, value, "expected on or off")),
                }
            }
            _ => {} // dispatch: in the program
        }
    }
    Ok(o)
}

/// What one point measured.
struct Measured {
    makespan_ns: u64,
    lower_bound_ns: u64,
    efficiency: f64,
    cube: f64,
    vector: f64,
    aicpu_busy: f64,
    tasks: u64,
}

impl Measured {
    fn of(r: &ModelReport) -> Measured {
        Measured {
            makespan_ns: r.makespan_ns,
            lower_bound_ns: r.lower_bound_ns(),
            efficiency: r.efficiency(),
            cube: r.pools[0].utilization(r.makespan_ns),
            vector: r.pools[1].utilization(r.makespan_ns),
            aicpu_busy: r.aicpu_busy(),
            tasks: r.run.tasks_total,
        }
    }
}

/// Runs the sweep and renders it; writes the CSV (whole, or not at all) once every point ran.
pub fn sweep(ask: &Ask) -> Result<String, Fail> {
    let mut axes: Vec<Axis> = vec![];
    for a in &ask.vary {
        let axis = parse_vary(a)?;
        if axes.iter().any(|(k, _)| *k == axis.0) {
            return Err(Fail(
                Exit::Usage,
                format!("error: --vary {}: the knob is varied twice", axis.0),
            ));
        }
        axes.push(axis);
    }
    if axes.is_empty() {
        return Err(Fail(
            Exit::Usage,
            format!(
                "error: nothing to sweep: give --vary KNOB=V1,V2,... (the knobs: {})",
                KNOBS.join(", ")
            ),
        ));
    }
    axes.sort_by_key(|(k, _)| KNOBS.iter().position(|x| x == k));
    let count = axes
        .iter()
        .try_fold(1usize, |n, (_, v)| n.checked_mul(v.len()))
        .filter(|&n| n <= MAX_POINTS)
        .ok_or_else(|| {
            Fail(
                Exit::Usage,
                format!("error: the sweep has more than {MAX_POINTS} points"),
            )
        })?;
    // Every combination, the first knob varying slowest.
    let points: Vec<Point> = (0..count)
        .map(|mut i| {
            let mut p = vec![(String::new(), String::new()); axes.len()];
            for (j, (k, vals)) in axes.iter().enumerate().rev() {
                p[j] = (k.clone(), vals[i % vals.len()].clone());
                i /= vals.len();
            }
            Point(p)
        })
        .collect();
    // Each dispatch policy's program, assembled once.
    let dispatches: Vec<Option<String>> = match axes.iter().find(|(k, _)| k == "dispatch") {
        Some((_, vals)) => vals.iter().cloned().map(Some).collect(),
        None => vec![None],
    };
    let mut programs = vec![];
    for d in &dispatches {
        programs.push(program(ask, d.as_deref())?);
    }
    // The machine, and each program's kernel durations, before any point runs (the files are
    // read once a program: a bad one fails the sweep before it starts).
    let mut costs = vec![];
    let mut machine = None;
    for (bytes, _) in &programs {
        let v = ptovm_vm::verify(bytes).map_err(|e| internal(&e.to_string()))?;
        let (m, c) = machine_and_costs(&v, &ask.model, None, None)?;
        machine = Some(m);
        costs.push(c);
    }
    let machine = machine.unwrap_or_default();
    let run_point = |p: &Point| -> Result<Measured, Fail> {
        let k = dispatches
            .iter()
            .position(|d| d.as_deref() == p.get("dispatch"))
            .unwrap_or(0);
        let (bytes, module) = &programs[k];
        let v = ptovm_vm::verify(bytes).map_err(|e| internal(&e.to_string()))?;
        let owned = crate::expand::parse_params(module, &ask.params)
            .map_err(|e| Fail(Exit::Params, format!("error: {e}")))?;
        let vals = crate::expand::values(&owned);
        let params = crate::budget::params(&v, &vals, ask.max_tasks)?;
        let mut o = options(&v, p)?;
        if p.get("aicpus").is_none() {
            o.aicpus = o.aicpus.min(machine.aicpus);
        }
        model::simulate(v, params, o, &machine, &costs[k])
            .map(|r| Measured::of(&r))
            .map_err(crate::run::sim_fail)
    };
    // An error names the point it happened at.
    let run_point = |p: &Point| {
        run_point(p).map_err(|Fail(code, msg)| Fail(code, format!("{msg} (at {})", p.label())))
    };
    // The points on the host's cores, each result in its place.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(points.len());
    let mut results: Vec<Option<Result<Measured, Fail>>> =
        (0..points.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let chunks: Vec<_> = results
            .chunks_mut(points.len().div_ceil(threads))
            .enumerate()
            .map(|(c, out)| {
                let (points, run_point) = (&points, &run_point);
                s.spawn(move || {
                    let base = c * points.len().div_ceil(threads);
                    for (i, slot) in out.iter_mut().enumerate() {
                        *slot = Some(run_point(&points[base + i]));
                    }
                })
            })
            .collect();
        for h in chunks {
            let _ = h.join();
        }
    });
    let mut measured = vec![];
    for r in results {
        measured.push(r.unwrap_or_else(|| Err(internal("a sweep thread stopped")))?);
    }
    let csv = csv_text(&axes, &points, &measured);
    if let Some(path) = &ask.csv {
        crate::write_out(path, csv.as_bytes())?;
    }
    if ask.json {
        let rows: Vec<_> = points
            .iter()
            .zip(&measured)
            .map(|(p, m)| {
                let knobs: serde_json::Map<String, serde_json::Value> =
                    p.0.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
                json!({
                    "knobs": knobs,
                    "makespan_ns": m.makespan_ns,
                    "lower_bound_ns": m.lower_bound_ns,
                    "efficiency": m.efficiency,
                    "cube_utilization": m.cube,
                    "vector_utilization": m.vector,
                    "aicpu_busy": m.aicpu_busy,
                    "tasks": m.tasks,
                })
            })
            .collect();
        let out = json!({
            "workload": programs[0].1.workload,
            "machine": { "aicpus": machine.aicpus, "cube_cores": machine.cube_cores, "vector_cores": machine.vector_cores },
            "points": rows,
        });
        return Ok(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n");
    }
    Ok(table(&programs[0].1, &axes, &points, &measured))
}

fn internal(e: &str) -> Fail {
    Fail(Exit::Internal, format!("internal error: {e}"))
}

/// The program for dispatch policy `dispatch` (its own when `None`).
fn program(ask: &Ask, dispatch: Option<&str>) -> Result<(Vec<u8>, Module), Fail> {
    let bytes = match (dispatch, &ask.source) {
        (None, _) => ask.bytes.clone(),
        (Some(_), None) => {
            return Err(Fail(
                Exit::Usage,
                "error: --vary dispatch needs `.pto` text: a bytecode file's dispatch policy is compiled".into(),
            ))
        }
        (Some(d), Some((name, src))) => {
            let mut o = AsmOptions::default();
            o.overrides.dispatch = Some(d.to_string());
            ptovm_assembler::assemble(name, src, &o)
                .map_err(|e| Fail(Exit::Text, format!("{e}\n(with --vary dispatch={d})")))?
                .bytes
        }
    };
    let v = ptovm_vm::verify(&bytes).map_err(|e| internal(&e.to_string()))?;
    let m = Module::decode(&v);
    Ok((bytes, m))
}

/// Escapes a CSV field (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_text(axes: &[Axis], points: &[Point], measured: &[Measured]) -> String {
    let mut s: String = axes.iter().map(|(k, _)| format!("{k},")).collect();
    s += "makespan_ns,lower_bound_ns,efficiency,cube_utilization,vector_utilization,aicpu_busy,tasks\n";
    for (p, m) in points.iter().zip(measured) {
        for (_, v) in &p.0 {
            s += &field(v);
            s.push(',');
        }
        s += &format!(
            "{},{},{:.4},{:.4},{:.4},{:.4},{}\n",
            m.makespan_ns, m.lower_bound_ns, m.efficiency, m.cube, m.vector, m.aicpu_busy, m.tasks
        );
    }
    s
}

/// The table, best (shortest makespan) first; ties in sweep order.
fn table(m: &Module, axes: &[Axis], points: &[Point], measured: &[Measured]) -> String {
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&i| measured[i].makespan_ns);
    let widths: Vec<usize> = axes
        .iter()
        .map(|(k, vals)| {
            vals.iter()
                .map(|v| v.len())
                .chain([k.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = format!(
        "{}: {} points, modelled (simulated time), best first\n",
        m.workload,
        points.len()
    );
    for ((k, _), w) in axes.iter().zip(&widths) {
        s += &format!("{k:<w$}  ");
    }
    s += &format!(
        "{:>10}  {:>12}  {:>11}  {:>6}  {:>6}  {:>6}\n",
        "makespan", "lower bound", "efficiency", "cube", "vector", "AICPUs"
    );
    for i in order {
        let (p, r) = (&points[i], &measured[i]);
        for ((_, v), w) in p.0.iter().zip(&widths) {
            s += &format!("{v:<w$}  ");
        }
        s += &format!(
            "{:>10}  {:>12}  {:>9.1} %  {:>4.0} %  {:>4.0} %  {:>4.0} %\n",
            duration(r.makespan_ns),
            duration(r.lower_bound_ns),
            r.efficiency * 100.0,
            r.cube * 100.0,
            r.vector * 100.0,
            r.aicpu_busy * 100.0
        );
    }
    s
}

/// The input's text when it is `.pto` (dispatch can then be varied), for `ask.source`.
pub fn source_of(input: Option<&Path>, llama: &str) -> Result<Option<(String, String)>, Fail> {
    let Some(path) = input else {
        return Ok(Some((
            "examples/llama_layer.pto".to_string(),
            llama.to_string(),
        )));
    };
    let bytes = crate::read(path)?;
    if bytes.starts_with(&ptovm_vm::MAGIC.to_le_bytes()) {
        return Ok(None);
    }
    Ok(String::from_utf8(bytes)
        .ok()
        .map(|t| (path.display().to_string(), t)))
}
