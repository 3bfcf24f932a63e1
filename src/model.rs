//! `ptovm run --model`: the simulated-time machine model (spec/runtime.md §9), with a human
//! summary or JSON, a Perfetto trace in virtual time and an HTML report. Every output is a
//! function of the inputs alone: no host clock, no thread timing.

use std::path::{Path, PathBuf};

use ptovm_assembler::Module;
use ptovm_host_sim::model::{self, CostTable, KernelCosts, Machine, ModelReport, PoolTime};
use ptovm_vm::{RuntimeParams, Verified};
use serde_json::json;

use crate::run::{sim_fail, RunArgs};
use crate::{Exit, Fail};

/// What `--model` was given.
#[derive(Clone, Debug, Default)]
pub struct ModelArgs {
    /// The machine file (default: a 910B).
    pub machine: Option<PathBuf>,
    /// The cost table.
    pub costs: Option<PathBuf>,
    /// Where to write the HTML report.
    pub report: Option<PathBuf>,
}

/// Reads a text file for the model (its errors: exit code 3).
fn read_text(path: &Path) -> Result<String, Fail> {
    std::fs::read_to_string(path).map_err(|e| {
        Fail(
            Exit::Io,
            format!("error: cannot read {}: {e}", path.display()),
        )
    })
}

/// The machine and the kernels' durations a modelled run uses.
pub fn machine_and_costs(
    v: &Verified<'_>,
    args: &ModelArgs,
    cube: Option<u32>,
    vector: Option<u32>,
) -> Result<(Machine, KernelCosts), Fail> {
    let usage = |e: model::ConfigError| Fail(Exit::Usage, format!("error: {e}"));
    let mut machine = match &args.machine {
        Some(path) => {
            Machine::parse(&path.display().to_string(), &read_text(path)?).map_err(usage)?
        }
        None => Machine::default(),
    };
    machine.cube_cores = cube.unwrap_or(machine.cube_cores);
    machine.vector_cores = vector.unwrap_or(machine.vector_cores);
    let table = match &args.costs {
        Some(path) => {
            CostTable::parse(&path.display().to_string(), &read_text(path)?, v).map_err(usage)?
        }
        None => CostTable::default(),
    };
    let costs = KernelCosts::new(v, &machine, &table)
        .map_err(|e| Fail(Exit::Usage, format!("error: {e}")))?;
    Ok((machine, costs))
}

/// Runs the model and renders it; writes the trace and the report (each whole, or not at all)
/// only once the run succeeded.
pub fn run(
    v: &Verified<'_>,
    m: &Module,
    p: &RuntimeParams<'_>,
    a: &RunArgs,
    args: &ModelArgs,
) -> Result<String, Fail> {
    let (machine, costs) = machine_and_costs(v, args, a.cube, a.vector)?;
    let mut o = a.options(v);
    // Without `--aicpus`, the schedule's count, or the machine's when it has fewer.
    if a.aicpus.is_none() {
        o.aicpus = o.aicpus.min(machine.aicpus);
    }
    let r = model::simulate(*v, *p, o, &machine, &costs).map_err(sim_fail)?;
    let trace = a.trace.as_ref().map(|_| {
        crate::run::chrome_trace(
            m,
            &r.run,
            o.aicpus,
            machine.cube_cores,
            machine.vector_cores,
        )
    });
    let report = args
        .report
        .as_ref()
        .map(|_| crate::report::html(m, &r, o.aicpus));
    if let (Some(path), Some(text)) = (&a.trace, trace) {
        crate::write_out(path, text.as_bytes())?;
    }
    if let (Some(path), Some(text)) = (&args.report, report) {
        crate::write_out(path, text.as_bytes())?;
    }
    Ok(if a.json {
        serde_json::to_string_pretty(&to_json(m, &r, o.aicpus, o.window)).unwrap_or_default() + "\n"
    } else {
        text(m, &r, o.aicpus, o.window)
    })
}

/// Nanoseconds as people read them.
pub fn duration(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns} ns"),
        10_000..=9_999_999 => format!("{:.2} µs", ns as f64 / 1e3),
        _ => format!("{:.3} ms", ns as f64 / 1e6),
    }
}

/// `part` over `whole` in per cent (0 when `whole` is).
pub fn percent(part: u64, whole: u64) -> f64 {
    model::share(part, whole) * 100.0
}

/// The human summary.
fn text(m: &Module, r: &ModelReport, aicpus: u32, window: usize) -> String {
    let run = &r.run;
    let mach = &r.machine;
    let mut s = format!(
        "{}: {} tasks ({} cube, {} vector) on {aicpus} AICPUs, {} cube + {} vector cores, window {window}; simulated time\n",
        m.workload, run.tasks_total, run.cube_tasks, run.vector_tasks, mach.cube_cores, mach.vector_cores
    );
    s += &format!("makespan {}\n", duration(r.makespan_ns));
    s += &format!(
        "lower bound {} ({:.1} % of the makespan): critical path {}, most work per usable core {}\n",
        duration(r.lower_bound_ns()),
        r.efficiency() * 100.0,
        duration(r.critical_path_ns),
        duration(r.work_bound_ns)
    );
    for (name, p) in [("cube", &r.pools[0]), ("vector", &r.pools[1])] {
        s += &pool_line(name, p, r.makespan_ns);
    }
    s += &format!(
        "AICPUs: busy {:.1} % of their time ({} rounds)\n",
        r.aicpu_busy() * 100.0,
        r.aicpus.iter().map(|a| a.rounds).sum::<u64>()
    );
    for (i, a) in r.aicpus.iter().enumerate() {
        let held = [
            ("window full", a.window_ns),
            ("watermarks", a.watermarks_ns),
            ("predecessors", a.predecessors_ns),
            ("read-back", a.readback_ns),
            ("generated all", a.done_ns),
        ];
        let held: Vec<String> = held
            .iter()
            .filter(|(_, ns)| *ns > 0)
            .map(|(what, ns)| format!("{what} {:.1} %", percent(*ns, r.makespan_ns)))
            .collect();
        s += &format!(
            "  AICPU {i}: {} tasks, busy {:.1} %{}{}\n",
            run.per_aicpu[i],
            percent(a.busy_ns, r.makespan_ns),
            if held.is_empty() {
                ""
            } else {
                "; between rounds: "
            },
            held.join(", ")
        );
    }
    s += &format!(
        "dependencies waited on: {} ({} across AICPUs); window stalls {}\n",
        run.edges, run.cross_aicpu_edges, run.window_stalls
    );
    s += &crate::run::core_limits_line(m, run.core_limit_waits);
    if run.checked {
        s += "checked against the reference: ok\n";
    }
    s
}

fn pool_line(name: &str, p: &PoolTime, makespan: u64) -> String {
    let pct = |ns| p.share(ns, makespan) * 100.0;
    format!(
        "{name} cores: {} tasks, utilization {:.1} %; idle: no task ready {:.1} %, AICPU busy {:.1} %, handshakes {:.1} %\n",
        p.tasks,
        p.utilization(makespan) * 100.0,
        pct(p.no_task_ns),
        pct(p.aicpu_ns),
        pct(p.handshake_ns)
    )
}

fn pool_json(p: &PoolTime, makespan: u64) -> serde_json::Value {
    json!({
        "cores": p.cores,
        "tasks": p.tasks,
        "busy_ns": p.busy_ns,
        "utilization": p.utilization(makespan),
        "idle_ns": {
            "no_task": p.no_task_ns,
            "aicpu": p.aicpu_ns,
            "handshake": p.handshake_ns,
        },
    })
}

/// The JSON form: everything the summary says, per core and per AICPU, and the machine.
fn to_json(m: &Module, r: &ModelReport, aicpus: u32, window: usize) -> serde_json::Value {
    let run = &r.run;
    let mach = &r.machine;
    json!({
        "workload": m.workload,
        "mode": "simulated_time",
        "aicpus": aicpus,
        "cube_cores": mach.cube_cores,
        "vector_cores": mach.vector_cores,
        "window": window,
        "tasks_total": run.tasks_total,
        "per_aicpu": run.per_aicpu,
        "cube_tasks": run.cube_tasks,
        "vector_tasks": run.vector_tasks,
        "edges": run.edges,
        "cross_aicpu_edges": run.cross_aicpu_edges,
        "mapless": run.mapless_records,
        "joins": json!({ "opened": run.joins, "reads": run.joined_reads, "shared": run.shared_joined_reads, "relays": run.relays, "finished": run.finished_reads }),
        "once": json!({ "writes": run.once_writes, "spills": run.once_spills, "planned": run.planned_records }),
        "window_stalls": run.window_stalls,
        "stolen": run.stolen,
        "core_waits": run.core_waits,
        "core_claims": run.core_claims,
        "core_limit_waits": run.core_limit_waits,
        "makespan_ns": r.makespan_ns,
        "critical_path_ns": r.critical_path_ns,
        "work_bound_ns": r.work_bound_ns,
        "lower_bound_ns": r.lower_bound_ns(),
        "efficiency": r.efficiency(),
        "pools": {
            "cube": pool_json(&r.pools[0], r.makespan_ns),
            "vector": pool_json(&r.pools[1], r.makespan_ns),
        },
        "cores": r.cores.iter().map(|c| json!({
            "pool": if c.pool == 0 { "cube" } else { "vector" },
            "aicpu": c.aicpu,
            "tasks": c.tasks,
            "busy_ns": c.busy_ns,
            "utilization": percent(c.busy_ns, r.makespan_ns) / 100.0,
        })).collect::<Vec<_>>(),
        "aicpu_time": r.aicpus.iter().map(|a| json!({
            "rounds": a.rounds,
            "busy_ns": a.busy_ns,
            "busy_share": percent(a.busy_ns, r.makespan_ns) / 100.0,
            "between_rounds_ns": {
                "free": a.idle_ns,
                "window_full": a.window_ns,
                "watermarks": a.watermarks_ns,
                "predecessors": a.predecessors_ns,
                "readback": a.readback_ns,
                "generated_all": a.done_ns,
            },
        })).collect::<Vec<_>>(),
        "machine": machine_json(mach),
        "checked": run.checked,
    })
}

fn machine_json(m: &Machine) -> serde_json::Value {
    let a = &m.aicpu;
    json!({
        "aicpus": m.aicpus,
        "cube_cores": m.cube_cores,
        "vector_cores": m.vector_cores,
        "core_clock_mhz": m.core_clock_mhz,
        "handshake_ns": m.handshake_ns,
        "notice_ns": m.notice_ns,
        "default_kernel_ns": m.default_kernel_ns,
        "idle_poll_ns": m.idle_poll_ns,
        "aicpu": {
            "round_ns": a.round_ns,
            "instruction_ns": a.instruction_ns,
            "task_ns": a.task_ns,
            "probe_ns": a.probe_ns,
            "visit_ns": a.visit_ns,
            "insert_ns": a.insert_ns,
            "edge_ns": a.edge_ns,
            "cross_edge_ns": a.cross_edge_ns,
            "dispatch_ns": a.dispatch_ns,
            "completion_ns": a.completion_ns,
        },
    })
}
