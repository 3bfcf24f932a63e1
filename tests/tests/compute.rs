//! Computing runs (spec/runtime.md §3.9): the bundled examples compute on real data with the
//! simulator's kernel library, and their answer is the same bits on every schedule as in
//! program order, and close to an independent model.

use std::time::Duration;

use ptovm_host_sim::compute::{self, kernels, DataError};
use ptovm_host_sim::kernel::{Call, KernelError, Registry};
use ptovm_host_sim::sim::{self, IssueTiming, SimError, Start};
use ptovm_host_sim::DepMode;
use ptovm_tests::{assemble_named, example_params, example_source, values, Params};
use ptovm_vm::{verify, RuntimeParams};

/// The examples that compute (control.pto's kernels are not in the library: see
/// `a_kernel_the_library_lacks_is_an_error`), with a loop variable for dispatch expressions and
/// a runtime scalar for `threshold`.
const COMPUTING: [(&str, &str, &str); 7] = [
    ("attention.pto", "b", "batch"),
    ("llama_layer.pto", "t", "N"),
    ("moe.pto", "e", "T"),
    ("moe_routed.pto", "e", "T"),
    ("flash_decode.pto", "b", "B"),
    ("decode_planned.pto", "b", "B"),
    ("deepseek_indexer.pto", "t", "S"),
];

fn opts(aicpus: u32, window: usize) -> sim::Options {
    sim::Options {
        aicpus,
        cube: 12,
        vector: 12,
        window,
        check: true,
        ..sim::Options::default()
    }
}

/// Example `name` with its small parameters, the schedule's `dispatch = …` line replaced by
/// `dispatch` when given.
fn program(name: &str, dispatch: Option<&str>) -> (Vec<u8>, Params) {
    let (_, given) = example_params()
        .into_iter()
        .find(|(n, _)| *n == name)
        .expect("an example");
    let mut src = example_source(name);
    if let Some(d) = dispatch {
        let line = src
            .lines()
            .find(|l| l.trim_start().starts_with("dispatch ="))
            .expect("a dispatch line")
            .to_string();
        src = src.replace(&line, &format!("  dispatch = {d}"));
    }
    assemble_named(name, &src, &given)
}

fn compute(
    code: &[u8],
    params: &Params,
    o: sim::Options,
    seed: u64,
) -> Result<compute::Computed, DataError> {
    let v = verify(code).unwrap();
    let vals = values(params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    compute::run(v, p, o, None, &kernels::library(), seed)
}

/// The answer must not depend on the AICPU count or the window: each run is compared bit for
/// bit with the in-order run, and the outputs with the workload's model.
#[test]
fn every_example_computes_its_model_on_any_aicpus_and_window() {
    for (name, _, _) in COMPUTING {
        let (code, params) = program(name, None);
        for aicpus in [1, 2, 6] {
            for window in [1, 4, 1024] {
                let c = compute(&code, &params, opts(aicpus, window), 1)
                    .unwrap_or_else(|e| panic!("{name}, {aicpus} AICPUs, window {window}: {e}"));
                assert!(c.report.checked);
                let (_, compared) = c
                    .model
                    .as_ref()
                    .expect("every computing example has a model");
                assert!(!compared.is_empty());
                for x in compared {
                    assert!(x.ok(), "{name}: {x:?}");
                    // Not a trivial answer: the outputs were written, and are not all zero.
                    let t = c.memory.tensor(&x.tensor).unwrap();
                    assert!(
                        (0..t.len()).any(|i| t.get(i) != 0.0),
                        "{name}: {} is zero",
                        t.name
                    );
                }
            }
        }
    }
}

/// Dispatch policies, start policies, stealing, batched dependency release, batched issue and
/// random yields change when and where tasks run, never the answer.
#[test]
fn every_schedule_knob_leaves_the_answer_unchanged() {
    for (name, var, scalar) in COMPUTING {
        let policies = [
            "round_robin(3)".to_string(),
            format!("affinity({var})"),
            format!("hash({var} * 7 + 1)"),
            format!("static({var})"),
            "work_steal".to_string(),
            format!("dispatch_by({var} % 2)"),
            format!("threshold({scalar}, 2: static({var}), affinity({var}))"),
        ];
        for (i, policy) in policies.iter().enumerate() {
            let (code, params) = program(name, Some(policy));
            let mut o = opts(3, 16);
            o.jitter = Some(i as u64 + 1);
            o.start = [
                Start::Immediate,
                Start::AfterOrchestration,
                Start::Threshold(5),
            ][i % 3];
            o.work_steal = i % 2 == 0;
            o.batch_deps = [0, 4][i % 2];
            o.timing = [IssueTiming::Immediate, IssueTiming::Batched(4)][(i / 2) % 2];
            if o.start == Start::AfterOrchestration {
                o.window = 1024;
            }
            let c = compute(&code, &params, o, 2)
                .unwrap_or_else(|e| panic!("{name} with dispatch {policy}, {o:?}: {e}"));
            assert!(c.ok(), "{name} with dispatch {policy}: {:?}", c.model);
        }
    }
}

/// The model is met for several seeds, and the errors are far inside the tolerances (which
/// are stated per element type, `models::tolerance`).
#[test]
fn the_models_hold_for_other_seeds() {
    for (name, _, _) in COMPUTING {
        let (code, params) = program(name, None);
        for seed in [3, 4, 5] {
            let c = compute(&code, &params, opts(2, 64), seed).unwrap();
            for x in &c.model.as_ref().unwrap().1 {
                assert!(x.max_rel < x.tolerance / 2.0, "{name}, seed {seed}: {x:?}");
            }
        }
    }
}

/// A module that computes something else than its model claims is caught: the attention
/// kernel replaced by one that writes its head's query.
#[test]
fn a_module_that_does_not_compute_its_model_fails_it() {
    let (code, params) = program("attention.pto", None);
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let mut k = kernels::library();
    k.register("attn_kernel", |c: &Call<'_>| -> Result<(), KernelError> {
        let d = c.descriptor();
        let [q, _, _, o] = c.views(&d)?;
        o.store(&q.load())
    });
    let c = compute::run(v, p, opts(2, 64), None, &k, 1).unwrap();
    assert!(!c.ok());
    let (_, compared) = c.model.unwrap();
    assert!(compared[0].max_rel > 0.1, "{compared:?}");
}

/// The in-order comparison catches a dependency the schedule did not respect. Each `w(i)`
/// writes row i of X, slowly, on AICPU 0; `r` then sums all of X, on AICPU 1. With `exact`
/// dependencies (pto-isa's map: equal regions only) `r` does not wait for the rows and reads
/// them unwritten; with `overlap` dependencies it waits, and the run is right.
#[test]
fn a_missed_dependency_changes_the_answer_and_is_caught() {
    let src = "@tensor X: f32[4, 4]\n@tensor Y: f32[1]\n\
        @kernel w(i): vector(out x)\n@kernel r(): vector(in x, out y)\n\
        @workload k() {\n\
          parallel_for i in dense[4] { task @w(i) resources(X[i]) }\n\
          dispatch affinity(1) { task @r() resources(X, Y) }\n\
        }\n@schedule s for k { dispatch = affinity(0) }";
    let (code, params) = assemble_named("missed.pto", src, &[]);
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let mut k = Registry::new();
    k.register("w", |c: &Call<'_>| -> Result<(), KernelError> {
        let d = c.descriptor();
        let [x] = c.views(&d)?;
        if c.aicpu == 0 && c.core != 0 {
            // Only the threaded run is slow (the in-order run is on "core 0" of AICPU 0).
            std::thread::sleep(Duration::from_millis(30));
        }
        x.store(&vec![d.params[0] as f32 + 1.0; x.len()])
    });
    k.register("r", |c: &Call<'_>| -> Result<(), KernelError> {
        let d = c.descriptor();
        let [x, y] = c.views(&d)?;
        y.store(&[x.load().iter().sum()])
    });
    let mut o = opts(2, 64);
    o.check = false;
    o.cube = 2;
    o.vector = 4;
    o.deps = DepMode::Overlap;
    let c = compute::run(v, p, o, None, &k, 1).unwrap();
    assert_eq!(c.memory.tensor("Y").unwrap().get(0), 40.0);
    o.deps = DepMode::Exact;
    match compute::run(v, p, o, None, &k, 1) {
        Err(DataError::Differs { at, .. }) => assert_eq!(at, "Y[0]"),
        other => panic!("{other:?}"),
    }
}

/// A kernel the library lacks is an error before anything runs (control.pto's kernels are
/// not in it); the no-op mode of `sim::run` still runs that module.
#[test]
fn a_kernel_the_library_lacks_is_an_error() {
    let (code, params) = program("control.pto", None);
    match compute(&code, &params, opts(3, 64), 1) {
        Err(DataError::MissingKernel { kernel }) => assert_eq!(kernel, "forward"),
        other => panic!("{other:?}"),
    }
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    assert!(sim::run(v, p, opts(3, 64)).is_ok());
}

/// A kernel's failure names the task and the kernel and stops every AICPU (the run returns,
/// it does not hang): here the matmul of a module whose weight does not fit its input.
#[test]
fn a_failing_kernel_stops_the_run_with_its_task() {
    let src = "@tensor X: f32[64, 8]\n@tensor W: f32[7, 8]\n@tensor Y: f32[64, 8]\n\
        @kernel matmul(t): cube(in x, in w, out y)\n\
        @workload k() { parallel_for t in dense[64] { task @matmul(t) resources(X[t], W, Y[t]) } }\n\
        @schedule s for k { dispatch = round_robin(4) }";
    let (code, params) = assemble_named("bad.pto", src, &[]);
    for aicpus in [1, 4] {
        let e = compute(&code, &params, opts(aicpus, 8), 1).unwrap_err();
        let DataError::Sim(SimError::Kernel {
            task,
            kernel,
            message,
        }) = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(kernel, "matmul");
        assert_eq!(*task, 0, "the in-order run fails first, at the first task");
        assert!(message.contains("region 2 (Y [1, 8])"), "{message}");
        assert!(message.contains("1×8 by 7×8"), "{message}");
    }
    // The threaded run's own failure: a kernel that fails only there (not on core 0 of AICPU 0).
    let (code, params) = program("llama_layer.pto", None);
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let mut k = kernels::library();
    k.register("residual", |c: &Call<'_>| -> Result<(), KernelError> {
        if c.core != 0 || c.aicpu != 0 {
            return Err(KernelError::new("the core reports a fault"));
        }
        kernels::residual(c)
    });
    let e = compute::run(v, p, opts(6, 4), None, &k, 1).unwrap_err();
    assert!(
        matches!(&e, DataError::Sim(SimError::Kernel { kernel, message, .. }) if kernel == "residual" && message == "the core reports a fault"),
        "{e:?}"
    );
}

/// A NaN in a written tensor is an error that names the element; infinities are reported.
#[test]
fn a_nan_output_is_an_error_and_infinities_are_reported() {
    // Doubling a value 40 times overflows f16 (largest finite value 65504) to ±∞; RMSNorm of
    // such a row is ∞/∞ = NaN.
    let doubled = "@tensor A: f16[2, 4]\n@tensor X: f16[2, 4]\n@tensor Y: f16[2, 4]\n\
        @kernel residual(i): vector(in x, inout y)\n@kernel rmsnorm(i): vector(in x, out y)\n\
        @workload k() {\n\
          task @residual(0) resources(A, X)\n\
          for_each i in dense[40] { task @residual(i) resources(X, X) }\n";
    let (code, params) = assemble_named("inf.pto", &format!("{doubled}}}"), &[]);
    let c = compute(&code, &params, opts(2, 8), 1).unwrap();
    assert_eq!(
        c.infinities,
        vec![("X".to_string(), 8, "X[0, 0]".to_string())]
    );
    let src = format!("{doubled}  task @rmsnorm(0) resources(X, Y)\n}}");
    let (code, params) = assemble_named("nan.pto", &src, &[]);
    match compute(&code, &params, opts(2, 8), 1) {
        Err(DataError::NaN { tensor, at }) => {
            assert_eq!(tensor, "Y");
            assert_eq!(at, "Y[0, 0]");
        }
        other => panic!("{other:?}"),
    }
}

/// A tensor too big for a computing run is refused before anything is allocated.
#[test]
fn tensors_too_big_are_refused() {
    let (code, mut params) = program("moe.pto", None);
    let v = verify(&code).unwrap();
    let m = ptovm_assembler::Module::decode(&v);
    for (slot, name) in m.params.iter().map(|s| s.name.as_str()).enumerate() {
        if name == "D" || name == "F" {
            params[slot].1 = 1 << 20;
        }
    }
    match compute(&code, &params, opts(2, 8), 1) {
        Err(DataError::TooBig { bytes, limit }) => assert!(bytes > limit),
        other => panic!("{other:?}"),
    }
}

/// A written tensor as `.npy`: NumPy's header (format 1.0, dtype, shape, row-major) and the
/// elements' bits.
#[test]
fn written_tensors_save_as_npy() {
    let (code, params) = program("flash_decode.pto", None);
    let c = compute(&code, &params, opts(2, 64), 1).unwrap();
    let out = c.memory.tensor("out").unwrap();
    let bytes = out.npy().unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(header.contains("'descr': '<f2'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    assert!(header.contains("'shape': (3, 32, 128, )"), "{header}");
    let data = &bytes[10 + header_len..];
    assert_eq!(data.len(), out.len() * 2);
    for i in [0, 1, out.len() / 2, out.len() - 1] {
        assert_eq!(
            u64::from(u16::from_le_bytes([data[2 * i], data[2 * i + 1]])),
            out.bits(i)
        );
    }
    // bf16 (which NumPy lacks) is written as f32, exactly.
    let (code, params) = program("moe.pto", None);
    let c = compute(&code, &params, opts(2, 64), 1).unwrap();
    let y = c.memory.tensor("out").unwrap();
    let bytes = y.npy().unwrap();
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(header.contains("'descr': '<f4'"), "{header}");
    let data = &bytes[10 + header_len..];
    let first = f32::from_le_bytes(data[..4].try_into().unwrap());
    assert_eq!(first, y.get(0));
}

/// `examples/decode_planned.pto` (issue 20's FlashAttention decode): the chunk size planned on
/// the AICPU, tiles with a partial last chunk, a kernel tier per chunk, and a merge only for a
/// request of more than one chunk — checked against naive attention whatever the plan: split
/// (the defaults), at the search's lower bound (a machine of many blocks: chunks of
/// `min_chunk`), and no split at all (a machine too small for any split).
#[test]
fn the_planned_decode_computes_attention_under_every_plan() {
    use ptovm_tests::example;
    for (max_blocks, chunk, merges) in [(48u32, 22u32, 3usize), (1000, 8, 4), (4, 96, 0)] {
        let given = [("max_blocks", max_blocks, vec![])];
        let (code, params) = example("decode_planned.pto", &given);
        let v = verify(&code).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        // `chunk` is the third plan.
        assert_eq!(p.planned().values[2], chunk, "max_blocks {max_blocks}");
        let tasks = ptovm_host_sim::reference_expand(&v, &p, 4, 1 << 12).unwrap();
        let m = ptovm_assembler::Module::decode(&v);
        let named = |k: &str| {
            tasks
                .iter()
                .filter(|t| m.kernels[t.kernel as usize].name == k)
                .count()
        };
        // Requests of 0, 1, 40, 96, 17 and 64 tokens, 4 heads: a merge per split request and
        // head, and the chunks' tiers by their length.
        assert_eq!(named("merge_states"), merges * 4, "max_blocks {max_blocks}");
        for t in &tasks {
            let k = &m.kernels[t.kernel as usize].name;
            if k.starts_with("decode_chunk") {
                let tokens = t.io[1].ranges[2].1 - t.io[1].ranges[2].0;
                assert!(tokens > 0 && tokens <= chunk as i64);
                assert_eq!(k.ends_with("short"), tokens <= 16, "{k} of {tokens} tokens");
                assert_eq!(t.tier, u8::from(tokens > 16));
            }
        }
        for aicpus in [1, 4] {
            let c = compute(&code, &params, opts(aicpus, 16), 7).unwrap();
            for x in &c.model.as_ref().unwrap().1 {
                assert!(x.ok(), "max_blocks {max_blocks}: {x:?}");
            }
        }
    }
}

/// `examples/moe_routed.pto` (issue 20's MoE with on-device routing): the router's top-2
/// routing is computed by a task and read back (`wait`); the experts run over exactly the pairs
/// it chose — the default routing, every token on one expert (`hot`), and experts with no
/// token (`active`) — and the answer and the routing match the model.
#[test]
fn the_routed_moe_reads_its_routing_back_and_computes_the_model() {
    use ptovm_tests::example;
    for (given, expect) in [
        (vec![], None),
        (vec![("hot", 5u32, vec![])], Some((5usize, 0usize))),
        (vec![("active", 3, vec![])], Some((usize::MAX, 3))),
    ] {
        let (code, params) = example("moe_routed.pto", &given);
        for aicpus in [1, 3, 6] {
            let mut o = opts(aicpus, 8);
            o.jitter = Some(aicpus as u64);
            o.work_steal = aicpus == 3;
            let c = compute(&code, &params, o, 11).unwrap_or_else(|e| panic!("{given:?}: {e}"));
            assert!(c.report.checked);
            for x in &c.model.as_ref().unwrap().1 {
                assert!(x.ok(), "{given:?}: {x:?}");
            }
            // The routing read back: 16 tokens × 2 = 32 (expert, token) pairs, two expert
            // tasks each, and what `hot` and `active` ask for.
            let ptr = &c.report.read_back[0];
            assert_eq!(ptr.len(), 9);
            assert_eq!(ptr[8], 32);
            assert_eq!(c.report.tasks_total, 16 + 1 + 2 * 32 + 16);
            let count = |e: usize| (ptr[e + 1] - ptr[e]) as usize;
            match expect {
                Some((hot, _)) if hot < 8 => assert_eq!(count(hot), 16, "{ptr:?}"),
                Some((_, active)) => {
                    assert!((active..8).all(|e| count(e) == 0), "{ptr:?}");
                }
                None => {}
            }
        }
    }
}

/// `examples/deepseek_indexer.pto` (issue 20's DeepSeek V3.2 indexer attention, seed 002 §8):
/// the MLA and indexer prologs run in parallel (no edge joins them), the lightning indexer of
/// token t waits for the indexer prologs of tokens 0 ..= t only, the sparse attention of t for
/// t's indexer and the MLA prologs of tokens 0 ..= t — and the whole computes the model.
#[test]
fn the_deepseek_indexer_attention_has_the_seeds_dependencies_and_computes() {
    use ptovm_tests::example;
    let given = [("S", 12, vec![]), ("D", 32, vec![]), ("K", 6, vec![])];
    let (code, params) = example("deepseek_indexer.pto", &given);
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let tasks = ptovm_host_sim::reference_expand(&v, &p, 6, 1 << 12).unwrap();
    let m = ptovm_assembler::Module::decode(&v);
    let kernel = |id: u64| m.kernels[tasks[id as usize].kernel as usize].name.as_str();
    let token = |id: u64| tasks[id as usize].params[0];
    let mut preds: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for e in ptovm_host_sim::edges(&tasks, DepMode::Overlap) {
        preds.entry(e.to).or_default().push(e.from);
    }
    let s = 12;
    assert_eq!(tasks.len(), 4 * s);
    for t in &tasks {
        let mut from: Vec<(&str, i64)> = preds.get(&t.id).map_or(vec![], |p| {
            p.iter().map(|&f| (kernel(f), token(f))).collect()
        });
        from.sort();
        let tok = t.params[0];
        let want: Vec<(&str, i64)> = match kernel(t.id) {
            "mla_prolog" | "indexer_prolog" => vec![],
            "lightning_indexer" => {
                let mut w: Vec<(&str, i64)> = (0..=tok).map(|k| ("indexer_prolog", k)).collect();
                w.sort();
                w
            }
            _ => {
                let mut w: Vec<(&str, i64)> = (0..=tok).map(|k| ("mla_prolog", k)).collect();
                w.push(("lightning_indexer", tok));
                w.sort();
                w
            }
        };
        assert_eq!(from, want, "task {} {}({tok})", t.id, kernel(t.id));
    }
    // Computing: the top-6 of 12 keys, the first five queries with fewer (−1 padding).
    for aicpus in [1, 6] {
        let c = compute(&code, &params, opts(aicpus, 4), 3).unwrap();
        for x in &c.model.as_ref().unwrap().1 {
            assert!(x.ok(), "{x:?}");
        }
        let idx = c.memory.tensor("idx").unwrap();
        assert_eq!(idx.get(0), 0.0);
        assert_eq!(idx.get(1), -1.0, "query 0 has one key");
        assert!(
            (0..6).all(|i| idx.get(11 * 6 + i) >= 0.0),
            "query 11 has 12 keys"
        );
    }
}
