//! The runtime protocol's model (host-sim/src/model.rs, spec/runtime.md): over random programs,
//! AICPU counts, window sizes down to 1 and random interleavings, every run completes and passes
//! the check; the naïve protocol (no watermark wait) is caught by the same check.

use proptest::prelude::*;
use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::model::{run, ModelConfig, ModelError, WindowMode};
use ptovm_tests::{gen_params, values, Gen};
use ptovm_vm::{verify, RuntimeParams, Value};

fn cfg(aicpus: u32, window: usize, seed: u64) -> ModelConfig {
    ModelConfig {
        aicpus,
        cube: 2,
        vector: 3,
        window,
        mode: WindowMode::Stall,
        seed,
        naive: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_complete_and_respect_every_edge(
        seed in any::<u64>(),
        aicpus in 1u32..=8,
        window in prop::sample::select(vec![1usize, 2, 3, 4, 16]),
    ) {
        let src = Gen::runnable(seed).module();
        let out = assemble("gen.pto", &src, &Options::default()).unwrap();
        let v = verify(&out.bytes).unwrap();
        let owned = gen_params(&out.module, seed);
        let vals = values(&owned);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        match run(v, p, cfg(aicpus, window, seed)) {
            Ok(_) | Err(ModelError::Launch(_)) => {}
            Err(e) => panic!("{e}\n{src}"),
        }
    }
}

fn llama(n: u32) -> (Vec<u8>, u32) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto");
    let out = assemble(
        "l",
        &std::fs::read_to_string(path).unwrap(),
        &Options::default(),
    )
    .unwrap();
    (out.bytes, n)
}

#[test]
fn llama_layer_runs_on_six_aicpus_with_small_windows() {
    let (bytes, n) = llama(6);
    let v = verify(&bytes).unwrap();
    let vals = [Value::Scalar(n)];
    let p = RuntimeParams::new(&v, &vals).unwrap();
    for (window, seed) in [(1, 1), (2, 2), (4, 3), (64, 4)] {
        let r = run(v, p, cfg(6, window, seed)).unwrap_or_else(|e| panic!("window {window}: {e}"));
        assert_eq!(r.tasks, 3 * 36 + 16 * 6);
        assert!(r.cross_edges <= r.edges);
    }
}

#[test]
fn static_partition_with_a_window_of_one_does_not_deadlock() {
    // The last AICPU's first task comes last in id order: without staged watermarks this would
    // deadlock (spec/runtime.md §3.1).
    let src = "@workload w() { for_each i in dense[8] { task @k(i) resources(A) } }\n@schedule s for w { dispatch = static(i) }";
    let out = assemble("s", src, &Options::default()).unwrap();
    let v = verify(&out.bytes).unwrap();
    let p = RuntimeParams::new(&v, &[]).unwrap();
    for seed in 0..50 {
        let r = run(v, p, cfg(4, 1, seed)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(r.tasks, 8);
        // Edges are registered only on predecessors still running at lookup: at most the chain's 7,
        // of which at most 3 cross between the 4 blocks.
        assert!(r.edges <= 7 && r.cross_edges <= 3, "{r:?}");
    }
}

#[test]
fn the_naive_protocol_is_caught() {
    // A producer on AICPU 1 (odd i), a consumer of the same tile on AICPU 0 (next even i): with
    // no watermark wait, AICPU 0 often looks the region up before AICPU 1 recorded the write.
    let src = &ptovm_tests::hazard(64);
    let out = assemble("n", src, &Options::default()).unwrap();
    let v = verify(&out.bytes).unwrap();
    let p = RuntimeParams::new(&v, &[]).unwrap();
    let mut caught = 0;
    for seed in 0..40 {
        let mut c = cfg(2, 8, seed);
        run(v, p, c).unwrap_or_else(|e| panic!("the real protocol must pass: {e}"));
        c.naive = true;
        match run(v, p, c) {
            Err(ModelError::Check(msg)) => {
                assert!(msg.contains("before its predecessor"), "{msg}");
                caught += 1;
            }
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        caught >= 10,
        "the naïve protocol was caught in only {caught} of 40 interleavings"
    );
}

#[test]
fn window_modes() {
    let (bytes, n) = llama(3);
    let v = verify(&bytes).unwrap();
    let vals = [Value::Scalar(n)];
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let mut c = cfg(2, 1, 7);
    c.mode = WindowMode::Abort;
    match run(v, p, c) {
        Err(ModelError::WindowAbort { aicpu, window: 1 }) => assert!(aicpu < 2),
        other => panic!("expected a window abort, got {other:?}"),
    }
    c.mode = WindowMode::Benchmark;
    let r = run(v, p, c).unwrap();
    assert!(r.overflows > 0);
    assert_eq!(r.tasks, 3 * 9 + 16 * 3);
    c.mode = WindowMode::Stall;
    assert!(run(v, p, c).unwrap().window_stalls > 0);
}
