//! The threaded simulator (spec/runtime.md): one OS thread per AICPU running the scheduler loop of
//! §4.3 over its own interpreter, window and ready queues; a global TensorMap; the cross-AICPU
//! protocol of §4.1–4.2 with real atomics; and the AICores, multiplexed over a few worker threads
//! fed through a channel (no thread per core, no spinning: idle threads park).
//!
//! This first version runs kernels as no-ops that only record their execution, and checks a run
//! against the reference expander (`Options::check`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use ptovm_vm::{Interpreter, Io, LaunchError, Pool, RuntimeParams, Sink, Task, Verified};

use crate::deps::{covers, edges, DepMode};
use crate::model::WindowMode;
use crate::reference::{expand as reference_expand, RefTask};

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
    /// Worker threads executing the cores' tasks.
    pub workers: usize,
    /// Verify the run against the reference expander.
    pub check: bool,
    /// Inject random yields into generation and completion (stress testing), with this seed.
    pub jitter: Option<u64>,
    /// Skip the watermark wait (the naïve protocol), to show that the check catches it.
    pub naive: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            aicpus: 6,
            cube: 24,
            vector: 48,
            window: 1024,
            mode: WindowMode::Stall,
            workers: 2,
            check: false,
            jitter: None,
            naive: false,
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
    /// Wall-clock time of the run.
    pub wall: Duration,
    /// Whether the run was checked against the reference (and passed).
    pub checked: bool,
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

const EMPTY: u64 = u64::MAX;
const NIL: u32 = u32::MAX;
const CLOSED: u32 = u32::MAX - 1;
/// Waiter nodes per task: predecessors it can register on; more are waited for instead.
const NODES: usize = 32;

fn pack(tag: u32, node: u32) -> u64 {
    ((tag as u64) << 32) | node as u64
}
fn tag_of(id: u64) -> u32 {
    id as u32
}

/// A window slot's shared part (spec/runtime.md §3.1).
struct Slot {
    task: CachePadded<AtomicU64>,
    fanin: AtomicU32,
    /// Pool index of the task (0 cube, 1 vector), set before `task` is published.
    pool: AtomicU32,
    waiters: AtomicU64,
}

/// A waiter node: "this successor waits for the task whose list holds me".
struct Node {
    succ_aicpu: AtomicU32,
    succ_slot: AtomicU32,
    next: AtomicU32,
}

struct Shared {
    n: u32,
    window: usize,
    published: Vec<CachePadded<AtomicU64>>,
    slots: Vec<Vec<Slot>>,
    /// `nodes[aicpu][slot * NODES + k]`.
    nodes: Vec<Vec<Node>>,
    ready: Vec<[ArrayQueue<u32>; 2]>,
    completions: Vec<ArrayQueue<(u32, u32)>>,
    map: Vec<Mutex<Shard>>,
    /// AICPU threads, and whether each is parked (or about to park).
    threads: Vec<OnceLock<thread::Thread>>,
    sleeping: Vec<CachePadded<AtomicBool>>,
    /// The id of the task each AICPU waits to record (`u64::MAX`: not waiting on watermarks).
    waiting_for: Vec<CachePadded<AtomicU64>>,
    /// Tasks handed to the cores, taken by the worker threads.
    jobs: ArrayQueue<Job>,
    workers: Vec<OnceLock<thread::Thread>>,
    workers_sleeping: AtomicU32,
    shutdown: AtomicBool,
    failed: AtomicBool,
    seq: AtomicU64,
}

/// One shard of the global TensorMap (spec/runtime.md §3.2): the live accesses of the tensors
/// hashed to it, regions one element wide in dimension 0 bucketed by (tensor, that index), wider
/// ones in a list every lookup on the tensor scans.
#[derive(Default)]
struct Shard {
    buckets: std::collections::HashMap<(u16, i64), Vec<Entry>>,
    wide: Vec<Entry>,
}

fn bucket(io: &Io) -> Option<i64> {
    let (a, b) = io.ranges[0];
    (io.ndims >= 1 && b - a == 1).then_some(a)
}

#[derive(Clone, Copy)]
struct Entry {
    io: Io,
    id: u64,
    aicpu: u32,
    slot: u32,
}

impl Shared {
    /// Unparks AICPU `aicpu` if it is parked. Callers have published what it waits for before
    /// calling; the SeqCst fence pairs with the one in `park` (a sleeper sets its flag, fences,
    /// then re-checks its work before parking), so a wake-up is not lost — and parking has a
    /// timeout besides.
    fn wake(&self, aicpu: u32) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping[aicpu as usize].load(Ordering::Relaxed) {
            if let Some(t) = self.threads[aicpu as usize].get() {
                t.unpark();
            }
        }
    }
    /// After a watermark moved to `published`: wakes the AICPUs whose pending task it may
    /// unblock.
    fn wake_waiters(&self, published: u64) {
        std::sync::atomic::fence(Ordering::SeqCst);
        for a in 0..self.n {
            if self.waiting_for[a as usize].load(Ordering::Relaxed) <= published {
                self.wake(a);
            }
        }
    }
    fn wake_all(&self) {
        for a in 0..self.n {
            self.wake(a);
        }
    }
    fn wake_worker(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.workers_sleeping.load(Ordering::Relaxed) > 0 {
            for w in self.workers.iter().filter_map(|w| w.get()) {
                w.unpark();
            }
        }
    }
    fn live(&self, e: &Entry) -> bool {
        self.slots[e.aicpu as usize][e.slot as usize]
            .task
            .load(Ordering::Acquire)
            == e.id
    }
}

struct Stage(Option<RefTask>);
impl Sink for Stage {
    fn task(&mut self, t: &Task) -> bool {
        self.0 = Some(RefTask::from_task(t, 0));
        false
    }
}

/// A job for the core workers: run task `id` of AICPU `aicpu`'s slot `slot` on core `core`.
struct Job {
    aicpu: u32,
    slot: u32,
    core: u32,
    id: u64,
}

/// Per-task execution record for the check: (start seq, end seq, pool, aicpu).
type Trace = Vec<(u64, u64, Pool, u32)>;

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

/// Runs the program on the simulator.
pub fn run(v: Verified<'_>, p: RuntimeParams<'_>, o: Options) -> Result<Report, SimError> {
    let n = o.aicpus;
    if n == 0 || n > 64 {
        return Err(SimError::Options(format!(
            "the AICPU count {n} is outside 1..=64"
        )));
    }
    if o.window == 0 {
        return Err(SimError::Options(
            "the task window must have at least one slot".into(),
        ));
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
    // Validate the launch on every AICPU before starting threads.
    for i in 0..n {
        Interpreter::new(v, p, i, n)?;
    }
    let w = o.window;
    if w > 65_536 {
        return Err(SimError::Options(format!(
            "the task window {w} is above the simulator's limit of 65536 slots"
        )));
    }
    // Benchmark mode lets the window grow to 4x its size while counting the overflows.
    let cap = if o.mode == WindowMode::Benchmark {
        w * 4
    } else {
        w
    };
    let sh = Arc::new(Shared {
        n,
        window: w,
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
                        waiters: AtomicU64::new(pack(0, NIL)),
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
        ready: (0..n)
            .map(|_| [ArrayQueue::new(cap), ArrayQueue::new(cap)])
            .collect(),
        completions: (0..n).map(|_| ArrayQueue::new(cap)).collect(),
        map: (0..64).map(|_| Mutex::new(Shard::default())).collect(),
        threads: (0..n).map(|_| OnceLock::new()).collect(),
        sleeping: (0..n)
            .map(|_| CachePadded::new(AtomicBool::new(false)))
            .collect(),
        waiting_for: (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(u64::MAX)))
            .collect(),
        jobs: ArrayQueue::new(n as usize * cap + 1),
        workers: (0..o.workers.max(1)).map(|_| OnceLock::new()).collect(),
        workers_sleeping: AtomicU32::new(0),
        shutdown: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        seq: AtomicU64::new(1),
    });
    let trace: Arc<Mutex<Trace>> = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let result = thread::scope(|s| {
        // Core workers: take jobs, run them, report completion to the owning AICPU.
        let mut workers = Vec::new();
        for wi in 0..o.workers.max(1) {
            let sh = Arc::clone(&sh);
            let trace = Arc::clone(&trace);
            let check = o.check;
            workers.push(s.spawn(move || {
                let _ = sh.workers[wi].set(thread::current());
                let backoff = crossbeam_utils::Backoff::new();
                loop {
                    let Some(job) = sh.jobs.pop() else {
                        if sh.shutdown.load(Ordering::Acquire) {
                            return;
                        }
                        if !backoff.is_completed() {
                            backoff.snooze();
                            continue;
                        }
                        sh.workers_sleeping.fetch_add(1, Ordering::SeqCst);
                        if sh.jobs.is_empty() && !sh.shutdown.load(Ordering::SeqCst) {
                            thread::park_timeout(Duration::from_micros(500));
                        }
                        sh.workers_sleeping.fetch_sub(1, Ordering::SeqCst);
                        continue;
                    };
                    backoff.reset();
                    let t0 = sh.seq.fetch_add(1, Ordering::SeqCst);
                    // The default kernel does nothing but record its execution.
                    let t1 = sh.seq.fetch_add(1, Ordering::SeqCst);
                    if check {
                        let mut tr = trace.lock().unwrap_or_else(|e| e.into_inner());
                        if tr.len() <= job.id as usize {
                            tr.resize(job.id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
                        }
                        let pool = if job.core & 1 == 0 {
                            Pool::Cube
                        } else {
                            Pool::Vector
                        };
                        if tr[job.id as usize].0 != 0 {
                            sh.failed.store(true, Ordering::SeqCst);
                        }
                        tr[job.id as usize] = (t0, t1, pool, job.aicpu);
                    }
                    while sh.completions[job.aicpu as usize]
                        .push((job.slot, job.core))
                        .is_err()
                    {
                        sh.wake(job.aicpu);
                        thread::yield_now();
                    }
                    // Owners are woken in batches, or when this worker runs out of jobs.
                    if sh.completions[job.aicpu as usize].len() >= 32 || sh.jobs.is_empty() {
                        for a in 0..sh.n {
                            if !sh.completions[a as usize].is_empty() {
                                sh.wake(a);
                            }
                        }
                    }
                }
            }));
        }
        // AICPUs.
        let mut handles = Vec::new();
        for i in 0..n {
            let sh = Arc::clone(&sh);
            let cores = [cube_per[i as usize], vec_per[i as usize]];
            handles.push(s.spawn(move || aicpu_loop(v, p, i, o, &sh, cores)));
        }
        let mut outs = Vec::new();
        for h in handles {
            outs.push(
                h.join()
                    .unwrap_or_else(|_| Err(SimError::Check("an AICPU thread panicked".into()))),
            );
        }
        sh.shutdown.store(true, Ordering::SeqCst);
        for w in sh.workers.iter().filter_map(|w| w.get()) {
            w.unpark();
        }
        for wkr in workers {
            let _ = wkr.join();
        }
        outs
    });
    let wall = start.elapsed();
    let mut rep = Report {
        per_aicpu: vec![0; n as usize],
        wall,
        ..Report::default()
    };
    let mut first_err = None;
    for (i, r) in result.into_iter().enumerate() {
        match r {
            Ok(s) => {
                rep.per_aicpu[i] = s.tasks;
                rep.cube_tasks += s.cube;
                rep.vector_tasks += s.tasks - s.cube;
                rep.edges += s.edges;
                rep.cross_aicpu_edges += s.cross;
                rep.window_stalls += s.stalls;
                rep.overflows += s.overflows;
            }
            Err(e) => {
                if first_err.is_none() {
                    first_err = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    rep.tasks_total = rep.per_aicpu.iter().sum();
    if o.check {
        if sh.failed.load(Ordering::SeqCst) {
            return Err(SimError::Check("a task ran twice".into()));
        }
        check(&v, &p, n, &trace.lock().unwrap_or_else(|e| e.into_inner()))?;
        rep.checked = true;
    }
    Ok(rep)
}

#[derive(Default)]
struct Counts {
    tasks: u64,
    cube: u64,
    edges: u64,
    cross: u64,
    stalls: u64,
    overflows: u64,
}

fn pool_index(p: Pool) -> usize {
    if p == Pool::Cube {
        0
    } else {
        1
    }
}

/// The scheduler loop of one AICPU (spec/runtime.md §4.3).
fn aicpu_loop(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    me: u32,
    o: Options,
    sh: &Shared,
    cores: [u32; 2],
) -> Result<Counts, SimError> {
    let _ = sh.threads[me as usize].set(thread::current());
    let mut c = Counts::default();
    let mut interp = Interpreter::new(v, p, me, sh.n)?;
    let mut records: Vec<Option<RefTask>> = vec![None; sh.slots[me as usize].len()];
    let mut free_cores = cores;
    let mut staged: Option<RefTask> = None;
    let mut pending: Option<u32> = None;
    let mut done = false;
    let mut in_window = 0usize;
    let mut deferred: Vec<(u32, Vec<Pred>)> = Vec::new();
    // The smallest watermark of the other AICPUs seen so far (watermarks only grow).
    let mut others_min = 0u64;
    // Free window slots (the owner alone places and retires).
    let mut free_slots: Vec<u32> = (0..sh.slots[me as usize].len() as u32).rev().collect();
    let mut jitter = Jitter(o.jitter.map_or(0, |s| s ^ me as u64));
    let fail = |e: SimError| {
        sh.failed.store(true, Ordering::SeqCst);
        sh.wake_all();
        e
    };
    loop {
        let mut progress = false;
        // (1) Completions.
        while let Some((slot, core)) = sh.completions[me as usize].pop() {
            progress = true;
            jitter.maybe_yield();
            let s = &sh.slots[me as usize][slot as usize];
            let id = s.task.load(Ordering::Relaxed);
            let head = s.waiters.swap(pack(tag_of(id), CLOSED), Ordering::AcqRel);
            // Notify the successors; node indices are global: aicpu << 24 | index.
            let mut cur = (head & 0xFFFF_FFFF) as u32;
            while cur != NIL && cur != CLOSED {
                let nd = &sh.nodes[(cur >> 24) as usize][(cur & 0xFF_FFFF) as usize];
                let sa = nd.succ_aicpu.load(Ordering::Acquire);
                let ss = nd.succ_slot.load(Ordering::Acquire);
                let next = nd.next.load(Ordering::Acquire);
                if sh.slots[sa as usize][ss as usize]
                    .fanin
                    .fetch_sub(1, Ordering::AcqRel)
                    == 1
                {
                    push_ready(sh, sa, ss);
                }
                cur = next;
            }
            records[slot as usize] = None;
            s.task.store(EMPTY, Ordering::Release);
            free_slots.push(slot);
            free_cores[(core & 1) as usize] += 1;
            in_window -= 1;
            c.tasks += 1;
        }
        // (2) Dispatch.
        let mut dispatched = false;
        for (pl, free) in free_cores.iter_mut().enumerate() {
            while *free > 0 {
                let Some(slot) = sh.ready[me as usize][pl].pop() else {
                    break;
                };
                progress = true;
                *free -= 1;
                let id = sh.slots[me as usize][slot as usize]
                    .task
                    .load(Ordering::Acquire);
                if pl == 0 {
                    c.cube += 1;
                }
                // Core ids carry the pool in bit 0.
                let _ = sh.jobs.push(Job {
                    aicpu: me,
                    slot,
                    core: pl as u32,
                    id,
                });
                dispatched = true;
            }
        }
        // Workers are woken in batches (or before this AICPU parks), not per task: a
        // wake-up is a context switch on a small machine.
        if dispatched && sh.jobs.len() >= 32 {
            sh.wake_worker();
        }
        // Tasks waiting for predecessors beyond their waiter nodes keep their guard until those
        // retire.
        deferred.retain_mut(|(k, preds)| {
            preds.retain(|(pa, ps, pid)| {
                sh.slots[*pa as usize][*ps as usize]
                    .task
                    .load(Ordering::Acquire)
                    == *pid
            });
            if preds.is_empty() {
                release_guard(sh, me, *k);
                progress = true;
                false
            } else {
                true
            }
        });
        // (3) Generation.
        loop {
            if staged.is_none() && pending.is_none() && !done {
                jitter.maybe_yield();
                let mut st = Stage(None);
                interp
                    .run(&mut st, 1)
                    .map_err(|e| fail(SimError::Launch(LaunchError::Run(e))))?;
                let mark = match st.0 {
                    Some(mut t) => {
                        t.owner = me;
                        let id = t.id;
                        staged = Some(t);
                        id
                    }
                    None => {
                        done = true;
                        u64::MAX
                    }
                };
                sh.published[me as usize].store(mark, Ordering::Release);
                sh.wake_waiters(mark);
                progress = true;
            }
            if let (Some(_), None) = (&staged, pending) {
                let cap = sh.slots[me as usize].len();
                let limit = if o.mode == WindowMode::Benchmark {
                    cap
                } else {
                    sh.window
                };
                let free = free_slots.last().map(|k| *k as usize);
                if in_window >= sh.window {
                    match o.mode {
                        WindowMode::Abort => {
                            return Err(fail(SimError::WindowAbort {
                                aicpu: me,
                                window: sh.window,
                            }))
                        }
                        WindowMode::Benchmark if in_window < limit => c.overflows += 1,
                        _ => {
                            c.stalls += 1;
                            break;
                        }
                    }
                }
                let Some(k) = free else {
                    c.stalls += 1;
                    break;
                };
                free_slots.pop();
                let t = staged.take().unwrap_or_else(|| unreachable!());
                let s = &sh.slots[me as usize][k];
                s.fanin.store(1, Ordering::Relaxed);
                s.pool.store(pool_index(t.pool) as u32, Ordering::Relaxed);
                s.waiters.store(pack(tag_of(t.id), NIL), Ordering::Relaxed);
                s.task.store(t.id, Ordering::Release);
                records[k] = Some(t);
                pending = Some(k as u32);
                in_window += 1;
                progress = true;
            }
            let Some(k) = pending else { break };
            let t = records[k as usize]
                .clone()
                .unwrap_or_else(|| unreachable!());
            if !o.naive && others_min < t.id {
                others_min = (0..sh.n)
                    .filter(|a| *a != me)
                    .map(|a| sh.published[a as usize].load(Ordering::Acquire))
                    .min()
                    .unwrap_or(u64::MAX);
            }
            let ready_to_record = o.naive || others_min >= t.id;
            if !ready_to_record {
                sh.waiting_for[me as usize].store(t.id, Ordering::SeqCst);
                break;
            }
            sh.waiting_for[me as usize].store(u64::MAX, Ordering::Relaxed);
            jitter.maybe_yield();
            let rest = record_and_register(sh, me, k, &t, &mut c);
            pending = None;
            progress = true;
            if rest.is_empty() {
                release_guard(sh, me, k);
            } else {
                deferred.push((k, rest));
            }
        }
        if done && staged.is_none() && pending.is_none() && in_window == 0 && deferred.is_empty() {
            return Ok(c);
        }
        if sh.failed.load(Ordering::Relaxed) {
            return Err(SimError::Check("stopped: another AICPU failed".into()));
        }
        if !progress && !sh.jobs.is_empty() {
            sh.wake_worker();
        }
        if !progress {
            // Park until a completion, a ready task or a watermark wakes us (§4.3); re-check
            // after announcing the sleep so a wake-up between the check and the park is not lost.
            sh.sleeping[me as usize].store(true, Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst);
            let watermarks_ready = pending.is_some_and(|k| {
                let id = sh.slots[me as usize][k as usize]
                    .task
                    .load(Ordering::Relaxed);
                (0..sh.n).all(|a| a == me || sh.published[a as usize].load(Ordering::Acquire) >= id)
            });
            let work = !sh.completions[me as usize].is_empty()
                || (free_cores[0] > 0 && !sh.ready[me as usize][0].is_empty())
                || (free_cores[1] > 0 && !sh.ready[me as usize][1].is_empty())
                || watermarks_ready
                || sh.failed.load(Ordering::Relaxed);
            if !work {
                thread::park_timeout(Duration::from_micros(500));
            }
            sh.sleeping[me as usize].store(false, Ordering::Relaxed);
        }
    }
}

/// §4.1 step 7: drops the guard; the task is ready if nothing else holds it.
fn release_guard(sh: &Shared, aicpu: u32, slot: u32) {
    if sh.slots[aicpu as usize][slot as usize]
        .fanin
        .fetch_sub(1, Ordering::AcqRel)
        == 1
    {
        push_ready(sh, aicpu, slot);
    }
}

fn push_ready(sh: &Shared, aicpu: u32, slot: u32) {
    let pl = sh.slots[aicpu as usize][slot as usize]
        .pool
        .load(Ordering::Acquire) as usize
        & 1;
    while sh.ready[aicpu as usize][pl].push(slot).is_err() {
        thread::yield_now();
    }
    sh.wake(aicpu);
}

/// A predecessor: (aicpu, slot, id).
type Pred = (u32, u32, u64);

/// §4.1 steps 5–6: look up predecessors and record `t`'s accesses, then register on them.
/// Returns the predecessors beyond the task's waiter nodes: the caller keeps the guard until
/// they have retired.
fn record_and_register(sh: &Shared, me: u32, slot: u32, t: &RefTask, c: &mut Counts) -> Vec<Pred> {
    let mut preds: Vec<Pred> = Vec::new();
    for io in &t.io {
        let shard = &sh.map[io.tensor as usize % sh.map.len()];
        let mut m = shard.lock().unwrap_or_else(|e| e.into_inner());
        let Shard { buckets, wide } = &mut *m;
        let mut visit = |list: &mut Vec<Entry>| {
            list.retain(|e| sh.live(e));
            for e in list.iter() {
                if e.io.tensor != io.tensor || e.id >= t.id || !e.io.overlaps(io) {
                    continue;
                }
                if (e.io.writes() || io.writes()) && !preds.iter().any(|p| p.2 == e.id) {
                    preds.push((e.aicpu, e.slot, e.id));
                }
            }
            if io.writes() {
                list.retain(|e| !(e.io.tensor == io.tensor && covers(io, &e.io)));
            }
        };
        match bucket(io) {
            Some(k) => visit(buckets.entry((io.tensor, k)).or_default()),
            None => buckets
                .iter_mut()
                .filter(|((tn, _), _)| *tn == io.tensor)
                .for_each(|(_, l)| visit(l)),
        }
        visit(wide);
        let entry = Entry {
            io: *io,
            id: t.id,
            aicpu: me,
            slot,
        };
        match bucket(io) {
            Some(k) => buckets.entry((io.tensor, k)).or_default().push(entry),
            None => wide.push(entry),
        }
        if buckets.len() > 4096 {
            buckets.retain(|_, l| !l.is_empty());
        }
    }
    let s = &sh.slots[me as usize][slot as usize];
    let mut k = 0usize;
    let mut rest = Vec::new();
    for (pa, ps, pid) in preds {
        let target = &sh.slots[pa as usize][ps as usize];
        if k >= NODES {
            // Out of waiter nodes: the caller waits for this predecessor to retire.
            rest.push((pa, ps, pid));
            continue;
        }
        let node_index = slot as usize * NODES + k;
        let nd = &sh.nodes[me as usize][node_index];
        nd.succ_aicpu.store(me, Ordering::Relaxed);
        nd.succ_slot.store(slot, Ordering::Relaxed);
        let global = (me << 24) | node_index as u32;
        let mut head = target.waiters.load(Ordering::Acquire);
        loop {
            let (tag, first) = ((head >> 32) as u32, (head & 0xFFFF_FFFF) as u32);
            if tag != tag_of(pid) || first == CLOSED {
                break; // retired or completed: nothing to wait for
            }
            nd.next.store(first, Ordering::Relaxed);
            s.fanin.fetch_add(1, Ordering::Relaxed);
            match target.waiters.compare_exchange(
                head,
                pack(tag, global),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    k += 1;
                    c.edges += 1;
                    if pa != me {
                        c.cross += 1;
                    }
                    break;
                }
                Err(h) => {
                    s.fanin.fetch_sub(1, Ordering::Relaxed);
                    head = h;
                }
            }
        }
    }
    rest
}

/// Verifies a run: every reference task ran exactly once, on its pool and AICPU, and started after
/// every overlap-mode predecessor ended.
fn check(v: &Verified<'_>, p: &RuntimeParams<'_>, n: u32, tr: &Trace) -> Result<(), SimError> {
    let reference =
        reference_expand(v, p, n, u64::MAX).map_err(|e| SimError::Launch(LaunchError::Run(e)))?;
    if tr.len() != reference.len() {
        return Err(SimError::Check(format!(
            "{} tasks recorded, the reference has {}",
            tr.len(),
            reference.len()
        )));
    }
    for (t, r) in reference.iter().zip(tr) {
        if r.1 == 0 {
            return Err(SimError::Check(format!("task {} never ran", t.id)));
        }
        if r.2 != t.pool {
            return Err(SimError::Check(format!(
                "task {} ran on a {} core",
                t.id,
                r.2.name()
            )));
        }
        if r.3 != t.owner {
            return Err(SimError::Check(format!(
                "task {} was scheduled by AICPU {} but belongs to {}",
                t.id, r.3, t.owner
            )));
        }
    }
    for e in edges(&reference, DepMode::Overlap) {
        let (from, to) = (tr[e.from as usize], tr[e.to as usize]);
        if to.0 <= from.1 {
            return Err(SimError::Check(format!(
                "task {} started before its predecessor {} ended ({})",
                e.to,
                e.from,
                e.kind.name()
            )));
        }
    }
    Ok(())
}
