//! Per-AICPU expansion on the host: runs one interpreter per AICPU and collects their tasks.

use ptovm_vm::{
    Interpreter, LaunchError, RunError, RuntimeParams, Sink, Stats, Status, Task, Verified,
};

use crate::reference::RefTask;

/// The tasks one AICPU generated and its work counters.
#[derive(Clone, Debug)]
pub struct Expansion {
    /// AICPU id.
    pub aicpu: u32,
    /// Its tasks, in id order.
    pub tasks: Vec<RefTask>,
    /// Work counters.
    pub stats: Stats,
    /// The program's task count (the id after the last task).
    pub total: u64,
}

struct Collect {
    aicpu: u32,
    tasks: Vec<RefTask>,
    limit: usize,
}

impl Sink for Collect {
    fn task(&mut self, t: &Task) -> bool {
        if self.tasks.len() < self.limit {
            self.tasks.push(RefTask::from_task(t, self.aicpu));
        }
        true
    }
}

/// The `step` of [`expand_aicpu`] that takes tasks one at a time through
/// [`Interpreter::next_task`], as the scheduler stages them.
pub const NEXT_TASK: u64 = 0;

/// Runs AICPU `aicpu` of `aicpus` to the end, keeping at most `keep` tasks (all are counted);
/// a `READBACK` keeps the launch's values of its runtime array (no task computes here).
/// `step` is the emission budget per `run` call, to exercise pausing and resuming, or
/// [`NEXT_TASK`].
pub fn expand_aicpu(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    aicpu: u32,
    aicpus: u32,
    keep: usize,
    step: u64,
) -> Result<Expansion, LaunchError> {
    let mut it = Interpreter::new(v, p, aicpu, aicpus)?;
    let mut sink = Collect {
        aicpu,
        tasks: Vec::new(),
        limit: keep,
    };
    if step == NEXT_TASK {
        loop {
            let before = it.stats().emitted;
            let status = it.next_task().map_err(LaunchError::Run)?;
            if it.stats().emitted > before {
                sink.task(it.current_task());
            }
            if status == Status::Done {
                break;
            }
        }
    } else {
        // A READBACK keeps the launch's values (nothing computes here).
        while it.run(&mut sink, step).map_err(LaunchError::Run)? != Status::Done {}
    }
    Ok(Expansion {
        aicpu,
        tasks: sink.tasks,
        stats: it.stats(),
        total: it.next_id(),
    })
}

/// Runs every AICPU of `aicpus` in turn.
pub fn expand_all(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    aicpus: u32,
    keep: usize,
) -> Result<Vec<Expansion>, LaunchError> {
    (0..aicpus)
        .map(|i| expand_aicpu(v, p, i, aicpus, keep, u64::MAX))
        .collect()
}

/// Whether a run error came from the program (as opposed to the launch).
pub fn is_run_error(e: &LaunchError) -> Option<RunError> {
    match e {
        LaunchError::Run(r) => Some(*r),
        LaunchError::Params(_) => None,
    }
}
