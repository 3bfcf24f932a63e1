//! The threaded simulator (spec/runtime.md): every AICPU runs the scheduler loop of §4.3 over its
//! own interpreter, window and ready queues, with the cross-AICPU protocol of §4.1–4.2 on real
//! atomics and a sharded global TensorMap. The AICPU loops are non-blocking steps, multiplexed over
//! a few OS threads (`Options::threads`, by default the host's 2 cores) that also execute the
//! AICores' tasks: concurrency is real (several threads), but a waiting AICPU costs no context
//! switch, and an idle thread parks instead of spinning.
//!
//! Kernels are no-ops that only record their execution; `Options::check` verifies a run against
//! the reference expander.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use ptovm_vm::{Interpreter, LaunchError, Pool, RunError, RuntimeParams, Sink, Task, Verified};

use crate::deps::{check_run, heap_map, DepMode, HeapMap, Ran};
use crate::model::WindowMode;
use crate::reference::expand as reference_expand;
use crate::spinlock::{SpinGuard, SpinLock};
use ptovm_vm::handshake::{self, CoreSlot};
use ptovm_vm::ring::{Cell, Ring};
use ptovm_vm::tmap::MapLayout;

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
    /// How the TensorMap matches regions: overlap (every dependency of the reference graph) or
    /// exact (pto-isa's map: equal regions only; `check` then fails where that misses an edge).
    pub deps: DepMode,
}

/// When an AICPU starts dispatching. An AICPU whose generation is blocked — a full window, or
/// waiting for another AICPU's watermark — starts in any case: holding its ready tasks back then
/// could deadlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// As soon as a task is ready.
    Immediate,
    /// Once the AICPU has generated all its tasks.
    AfterOrchestration,
    /// Once the AICPU has generated this many tasks.
    Threshold(u64),
}

/// What a trace event shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// An AICPU recorded a task's dependencies: from emitting it to its registration (§4.1).
    Record,
    /// A core ran a task.
    Run,
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
            deps: DepMode::Overlap,
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
    /// Wall-clock time of the run.
    pub wall: Duration,
    /// Whether the run was checked against the reference (and passed).
    pub checked: bool,
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
}

use crate::waitlist::{self, tag_of, NIL};

const EMPTY: u64 = u64::MAX;
/// Waiter nodes per task: predecessors it can register on; beyond them it waits (§4.1 step 6).
const NODES: usize = 32;

fn pool_index(p: Pool) -> usize {
    if p == Pool::Cube {
        0
    } else {
        1
    }
}

/// A window slot's shared part (spec/runtime.md §3.1).
struct Slot {
    task: CachePadded<AtomicU64>,
    fanin: AtomicU32,
    /// Pool index of the task (0 cube, 1 vector), set before `task` is published.
    pool: AtomicU32,
    /// Kernel index of the task (for the trace).
    kernel: AtomicU32,
    waiters: AtomicU64,
}

/// A waiter node: "this successor waits for the task whose list holds me".
struct Node {
    succ_aicpu: AtomicU32,
    succ_slot: AtomicU32,
    next: AtomicU32,
}

/// A ready queue for a window of `cap` slots (a power of two of at least 2 cells).
fn ready_ring(cap: usize) -> Ring<Box<[Cell]>> {
    let cells: Box<[Cell]> = (0..cap.max(2).next_power_of_two())
        .map(|_| Cell::default())
        .collect();
    Ring::new(cells).expect("a power of two of at least 2")
}

/// The task word an AICPU writes into a core's handshake slot: the owning AICPU and the slot
/// of its window that holds the task.
fn task_word(aicpu: u32, slot: u32) -> u64 {
    (aicpu as u64) << 32 | slot as u64
}

/// Per-task execution record for the check: (start seq, end seq, pool, aicpu).
type Trace = Vec<Ran>;

/// A predecessor: (aicpu, slot, id).
type Pred = (u32, u32, u64);

struct Shared<'r> {
    n: u32,
    window: usize,
    threads: usize,
    published: Vec<CachePadded<AtomicU64>>,
    slots: Vec<Vec<Slot>>,
    /// `nodes[aicpu][slot * NODES + k]`.
    nodes: Vec<Vec<Node>>,
    /// Per AICPU and pool: its ready tasks' slots (`vm::ring`, the device's ready queue).
    ready: Vec<[Ring<Box<[Cell]>>; 2]>,
    /// Per AICPU: slots of its tasks that completed on another AICPU's core (stolen), passed on
    /// by the AICPU that saw the core finish.
    completions: Vec<ArrayQueue<u32>>,
    /// The cores' handshake slots (`vm::handshake`, seed 003 §4.1): cube cores first.
    cores: Vec<CoreSlot>,
    /// The AICPU that drives each core.
    core_aicpu: Vec<u32>,
    /// Cores that have just been handed a task: the simulated cores are multiplexed on the
    /// driver threads, which take a core from here instead of polling all of them.
    doorbell: ArrayQueue<u32>,
    /// The global TensorMap (spec/runtime.md §3.2): the vm's fixed-capacity map, one handle per
    /// window slot of every AICPU (`aicpu * cap + slot`).
    map: CachePadded<SpinLock<HeapMap>>,
    /// Window slots per AICPU (with benchmark mode's headroom).
    cap: u32,
    /// Driver threads and whether each is parked (or about to).
    drivers: Vec<OnceLock<thread::Thread>>,
    sleeping: Vec<CachePadded<AtomicBool>>,
    /// The id of the task each AICPU waits to record (`u64::MAX`: not waiting on watermarks).
    waiting_for: Vec<CachePadded<AtomicU64>>,
    finished: AtomicU32,
    failed: AtomicBool,
    seq: AtomicU64,
    check: bool,
    trace: Mutex<Trace>,
    tracing: bool,
    start: Instant,
    total_cube: u32,
    work_steal: bool,
    progress: Option<&'r AtomicU64>,
}

impl Shared<'_> {
    /// Unparks driver `d` if it sleeps. Callers publish what it waits for first; the SeqCst
    /// fence pairs with the one in the driver's park (flag, fence, re-check, park), so the wake-up
    /// is not lost — and parking has a timeout besides.
    fn wake_driver(&self, d: usize) {
        fence(Ordering::SeqCst);
        if self.sleeping[d].load(Ordering::Relaxed) {
            if let Some(t) = self.drivers[d].get() {
                t.unpark();
            }
        }
    }
    fn wake(&self, aicpu: u32) {
        self.wake_driver(aicpu as usize % self.threads);
    }
    fn wake_all(&self) {
        for d in 0..self.threads {
            self.wake_driver(d);
        }
    }
    /// After a watermark moved to `mark`: wakes the drivers of the AICPUs it may unblock.
    fn wake_waiters(&self, mark: u64) {
        fence(Ordering::SeqCst);
        for a in 0..self.n {
            if self.waiting_for[a as usize].load(Ordering::Relaxed) <= mark {
                self.wake(a);
            }
        }
    }
}

struct Pause;
impl Sink for Pause {
    fn task(&mut self, _: &Task) -> bool {
        false
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

#[derive(Default)]
struct Counts {
    stolen: u64,
    tasks: u64,
    cube: u64,
    edges: u64,
    cross: u64,
    stalls: u64,
    overflows: u64,
    batches: u64,
}

/// One AICPU: its interpreter and the scheduler state only it touches.
struct Cpu<'a, 'p> {
    me: u32,
    interp: Interpreter<'a, 'p>,
    /// The interpreter holds a staged task (paused right after emitting it).
    staged: bool,
    /// Slot of the placed task not yet recorded.
    pending: Option<u32>,
    done: bool,
    retired: bool,
    in_window: usize,
    free_slots: Vec<u32>,
    /// Slots of completed tasks whose successors are not released yet (`batch_deps`).
    unreleased: Vec<u32>,
    /// Slots of completed tasks not yet retired from the map (§4.2 step 3, batched).
    retiring: Vec<u32>,
    deferred: Vec<(u32, Vec<Pred>)>,
    others_min: u64,
    /// Idle cores of each pool (global core ids: cube cores first).
    free_cores: [Vec<u32>; 2],
    /// Cores running a task this AICPU handed them: (core, owning AICPU, slot).
    busy: Vec<(u32, u32, u32)>,
    /// Tasks running on this AICPU's cores, per pool (for `pipeline_depth`).
    running: [u32; 2],
    /// Dispatch has begun (the start policy was met).
    started: bool,
    /// Tasks recorded so far (for `Start::Threshold`).
    generated: u64,
    /// When the staged task was emitted (ns since the start), for its `Record` trace span.
    staged_at: u64,
    events: Vec<Event>,
    counts: Counts,
    jitter: Jitter,
}

impl<'a, 'p> Cpu<'a, 'p> {
    /// One round of the scheduler loop (spec/runtime.md §4.3); returns whether it did anything.
    fn step(&mut self, sh: &Shared, o: &Options) -> Result<bool, SimError> {
        let me = self.me as usize;
        let mut progress = false;
        // (1) Completions (§4.2): its cores that went idle, and its stolen tasks that finished
        // on another AICPU's cores.
        let mut i = 0;
        while i < self.busy.len() {
            let (core, owner, slot) = self.busy[i];
            if !sh.cores[core as usize].idle() {
                i += 1;
                continue;
            }
            self.busy.swap_remove(i);
            progress = true;
            self.jitter.maybe_yield();
            self.core_back(sh, core);
            if owner == self.me {
                self.completed(sh, o, slot);
            } else {
                while sh.completions[owner as usize].push(slot).is_err() {
                    thread::yield_now();
                }
                sh.wake(owner);
            }
        }
        while let Some(slot) = sh.completions[me].pop() {
            progress = true;
            self.completed(sh, o, slot);
        }
        let completions = progress;
        progress = false;
        // (2) Dispatch, once the start policy allows it (a full window always does).
        if !self.started {
            self.started = self.in_window >= sh.window
                || match o.start {
                    Start::Immediate => true,
                    Start::AfterOrchestration => {
                        self.done && !self.staged && self.pending.is_none()
                    }
                    Start::Threshold(n) => {
                        self.generated >= n || (self.done && !self.staged && self.pending.is_none())
                    }
                };
        }
        let mut dispatched = false;
        for pl in 0..2 {
            if !self.started {
                break;
            }
            while !self.free_cores[pl].is_empty()
                && (o.pipeline_depth == 0 || self.running[pl] < o.pipeline_depth)
            {
                // Its own ready tasks first; an idle core may then take another AICPU's.
                let (owner, slot) = match sh.ready[me][pl].pop() {
                    Some(slot) => (self.me, slot),
                    None if o.work_steal => {
                        let victim = (1..sh.n)
                            .map(|k| (self.me + k) % sh.n)
                            .find_map(|v| sh.ready[v as usize][pl].pop().map(|s| (v, s)));
                        match victim {
                            Some(found) => found,
                            None => break,
                        }
                    }
                    None => break,
                };
                let core = self.free_cores[pl].pop().unwrap_or_default();
                self.running[pl] += 1;
                if owner != self.me {
                    self.counts.stolen += 1;
                }
                sh.cores[core as usize]
                    .assign(task_word(owner, slot))
                    .map_err(|_| SimError::Check(format!("core {core} was handed two tasks")))?;
                self.busy.push((core, owner, slot));
                while sh.doorbell.push(core).is_err() {
                    thread::yield_now();
                }
                dispatched = true;
            }
        }
        if dispatched {
            progress = true;
            // This driver runs the cores it rang after its round; a sleeping one is woken to
            // help only when they pile up (a wake-up is a context switch on a small machine).
            if sh.doorbell.len() >= 64 {
                sh.wake_all();
            }
        }
        // Tasks waiting for predecessors beyond their waiter nodes keep their guard until those
        // retire.
        self.deferred.retain_mut(|(k, preds)| {
            preds.retain(|(pa, ps, pid)| {
                !waitlist::completed(&sh.slots[*pa as usize][*ps as usize].waiters, tag_of(*pid))
            });
            if preds.is_empty() {
                release_guard(sh, me as u32, *k, me % sh.threads);
                progress = true;
                false
            } else {
                true
            }
        });
        // (3) Generation (§4.1), as far as it goes without waiting.
        loop {
            if !self.staged && self.pending.is_none() && !self.done {
                self.jitter.maybe_yield();
                let before = self.interp.stats().emitted;
                self.interp
                    .run(&mut Pause, 1)
                    .map_err(|e| SimError::Launch(LaunchError::Run(e)))?;
                let mark = if self.interp.stats().emitted > before {
                    self.staged = true;
                    if sh.tracing {
                        self.staged_at = sh.start.elapsed().as_nanos() as u64;
                    }
                    self.interp.current_task().id
                } else {
                    self.done = true;
                    u64::MAX
                };
                sh.published[me].store(mark, Ordering::Release);
                sh.wake_waiters(mark);
                progress = true;
            }
            if self.staged && self.pending.is_none() {
                if self.in_window >= sh.window {
                    match o.mode {
                        WindowMode::Abort => {
                            return Err(SimError::WindowAbort {
                                aicpu: self.me,
                                window: sh.window,
                            })
                        }
                        WindowMode::Benchmark if !self.free_slots.is_empty() => {
                            self.counts.overflows += 1
                        }
                        _ => {
                            self.counts.stalls += 1;
                            self.started = true;
                            break;
                        }
                    }
                }
                if self.free_slots.is_empty() && !self.retiring.is_empty() {
                    let mut map = sh.map.lock();
                    self.flush(sh, &mut map)?;
                }
                let Some(k) = self.free_slots.pop() else {
                    self.counts.stalls += 1;
                    self.started = true;
                    break;
                };
                let t = self.interp.current_task();
                let s = &sh.slots[me][k as usize];
                s.fanin.store(1, Ordering::Relaxed);
                s.pool.store(pool_index(t.pool()) as u32, Ordering::Relaxed);
                s.kernel.store(t.kernel as u32, Ordering::Relaxed);
                waitlist::open(&s.waiters, tag_of(t.id));
                s.task.store(t.id, Ordering::Release);
                self.pending = Some(k);
                self.in_window += 1;
                progress = true;
            }
            let Some(k) = self.pending else { break };
            let id = self.interp.current_task().id;
            if !o.naive && self.others_min < id {
                self.others_min = (0..sh.n)
                    .filter(|a| *a as usize != me)
                    .map(|a| sh.published[a as usize].load(Ordering::Acquire))
                    .min()
                    .unwrap_or(u64::MAX);
            }
            if !o.naive && self.others_min < id {
                sh.waiting_for[me].store(id, Ordering::SeqCst);
                // Re-check after announcing: a watermark published in between woke nobody.
                self.others_min = (0..sh.n)
                    .filter(|a| *a as usize != me)
                    .map(|a| sh.published[a as usize].load(Ordering::Acquire))
                    .min()
                    .unwrap_or(u64::MAX);
                if self.others_min < id {
                    // Blocked on another AICPU: holding ready tasks back now could deadlock
                    // (that AICPU may wait for them), so the start policy gives way.
                    self.started = true;
                    break;
                }
            }
            sh.waiting_for[me].store(u64::MAX, Ordering::Relaxed);
            self.jitter.maybe_yield();
            let mut map = sh.map.lock();
            self.flush(sh, &mut map)?;
            let rest = record_and_register(
                sh,
                map,
                self.me,
                k,
                self.interp.current_task(),
                &mut self.counts,
            )?;
            if sh.tracing {
                let t = self.interp.current_task();
                self.events.push(Event {
                    kind: EventKind::Record,
                    aicpu: self.me,
                    core: u32::MAX,
                    task: t.id,
                    kernel: t.kernel,
                    start_ns: self.staged_at,
                    end_ns: sh.start.elapsed().as_nanos() as u64,
                });
            }
            self.pending = None;
            self.staged = false;
            self.generated += 1;
            progress = true;
            if rest.is_empty() {
                release_guard(sh, self.me, k, me % sh.threads);
            } else {
                self.deferred.push((k, rest));
            }
        }
        // A held-back batch goes out as soon as nothing else moves: holding it longer could
        // keep every AICPU waiting.
        if !progress && !self.unreleased.is_empty() {
            self.release(sh);
            progress = true;
        }
        progress |= completions;
        if self.done
            && !self.staged
            && self.pending.is_none()
            && self.in_window == 0
            && self.deferred.is_empty()
            && self.busy.is_empty()
            && !self.retired
        {
            let mut map = sh.map.lock();
            self.flush(sh, &mut map)?;
            drop(map);
            self.retired = true;
            sh.finished.fetch_add(1, Ordering::AcqRel);
            sh.wake_all();
            progress = true;
        }
        Ok(progress)
    }

    /// Task in `slot` completed: its successors are released now or with the next batch.
    fn completed(&mut self, sh: &Shared, o: &Options, slot: u32) {
        self.unreleased.push(slot);
        if self.unreleased.len() >= o.batch_deps.max(1) as usize {
            self.release(sh);
        }
    }

    /// §4.2 steps 1–2 for the completed tasks of `unreleased`, as one batch: closes their
    /// successor lists and releases the successors; their slots go to `retiring`.
    fn release(&mut self, sh: &Shared) {
        let me = self.me as usize;
        self.counts.batches += 1;
        for i in 0..self.unreleased.len() {
            let slot = self.unreleased[i];
            let s = &sh.slots[me][slot as usize];
            let id = s.task.load(Ordering::Relaxed);
            if s.pool.load(Ordering::Relaxed) == 0 {
                self.counts.cube += 1;
            }
            // Close the successor list and notify; node indices are global: aicpu << 24 | index.
            let mut cur = waitlist::close(&s.waiters, tag_of(id));
            while cur != NIL {
                let nd = &sh.nodes[(cur >> 24) as usize][(cur & 0xFF_FFFF) as usize];
                let sa = nd.succ_aicpu.load(Ordering::Acquire);
                let ss = nd.succ_slot.load(Ordering::Acquire);
                let next = nd.next.load(Ordering::Acquire);
                release_guard(sh, sa, ss, me % sh.threads);
                cur = next;
            }
            // Its accesses leave the map, and the slot becomes free, at the next flush
            // (batched under the map lock this AICPU takes to record anyway).
            self.retiring.push(slot);
            self.in_window -= 1;
            self.counts.tasks += 1;
            if let Some(p) = sh.progress {
                p.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.unreleased.clear();
    }

    /// Retires the completed tasks of `retiring` (spec/runtime.md §4.2 step 3): their accesses
    /// leave the map and their slots become free. Called with the map locked.
    fn flush(&mut self, sh: &Shared, map: &mut HeapMap) -> Result<(), SimError> {
        for slot in self.retiring.drain(..) {
            map.retire(self.me * sh.cap + slot)
                .map_err(|e| SimError::Check(format!("TensorMap: {e}")))?;
            sh.slots[self.me as usize][slot as usize]
                .task
                .store(EMPTY, Ordering::Release);
            self.free_slots.push(slot);
        }
        Ok(())
    }

    /// A core of this AICPU is idle again.
    fn core_back(&mut self, sh: &Shared, core: u32) {
        let pl = usize::from(core >= sh.total_cube);
        self.free_cores[pl].push(core);
        self.running[pl] = self.running[pl].saturating_sub(1);
    }

    /// Whether a round could do something now (checked before parking).
    fn has_work(&self, sh: &Shared) -> bool {
        let me = self.me as usize;
        let watermarks = self.pending.is_some() && {
            let id = self.interp.current_task().id;
            (0..sh.n)
                .all(|a| a as usize == me || sh.published[a as usize].load(Ordering::Acquire) >= id)
        };
        let steal =
            |pl: usize| sh.work_steal && (0..sh.n).any(|v| !sh.ready[v as usize][pl].is_empty());
        !sh.completions[me].is_empty()
            || self.busy.iter().any(|b| sh.cores[b.0 as usize].idle())
            || (!self.free_cores[0].is_empty() && (!sh.ready[me][0].is_empty() || steal(0)))
            || (!self.free_cores[1].is_empty() && (!sh.ready[me][1].is_empty() || steal(1)))
            || watermarks
            || (!self.staged && self.pending.is_none() && !self.done)
            || !self.deferred.is_empty()
    }
}

/// §4.1 step 7 (and §4.2 step 2): drops one hold on a task's fanin; the last one makes it ready.
fn release_guard(sh: &Shared, aicpu: u32, slot: u32, from: usize) {
    let s = &sh.slots[aicpu as usize][slot as usize];
    if waitlist::release(&s.fanin) {
        let pl = s.pool.load(Ordering::Acquire) as usize & 1;
        while sh.ready[aicpu as usize][pl].push(slot).is_err() {
            thread::yield_now();
        }
        // A driver sees its own AICPUs' queues on its next round: only another driver is woken.
        if aicpu as usize % sh.threads != from {
            sh.wake(aicpu);
        }
    }
}

/// Core `core` runs the task in its handshake slot: records its execution and says it is done.
fn execute(sh: &Shared, core: u32, events: &mut Vec<Event>, driver: usize) -> Result<(), SimError> {
    let slot_of_core = &sh.cores[core as usize];
    let word = slot_of_core
        .take()
        .ok_or_else(|| SimError::Check(format!("core {core} was rung without a task")))?;
    let (aicpu, slot) = ((word >> 32) as u32, word as u32);
    let id = sh.slots[aicpu as usize][slot as usize]
        .task
        .load(Ordering::Acquire);
    let start_ns = if sh.tracing {
        sh.start.elapsed().as_nanos() as u64
    } else {
        0
    };
    // Global sequence numbers order starts and ends for the check; without it they are not taken.
    let t0 = if sh.check {
        sh.seq.fetch_add(1, Ordering::SeqCst)
    } else {
        0
    };
    // The default kernel does nothing but record its execution.
    let t1 = if sh.check {
        sh.seq.fetch_add(1, Ordering::SeqCst)
    } else {
        0
    };
    if sh.check {
        let mut tr = sh.trace.lock().unwrap_or_else(|e| e.into_inner());
        if tr.len() <= id as usize {
            tr.resize(id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
        }
        if tr[id as usize].0 != 0 {
            sh.failed.store(true, Ordering::SeqCst);
        }
        let pool = if slot_of_core.core_type.load(Ordering::Relaxed) == handshake::CUBE {
            Pool::Cube
        } else {
            Pool::Vector
        };
        tr[id as usize] = (t0, t1, pool, aicpu);
    }
    if sh.tracing {
        let kernel = sh.slots[aicpu as usize][slot as usize]
            .kernel
            .load(Ordering::Relaxed) as u16;
        let end_ns = sh.start.elapsed().as_nanos() as u64;
        events.push(Event {
            kind: EventKind::Run,
            aicpu,
            core,
            task: id,
            kernel,
            start_ns,
            end_ns,
        });
    }
    slot_of_core.finish();
    let driven_by = sh.core_aicpu[core as usize];
    if driven_by as usize % sh.threads != driver {
        sh.wake(driven_by);
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
    let mut cpus: Vec<Cpu> = Vec::new();
    for i in 0..n {
        cpus.push(Cpu {
            me: i,
            interp: Interpreter::new(v, p, i, n)?,
            staged: false,
            pending: None,
            done: false,
            retired: false,
            in_window: 0,
            free_slots: (0..cap as u32).rev().collect(),
            retiring: Vec::with_capacity(cap),
            unreleased: Vec::with_capacity(cap),
            deferred: Vec::new(),
            others_min: 0,
            // Core c of a pool goes to AICPU c mod n; cube cores are 0.., vector cores follow.
            free_cores: [
                (0..o.cube).filter(|c| c % n == i).rev().collect(),
                (0..o.vector)
                    .filter(|c| c % n == i)
                    .map(|c| o.cube + c)
                    .rev()
                    .collect(),
            ],
            busy: Vec::with_capacity((o.cube + o.vector) as usize),
            staged_at: 0,
            events: Vec::new(),
            running: [0, 0],
            started: false,
            generated: 0,
            counts: Counts::default(),
            jitter: Jitter(o.jitter.map_or(0, |s| s ^ (i as u64 + 1))),
        });
    }
    let layout = MapLayout::for_program(&v, n * cap as u32)
        .map_err(|e| SimError::Options(format!("TensorMap: {e}")))?;
    let map = heap_map(layout, o.deps).ok_or_else(|| {
            SimError::Options(format!(
                "the TensorMap for {n} windows of {cap} slots needs {} bytes, more than this host can give",
                layout.bytes()
            ))
        })?;
    let sh = Shared {
        n,
        window: o.window,
        threads,
        published: (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
        slots: (0..n)
            .map(|_| {
                (0..cap)
                    .map(|_| Slot {
                        task: CachePadded::new(AtomicU64::new(EMPTY)),
                        fanin: AtomicU32::new(0),
                        pool: AtomicU32::new(0),
                        kernel: AtomicU32::new(0),
                        waiters: AtomicU64::new(waitlist::pack(0, NIL)),
                    })
                    .collect()
            })
            .collect(),
        nodes: (0..n)
            .map(|_| {
                (0..cap * NODES)
                    .map(|_| Node {
                        succ_aicpu: AtomicU32::new(0),
                        succ_slot: AtomicU32::new(0),
                        next: AtomicU32::new(NIL),
                    })
                    .collect()
            })
            .collect(),
        ready: (0..n).map(|_| [ready_ring(cap), ready_ring(cap)]).collect(),
        completions: (0..n)
            .map(|_| ArrayQueue::new(cap + (o.cube + o.vector) as usize))
            .collect(),
        cores: (0..o.cube + o.vector)
            .map(|c| {
                let slot = CoreSlot::default();
                slot.set_up(if c < o.cube {
                    handshake::CUBE
                } else {
                    handshake::VECTOR
                });
                slot
            })
            .collect(),
        core_aicpu: (0..o.cube)
            .map(|c| c % n)
            .chain((0..o.vector).map(|c| c % n))
            .collect(),
        doorbell: ArrayQueue::new((o.cube + o.vector) as usize + 1),
        map: CachePadded::new(SpinLock::new(map)),
        cap: cap as u32,
        drivers: (0..threads).map(|_| OnceLock::new()).collect(),
        sleeping: (0..threads)
            .map(|_| CachePadded::new(AtomicBool::new(false)))
            .collect(),
        waiting_for: (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(u64::MAX)))
            .collect(),
        finished: AtomicU32::new(0),
        failed: AtomicBool::new(false),
        seq: AtomicU64::new(1),
        check: o.check,
        trace: Mutex::new(Vec::new()),
        tracing: o.trace,
        start: Instant::now(),
        total_cube: o.cube,
        work_steal: o.work_steal,
        progress,
    };
    // Hand the AICPUs out to the drivers: AICPU i to driver i mod threads.
    let mut groups: Vec<Vec<Cpu>> = (0..threads).map(|_| Vec::new()).collect();
    for c in cpus {
        let d = c.me as usize % threads;
        groups[d].push(c);
    }
    let start = Instant::now();
    let results: Vec<DriverResult> = thread::scope(|s| {
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(d, group)| {
                let sh = &sh;
                s.spawn(move || drive(sh, d, group, &o))
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
        ..Report::default()
    };
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok((group, events)) => {
                rep.events.extend(events);
                for c in group {
                    rep.events.extend(c.events.iter().copied());
                    let k = &c.counts;
                    rep.per_aicpu[c.me as usize] = k.tasks;
                    rep.cube_tasks += k.cube;
                    rep.vector_tasks += k.tasks - k.cube;
                    rep.edges += k.edges;
                    rep.cross_aicpu_edges += k.cross;
                    rep.window_stalls += k.stalls;
                    rep.overflows += k.overflows;
                    rep.stolen += k.stolen;
                    rep.dep_batches += k.batches;
                }
            }
            Err(e) => errors.push(e),
        }
    }
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
    if o.check {
        if sh.failed.load(Ordering::SeqCst) {
            return Err(SimError::Check("a task ran twice".into()));
        }
        // Every task retired, so every access left the map.
        let map = sh.map.lock();
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
            &sh.trace.lock().unwrap_or_else(|e| e.into_inner()),
        )?;
        rep.checked = true;
    }
    Ok(rep)
}

/// What a driver thread hands back: its AICPUs (with their counters) and the core runs it traced.
type DriverResult<'a, 'p> = Result<(Vec<Cpu<'a, 'p>>, Vec<Event>), SimError>;

/// A driver thread: steps its AICPUs and runs the cores' tasks until every AICPU has finished.
fn drive<'a, 'p>(
    sh: &Shared,
    d: usize,
    mut group: Vec<Cpu<'a, 'p>>,
    o: &Options,
) -> DriverResult<'a, 'p> {
    let _ = sh.drivers[d].set(thread::current());
    let mut events = Vec::new();
    let idle = crossbeam_utils::Backoff::new();
    loop {
        if sh.failed.load(Ordering::Relaxed) {
            return Err(SimError::Check("stopped: another AICPU failed".into()));
        }
        let mut progress = false;
        for c in group.iter_mut() {
            match c.step(sh, o) {
                Ok(p) => progress |= p,
                Err(e) => {
                    sh.failed.store(true, Ordering::SeqCst);
                    sh.wake_all();
                    return Err(e);
                }
            }
        }
        // Run the cores that were handed a task (any driver may run any core).
        for _ in 0..256 {
            let Some(core) = sh.doorbell.pop() else { break };
            if let Err(e) = execute(sh, core, &mut events, d) {
                sh.failed.store(true, Ordering::SeqCst);
                sh.wake_all();
                return Err(e);
            }
            progress = true;
        }
        if sh.finished.load(Ordering::Acquire) == sh.n && sh.doorbell.is_empty() {
            return Ok((group, events));
        }
        if progress {
            idle.reset();
        } else if !idle.is_completed() {
            // Idle, but what this driver waits for (another driver's watermark, a release) is
            // often a few microseconds away: spin, then yield, a bounded number of rounds
            // before paying for a park and an unpark.
            idle.snooze();
        } else {
            sh.sleeping[d].store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let work = !sh.doorbell.is_empty()
                || group.iter().any(|c| c.has_work(sh))
                || sh.failed.load(Ordering::Relaxed)
                || sh.finished.load(Ordering::Acquire) == sh.n;
            if !work {
                thread::park_timeout(Duration::from_micros(500));
            }
            sh.sleeping[d].store(false, Ordering::Relaxed);
        }
    }
}

/// §4.1 steps 5–6: looks up predecessors and records `t`'s accesses (holding `map`, released
/// before registering), then registers on them.
/// Returns the predecessors beyond the task's waiter nodes: the caller keeps the guard until they
/// have retired.
fn record_and_register(
    sh: &Shared,
    mut map: SpinGuard<'_, HeapMap>,
    me: u32,
    slot: u32,
    t: &Task,
    c: &mut Counts,
) -> Result<Vec<Pred>, SimError> {
    let mut preds: Vec<Pred> = Vec::new();
    let cap = sh.cap;
    map.add(t.id, me * cap + slot, t.ios(), &mut |p| {
        preds.push((p.handle / cap, p.handle % cap, p.id))
    })
    .map_err(|e| SimError::Check(format!("TensorMap: {e}")))?;
    drop(map);
    let s = &sh.slots[me as usize][slot as usize];
    let mut k = 0usize;
    let mut rest = Vec::new();
    for (pa, ps, pid) in preds {
        let target = &sh.slots[pa as usize][ps as usize];
        if k >= NODES {
            rest.push((pa, ps, pid));
            continue;
        }
        let node_index = slot as usize * NODES + k;
        let nd = &sh.nodes[me as usize][node_index];
        nd.succ_aicpu.store(me, Ordering::Relaxed);
        nd.succ_slot.store(slot, Ordering::Relaxed);
        let global = (me << 24) | node_index as u32;
        if waitlist::register(&target.waiters, tag_of(pid), global, &s.fanin, |first| {
            nd.next.store(first, Ordering::Relaxed)
        }) {
            k += 1;
            c.edges += 1;
            if pa != me {
                c.cross += 1;
            }
        }
    }
    Ok(rest)
}

/// Verifies a run: every reference task ran exactly once, on its pool and AICPU, and started after
/// every overlap-mode predecessor ended.
fn check(v: &Verified<'_>, p: &RuntimeParams<'_>, n: u32, tr: &Trace) -> Result<(), SimError> {
    let reference = reference_expand(v, p, n, u64::MAX)
        .map_err(|e: RunError| SimError::Launch(LaunchError::Run(e)))?;
    check_run(&reference, tr).map_err(SimError::Check)
}
