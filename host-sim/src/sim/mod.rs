//! The threaded simulator (spec/runtime.md): every AICPU runs the scheduler of `vm::sched` —
//! the loop of §4.3 over its own interpreter, window and ready queues, with the cross-AICPU
//! protocol of §4.1–4.2 on real atomics and the global TensorMap of §3.2 — the same code the
//! device library runs. The AICPU loops are non-blocking steps, multiplexed over a few OS
//! threads (`Options::threads`, by default the host's 2 cores) that also run the AICores' tasks:
//! concurrency is real (several threads), but a waiting AICPU costs no context switch, and an
//! idle thread parks instead of spinning. Cores are handshake slots (§3.4); the thread that
//! hands a core a task runs it once the round's dispatch is over (`threaded.rs`). The launch's
//! memory — the shared region, each AICPU's buffers and schedulers — is built in `launch.rs`,
//! which the simulated-time model (`crate::model`) builds its launches with too.
//!
//! A core runs its task's kernel, looked up by name in a `kernel::Registry`
//! ([`run_with_kernels`]); the default kernel does nothing, and the simulator records every run.
//! `Options::check` verifies a run against the reference expander.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use ptovm_vm::desc::{BindError, TensorArg};
use ptovm_vm::sched::SchedError;
use ptovm_vm::{LaunchError, RunError, RuntimeParams, Verified};

use crate::compute::Memory;
use crate::deps::{check_run, DepMode, Ran};
use crate::kernel::Registry;
use crate::latency::{Latency, Span};

pub(crate) mod launch;
mod threaded;

pub use ptovm_vm::WindowMode;

/// Simulator settings.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// AICPUs.
    pub aicpus: u32,
    /// Cube cores in all (shared out among the AICPUs).
    pub cube: u32,
    /// Vector cores in all.
    pub vector: u32,
    /// Window slots per AICPU.
    pub window: usize,
    /// Full-window behaviour.
    pub mode: WindowMode,
    /// OS threads running the AICPU loops and the cores' tasks.
    pub threads: usize,
    /// Verify the run against the reference expander.
    pub check: bool,
    /// Inject random yields into generation and completion (stress testing), with this seed.
    pub jitter: Option<u64>,
    /// Skip the watermark wait (the naïve protocol), to show that the check catches it.
    pub naive: bool,
    /// Record trace events (`Report::events`).
    pub trace: bool,
    /// Time every task's run and measure the dependency latency (`Report::latency`).
    pub latency: bool,
    /// When an AICPU starts handing tasks to its cores (seed 003 §7).
    pub start: Start,
    /// Most tasks of one pool an AICPU keeps running at once (0: as many as it has cores).
    pub pipeline_depth: u32,
    /// Idle cores take ready tasks from other AICPUs' queues (`ready = work_steal`).
    pub work_steal: bool,
    /// Which cores an AICPU hands tasks to: any free one (shared, the default) or its own of
    /// a fixed partition (`cores`, spec/runtime.md §4.6).
    pub cores: CoreAlloc,
    /// Completed tasks whose successors an AICPU releases together (`batch_deps`, seed 003
    /// §2.6): it holds completions back until it has this many, or until it has nothing else
    /// to do. 0 and 1 release each completion at once.
    pub batch_deps: u32,
    /// When an AICPU hands its ready tasks to its cores (`timing`, spec/pto.md §4.2).
    pub timing: IssueTiming,
    /// How the TensorMap matches regions: overlap (every dependency of the reference graph) or
    /// exact (pto-isa's map: equal regions only; `check` then fails where that misses an edge).
    pub deps: DepMode,
    /// Write each task's descriptor into its window slot (spec/runtime.md §3.8), as the device
    /// does. Always done when a kernel is registered (`run_with_kernels`: kernels read their
    /// descriptors); without kernels nothing reads them, and a scheduler benchmark may leave
    /// them out.
    pub descriptors: bool,
    /// Bytes of each AICPU's workspace arena (spec/runtime.md §4.4); `None`: the program's
    /// `workspace = N`, or sized from the window.
    pub workspace: Option<u32>,
}

pub use ptovm_vm::sched::{CoreAlloc, IssueTiming, Start};

/// What a trace event shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// An AICPU recorded a task's dependencies: from emitting it to its registration (§4.1).
    Record,
    /// A core ran a task.
    Run,
    /// An AICPU handed a task to a core (an instant: `start_ns == end_ns`); `aicpu` is the AICPU
    /// that issued it (its owner unless stolen).
    Issue,
    /// A round of an AICPU's scheduler loop (the simulated-time model only: its modelled cost).
    Round,
}

/// One span of the trace.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// What.
    pub kind: EventKind,
    /// The AICPU that owns the task.
    pub aicpu: u32,
    /// The core that ran it (for `Run`): cube cores first, then vector cores.
    pub core: u32,
    /// Task id.
    pub task: u64,
    /// Kernel index.
    pub kernel: u16,
    /// Start, nanoseconds since the run began.
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
    /// `Issue` under `batched` timing: the issuing AICPU's batch number (from 1); else 0.
    pub batch: u64,
    /// `Issue`: the task's stream (0 without `stream_by`).
    pub stream: u32,
    /// `Issue`: the task's scratch, offset in the launch's workspace memory and bytes (0, 0:
    /// none).
    pub workspace: (u32, u32),
}

impl Event {
    /// The instant an AICPU handed task `i` to a core, at `at_ns`.
    pub fn issue(i: &ptovm_vm::sched::Issued, at_ns: u64) -> Event {
        Event {
            kind: EventKind::Issue,
            aicpu: i.aicpu,
            core: i.core,
            task: i.task,
            kernel: i.kernel as u16,
            start_ns: at_ns,
            end_ns: at_ns,
            batch: i.batch,
            stream: i.stream,
            workspace: i.workspace,
        }
    }
}

impl Options {
    /// The program's own schedule (AICPUs, window, window mode, start policy, pipeline depth,
    /// work stealing, `batch_deps`, `timing`; spec/bytecode.md §3.1) with `cube` + `vector`
    /// cores, regions matched as `deps`, on two driver threads, no check and no trace.
    pub fn of_program(v: &Verified<'_>, cube: u32, vector: u32, deps: DepMode) -> Options {
        let own = ptovm_vm::sched::Config::of_program(v);
        Options {
            aicpus: v.config().num_aicpus.get() as u32,
            cube,
            vector,
            window: own.window.min(65_536) as usize,
            mode: own.mode,
            threads: 2,
            check: false,
            jitter: None,
            naive: false,
            trace: false,
            latency: false,
            start: own.start,
            pipeline_depth: own.pipeline_depth,
            work_steal: own.work_steal,
            cores: own.cores,
            batch_deps: own.batch_deps,
            timing: own.timing,
            deps,
            descriptors: false,
            workspace: None,
        }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            aicpus: 6,
            cube: 24,
            vector: 48,
            window: 1024,
            mode: WindowMode::Stall,
            threads: 2,
            check: false,
            jitter: None,
            naive: false,
            trace: false,
            latency: false,
            start: Start::Immediate,
            pipeline_depth: 0,
            work_steal: false,
            cores: CoreAlloc::Shared,
            batch_deps: 0,
            timing: IssueTiming::Immediate,
            deps: DepMode::Overlap,
            descriptors: false,
            workspace: None,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Tasks run.
    pub tasks_total: u64,
    /// Tasks per AICPU.
    pub per_aicpu: Vec<u64>,
    /// Cube tasks.
    pub cube_tasks: u64,
    /// Vector tasks.
    pub vector_tasks: u64,
    /// Dependency edges registered on running predecessors.
    pub edges: u64,
    /// Of those, between AICPUs.
    pub cross_aicpu_edges: u64,
    /// Joins opened (spec/runtime.md §4.7): each registered on the writers of a region many
    /// of its AICPU's tasks read (those registrations count in `edges`).
    pub joins: u64,
    /// Reads a join stood for: neither looked up nor registered on each writer.
    pub joined_reads: u64,
    /// Of those, reads another AICPU's join stood for, found as its row's join: registered on
    /// it, or on a relay of it.
    pub shared_joined_reads: u64,
    /// Of the joins, relays: registered on another AICPU's row's join, for the reads of the
    /// row on this one.
    pub relays: u64,
    /// Reads a join could stand for, of a row whose writers had all completed when it was
    /// last looked up: answered without a lookup (spec/runtime.md §4.7).
    pub finished_reads: u64,
    /// Writes filed in written-once tables (spec/runtime.md §4.8), out of the global map.
    pub once_writes: u64,
    /// Writes of such tensors the tables did not take: spilled to the global map.
    pub once_spills: u64,
    /// Tasks recorded by their site's plan: every region in a written-once table, without
    /// asking which map each goes to (spec/runtime.md §4.8).
    pub planned_records: u64,
    /// Tasks recorded with the producers the program names alone: their site needs no map,
    /// join or table (spec/runtime.md §4.1 step 5).
    pub mapless_records: u64,
    /// Times generation found its window full.
    pub window_stalls: u64,
    /// Rounds an AICPU settled as quiet (spec/runtime.md §4.3): nothing it waited on had
    /// moved since a round that did nothing.
    pub quiet_rounds: u64,
    /// Times a round took completions again after its dispatch, before generating
    /// (spec/runtime.md §4.3): cores that finished what it had just handed them.
    pub hops: u64,
    /// Overflows counted in benchmark mode.
    pub overflows: u64,
    /// Tasks run on another AICPU's cores (work stealing).
    pub stolen: u64,
    /// Dependency releases: each a batch of completed tasks whose successors were released
    /// together (one per task when `batch_deps` ≤ 1).
    pub dep_batches: u64,
    /// `batched` timing: batches the AICPUs opened.
    pub issue_batches: u64,
    /// Of those, opened short (none of the AICPU's cores busy).
    pub short_batches: u64,
    /// `interleaved` timing: tasks issued ahead of an older ready task to keep the rotation.
    pub reordered: u64,
    /// `rate_limit` timing: AICPU rounds in which a ready task waited for the rate.
    pub rate_waits: u64,
    /// `rate_limit` timing: nanoseconds ready tasks waited for the rate, summed over AICPUs.
    pub rate_wait_ns: u64,
    /// Bytes of each AICPU's workspace arena.
    pub workspace_arena: u32,
    /// Tasks that waited for workspace (their scratch did not fit their AICPU's arena yet).
    pub workspace_waits: u64,
    /// Shared cores: times an AICPU had a task ready and found no free core of its pool.
    pub core_waits: u64,
    /// Shared cores: cores claimed from the free-core bitmap (the others a task ran on were
    /// kept by the AICPU that saw the previous task on them complete, spec/runtime.md §4.6).
    pub core_claims: u64,
    /// Tasks that waited for their kernel's core limit (`@kernel … cores(N)`).
    pub core_limit_waits: u64,
    /// The most bytes of one arena in use at once.
    pub workspace_peak: u64,
    /// The raw values read back at each `READBACK`, in order (every AICPU read the same).
    pub read_back: Vec<Vec<u32>>,
    /// Wall-clock time of the run.
    pub wall: Duration,
    /// Whether the run was checked against the reference (and passed).
    pub checked: bool,
    /// In a computing run, nanoseconds the cores spent in kernels, summed over the driver
    /// threads (0 otherwise: no-op kernels are not timed).
    pub kernel_ns: u64,
    /// Driver threads the run used.
    pub threads: usize,
    /// Trace events, in no particular order (with `Options::trace`).
    pub events: Vec<Event>,
    /// The dependency latency (with `Options::latency`).
    pub latency: Option<Latency>,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Launch or runtime error of the program.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// A window overflowed in abort mode.
    #[error("AICPU {aicpu}'s task window ({window} slots) is full and the window mode is abort")]
    WindowAbort {
        /// The AICPU.
        aicpu: u32,
        /// Its window size.
        window: usize,
    },
    /// The run broke a rule the check verifies.
    #[error("check failed: {0}")]
    Check(String),
    /// A bad option.
    #[error("{0}")]
    Options(String),
    /// A tensor binding was refused.
    #[error("tensor binding: {0}")]
    Bind(#[from] BindError),
    /// A kernel's modelled duration could not be taken (simulated time).
    #[error(transparent)]
    Cost(#[from] crate::model::CostError),
    /// A kernel failed.
    #[error("task {task} (kernel {kernel}) failed: {message}")]
    Kernel {
        /// Program-order task id.
        task: u64,
        /// The kernel's name.
        kernel: String,
        /// What it said.
        message: String,
    },
}

impl From<SchedError> for SimError {
    fn from(e: SchedError) -> SimError {
        match e {
            SchedError::Run(e) => SimError::Launch(LaunchError::Run(e)),
            SchedError::WindowAbort { aicpu, window } => SimError::WindowAbort {
                aicpu,
                window: window as usize,
            },
            SchedError::Bind(e) => SimError::Bind(e),
            e @ SchedError::Workspace { .. } => SimError::Options(e.to_string()),
            other => SimError::Check(other.to_string()),
        }
    }
}

/// Per-task execution record for the check: (start, end, pool, aicpu), on one clock.
pub(crate) type Trace = Vec<Ran>;

/// The values read back at each `READBACK`, from each AICPU's list: every AICPU read the same
/// (they all read after the same barrier), or the run is wrong.
pub(crate) fn same_reads(lists: Vec<Vec<Vec<u32>>>) -> Result<Vec<Vec<u32>>, SimError> {
    if lists.iter().any(|l| *l != lists[0]) {
        return Err(SimError::Check(
            "the AICPUs read different values at a READBACK".into(),
        ));
    }
    Ok(lists.into_iter().next().unwrap_or_default())
}

/// Runs the program on the simulator.
pub fn run(v: Verified<'_>, p: RuntimeParams<'_>, o: Options) -> Result<Report, SimError> {
    run_with_progress(v, p, o, None)
}

/// Runs the program, adding each completed task to `progress` (for a progress display).
pub fn run_with_progress(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: Options,
    progress: Option<&AtomicU64>,
) -> Result<Report, SimError> {
    run_with_kernels(v, p, o, progress, &Registry::new())
}

/// Runs the program with the kernels of `kernels` (by name; the others do nothing), adding
/// each completed task to `progress`.
pub fn run_with_kernels(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: Options,
    progress: Option<&AtomicU64>,
    kernels: &Registry,
) -> Result<Report, SimError> {
    run_bound(v, p, o, progress, kernels, &[])
}

/// [`run_with_kernels`] with the program's tensors bound to memory: one [`TensorArg`] per
/// tensor of the program (checked against its declaration, spec/runtime.md §3.8), or none.
/// Descriptors then give each region's address.
pub fn run_bound(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: Options,
    progress: Option<&AtomicU64>,
    kernels: &Registry,
    tensors: &[TensorArg],
) -> Result<Report, SimError> {
    threaded::launch(v, p, o, progress, kernels, tensors, None)
}

/// Runs the program's tasks with the kernels of `kernels` on the tensors of `memory` (bound
/// to it, `Memory::bindings`): a computing run, whose kernels see their regions
/// (`kernel::Call::views`). `compute::run` checks the kernels and the answer around it.
pub fn run_on_memory(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: Options,
    progress: Option<&AtomicU64>,
    kernels: &Registry,
    memory: &Memory,
) -> Result<Report, SimError> {
    threaded::launch(v, p, o, progress, kernels, &memory.bindings(), Some(memory))
}

/// The reference expansion of a run on `n` AICPUs whose `READBACK`s read `read` (one list per
/// `READBACK` in order), as the run's AICPUs did.
fn reference_of(
    v: &Verified<'_>,
    p: &RuntimeParams<'_>,
    n: u32,
    read: &[Vec<u32>],
) -> Result<Vec<crate::RefTask>, SimError> {
    let mut on_readback = |rb: &ptovm_vm::readback::Readback, _: &[crate::RefTask]| {
        read.get(rb.index as usize).cloned()
    };
    crate::reference::expand_with(v, p, n, u64::MAX, &mut on_readback)
        .map_err(|e: RunError| SimError::Launch(LaunchError::Run(e)))
}

/// The dependency latency of a run whose tasks' `Run` events are among `events`, against the
/// reference expansion (which reads `read` at its `READBACK`s, as the run did).
pub(crate) fn measure_latency(
    v: &Verified<'_>,
    p: &RuntimeParams<'_>,
    n: u32,
    events: &[Event],
    read: &[Vec<u32>],
) -> Result<Latency, SimError> {
    let reference = reference_of(v, p, n, read)?;
    let mut ran = vec![Span::default(); reference.len()];
    let mut runs = 0;
    for e in events.iter().filter(|e| e.kind == EventKind::Run) {
        let at = ran.get_mut(e.task as usize).ok_or_else(|| {
            SimError::Check(format!(
                "task {} ran, the reference has {} tasks",
                e.task,
                reference.len()
            ))
        })?;
        *at = Span {
            start_ns: e.start_ns,
            end_ns: e.end_ns,
        };
        runs += 1;
    }
    if runs != reference.len() {
        return Err(SimError::Check(format!(
            "{runs} tasks ran, the reference has {}",
            reference.len()
        )));
    }
    crate::latency::measure(&reference, &ran).map_err(|e| SimError::Check(e.to_string()))
}

/// Verifies a run: every reference task ran exactly once, on its pool and AICPU, and started after
/// every overlap-mode predecessor ended. Checks the run's trace against the reference expansion, whose `READBACK`s read what the
/// run's AICPUs read (`read`, one list per `READBACK` in order; the run's values themselves are
/// checked by a computing run's in-order comparison).
pub(crate) fn check(
    v: &Verified<'_>,
    p: &RuntimeParams<'_>,
    n: u32,
    tr: &Trace,
    read: &[Vec<u32>],
) -> Result<(), SimError> {
    let reference = reference_of(v, p, n, read)?;
    check_run(&reference, tr).map_err(SimError::Check)?;
    crate::deps::check_core_limits(&reference, tr, &crate::deps::core_limits(v))
        .map_err(SimError::Check)
}
