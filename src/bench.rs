//! `ptovm bench`: the figures of issue 4's performance section for one program — generation
//! alone and generation plus complete dependency building on one instance
//! (`ptovm_host_sim::measure`), the threaded run as `ptovm run` does it, and the same run
//! writing each task's descriptor (as a run with kernels does) — each taken `runs` times. A
//! round takes the four one after another, so a change in the machine's load falls on all
//! alike; the summary gives the fastest, median and slowest round.

use ptovm_assembler::Module;
use ptovm_host_sim::measure::{self, MeasureError, Measured};
use ptovm_host_sim::{sim, DepMode};
use ptovm_vm::{Value, Verified};
use serde_json::json;

use crate::{Exit, Fail};

/// Cube and vector cores of the threaded run (the 910B's, as `ptovm run`'s defaults).
const CUBE: u32 = 24;
const VECTOR: u32 = 48;

/// The rates of one measurement over the rounds, and what every round found.
#[derive(Default)]
struct Series {
    rates: Vec<f64>,
    tasks: u64,
    edges: u64,
}

impl Series {
    fn add(&mut self, m: Measured) {
        self.rates.push(m.tasks_per_ms());
        self.tasks = m.tasks;
        self.edges = m.edges;
    }

    /// Fastest, median and slowest rate (tasks/ms).
    fn summary(&self) -> (f64, f64, f64) {
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        let n = r.len();
        if n == 0 {
            return (0.0, 0.0, 0.0);
        }
        let median = if n % 2 == 1 {
            r[n / 2]
        } else {
            (r[n / 2 - 1] + r[n / 2]) / 2.0
        };
        (r[n - 1], median, r[0])
    }

    fn json(&self) -> serde_json::Value {
        let (fastest, median, slowest) = self.summary();
        json!({
            "tasks": self.tasks,
            "edges": self.edges,
            "tasks_per_ms": self.rates,
            "fastest": fastest,
            "median": median,
            "slowest": slowest,
        })
    }
}

fn measure_fail(e: MeasureError) -> Fail {
    match e {
        MeasureError::Launch(ptovm_vm::LaunchError::Params(e)) => {
            Fail(Exit::Params, format!("error: runtime parameters: {e}"))
        }
        MeasureError::Map(e) => Fail(Exit::Internal, format!("internal error: TensorMap: {e}")),
        other => Fail(Exit::Failed, format!("error: {other}")),
    }
}

/// Measures and renders. Errors carry their exit code.
pub fn bench(
    v: &Verified<'_>,
    m: &Module,
    vals: &[Value<'_>],
    runs: u32,
    json: bool,
    max_tasks: u64,
) -> Result<String, Fail> {
    let p = crate::budget::params(v, vals, max_tasks)?;
    let o = ptovm_host_sim::sim::Options::of_program(v, CUBE, VECTOR, DepMode::Overlap);
    let window = o.window as u32;
    let (mut gen, mut deps, mut run) = (Series::default(), Series::default(), Series::default());
    let mut with_desc = Series::default();
    let mut cross = 0;
    for _ in 0..runs {
        gen.add(measure::generate(*v, p).map_err(measure_fail)?);
        deps.add(measure::generate_with_deps(*v, p, window).map_err(measure_fail)?);
        let r = sim::run(*v, p, o).map_err(crate::run::sim_fail)?;
        run.add(Measured {
            tasks: r.tasks_total,
            edges: r.edges,
            wall: r.wall,
        });
        cross = r.cross_aicpu_edges;
        // The same run writing each task's descriptor, as a run with kernels (and the device)
        // does: what descriptors cost the scheduler.
        let descriptors = sim::Options {
            descriptors: true,
            ..o
        };
        let r = sim::run(*v, p, descriptors).map_err(crate::run::sim_fail)?;
        with_desc.add(Measured {
            tasks: r.tasks_total,
            edges: r.edges,
            wall: r.wall,
        });
    }
    if json {
        let out = json!({
            "workload": m.workload,
            "runs": runs,
            "aicpus": o.aicpus,
            "cube_cores": CUBE,
            "vector_cores": VECTOR,
            "window": window,
            "generate": gen.json(),
            "generate_deps": deps.json(),
            "run": run.json(),
            "run_descriptors": with_desc.json(),
            "descriptor_words": ptovm_vm::desc::slot_words(v),
            "cross_aicpu_edges": cross,
        });
        return Ok(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n");
    }
    let mut s = format!(
        "{}: {} tasks, {} round{} (tasks/ms: fastest, median, slowest; ns/task at the median)\n",
        m.workload,
        gen.tasks,
        runs,
        if runs == 1 { "" } else { "s" }
    );
    let line = |what: &str, x: &Series, note: String| {
        let (f, med, sl) = x.summary();
        let ns = if med > 0.0 { 1e6 / med } else { 0.0 };
        format!("  {what:<24} {f:>10.0} {med:>10.0} {sl:>10.0} {ns:>9.1} ns  {note}\n")
    };
    s += &line("generate", &gen, "one instance, every task".into());
    s += &line(
        "generate + dependencies",
        &deps,
        format!(
            "one instance, TensorMap of a {window}-task window: {} edges",
            deps.edges
        ),
    );
    s += &line(
        "run",
        &run,
        format!(
            "{} AICPUs, {CUBE} cube + {VECTOR} vector cores, window {window}: {} edges waited on, {cross} across AICPUs",
            o.aicpus, run.edges
        ),
    );
    s += &line(
        "run, descriptors",
        &with_desc,
        format!(
            "the same, writing each task's descriptor ({} words a slot)",
            ptovm_vm::desc::slot_words(v)
        ),
    );
    Ok(s)
}
