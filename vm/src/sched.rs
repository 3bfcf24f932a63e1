//! The per-AICPU scheduler of spec/runtime.md §4: one AICPU's loop — generate its own tasks,
//! record their dependencies in the global TensorMap once the watermarks allow it, register them
//! on their predecessors, hand ready tasks to its cores through the handshake slots, and
//! release successors when tasks complete — as a non-blocking [`Aicpu::step`] over memory the
//! caller provides. No heap, no threads, no locks of its own: the simulator (`host-sim`) and the
//! device library run this same code, and differ only in what they supply:
//!
//! - the shared region ([`Shared`]): watermarks, window slots, waiter nodes, ready queues, the
//!   queues that pass on the completions of stolen tasks, the cores' handshake slots, and the
//!   TensorMap behind a lock ([`MapLock`]);
//! - each AICPU's private buffers ([`Local`]);
//! - an environment ([`Env`]): how to wake another AICPU's thread, how to tell a core it has a
//!   task, and optional hooks for tracing and stress testing.

use crate::handshake::{self, CoreSlot};
use crate::interp::{Interpreter, RunError, Task};
use crate::ring::{Cell, Ring};
use crate::share::{self, Class, ShareError, Sharing, SiteUses};
use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};
use crate::tmap::{MapError, MapLayout, Slices, Storage, TensorMap, Use};
use crate::waitlist::{self, tag_of, NIL};
use crate::{Pool, WindowMode};

/// `Slot::task` of a free slot.
pub const EMPTY: u64 = u64::MAX;
/// Waiter nodes per window slot: the predecessors a task can register on; it waits for any
/// further ones to complete instead (§4.1 step 6).
pub const NODES: usize = 32;

/// A window slot's shared part (§3.1).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Slot {
    /// The id of the task in the slot, or [`EMPTY`].
    pub task: AtomicU64,
    /// Unfinished predecessors, plus the guard while the task's dependencies are built.
    pub fanin: AtomicU32,
    /// Pool index of the task (0 cube, 1 vector).
    pub pool: AtomicU32,
    /// Kernel index of the task.
    pub kernel: AtomicU32,
    /// The task's successor list (`waitlist`).
    pub waiters: AtomicU64,
    /// Whether the task has entries in the global map (only its AICPU reads this).
    pub global: AtomicU32,
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            task: AtomicU64::new(EMPTY),
            fanin: AtomicU32::new(0),
            pool: AtomicU32::new(0),
            kernel: AtomicU32::new(0),
            waiters: AtomicU64::new(waitlist::pack(0, NIL)),
            global: AtomicU32::new(0),
        }
    }
}

/// A waiter node: "this successor waits for the task whose list holds me".
#[derive(Debug)]
pub struct Node {
    /// The successor's AICPU.
    pub succ_aicpu: AtomicU32,
    /// Its window slot.
    pub succ_slot: AtomicU32,
    /// The next node of the list.
    pub next: AtomicU32,
}

impl Default for Node {
    fn default() -> Node {
        Node {
            succ_aicpu: AtomicU32::new(0),
            succ_slot: AtomicU32::new(0),
            next: AtomicU32::new(NIL),
        }
    }
}

/// A word on a cache line of its own: watermarks and the ids AICPUs wait for.
#[derive(Debug)]
#[repr(align(128))]
pub struct Padded(pub AtomicU64);

impl Padded {
    /// A padded word holding `v`.
    pub fn new(v: u64) -> Padded {
        Padded(AtomicU64::new(v))
    }
}

/// The global TensorMap behind the lock that serialises it (§3.2).
pub trait MapLock {
    /// The map's memory.
    type Mem: Storage;
    /// Runs `f` with the map locked.
    fn with_map<R>(&self, f: impl FnOnce(&mut TensorMap<Self::Mem>) -> R) -> R;
}

/// What the scheduler needs from the place it runs in.
pub trait Env {
    /// AICPU `aicpu` may have something to do now (a ready task, a passed-on completion, a
    /// watermark it waits for): wake its thread if it sleeps.
    fn wake(&mut self, aicpu: u32);
    /// Core `core` was handed a task through its handshake slot.
    fn ring(&mut self, core: u32);
    /// A point where a stress test may yield or sleep.
    fn jitter(&mut self) {}
    /// This AICPU staged task `id` (its interpreter paused right after emitting it).
    fn staged(&mut self, _aicpu: u32, _id: u64) {}
    /// This AICPU recorded `task` (dependencies looked up, registered).
    fn recorded(&mut self, _aicpu: u32, _task: &Task) {}
    /// One of this AICPU's tasks completed and its successors were released.
    fn completed(&mut self) {}
}

/// When an AICPU starts handing tasks to its cores (seed 003 §7). An AICPU whose generation is
/// blocked — a full window, a watermark wait, or a task waiting for predecessors beyond its
/// waiter nodes — starts in any case: holding its ready tasks back then could deadlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// As soon as a task is ready.
    Immediate,
    /// Once the AICPU has generated all its tasks.
    AfterOrchestration,
    /// Once the AICPU has generated this many tasks.
    Threshold(u64),
}

/// Scheduling settings, the same for every AICPU.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Window size: tasks an AICPU holds before generation stalls (benchmark mode lets the
    /// window grow up to its capacity, counting overflows).
    pub window: u32,
    /// What a full window does.
    pub mode: WindowMode,
    /// When dispatch starts.
    pub start: Start,
    /// Most tasks of one pool an AICPU keeps running at once (0: as many as it has cores).
    pub pipeline_depth: u32,
    /// Idle cores take ready tasks from other AICPUs' queues.
    pub work_steal: bool,
    /// Completed tasks whose successors are released together (0 and 1: each at once).
    pub batch_deps: u32,
    /// Testing only: skip the watermark wait (the naïve protocol that misses edges).
    pub naive: bool,
}

impl Config {
    /// The program's own schedule (its DispatchConfig, spec/bytecode.md §3.1): window, window
    /// mode, start policy, pipeline depth, ready policy, `batch_deps`.
    pub fn of_program(v: &crate::Verified<'_>) -> Config {
        let c = v.config();
        Config {
            window: c.window.get(),
            mode: WindowMode::from_u8(c.window_mode).unwrap_or(WindowMode::Stall),
            start: match crate::StartPolicy::from_u8(c.start) {
                Some(crate::StartPolicy::AfterOrchestration) => Start::AfterOrchestration,
                Some(crate::StartPolicy::Threshold) => {
                    Start::Threshold(c.start_threshold.get() as u64)
                }
                _ => Start::Immediate,
            },
            pipeline_depth: c.pipeline_depth.get(),
            work_steal: c.ready == crate::ReadyPolicy::WorkSteal as u8,
            batch_deps: c.batch_deps.get(),
            naive: false,
        }
    }
}

/// The region every AICPU shares (§3). Arrays are indexed by AICPU `a`, slot `s` (of `cap`
/// per AICPU), pool `p` (0 cube, 1 vector) and core `c` (cube cores first).
pub struct Shared<'m, C, L> {
    /// AICPUs.
    pub n: u32,
    /// Window slots per AICPU.
    pub cap: u32,
    /// `published[a]`: the id of `a`'s next task to record, `u64::MAX` once it has recorded all.
    pub published: &'m [Padded],
    /// `waiting_for[a]`: the id `a` waits to record (`u64::MAX`: not waiting on watermarks).
    pub waiting_for: &'m [Padded],
    /// `slots[a * cap + s]`.
    pub slots: &'m [Slot],
    /// `nodes[k * n * cap + a * cap + s]`: registration `k` of the task in slot `s` of `a`
    /// (the first registrations of all slots together: most tasks use few).
    pub nodes: &'m [Node],
    /// `ready[a * 2 + p]`: slots of `a`'s ready tasks of pool `p`.
    pub ready: &'m [Ring<C>],
    /// `passed[a]`: slots of `a`'s tasks that completed on another AICPU's core.
    pub passed: &'m [Ring<C>],
    /// `cores[c]`: the handshake slots.
    pub cores: &'m [CoreSlot],
    /// `core_aicpu[c]`: the AICPU that drives core `c`.
    pub core_aicpu: &'m [u32],
    /// The global TensorMap, its handles `a * cap + s`.
    pub map: &'m L,
    /// `writers[x]`: writes of tensor `x` in the global map whose task has not retired (a
    /// read that no write can follow skips the map when there are none, §3.5).
    pub writers: &'m [AtomicU32],
}

/// Why a step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// The program failed at run time.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A window overflowed in abort mode.
    #[error("AICPU {aicpu}'s task window ({window} slots) is full and the window mode is abort")]
    WindowAbort {
        /// The AICPU.
        aicpu: u32,
        /// Its window size.
        window: u32,
    },
    /// The TensorMap refused an operation (its memory does not fit the program).
    #[error("TensorMap: {0}")]
    Map(#[from] MapError),
    /// The tensor analysis failed (spec/runtime.md §3.5).
    #[error("tensor classes: {0}")]
    Share(#[from] ShareError),
    /// The shared region or the AICPU's buffers are smaller than their layout says.
    #[error("scheduler memory: {0}")]
    Memory(&'static str),
    /// A core was handed a task while busy, or a queue that cannot fill filled: the shared
    /// region is being written by someone else.
    #[error("scheduler state corrupted: {0}")]
    Corrupted(&'static str),
}

/// Work counters of one AICPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Its tasks that completed.
    pub tasks: u64,
    /// Of those, cube tasks.
    pub cube: u64,
    /// Registrations on running predecessors.
    pub edges: u64,
    /// Of those, on another AICPU's tasks.
    pub cross: u64,
    /// Times generation found the window full.
    pub stalls: u64,
    /// Tasks placed beyond the window in benchmark mode.
    pub overflows: u64,
    /// Other AICPUs' tasks this AICPU ran on its cores.
    pub stolen: u64,
    /// Successor releases (batches of completed tasks).
    pub batches: u64,
}

/// A predecessor found for the task being recorded: its AICPU, slot and id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pred {
    /// AICPU.
    pub aicpu: u32,
    /// Window slot.
    pub slot: u32,
    /// Task id.
    pub id: u64,
}

/// A core running a task this AICPU handed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Busy {
    /// Core.
    pub core: u32,
    /// The task's AICPU (another one when stolen).
    pub owner: u32,
    /// Its slot.
    pub slot: u32,
}

/// One AICPU's private buffers: `cap` words for each of `free`, `retiring` and `unreleased`;
/// its cores in `cores` (any order); a [`Busy`] per core; `n * cap` predecessors of scratch;
/// a [`Sharing`] per tensor of the program; and its own TensorMap for the tensors that never
/// cross AICPUs (§3.5): handles are its slots (`MapLayout::for_program(program, cap)`), its
/// match mode that of the global map.
pub struct Local<'m, S = Slices<'m>> {
    /// Free window slots (stack).
    pub free: &'m mut [u32],
    /// Completed tasks' slots not yet retired from the map.
    pub retiring: &'m mut [u32],
    /// Completed tasks' slots whose successors are not released yet.
    pub unreleased: &'m mut [u32],
    /// The cores this AICPU drives.
    pub cores: &'m mut [u32],
    /// Its busy cores.
    pub busy: &'m mut [Busy],
    /// The predecessors of the task being recorded; those beyond its waiter nodes stay here
    /// until they complete.
    pub preds: &'m mut [Pred],
    /// The classes of the program's tensors (written by [`Aicpu::new`]).
    pub shares: &'m mut [Sharing],
    /// The AICPU's own map.
    pub map: TensorMap<S>,
}

/// A stack in a fixed buffer.
struct Stack<'m, T> {
    buf: &'m mut [T],
    len: usize,
}

impl<'m, T: Copy> Stack<'m, T> {
    fn new(buf: &'m mut [T]) -> Stack<'m, T> {
        Stack { buf, len: 0 }
    }
    fn push(&mut self, x: T) -> Result<(), SchedError> {
        let slot = self
            .buf
            .get_mut(self.len)
            .ok_or(SchedError::Corrupted("a per-AICPU stack overflowed"))?;
        *slot = x;
        self.len += 1;
        Ok(())
    }
    fn pop(&mut self) -> Option<T> {
        self.len = self.len.checked_sub(1)?;
        Some(self.buf[self.len])
    }
    fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn as_slice(&self) -> &[T] {
        &self.buf[..self.len]
    }
}

/// The pool index the scheduler uses (0 cube, 1 vector).
pub fn pool_index(p: Pool) -> usize {
    if p == Pool::Cube {
        0
    } else {
        1
    }
}

/// One AICPU's scheduler.
pub struct Aicpu<'a, 'p, 'm, S = Slices<'m>> {
    me: u32,
    interp: Interpreter<'a, 'p>,
    /// The interpreter holds a staged task (paused right after emitting it).
    staged: bool,
    /// Slot of the placed task not yet recorded.
    pending: Option<u32>,
    /// Generation has ended.
    done: bool,
    /// Everything of this AICPU has completed.
    finished: bool,
    in_window: u32,
    free: Stack<'m, u32>,
    retiring: Stack<'m, u32>,
    unreleased: Stack<'m, u32>,
    busy: Stack<'m, Busy>,
    /// Free cores: cube ones in `cores[..free_cube]`, vector ones in
    /// `cores[ncube..ncube + free_vector]`.
    cores: &'m mut [u32],
    ncube: usize,
    free_cube: usize,
    free_vector: usize,
    preds: &'m mut [Pred],
    shares: &'m [Sharing],
    /// How its sites' regions are recorded.
    uses: SiteUses,
    /// Its last placed tasks, `(id, slot)` at `id % CHAIN_SPAN`: where a structural producer
    /// (§3.6–3.7, always one of its own last `CHAIN_SPAN` tasks) sits.
    recent: [(u64, u32); share::CHAIN_SPAN as usize],
    /// The map of its local tensors.
    map: TensorMap<S>,
    /// The watermark the staged task needs every other AICPU to have passed before it records
    /// (0: it touches no shared tensor).
    need: u64,
    /// The task waiting for predecessors beyond its waiter nodes: its slot and how many of
    /// `preds` it still waits for.
    deferred: Option<(u32, usize)>,
    others_min: u64,
    /// The last watermark it woke waiters for, and how many it published since.
    scanned: u64,
    unscanned: u32,
    running: [u32; 2],
    started: bool,
    generated: u64,
    counts: Counts,
}

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// The scheduler of AICPU `me` over `interp` (which generates this AICPU's tasks), its
    /// buffers `local`, for a shared region with `n` AICPUs of `cap` slots and the given cores.
    pub fn new<C: AsRef<[Cell]>, L: MapLock>(
        me: u32,
        interp: Interpreter<'a, 'p>,
        local: Local<'m, S>,
        sh: &Shared<'_, C, L>,
    ) -> Result<Aicpu<'a, 'p, 'm, S>, SchedError> {
        let (n, cap) = (sh.n as usize, sh.cap as usize);
        let need = |ok: bool, what| {
            if ok {
                Ok(())
            } else {
                Err(SchedError::Memory(what))
            }
        };
        need(me < sh.n, "AICPU index past the shared region's count")?;
        need(cap > 0, "no window slots")?;
        // Handles (`a * cap + s`) and waiter node numbers are u32, below the list markers.
        need(
            n.checked_mul(cap)
                .and_then(|h| h.checked_mul(NODES))
                .is_some_and(|x| x < waitlist::CLOSED as usize),
            "too many slots for 32-bit node numbers",
        )?;
        need(sh.published.len() >= n, "watermarks")?;
        need(sh.waiting_for.len() >= n, "waiting_for")?;
        need(sh.slots.len() >= n * cap, "slots")?;
        need(sh.nodes.len() >= n * cap * NODES, "waiter nodes")?;
        need(sh.ready.len() >= 2 * n, "ready queues")?;
        need(sh.passed.len() >= n, "passed completions")?;
        need(
            sh.ready
                .iter()
                .chain(sh.passed)
                .all(|r| r.capacity() >= cap),
            "queue capacity below the window",
        )?;
        need(sh.core_aicpu.len() >= sh.cores.len(), "core owners")?;
        need(
            sh.writers.len() >= interp.program().tensors().len(),
            "live-writer counts",
        )?;
        need(local.free.len() >= cap, "free slots")?;
        need(local.retiring.len() >= cap, "retiring slots")?;
        need(local.unreleased.len() >= cap, "unreleased slots")?;
        need(local.busy.len() >= local.cores.len(), "busy cores")?;
        need(local.preds.len() >= n * cap, "predecessor scratch")?;
        need(interp.aicpus() == sh.n, "the interpreter's AICPU count")?;
        let fits = |l: MapLayout, handles: usize| {
            let v = interp.program();
            l.handles as usize >= handles
                && l.max_task_io >= v.max_task_io()
                && l.max_stored_io >= v.max_stored_io()
                && l.tensors as usize >= v.tensors().len()
        };
        need(
            fits(local.map.layout(), cap),
            "the local TensorMap is smaller than the window and the program",
        )?;
        need(
            sh.map.with_map(|m| fits(m.layout(), n * cap)),
            "the global TensorMap is smaller than the windows and the program",
        )?;
        need(
            sh.map.with_map(|m| m.mode()) == local.map.mode(),
            "the local TensorMap's match mode differs from the global one's",
        )?;
        share::analyze(&interp, local.shares).map_err(|e| match e {
            // The analysis counts statements' tasks: an error there is the program's, the one
            // its walk would meet.
            ShareError::Run(e) => SchedError::Run(e),
            other => SchedError::Share(other),
        })?;
        need(
            local.cores.iter().all(|&c| (c as usize) < sh.cores.len()),
            "core index past the handshake slots",
        )?;
        let mut free = Stack::new(local.free);
        for s in (0..cap as u32).rev() {
            free.push(s)?;
        }
        // Cube cores first, then vector cores, each group a stack of the free ones (a
        // partition in place: no sort, whose code the device would carry).
        let cores = local.cores;
        let is_cube =
            |c: u32| sh.cores[c as usize].core_type.load(Ordering::Relaxed) == handshake::CUBE;
        let mut ncube = 0;
        for i in 0..cores.len() {
            if is_cube(cores[i]) {
                cores.swap(i, ncube);
                ncube += 1;
            }
        }
        let free_vector = cores.len() - ncube;
        need(
            ncube > 0 && free_vector > 0,
            "an AICPU needs a cube core and a vector core",
        )?;
        Ok(Aicpu {
            me,
            interp,
            staged: false,
            pending: None,
            done: false,
            finished: false,
            in_window: 0,
            free,
            retiring: Stack::new(local.retiring),
            unreleased: Stack::new(local.unreleased),
            busy: Stack::new(local.busy),
            cores,
            ncube,
            free_cube: ncube,
            free_vector,
            preds: local.preds,
            shares: local.shares,
            uses: SiteUses::default(),
            recent: [(u64::MAX, 0); share::CHAIN_SPAN as usize],
            map: local.map,
            need: 0,
            deferred: None,
            others_min: 0,
            scanned: 0,
            unscanned: 0,
            running: [0, 0],
            started: false,
            generated: 0,
            counts: Counts::default(),
        })
    }

    /// This AICPU's index.
    pub fn index(&self) -> u32 {
        self.me
    }

    /// Its counters.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Whether every task of this AICPU has completed (and it has nothing left to do).
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Its interpreter (for its work counters).
    pub fn interpreter(&self) -> &Interpreter<'a, 'p> {
        &self.interp
    }

    /// Its own TensorMap (the accesses of local tensors).
    pub fn local_map(&self) -> &TensorMap<S> {
        &self.map
    }

    /// The classes of the program's tensors.
    pub fn shares(&self) -> &[Sharing] {
        self.shares
    }

    /// The watermark task `t` waits for (§4.1, §3.5): every other AICPU must have recorded
    /// its tasks below it that may conflict with `t`'s shared accesses.
    fn need_of(&self, t: &Task) -> u64 {
        let mut need = 0;
        for io in t.ios() {
            if let Some(s) = self.shares.get(io.tensor as usize) {
                if s.class == Class::Shared {
                    let end = if io.writes() {
                        s.accesses_end
                    } else {
                        s.writes_end
                    };
                    need = need.max(end.min(t.id));
                }
            } else {
                need = t.id;
            }
        }
        need
    }

    /// One round of the scheduler loop (§4.3): completions, dispatch, deferred registrations,
    /// generation as far as it goes without waiting. Returns whether it did anything; the
    /// caller may back off or sleep when it did not (see [`Aicpu::has_work`]).
    pub fn step<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        let me = self.me as usize;
        let mut progress = false;
        // (1) Completions (§4.2): its cores that went idle, and its stolen tasks that finished
        // on another AICPU's cores.
        let mut i = 0;
        while i < self.busy.len {
            let b = self.busy.buf[i];
            if !sh.cores[b.core as usize].idle() {
                i += 1;
                continue;
            }
            self.busy.len -= 1;
            self.busy.buf[i] = self.busy.buf[self.busy.len];
            progress = true;
            env.jitter();
            self.core_back(sh, b.core);
            if b.owner == self.me {
                self.completed(sh, cfg, env, b.slot)?;
            } else {
                sh.passed[b.owner as usize]
                    .push(b.slot)
                    .map_err(|_| SchedError::Corrupted("a passed-completion queue filled"))?;
                env.wake(b.owner);
            }
        }
        while let Some(slot) = sh.passed[me].pop() {
            progress = true;
            self.completed(sh, cfg, env, slot)?;
        }
        let completions = progress;
        progress = false;
        // (2) Dispatch, once the start policy allows it (a full window always does).
        if !self.started {
            let generated_all = self.done && !self.staged && self.pending.is_none();
            self.started = self.in_window >= cfg.window
                || match cfg.start {
                    Start::Immediate => true,
                    Start::AfterOrchestration => generated_all,
                    Start::Threshold(n) => self.generated >= n || generated_all,
                };
        }
        for pl in 0..2 {
            if !self.started {
                break;
            }
            while self.free_cores(pl) > 0
                && (cfg.pipeline_depth == 0 || self.running[pl] < cfg.pipeline_depth)
            {
                // Its own ready tasks first; an idle core may then take another AICPU's.
                let (owner, slot) = match sh.ready[me * 2 + pl].pop() {
                    Some(slot) => (self.me, slot),
                    None if cfg.work_steal => {
                        let victim = (1..sh.n)
                            .map(|k| (self.me + k) % sh.n)
                            .find_map(|v| sh.ready[v as usize * 2 + pl].pop().map(|s| (v, s)));
                        match victim {
                            Some(found) => found,
                            None => break,
                        }
                    }
                    None => break,
                };
                let core = self.take_core(pl);
                self.running[pl] += 1;
                if owner != self.me {
                    self.counts.stolen += 1;
                }
                sh.cores[core as usize]
                    .assign((owner as u64) << 32 | slot as u64)
                    .map_err(|_| SchedError::Corrupted("a core was handed two tasks"))?;
                self.busy.push(Busy { core, owner, slot })?;
                env.ring(core);
                progress = true;
            }
        }
        // A task waiting for predecessors beyond its waiter nodes keeps its guard until they
        // complete.
        if let Some((slot, left)) = self.deferred {
            let mut k = 0;
            let mut left = left;
            while k < left {
                let p = self.preds[k];
                let s = &sh.slots[p.aicpu as usize * sh.cap as usize + p.slot as usize];
                if waitlist::completed(&s.waiters, tag_of(p.id)) {
                    left -= 1;
                    self.preds[k] = self.preds[left];
                } else {
                    k += 1;
                }
            }
            if left == 0 {
                self.deferred = None;
                release_guard(sh, self.me, self.me, slot, env)?;
                progress = true;
            } else {
                self.deferred = Some((slot, left));
            }
        }
        // (3) Generation (§4.1), as far as it goes without waiting.
        loop {
            if !self.staged && self.pending.is_none() && !self.done {
                env.jitter();
                let before = self.interp.stats().emitted;
                self.interp.next_task()?;
                let mark = if self.interp.stats().emitted > before {
                    self.staged = true;
                    let id = self.interp.current_task().id;
                    self.need = self.need_of(self.interp.current_task());
                    env.staged(self.me, id);
                    id
                } else {
                    self.done = true;
                    u64::MAX
                };
                sh.published[me].0.store(mark, Ordering::Release);
                // The AICPUs waiting for it are woken every few watermarks, and at the latest
                // when this round's generation stops (below).
                self.unscanned += 1;
                if self.unscanned >= WAKE_EVERY || mark == u64::MAX {
                    self.wake_waiters(sh, env, mark);
                }
                progress = true;
            }
            if self.staged && self.pending.is_none() {
                if self.in_window >= cfg.window {
                    match cfg.mode {
                        WindowMode::Abort => {
                            return Err(SchedError::WindowAbort {
                                aicpu: self.me,
                                window: cfg.window,
                            })
                        }
                        WindowMode::Benchmark if !self.free.is_empty() => {
                            self.counts.overflows += 1
                        }
                        _ => {
                            self.counts.stalls += 1;
                            self.started = true;
                            break;
                        }
                    }
                }
                if self.free.is_empty() && !self.retiring.is_empty() {
                    sh.map.with_map(|map| {
                        Self::flush(self.me, &mut self.retiring, &mut self.free, sh, map)
                    })?;
                }
                let Some(k) = self.free.pop() else {
                    self.counts.stalls += 1;
                    self.started = true;
                    break;
                };
                let t = self.interp.current_task();
                let s = &sh.slots[me * sh.cap as usize + k as usize];
                s.fanin.store(1, Ordering::Relaxed);
                s.pool.store(pool_index(t.pool()) as u32, Ordering::Relaxed);
                s.kernel.store(t.kernel as u32, Ordering::Relaxed);
                waitlist::open(&s.waiters, tag_of(t.id));
                s.task.store(t.id, Ordering::Release);
                self.recent[(t.id % share::CHAIN_SPAN as u64) as usize] = (t.id, k);
                self.pending = Some(k);
                self.in_window += 1;
                progress = true;
            }
            let Some(k) = self.pending else { break };
            // One task at a time waits for extra predecessors (its scratch holds them).
            // Generation is blocked until they complete, so the start policy gives way: under
            // `after_orchestration` they would otherwise never be dispatched.
            if self.deferred.is_some() {
                self.started = true;
                break;
            }
            let need = self.need;
            if !cfg.naive && self.others_min < need {
                self.others_min = self.others_min(sh);
            }
            if !cfg.naive && self.others_min < need {
                sh.waiting_for[me].0.store(need, Ordering::SeqCst);
                // Re-check after announcing: a watermark published in between woke nobody.
                // The fence pairs with the publisher's (§4.3): either it sees this need, or
                // this re-check sees its watermark.
                fence(Ordering::SeqCst);
                self.others_min = self.others_min(sh);
                if self.others_min < need {
                    // Blocked on another AICPU: holding ready tasks back now could deadlock
                    // (that AICPU may wait for them), so the start policy gives way.
                    self.started = true;
                    break;
                }
            }
            // Only this AICPU writes its word: storing it only when it announced keeps the
            // line the others read at every publication clean (shared, not bounced).
            if sh.waiting_for[me].0.load(Ordering::Relaxed) != u64::MAX {
                sh.waiting_for[me].0.store(u64::MAX, Ordering::Relaxed);
            }
            env.jitter();
            self.record(sh, k, env)?;
            self.pending = None;
            self.staged = false;
            self.generated += 1;
            progress = true;
        }
        if self.unscanned > 0 {
            self.wake_waiters(sh, env, sh.published[me].0.load(Ordering::Relaxed));
        }
        // A held-back batch goes out as soon as nothing else moves: holding it longer could
        // keep every AICPU waiting.
        if !progress && !self.unreleased.is_empty() {
            self.release(sh, env)?;
            progress = true;
        }
        progress |= completions;
        if self.done
            && !self.staged
            && self.pending.is_none()
            && self.in_window == 0
            && self.deferred.is_none()
            && self.busy.is_empty()
            && !self.finished
        {
            if !self.retiring.is_empty() {
                sh.map.with_map(|map| {
                    Self::flush(self.me, &mut self.retiring, &mut self.free, sh, map)
                })?;
            }
            self.finished = true;
            progress = true;
        }
        Ok(progress)
    }

    /// Whether a round could do something now (checked before sleeping).
    pub fn has_work<C: AsRef<[Cell]>, L: MapLock>(
        &self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
    ) -> bool {
        let me = self.me as usize;
        let watermarks = self.pending.is_some()
            && self.deferred.is_none()
            && (0..sh.n).all(|a| {
                a == self.me || sh.published[a as usize].0.load(Ordering::Acquire) >= self.need
            });
        let ready = |pl: usize| {
            !sh.ready[me * 2 + pl].is_empty()
                || (cfg.work_steal && (0..sh.n as usize).any(|v| !sh.ready[v * 2 + pl].is_empty()))
        };
        !sh.passed[me].is_empty()
            || self
                .busy
                .as_slice()
                .iter()
                .any(|b| sh.cores[b.core as usize].idle())
            || (self.free_cores(0) > 0 && ready(0))
            || (self.free_cores(1) > 0 && ready(1))
            || watermarks
            || (!self.staged && self.pending.is_none() && !self.done)
            || self.deferred.is_some()
    }

    /// Wakes the AICPUs that announced a need the watermark `mark` (published last) is the
    /// first one this AICPU scanned for to reach (§4.3): the fence pairs with theirs between
    /// announcing and re-reading the watermarks, so one whose need an earlier scanned
    /// watermark reached was woken then or saw that watermark itself, and one that misses
    /// `mark` is seen here.
    fn wake_waiters<C, L>(&mut self, sh: &Shared<'_, C, L>, env: &mut impl Env, mark: u64) {
        fence(Ordering::SeqCst);
        for a in 0..sh.n {
            let need = sh.waiting_for[a as usize].0.load(Ordering::Relaxed);
            if a != self.me && reaches_first(self.scanned, need, mark) {
                env.wake(a);
            }
        }
        self.scanned = mark;
        self.unscanned = 0;
    }

    fn others_min<C, L>(&self, sh: &Shared<'_, C, L>) -> u64 {
        (0..sh.n)
            .filter(|&a| a != self.me)
            .map(|a| sh.published[a as usize].0.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    fn free_cores(&self, pl: usize) -> usize {
        if pl == 0 {
            self.free_cube
        } else {
            self.free_vector
        }
    }

    fn take_core(&mut self, pl: usize) -> u32 {
        if pl == 0 {
            self.free_cube -= 1;
            self.cores[self.free_cube]
        } else {
            self.free_vector -= 1;
            self.cores[self.ncube + self.free_vector]
        }
    }

    /// A core of this AICPU is idle again.
    fn core_back<C, L>(&mut self, sh: &Shared<'_, C, L>, core: u32) {
        let pl = usize::from(
            sh.cores[core as usize].core_type.load(Ordering::Relaxed) != handshake::CUBE,
        );
        if pl == 0 {
            self.cores[self.free_cube] = core;
            self.free_cube += 1;
        } else {
            self.cores[self.ncube + self.free_vector] = core;
            self.free_vector += 1;
        }
        self.running[pl] = self.running[pl].saturating_sub(1);
    }

    /// The task in `slot` completed: its successors are released now or with the next batch.
    fn completed<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        env: &mut impl Env,
        slot: u32,
    ) -> Result<(), SchedError> {
        self.unreleased.push(slot)?;
        if self.unreleased.len >= cfg.batch_deps.max(1) as usize {
            self.release(sh, env)?;
        }
        Ok(())
    }

    /// §4.2 steps 1–2 for the completed tasks of `unreleased`, as one batch: closes their
    /// successor lists and releases the successors; their slots go to `retiring`.
    fn release<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
    ) -> Result<(), SchedError> {
        let me = self.me as usize;
        self.counts.batches += 1;
        while let Some(slot) = self.unreleased.pop() {
            let s = &sh.slots[me * sh.cap as usize + slot as usize];
            let id = s.task.load(Ordering::Relaxed);
            if s.pool.load(Ordering::Relaxed) == 0 {
                self.counts.cube += 1;
            }
            // Close the successor list and release the successors. Node numbers are global:
            // `k * n * cap + a * cap + s`.
            let mut cur = waitlist::close(&s.waiters, tag_of(id));
            while cur != NIL {
                let nd = sh
                    .nodes
                    .get(cur as usize)
                    .ok_or(SchedError::Corrupted("a waiter node index"))?;
                let sa = nd.succ_aicpu.load(Ordering::Acquire);
                let ss = nd.succ_slot.load(Ordering::Acquire);
                let next = nd.next.load(Ordering::Acquire);
                release_guard(sh, self.me, sa, ss, env)?;
                cur = next;
            }
            // Its accesses leave its own map now; those in the global map, and the slot,
            // at the next flush (batched under the lock this AICPU takes to record anyway).
            self.map.retire(slot)?;
            if s.global.load(Ordering::Relaxed) != 0 {
                self.retiring.push(slot)?;
            } else {
                s.task.store(EMPTY, Ordering::Release);
                self.free.push(slot)?;
            }
            self.in_window -= 1;
            self.counts.tasks += 1;
            env.completed();
        }
        Ok(())
    }

    /// §4.2 step 3 for the slots of `retiring`: their accesses leave the global map and the
    /// slots become free. Called with the map locked.
    fn flush<C, L, M: Storage>(
        me: u32,
        retiring: &mut Stack<'m, u32>,
        free: &mut Stack<'m, u32>,
        sh: &Shared<'_, C, L>,
        map: &mut TensorMap<M>,
    ) -> Result<(), SchedError> {
        let base = me * sh.cap;
        while let Some(slot) = retiring.pop() {
            let mut below_zero = false;
            map.retire_with(base + slot, |tensor, writes| {
                if writes {
                    if let Some(w) = sh.writers.get(tensor as usize) {
                        // Every write recorded here was counted when it was recorded.
                        below_zero |= w.fetch_sub(1, Ordering::Release) == 0;
                    }
                }
            })?;
            if below_zero {
                return Err(SchedError::Corrupted(
                    "a tensor's live-writer count went below zero",
                ));
            }
            let s = &sh.slots[(base + slot) as usize];
            s.global.store(0, Ordering::Relaxed);
            s.task.store(EMPTY, Ordering::Release);
            free.push(slot)?;
        }
        Ok(())
    }

    /// §4.1 steps 5–7 for the placed task in slot `k`: looks it up and records it in its own
    /// map (local tensors, §3.5) and, if it touches shared tensors, under the global map's
    /// lock — which also retires what completed — in the global one; then registers it on its
    /// predecessors and releases its guard (or keeps it while it waits for predecessors
    /// beyond its nodes).
    fn record<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        k: u32,
        env: &mut impl Env,
    ) -> Result<(), SchedError> {
        let cap = sh.cap;
        let me = self.me;
        let base = me * cap;
        let handle = base + k;
        let mut found = 0usize;
        let mut overflow = false;
        let Aicpu {
            interp,
            preds,
            retiring,
            free,
            shares,
            uses,
            recent,
            map,
            ..
        } = self;
        let t = interp.current_task();
        let u = uses.of(&interp.program(), shares, t);
        let (uses, chain, global) = (u.regions, u.chain, u.global);
        // Local tensors first: only this AICPU's own tasks can be found there. A task that
        // only looks up tensors with no live entry there has nothing to do in it.
        let needed = u.local_needed(map);
        if needed {
            map.add_some(
                t.id,
                k,
                t.ios(),
                |k, _| match uses[k] {
                    (how, false) => how,
                    _ => Use::Skip,
                },
                &mut |p| match preds.get_mut(found) {
                    Some(d) => {
                        *d = Pred {
                            aicpu: me,
                            slot: p.handle,
                            id: p.id,
                        };
                        found += 1;
                    }
                    None => overflow = true,
                },
            )?;
        }
        // The producers of its chained and carried tensors (§3.6–3.7): its own tasks, named
        // by their distance.
        let mut m = chain;
        while m != 0 {
            let d = m.trailing_zeros() as u64;
            m &= m - 1;
            let id = t.id.wrapping_sub(d);
            let (at, slot) = recent[(id % share::CHAIN_SPAN as u64) as usize];
            if at != id || d > t.id {
                return Err(SchedError::Corrupted(
                    "a structural producer is not among this AICPU's last tasks",
                ));
            }
            let q = Pred {
                aicpu: me,
                slot,
                id,
            };
            // A producer that completed imposes nothing (the scratch holds only tasks still
            // in the window); one that completes from now on is skipped at registration.
            let head = &sh.slots[(base + slot) as usize].waiters;
            if waitlist::completed(head, tag_of(id)) || preds[..found].contains(&q) {
                continue;
            }
            match preds.get_mut(found) {
                Some(p) => {
                    *p = q;
                    found += 1;
                }
                None => overflow = true,
            }
        }
        // Shared tensors under the lock — unless all this task does there is read tensors
        // whose writes are all recorded (the watermark says so) and have all retired.
        let needs_map = global
            && t.ios().iter().zip(uses).any(|(io, u)| match *u {
                (Use::Lookup, true) => sh
                    .writers
                    .get(io.tensor as usize)
                    .is_none_or(|w| w.load(Ordering::Acquire) != 0),
                (_, g) => g,
            });
        if needs_map {
            let local = found;
            let recorded = sh.map.with_map(|gm| -> Result<u32, SchedError> {
                Self::flush(me, retiring, free, sh, gm)?;
                Ok(gm.add_some(
                    t.id,
                    handle,
                    t.ios(),
                    |k, _| match uses[k] {
                        (how, true) => how,
                        _ => Use::Skip,
                    },
                    &mut |p| {
                        let q = Pred {
                            aicpu: p.handle / cap,
                            slot: p.handle % cap,
                            id: p.id,
                        };
                        // A task of this AICPU may be found in both maps: register once.
                        if q.aicpu == me && preds[..local].contains(&q) {
                            return;
                        }
                        match preds.get_mut(found) {
                            Some(d) => {
                                *d = q;
                                found += 1;
                            }
                            None => overflow = true,
                        }
                    },
                )?)
            })?;
            if recorded > 0 {
                sh.slots[handle as usize].global.store(1, Ordering::Relaxed);
                for (io, u) in t.ios().iter().zip(uses) {
                    if io.writes() && matches!(u, (Use::Record | Use::Insert, true)) {
                        if let Some(w) = sh.writers.get(io.tensor as usize) {
                            w.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        if overflow {
            return Err(SchedError::Memory("predecessor scratch"));
        }
        env.recorded(self.me, self.interp.current_task());
        let s = &sh.slots[handle as usize];
        let mut used = 0usize;
        let mut rest = 0usize;
        for i in 0..found {
            let p = self.preds[i];
            if used >= NODES {
                self.preds[rest] = p;
                rest += 1;
                continue;
            }
            let target = &sh.slots[(p.aicpu * cap + p.slot) as usize];
            let node = used * (sh.n * cap) as usize + handle as usize;
            let nd = &sh.nodes[node];
            nd.succ_aicpu.store(self.me, Ordering::Relaxed);
            nd.succ_slot.store(k, Ordering::Relaxed);
            if waitlist::register(
                &target.waiters,
                tag_of(p.id),
                node as u32,
                &s.fanin,
                |first| nd.next.store(first, Ordering::Relaxed),
            ) {
                used += 1;
                self.counts.edges += 1;
                if p.aicpu != self.me {
                    self.counts.cross += 1;
                }
            }
        }
        if rest == 0 {
            release_guard(sh, self.me, self.me, k, env)?;
        } else {
            self.deferred = Some((k, rest));
        }
        Ok(())
    }
}

/// How many watermarks an AICPU publishes between two scans for the AICPUs waiting for them
/// (§4.3); it also scans whenever its round's generation stops.
pub const WAKE_EVERY: u32 = 16;

/// Whether an AICPU that scans for waiters at watermark `mark`, having scanned last at `prev`,
/// wakes one that announced it waits for `need` (§4.3): only when `mark` is the first scanned
/// watermark to reach the need. An earlier one that reached it either saw the announcement
/// and woke the waiter, or was seen by the waiter's re-check (both sides fence between their
/// store and their load).
#[inline]
pub fn reaches_first(prev: u64, need: u64, mark: u64) -> bool {
    prev < need && need <= mark
}

/// §4.1 step 7 (and §4.2 step 2): drops one hold on a task's fanin; the last one makes it
/// ready, and wakes its owner if that is not `me`, the AICPU releasing it.
fn release_guard<C: AsRef<[Cell]>, L>(
    sh: &Shared<'_, C, L>,
    me: u32,
    aicpu: u32,
    slot: u32,
    env: &mut impl Env,
) -> Result<(), SchedError> {
    let s = sh
        .slots
        .get((aicpu * sh.cap + slot) as usize)
        .ok_or(SchedError::Corrupted("a successor's slot"))?;
    if waitlist::release(&s.fanin) {
        let pl = s.pool.load(Ordering::Acquire) as usize & 1;
        sh.ready[aicpu as usize * 2 + pl]
            .push(slot)
            .map_err(|_| SchedError::Corrupted("a ready queue filled"))?;
        if aicpu != me {
            env.wake(aicpu);
        }
    }
    Ok(())
}
