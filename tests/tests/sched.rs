//! The shared scheduler (`ptovm_vm::sched`) driven on one thread in seeded random interleavings:
//! AICPU steps and core completions in any order, as the device's AICPUs and AICores may produce
//! them. Every run must end (no deadlock within a generous step bound), run every reference task
//! exactly once on a core of its pool driven by its owner (or a thief, with work stealing), and
//! start every task after all its reference predecessors ended. This is the device's scheduler
//! loop with the threads taken out, so a failure here is reproducible from its seed.

use proptest::prelude::*;
use ptovm_assembler::{assemble, Options};
use ptovm_tests::sched::{check, config, local_map, run, run_with, Region};
use ptovm_tests::{gen_params, Gen};
use ptovm_vm::desc::Binding;
use ptovm_vm::handshake::{CUBE, VECTOR};
use ptovm_vm::sched::{preds_len, Aicpu, Busy, Local, Pred};
use ptovm_vm::share::Sharing;
use ptovm_vm::{verify, Interpreter, RuntimeParams};

/// Runs `bytes` under `cfg` (panicking with the seed and settings on an error) and checks the
/// run against the reference.
fn checked_run(
    bytes: &[u8],
    params: &[(ptovm_vm::ParamKind, u32, Vec<u32>)],
    (n, window): (u32, u32),
    cfg: ptovm_vm::sched::Config,
    seed: u64,
) -> ptovm_tests::sched::Run {
    let r = run(bytes, params, n, window, cfg, seed)
        .unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
    check(bytes, params, n, &r).unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
    r
}

/// The random runnable program of `seed` run over `aicpus` AICPUs and `window` slots in the
/// interleaving of `seed`: its source, bytecode, parameters and run. `None` for a program of
/// more than 4,000 tasks, or whose parameters fail at launch or run time (the interpreter's
/// tests); any other error panics.
fn random_run(
    seed: u64,
    aicpus: u32,
    window: u32,
) -> Option<(
    String,
    Vec<u8>,
    ptovm_tests::Params,
    ptovm_tests::sched::Run,
)> {
    let src = Gen::runnable(seed).module();
    let out = assemble("gen.pto", &src, &Options::default()).unwrap();
    let params = gen_params(&out.module, seed);
    if ptovm_tests::task_count(&out.bytes, &params).is_some_and(|t| t > 4_000) {
        return None;
    }
    let cfg = config(seed, window);
    match run(&out.bytes, &params, aicpus, window, cfg, seed) {
        Ok(r) => Some((src, out.bytes, params, r)),
        Err(e) if e.contains("parameter") || e.contains("instruction") => None,
        Err(e) => panic!("{e} ({cfg:?}, seed {seed})\n{src}"),
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
        if let Some((src, bytes, params, r)) = random_run(seed, aicpus, window) {
            if let Err(e) = check(&bytes, &params, aicpus, &r) {
                panic!("{e} ({:?}, seed {seed})\n{src}", config(seed, window));
            }
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
    let params = vec![
        (ptovm_vm::ParamKind::Scalar, 5, vec![]),
        (ptovm_vm::ParamKind::Scalar, 4096, vec![]),
        (ptovm_vm::ParamKind::Scalar, 11008, vec![]),
    ];
    let mut edges = 0;
    for seed in 0..12u64 {
        let (n, window) = (
            [1, 2, 3, 6][seed as usize % 4],
            [1, 4, 32][seed as usize % 3],
        );
        let cfg = config(seed, window);
        let r = checked_run(&bytes, &params, (n, window), cfg, seed);
        assert_eq!(r.ran.len(), 3 * 25 + 16 * 5);
        edges += r.edges;
    }
    // Windows above one slot hold running predecessors, so some registrations happen.
    assert!(edges > 0);
}

#[test]
fn static_partition_with_a_window_of_one_does_not_deadlock() {
    // The last AICPU's first task comes last in id order: without staged watermarks this would
    // deadlock (spec/runtime.md §3.1). One slot per AICPU, every start policy and window mode
    // `config` picks; in stall mode every AICPU but the one recording waits for a free slot.
    let src = "@workload w() { for_each i in dense[8] { task @k(i) resources(A) } }\n@schedule s for w { dispatch = static(i) }";
    let bytes = assemble("s", src, &Options::default()).unwrap().bytes;
    for seed in 0..200u64 {
        let cfg = config(seed, 1);
        let r = checked_run(&bytes, &[], (4, 1), cfg, seed);
        assert_eq!(r.ran.len(), 8);
        // Registrations happen only on predecessors still running: at most the chain's 7.
        assert!(r.edges <= 7, "{} edges", r.edges);
    }
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
    // Every task of the windows, then the writers of a join's lookup.
    let preds = preds_len(n as usize, cap);
    let sh = region.shared();
    let attempt = |free: usize, own: Vec<u32>, preds: usize| {
        let (mut f, mut r, mut u, mut c) = (vec![0; free], vec![0; cap], vec![0; cap], own);
        let mut h = vec![0; cap];
        let mut b = vec![Busy::default(); c.len()];
        let mut pr = vec![Pred::default(); preds];
        let mut shares = vec![Sharing::default(); v.tensors().len()];
        let mut tensors = vec![Binding::default(); v.tensors().len()];
        let local = Local {
            free: &mut f,
            retiring: &mut r,
            unreleased: &mut u,
            held: &mut h,
            cores: &mut c,
            busy: &mut b,
            preds: &mut pr,
            shares: &mut shares,
            tensors: &mut tensors,
            bound: &[],
            map: local_map(&v, cap),
        };
        Aicpu::new(0, Interpreter::new(v, p, 0, n).unwrap(), local, &sh).err()
    };
    assert_eq!(attempt(cap, vec![0, 1], preds), None);
    assert_eq!(
        attempt(cap - 1, vec![0, 1], preds),
        Some(SchedError::Memory("free slots"))
    );
    assert_eq!(
        attempt(cap, vec![0, 1], preds - 1),
        Some(SchedError::Memory("predecessor scratch"))
    );
    assert_eq!(
        attempt(cap, vec![1], preds),
        Some(SchedError::Memory(
            "an AICPU needs a cube core and a vector core"
        ))
    );
    assert_eq!(
        attempt(cap, vec![0, 2], preds),
        Some(SchedError::Memory("core index past the handshake slots"))
    );
}

/// A read only looked up whose site found its tensor quiet must look again once the map has
/// inserted something (`TaskUses::all_quiet`): each iteration writes `X[i]` and then only reads
/// it (a loop-indexed tensor, not chained: the body is not only tasks), so one iteration's
/// read may find the tensor quiet (its writer done and retired) and the next one's find it live.
#[test]
fn a_quiet_read_site_looks_again_after_an_insertion() {
    let src = "@tensor X: f16[64]\n\
               @kernel w(a): vector(out x)\n@kernel r(a): vector(in x)\n\
               @workload q() { parallel_for i in dense[64] {\n\
                 task @w(i) resources(X[i])\n\
                 cond i < 100 { task @r(i) resources(X[i]) }\n\
               } }\n@schedule s for q { dispatch = affinity(i) }";
    let out = assemble("quiet.pto", src, &Options::default()).unwrap();
    let params = gen_params(&out.module, 0);
    for seed in 0..64u64 {
        let (n, window) = ([1, 2][seed as usize % 2], [2, 3, 8][seed as usize % 3]);
        let cfg = config(seed, window);
        let r = run(&out.bytes, &params, n, window, cfg, seed)
            .unwrap_or_else(|e| panic!("{e} ({cfg:?})"));
        check(&out.bytes, &params, n, &r).unwrap_or_else(|e| panic!("{e} ({cfg:?}, seed {seed})"));
    }
}

/// Tasks with more live predecessors than their waiter nodes (`NODES`, 32) in every
/// interleaving: in each of 3 steps, 40 writes of `X[i]`, spread over the AICPUs, then one
/// read of all of `X`. A reader registers on the first 32 it can,
/// takes back the holds of those that completed meanwhile and keeps one while it polls the
/// rest (spec/runtime.md §4.1 steps 6–7); it must start after every writer ended, and start
/// once.
#[test]
fn tasks_with_more_predecessors_than_nodes_in_any_interleaving() {
    let src = "@tensor X: f16[40]\n\
               @kernel w(a): vector(out x)\n@kernel r(a): vector(in x)\n\
               @workload many() { for_each s in dense[3] {\n\
                 parallel_for i in dense[40] { task @w(i) resources(X[i]) }\n\
                 parallel_for j in dense[1] { task @r(s) resources(X[0:40]) }\n\
               } }\n@schedule s for many { dispatch = affinity(i) }";
    let out = assemble("many.pto", src, &Options::default()).unwrap();
    let params = gen_params(&out.module, 0);
    for seed in 0..48u64 {
        let (n, window) = ([1, 2, 3][seed as usize % 3], [64, 128][seed as usize % 2]);
        checked_run(&out.bytes, &params, (n, window), config(seed, window), seed);
    }
}

/// Core limits (spec/runtime.md §4.6) in every interleaving: kernel `a` may run 2 tasks at once
/// in the launch, `b` any number, over both core allocations and every setting `config`
/// picks; `check` holds the run to the limits (`check_core_limits`), and tasks did wait.
#[test]
fn core_limits_hold_in_any_interleaving() {
    let src = "@tensor X: f16[40]\n@tensor Y: f16[40]\n\
               @kernel a(i): vector(out x) cores(2)\n@kernel b(i): vector(in x, out y)\n\
               @workload w() { parallel_for i in dense[40] {\n\
                 task @a(i) resources(X[i])\n task @b(i) resources(X[i], Y[i])\n\
               } }\n@schedule s for w { dispatch = round_robin }";
    let bytes = assemble("limits.pto", src, &Options::default())
        .unwrap()
        .bytes;
    let mut waits = 0;
    for seed in 0..120u64 {
        let (n, window) = (
            [1, 2, 3, 5][seed as usize % 4],
            [1, 4, 64][seed as usize % 3],
        );
        let cfg = config(seed, window);
        let r = checked_run(&bytes, &[], (n, window), cfg, seed);
        assert_eq!(r.ran.len(), 80);
        waits += r.counts.core_limit_waits;
    }
    assert!(waits > 0, "no task ever waited for its kernel's core limit");
}

/// `ready = work_steal` (spec/runtime.md §4.3): AICPUs 0 and 1 own every task; 2 and 3, with
/// none of their own, stay on as thieves until every AICPU's tasks have completed (an AICPU
/// whose own work is done would otherwise finish at once and never steal), and take tasks of
/// both owners from the tops of their deques. Every task still completes on its owner (`check`).
#[test]
fn aicpus_without_work_of_their_own_steal() {
    let src = "@tensor X: f16[400]\n@kernel a(i): vector(out x)\n\
               @workload w() { parallel_for i in dense[400] { task @a(i) resources(X[i]) } }\n\
               @schedule s for w { dispatch = affinity(i % 2) }";
    let bytes = assemble("steal.pto", src, &Options::default())
        .unwrap()
        .bytes;
    // stolen[thief][owner]
    let mut stolen = [[0u64; 2]; 2];
    for seed in 0..40u64 {
        let cfg = ptovm_vm::sched::Config {
            work_steal: true,
            ..config(seed, 64)
        };
        let r = checked_run(&bytes, &[], (4, 64), cfg, seed);
        for (_, i) in &r.issues {
            if i.aicpu >= 2 && i.owner < 2 {
                stolen[i.aicpu as usize - 2][i.owner as usize] += 1;
            }
        }
    }
    for (thief, from) in stolen.iter().enumerate() {
        assert!(
            from.iter().all(|&k| k > 0),
            "AICPU {} stole {from:?} from AICPUs 0 and 1",
            thief + 2
        );
    }
}

/// The AICPU count (1, 2, 3 or 6) and the window (1, 2, 8 or 64) of seed `seed`'s run: every
/// pair in 16 seeds.
fn aicpus_and_window(seed: u64) -> (u32, u32) {
    (
        [1, 2, 3, 6][seed as usize % 4],
        [1, 2, 8, 64][(seed / 4) as usize % 4],
    )
}

/// Tensors written once with a table (spec/runtime.md §4.8): their writes filed and their
/// reads answered outside the maps, for a shared tensor without the lock. Four modules: a
/// stencil that also reads a range two rows back (a table of 4 rows; shared, local on one
/// AICPU), a stencil whose every third step only writes (a write that takes a cell whose row's
/// readers may lag: its need waits for them, §3.5), Task Bench's all_to_all (whose joins look
/// their rows up in the table) and no_comm (local, keyed in dimension 1: each AICPU's
/// columns). In any interleaving, window and AICPU count every task starts after all its
/// reference predecessors ended. Every fifth run starts with the tables' cells taken by a row
/// no write may drop, so that every write spills to its map and the reads look there too; no
/// task is then recorded by its site's plan (the quick way, §4.8), and in the other runs some
/// are.
#[test]
fn written_once_tables_hold_the_writers_in_any_interleaving() {
    let two_back = "@param W = 12\n@param T = 8\n@tensor G: f32[T, W]\n\
        @kernel first(t, i): vector(out g)\n@kernel step(t, i): vector(in a, in b, out g)\n\
        @workload w(%steps: dense_dyn(T), %points: dense_dyn(W)) {\n\
          for_each t in %steps {\n\
            parallel_for i in %points {\n\
              cond t < 2 { task @first(t, i) resources(G[t, i]) }\n\
              else { task @step(t, i) resources(G[t - 1, max(0, i - 1) : min(i + 2, W)], \
                G[t - 2, max(0, i - 2) : min(i + 3, W)], G[t, i]) }\n\
            }\n\
          }\n\
        }\n\
        @schedule s for w { dispatch = static(i) }";
    let (two_back, two_back_params) = ptovm_tests::assemble_named("two_back.pto", two_back, &[]);
    // Steps of writes alone: such a write needs the tasks before its step (§3.5), among them
    // the readers of the row whose cell it takes (§4.8); nothing else of it waits for them.
    let writes_alone = "@param W = 12\n@param T = 10\n@tensor G: f32[T, W]\n\
        @kernel first(t, i): vector(out g)\n@kernel step(t, i): vector(in a, out g)\n\
        @workload w(%steps: dense_dyn(T), %points: dense_dyn(W)) {\n\
          for_each t in %steps {\n\
            parallel_for i in %points {\n\
              cond t % 3 == 0 { task @first(t, i) resources(G[t, i]) }\n\
              else { task @step(t, i) resources(G[t - 1, max(0, i - 1) : min(i + 2, W)], \
                G[t, i]) }\n\
            }\n\
          }\n\
        }\n\
        @schedule s for w { dispatch = static(i) }";
    let (writes_alone, writes_alone_params) =
        ptovm_tests::assemble_named("writes_alone.pto", writes_alone, &[]);
    let (all_to_all, a2a_params) = ptovm_tests::example(
        "taskbench/all_to_all.pto",
        &[("W", 20, vec![]), ("T", 6, vec![])],
    );
    let (no_comm, no_comm_params) = ptovm_tests::example(
        "taskbench/no_comm.pto",
        &[("W", 12, vec![]), ("T", 8, vec![])],
    );
    let (mut filed, mut spilled, mut planned) = (0, 0, 0);
    for seed in 0..160u64 {
        let (n, window) = aicpus_and_window(seed);
        let cfg = config(seed, window);
        let extra = ptovm_tests::sched::Extra {
            cells_taken: seed % 5 == 0,
            ..Default::default()
        };
        for (bytes, params) in [
            (&two_back, &two_back_params),
            (&writes_alone, &writes_alone_params),
            (&all_to_all, &a2a_params),
            (&no_comm, &no_comm_params),
        ] {
            let r = run_with(bytes, params, (n, window), cfg, seed, extra.clone())
                .unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
            check(bytes, params, n, &r).unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
            filed += r.counts.once_writes;
            spilled += r.counts.once_spills;
            planned += r.counts.planned;
            // A write whose cell does not take it sends its task the long way.
            if extra.cells_taken {
                assert_eq!(r.counts.planned, 0, "seed {seed}: recorded by a plan");
            }
        }
    }
    assert!(
        filed > 0 && spilled > 0 && planned > 0,
        "{filed} filed, {spilled} spilled, {planned} recorded by their sites' plans"
    );
}

/// Runs `bytes` in the interleaving of `seed` twice, once with every task recorded the long way
/// (`Env::plans` off), and checks that the two runs are the same event for event — every start,
/// end and issue in the same order, the same edges and counts — but for the counts of tasks
/// recorded the quick ways, which it returns: by a site's plan (§4.8), and with the producers
/// the program names alone (§4.1 step 5).
fn quick_and_long(
    bytes: &[u8],
    params: &[(ptovm_vm::ParamKind, u32, Vec<u32>)],
    (n, window): (u32, u32),
    cfg: ptovm_vm::sched::Config,
    seed: u64,
) -> (u64, u64) {
    let mut quick = run(bytes, params, n, window, cfg, seed)
        .unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
    let extra = ptovm_tests::sched::Extra {
        no_plans: true,
        ..Default::default()
    };
    let long = run_with(bytes, params, (n, window), cfg, seed, extra)
        .unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
    assert_eq!((long.counts.planned, long.counts.mapless), (0, 0));
    let quick_ways = (quick.counts.planned, quick.counts.mapless);
    (quick.counts.planned, quick.counts.mapless) = (0, 0);
    assert!(
        quick.ran == long.ran
            && quick.issues == long.issues
            && quick.edges == long.edges
            && quick.counts == long.counts,
        "seed {seed}: the quick ways' run differs ({cfg:?}): {:?} against {:?}",
        quick.counts,
        long.counts
    );
    quick_ways
}

/// The quick ways record a task exactly as the long way would: by a site's plan
/// (spec/runtime.md §4.8), and with the producers the program names alone when its site needs
/// no map, join or table (§4.1 step 5). Task Bench's patterns whose tasks take a plan (tables
/// alone, or a join and tables), the LLaMA layer, whose tasks mostly need no map (on one
/// AICPU) or only look up shared tensors whose writers have all retired, and a site that reads
/// a tensor it may find quiet run twice in each seeded interleaving, window and AICPU count,
/// once with every task recorded the long way (`quick_and_long`); each quick way records some
/// tasks.
#[test]
fn the_quick_ways_record_what_the_long_way_does() {
    let quiet = "@tensor X: f16[64]\n\
                 @kernel w(a): vector(out x)\n@kernel r(a): vector(in x)\n\
                 @workload q() { parallel_for i in dense[64] {\n\
                   task @w(i) resources(X[i])\n\
                   cond i < 100 { task @r(i) resources(X[i]) }\n\
                 } }\n@schedule s for q { dispatch = affinity(i) }";
    let mut programs: Vec<_> = [
        ("no_comm", 12, 8, vec![]),
        ("stencil_1d", 12, 8, vec![]),
        ("spread", 12, 8, vec![]),
        ("nearest", 12, 8, vec![]),
        ("tree", 16, 6, vec![]),
        ("dom", 8, 12, vec![]),
        ("all_to_all", 20, 6, vec![]),
    ]
    .into_iter()
    .map(|(name, w, t, _): (&str, u32, u32, Vec<u32>)| {
        ptovm_tests::example(
            &format!("taskbench/{name}.pto"),
            &[("W", w, vec![]), ("T", t, vec![])],
        )
    })
    .collect();
    programs.push(ptovm_tests::example("llama_layer.pto", &[("N", 3, vec![])]));
    programs.push(ptovm_tests::assemble_named("quiet.pto", quiet, &[]));
    let (mut planned, mut mapless) = (0, 0);
    for seed in 0..64u64 {
        let (n, window) = aicpus_and_window(seed);
        let cfg = config(seed, window);
        for (bytes, params) in &programs {
            let (p, m) = quick_and_long(bytes, params, (n, window), cfg, seed);
            (planned, mapless) = (planned + p, mapless + m);
        }
    }
    assert!(planned > 0, "no task was recorded by its site's plan");
    assert!(mapless > 0, "no task was recorded without a map");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The quick ways on random programs (every tensor class, carried and chained tensors,
    /// shared ones over up to 6 AICPUs) in random interleavings: each run is the same event
    /// for event as the one that records every task the long way (`quick_and_long`).
    #[test]
    fn random_programs_record_the_quick_ways_as_the_long_way(
        seed in any::<u64>(),
        aicpus in 1u32..=6,
        window in prop::sample::select(vec![1u32, 2, 3, 8, 64]),
    ) {
        if let Some((_, bytes, params, _)) = random_run(seed, aicpus, window) {
            quick_and_long(&bytes, &params, (aicpus, window), config(seed, window), seed);
        }
    }
}

/// Joins (spec/runtime.md §4.7): every task of a step reads a whole row of the step before
/// (Task Bench's all_to_all), or two rows, one of them only partly (a module of its own): each
/// AICPU opens a join for a row's writers and its later readers of the row register on it
/// instead; a join for a whole row is published as its row's, and the other AICPUs' readers of
/// the row register on it too, through a relay of it when they have a join free. In any
/// interleaving, window and AICPU count every task starts after all its reference predecessors
/// ended; joins are opened, relays among them, stand for reads, and stand for other AICPUs'
/// reads.
#[test]
fn joins_stand_for_the_writers_of_a_row_in_any_interleaving() {
    let (two_rows, rows_params) = ptovm_tests::assemble_named("rows.pto", &two_rows(7), &[]);
    let (all_to_all, a2a_params) = ptovm_tests::example(
        "taskbench/all_to_all.pto",
        &[("W", 20, vec![]), ("T", 6, vec![])],
    );
    let (mut opened, mut joined, mut shared, mut relays, mut planned) = (0, 0, 0, 0, 0);
    let mut finished = 0;
    for seed in 0..160u64 {
        let (n, window) = aicpus_and_window(seed);
        let cfg = config(seed, window);
        for (bytes, params) in [(&two_rows, &rows_params), (&all_to_all, &a2a_params)] {
            let r = checked_run(bytes, params, (n, window), cfg, seed);
            opened += r.counts.joins;
            joined += r.counts.joined;
            shared += r.counts.joined_shared;
            relays += r.counts.relays;
            planned += r.counts.planned;
            finished += r.counts.finished_reads;
        }
    }
    // all_to_all's tasks, whose one read a join stands for, mostly take the quick way; reads
    // of a row whose writers had all completed when it was looked up skip the lookup.
    assert!(
        opened > relays
            && relays > 0
            && joined > shared
            && shared > 0
            && planned > 0
            && finished > 0,
        "{opened} joins ({relays} relays), {joined} reads, {shared} of another AICPU's join, \
         {planned} recorded by their sites' plans, {finished} of finished rows"
    );
}

/// Quiet rounds (spec/runtime.md §4.3, `vm/src/sched/quiet.rs`): a round of an AICPU whose
/// last round did nothing returns at once when nothing it waits on has moved. The harness
/// takes every round it settles so in full all the same (`Env::checks_quiet`) and stops the
/// run if that round does anything. Over patterns whose AICPUs wait on full windows,
/// watermarks and joins to free, in any interleaving, every such round is checked (the check
/// fails when a quiet AICPU ignores its cores, its ready queues or the watermarks), and some
/// rounds of every pattern are settled.
#[test]
fn quiet_rounds_would_do_nothing_in_any_interleaving() {
    let programs = [
        ("taskbench/chain.pto", vec![("T", 40, vec![])]),
        (
            "taskbench/stencil_1d.pto",
            vec![("W", 24, vec![]), ("T", 6, vec![])],
        ),
        (
            "taskbench/all_to_all.pto",
            vec![("W", 20, vec![]), ("T", 6, vec![])],
        ),
        (
            "taskbench/spread.pto",
            vec![("W", 24, vec![]), ("T", 6, vec![])],
        ),
    ];
    let mut runs: Vec<(&str, (Vec<u8>, ptovm_tests::Params))> = programs
        .into_iter()
        .map(|(file, params)| (file, ptovm_tests::example(file, &params)))
        .collect();
    // At a window of 512 on six AICPUs, generation runs ahead until every join an AICPU holds
    // stands for a row, and its next task waits for one to free.
    runs.push((
        "two rows",
        ptovm_tests::assemble_named("rows.pto", &two_rows(80), &[]),
    ));
    for (file, (bytes, params)) in runs {
        let mut quiet = 0;
        for seed in 0..60u64 {
            let (n, window) = (
                [2, 3, 6][seed as usize % 3],
                [1, 2, 8, 64, 512][(seed / 3) as usize % 5],
            );
            let cfg = config(seed, window);
            quiet += checked_run(&bytes, &params, (n, window), cfg, seed)
                .counts
                .quiet_rounds;
        }
        assert!(quiet > 0, "{file}: no round settled as quiet");
    }
}

/// Cores that finish while their AICPU dispatches (spec/runtime.md §4.3, `Env::run_cores`):
/// the harness lets one seed in two start and end cores inside a round, after its dispatch,
/// and the round takes those completions and dispatches again before it generates. Over the
/// chain, a stencil, all_to_all (joins) and the LLaMA layer in any interleaving, every run is
/// checked against the reference, and rounds take such hops in every program.
#[test]
fn cores_that_finish_while_their_aicpu_dispatches_are_taken_in_the_round() {
    let programs = [
        ("taskbench/chain.pto", vec![("T", 60, vec![])]),
        (
            "taskbench/stencil_1d.pto",
            vec![("W", 24, vec![]), ("T", 6, vec![])],
        ),
        (
            "taskbench/all_to_all.pto",
            vec![("W", 20, vec![]), ("T", 6, vec![])],
        ),
        ("llama_layer.pto", vec![("N", 2, vec![])]),
    ];
    for (file, params) in programs {
        let (bytes, params) = ptovm_tests::example(file, &params);
        let mut hops = 0;
        for seed in 0..48u64 {
            let (n, window) = aicpus_and_window(seed);
            let cfg = config(seed, window);
            hops += checked_run(&bytes, &params, (n, window), cfg, seed)
                .counts
                .hops;
        }
        assert!(hops > 0, "{file}: no round took a hop");
    }
}

/// A module of `t` steps of 24 points whose every task reads a whole row of the step before and
/// part of the row two steps before (16 elements, enough for a join), under `affinity(i)`.
fn two_rows(t: u32) -> String {
    format!(
        "@param W = 24\n@param T = {t}\n@tensor G: f32[T, W]\n\
        @kernel first(t, i): vector(out g)\n@kernel step(t, i): vector(in a, in b, out g)\n\
        @workload w(%steps: dense_dyn(T), %points: dense_dyn(W)) {{\n\
          for_each t in %steps {{\n\
            parallel_for i in %points {{\n\
              cond t < 2 {{ task @first(t, i) resources(G[t, i]) }}\n\
              else {{ task @step(t, i) resources(G[t - 1, 0 : W], G[t - 2, 4 : 20], G[t, i]) }}\n\
            }}\n\
          }}\n\
        }}\n\
        @schedule s for w {{ dispatch = affinity(i) }}"
    )
}
