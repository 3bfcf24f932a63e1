//! The threaded simulator (spec/runtime.md): every AICPU runs the scheduler of `vm::sched` —
//! the loop of §4.3 over its own interpreter, window and ready queues, with the cross-AICPU
//! protocol of §4.1–4.2 on real atomics and the global TensorMap of §3.2 — the same code the
//! device library runs. The AICPU loops are non-blocking steps, multiplexed over a few OS
//! threads (`Options::threads`, by default the host's 2 cores) that also run the AICores' tasks:
//! concurrency is real (several threads), but a waiting AICPU costs no context switch, and an
//! idle thread parks instead of spinning. Cores are handshake slots (§3.4); the thread that
//! hands a core a task runs it after its round.
//!
//! A core runs its task's kernel, looked up by name in a `kernel::Registry`
//! ([`run_with_kernels`]); the default kernel does nothing, and the simulator records every run.
//! `Options::check` verifies a run against the reference expander.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use ptovm_vm::desc::{self, BindError, Binding, TensorArg};
use ptovm_vm::handshake::{self, CoreSlot};
use ptovm_vm::ring::{Cell, Ring};
use ptovm_vm::sched::{
    Aicpu, Busy, Config, Counts, Env, Issued, Local, MapLock, Node, Padded, Pred, SchedError,
    Shared, Slot, Workspace, NODES,
};
use ptovm_vm::share::Sharing;
use ptovm_vm::spin::SpinLock;
use ptovm_vm::tmap::MapLayout;
use ptovm_vm::{Interpreter, LaunchError, Pool, RunError, RuntimeParams, Task, Verified};
use zerocopy::FromZeros;

use crate::compute::Memory;
use crate::deps::{check_run, heap_map, DepMode, HeapMap, HeapStorage, Ran};
use crate::kernel::{Call, Kernel, Registry};
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
    /// When an AICPU starts handing tasks to its cores (seed 003 §7).
    pub start: Start,
    /// Most tasks of one pool an AICPU keeps running at once (0: as many as it has cores).
    pub pipeline_depth: u32,
    /// Idle cores take ready tasks from other AICPUs' queues (`ready = work_steal`).
    pub work_steal: bool,
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

pub use ptovm_vm::sched::{IssueTiming, Start};

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
            start: Start::Immediate,
            pipeline_depth: 0,
            work_steal: false,
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
    /// Times generation found its window full.
    pub window_stalls: u64,
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

/// Per-task execution record for the check: (start seq, end seq, pool, aicpu).
type Trace = Vec<Ran>;

/// The global TensorMap behind the simulator's spin lock (spec/runtime.md §3.2).
/// A thread that finds it taken spins with exponential backoff and then yields its time slice
/// (`crossbeam_utils::Backoff`): the map's critical sections are short, and yielding keeps a
/// waiter from burning a core the holder needs.
struct MapLockHost(SpinLock<HeapMap>);

impl MapLock for MapLockHost {
    type Mem = HeapStorage;
    fn with_map<R>(&self, f: impl FnOnce(&mut HeapMap) -> R) -> R {
        let backoff = crossbeam_utils::Backoff::new();
        f(&mut self.0.lock_with(|| backoff.snooze()))
    }
}

/// The region the AICPUs share (`vm::sched::Shared` borrows it).
struct Region {
    published: Vec<Padded>,
    waiting_for: Vec<Padded>,
    slots: Vec<Slot>,
    nodes: Vec<Node>,
    ready: Vec<Ring<Box<[Cell]>>>,
    passed: Vec<Ring<Box<[Cell]>>>,
    cores: Vec<CoreSlot>,
    core_aicpu: Vec<u32>,
    map: CachePadded<MapLockHost>,
    writers: Vec<AtomicU32>,
    next_issue: Padded,
    descs: Box<[AtomicU64]>,
    barriers: Vec<Padded>,
}

/// One AICPU's private buffers (`vm::sched::Local` borrows them).
struct Buffers {
    free: Vec<u32>,
    retiring: Vec<u32>,
    unreleased: Vec<u32>,
    held: Vec<u32>,
    cores: Vec<u32>,
    busy: Vec<Busy>,
    preds: Vec<Pred>,
    shares: Vec<Sharing>,
    tensors: Vec<Binding>,
}

/// A ring for `cap` slot indices (a power of two of at least 2 cells).
fn ring(cap: usize) -> Option<Ring<Box<[Cell]>>> {
    let cells: Box<[Cell]> = vec_of(cap.max(2).next_power_of_two(), Cell::default)?.into();
    Ring::new(cells).ok()
}

/// `n` values, or `None` if the host cannot allocate them.
fn vec_of<T>(n: usize, f: impl FnMut() -> T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.extend(std::iter::repeat_with(f).take(n));
    Some(v)
}

/// What the driver threads share besides the AICPUs' region.
struct Drivers<'r> {
    n: u32,
    threads: usize,
    core_aicpu: &'r [u32],
    /// Driver threads and whether each is parked (or about to).
    handles: Vec<OnceLock<thread::Thread>>,
    sleeping: Vec<CachePadded<AtomicBool>>,
    finished: AtomicU32,
    failed: AtomicBool,
    seq: AtomicU64,
    check: bool,
    trace: Mutex<Trace>,
    tracing: bool,
    start: Instant,
    progress: Option<&'r AtomicU64>,
    /// Each kernel index's name and kernel (`kernel::Registry::resolve`).
    kernels: Vec<(&'r str, &'r dyn Kernel)>,
    /// The tensors' memory of a computing run.
    memory: Option<&'r Memory>,
    /// Nanoseconds spent in kernels (computing runs only).
    kernel_ns: AtomicU64,
    /// With `check`: each AICPU's arena's scratches in use, `(first byte, end, task)`, from
    /// issue to reclaim, and the first overlap seen — kept apart from the scheduler's own
    /// bookkeeping, so that two running tasks given shared bytes fail the run.
    workspace_live: Vec<Mutex<Vec<(u32, u32, u64)>>>,
    workspace_overlap: Mutex<Option<String>>,
    /// Each AICPU's values read back at its `READBACK`s, in order.
    read_back: Vec<Mutex<Vec<Vec<u32>>>>,
}

impl Drivers<'_> {
    /// Unparks driver `d` if it sleeps. Callers publish what it waits for first; the SeqCst
    /// fence pairs with the one in the driver's park (flag, fence, re-check, park), so the wake-up
    /// is not lost — and parking has a timeout besides.
    fn wake_driver(&self, d: usize) {
        fence(Ordering::SeqCst);
        if self.sleeping[d].load(Ordering::Relaxed) {
            if let Some(t) = self.handles[d].get() {
                t.unpark();
            }
        }
    }
    fn wake_all(&self) {
        for d in 0..self.threads {
            self.wake_driver(d);
        }
    }
    fn driver_of(&self, aicpu: u32) -> usize {
        aicpu as usize % self.threads
    }
    /// The simulator's clock: nanoseconds since the run began (traces and `rate_limit`).
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

/// What a scheduler step may do to the simulator (`vm::sched::Env`).
struct StepEnv<'x, 'r> {
    dr: &'x Drivers<'r>,
    driver: usize,
    jitter: &'x mut Jitter,
    events: &'x mut Vec<Event>,
    staged_at: &'x mut u64,
    /// The cores this driver rang and has yet to run.
    doorbell: &'x mut Vec<u32>,
}

impl Env for StepEnv<'_, '_> {
    fn wake(&mut self, aicpu: u32) {
        // A driver sees its own AICPUs on its next round: only another driver is woken.
        let d = self.dr.driver_of(aicpu);
        if d != self.driver {
            self.dr.wake_driver(d);
        }
    }
    fn ring(&mut self, core: u32) {
        // This driver runs the cores it rang after its round: the cores of its AICPUs, so
        // nothing crosses threads but the completions of stolen tasks.
        self.doorbell.push(core);
    }
    fn now_ns(&mut self) -> u64 {
        self.dr.now_ns()
    }
    fn issued(&mut self, i: &Issued) {
        let (offset, bytes) = i.workspace;
        if self.dr.check && bytes > 0 {
            let (start, end) = (offset, offset + bytes);
            let mut live = self.dr.workspace_live[i.aicpu as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(&(s, e, other)) = live.iter().find(|&&(s, e, _)| s < end && start < e) {
                let mut first = self
                    .dr
                    .workspace_overlap
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                first.get_or_insert(format!(
                    "task {} was given workspace bytes {start}..{end} while task {other} runs in {s}..{e}",
                    i.task
                ));
            }
            live.push((start, end, i.task));
        }
        if self.dr.tracing {
            let at = i.at_ns.unwrap_or_else(|| self.dr.now_ns());
            self.events.push(Event {
                kind: EventKind::Issue,
                aicpu: i.aicpu,
                core: i.core,
                task: i.task,
                kernel: i.kernel as u16,
                start_ns: at,
                end_ns: at,
                batch: i.batch,
                stream: i.stream,
                workspace: i.workspace,
            });
        }
    }
    fn jitter(&mut self) {
        self.jitter.maybe_yield();
    }
    fn staged(&mut self, _aicpu: u32, _id: u64) {
        if self.dr.tracing {
            *self.staged_at = self.dr.start.elapsed().as_nanos() as u64;
        }
    }
    fn recorded(&mut self, aicpu: u32, t: &Task) {
        if self.dr.tracing {
            self.events.push(Event {
                kind: EventKind::Record,
                aicpu,
                core: u32::MAX,
                task: t.id,
                kernel: t.kernel,
                start_ns: *self.staged_at,
                end_ns: self.dr.now_ns(),
                batch: 0,
                stream: 0,
                workspace: (0, 0),
            });
        }
    }
    fn read_back(&mut self, aicpu: u32, tensor: u16, _: &Binding, into: &mut [u32]) -> bool {
        // A computing run's tensors have memory: the values the tasks wrote. Without, the
        // runtime array keeps the launch's values.
        let read = self
            .dr
            .memory
            .and_then(|m| m.tensors().get(tensor as usize))
            .is_some_and(|t| t.read_words(into));
        if let Some(m) = self.dr.read_back.get(aicpu as usize) {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(into.to_vec());
        }
        read
    }
    fn reclaimed(&mut self, core: u32, task: u64) {
        if self.dr.check {
            let aicpu = self.dr.core_aicpu[core as usize] as usize;
            let mut live = self.dr.workspace_live[aicpu]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            live.retain(|&(_, _, t)| t != task);
        }
    }
    fn completed(&mut self) {
        if let Some(p) = self.dr.progress {
            p.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Jitter(u64);
impl Jitter {
    fn maybe_yield(&mut self) {
        if self.0 != 0 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let r = ptovm_vm::interp::mix64(self.0);
            if r.is_multiple_of(4) {
                thread::yield_now();
            }
            if r.is_multiple_of(61) {
                thread::sleep(Duration::from_micros(r % 200));
            }
        }
    }
}

/// One simulated AICPU: the shared scheduler and what the simulator keeps beside it.
struct Cpu<'a, 'p, 'm> {
    sched: Aicpu<'a, 'p, 'm, HeapStorage>,
    /// Counted in `Drivers::finished`.
    counted: bool,
    events: Vec<Event>,
    jitter: Jitter,
    /// When the staged task was emitted (ns since the start), for its `Record` trace span.
    staged_at: u64,
}

type Sched<'m> = Shared<'m, Box<[Cell]>, MapLockHost>;

/// Core `core` runs the task in its handshake slot: records its execution and says it is done.
fn execute(
    dr: &Drivers<'_>,
    sh: &Sched<'_>,
    core: u32,
    events: &mut Vec<Event>,
    driver: usize,
) -> Result<(), SimError> {
    let hs = &sh.cores[core as usize];
    let word = hs
        .take()
        .ok_or_else(|| SimError::Check(format!("core {core} was rung without a task")))?;
    let (aicpu, slot) = ((word >> 32) as u32, word as u32);
    let task_slot = &sh.slots[(aicpu * sh.cap + slot) as usize];
    let id = task_slot.task.load(Ordering::Acquire);
    let start_ns = if dr.tracing {
        dr.start.elapsed().as_nanos() as u64
    } else {
        0
    };
    // Global sequence numbers order starts and ends for the check; without it they are not taken.
    let t0 = if dr.check {
        dr.seq.fetch_add(1, Ordering::SeqCst)
    } else {
        0
    };
    // The task's kernel, by the name its index has (the default one does nothing: the run is
    // recorded here).
    let kernel = task_slot.kernel.load(Ordering::Relaxed) as u16;
    let pool = if hs.core_type.load(Ordering::Relaxed) == handshake::CUBE {
        Pool::Cube
    } else {
        Pool::Vector
    };
    if let Some(&(name, k)) = dr.kernels.get(kernel as usize) {
        // A computing run times its kernels (the simulator's overhead is the rest).
        let timer = dr.memory.map(|_| Instant::now());
        let result = k.run(&Call {
            task: id,
            kernel,
            name,
            pool,
            aicpu,
            core,
            slot: sh.desc(aicpu, slot),
            memory: dr.memory,
        });
        if let Some(t) = timer {
            dr.kernel_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        result.map_err(|e| SimError::Kernel {
            task: id,
            kernel: name.to_string(),
            message: e.0,
        })?;
    }
    let t1 = if dr.check {
        dr.seq.fetch_add(1, Ordering::SeqCst)
    } else {
        0
    };
    if dr.check {
        let mut tr = dr.trace.lock().unwrap_or_else(|e| e.into_inner());
        if tr.len() <= id as usize {
            tr.resize(id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
        }
        if tr[id as usize].0 != 0 {
            dr.failed.store(true, Ordering::SeqCst);
        }
        tr[id as usize] = (t0, t1, pool, aicpu);
    }
    if dr.tracing {
        let end_ns = dr.start.elapsed().as_nanos() as u64;
        events.push(Event {
            kind: EventKind::Run,
            aicpu,
            core,
            task: id,
            kernel,
            start_ns,
            end_ns,
            batch: 0,
            stream: 0,
            workspace: (0, 0),
        });
    }
    hs.finish();
    let d = dr.driver_of(dr.core_aicpu[core as usize]);
    if d != driver {
        dr.wake_driver(d);
    }
    Ok(())
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
    launch(v, p, o, progress, kernels, tensors, None)
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
    launch(v, p, o, progress, kernels, &memory.bindings(), Some(memory))
}

fn launch(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: Options,
    progress: Option<&AtomicU64>,
    kernels: &Registry,
    tensors: &[TensorArg],
    memory: Option<&Memory>,
) -> Result<Report, SimError> {
    let n = o.aicpus;
    if n == 0 || n > 64 {
        return Err(SimError::Options(format!(
            "the AICPU count {n} is outside 1..=64"
        )));
    }
    if o.window == 0 || o.window > 65_536 {
        return Err(SimError::Options(format!(
            "the task window must be in 1..=65536 slots, not {}",
            o.window
        )));
    }
    let cube_per: Vec<u32> = (0..n)
        .map(|i| o.cube / n + u32::from(i < o.cube % n))
        .collect();
    let vec_per: Vec<u32> = (0..n)
        .map(|i| o.vector / n + u32::from(i < o.vector % n))
        .collect();
    if cube_per.iter().chain(&vec_per).any(|c| *c == 0) {
        return Err(SimError::Options(format!(
            "every AICPU needs at least one cube and one vector core: {} cube and {} vector cores for {n} AICPUs",
            o.cube, o.vector
        )));
    }
    let threads = o.threads.clamp(1, n as usize);
    // Benchmark mode lets the window grow to 4x its size while counting the overflows.
    let cap = if o.mode == WindowMode::Benchmark {
        o.window * 4
    } else {
        o.window
    };
    let cores = (o.cube + o.vector) as usize;
    // Core c of a pool goes to AICPU c mod n; cube cores are 0.., vector cores follow.
    let core_aicpu: Vec<u32> = (0..o.cube)
        .map(|c| c % n)
        .chain((0..o.vector).map(|c| c % n))
        .collect();
    let too_big = |what: &str| {
        SimError::Options(format!(
            "{what} for {n} windows of {cap} slots is more memory than this host can give"
        ))
    };
    let layout = MapLayout::for_program(&v, n * cap as u32)
        .map_err(|e| SimError::Options(format!("TensorMap: {e}")))?;
    let local_layout = MapLayout::for_program(&v, cap as u32)
        .map_err(|e| SimError::Options(format!("TensorMap: {e}")))?;
    // No descriptor memory (0 words a slot) tells the scheduler not to write descriptors.
    let desc_words = if o.descriptors || !kernels.is_empty() || memory.is_some() {
        desc::slot_words(&v)
    } else {
        0
    };
    let region = Region {
        published: (0..n).map(|_| Padded::new(0)).collect(),
        waiting_for: (0..n).map(|_| Padded::new(u64::MAX)).collect(),
        slots: vec_of(n as usize * cap, Slot::default)
            .ok_or_else(|| too_big("the window slots"))?,
        nodes: vec_of(n as usize * cap * NODES, Node::default)
            .ok_or_else(|| too_big("the waiter nodes"))?,
        ready: (0..2 * n)
            .map(|_| ring(cap))
            .collect::<Option<_>>()
            .ok_or_else(|| too_big("the ready queues"))?,
        passed: (0..n)
            .map(|_| ring(cap))
            .collect::<Option<_>>()
            .ok_or_else(|| too_big("the completion queues"))?,
        cores: (0..cores)
            .map(|c| {
                let hs = CoreSlot::default();
                hs.set_up(if c < o.cube as usize {
                    handshake::CUBE
                } else {
                    handshake::VECTOR
                });
                hs
            })
            .collect(),
        core_aicpu: core_aicpu.clone(),
        map: CachePadded::new(MapLockHost(SpinLock::new(
            heap_map(layout, o.deps).ok_or_else(|| too_big("the TensorMap"))?,
        ))),
        writers: (0..v.tensors().len()).map(|_| AtomicU32::new(0)).collect(),
        next_issue: Padded::new(0),
        barriers: (0..v.readbacks().len()).map(|_| Padded::new(0)).collect(),
        // Zeroed memory: its pages are touched only as slots are used.
        descs: <[AtomicU64]>::new_box_zeroed_with_elems(n as usize * cap * desc_words)
            .map_err(|_| too_big("the task descriptors"))?,
    };
    let sh: Sched<'_> = Shared {
        n,
        cap: cap as u32,
        published: &region.published,
        waiting_for: &region.waiting_for,
        slots: &region.slots,
        nodes: &region.nodes,
        ready: &region.ready,
        passed: &region.passed,
        cores: &region.cores,
        core_aicpu: &region.core_aicpu,
        map: &*region.map,
        writers: &region.writers,
        next_issue: &region.next_issue,
        descs: &region.descs,
        desc_words: desc_words as u32,
        barriers: &region.barriers,
        workspace: Workspace {
            arena: o.workspace.unwrap_or_else(|| {
                let most = (0..n)
                    .map(|a| core_aicpu.iter().filter(|&&c| c == a).count() as u32)
                    .max()
                    .unwrap_or(0);
                Workspace::arena_for(&v, o.window as u32, most)
            }),
            base: 0,
        },
    };
    let cfg = Config {
        window: o.window as u32,
        mode: o.mode,
        start: o.start,
        pipeline_depth: o.pipeline_depth,
        work_steal: o.work_steal,
        batch_deps: o.batch_deps,
        timing: o.timing,
        naive: o.naive,
    };
    let mut buffers: Vec<Buffers> = Vec::new();
    for i in 0..n {
        let own: Vec<u32> = (0..cores as u32)
            .filter(|&c| core_aicpu[c as usize] == i)
            .collect();
        buffers.push(Buffers {
            free: vec![0; cap],
            retiring: vec![0; cap],
            unreleased: vec![0; cap],
            held: vec![0; cap],
            busy: vec![Busy::default(); own.len()],
            cores: own,
            preds: vec_of(n as usize * cap, Pred::default)
                .ok_or_else(|| too_big("the predecessor scratch"))?,
            shares: vec![Sharing::default(); v.tensors().len()],
            tensors: vec![Binding::default(); v.tensors().len()],
        });
    }
    // Where each AICPU's values read back go (`READBACK`, spec/runtime.md §4.5).
    let (mut rb_values, mut rb_slots) = crate::readback_buffers(&v, &p, n);
    let mut cpus: Vec<Cpu> = Vec::new();
    for ((i, b), (values, slots)) in buffers
        .iter_mut()
        .enumerate()
        .zip(rb_values.iter_mut().zip(rb_slots.iter_mut()))
    {
        let i = i as u32;
        let local = Local {
            free: &mut b.free,
            retiring: &mut b.retiring,
            unreleased: &mut b.unreleased,
            held: &mut b.held,
            cores: &mut b.cores,
            busy: &mut b.busy,
            preds: &mut b.preds,
            shares: &mut b.shares,
            tensors: &mut b.tensors,
            bound: tensors,
            map: heap_map(local_layout, o.deps).ok_or_else(|| too_big("the local TensorMaps"))?,
        };
        cpus.push(Cpu {
            sched: Aicpu::new(i, Interpreter::new(v, p, i, n)?, local, &sh)?
                .with_readback(values, slots),
            counted: false,
            events: Vec::new(),
            jitter: Jitter(o.jitter.map_or(0, |s| s ^ (i as u64 + 1))),
            staged_at: 0,
        });
    }
    let dr = Drivers {
        n,
        threads,
        core_aicpu: &core_aicpu,
        handles: (0..threads).map(|_| OnceLock::new()).collect(),
        sleeping: (0..threads)
            .map(|_| CachePadded::new(AtomicBool::new(false)))
            .collect(),
        finished: AtomicU32::new(0),
        failed: AtomicBool::new(false),
        seq: AtomicU64::new(1),
        check: o.check,
        trace: Mutex::new(Vec::new()),
        tracing: o.trace,
        start: Instant::now(),
        progress,
        kernels: kernels.resolve(&v),
        memory,
        kernel_ns: AtomicU64::new(0),
        workspace_live: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
        workspace_overlap: Mutex::new(None),
        read_back: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
    };
    // AICPU i runs on driver thread i mod threads (and on another one that helps: `drive`).
    let cpus: Vec<Mutex<Cpu>> = cpus.into_iter().map(Mutex::new).collect();
    let start = Instant::now();
    let results: Vec<DriverResult> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|d| {
                let (dr, sh, cfg, cpus) = (&dr, &sh, &cfg, &cpus);
                s.spawn(move || drive(dr, sh, cfg, d, cpus))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(SimError::Check("a simulator thread panicked".into())))
            })
            .collect()
    });
    let wall = start.elapsed();
    let mut rep = Report {
        per_aicpu: vec![0; n as usize],
        wall,
        kernel_ns: dr.kernel_ns.load(Ordering::Relaxed),
        threads,
        ..Report::default()
    };
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(events) => rep.events.extend(events),
            Err(e) => errors.push(e),
        }
    }
    let mut k = Counts::default();
    for c in cpus {
        let c = c.into_inner().unwrap_or_else(|e| e.into_inner());
        rep.events.extend(c.events.iter().copied());
        rep.per_aicpu[c.sched.index() as usize] = c.sched.counts().tasks;
        k += c.sched.counts();
        let m = c.sched.local_map();
        if o.check && (m.used() != 0 || m.live() != 0) {
            errors.push(SimError::Check(format!(
                "{} accesses ({} live) left in AICPU {}'s TensorMap after every task retired",
                m.used(),
                m.live(),
                c.sched.index()
            )));
        }
    }
    rep.cube_tasks = k.cube;
    rep.vector_tasks = k.tasks - k.cube;
    rep.edges = k.edges;
    rep.cross_aicpu_edges = k.cross;
    rep.window_stalls = k.stalls;
    rep.overflows = k.overflows;
    rep.stolen = k.stolen;
    rep.dep_batches = k.batches;
    rep.issue_batches = k.issue_batches;
    rep.short_batches = k.short_batches;
    rep.reordered = k.reordered;
    rep.rate_waits = k.rate_waits;
    rep.rate_wait_ns = k.rate_wait_ns;
    rep.workspace_arena = sh.workspace.arena;
    rep.workspace_waits = k.workspace_waits;
    rep.workspace_peak = k.workspace_peak;
    // Report the cause, not the "stopped because another failed" of the other threads.
    if let Some(e) = errors
        .iter()
        .position(|e| !matches!(e, SimError::Check(m) if m.starts_with("stopped")))
    {
        return Err(errors.swap_remove(e));
    }
    if let Some(e) = errors.pop() {
        return Err(e);
    }
    rep.tasks_total = rep.per_aicpu.iter().sum();
    // Every AICPU read the same values at each READBACK (they all read after the same barrier).
    let read: Vec<Vec<u32>> = {
        let lists: Vec<Vec<Vec<u32>>> = dr
            .read_back
            .iter()
            .map(|m| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner())))
            .collect();
        if lists.iter().any(|l| *l != lists[0]) {
            return Err(SimError::Check(
                "the AICPUs read different values at a READBACK".into(),
            ));
        }
        lists.into_iter().next().unwrap_or_default()
    };
    rep.read_back = read.clone();
    if o.check {
        if dr.failed.load(Ordering::SeqCst) {
            return Err(SimError::Check("a task ran twice".into()));
        }
        if let Some(m) = dr
            .workspace_overlap
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(SimError::Check(m));
        }
        // Every task retired, so every access left the map.
        let map = region.map.0.lock();
        if map.used() != 0 || map.live() != 0 {
            return Err(SimError::Check(format!(
                "{} accesses ({} live) left in the TensorMap after every task retired",
                map.used(),
                map.live()
            )));
        }
        drop(map);
        check(
            &v,
            &p,
            n,
            &dr.trace.lock().unwrap_or_else(|e| e.into_inner()),
            &read,
        )?;
        rep.checked = true;
    }
    Ok(rep)
}

/// What a driver thread hands back: the core runs it traced.
type DriverResult = Result<Vec<Event>, SimError>;

/// A driver thread: steps its AICPUs (`i mod threads == d`) and runs the cores' tasks until
/// every AICPU has finished; once its own have, or after a round in which none of them moved,
/// it helps with the others' (whichever no other driver is stepping at the moment), so one
/// slow thread does not leave the other idle, spinning or parked, while there is work. (Without
/// the second case a driver whose AICPUs waited on the other driver's parked for up to half
/// of some runs.)
fn drive(
    dr: &Drivers<'_>,
    sh: &Sched<'_>,
    cfg: &Config,
    d: usize,
    cpus: &[Mutex<Cpu>],
) -> DriverResult {
    let _ = dr.handles[d].set(thread::current());
    let mut events = Vec::new();
    let mut doorbell = Vec::new();
    let idle = crossbeam_utils::Backoff::new();
    let own = |i: usize| i % dr.threads == d;
    let mut helping = false;
    loop {
        if dr.failed.load(Ordering::Relaxed) {
            return Err(SimError::Check("stopped: another AICPU failed".into()));
        }
        let mut progress = false;
        let mut own_left = false;
        for (i, m) in cpus.iter().enumerate() {
            if !own(i) && !helping {
                continue;
            }
            let Ok(mut c) = m.try_lock() else {
                own_left |= own(i);
                continue;
            };
            if c.counted {
                continue;
            }
            own_left |= own(i);
            let c = &mut *c;
            let mut env = StepEnv {
                dr,
                driver: d,
                jitter: &mut c.jitter,
                events: &mut c.events,
                staged_at: &mut c.staged_at,
                doorbell: &mut doorbell,
            };
            match c.sched.step(sh, cfg, &mut env) {
                Ok(p) => progress |= p,
                Err(e) => {
                    dr.failed.store(true, Ordering::SeqCst);
                    dr.wake_all();
                    return Err(e.into());
                }
            }
            if c.sched.finished() && !c.counted {
                c.counted = true;
                dr.finished.fetch_add(1, Ordering::AcqRel);
                dr.wake_all();
            }
        }
        helping = !own_left || !progress;
        // Run the cores that were handed a task.
        for core in doorbell.drain(..) {
            if let Err(e) = execute(dr, sh, core, &mut events, d) {
                dr.failed.store(true, Ordering::SeqCst);
                dr.wake_all();
                return Err(e);
            }
            progress = true;
        }
        if dr.finished.load(Ordering::Acquire) == dr.n {
            return Ok(events);
        }
        if progress {
            idle.reset();
        } else if !idle.is_completed() {
            // Idle, but what this driver waits for (another driver's watermark, a release) is
            // often a few microseconds away: spin, then yield, a bounded number of rounds
            // before paying for a park and an unpark.
            idle.snooze();
        } else {
            dr.sleeping[d].store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            // A task waiting for `rate_limit` is due at its AICPU's `issue_at`: sleep no longer.
            let mut work =
                dr.failed.load(Ordering::Relaxed) || dr.finished.load(Ordering::Acquire) == dr.n;
            let mut due = u64::MAX;
            for (i, m) in cpus.iter().enumerate() {
                if !(own(i) || helping) || work {
                    continue;
                }
                if let Ok(c) = m.try_lock() {
                    if !c.counted {
                        work = c.sched.has_work(sh, cfg);
                        due = due.min(c.sched.issue_at().unwrap_or(u64::MAX));
                    }
                }
            }
            let nap = Duration::from_nanos(due.saturating_sub(dr.now_ns()))
                .min(Duration::from_micros(500));
            if !work && !nap.is_zero() {
                thread::park_timeout(nap);
            }
            dr.sleeping[d].store(false, Ordering::Relaxed);
        }
    }
}

/// Verifies a run: every reference task ran exactly once, on its pool and AICPU, and started after
/// every overlap-mode predecessor ended.
/// Checks the run's trace against the reference expansion, whose `READBACK`s read what the
/// run's AICPUs read (`read`, one list per `READBACK` in order; the run's values themselves are
/// checked by a computing run's in-order comparison).
fn check(
    v: &Verified<'_>,
    p: &RuntimeParams<'_>,
    n: u32,
    tr: &Trace,
    read: &[Vec<u32>],
) -> Result<(), SimError> {
    let mut on_readback = |rb: &ptovm_vm::readback::Readback, _: &[crate::RefTask]| {
        read.get(rb.index as usize).cloned()
    };
    let reference = crate::reference::expand_with(v, p, n, u64::MAX, &mut on_readback)
        .map_err(|e: RunError| SimError::Launch(LaunchError::Run(e)))?;
    check_run(&reference, tr).map_err(SimError::Check)
}
