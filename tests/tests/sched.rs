//! The shared scheduler (`ptovm_vm::sched`) driven on one thread in seeded random interleavings:
//! AICPU steps and core completions in any order, as the device's AICPUs and AICores may produce
//! them. Every run must end (no deadlock within a generous step bound), run every reference task
//! exactly once on a core of its pool driven by its owner (or a thief, with work stealing), and
//! start every task after all its reference predecessors ended. This is the device's scheduler
//! loop with the threads taken out, so a failure here is reproducible from its seed.

use std::cell::RefCell;

use proptest::prelude::*;
use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{heap_map, DepMode, HeapMap, HeapStorage};
use ptovm_tests::{gen_params, values, Gen};
use ptovm_vm::handshake::{CoreSlot, CUBE, VECTOR};
use ptovm_vm::ring::{Cell, Ring};
use ptovm_vm::sched::{
    Aicpu, Busy, Config, Env, Local, MapLock, Node, Padded, Pred, Shared, Slot, Start, NODES,
};
use ptovm_vm::share::Sharing;
use ptovm_vm::tmap::MapLayout;
use ptovm_vm::{verify, Interpreter, Pool, RuntimeParams, WindowMode};
use std::sync::atomic::AtomicU32;

struct Lock(RefCell<HeapMap>);
impl MapLock for Lock {
    type Mem = HeapStorage;
    fn with_map<R>(&self, f: impl FnOnce(&mut HeapMap) -> R) -> R {
        f(&mut self.0.borrow_mut())
    }
}

#[derive(Default)]
struct Rung(Vec<u32>);
impl Env for Rung {
    fn wake(&mut self, _: u32) {}
    fn ring(&mut self, core: u32) {
        self.0.push(core);
    }
}

fn ring(cap: usize) -> Ring<Box<[Cell]>> {
    Ring::new(
        (0..cap.max(2).next_power_of_two())
            .map(|_| Cell::default())
            .collect(),
    )
    .unwrap()
}

/// The shared region of a launch (`Shared` borrows it).
struct Region {
    n: u32,
    cap: usize,
    published: Vec<Padded>,
    waiting: Vec<Padded>,
    slots: Vec<Slot>,
    nodes: Vec<Node>,
    ready: Vec<Ring<Box<[Cell]>>>,
    passed: Vec<Ring<Box<[Cell]>>>,
    cores: Vec<CoreSlot>,
    core_aicpu: Vec<u32>,
    lock: Lock,
    writers: Vec<AtomicU32>,
}

impl Region {
    /// For `n` AICPUs with `cap` slots each and cores of the given types and owners.
    fn new(
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
            nodes: (0..n as usize * cap * NODES)
                .map(|_| Node::default())
                .collect(),
            ready: (0..2 * n).map(|_| ring(cap)).collect(),
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
            lock: Lock(RefCell::new(heap_map(layout, DepMode::Overlap).unwrap())),
            writers: (0..v.tensors().len()).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn shared(&self) -> Shared<'_, Box<[Cell]>, Lock> {
        Shared {
            n: self.n,
            cap: self.cap as u32,
            published: &self.published,
            waiting_for: &self.waiting,
            slots: &self.slots,
            nodes: &self.nodes,
            ready: &self.ready,
            passed: &self.passed,
            cores: &self.cores,
            core_aicpu: &self.core_aicpu,
            map: &self.lock,
            writers: &self.writers,
        }
    }
}

/// An AICPU's own TensorMap for windows of `cap` slots.
fn local_map(v: &ptovm_vm::Verified<'_>, cap: usize) -> HeapMap {
    heap_map(
        MapLayout::for_program(v, cap as u32).unwrap(),
        DepMode::Overlap,
    )
    .unwrap()
}

/// What a run did: per task, (start, end, pool, owner AICPU), and the step count.
struct Run {
    ran: Vec<(u64, u64, Pool, u32)>,
    edges: u64,
}

/// Runs the program on `n` AICPUs with `cores` cube and `cores` vector cores, windows of
/// `window`, interleaving steps and core completions by `seed`.
fn run(
    bytes: &[u8],
    params: &[(ptovm_vm::ParamKind, u32, Vec<u32>)],
    n: u32,
    window: u32,
    cfg: Config,
    seed: u64,
) -> Result<Run, String> {
    let v = verify(bytes).unwrap();
    let vals = values(params);
    let p = RuntimeParams::new(&v, &vals).map_err(|e| e.to_string())?;
    let cap = window as usize
        * if cfg.mode == WindowMode::Benchmark {
            4
        } else {
            1
        };
    let cores_per = 2u32;
    let ncores = (2 * cores_per * n) as usize;
    // Cores c go to AICPU c mod n; the first n are cube, the next n vector, and so on, so every
    // AICPU gets both.
    let types: Vec<u32> = (0..ncores)
        .map(|c| {
            if (c / n as usize).is_multiple_of(2) {
                CUBE
            } else {
                VECTOR
            }
        })
        .collect();
    let core_aicpu: Vec<u32> = (0..ncores as u32).map(|c| c % n).collect();
    let region = Region::new(&v, n, cap, &types, core_aicpu);
    let sh = region.shared();
    let (slots, cores) = (&region.slots, &region.cores);
    type Bufs = (
        Vec<u32>,
        Vec<u32>,
        Vec<u32>,
        Vec<u32>,
        Vec<Busy>,
        Vec<Pred>,
        Vec<Sharing>,
    );
    let mut bufs: Vec<Bufs> = (0..n)
        .map(|i| {
            let own: Vec<u32> = (0..ncores as u32).filter(|&c| c % n == i).collect();
            let k = own.len();
            (
                vec![0; cap],
                vec![0; cap],
                vec![0; cap],
                own,
                vec![Busy::default(); k],
                vec![Pred::default(); n as usize * cap],
                vec![Sharing::default(); v.tensors().len()],
            )
        })
        .collect();
    let mut cpus = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate() {
        let local = Local {
            free: &mut b.0,
            retiring: &mut b.1,
            unreleased: &mut b.2,
            cores: &mut b.3,
            busy: &mut b.4,
            preds: &mut b.5,
            shares: &mut b.6,
            map: local_map(&v, cap),
        };
        let it = Interpreter::new(v, p, i as u32, n).map_err(|e| e.to_string())?;
        cpus.push(Aicpu::new(i as u32, it, local, &sh).map_err(|e| e.to_string())?);
    }
    let mut rng = Gen::new(seed);
    let mut env = Rung::default();
    let mut clock = 1u64;
    let mut ran: Vec<(u64, u64, Pool, u32)> = Vec::new();
    // Cores that took their task and have not finished yet.
    let mut running: Vec<u32> = Vec::new();
    for _ in 0..5_000_000u32 {
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
            let edges = cpus.iter().map(|c| c.counts().edges).sum();
            return Ok(Run { ran, edges });
        }
        match rng.below(4) {
            // A core takes a rung task (its start).
            0 if !env.0.is_empty() => {
                let core = env.0.swap_remove(rng.below(env.0.len() as u64) as usize);
                let word = cores[core as usize]
                    .take()
                    .ok_or("rung core without a task")?;
                let (a, s) = ((word >> 32) as u32, word as u32);
                let id = slots[(a * cap as u32 + s) as usize]
                    .task
                    .load(std::sync::atomic::Ordering::Acquire);
                if ran.len() <= id as usize {
                    ran.resize(id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
                }
                if ran[id as usize].0 != 0 {
                    return Err(format!("task {id} ran twice"));
                }
                let pool = if cores[core as usize]
                    .core_type
                    .load(std::sync::atomic::Ordering::Relaxed)
                    == CUBE
                {
                    Pool::Cube
                } else {
                    Pool::Vector
                };
                ran[id as usize] = (clock, 0, pool, a);
                clock += 1;
                running.push(core);
            }
            // A running core finishes (its end).
            1 if !running.is_empty() => {
                let core = running.swap_remove(rng.below(running.len() as u64) as usize);
                let word = cores[core as usize]
                    .task
                    .load(std::sync::atomic::Ordering::Relaxed);
                let (a, s) = ((word >> 32) as u32, word as u32);
                let id = slots[(a * cap as u32 + s) as usize]
                    .task
                    .load(std::sync::atomic::Ordering::Acquire);
                ran[id as usize].1 = clock;
                clock += 1;
                cores[core as usize].finish();
            }
            _ => {
                let i = rng.below(n as u64) as usize;
                cpus[i]
                    .step(&sh, &cfg, &mut env)
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Err("no end within 5,000,000 steps (deadlock?)".into())
}

fn check(
    bytes: &[u8],
    params: &[(ptovm_vm::ParamKind, u32, Vec<u32>)],
    n: u32,
    r: &Run,
) -> Result<(), String> {
    ptovm_tests::check_run(bytes, &params.to_vec(), n, &r.ran)
}

fn config(seed: u64, window: u32) -> Config {
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
        naive: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_and_interleavings_are_checked(
        seed in any::<u64>(),
        aicpus in 1u32..=6,
        window in prop::sample::select(vec![1u32, 2, 3, 8, 64]),
    ) {
        let src = Gen::runnable(seed).module();
        let out = assemble("gen.pto", &src, &Options::default()).unwrap();
        let params = gen_params(&out.module, seed);
        let cfg = config(seed, window);
        match run(&out.bytes, &params, aicpus, window, cfg, seed) {
            Ok(r) => {
                if let Err(e) = check(&out.bytes, &params, aicpus, &r) {
                    panic!("{e} ({cfg:?}, seed {seed})\n{src}");
                }
            }
            // Programs whose parameters fail at launch or run time are the interpreter's tests.
            Err(e) if e.contains("parameter") || e.contains("instruction") => {}
            Err(e) => panic!("{e} ({cfg:?}, seed {seed})\n{src}"),
        }
    }
}

#[test]
fn the_llama_layer_in_random_interleavings() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto");
    let bytes = assemble(
        "l",
        &std::fs::read_to_string(path).unwrap(),
        &Options::default(),
    )
    .unwrap()
    .bytes;
    let params = vec![(ptovm_vm::ParamKind::Scalar, 5, vec![])];
    let mut edges = 0;
    for seed in 0..12u64 {
        let (n, window) = (
            [1, 2, 3, 6][seed as usize % 4],
            [1, 4, 32][seed as usize % 3],
        );
        let cfg = config(seed, window);
        let r =
            run(&bytes, &params, n, window, cfg, seed).unwrap_or_else(|e| panic!("{e} ({cfg:?})"));
        check(&bytes, &params, n, &r).unwrap_or_else(|e| panic!("{e} ({cfg:?})"));
        assert_eq!(r.ran.len(), 3 * 25 + 16 * 5);
        edges += r.edges;
    }
    // Windows above one slot hold running predecessors, so some registrations happen.
    assert!(edges > 0);
}

#[test]
fn the_naive_protocol_fails_here_too() {
    // Producers on AICPU 1, consumers on AICPU 0 (as in tests/sim.rs): without the watermark
    // wait some interleaving starts a consumer before its producer ended.
    let src = &ptovm_tests::hazard(64);
    let bytes = assemble("n", src, &Options::default()).unwrap().bytes;
    let mut caught = 0;
    for seed in 0..50u64 {
        let mut cfg = config(0, 16);
        let r = run(&bytes, &[], 2, 16, cfg, seed).unwrap();
        check(&bytes, &[], 2, &r).unwrap();
        cfg.naive = true;
        let r = run(&bytes, &[], 2, 16, cfg, seed).unwrap();
        if check(&bytes, &[], 2, &r).is_err() {
            caught += 1;
        }
    }
    assert!(
        caught > 0,
        "the naive protocol was never caught in 50 interleavings"
    );
}

#[test]
fn memory_that_does_not_fit_is_an_error() {
    use ptovm_vm::sched::SchedError;
    let src = "@tensor T: f16[4]
@kernel k(i): vector(out t)
@workload w() { parallel_for i in dense[4] { task @k(i) resources(T[i]) } }";
    let bytes = assemble("m", src, &Options::default()).unwrap().bytes;
    let v = verify(&bytes).unwrap();
    let p = RuntimeParams::new(&v, &[]).unwrap();
    let (n, cap) = (1u32, 4usize);
    let region = Region::new(&v, n, cap, &[CUBE, VECTOR], vec![0, 0]);
    let sh = region.shared();
    let attempt = |free: usize, own: Vec<u32>, preds: usize| {
        let (mut f, mut r, mut u, mut c) = (vec![0; free], vec![0; cap], vec![0; cap], own);
        let mut b = vec![Busy::default(); c.len()];
        let mut pr = vec![Pred::default(); preds];
        let mut shares = vec![Sharing::default(); v.tensors().len()];
        let local = Local {
            free: &mut f,
            retiring: &mut r,
            unreleased: &mut u,
            cores: &mut c,
            busy: &mut b,
            preds: &mut pr,
            shares: &mut shares,
            map: local_map(&v, cap),
        };
        Aicpu::new(0, Interpreter::new(v, p, 0, n).unwrap(), local, &sh).err()
    };
    assert_eq!(attempt(cap, vec![0, 1], cap), None);
    assert_eq!(
        attempt(cap - 1, vec![0, 1], cap),
        Some(SchedError::Memory("free slots"))
    );
    assert_eq!(
        attempt(cap, vec![0, 1], cap - 1),
        Some(SchedError::Memory("predecessor scratch"))
    );
    assert_eq!(
        attempt(cap, vec![1], cap),
        Some(SchedError::Memory(
            "an AICPU needs a cube core and a vector core"
        ))
    );
    assert_eq!(
        attempt(cap, vec![0, 2], cap),
        Some(SchedError::Memory("core index past the handshake slots"))
    );
}
