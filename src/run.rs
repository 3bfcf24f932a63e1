//! `ptovm run`: the threaded simulator, with a human summary or JSON.

use ptovm_assembler::Module;
use ptovm_host_sim::model::WindowMode;
use ptovm_host_sim::sim::{self, SimError};
use ptovm_vm::{RuntimeParams, Value, Verified};
use serde_json::json;

/// Runs and renders. Errors carry their exit code.
#[allow(clippy::too_many_arguments)]
pub fn run(
    v: &Verified<'_>,
    m: &Module,
    vals: &[Value<'_>],
    aicpus: Option<u32>,
    cube: u32,
    vector: u32,
    window: Option<u32>,
    mode: Option<WindowMode>,
    check: bool,
    json: bool,
) -> Result<String, (u8, String)> {
    let p =
        RuntimeParams::new(v, vals).map_err(|e| (1, format!("error: runtime parameters: {e}")))?;
    let c = v.config();
    let schedule_mode = match ptovm_vm::WindowMode::from_u8(c.window_mode) {
        Some(ptovm_vm::WindowMode::Abort) => WindowMode::Abort,
        Some(ptovm_vm::WindowMode::Benchmark) => WindowMode::Benchmark,
        _ => WindowMode::Stall,
    };
    let o = sim::Options {
        aicpus: aicpus.unwrap_or(c.num_aicpus.get() as u32),
        cube,
        vector,
        window: window.unwrap_or(c.window.get().min(65_536)) as usize,
        mode: mode.unwrap_or(schedule_mode),
        threads: 2,
        check,
        jitter: None,
        naive: false,
    };
    let r = sim::run(*v, p, o).map_err(|e| match e {
        SimError::Options(msg) => (2, format!("error: {msg}")),
        SimError::Check(msg) => (4, format!("error: check failed: {msg}")),
        other => (1, format!("error: {other}")),
    })?;
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
            "window_stalls": r.window_stalls,
            "overflows": r.overflows,
            "wall_ms": ms,
            "tasks_per_ms": rate,
            "checked": r.checked,
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
    s += &format!(
        "wall {ms:.1} ms, {rate:.0} tasks/ms{}\n",
        if r.checked {
            "; checked against the reference: ok"
        } else {
            ""
        }
    );
    Ok(s)
}
