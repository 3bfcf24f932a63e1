//! `ptovm metg`: Task Bench's METG(50 %) of one program on the threaded simulator
//! (`ptovm_host_sim::metg`): runs it with every kernel busy-waiting a duration, from `longest`
//! down by halves, and gives each run's efficiency and task granularity, and the granularity
//! at which the efficiency crosses 50 %.

use std::time::Duration;

use ptovm_assembler::Module;
use ptovm_host_sim::metg::{self, Metg, Point};
use ptovm_host_sim::DepMode;
use ptovm_vm::{Value, Verified};
use serde_json::json;

use crate::{Exit, Fail};

/// What `ptovm metg` was asked.
pub struct Ask {
    pub aicpus: Option<u32>,
    pub window: Option<u32>,
    pub longest_ns: u64,
    pub shortest_ns: u64,
    pub max_tasks: u64,
    pub json: bool,
}

/// Sweeps and renders. Errors carry their exit code.
pub fn metg(v: &Verified<'_>, m: &Module, vals: &[Value<'_>], ask: Ask) -> Result<String, Fail> {
    if ask.shortest_ns > ask.longest_ns {
        return Err(Fail(
            Exit::Usage,
            format!(
                "error: --shortest-ns {} is longer than --longest-ns {}",
                ask.shortest_ns, ask.longest_ns
            ),
        ));
    }
    let p = crate::budget::params(v, vals, ask.max_tasks)?;
    let mut o = ptovm_host_sim::sim::Options::of_program(v, 24, 48, DepMode::Overlap);
    if let Some(n) = ask.aicpus {
        o.aicpus = n;
    }
    if let Some(w) = ask.window {
        o.window = w as usize;
    }
    let points = metg::sweep(
        *v,
        p,
        o,
        Duration::from_nanos(ask.longest_ns),
        Duration::from_nanos(ask.shortest_ns),
    )
    .map_err(crate::run::sim_fail)?;
    let result = metg::metg(&points, 0.5);
    let threads = points.first().map_or(0, |p| p.threads);
    if ask.json {
        let runs: Vec<serde_json::Value> = points
            .iter()
            .map(|p: &Point| {
                json!({
                    "kernel_ns": p.kernel.as_nanos() as u64,
                    "tasks": p.tasks,
                    "wall_ms": p.wall.as_secs_f64() * 1e3,
                    "efficiency": p.efficiency(),
                    "granularity_ns": p.granularity_ns(),
                })
            })
            .collect();
        let (metg_ns, bound) = match result {
            Metg::Crossed(g) => (Some(g), "crossed"),
            Metg::AtMost(g) => (Some(g), "at_most"),
            Metg::NotReached => (None, "not_reached"),
        };
        let out = json!({
            "workload": m.workload,
            "aicpus": o.aicpus,
            "window": o.window,
            "threads": threads,
            "runs": runs,
            "metg50_ns": metg_ns,
            "metg50": bound,
        });
        return Ok(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n");
    }
    let mut s = format!(
        "{}: {} tasks, {} AICPUs, window {}, {} driver threads; every kernel busy-waits\n",
        m.workload,
        points.first().map_or(0, |p| p.tasks),
        o.aicpus,
        o.window,
        threads
    );
    s += "  kernel (ns)   wall (ms)   efficiency   granularity (ns a task)\n";
    for p in &points {
        s += &format!(
            "  {:>11}   {:>9.2}   {:>9.1} %   {:>10.0}\n",
            p.kernel.as_nanos(),
            p.wall.as_secs_f64() * 1e3,
            100.0 * p.efficiency(),
            p.granularity_ns()
        );
    }
    s += &match result {
        Metg::Crossed(g) => format!("METG(50 %): {g:.0} ns\n"),
        Metg::AtMost(g) => format!(
            "METG(50 %): at most {g:.0} ns (every run kept 50 %; lower --shortest-ns to go on)\n"
        ),
        Metg::NotReached => {
            "METG(50 %): not reached (no run kept 50 %; raise --longest-ns)\n".to_string()
        }
    };
    Ok(s)
}
