//! `ptovm run`: the threaded simulator, with a human summary or JSON.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;

use ptovm_assembler::Module;
use ptovm_host_sim::compute::{self, Computed, DataError};
use ptovm_host_sim::latency::{Hops, Latency};
use ptovm_host_sim::sim::{self, SimError};
use ptovm_host_sim::DepMode;
use ptovm_vm::{RuntimeParams, Value, Verified, WindowMode};
use serde_json::json;

use crate::{Exit, Fail};

/// What `ptovm run` was asked for, besides the program and its parameters.
#[derive(Clone, Debug)]
pub struct RunArgs {
    /// AICPUs (default: the program's schedule).
    pub aicpus: Option<u32>,
    /// Cube and vector cores (default: 24 and 48, or the machine's in simulated time).
    pub cube: Option<u32>,
    pub vector: Option<u32>,
    /// Shared cores or a partition (default: the program's schedule).
    pub cores: Option<sim::CoreAlloc>,
    /// Window and window mode (default: the program's schedule).
    pub window: Option<u32>,
    pub mode: Option<WindowMode>,
    /// Check against the reference.
    pub check: bool,
    /// JSON instead of the summary.
    pub json: bool,
    /// Where to write a Perfetto trace.
    pub trace: Option<PathBuf>,
    /// Measure the dependency latency.
    pub latency: bool,
    /// Start policy (default: the program's schedule).
    pub start: Option<sim::Start>,
    /// The TensorMap's match mode.
    pub deps: DepMode,
    /// The task budget.
    pub max_tasks: u64,
    /// `--data`: compute.
    pub data: Option<Data>,
    /// Each AICPU's workspace arena.
    pub workspace: Option<u32>,
    /// Simulated time instead of threads.
    pub model: Option<crate::model::ModelArgs>,
}

impl RunArgs {
    /// The simulator's options for program `v`: its schedule with what was asked for on top.
    pub fn options(&self, v: &Verified<'_>) -> sim::Options {
        let mut o = sim::Options::of_program(
            v,
            self.cube.unwrap_or(24),
            self.vector.unwrap_or(48),
            self.deps,
        );
        o.aicpus = self.aicpus.unwrap_or(o.aicpus);
        o.cores = self.cores.unwrap_or(o.cores);
        o.window = self.window.map_or(o.window, |w| w as usize);
        o.mode = self.mode.unwrap_or(o.mode);
        o.check = self.check;
        o.trace = self.trace.is_some();
        o.latency = self.latency;
        o.start = self.start.unwrap_or(o.start);
        o.workspace = self.workspace;
        o
    }
}

/// Runs and renders. Errors carry their exit code.
pub fn run(v: &Verified<'_>, m: &Module, vals: &[Value<'_>], a: &RunArgs) -> Result<String, Fail> {
    let p = crate::budget::params(v, vals, a.max_tasks)?;
    if let Some(model) = &a.model {
        return crate::model::run(v, m, &p, a, model);
    }
    let o = a.options(v);
    let (cube, vector, json, trace, deps) = (o.cube, o.vector, a.json, a.trace.as_deref(), a.deps);
    let data = a.data.as_ref();
    let (r, computed) = match data {
        None => (
            with_progress(v, &p, |progress| sim::run_with_progress(*v, p, o, progress))
                .map_err(sim_fail)?,
            None,
        ),
        Some(d) => {
            let kernels = compute::kernels::library();
            let mut c = with_progress(v, &p, |progress| {
                compute::run(*v, p, o, progress, &kernels, d.seed)
            })
            .map_err(data_fail)?;
            data_verdict(&c)?;
            (std::mem::take(&mut c.report), Some((c, d)))
        }
    };
    if let Some(path) = trace {
        let text = chrome_trace(m, &r, o.aicpus, cube, vector);
        crate::write_out(path, text.as_bytes())?;
    }
    // The tensors last: a command that fails earlier (the trace above) leaves none.
    if let Some((
        c,
        Data {
            save: Some(dir), ..
        },
    )) = &computed
    {
        save(c, dir)?;
    }
    let ms = r.wall.as_secs_f64() * 1000.0;
    let rate = if ms > 0.0 {
        r.tasks_total as f64 / ms
    } else {
        0.0
    };
    if json {
        let out = json!({
            "workload": m.workload,
            "aicpus": o.aicpus,
            "cube_cores": cube,
            "vector_cores": vector,
            "window": o.window,
            "tasks_total": r.tasks_total,
            "per_aicpu": r.per_aicpu,
            "cube_tasks": r.cube_tasks,
            "vector_tasks": r.vector_tasks,
            "edges": r.edges,
            "cross_aicpu_edges": r.cross_aicpu_edges,
            "mapless": r.mapless_records,
            "joins": json!({ "opened": r.joins, "reads": r.joined_reads, "shared": r.shared_joined_reads, "relays": r.relays, "finished": r.finished_reads }),
            "once": json!({ "writes": r.once_writes, "spills": r.once_spills, "planned": r.planned_records }),
            "window_stalls": r.window_stalls,
            "quiet_rounds": r.quiet_rounds,
            "hops": r.hops,
            "stolen": r.stolen,
            "cores": o.cores.to_string(),
            "core_waits": r.core_waits,
            "core_claims": r.core_claims,
            "core_limit_waits": r.core_limit_waits,
            "overflows": r.overflows,
            "batch_deps": o.batch_deps,
            "dep_batches": r.dep_batches,
            "timing": timing_json(&o.timing, &r),
            "wall_ms": ms,
            "tasks_per_ms": rate,
            "checked": r.checked,
            // Expression nodes each AICPU evaluated to compute the `@plan` values (0 without).
            "planning_work": p.planned().work,
            "workspace": json!({
                "arena_bytes": r.workspace_arena,
                "peak_bytes": r.workspace_peak,
                "waits": r.workspace_waits,
            }),
            "deps": match deps {
                DepMode::Exact => "exact",
                DepMode::Overlap => "overlap",
            },
            "data": computed.as_ref().map(|(c, d)| data_json(c, d, &r)),
            "latency": r.latency.as_ref().map(latency_json),
        });
        return Ok(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n");
    }
    let mut s = format!(
        "{}: {} tasks ({} cube, {} vector) on {} AICPUs, {} cube + {} vector cores, window {}\n",
        m.workload, r.tasks_total, r.cube_tasks, r.vector_tasks, o.aicpus, cube, vector, o.window
    );
    for (i, t) in r.per_aicpu.iter().enumerate() {
        s += &format!("  AICPU {i}: {t} tasks\n");
    }
    s += &format!(
        "dependencies waited on: {} ({} across AICPUs); window stalls {}{}\n",
        r.edges,
        r.cross_aicpu_edges,
        r.window_stalls,
        if r.overflows > 0 {
            format!(", overflows {}", r.overflows)
        } else {
            String::new()
        }
    );
    s += &timing_line(&o.timing, &r);
    if ptovm_vm::sched::Workspace::largest(v) > 0 {
        s += &format!(
            "workspace: {} bytes an AICPU, at most {} in use at once; {} tasks waited for it\n",
            r.workspace_arena, r.workspace_peak, r.workspace_waits
        );
    }
    s += &core_limits_line(m, r.core_limit_waits);
    if !v.plans().is_empty() {
        s += &format!(
            "planned at launch: {} ({} expression nodes on each AICPU)\n",
            plan_text(m, &p),
            p.planned().work
        );
    }
    s += &format!(
        "wall {ms:.1} ms, {rate:.0} tasks/ms{}\n",
        if r.checked {
            "; checked against the reference: ok"
        } else {
            ""
        }
    );
    if let Some(l) = &r.latency {
        s += &latency_text(l);
    }
    if let Some((c, d)) = &computed {
        s += &data_text(c, d, &r);
    }
    Ok(s)
}

/// `--latency` in the summary: a line per kind of hop.
fn latency_text(l: &Latency) -> String {
    let mut s = String::from("dependency latency, a predecessor's end to its successor's start:\n");
    for (what, h) in [("within an AICPU", &l.within), ("across AICPUs", &l.across)] {
        s += &if h.count == 0 {
            format!("  {what}: no hops\n")
        } else {
            format!(
                "  {what}: median {} ns, p90 {} ns, p99 {} ns, largest {} ns, mean {:.0} ns ({} hops)\n",
                h.median_ns, h.p90_ns, h.p99_ns, h.max_ns, h.mean_ns, h.count
            )
        };
    }
    s
}

fn latency_json(l: &Latency) -> serde_json::Value {
    let hops = |h: &Hops| {
        json!({
            "hops": h.count,
            "median_ns": h.median_ns,
            "p90_ns": h.p90_ns,
            "p99_ns": h.p99_ns,
            "max_ns": h.max_ns,
            "mean_ns": h.mean_ns,
        })
    };
    json!({ "within_aicpu": hops(&l.within), "across_aicpus": hops(&l.across) })
}

/// `run --data`: the seed, and where to save the written tensors.
#[derive(Clone, Debug)]
pub struct Data {
    /// The inputs' seed.
    pub seed: u64,
    /// The directory for `NAME.npy` files.
    pub save: Option<PathBuf>,
}

/// A computing run's error as the CLI reports it.
fn data_fail(e: DataError) -> Fail {
    match e {
        DataError::Sim(e) => sim_fail(e),
        other => Fail(Exit::Failed, format!("error: {other}")),
    }
}

/// An error when an output is beyond its tolerance of the model.
fn data_verdict(c: &Computed) -> Result<(), Fail> {
    let Some((m, compared)) = &c.model else {
        return Ok(());
    };
    let bad: Vec<String> = compared
        .iter()
        .filter(|x| !x.ok())
        .map(|x| {
            format!(
                "{} is {:.3e} from the model at {} ({:.3e} of its largest value; tolerance {:.0e})",
                x.tensor, x.max_abs, x.worst, x.max_rel, x.tolerance
            )
        })
        .collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(Fail(
        Exit::Failed,
        format!(
            "error: the outputs are not those of {} (the workload's model): {}",
            m.what,
            bad.join("; ")
        ),
    ))
}

/// The share of the driver threads' time spent outside kernels.
fn overhead(r: &sim::Report) -> f64 {
    let threads_ns = r.wall.as_nanos() as f64 * r.threads.max(1) as f64;
    if threads_ns > 0.0 {
        (1.0 - r.kernel_ns as f64 / threads_ns).max(0.0)
    } else {
        0.0
    }
}

fn data_text(c: &Computed, d: &Data, r: &sim::Report) -> String {
    let inputs: Vec<&str> = c
        .memory
        .tensors()
        .iter()
        .filter(|t| t.has_memory() && !t.written)
        .map(|t| t.name.as_str())
        .collect();
    let written = c
        .memory
        .tensors()
        .iter()
        .filter(|t| t.has_memory() && t.written)
        .count();
    let inputs = if inputs.is_empty() {
        "no input tensors".to_string()
    } else {
        format!("inputs {} filled", inputs.join(", "))
    };
    let mut s = format!(
        "data: seed {}, {inputs}, {written} tensors written\n",
        d.seed
    );
    s += &format!(
        "in program order (one task at a time, {:.1} ms): every tensor bit-identical to the run's\n",
        c.in_order_ns as f64 / 1e6
    );
    for (tensor, n, first) in &c.infinities {
        s += &format!("note: {tensor} holds {n} infinite values (the first at {first})\n");
    }
    match &c.model {
        None => s += "model: none for this workload (the in-order comparison is the check)\n",
        Some((m, compared)) => {
            s += &format!("model: {}\n", m.what);
            for x in compared {
                s += &format!(
                    "  {:<8} {:<4} max abs error {:.3e}, relative to its largest value {:.3e} (tolerance {:.0e}) at {}: ok\n",
                    x.tensor,
                    x.dtype.name(),
                    x.max_abs,
                    x.max_rel,
                    x.tolerance,
                    x.worst
                );
            }
        }
    }
    s += &format!(
        "kernels: {:.1} ms of the {} driver threads' {:.1} ms; {:.0} % of the time is the simulator's\n",
        r.kernel_ns as f64 / 1e6,
        r.threads,
        r.wall.as_secs_f64() * 1e3,
        overhead(r) * 100.0
    );
    if let Some(dir) = &d.save {
        s += &format!("saved the written tensors to {}/NAME.npy\n", dir.display());
    }
    s
}

fn data_json(c: &Computed, d: &Data, r: &sim::Report) -> serde_json::Value {
    json!({
        "seed": d.seed,
        "in_order_ms": c.in_order_ns as f64 / 1e6,
        "bit_identical": true,
        "infinities": c.infinities.iter().map(|(t, n, first)| json!({
            "tensor": t, "count": n, "first": first,
        })).collect::<Vec<_>>(),
        "model": c.model.as_ref().map(|(m, compared)| json!({
            "what": m.what,
            "outputs": compared.iter().map(|x| json!({
                "tensor": x.tensor,
                "dtype": x.dtype.name(),
                "max_abs": x.max_abs,
                "max_rel": x.max_rel,
                "tolerance": x.tolerance,
                "worst": x.worst,
            })).collect::<Vec<_>>(),
        })),
        "kernel_ms": r.kernel_ns as f64 / 1e6,
        "simulator_share": overhead(r),
        "saved": d.save.as_ref().map(|p| p.display().to_string()),
    })
}

/// Writes every written tensor to `dir/NAME.npy`: all are encoded first, then each file is
/// written whole or not at all (`write_out`).
fn save(c: &Computed, dir: &std::path::Path) -> Result<(), Fail> {
    let io = |e: std::io::Error| {
        Fail(
            Exit::Io,
            format!("error: cannot write to {}: {e}", dir.display()),
        )
    };
    let files = c
        .memory
        .tensors()
        .iter()
        .filter(|t| t.written && t.has_memory())
        .map(|t| Ok((dir.join(format!("{}.npy", t.name)), t.npy()?)))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(io)?;
    std::fs::create_dir_all(dir).map_err(io)?;
    for (path, bytes) in files {
        crate::write_out(&path, &bytes)?;
    }
    Ok(())
}

/// What the `timing` policy did, for `run --json`: the policy and its counters.
fn timing_json(t: &sim::IssueTiming, r: &sim::Report) -> serde_json::Value {
    json!({
        "policy": t.to_string(),
        "issue_batches": r.issue_batches,
        "short_batches": r.short_batches,
        "reordered": r.reordered,
        "rate_waits": r.rate_waits,
        "rate_wait_ms": r.rate_wait_ns as f64 / 1e6,
    })
}

/// What the `timing` policy did, as a line of the human summary (none for `immediate`).
fn timing_line(t: &sim::IssueTiming, r: &sim::Report) -> String {
    match t {
        sim::IssueTiming::Immediate => String::new(),
        sim::IssueTiming::Batched(_) => format!(
            "timing {t}: {} batches ({} short: none of the AICPU's cores busy)\n",
            r.issue_batches, r.short_batches
        ),
        sim::IssueTiming::Interleaved(_) => format!(
            "timing {t}: {} tasks issued ahead of an older ready one to keep the rotation\n",
            r.reordered
        ),
        sim::IssueTiming::RateLimit(_) => format!(
            "timing {t}: ready tasks waited for the rate in {} rounds, {:.3} ms in all\n",
            r.rate_waits,
            r.rate_wait_ns as f64 / 1e6
        ),
    }
}

/// A simulator error as the CLI reports it, with its exit code.
pub fn sim_fail(e: SimError) -> Fail {
    match e {
        SimError::Options(msg) => Fail(Exit::Usage, format!("error: {msg}")),
        SimError::Check(msg) => Fail(Exit::Internal, format!("error: check failed: {msg}")),
        SimError::Launch(ptovm_vm::LaunchError::Params(e)) => {
            Fail(Exit::Params, format!("error: runtime parameters: {e}"))
        }
        other => Fail(Exit::Failed, format!("error: {other}")),
    }
}

/// The run as Chrome trace-event JSON (opens in Perfetto or chrome://tracing): a track per AICPU
/// with the span from emitting each task to having recorded its dependencies and an instant
/// where it issued each task to a core (with its `batched` batch and its stream), and a track
/// per AICore with the tasks it ran, named by kernel.
pub(crate) fn chrome_trace(
    m: &Module,
    r: &sim::Report,
    aicpus: u32,
    cube: u32,
    vector: u32,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    let _ = write!(
        s,
        r#"{{"name":"process_name","ph":"M","pid":1,"args":{{"name":"AICPUs"}}}}"#
    );
    let _ = write!(
        s,
        r#",{{"name":"process_name","ph":"M","pid":2,"args":{{"name":"AICores"}}}}"#
    );
    for a in 0..aicpus {
        let _ = write!(s, ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{a},\"args\":{{\"name\":\"AICPU {a}\"}}}}");
    }
    for c in 0..cube + vector {
        let name = if c < cube {
            format!("cube {c}")
        } else {
            format!("vector {}", c - cube)
        };
        let _ = write!(s, ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":2,\"tid\":{c},\"args\":{{\"name\":\"{name}\"}}}}");
    }
    let kernel = |k: u16| m.kernels.get(k as usize).map_or("?", |k| k.name.as_str());
    for e in &r.events {
        let ts = e.start_ns as f64 / 1000.0;
        let dur = e.end_ns.saturating_sub(e.start_ns) as f64 / 1000.0;
        match e.kind {
            sim::EventKind::Record => {
                let _ = write!(
                    s,
                    ",\n{{\"name\":\"{}\",\"cat\":\"generate\",\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{ts:.3},\"dur\":{dur:.3},\"args\":{{\"task\":{}}}}}",
                    kernel(e.kernel),
                    e.aicpu,
                    e.task
                );
            }
            sim::EventKind::Issue => {
                let _ = write!(
                    s,
                    ",\n{{\"name\":\"issue {}\",\"cat\":\"issue\",\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":{},\"ts\":{ts:.3},\"args\":{{\"task\":{},\"core\":{},\"batch\":{},\"stream\":{},\"workspace_offset\":{},\"workspace_bytes\":{}}}}}",
                    kernel(e.kernel),
                    e.aicpu,
                    e.task,
                    e.core,
                    e.batch,
                    e.stream,
                    e.workspace.0,
                    e.workspace.1
                );
            }
            sim::EventKind::Round => {
                let _ = write!(
                    s,
                    ",\n{{\"name\":\"round\",\"cat\":\"round\",\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{ts:.3},\"dur\":{dur:.3}}}",
                    e.aicpu
                );
            }
            sim::EventKind::Run => {
                let _ = write!(
                    s,
                    ",\n{{\"name\":\"{}\",\"cat\":\"run\",\"ph\":\"X\",\"pid\":2,\"tid\":{},\"ts\":{ts:.3},\"dur\":{dur:.3},\"args\":{{\"task\":{},\"aicpu\":{}}}}}",
                    kernel(e.kernel),
                    e.core,
                    e.task,
                    e.aicpu
                );
            }
        }
    }
    s.push_str("\n]}\n");
    s
}

/// Runs `run` (the simulator, given a count of completed tasks to update); on a terminal, shows
/// a progress bar once it has taken a second.
fn with_progress<T>(
    v: &Verified<'_>,
    p: &RuntimeParams<'_>,
    run: impl FnOnce(Option<&AtomicU64>) -> T,
) -> T {
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !std::io::stderr().is_terminal() {
        return run(None);
    }
    let total = ptovm_vm::Interpreter::new(*v, *p, 0, 1)
        .ok()
        .and_then(|mut i| i.count_tasks().ok())
        .unwrap_or(0);
    let done = AtomicU64::new(0);
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = std::time::Instant::now();
            let mut bar: Option<indicatif::ProgressBar> = None;
            while !finished.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                if bar.is_none() && start.elapsed() >= std::time::Duration::from_secs(1) {
                    let b = indicatif::ProgressBar::new(total);
                    b.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{elapsed_precise} [{bar:40}] {pos}/{len} tasks ({per_sec})",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                    );
                    bar = Some(b);
                }
                if let Some(b) = &bar {
                    b.set_position(done.load(Ordering::Relaxed));
                }
            }
            if let Some(b) = bar {
                b.finish_and_clear();
            }
        });
        let r = run(Some(&done));
        finished.store(true, Ordering::Release);
        r
    })
}

/// `name = value` for each planned value (`@plan`).
fn plan_text(m: &Module, p: &RuntimeParams<'_>) -> String {
    let values = p.planned().values;
    m.plans
        .iter()
        .zip(values)
        .map(|(plan, x)| format!("{} = {x}", plan.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary's line on the kernels' core limits (spec/pto.md §4.9), when a kernel has one:
/// each limited kernel's limit and how many tasks waited for one.
pub(crate) fn core_limits_line(m: &Module, waits: u64) -> String {
    let limited: Vec<String> = m
        .kernels
        .iter()
        .filter(|k| k.entry.core_limit.get() != 0)
        .map(|k| format!("{} {}", k.name, k.entry.core_limit.get()))
        .collect();
    if limited.is_empty() {
        return String::new();
    }
    format!(
        "core limits: {}; {waits} tasks waited for one\n",
        limited.join(", ")
    )
}
