//! The simulated-time machine model (spec/runtime.md §9): the launch's AICPUs run the very
//! scheduler of `vm::sched` that the threaded run and the device run, stepped by one thread in
//! virtual-time order. A kernel takes its modelled duration (`costs`), an AICPU round takes the
//! modelled cost of the work it did — derived from the work counters the interpreter, the
//! TensorMaps and the scheduler keep (`machine::AicpuCosts`) — and a handshake takes its
//! latency. The result ([`ModelReport`]) says how long the workload would take on the machine
//! under its schedule and where the time went: the makespan, each pool's and core's
//! utilization, each AICPU's busy share, the critical path (a lower bound on the makespan) and
//! the idle time of cores and AICPUs by cause. Same inputs, same report, byte for byte: nothing
//! in it depends on the host's clock or threads.

pub mod costs;
pub mod machine;
mod timed;

pub use costs::{CostError, KernelCosts};
pub use machine::{AicpuCosts, ConfigError, CostTable, Duration, Machine};
pub use timed::simulate;

use crate::sim::Report;

/// How the cores of one pool spent the launch (spec/runtime.md §9.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolTime {
    /// Cores of the pool.
    pub cores: u32,
    /// Tasks run.
    pub tasks: u64,
    /// Nanoseconds its cores ran kernels, summed over cores.
    pub busy_ns: u64,
    /// Idle: a core's finish travelling to its AICPU and a task travelling to its core
    /// (`notice_ns`, `handshake_ns`).
    pub handshake_ns: u64,
    /// Idle: the core's AICPU was busy with other work (a round in progress, other issues
    /// before it) when it could have handed the core a task.
    pub aicpu_ns: u64,
    /// Idle: no task of the pool was ready for it (dependencies, generation not yet there,
    /// the schedule's limits), and after its last task until the launch ended.
    pub no_task_ns: u64,
}

impl PoolTime {
    /// Busy share of the pool's core time over `makespan_ns`, 0..=1.
    pub fn utilization(&self, makespan_ns: u64) -> f64 {
        self.share(self.busy_ns, makespan_ns)
    }

    /// `ns` (busy or idle for a cause) as a share of the pool's core time over `makespan_ns`,
    /// 0..=1.
    pub fn share(&self, ns: u64, makespan_ns: u64) -> f64 {
        share(ns, self.cores as u64 * makespan_ns)
    }
}

/// `part` over `whole`, 0 when `whole` is.
pub fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// How one core spent the launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreTime {
    /// Its pool (0 cube, 1 vector).
    pub pool: u8,
    /// The AICPU that drives it under a core partition; `None` under shared cores, where any
    /// AICPU hands it tasks (spec/runtime.md §4.6).
    pub aicpu: Option<u32>,
    /// Tasks it ran.
    pub tasks: u64,
    /// Nanoseconds it ran kernels.
    pub busy_ns: u64,
}

/// How one AICPU spent the launch: in rounds of its loop, and between them held up by what.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AicpuTime {
    /// Rounds of its scheduler loop.
    pub rounds: u64,
    /// Nanoseconds in rounds (its modelled work).
    pub busy_ns: u64,
    /// Between rounds, with generation able to go on (waiting for a completion, a task to
    /// issue, its next round).
    pub idle_ns: u64,
    /// Between rounds with its window full.
    pub window_ns: u64,
    /// Between rounds with its next task waiting for other AICPUs' watermarks.
    pub watermarks_ns: u64,
    /// Between rounds with a task waiting for predecessors beyond its waiter nodes.
    pub predecessors_ns: u64,
    /// Between rounds at a `READBACK`'s barrier.
    pub readback_ns: u64,
    /// Between rounds after generating all its tasks, until it finished.
    pub done_ns: u64,
}

/// Busy cores over time: the pool's busy core-nanoseconds in buckets of `width_ns` from 0
/// (bucket `i` covers `[i·width, (i+1)·width)`), for the report's plots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Width of a bucket, ns.
    pub width_ns: u64,
    /// Per pool (0 cube, 1 vector): busy core-ns in each bucket.
    pub busy: [Vec<u64>; 2],
    /// AICPU round-ns in each bucket, summed over AICPUs.
    pub aicpu: Vec<u64>,
}

/// What the model says of a launch.
#[derive(Clone, Debug, Default)]
pub struct ModelReport {
    /// The run's counters, as the threaded run gives them (its `wall` is 0 and its events —
    /// with `trace` — are in virtual nanoseconds).
    pub run: Report,
    /// The machine modelled.
    pub machine: Machine,
    /// From launch to the last AICPU finishing, ns.
    pub makespan_ns: u64,
    /// The longest chain of dependent tasks, by kernel durations alone, ns.
    pub critical_path_ns: u64,
    /// The most kernel time per core one pool has (its tasks' durations summed over its
    /// cores) or one kernel with a core limit has (over the cores it may use at once).
    pub work_bound_ns: u64,
    /// Cube and vector cores.
    pub pools: [PoolTime; 2],
    /// Every core, cube cores first.
    pub cores: Vec<CoreTime>,
    /// Every AICPU.
    pub aicpus: Vec<AicpuTime>,
    /// Busy cores and AICPUs over time.
    pub timeline: Timeline,
}

impl ModelReport {
    /// A lower bound on the makespan: the critical path or the most work per usable core.
    pub fn lower_bound_ns(&self) -> u64 {
        self.critical_path_ns.max(self.work_bound_ns)
    }

    /// The AICPUs' time in rounds as a share of their time over the makespan, 0..=1.
    pub fn aicpu_busy(&self) -> f64 {
        let busy = self.aicpus.iter().map(|a| a.busy_ns).sum();
        share(busy, self.makespan_ns * self.aicpus.len() as u64)
    }

    /// The lower bound over the makespan, 0..=1: 1 when nothing but the work itself limits the
    /// launch.
    pub fn efficiency(&self) -> f64 {
        if self.makespan_ns == 0 {
            return 1.0;
        }
        self.lower_bound_ns() as f64 / self.makespan_ns as f64
    }
}
