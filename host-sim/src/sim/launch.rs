//! A launch's memory, built once for whichever driver steps it: the region the AICPUs share
//! (`vm::sched::Shared`), each AICPU's private buffers (`vm::sched::Local`) and the schedulers
//! over them. The threaded run (`threaded.rs`) and the simulated-time model (`crate::model`)
//! build their launches here, so both run exactly the same scheduler over the same layout and
//! differ only in how they step it and what a core does.

use std::sync::atomic::{AtomicU32, AtomicU64};

use crossbeam_utils::CachePadded;
use ptovm_vm::deque::Deque;
use ptovm_vm::desc::{self, Binding, TensorArg};
use ptovm_vm::handshake::{self, CoreSlot};
use ptovm_vm::ring::{Cell, Ring};
use ptovm_vm::sched::{
    cores as core_bits, joins_len, nodes_len, once_len, preds_len, Aicpu, Busy, Config, CoreAlloc,
    Counts, Local, MapLock, Node, Padded, Pred, Shared, Slot, Workspace, CORE_WAITER_WORDS,
};
use ptovm_vm::share::Sharing;
use ptovm_vm::spin::SpinLock;
use ptovm_vm::tmap::MapLayout;
use ptovm_vm::{Interpreter, RuntimeParams, Value, Verified, WindowMode};
use zerocopy::FromZeros;

use super::{Options, Report, SimError};
use crate::deps::{heap_map, HeapMap, HeapStorage};

/// The global TensorMap behind the simulator's spin lock (spec/runtime.md §3.2).
/// A thread that finds it taken spins with exponential backoff and then yields its time slice
/// (`crossbeam_utils::Backoff`): the map's critical sections are short, and yielding keeps a
/// waiter from burning a core the holder needs.
pub(crate) struct MapLockHost(SpinLock<HeapMap>);

impl MapLock for MapLockHost {
    type Mem = HeapStorage;
    fn with_map<R>(&self, f: impl FnOnce(&mut HeapMap) -> R) -> R {
        let backoff = crossbeam_utils::Backoff::new();
        f(&mut self.0.lock_with(|| backoff.snooze()))
    }
}

/// The shared region as the scheduler sees it.
pub(crate) type Sched<'m> = Shared<'m, Box<[Cell]>, MapLockHost>;

/// An AICPU's scheduler over the simulator's buffers.
pub(crate) type Scheduler<'a, 'p, 'm> = Aicpu<'a, 'p, 'm, HeapStorage>;

/// The shape of a launch: what its options and program fix before memory is taken.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// AICPUs.
    pub n: u32,
    /// Window slots per AICPU (4 × the window in benchmark mode).
    pub cap: usize,
    /// Cores in all, cube cores first.
    pub cores: usize,
    /// Cube cores (the first `cube` core indices).
    pub cube: u32,
    /// `core_aicpu[c]`: the AICPU that drives core `c` under a fixed partition.
    pub core_aicpu: Vec<u32>,
    /// Which cores an AICPU hands tasks to.
    pub alloc: CoreAlloc,
    /// Descriptor words per window slot (0: descriptors are not written).
    pub desc_words: usize,
    /// The scheduling settings every AICPU runs with.
    pub cfg: Config,
}

impl Layout {
    /// Checks the options against the program and lays the launch out. `descriptors`: write
    /// each task's descriptor into its slot (a kernel reads it).
    pub fn new(v: &Verified<'_>, o: &Options, descriptors: bool) -> Result<Layout, SimError> {
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
        let least = match o.cores {
            CoreAlloc::Shared => 1,
            CoreAlloc::Partition => n,
        };
        if o.cube < least || o.vector < least {
            return Err(SimError::Options(match o.cores {
                CoreAlloc::Shared => format!(
                    "a launch needs at least one cube and one vector core, not {} and {}",
                    o.cube, o.vector
                ),
                CoreAlloc::Partition => format!(
                    "under a core partition every AICPU needs at least one cube and one vector core: {} cube and {} vector cores for {n} AICPUs",
                    o.cube, o.vector
                ),
            }));
        }
        // Benchmark mode lets the window grow to 4x its size while counting the overflows.
        let cap = if o.mode == WindowMode::Benchmark {
            o.window * 4
        } else {
            o.window
        };
        // Under a partition, core c of a pool goes to AICPU c mod n; cube cores are 0..,
        // vector cores follow.
        let core_aicpu: Vec<u32> = (0..o.cube)
            .map(|c| c % n)
            .chain((0..o.vector).map(|c| c % n))
            .collect();
        Ok(Layout {
            n,
            cap,
            cores: (o.cube + o.vector) as usize,
            cube: o.cube,
            core_aicpu,
            alloc: o.cores,
            desc_words: if descriptors { desc::slot_words(v) } else { 0 },
            cfg: Config {
                window: o.window as u32,
                mode: o.mode,
                start: o.start,
                pipeline_depth: o.pipeline_depth,
                work_steal: o.work_steal,
                cores: o.cores,
                batch_deps: o.batch_deps,
                timing: o.timing,
                naive: o.naive,
            },
        })
    }

    /// The error for memory the host cannot give.
    fn too_big(&self, what: &str) -> SimError {
        SimError::Options(format!(
            "{what} for {} windows of {} slots is more memory than this host can give",
            self.n, self.cap
        ))
    }

    /// The cores AICPU `a` may hand tasks to: its own under a partition, every core under
    /// shared cores.
    pub fn cores_of(&self, a: u32) -> impl Iterator<Item = u32> + '_ {
        let shared = self.alloc == CoreAlloc::Shared;
        (0..self.cores as u32).filter(move |&c| shared || self.core_aicpu[c as usize] == a)
    }

    /// Each AICPU's workspace arena: the options' or the program's, else sized from the window
    /// for the AICPU driving the most cores (every core under shared cores).
    pub fn workspace(&self, v: &Verified<'_>, o: &Options) -> Workspace {
        let most = (0..self.n)
            .map(|a| self.cores_of(a).count() as u32)
            .max()
            .unwrap_or(0);
        Workspace {
            arena: o
                .workspace
                .unwrap_or_else(|| Workspace::arena_for(v, o.window as u32, most)),
            base: 0,
        }
    }
}

/// The region the AICPUs share (`vm::sched::Shared` borrows it).
pub(crate) struct Region {
    published: Vec<Padded>,
    waiting_for: Vec<Padded>,
    slots: Vec<Slot>,
    nodes: Vec<Node>,
    joins: Vec<Slot>,
    ready: Vec<Ring<Box<[Cell]>>>,
    stealable: Vec<Deque<Box<[Cell]>>>,
    passed: Vec<Ring<Box<[Cell]>>>,
    cores: Vec<CoreSlot>,
    core_aicpu: Vec<u32>,
    free_cores: Vec<AtomicU64>,
    core_waiters: Vec<Padded>,
    kernel_running: Vec<AtomicU32>,
    map: CachePadded<MapLockHost>,
    writers: Vec<AtomicU32>,
    once: Box<[AtomicU64]>,
    next_issue: Padded,
    own_done: Padded,
    descs: Box<[AtomicU64]>,
    desc_words: u32,
    barriers: Vec<Padded>,
}

impl Region {
    /// The shared region of a launch laid out as `l`, its global TensorMap matching as `deps`.
    pub fn new(v: &Verified<'_>, l: &Layout, deps: crate::DepMode) -> Result<Region, SimError> {
        let (n, cap) = (l.n, l.cap);
        let layout = MapLayout::for_program(v, n * cap as u32)
            .map_err(|e| SimError::Options(format!("TensorMap: {e}")))?;
        Ok(Region {
            published: (0..n).map(|_| Padded::new(0)).collect(),
            waiting_for: (0..n).map(|_| Padded::new(u64::MAX)).collect(),
            slots: vec_of(n as usize * cap, Slot::default)
                .ok_or_else(|| l.too_big("the window slots"))?,
            nodes: vec_of(nodes_len(n as usize, cap), Node::default)
                .ok_or_else(|| l.too_big("the waiter nodes"))?,
            joins: vec_of(joins_len(n as usize), Slot::default)
                .ok_or_else(|| l.too_big("the joins"))?,
            ready: (0..2 * n)
                .map(|_| ring(cap))
                .collect::<Option<_>>()
                .ok_or_else(|| l.too_big("the ready queues"))?,
            // Stealing's deques, exactly when the launch steals (spec/runtime.md §4.3).
            stealable: (0..if l.cfg.work_steal { 2 * n } else { 0 })
                .map(|_| deque(cap))
                .collect::<Option<_>>()
                .ok_or_else(|| l.too_big("the stealable deques"))?,
            passed: (0..n)
                .map(|_| ring(cap))
                .collect::<Option<_>>()
                .ok_or_else(|| l.too_big("the completion queues"))?,
            cores: (0..l.cores)
                .map(|c| {
                    let hs = CoreSlot::default();
                    hs.set_up(if c < l.cube as usize {
                        handshake::CUBE
                    } else {
                        handshake::VECTOR
                    });
                    hs
                })
                .collect(),
            core_aicpu: l.core_aicpu.clone(),
            free_cores: match l.alloc {
                CoreAlloc::Shared => {
                    let bits: Vec<AtomicU64> = (0..core_bits::words_for(l.cores))
                        .map(|_| AtomicU64::new(0))
                        .collect();
                    core_bits::free_all(&bits, l.cores);
                    bits
                }
                CoreAlloc::Partition => Vec::new(),
            },
            core_waiters: (0..CORE_WAITER_WORDS)
                .map(|i| Padded::new(core_bits::waiter_word_at_launch(i, n)))
                .collect(),
            map: CachePadded::new(MapLockHost(SpinLock::new(
                heap_map(layout, deps).ok_or_else(|| l.too_big("the TensorMap"))?,
            ))),
            kernel_running: (0..v.kernels().len()).map(|_| AtomicU32::new(0)).collect(),
            writers: (0..v.tensors().len()).map(|_| AtomicU32::new(0)).collect(),
            once: <[AtomicU64]>::new_box_zeroed_with_elems(once_len(n as usize, cap))
                .map_err(|_| l.too_big("the written-once tables"))?,
            next_issue: Padded::new(0),
            own_done: Padded::new(0),
            barriers: (0..v.readbacks().len()).map(|_| Padded::new(0)).collect(),
            // Zeroed memory: its pages are touched only as slots are used.
            descs: <[AtomicU64]>::new_box_zeroed_with_elems(n as usize * cap * l.desc_words)
                .map_err(|_| l.too_big("the task descriptors"))?,
            desc_words: l.desc_words as u32,
        })
    }

    /// The scheduler's view of the region.
    pub fn shared(&self, n: u32, cap: usize, workspace: Workspace) -> Sched<'_> {
        Shared {
            n,
            cap: cap as u32,
            published: &self.published,
            waiting_for: &self.waiting_for,
            slots: &self.slots,
            nodes: &self.nodes,
            joins: &self.joins,
            ready: &self.ready,
            stealable: &self.stealable,
            passed: &self.passed,
            cores: &self.cores,
            core_aicpu: &self.core_aicpu,
            free_cores: &self.free_cores,
            core_waiters: &self.core_waiters,
            kernel_running: &self.kernel_running,
            map: &*self.map,
            writers: &self.writers,
            once: &self.once,
            next_issue: &self.next_issue,
            own_done: &self.own_done,
            descs: &self.descs,
            desc_words: self.desc_words,
            barriers: &self.barriers,
            workspace,
        }
    }

    /// After a checked run in which every task retired: an error if the global map still
    /// holds an access.
    pub fn check_map_empty(&self) -> Result<(), SimError> {
        let map = self.map.0.lock();
        if map.used() != 0 || map.live() != 0 {
            return Err(SimError::Check(format!(
                "{} accesses ({} live) left in the TensorMap after every task retired",
                map.used(),
                map.live()
            )));
        }
        Ok(())
    }
}

/// One AICPU's private buffers (`vm::sched::Local` borrows them).
pub(crate) struct Buffers {
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

impl Buffers {
    /// Every AICPU's buffers for a launch laid out as `l`.
    pub fn all(v: &Verified<'_>, l: &Layout) -> Result<Vec<Buffers>, SimError> {
        let cap = l.cap;
        (0..l.n)
            .map(|a| {
                // Under shared cores it may drive every core, and keeps no list of its own.
                let own: Vec<u32> = l.cores_of(a).collect();
                Ok(Buffers {
                    free: vec![0; cap],
                    retiring: vec![0; cap],
                    unreleased: vec![0; cap],
                    held: vec![0; cap],
                    busy: vec![Busy::default(); own.len()],
                    cores: match l.alloc {
                        CoreAlloc::Shared => Vec::new(),
                        CoreAlloc::Partition => own,
                    },
                    preds: vec_of(preds_len(l.n as usize, cap), Pred::default)
                        .ok_or_else(|| l.too_big("the predecessor scratch"))?,
                    shares: vec![Sharing::default(); v.tensors().len()],
                    tensors: vec![Binding::default(); v.tensors().len()],
                })
            })
            .collect()
    }
}

/// The memory the AICPUs' values read back go to: per AICPU, elements and parameter blocks
/// (`crate::readback_buffers`).
pub(crate) type ReadbackMemory<'x> = (Vec<Vec<u32>>, Vec<Vec<Value<'x>>>);

/// The schedulers of every AICPU of a launch, over `buffers` and the region `sh`, with the
/// tensors bound as `tensors` (none: unbound) and read-back memory `rb`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn schedulers<'a, 'p, 'm>(
    v: Verified<'a>,
    p: RuntimeParams<'p>,
    l: &Layout,
    sh: &Sched<'_>,
    deps: crate::DepMode,
    buffers: &'m mut [Buffers],
    tensors: &'m [TensorArg],
    rb: &'p mut ReadbackMemory<'p>,
) -> Result<Vec<Scheduler<'a, 'p, 'm>>, SimError> {
    let local_layout = MapLayout::for_program(&v, l.cap as u32)
        .map_err(|e| SimError::Options(format!("TensorMap: {e}")))?;
    let mut out = Vec::with_capacity(l.n as usize);
    for ((i, b), (values, slots)) in buffers
        .iter_mut()
        .enumerate()
        .zip(rb.0.iter_mut().zip(rb.1.iter_mut()))
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
            map: heap_map(local_layout, deps).ok_or_else(|| l.too_big("the local TensorMaps"))?,
        };
        out.push(
            Aicpu::new(i, Interpreter::new(v, p, i, l.n)?, local, sh)?.with_readback(values, slots),
        );
    }
    Ok(out)
}

/// After a checked run: an error if AICPU `a`'s own map still holds an access.
pub(crate) fn check_local_map(s: &Scheduler<'_, '_, '_>) -> Result<(), SimError> {
    let m = s.local_map();
    if m.used() != 0 || m.live() != 0 {
        return Err(SimError::Check(format!(
            "{} accesses ({} live) left in AICPU {}'s TensorMap after every task retired",
            m.used(),
            m.live(),
            s.index()
        )));
    }
    Ok(())
}

impl Report {
    /// Fills the counters of a run from the AICPUs' totals `k`, with `per_aicpu` their tasks.
    pub(crate) fn count(&mut self, k: Counts, per_aicpu: Vec<u64>, arena: u32) {
        self.tasks_total = per_aicpu.iter().sum();
        self.per_aicpu = per_aicpu;
        self.cube_tasks = k.cube;
        self.vector_tasks = k.tasks - k.cube;
        self.edges = k.edges;
        self.cross_aicpu_edges = k.cross;
        self.joins = k.joins;
        self.joined_reads = k.joined;
        self.shared_joined_reads = k.joined_shared;
        self.relays = k.relays;
        self.finished_reads = k.finished_reads;
        self.once_writes = k.once_writes;
        self.once_spills = k.once_spills;
        self.planned_records = k.planned;
        self.mapless_records = k.mapless;
        self.window_stalls = k.stalls;
        self.quiet_rounds = k.quiet_rounds;
        self.hops = k.hops;
        self.overflows = k.overflows;
        self.stolen = k.stolen;
        self.dep_batches = k.batches;
        self.issue_batches = k.issue_batches;
        self.short_batches = k.short_batches;
        self.reordered = k.reordered;
        self.rate_waits = k.rate_waits;
        self.rate_wait_ns = k.rate_wait_ns;
        self.workspace_arena = arena;
        self.workspace_waits = k.workspace_waits;
        self.core_waits = k.core_waits;
        self.core_claims = k.core_claims;
        self.core_limit_waits = k.core_limit_waits;
        self.workspace_peak = k.workspace_peak;
    }
}

/// A ring for `cap` slot indices (a power of two of at least 2 cells).
fn ring(cap: usize) -> Option<Ring<Box<[Cell]>>> {
    Ring::new(cells(cap)?).ok()
}

fn deque(cap: usize) -> Option<Deque<Box<[Cell]>>> {
    Deque::new(cells(cap)?).ok()
}

/// The cells of a ring or deque for `cap` slots, or `None` if the host cannot allocate them.
fn cells(cap: usize) -> Option<Box<[Cell]>> {
    Some(vec_of(ptovm_vm::ring::cells_for(cap), Cell::default)?.into())
}

/// `n` values, or `None` if the host cannot allocate them.
fn vec_of<T>(n: usize, f: impl FnMut() -> T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.extend(std::iter::repeat_with(f).take(n));
    Some(v)
}
