//! The shared scheduler (`ptovm_vm::sched`) driven on one thread in seeded random
//! interleavings of AICPU steps and core starts and ends, as the device's AICPUs and AICores may
//! produce them: the driver of `tests/tests/sched.rs` and of the `schedule` fuzz target.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64};

use ptovm_host_sim::{heap_map, DepMode, HeapMap, HeapStorage};
use ptovm_vm::deque::Deque;
use ptovm_vm::desc::{slot_words, Binding};
use ptovm_vm::handshake::{CoreSlot, CUBE, VECTOR};
use ptovm_vm::ring::{Cell, Ring};
use ptovm_vm::sched::{
    cores as core_bits, joins_len, nodes_len, once_len, preds_len, Aicpu, Busy, Config, CoreAlloc,
    Env, IssueTiming, Issued, Local, MapLock, Node, Padded, Pred, Shared, Slot, Start, Workspace,
    CORE_WAITER_WORDS,
};
use ptovm_vm::share::Sharing;
use ptovm_vm::tmap::MapLayout;
use ptovm_vm::{verify, Interpreter, Pool, RuntimeParams, WindowMode};

use crate::{values, Gen};

/// The global map behind a `RefCell` (one thread: no lock needed).
pub struct Lock(pub RefCell<HeapMap>);
impl MapLock for Lock {
    type Mem = HeapStorage;
    fn with_map<R>(&self, f: impl FnOnce(&mut HeapMap) -> R) -> R {
        f(&mut self.0.borrow_mut())
    }
}

/// The driver's environment: the cores rung and not yet started, a fake clock (the driver
/// moves it on by [`TICK_NS`] a round), and every issue in order with its place in the
/// sequence of events (`seq`, which core starts and ends also take: [`Rung::start`],
/// [`Rung::end`]).
pub struct Rung<'a, 'r> {
    sh: &'a Shared<'r, Box<[Cell]>, Lock>,
    pub cores: Vec<u32>,
    pub now: u64,
    pub seq: u64,
    pub issues: Vec<(u64, Issued)>,
    /// `(task, place)`: when an AICPU reclaimed a task's workspace (`Env::reclaimed`).
    pub reclaims: Vec<(u64, u64)>,
    /// What a `READBACK` of each tensor reads (`Env::read_back`; a tensor not listed keeps
    /// the launch's values), and `(aicpu, place)` of every read.
    pub memory: Vec<(u16, Vec<u32>)>,
    pub reads: Vec<(u32, u64)>,
    /// No task is recorded a quick way, by its site's plan or without a map (`Env::plans`):
    /// every one goes the long way.
    pub no_plans: bool,
    /// Each task's start and end places, pool and AICPU ([`Run::ran`]).
    pub ran: Vec<(u64, u64, Pool, u32)>,
    /// Cores that took their task and have not finished yet.
    pub running: Vec<u32>,
    /// The descriptors the cores read ([`Run::descs`]).
    pub descs: Vec<(u64, u32, u32)>,
    /// When a round asks ([`Env::run_cores`]), cores start and end by this generator, as if
    /// they ran while the AICPU dispatched (`None`: they move only between rounds).
    pub inline: Option<Gen>,
    /// What went wrong when cores moved inside a round.
    pub error: Option<String>,
    /// The AICPUs woken since the driver last looked (`Env::wake`, or a core they handed a
    /// task to finished): a sleeping AICPU runs again only once woken.
    pub woken: Vec<bool>,
    /// The AICPU that handed each core its task (`Issued::aicpu`).
    issuer: Vec<u32>,
}

impl<'a, 'r> Rung<'a, 'r> {
    /// An environment for the launch `sh`, nothing rung yet.
    pub fn new(sh: &'a Shared<'r, Box<[Cell]>, Lock>) -> Rung<'a, 'r> {
        Rung {
            sh,
            cores: vec![],
            now: 0,
            seq: 1,
            issues: vec![],
            reclaims: vec![],
            memory: vec![],
            reads: vec![],
            no_plans: false,
            ran: vec![],
            running: vec![],
            descs: vec![],
            inline: None,
            error: None,
            woken: vec![false; sh.n as usize],
            issuer: vec![0; sh.cores.len()],
        }
    }

    /// The rung core at `cores[k]` takes its task (the task's start).
    pub fn start(&mut self, k: usize) -> Result<(), String> {
        let (sh, cap) = (self.sh, self.sh.cap);
        let core = self.cores.swap_remove(k);
        let word = sh.cores[core as usize]
            .take()
            .ok_or("rung core without a task")?;
        let (a, s) = ((word >> 32) as u32, word as u32);
        let id = sh.slots[(a * cap + s) as usize]
            .task
            .load(std::sync::atomic::Ordering::Acquire);
        if self.ran.len() <= id as usize {
            self.ran
                .resize(id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
        }
        if self.ran[id as usize].0 != 0 {
            return Err(format!("task {id} ran twice"));
        }
        let pool = if sh.cores[core as usize]
            .core_type
            .load(std::sync::atomic::Ordering::Relaxed)
            == CUBE
        {
            Pool::Cube
        } else {
            Pool::Vector
        };
        self.ran[id as usize] = (self.seq, 0, pool, a);
        self.seq += 1;
        self.running.push(core);
        let d = ptovm_vm::desc::read(sh.desc(a, s));
        self.descs
            .push((d.id, d.workspace_offset, d.workspace_bytes));
        Ok(())
    }

    /// The running core at `running[k]` finishes its task (the task's end).
    pub fn end(&mut self, k: usize) {
        let (sh, cap) = (self.sh, self.sh.cap);
        let core = self.running.swap_remove(k);
        let word = sh.cores[core as usize]
            .task
            .load(std::sync::atomic::Ordering::Relaxed);
        let (a, s) = ((word >> 32) as u32, word as u32);
        let id = sh.slots[(a * cap + s) as usize]
            .task
            .load(std::sync::atomic::Ordering::Acquire);
        self.ran[id as usize].1 = self.seq;
        self.seq += 1;
        sh.cores[core as usize].finish();
        // Its AICPU sees the core's end: it polls its cores (the simulator's driver ran it).
        if let Some(w) = self.woken.get_mut(self.issuer[core as usize] as usize) {
            *w = true;
        }
    }
}

impl Env for Rung<'_, '_> {
    fn wake(&mut self, aicpu: u32) {
        if let Some(w) = self.woken.get_mut(aicpu as usize) {
            *w = true;
        }
    }
    fn ring(&mut self, core: u32) {
        self.cores.push(core);
    }
    fn now_ns(&mut self) -> u64 {
        self.now
    }
    // Some rung cores start, and some running ones end, as the generator picks; a round
    // asks again only if one ended.
    fn run_cores(&mut self) -> bool {
        let Some(mut rng) = self.inline.take() else {
            return false;
        };
        let mut ended = false;
        while self.error.is_none() {
            match rng.below(4) {
                0 if !self.cores.is_empty() => {
                    let k = rng.below(self.cores.len() as u64) as usize;
                    if let Err(e) = self.start(k) {
                        self.error = Some(e);
                    }
                }
                1 if !self.running.is_empty() => {
                    let k = rng.below(self.running.len() as u64) as usize;
                    self.end(k);
                    ended = true;
                }
                _ => break,
            }
        }
        self.inline = Some(rng);
        ended && self.error.is_none()
    }
    // One thing moves at a time here: a round settled as quiet is checked in full.
    fn checks_quiet(&self) -> bool {
        true
    }
    fn plans(&self) -> bool {
        !self.no_plans
    }
    fn read_back(
        &mut self,
        aicpu: u32,
        tensor: u16,
        _: &ptovm_vm::desc::Binding,
        into: &mut [u32],
    ) -> bool {
        self.reads.push((aicpu, self.seq));
        self.seq += 1;
        match self.memory.iter().find(|(t, _)| *t == tensor) {
            Some((_, m)) if m.len() == into.len() => {
                into.copy_from_slice(m);
                true
            }
            _ => false,
        }
    }
    fn reclaimed(&mut self, _core: u32, task: u64) {
        self.reclaims.push((task, self.seq));
        self.seq += 1;
    }
    fn issued(&mut self, i: &Issued) {
        self.issuer[i.core as usize] = i.aicpu;
        self.issues.push((self.seq, *i));
        self.seq += 1;
    }
}

/// How far the fake clock moves each round of the driver.
pub const TICK_NS: u64 = 1_000;

/// A ready or completion ring for `cap` slots.
pub fn ring(cap: usize) -> Ring<Box<[Cell]>> {
    Ring::new(cells(cap)).unwrap()
}

/// The cells of a ring or deque for `cap` slots.
fn cells(cap: usize) -> Box<[Cell]> {
    (0..ptovm_vm::ring::cells_for(cap))
        .map(|_| Cell::default())
        .collect()
}

/// The shared region of a launch (`Shared` borrows it).
pub struct Region {
    pub n: u32,
    pub cap: usize,
    pub published: Vec<Padded>,
    pub waiting: Vec<Padded>,
    pub slots: Vec<Slot>,
    pub nodes: Vec<Node>,
    pub joins: Vec<Slot>,
    pub ready: Vec<Ring<Box<[Cell]>>>,
    /// Under `work_steal`: the deques ([`Region::steal`]); empty otherwise.
    pub stealable: Vec<Deque<Box<[Cell]>>>,
    pub passed: Vec<Ring<Box<[Cell]>>>,
    pub cores: Vec<CoreSlot>,
    pub core_aicpu: Vec<u32>,
    /// Shared cores: the free-core bitmap (empty under a partition) and the waiter words.
    pub free_cores: Vec<AtomicU64>,
    pub core_waiters: Vec<Padded>,
    pub kernel_running: Vec<AtomicU32>,
    pub lock: Lock,
    pub writers: Vec<AtomicU32>,
    pub once: Vec<AtomicU64>,
    pub next_issue: Padded,
    pub own_done: Padded,
    pub descs: Box<[AtomicU64]>,
    pub desc_words: u32,
    pub workspace: Workspace,
    pub barriers: Vec<Padded>,
}

impl Region {
    /// For `n` AICPUs with `cap` slots each and cores of the given types and owners, under a
    /// partition; [`Region::share_cores`] turns it into shared cores.
    pub fn new(
        v: &ptovm_vm::Verified<'_>,
        n: u32,
        cap: usize,
        types: &[u32],
        owners: Vec<u32>,
    ) -> Region {
        let layout = MapLayout::for_program(v, n * cap as u32).unwrap();
        Region {
            n,
            cap,
            published: (0..n).map(|_| Padded::new(0)).collect(),
            waiting: (0..n).map(|_| Padded::new(u64::MAX)).collect(),
            slots: (0..n as usize * cap).map(|_| Slot::default()).collect(),
            nodes: (0..nodes_len(n as usize, cap))
                .map(|_| Node::default())
                .collect(),
            joins: (0..joins_len(n as usize))
                .map(|_| Slot::default())
                .collect(),
            ready: (0..2 * n).map(|_| ring(cap)).collect(),
            stealable: Vec::new(),
            passed: (0..n).map(|_| ring(cap)).collect(),
            cores: types
                .iter()
                .map(|&t| {
                    let s = CoreSlot::default();
                    s.set_up(t);
                    s
                })
                .collect(),
            core_aicpu: owners,
            free_cores: Vec::new(),
            core_waiters: (0..CORE_WAITER_WORDS)
                .map(|i| Padded::new(core_bits::waiter_word_at_launch(i, n)))
                .collect(),
            lock: Lock(RefCell::new(heap_map(layout, DepMode::Overlap).unwrap())),
            kernel_running: (0..v.kernels().len()).map(|_| AtomicU32::new(0)).collect(),
            writers: (0..v.tensors().len()).map(|_| AtomicU32::new(0)).collect(),
            once: (0..once_len(n as usize, cap))
                .map(|_| AtomicU64::new(0))
                .collect(),
            next_issue: Padded::new(0),
            own_done: Padded::new(0),
            descs: (0..n as usize * cap * slot_words(v))
                .map(|_| AtomicU64::new(0))
                .collect(),
            desc_words: slot_words(v) as u32,
            barriers: (0..v.readbacks().len()).map(|_| Padded::new(0)).collect(),
            // Room for the largest workspace on every core (the most an AICPU can run).
            workspace: Workspace {
                arena: Workspace::arena_for(v, cap as u32, types.len() as u32),
                base: 0,
            },
        }
    }

    /// Every core shared by all AICPUs, all free (the cube cores must come first).
    /// A stealing launch's deques, one per AICPU and pool (spec/runtime.md §4.3).
    pub fn steal(&mut self) {
        self.stealable = (0..2 * self.n)
            .map(|_| Deque::new(cells(self.cap)).unwrap())
            .collect();
    }

    pub fn share_cores(&mut self) {
        self.free_cores = (0..core_bits::words_for(self.cores.len()))
            .map(|_| AtomicU64::new(0))
            .collect();
        core_bits::free_all(&self.free_cores, self.cores.len());
    }

    pub fn shared(&self) -> Shared<'_, Box<[Cell]>, Lock> {
        Shared {
            n: self.n,
            cap: self.cap as u32,
            published: &self.published,
            waiting_for: &self.waiting,
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
            map: &self.lock,
            writers: &self.writers,
            once: &self.once,
            next_issue: &self.next_issue,
            own_done: &self.own_done,
            descs: &self.descs,
            desc_words: self.desc_words,
            workspace: self.workspace,
            barriers: &self.barriers,
        }
    }
}

/// An AICPU's own TensorMap for windows of `cap` slots.
pub fn local_map(v: &ptovm_vm::Verified<'_>, cap: usize) -> HeapMap {
    heap_map(
        MapLayout::for_program(v, cap as u32).unwrap(),
        DepMode::Overlap,
    )
    .unwrap()
}

/// What a run did: per task, (start, end, pool, owner AICPU) as places in the sequence of
/// events; the edges registered; every issue in order, with its place in that sequence; the
/// AICPUs' counters summed.
pub struct Run {
    pub ran: Vec<(u64, u64, Pool, u32)>,
    pub edges: u64,
    pub issues: Vec<(u64, Issued)>,
    /// `(task, place)` of each workspace reclaim.
    pub reclaims: Vec<(u64, u64)>,
    /// `(task, workspace_offset, workspace_bytes)` of each descriptor as its core read it.
    pub descs: Vec<(u64, u32, u32)>,
    /// Each AICPU's workspace arena, bytes.
    pub arena: u32,
    /// Cores of the launch, both pools.
    pub cores: u32,
    /// `(aicpu, place)` of each read at a `READBACK`.
    pub reads: Vec<(u32, u64)>,
    pub counts: ptovm_vm::sched::Counts,
}

/// Runs the program on `n` AICPUs (with `2n` cube and `2n` vector cores under a partition, 1
/// to `2n` of each by `seed` when shared), windows of `window`, interleaving steps and core
/// completions by `seed`.
pub fn run(
    bytes: &[u8],
    params: &[(ptovm_vm::ParamKind, u32, Vec<u32>)],
    n: u32,
    window: u32,
    cfg: Config,
    seed: u64,
) -> Result<Run, String> {
    run_with(bytes, params, (n, window), cfg, seed, Extra::default())
}

/// What a [`run_with`] adds to [`run`]: each AICPU's workspace arena (`None`: room for
/// every core) and what a `READBACK` of each tensor reads (a tensor not listed keeps the
/// launch's values).
#[derive(Clone, Debug, Default)]
pub struct Extra {
    pub arena: Option<u32>,
    pub memory: Vec<(u16, Vec<u32>)>,
    /// Under shared cores, the cube and vector core counts (`None`: 1 to `2n` of each, by the
    /// seed).
    pub cores: Option<(usize, usize)>,
    /// Fill the written-once tables' cells (spec/runtime.md §4.8) with a row no write may
    /// drop: every write spills to its tensor's map, and the tables' reads find nothing.
    pub cells_taken: bool,
    /// Record every task the long way, none a quick way: by its site's plan, or without a
    /// map (`Env::plans`).
    pub no_plans: bool,
}

/// [`run`] with the workspace arena, the read-back values and the core counts of `extra`.
pub fn run_with(
    bytes: &[u8],
    params: &[(ptovm_vm::ParamKind, u32, Vec<u32>)],
    (n, window): (u32, u32),
    cfg: Config,
    seed: u64,
    extra: Extra,
) -> Result<Run, String> {
    let Extra {
        arena,
        memory,
        cores,
        cells_taken,
        no_plans,
    } = extra;
    let v = verify(bytes).unwrap();
    let vals = values(params);
    let p = RuntimeParams::new(&v, &vals).map_err(|e| e.to_string())?;
    let cap = window as usize
        * if cfg.mode == WindowMode::Benchmark {
            4
        } else {
            1
        };
    // Under a partition, 2n cores of each pool: core c goes to AICPU c mod n; the first n are
    // cube, the next n vector, and so on, so every AICPU gets both. Shared cores number the
    // cube cores first, 1 to 2n of each pool by the seed: with fewer cores than AICPUs some
    // have no home share and only borrow (spec/runtime.md §4.6).
    let shared = cfg.cores == CoreAlloc::Shared;
    let (ncube, nvector) = if let (true, Some(counts)) = (shared, cores) {
        counts
    } else if shared {
        // The config takes the seed's low bits: its high bits, mixed, pick the counts.
        let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let pick = |shift: u32| 1 + (mixed >> shift) as usize % (2 * n as usize);
        (pick(40), pick(52))
    } else {
        (2 * n as usize, 2 * n as usize)
    };
    let ncores = ncube + nvector;
    let types: Vec<u32> = (0..ncores)
        .map(|c| {
            let cube = if shared {
                c < ncube
            } else {
                (c / n as usize).is_multiple_of(2)
            };
            if cube {
                CUBE
            } else {
                VECTOR
            }
        })
        .collect();
    let core_aicpu: Vec<u32> = (0..ncores as u32).map(|c| c % n).collect();
    let mut region = Region::new(&v, n, cap, &types, core_aicpu);
    if cells_taken {
        for w in &region.once[ptovm_vm::sched::ONCE_TABLES..] {
            w.store(1 << 62, std::sync::atomic::Ordering::Relaxed);
        }
    }
    if shared {
        region.share_cores();
    }
    if cfg.work_steal {
        region.steal();
    }
    if let Some(a) = arena {
        region.workspace.arena = a;
    }
    let sh = region.shared();
    type Bufs = (
        Vec<u32>,
        Vec<u32>,
        Vec<u32>,
        Vec<u32>,
        Vec<u32>,
        Vec<Busy>,
        Vec<Pred>,
        Vec<Sharing>,
        Vec<Binding>,
    );
    let mut bufs: Vec<Bufs> = (0..n)
        .map(|i| {
            let own: Vec<u32> = (0..ncores as u32)
                .filter(|&c| !shared && c % n == i)
                .collect();
            let k = if shared { ncores } else { own.len() };
            (
                vec![0; cap],
                vec![0; cap],
                vec![0; cap],
                vec![0; cap],
                own,
                vec![Busy::default(); k],
                vec![Pred::default(); preds_len(n as usize, cap)],
                vec![Sharing::default(); v.tensors().len()],
                vec![Binding::default(); v.tensors().len()],
            )
        })
        .collect();
    let (mut rb_values, mut rb_slots) = ptovm_host_sim::readback_buffers(&v, &p, n);
    let mut cpus = Vec::new();
    for ((i, b), (values, slots)) in bufs
        .iter_mut()
        .enumerate()
        .zip(rb_values.iter_mut().zip(rb_slots.iter_mut()))
    {
        let local = Local {
            free: &mut b.0,
            retiring: &mut b.1,
            unreleased: &mut b.2,
            held: &mut b.3,
            cores: &mut b.4,
            busy: &mut b.5,
            preds: &mut b.6,
            shares: &mut b.7,
            tensors: &mut b.8,
            bound: &[],
            map: local_map(&v, cap),
        };
        let it = Interpreter::new(v, p, i as u32, n).map_err(|e| e.to_string())?;
        cpus.push(
            Aicpu::new(i as u32, it, local, &sh)
                .map_err(|e| e.to_string())?
                .with_readback(values, slots),
        );
    }
    let mut rng = Gen::new(seed);
    let mut env = Rung {
        memory,
        no_plans,
        // One seed in two lets cores move inside rounds (a bit of the mixed seed: the tests'
        // seeds run from 0, and `config` takes their low bits).
        inline: (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33 & 1 == 1)
            .then(|| Gen::new(seed ^ 0x5eed)),
        ..Rung::new(&sh)
    };
    // Which AICPUs sleep, as a simulator's driver thread does (`host_sim`'s threaded run):
    // after a round that did nothing, with no work it can see (`Aicpu::has_work`), until
    // woken. A round that gives another AICPU work must wake it; if none is awake to move
    // and some sleeper has work, a wake-up was lost (the simulator's park times out; here the
    // run fails).
    let mut asleep = vec![false; n as usize];
    for _ in 0..5_000_000u32 {
        for (a, w) in env.woken.iter_mut().enumerate() {
            asleep[a] &= !std::mem::take(w);
        }
        for (a, c) in cpus.iter().enumerate() {
            // A task waiting for `rate_limit` is due at its `issue_at`: the driver's nap ends.
            asleep[a] &= c.issue_at().is_none_or(|at| at > env.now);
        }
        if cpus.iter().all(|c| c.finished()) {
            // Every task retired: nothing is left in any map.
            for c in &cpus {
                if c.local_map().used() != 0 {
                    return Err(format!("AICPU {}'s own map kept entries", c.index()));
                }
            }
            if region.lock.0.borrow().used() != 0 {
                return Err("the global map kept entries".into());
            }
            if region
                .writers
                .iter()
                .any(|w| w.load(std::sync::atomic::Ordering::Relaxed) != 0)
            {
                return Err("a live-writer count stayed above zero".into());
            }
            let mut counts = ptovm_vm::sched::Counts::default();
            for c in &cpus {
                counts += c.counts();
            }
            let edges = counts.edges;
            return Ok(Run {
                ran: env.ran,
                edges,
                issues: env.issues,
                reclaims: env.reclaims,
                descs: env.descs,
                arena: region.workspace.arena,
                cores: ncores as u32,
                reads: env.reads,
                counts,
            });
        }
        env.now += TICK_NS;
        match rng.below(4) {
            // A core takes a rung task (its start).
            0 if !env.cores.is_empty() => {
                let k = rng.below(env.cores.len() as u64) as usize;
                env.start(k)?;
            }
            // A running core finishes (its end).
            1 if !env.running.is_empty() => {
                let k = rng.below(env.running.len() as u64) as usize;
                env.end(k);
            }
            // An AICPU steps; one that finished no more, as on the device (its caller stops
            // at `PTOVM_FINISHED`).
            _ => {
                let i = rng.below(n as u64) as usize;
                if cpus[i].finished() {
                    continue;
                }
                if asleep[i] {
                    // Nothing awake can move: a sleeper with work was never woken.
                    let stuck = env.cores.is_empty()
                        && env.running.is_empty()
                        && (0..n as usize).all(|a| asleep[a] || cpus[a].finished());
                    if stuck {
                        let unwoken = (0..n as usize)
                            .find(|&a| !cpus[a].finished() && cpus[a].has_work(&sh, &cfg));
                        if let Some(a) = unwoken {
                            return Err(format!(
                                "a lost wake-up: AICPU {a} sleeps with work and nobody woke it"
                            ));
                        }
                    }
                    continue;
                }
                let moved = cpus[i]
                    .step(&sh, &cfg, &mut env)
                    .map_err(|e| e.to_string())?;
                if let Some(e) = env.error.take() {
                    return Err(e);
                }
                if cpus[i].finished() {
                    // Thieves finish once every AICPU has: the driver wakes them all.
                    asleep.fill(false);
                } else if !moved && !cpus[i].has_work(&sh, &cfg) {
                    asleep[i] = true;
                }
            }
        }
    }
    Err("no end within 5,000,000 steps (deadlock?)".into())
}

/// Checks a run against the reference expander (each task once, on its pool, after its
/// predecessors).
pub fn check(
    bytes: &[u8],
    params: &[(ptovm_vm::ParamKind, u32, Vec<u32>)],
    n: u32,
    r: &Run,
) -> Result<(), String> {
    crate::check_run(bytes, &params.to_vec(), n, &r.ran)
}

/// Scheduling settings picked by `seed`: window mode, start policy, pipeline depth, work
/// stealing, `batch_deps`, timing (`interleaved` over 3 streams whatever the program's are:
/// the scheduler must cope; `rate_limit` with a turn a round of the fake clock), shared cores
/// or a partition.
pub fn config(seed: u64, window: u32) -> Config {
    Config {
        window,
        mode: [WindowMode::Stall, WindowMode::Benchmark][(seed >> 9) as usize % 2],
        start: match seed % 3 {
            0 => Start::Immediate,
            1 => Start::AfterOrchestration,
            _ => Start::Threshold(1 + seed % 7),
        },
        pipeline_depth: (seed >> 3) as u32 % 3,
        work_steal: (seed >> 5) & 1 == 1,
        batch_deps: [0, 1, 3, 64][(seed >> 7) as usize % 4],
        timing: match (seed >> 11) % 4 {
            0 => IssueTiming::Immediate,
            1 => IssueTiming::Batched(1 + (seed >> 13) as u32 % 6),
            2 => IssueTiming::Interleaved(3),
            _ => IssueTiming::RateLimit(1_000),
        },
        cores: [CoreAlloc::Shared, CoreAlloc::Partition][(seed >> 15) as usize % 2],
        naive: false,
    }
}
