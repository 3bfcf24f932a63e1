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
//!
//! This file holds the types; the loop is in `step.rs`, handing ready tasks to cores (and the
//! `timing` policies) in `issue.rs`, which core a task goes to in `claim.rs` (over the shared
//! bitmap of `cores.rs`), per-kernel core limits in `limits.rs`, recording a task in
//! `record.rs`, completion and retirement in `retire.rs`, and the barrier of a `READBACK` in
//! `barrier.rs`.

use crate::deque::Deque;
use crate::desc::{self, BindError, Binding, TensorArg};
use crate::handshake::{self, CoreSlot};
use crate::interp::{Interpreter, RunError, Status, Task};
use crate::params::Value;
use crate::ring::{Cell, Ring};
use crate::share::{self, Class, ShareError, Sharing, SiteUses};
use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};
use crate::tmap::{MapError, MapLayout, Slices, Storage, TensorMap, Use};
use crate::waitlist::{self, tag_of, NIL};
use crate::{Pool, WindowMode};
pub use barrier::{readback_blocks, readback_words};
pub use cores::CoreAlloc;
pub use join::{joins_len, nodes_len, preds_len, JOINS, JOIN_MIN, JOIN_NODES};
pub use once::{
    once_len, OnceTables, RowJoin, RowWord, SitePlan, Writer, ONCE_TABLES, ONCE_TENSORS,
};

mod barrier;
mod claim;
pub mod cores;
mod issue;
mod join;
pub mod limits;
mod need;
mod once;
mod quiet;
mod record;
mod retire;
mod step;

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
    /// Holds on the task: one for each predecessor it registered on and that has not
    /// completed, and while it registers one for each it may yet register on
    /// (spec/runtime.md §4.1 steps 6–7).
    pub fanin: AtomicU32,
    /// Pool index of the task (0 cube, 1 vector).
    pub pool: AtomicU32,
    /// Kernel index of the task.
    pub kernel: AtomicU32,
    /// The task's successor list (`waitlist`).
    pub waiters: AtomicU64,
    /// Whether the task has entries in the global map (only its AICPU reads this).
    pub global: AtomicU32,
    /// The task's stream under `stream_by` (0 without it): what `interleaved` timing rotates
    /// over.
    pub stream: AtomicU32,
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
            stream: AtomicU32::new(0),
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
    /// Now, in nanoseconds from any fixed origin, never decreasing: the clock `rate_limit`
    /// timing spaces issues by (the device's generic timer; the host's monotonic clock; a fake
    /// one in tests). Read only under that timing.
    fn now_ns(&mut self) -> u64;
    /// Called after a round's dispatch: lets the cores rung so far run, where the caller runs
    /// them itself (a simulator's driver thread), and says whether any of them may have
    /// finished since the round took its completions. If so, the round takes them and
    /// dispatches again, at most `HOPS_A_ROUND` times, before it generates (§4.3): a
    /// successor starts without waiting for the round's generation. The default, nothing
    /// moved, is for a caller whose cores move only between rounds (a stepped harness, the
    /// model); a device says yes, its cores running on their own.
    fn run_cores(&mut self) -> bool {
        false
    }
    /// This AICPU handed a task to a core (for traces).
    fn issued(&mut self, _issue: &Issued) {}
    /// Whether [`Env::issued`] is to be called now: an environment that ignores hand-outs
    /// (no trace, no check) says no, and the scheduler does not assemble their reports.
    fn watches_issues(&self) -> bool {
        true
    }
    /// A point where a stress test may yield or sleep.
    fn jitter(&mut self) {}
    /// Whether a round the AICPU settles as quiet (`quiet.rs`) is taken in full all the same,
    /// and the run stopped if that round does anything: for a harness that steps the AICPUs
    /// and the cores one at a time, where nothing moves between the check and the round.
    fn checks_quiet(&self) -> bool {
        false
    }
    /// Whether a task may be recorded a quick way (`record.rs`): with the producers the
    /// program names alone when its site needs no map (`record_mapless`, §4.1 step 5), or by
    /// its site's plan (`record_planned`, §4.8). A harness that compares the quick ways with
    /// the long way turns them off.
    fn plans(&self) -> bool {
        true
    }
    /// This AICPU staged task `id` (its interpreter paused right after emitting it).
    fn staged(&mut self, _aicpu: u32, _id: u64) {}
    /// This AICPU recorded `task` (dependencies looked up, registered).
    fn recorded(&mut self, _aicpu: u32, _task: &Task) {}
    /// One of this AICPU's tasks completed and its successors were released.
    fn completed(&mut self) {}
    /// This AICPU saw that core `core`, which it had handed task `task`, finished it, and
    /// freed the task's scratch (for checks that no two running tasks share bytes).
    fn reclaimed(&mut self, _core: u32, _task: u64) {}
    /// At a `READBACK` (§4.5), once every task before it has completed: AICPU `aicpu` reads
    /// tensor `tensor`, bound as `binding`, into `into` — its elements in row-major order, as
    /// raw 32-bit words — and says it did. Without memory to read (an unbound tensor, a run
    /// whose kernels compute nothing) it leaves `into`, which holds the launch's values of the
    /// runtime array, as it is: the default.
    fn read_back(
        &mut self,
        _aicpu: u32,
        _tensor: u16,
        _binding: &Binding,
        _into: &mut [u32],
    ) -> bool {
        false
    }
}

/// A task handed to a core ([`Env::issued`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issued {
    /// The AICPU that handed it over.
    pub aicpu: u32,
    /// The task's own AICPU (another one when stolen).
    pub owner: u32,
    /// The core.
    pub core: u32,
    /// The task's id.
    pub task: u64,
    /// Its kernel index.
    pub kernel: u32,
    /// Its stream (0 without `stream_by`).
    pub stream: u32,
    /// Under `batched` timing, the number of the AICPU's batch it went out in (from 1); else,
    /// and for a stolen task, 0.
    pub batch: u64,
    /// Under `rate_limit` timing, the clock reading ([`Env::now_ns`]) the issue was allowed at.
    pub at_ns: Option<u64>,
    /// Its scratch: offset in the launch's workspace memory and bytes (0: none).
    pub workspace: (u32, u32),
}

/// What holds an AICPU's generation up ([`Aicpu::blocked`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// Nothing: it can generate its next task.
    Not,
    /// Its window is full: the next task waits for a slot.
    Window,
    /// The next task waits for the other AICPUs' watermarks (§4.1).
    Watermarks,
    /// A task waits for predecessors beyond its waiter nodes (§4.1 step 6).
    Predecessors,
    /// It waits at a `READBACK`'s barrier (§4.5).
    Readback,
    /// It has generated all its tasks.
    Done,
}

/// When an AICPU hands its ready tasks to its cores: PTO-WSP's `timing` (spec/pto.md §4.2).
/// Every policy issues only ready tasks and never holds one back when holding could stall the
/// launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssueTiming {
    /// Each ready task as soon as a core of its pool is free.
    Immediate,
    /// In batches: the AICPU holds its ready tasks until it has at least `n`, then issues that
    /// batch (all it holds) as cores free up before it counts the next one. It opens a smaller
    /// batch when none of the cores it drives is busy — then no completion of its own is
    /// coming to add to the batch.
    Batched(u32),
    /// Round-robin over the `n` streams of `stream_by`: after a task of stream `s`, the next
    /// task the AICPU issues is one of the first stream after `s` (cyclically) that has a ready
    /// task for a free core.
    Interleaved(u32),
    /// `n` tasks per millisecond for the whole launch, on average: the AICPUs share one token
    /// bucket ([`Shared::next_issue`]), a turn every `ceil(10⁶ / n)` ns of [`Env::now_ns`]
    /// ([`IssueTiming::spacing_ns`]), making up at most [`RATE_CREDIT_NS`] of missed turns.
    RateLimit(u32),
}

/// How far behind its rate a `rate_limit` launch may fall and still catch up, in ns of the
/// clock: over any `T` ns its AICPUs issue at most `(T + RATE_CREDIT_NS) / spacing + 1` tasks.
///
/// An AICPU issues only when it steps, and its steps can be far apart (a host thread parked
/// or descheduled for tens of µs, a long generation step on the device). Without credit an
/// AICPU would issue at most one task a step and a high rate would be out of reach:
/// `rate_limit(100000)` ran the LLaMA layer at ~5,000 tasks/ms in the simulator, a third of
/// its unlimited speed. 100 µs of credit covers a park's overshoot and bounds the burst after
/// an idle spell to a tenth of a millisecond's worth of tasks.
pub const RATE_CREDIT_NS: u64 = 100_000;

impl IssueTiming {
    /// The program's `timing` (config bytes 88–93; the verifier checked them).
    pub fn of_config(c: &crate::format::Config) -> IssueTiming {
        let n = c.timing_arg.get().max(1);
        match crate::Timing::from_u8(c.timing) {
            Some(crate::Timing::Batched) => IssueTiming::Batched(n),
            Some(crate::Timing::Interleaved) => IssueTiming::Interleaved(n),
            Some(crate::Timing::RateLimit) => IssueTiming::RateLimit(n),
            _ => IssueTiming::Immediate,
        }
    }

    /// Whether the AICPU takes its ready tasks into its private buffer to choose among them.
    pub fn holds(self) -> bool {
        matches!(self, IssueTiming::Batched(_) | IssueTiming::Interleaved(_))
    }

    /// Under `rate_limit`: the clock reading from which the launch may issue again after issuing
    /// at `now_ns`, when it was allowed to from `next_ns` (`≤ now_ns`). A token bucket: turns
    /// missed while no AICPU could issue are made up, at most [`RATE_CREDIT_NS`] of them.
    pub fn next_turn(self, next_ns: u64, now_ns: u64) -> u64 {
        next_ns.max(now_ns.saturating_sub(RATE_CREDIT_NS)) + self.spacing_ns()
    }

    /// The gap between two turns of the launch under `rate_limit(n)`: `ceil(10⁶ / n)` ns.
    pub fn spacing_ns(self) -> u64 {
        match self {
            IssueTiming::RateLimit(n) => 1_000_000u64.div_ceil(n.max(1) as u64),
            _ => 0,
        }
    }
}

impl core::fmt::Display for IssueTiming {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            IssueTiming::Immediate => write!(f, "immediate"),
            IssueTiming::Batched(n) => write!(f, "batched({n})"),
            IssueTiming::Interleaved(n) => write!(f, "interleaved({n})"),
            IssueTiming::RateLimit(n) => write!(f, "rate_limit({n})"),
        }
    }
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
    /// When ready tasks are handed to cores (`timing`).
    pub timing: IssueTiming,
    /// Which cores each AICPU hands tasks to (§4.6). What the launcher lays the shared
    /// region out for: the scheduler follows the region ([`Shared::free_cores`] empty or not).
    pub cores: CoreAlloc,
    /// Testing only: skip the watermark wait (the naïve protocol that misses edges).
    pub naive: bool,
}

impl Config {
    /// The program's own schedule (its DispatchConfig, spec/bytecode.md §3.1): window, window
    /// mode, start policy, pipeline depth, ready policy, `batch_deps`, `timing`, `cores`.
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
            timing: IssueTiming::of_config(c),
            cores: CoreAlloc::from_u8(c.cores).unwrap_or_default(),
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
    /// (the first registrations of all slots together: most tasks use few); then
    /// [`JOIN_NODES`] for each join ([`nodes_len`] in all).
    pub nodes: &'m [Node],
    /// `joins[a * JOINS + j]`: join `j` of AICPU `a` (§4.7; its `task`, `fanin` and
    /// `waiters` only). A predecessor in slot `cap + j` of `a` is that join.
    pub joins: &'m [Slot],
    /// `ready[a * 2 + p]`: slots of `a`'s ready tasks of pool `p` (under `ready = work_steal`,
    /// those another AICPU released, which `a` moves to its deque: its inbox).
    pub ready: &'m [Ring<C>],
    /// Under `ready = work_steal` ([`Config::work_steal`]): `stealable[a * 2 + p]`, `a`'s
    /// Chase-Lev deque of its ready tasks of pool `p` (`a` pushes and pops at the bottom, the
    /// others steal at the top, §4.3); none otherwise. A launch has them exactly when it
    /// steals.
    pub stealable: &'m [Deque<C>],
    /// How many AICPUs' own tasks have all completed, 0 at launch. Under `work_steal` an
    /// AICPU whose own work is done goes on stealing until this reaches the AICPU count (then
    /// no task is left anywhere: a task stays in its owner's window until it completes).
    pub own_done: &'m Padded,
    /// `passed[a]`: slots of `a`'s tasks that completed on another AICPU's core.
    pub passed: &'m [Ring<C>],
    /// `cores[c]`: the handshake slots.
    pub cores: &'m [CoreSlot],
    /// `core_aicpu[c]`: the AICPU that drives core `c` under a fixed partition
    /// ([`CoreAlloc::Partition`]).
    pub core_aicpu: &'m [u32],
    /// Under shared cores ([`CoreAlloc::Shared`]): the free cores, a bit each
    /// ([`cores::words_for`] words, all free at launch: [`cores::free_all`]); empty under a
    /// partition.
    pub free_cores: &'m [AtomicU64],
    /// `core_waiters[p]`: the AICPUs waiting for a free core of pool `p` (bit `a` for AICPU
    /// `a`, [`cores::announce`]); then, `core_waiters[2 + p]`: the AICPUs idle in pool `p`
    /// (no task of it ready), whose home cores others may borrow (both unused under a
    /// partition); then `core_waiters[4]`: the AICPUs whose next task waits for its kernel's
    /// core limit ([`limits::LIMIT_WAITERS`]). [`CORE_WAITER_WORDS`] words, at launch
    /// [`cores::waiter_word_at_launch`] (every AICPU idle).
    pub core_waiters: &'m [Padded],
    /// `kernel_running[k]`: tasks of kernel `k` issued and not yet seen complete, for the
    /// kernels with a core limit (§4.6; `limits.rs`): one word per kernel of the program, 0 at
    /// launch, or none when no kernel has a limit.
    pub kernel_running: &'m [AtomicU32],
    /// The global TensorMap, its handles `a * cap + s`.
    pub map: &'m L,
    /// `writers[x]`: writes of tensor `x` in the global map whose task has not retired (a
    /// read that no write can follow skips the map when there are none, §3.5).
    pub writers: &'m [AtomicU32],
    /// The written-once tables (§4.8, `once.rs`): the writers of shared tensors written once,
    /// out of the global map; [`once_len`] words, 0 at launch (or none: no tables).
    pub once: &'m [AtomicU64],
    /// `rate_limit`: the clock reading ([`Env::now_ns`]) from which the launch's next issue is
    /// allowed, 0 at launch (§4.3, [`IssueTiming::next_turn`]).
    pub next_issue: &'m Padded,
    /// The descriptors of the tasks in the windows (§3.8): slot `s` of `a` owns the
    /// `desc_words` words from `(a * cap + s) * desc_words` ([`Shared::desc`]).
    pub descs: &'m [AtomicU64],
    /// Words per slot in `descs`: at least [`desc::slot_words`] of the program, or 0 when no
    /// kernel reads descriptors (a simulator's scheduler benchmark): then none is written.
    pub desc_words: u32,
    /// The launch's workspace memory: each AICPU's arena (§4.4).
    pub workspace: Workspace,
    /// `barriers[k]`: the AICPUs that have reached the program's `k`-th `READBACK` with all
    /// their tasks before it completed (§4.5); one per `READBACK` of the program.
    pub barriers: &'m [Padded],
}

/// The launch's workspace memory (spec/runtime.md §4.4): AICPU `a` allocates its running tasks'
/// scratch from its **arena**, the `arena` bytes from offset `a × arena`; a task's descriptor
/// gives its scratch's offset from there (and its address, `base` + offset, when `base` is not
/// 0). The arena is fixed for the launch: a task whose scratch does not fit waits until
/// running tasks of the AICPU complete and free theirs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Workspace {
    /// Bytes of each AICPU's arena.
    pub arena: u32,
    /// Address of the launch's workspace memory (`n × arena` bytes); 0 when the launcher gives
    /// none (descriptors then give offsets only).
    pub base: u64,
}

impl Workspace {
    /// The largest workspace of the program's kernels, bytes (0: no kernel has one).
    pub fn largest(v: &crate::Verified<'_>) -> u32 {
        v.kernels()
            .iter()
            .map(|k| u32::from(k.workspace.get()) * crate::format::WORKSPACE_UNIT)
            .max()
            .unwrap_or(0)
    }

    /// Each AICPU's arena for program `v`: the program's `workspace = N` when it gives one;
    /// else sized from the window, room for the largest workspace on each task an AICPU can
    /// run at once — `min(window, cores)` for an AICPU driving `cores` cores — so that
    /// without a smaller arena no task ever waits. Saturates at `u32::MAX`.
    pub fn arena_for(v: &crate::Verified<'_>, window: u32, cores: u32) -> u32 {
        match v.config().workspace_arena.get() {
            0 => u64::from(Workspace::largest(v))
                .saturating_mul(u64::from(window.min(cores)))
                .min(u64::from(u32::MAX)) as u32,
            given => given,
        }
    }
}

impl<C, L> Shared<'_, C, L> {
    /// The descriptor words of slot `slot` of AICPU `aicpu` (empty if out of range).
    pub fn desc(&self, aicpu: u32, slot: u32) -> &[AtomicU64] {
        let w = self.desc_words as usize;
        let at = (aicpu as usize * self.cap as usize + slot as usize) * w;
        self.descs.get(at..at + w).unwrap_or(&[])
    }

    /// What a predecessor in slot `slot` of AICPU `aicpu` waits on: a window slot, or for a
    /// slot past the window (`cap + j`) join `j` of `aicpu` (§4.7).
    #[inline]
    pub(crate) fn waitable(&self, aicpu: u32, slot: u32) -> Result<&Slot, SchedError> {
        let got = if slot < self.cap {
            self.slots.get((aicpu * self.cap + slot) as usize)
        } else {
            self.joins
                .get(aicpu as usize * JOINS + (slot - self.cap) as usize)
        };
        got.ok_or(SchedError::Corrupted("a predecessor's slot"))
    }
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
    /// A tensor binding was refused (spec/runtime.md §3.8).
    #[error("tensor binding: {0}")]
    Bind(#[from] BindError),
    /// The shared region or the AICPU's buffers are smaller than their layout says.
    #[error("scheduler memory: {0}")]
    Memory(&'static str),
    /// A kernel's workspace does not fit the launch's arena, or the arenas of all AICPUs
    /// together do not fit the 32-bit offsets of descriptors.
    #[error("workspace: kernel {kernel} needs {need} bytes, the arena of each of {aicpus} AICPUs has {arena} (and all arenas together must stay below 4 GiB)")]
    Workspace {
        /// The kernel (its index).
        kernel: u32,
        /// Its workspace, bytes.
        need: u32,
        /// Each AICPU's arena, bytes.
        arena: u32,
        /// AICPUs.
        aicpus: u32,
    },
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
    /// Joins opened (§4.7); their registrations on writers count in `edges`.
    pub joins: u64,
    /// Reads a join stood for: looked up once for all of them.
    pub joined: u64,
    /// Of those, reads another AICPU's join stood for, found as its row's join (§4.7):
    /// registered on it, or on a relay of it.
    pub joined_shared: u64,
    /// Joins opened as relays of another AICPU's row's join (§4.7), counted in `joins` too.
    pub relays: u64,
    /// Reads a join could stand for of a region whose writers had all completed when it was
    /// last looked up (§4.7): answered without a lookup, nothing to wait for.
    pub finished_reads: u64,
    /// Writes filed in a written-once table (§4.8), out of the global map.
    pub once_writes: u64,
    /// Writes such a table did not take (spilled to the global map).
    pub once_spills: u64,
    /// Tasks recorded by their site's plan (`record_planned`): every region in a
    /// written-once table, no map asked.
    pub planned: u64,
    /// Tasks recorded with the producers the program names alone (`record_mapless`): their
    /// site needs no map, join or table.
    pub mapless: u64,
    /// Times generation found the window full.
    pub stalls: u64,
    /// Rounds it settled as quiet (`quiet.rs`): nothing it waited on had moved since a round
    /// that did nothing.
    pub quiet_rounds: u64,
    /// Times a round took completions again after its dispatch, before generating
    /// ([`Env::run_cores`]): cores that finished what the round had just handed them.
    pub hops: u64,
    /// Tasks placed beyond the window in benchmark mode.
    pub overflows: u64,
    /// Other AICPUs' tasks this AICPU ran on its cores.
    pub stolen: u64,
    /// Successor releases (batches of completed tasks).
    pub batches: u64,
    /// `batched` timing: batches opened.
    pub issue_batches: u64,
    /// Of those, opened with fewer tasks than the batch size (none of its cores was busy).
    pub short_batches: u64,
    /// `interleaved` timing: tasks issued before an older ready task, to keep the rotation.
    pub reordered: u64,
    /// `rate_limit` timing: rounds in which a ready task waited for the rate.
    pub rate_waits: u64,
    /// `rate_limit` timing: nanoseconds ready tasks waited for the rate (from the first round
    /// that found one waiting to the issue).
    pub rate_wait_ns: u64,
    /// Tasks that waited for workspace (their scratch did not fit the arena when their turn
    /// came).
    pub workspace_waits: u64,
    /// The most bytes of its arena in use at once.
    pub workspace_peak: u64,
    /// Shared cores: times it had a task ready and found no free core of its pool (§4.6).
    pub core_waits: u64,
    /// Shared cores: cores it claimed from the free-core bitmap (a compare-and-swap on the
    /// line every AICPU claims from); the others its tasks ran on it kept in its hand (§4.6).
    pub core_claims: u64,
    /// Tasks that waited for their kernel's core limit (as many of its tasks running as the
    /// limit allows when their turn came, §4.6).
    pub core_limit_waits: u64,
}

impl core::ops::AddAssign for Counts {
    /// Adds another AICPU's counts (a launch's totals).
    fn add_assign(&mut self, o: Counts) {
        let Counts {
            tasks,
            cube,
            edges,
            cross,
            joins,
            joined,
            joined_shared,
            relays,
            finished_reads,
            once_writes,
            once_spills,
            planned,
            mapless,
            stalls,
            quiet_rounds,
            hops,
            overflows,
            stolen,
            batches,
            issue_batches,
            short_batches,
            reordered,
            rate_waits,
            rate_wait_ns,
            workspace_waits,
            workspace_peak,
            core_waits,
            core_claims,
            core_limit_waits,
        } = o;
        self.tasks += tasks;
        self.cube += cube;
        self.edges += edges;
        self.cross += cross;
        self.joins += joins;
        self.joined += joined;
        self.joined_shared += joined_shared;
        self.relays += relays;
        self.finished_reads += finished_reads;
        self.once_writes += once_writes;
        self.once_spills += once_spills;
        self.planned += planned;
        self.mapless += mapless;
        self.stalls += stalls;
        self.quiet_rounds += quiet_rounds;
        self.hops += hops;
        self.overflows += overflows;
        self.stolen += stolen;
        self.batches += batches;
        self.issue_batches += issue_batches;
        self.short_batches += short_batches;
        self.reordered += reordered;
        self.rate_waits += rate_waits;
        self.rate_wait_ns += rate_wait_ns;
        self.workspace_waits += workspace_waits;
        self.core_waits += core_waits;
        self.core_claims += core_claims;
        self.core_limit_waits += core_limit_waits;
        // Arenas are per AICPU: the launch's peak is the largest one's.
        self.workspace_peak = self.workspace_peak.max(workspace_peak);
    }
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
    /// Its scratch in this AICPU's arena: first byte (from the arena's start) and bytes (0:
    /// none). Freed when the entry goes, at the task's completion.
    pub ws_start: u32,
    /// Bytes.
    pub ws_len: u32,
}

/// One AICPU's private buffers: `cap` words for each of `free`, `retiring`, `unreleased` and
/// `held`;
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
    /// The cores this AICPU drives under a fixed partition (any order); may be empty under
    /// shared cores.
    pub cores: &'m mut [u32],
    /// Its busy cores: room for as many as it may drive at once — its own under a
    /// partition, every core of the launch under shared cores.
    pub busy: &'m mut [Busy],
    /// The predecessors of the task being recorded; those beyond its waiter nodes stay here
    /// until they complete.
    pub preds: &'m mut [Pred],
    /// The classes of the program's tensors (written by [`Aicpu::new`]).
    pub shares: &'m mut [Sharing],
    /// The program's tensors as the launch binds them, one per tensor: what descriptors
    /// resolve regions against (written by [`Aicpu::new`] from the declarations, the runtime
    /// parameters and `bound`).
    pub tensors: &'m mut [Binding],
    /// The launcher's bindings of the tensors to memory, one per tensor of the program, or
    /// none: then no tensor is bound (descriptors give element offsets only).
    pub bound: &'m [TensorArg],
    /// Its ready tasks taken out of its ready queues to be chosen among (`batched` and
    /// `interleaved` timing): `cap` words.
    pub held: &'m mut [u32],
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
    /// Takes out entry `i`, keeping the order of the others.
    fn remove(&mut self, i: usize) -> T {
        let x = self.buf[i];
        self.buf.copy_within(i + 1..self.len, i);
        self.len -= 1;
        x
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
    /// Its own tasks have all completed (counted once in [`Shared::own_done`]).
    own_done: bool,
    /// It has nothing left to do: its own tasks have all completed and, under `work_steal`,
    /// every other AICPU's too (until then it steals).
    finished: bool,
    in_window: u32,
    free: Stack<'m, u32>,
    retiring: Stack<'m, u32>,
    unreleased: Stack<'m, u32>,
    busy: Stack<'m, Busy>,
    /// How it finds a free core ([`Config::cores`], fixed at [`Aicpu::new`]).
    alloc: CoreAlloc,
    /// Shared cores: each pool's cores in the launch's numbering (cube cores first); its home
    /// share in each ([`cores::home`]), which it claims from first (then idle AICPUs'); and
    /// whether it announced that it waits for a core of each pool.
    pool_range: [core::ops::Range<u32>; 2],
    home_cores: [cores::Span; 2],
    /// Its home share of each pool, and how many of its cores run its tasks: with all of
    /// them, no home core is free and it does not look in the bitmap (`claim.rs`).
    home: [core::ops::Range<u32>; 2],
    home_running: [u32; 2],
    waiting_core: [bool; 2],
    /// Under shared cores, the cores whose tasks it saw complete this round and keeps for the
    /// round's dispatch (`claim.rs`); empty between rounds.
    hand: claim::Hand,
    /// Whether it last published itself idle in each pool (`Shared::core_waiters[2 + p]`).
    idle: [bool; 2],
    /// Its own free cores under a partition: cube ones in `cores[..free_cube]`, vector ones in
    /// `cores[ncube..ncube + free_vector]`.
    cores: &'m mut [u32],
    ncube: usize,
    free_cube: usize,
    free_vector: usize,
    preds: &'m mut [Pred],
    shares: &'m mut [Sharing],
    /// The tensors' bindings, which descriptors resolve regions against.
    tensors: &'m [Binding],
    /// How its sites' regions are recorded.
    uses: SiteUses,
    /// Its last placed tasks, `(id, slot)` at `id % CHAIN_SPAN`: where a structural producer
    /// (§3.6–3.7, always one of its own last `CHAIN_SPAN` tasks) sits.
    recent: [(u64, u32); share::CHAIN_SPAN as usize],
    /// The map of its local tensors.
    map: TensorMap<S>,
    /// Its joins (§4.7): which region each stands for; whether its pending task waits for
    /// one of them to complete.
    joins: join::Joins,
    join_wait: bool,
    /// The launch's written-once tables (§4.8), as every AICPU lays them out, and what they
    /// do for the regions of its sites (`record_planned`).
    once: once::OnceTables,
    plans: once::SitePlans,
    /// Whether a tensor of the global map is stepped: only then may a task's need be lowered
    /// for a join (`need.rs`).
    stepped_shared: bool,
    /// What the regions of its last sites make of their tasks' needs, by site (`need.rs`).
    needs: [need::NeedShape; need::NEED_SITES],
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
    /// Its last round did nothing, in a state [`Aicpu::still_quiet`] can settle the next one
    /// in (`quiet.rs`).
    quiet: bool,
    generated: u64,
    counts: Counts,
    /// Timing (`issue.rs`): ready tasks taken from its own queues, oldest first.
    held: Stack<'m, u32>,
    /// `batched`: tasks of the open batch left to issue (the first ones of `held`).
    batch_left: usize,
    /// `interleaved`: the stream whose turn it is.
    next_stream: u32,
    /// `rate_limit`: since when a ready task has waited for the launch's next turn, and that
    /// turn ([`Shared::next_issue`]) as last read.
    rate_wait_since: Option<u64>,
    /// `ready = work_steal`: the state of its random choice of a first victim (SplitMix64).
    victim_rng: u64,
    rate_due_ns: u64,
    /// Workspace (`issue.rs`): the task of each pool whose scratch did not fit the arena, taken
    /// out of its queue and issued first once it fits (`(owner, slot)`).
    parked: [Option<(u32, u32)>; 2],
    /// The program's kernels when one has workspace, else none: what `issue` looks a task's
    /// scratch up in (an empty table skips the lookup).
    kernel_ws: &'a [crate::format::KernelEntry],
    /// Core limits (`limits.rs`): the program's kernels when one has a limit, else none; for
    /// each pool whether its parked task waits for its kernel's limit (not for workspace);
    /// whether it announced so (`Shared::core_waiters[4]`).
    kernel_limits: &'a [crate::format::KernelEntry],
    limit_parked: [bool; 2],
    waiting_limit: bool,
    /// Its arena's bytes (the launch's `Workspace::arena`) and bytes in use.
    arena: u32,
    arena_used: u32,
    /// Read-back (`readback.rs`, §4.5): the `READBACK` its generation stopped at, and whether
    /// it has arrived at that barrier (all its tasks before it completed).
    barrier: Option<crate::readback::Readback>,
    arrived: bool,
    /// The memory the values read back go to ([`Aicpu::with_readback`]): the part not used
    /// yet of the elements buffer, and of the runtime-parameter blocks (one per `READBACK`).
    readback_values: &'p mut [u32],
    readback_slots: &'p mut [Value<'p>],
}

/// Cores of each pool an AICPU keeps in its hand between the completions and the dispatch of a
/// round under shared cores, of its home share and borrowed each (`claim.rs`); more go back to
/// the bitmap at once.
pub const HAND: usize = 64;

/// Words of [`Shared::core_waiters`].
pub const CORE_WAITER_WORDS: usize = 5;

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
