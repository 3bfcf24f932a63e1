//! The threaded simulator: every run is checked against the reference expander (each task once,
//! on its pool, after all its predecessors), over the examples and random programs, AICPU counts
//! 1..=8, windows down to 1, and random yields injected into generation and completion. A run
//! that does not finish within a generous bound fails the test instead of hanging CI.

use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::sim::{self, Report, SimError};
use ptovm_host_sim::DepMode;
use ptovm_tests::{gen_params, values, Gen};
use ptovm_vm::WindowMode;
use ptovm_vm::{verify, RuntimeParams, Value};

/// Runs the simulator on its own thread and fails if it takes longer than `limit`.
fn run_bounded(
    bytes: Vec<u8>,
    params: Vec<(ptovm_vm::ParamKind, u32, Vec<u32>)>,
    o: sim::Options,
    limit: Duration,
) -> Result<Report, SimError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let v = verify(&bytes).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        let _ = tx.send(sim::run(v, p, o));
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| {
        panic!("the simulator did not finish within {limit:?} (deadlock?) with {o:?}")
    })
}

fn opts(aicpus: u32, window: usize, jitter: Option<u64>) -> sim::Options {
    sim::Options {
        aicpus,
        cube: 2 * aicpus,
        vector: 2 * aicpus,
        window,
        mode: WindowMode::Stall,
        threads: 1 + (aicpus as usize % 3),
        check: true,
        jitter,
        naive: false,
        trace: false,
        latency: false,
        start: sim::Start::Immediate,
        pipeline_depth: 0,
        work_steal: false,
        cores: sim::CoreAlloc::Shared,
        batch_deps: 0,
        timing: sim::IssueTiming::Immediate,
        deps: DepMode::Overlap,
        descriptors: false,
        workspace: None,
    }
}

fn example(name: &str) -> Vec<u8> {
    ptovm_tests::example_code(name)
}

fn scalar(x: u32) -> (ptovm_vm::ParamKind, u32, Vec<u32>) {
    (ptovm_vm::ParamKind::Scalar, x, vec![])
}

/// The LLaMA layer's parameters: `n` tiles, D = 64, F = 176.
fn llama(n: u32) -> Vec<(ptovm_vm::ParamKind, u32, Vec<u32>)> {
    vec![scalar(n), scalar(64), scalar(176)]
}

#[test]
fn llama_layer_checked_on_many_configurations() {
    for (aicpus, window, jitter) in [
        (1, 1, None),
        (6, 1, Some(1)),
        (6, 4, Some(2)),
        (3, 64, None),
        (8, 2, Some(3)),
    ] {
        let r = run_bounded(
            example("llama_layer.pto"),
            llama(8),
            opts(aicpus, window, jitter),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{aicpus} AICPUs, window {window}: {e}"));
        assert!(r.checked);
        assert_eq!(r.tasks_total, 3 * 64 + 16 * 8);
        assert_eq!(r.per_aicpu.len(), aicpus as usize);
        assert_eq!(r.cube_tasks + r.vector_tasks, r.tasks_total);
    }
}

#[test]
fn window_abort_is_a_clean_error() {
    let mut o = opts(2, 1, None);
    o.mode = WindowMode::Abort;
    match run_bounded(
        example("llama_layer.pto"),
        llama(4),
        o,
        Duration::from_secs(60),
    ) {
        Err(SimError::WindowAbort { window: 1, .. }) => {}
        other => panic!("expected a window abort, got {other:?}"),
    }
    o.mode = WindowMode::Benchmark;
    let r = run_bounded(
        example("llama_layer.pto"),
        llama(4),
        o,
        Duration::from_secs(60),
    )
    .unwrap();
    assert!(r.checked);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_are_checked(
        seed in any::<u64>(),
        aicpus in 1u32..=8,
        window in prop::sample::select(vec![1usize, 2, 4, 32]),
        jitter in any::<bool>(),
    ) {
        let src = Gen::runnable(seed).module();
        let out = assemble("gen.pto", &src, &Options::default()).unwrap();
        let params = gen_params(&out.module, seed);
        let tasks = ptovm_tests::task_count(&out.bytes, &params);
        if tasks.is_none_or(|t| t > 4_000) {
            return Ok(());
        }
        let mut o = opts(aicpus, window, jitter.then_some(seed));
        o.start = match seed % 3 {
            0 => ptovm_host_sim::sim::Start::Immediate,
            1 => ptovm_host_sim::sim::Start::AfterOrchestration,
            _ => ptovm_host_sim::sim::Start::Threshold(1 + seed % 7),
        };
        o.pipeline_depth = (seed >> 3) as u32 % 3;
        o.work_steal = (seed >> 5) & 1 == 1;
        o.batch_deps = [0, 1, 3, 64][(seed >> 7) as usize % 4];
        match run_bounded(out.bytes, params, o, Duration::from_secs(60)) {
            Ok(r) => {
                prop_assert!(r.checked);
                prop_assert!(r.dep_batches <= r.tasks_total);
            }
            Err(SimError::Launch(_)) => {}
            Err(e) => panic!("{e}\n{src}"),
        }
    }
}

/// Programs built around loop nests (`ptovm_tests::indexed_program`: loop-indexed tensors,
/// whose first accesses are only inserted and whose last reads only looked up, next to near
/// misses) run checked on 1, 3 and 6 AICPUs with windows of 1, 2 and 4 slots, some with
/// random yields: the accesses the scheduler no longer looks up or records lose no edge.
#[test]
fn loop_indexed_programs_are_checked() {
    for seed in 0..1500u64 {
        let src = ptovm_tests::indexed_program(seed);
        let bytes = assemble("gen.pto", &src, &Options::default())
            .unwrap_or_else(|e| panic!("{e}\n{src}"))
            .bytes;
        let aicpus = [1, 3, 6][seed as usize % 3];
        let window = [1, 2, 4][(seed / 3) as usize % 3];
        let o = opts(aicpus, window, (seed % 2 == 0).then_some(seed));
        let r = run_bounded(bytes, vec![], o, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{aicpus} AICPUs, window {window}: {e}\n{src}"));
        assert!(r.checked);
    }
}

/// Programs built around loop bodies of `TASK` statements (`ptovm_tests::chained_program`:
/// chained tensors, whose accesses go to no map and whose producers the scheduler finds by
/// their distance in ids, next to near misses) run checked on 1, 3 and 6 AICPUs with windows
/// of 1 to 4 slots, some with random yields: no structural edge is lost or registered on the
/// wrong task.
#[test]
fn chained_programs_are_checked() {
    for seed in 0..1200u64 {
        let src = ptovm_tests::chained_program(seed);
        let out =
            assemble("gen.pto", &src, &Options::default()).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let params = out
            .module
            .params
            .iter()
            .map(|slot| (slot.kind, 1 + seed as u32 % 4, Vec::new()))
            .collect();
        let aicpus = [1, 3, 6][seed as usize % 3];
        let window = [1, 2, 3, 4][(seed / 3) as usize % 4];
        let o = opts(aicpus, window, (seed % 2 == 0).then_some(seed));
        let r = run_bounded(out.bytes, params, o, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{aicpus} AICPUs, window {window}: {e}\n{src}"));
        assert!(r.checked);
    }
}

/// A chained tensor's reader waits for its producer, found by distance alone: the writes of
/// `X[i]` are slow (a registered kernel sleeps) and run on cube cores while the reads run on
/// vector cores that are free at once, so a read whose edge were lost would start before its
/// write ends and fail the check. The update `Y[i]` between them makes the distance 2.
#[test]
fn chained_readers_wait_for_their_producers() {
    use ptovm_host_sim::kernel::Registry;
    let src = "@tensor X: f16[8]\n@tensor Y: f16[8]\n@kernel w(i): cube(out x)\n\
        @kernel u(i): vector(inout y)\n@kernel r(i): vector(in x, inout y)\n\
        @workload k() {\n\
          parallel_for i in dense[8] {\n\
            task @w(i) resources(X[i])\n\
            task @u(i) resources(Y[i])\n\
            task @r(i) resources(X[i], Y[i])\n\
          }\n\
        }\n@schedule s for k { dispatch = affinity(i) }";
    let bytes = assemble("x.pto", src, &Options::default()).unwrap().bytes;
    let v = verify(&bytes).unwrap();
    let p = RuntimeParams::new(&v, &[]).unwrap();
    let mut kernels = Registry::new();
    kernels.register("w", |_: &ptovm_host_sim::kernel::Call<'_>| {
        std::thread::sleep(Duration::from_millis(5));
        Ok(())
    });
    for aicpus in [1, 3] {
        let mut s = vec![ptovm_vm::share::Sharing::default(); 2];
        let it = ptovm_vm::Interpreter::new(v, p, 0, aicpus).unwrap();
        ptovm_vm::share::analyze(&it, &mut s).unwrap();
        assert!(s[0].chained && s[1].chained);
        // Task 3i + 2 reads X[i] from task 3i and Y[i] from task 3i + 1.
        let tasks = ptovm_host_sim::reference_expand(&v, &p, aicpus, u64::MAX).unwrap();
        assert_eq!(
            ptovm_vm::share::chain(&v, &s, tasks[2].site).producers(tasks[2].iter),
            0b110
        );
        for jitter in [None, Some(3)] {
            let o = opts(aicpus, 16, jitter);
            let r =
                sim::run_with_kernels(v, p, o, None, &kernels).unwrap_or_else(|e| panic!("{e}"));
            assert!(r.checked);
            // Every read registers on its slow write; its update may have completed.
            assert!((8..=16).contains(&r.edges), "{} edges", r.edges);
        }
    }
}

/// A loop-indexed tensor shared between AICPUs: its writes (the first accesses of their
/// elements) are only inserted in the global map, and the later loop's reads (lookup only,
/// past `writes_end`, on other AICPUs) must still find them there while they run.
/// One AICPU's writes are slow (a registered kernel sleeps on its driver thread) while the
/// other thread is free to run their readers, so a read that missed its edge would start
/// before its writer ends and fail the check.
#[test]
fn inserted_shared_writes_hold_back_their_readers() {
    use ptovm_host_sim::kernel::Registry;
    let src = "@tensor X: f16[8]\n@kernel w(i): vector(out x)\n@kernel r(i): cube(in x)\n\
        @workload k() {\n\
          parallel_for i in dense[8] { task @w(i) resources(X[i]) }\n\
          parallel_for i in dense[8] { task @r(i) resources(X[i]) }\n\
        }\n@schedule s for k { dispatch = round_robin(3) }";
    let bytes = assemble("x.pto", src, &Options::default()).unwrap().bytes;
    let v = verify(&bytes).unwrap();
    let p = RuntimeParams::new(&v, &[]).unwrap();
    let mut s = vec![ptovm_vm::share::Sharing::default(); 1];
    let it = ptovm_vm::Interpreter::new(v, p, 0, 3).unwrap();
    ptovm_vm::share::analyze(&it, &mut s).unwrap();
    // Task i writes X[i] on AICPU i mod 3, task 8 + i reads it on AICPU (i + 2) mod 3.
    assert_eq!(s[0].class, ptovm_vm::share::Class::Shared);
    assert!(s[0].loop_indexed);
    let mut kernels = Registry::new();
    // AICPU 1's writes are slow. Its driver thread (of two: AICPU i on thread i mod 2) runs
    // them, so thread 0 is free to run AICPU 0's reads of them (tasks 9, 12, 15, on cube
    // cores) at once unless they wait.
    kernels.register("w", |c: &ptovm_host_sim::kernel::Call<'_>| {
        if c.aicpu == 1 {
            std::thread::sleep(Duration::from_millis(20))
        }
        Ok(())
    });
    for jitter in [None, Some(1)] {
        let mut o = opts(3, 16, jitter);
        o.threads = 2;
        let r = sim::run_with_kernels(v, p, o, None, &kernels).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.cross_aicpu_edges > 0);
        assert!(r.checked);
    }
}

#[test]
fn bad_options_are_errors() {
    let bytes = example("attention.pto");
    let v = verify(&bytes).unwrap();
    let vals = [Value::Scalar(2), Value::Scalar(16)];
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let mut o = opts(2, 0, None);
    assert!(matches!(sim::run(v, p, o), Err(SimError::Options(_))));
    // One cube core for two AICPUs: enough when they share it, not under a partition; no
    // vector core at all is never enough.
    o.window = 4;
    o.cube = 1;
    o.check = true;
    assert!(sim::run(v, p, o).unwrap().checked);
    o.cores = sim::CoreAlloc::Partition;
    assert!(matches!(sim::run(v, p, o), Err(SimError::Options(_))));
    o.cores = sim::CoreAlloc::Shared;
    o.vector = 0;
    assert!(matches!(sim::run(v, p, o), Err(SimError::Options(_))));
}

#[test]
fn the_naive_protocol_is_caught() {
    // Producers on AICPU 1 (odd i), consumers of the same tile on AICPU 0 (the next even i).
    // Without the watermark wait AICPU 0 looks regions up before AICPU 1 recorded its writes.
    let src = &ptovm_tests::hazard(256);
    let bytes = assemble("n", src, &Options::default()).unwrap().bytes;
    let mut caught = 0;
    for seed in 0..20u64 {
        let mut o = opts(2, 16, Some(seed + 1));
        run_bounded(bytes.clone(), vec![], o, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("the real protocol must pass: {e}"));
        o.naive = true;
        match run_bounded(bytes.clone(), vec![], o, Duration::from_secs(60)) {
            Err(SimError::Check(msg)) => {
                assert!(msg.contains("before its predecessor"), "{msg}");
                caught += 1;
            }
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        caught >= 1,
        "the naive protocol was never caught in 20 runs"
    );
    eprintln!("naive protocol caught in {caught} of 20 runs");
}

#[test]
fn batch_deps_releases_completions_together() {
    // 64 independent tasks on one AICPU with 64 cores, batch 16: completions pile up while the
    // AICPU keeps generating, and go out in batches; the last, partial batch goes out when
    // nothing else moves.
    let src = "@tensor T: f16[64]
@kernel k(i): vector(out t)
@workload w() { parallel_for i in dense[64] { task @k(i) resources(T[i]) } }";
    let bytes = assemble("b", src, &Options::default()).unwrap().bytes;
    for batch in [0, 1, 16, 1000] {
        // Whether completions arrive together is up to the threads: over ten runs, at least
        // one must release fewer times than there are tasks.
        let mut fewest = u64::MAX;
        for _ in 0..10 {
            let mut o = opts(1, 64, None);
            o.vector = 64;
            o.batch_deps = batch;
            let r = run_bounded(bytes.clone(), vec![], o, Duration::from_secs(60)).unwrap();
            assert!(r.checked);
            assert_eq!(r.tasks_total, 64);
            if batch <= 1 {
                assert_eq!(r.dep_batches, 64);
            }
            fewest = fewest.min(r.dep_batches);
        }
        if batch > 1 {
            assert!(
                fewest < 64,
                "batch {batch}: never fewer than {fewest} releases"
            );
        }
    }
}

#[test]
fn exact_matching_misses_edges_that_the_check_catches() {
    // After a chain of 32 steps, one task writes a whole row; 64 tasks then read one element
    // each: different regions, so pto-isa's exact-match map sees no dependency and lets the
    // readers start while the row's writer still waits for its chain.
    let src = "@tensor T: f16[64]
@tensor U: f16[1]
@kernel step(k): vector(inout u)
@kernel fill(): vector(in u, out t)
@kernel read(i): vector(in t)
@workload w() {
  for_each k in dense[32] { task @step(k) resources(U) }
  task @fill() resources(U, T[0:64])
  parallel_for i in dense[64] { task @read(i) resources(T[i]) }
}
@schedule s for w { dispatch = round_robin }";
    let bytes = assemble("x", src, &Options::default()).unwrap().bytes;
    let mut caught = 0;
    for seed in 0..20u64 {
        let mut o = opts(2, 128, Some(seed + 1));
        let r = run_bounded(bytes.clone(), vec![], o, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("overlap matching must pass: {e}"));
        // The chain's edges, and one per reader whose writer had not finished when it recorded.
        assert!(r.edges <= 32 + 64, "{}", r.edges);
        o.deps = DepMode::Exact;
        match run_bounded(bytes.clone(), vec![], o, Duration::from_secs(60)) {
            Err(SimError::Check(msg)) => {
                assert!(msg.contains("before its predecessor"), "{msg}");
                caught += 1;
            }
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(caught >= 1, "exact matching was never caught in 20 runs");
    eprintln!("exact matching caught in {caught} of 20 runs");
}

#[test]
fn start_policies_pipeline_depth_and_work_stealing_are_checked() {
    use ptovm_host_sim::sim::Start;
    for start in [
        Start::Immediate,
        Start::AfterOrchestration,
        Start::Threshold(5),
    ] {
        for (window, depth, steal, batch) in [
            (2, 0, false, 0),
            (64, 1, false, 8),
            (8, 0, true, 3),
            (1, 1, true, 2),
        ] {
            let mut o = opts(4, window, Some(window as u64));
            o.start = start;
            o.pipeline_depth = depth;
            o.work_steal = steal;
            o.batch_deps = batch;
            let r = run_bounded(
                example("llama_layer.pto"),
                llama(6),
                o,
                Duration::from_secs(60),
            )
            .unwrap_or_else(|e| {
                panic!("{start:?} window {window} depth {depth} steal {steal}: {e}")
            });
            assert!(r.checked);
            assert_eq!(r.tasks_total, 3 * 36 + 16 * 6);
            if !steal {
                assert_eq!(r.stolen, 0);
            }
            if batch <= 1 {
                assert_eq!(r.dep_batches, r.tasks_total, "one release per completion");
            }
        }
    }
}

#[test]
fn idle_aicpus_steal_work() {
    // Every task belongs to AICPU 0 (affinity on a constant): with stealing, the other AICPUs'
    // idle cores run some of them; the check still holds.
    let src = "@workload w() { parallel_for i in dense[400] { task @k(i) resources(T[i]) } }\n@schedule s for w { dispatch = affinity(0) }";
    let bytes = assemble("s", src, &Options::default()).unwrap().bytes;
    let mut stolen = 0;
    for seed in 0..10 {
        let mut o = opts(4, 256, Some(seed + 1));
        o.work_steal = true;
        let r = run_bounded(bytes.clone(), vec![], o, Duration::from_secs(60)).unwrap();
        assert!(r.checked);
        assert_eq!(r.per_aicpu[0], 400);
        stolen += r.stolen;
    }
    assert!(stolen > 0, "no task was ever stolen");
}

/// Cores run their task's kernel, looked up by name; names not registered run the default
/// kernel (nothing). Every call names the task's kernel, the pool it was declared for and the
/// AICPU that owns the task — and a kernel that takes its time (yields, sleeps) changes nothing
/// the check can see.
#[test]
fn cores_run_the_kernels_registered_by_name() {
    use ptovm_host_sim::kernel::{Call, KernelError, Registry};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    let bytes = example("llama_layer.pto");
    let n = 8u32;
    let v = verify(&bytes).unwrap();
    let vals = [Value::Scalar(n), Value::Scalar(64), Value::Scalar(176)];
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let reference = ptovm_host_sim::reference_expand(&v, &p, 3, u64::MAX).unwrap();
    // The reference's tasks by kernel name.
    let name_of = |k: u16| {
        let e = &v.kernels()[k as usize];
        v.name(e.name_off.get(), e.name_len.get() as u32)
            .to_string()
    };
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for t in &reference {
        *want.entry(name_of(t.kernel)).or_default() += 1;
    }

    let calls: &'static Mutex<Vec<(u64, String, ptovm_vm::Pool, u32)>> =
        Box::leak(Box::new(Mutex::new(Vec::new())));
    let record = move |c: &Call<'_>| -> Result<(), KernelError> {
        calls
            .lock()
            .unwrap()
            .push((c.task, c.name.to_string(), c.pool, c.aicpu));
        Ok(())
    };
    let mut kernels = Registry::new();
    for name in ["qk_matmul", "online_softmax", "pv_matmul", "rmsnorm"] {
        kernels.register(name, record);
    }
    // A slow kernel: yields and sleeps, so completions arrive late and out of order.
    kernels.register("matmul_o", move |c: &Call<'_>| {
        record(c)?;
        std::thread::yield_now();
        std::thread::sleep(Duration::from_micros(50 * (c.task % 3)));
        Ok(())
    });
    assert_eq!(kernels.names().len(), 5);
    let mut o = opts(3, 16, None);
    o.threads = 2;
    let r = sim::run_with_kernels(v, p, o, None, &kernels).unwrap();
    assert!(r.checked);
    assert_eq!(r.tasks_total, reference.len() as u64);

    let calls = calls.lock().unwrap();
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for (task, name, pool, aicpu) in calls.iter() {
        let t = &reference[*task as usize];
        assert_eq!(name, &name_of(t.kernel), "task {task}");
        assert_eq!(*pool, t.pool, "task {task}");
        assert_eq!(*aicpu, t.owner, "task {task}");
        *got.entry(name.clone()).or_default() += 1;
    }
    // Each registered kernel ran once per task of its name; the others never called it.
    for name in [
        "qk_matmul",
        "online_softmax",
        "pv_matmul",
        "rmsnorm",
        "matmul_o",
    ] {
        assert_eq!(got.get(name), want.get(name), "{name}");
    }
    assert_eq!(got.len(), 5);
    assert_eq!(calls.len(), got.values().sum::<usize>());
}
