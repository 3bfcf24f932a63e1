//! Reading a tensor back (`wait T <= bound`, spec/pto.md §4.7, spec/runtime.md §4.5): every
//! AICPU waits at the same point until every task before it has completed, reads the tensor
//! its tasks wrote, and continues with those values as a runtime array that drives later axes.
//! Checked in the adversarial interleavings of `tests/src/sched.rs` — the values read decide
//! the tasks (against the reference expander given the same values), every read comes after
//! every earlier task ended and every later task starts after it — in threaded runs, and
//! through every way of getting it wrong: located errors at assembly, the verifier's, typed
//! errors at launch and when the values are out of range.

use ptovm_assembler::{assemble, DiagKind, Options};
use ptovm_host_sim::sim;
use ptovm_host_sim::{check_run, reference_expand_with, RefTask};
use ptovm_tests::sched::{config, run_with, Extra, Run};
use ptovm_tests::{Params, ROUTED};
use ptovm_vm::readback::Readback;
use ptovm_vm::{verify, ParamKind, RunError, RuntimeParams, Value};

/// A run in the adversarial interleavings of `seed` (its scheduling knobs too), a `READBACK`
/// of each listed tensor reading `memory`'s values.
fn reading(
    bytes: &[u8],
    params: &Params,
    n: u32,
    window: u32,
    seed: u64,
    memory: Vec<(u16, Vec<u32>)>,
) -> Result<Run, String> {
    let extra = Extra {
        arena: None,
        memory,
        ..Extra::default()
    };
    run_with(
        bytes,
        params,
        (n, window),
        config(seed, window),
        seed,
        extra,
    )
}

fn code(src: &str) -> Vec<u8> {
    assemble("rb.pto", src, &Options::default()).unwrap().bytes
}

fn params() -> Params {
    vec![
        (ParamKind::Scalar, 8, vec![]),
        (ParamKind::Scalar, 4, vec![]),
        (ParamKind::Array, 0, vec![2, 0, 3, 1]),
    ]
}

/// The reference expansion whose `READBACK`s read `memory` (by tensor; others keep the
/// launch's values).
fn reference(bytes: &[u8], params: &Params, n: u32, memory: &[(u16, Vec<u32>)]) -> Vec<RefTask> {
    let v = verify(bytes).unwrap();
    let vals = ptovm_tests::values(params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let mut read = |rb: &Readback, _: &[RefTask]| {
        memory
            .iter()
            .find(|(t, _)| *t == rb.tensor)
            .map(|(_, m)| m.clone())
    };
    reference_expand_with(&v, &p, n, u64::MAX, &mut read).unwrap()
}

/// Every read at the barrier comes after every task before it ended (`before` tasks), and
/// every task after it starts after every read.
fn barrier_holds(r: &Run, before: u64, n: u32) -> Result<(), String> {
    if r.reads.len() != n as usize {
        return Err(format!("{} reads for {n} AICPUs", r.reads.len()));
    }
    let last_end = r.ran[..before as usize]
        .iter()
        .map(|t| t.1)
        .max()
        .unwrap_or(0);
    let first_read = r.reads.iter().map(|x| x.1).min().unwrap();
    let last_read = r.reads.iter().map(|x| x.1).max().unwrap();
    if first_read < last_end {
        return Err(format!(
            "a read at {first_read} before a task ended at {last_end}"
        ));
    }
    if let Some(t) = r.ran[before as usize..].iter().find(|t| t.0 < last_read) {
        // A later task may start before another AICPU has read, but not before its own
        // AICPU's read; the others' reads only need all earlier tasks ended.
        let own = r.reads.iter().find(|x| x.0 == t.3).map_or(0, |x| x.1);
        if t.0 < own {
            return Err(format!(
                "a task started at {} before its AICPU read at {own}",
                t.0
            ));
        }
    }
    Ok(())
}

#[test]
fn the_values_read_back_decide_the_tasks_in_any_interleaving() {
    let bytes = code(ROUTED);
    let counts = 1u16; // tensor index of `counts`
    for seed in 0..300u64 {
        let n = [1u32, 2, 3, 6][seed as usize % 4];
        let window = [1u32, 2, 8, 64][(seed / 4) as usize % 4];
        // Read back: all on one expert, none anywhere, the launch's, or a mix.
        let memory: Vec<u32> = match seed % 4 {
            0 => vec![0, 8, 0, 0],
            1 => vec![0, 0, 0, 0],
            2 => vec![2, 0, 3, 1],
            _ => vec![(seed % 9) as u32, 1, 8, (seed % 5) as u32],
        };
        let cfg = config(seed, window);
        let r = reading(
            &bytes,
            &params(),
            n,
            window,
            seed,
            vec![(counts, memory.clone())],
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
        let want = reference(&bytes, &params(), n, &[(counts, memory.clone())]);
        assert_eq!(
            r.ran.len(),
            8 + memory.iter().sum::<u32>() as usize,
            "seed {seed}"
        );
        check_run(&want, &r.ran).unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
        barrier_holds(&r, 8, n).unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
        // The expert tasks follow the values read, not the launch's.
        let experts: Vec<i64> = want[8..].iter().map(|t| t.params[0]).collect();
        let mut expect = vec![];
        for (e, &c) in memory.iter().enumerate() {
            expect.extend(std::iter::repeat_n(e as i64, c as usize));
        }
        assert_eq!(experts, expect);
    }
}

#[test]
fn values_out_of_range_stop_the_run() {
    let bytes = code(ROUTED);
    for (memory, want_value) in [(vec![0, 9, 0, 0], 9i64), (vec![0, 0, u32::MAX, 0], -1)] {
        let Err(e) = reading(&bytes, &params(), 2, 4, 0, vec![(1, memory)]) else {
            panic!("values out of range were accepted");
        };
        let want = RunError::ReadbackRange {
            pc: 5,
            slot: 2,
            index: if want_value == 9 { 1 } else { 2 },
            value: want_value,
            bound: 8,
        };
        assert_eq!(e, want.to_string());
    }
    // A read-back indptr that decreases: the launch's rule for sparse axes, at the barrier.
    let src = "
@param E = 2
@param ptr = [0, 1, 2]
@param idx = [0, 1]
@tensor ptr: u32[3]
@tensor idx: u32[2]
@kernel route(e): vector(out p, out i)
@kernel expert(e, t): vector()
@workload w(%ex: dense_dyn(E)) {
  task @route(0) resources(ptr, idx)
  wait ptr <= 2
  wait idx <= 1
  parallel_for e in %ex { select t in sparse_row(e, ptr, idx) { task @expert(e, t) } }
}";
    let b = code(src);
    let p = vec![
        (ParamKind::Scalar, 2, vec![]),
        (ParamKind::Array, 0, vec![0, 1, 2]),
        (ParamKind::Array, 0, vec![0, 1]),
    ];
    let Err(e) = reading(&b, &p, 1, 4, 0, vec![(0, vec![0, 2, 1])]) else {
        panic!("a decreasing indptr was accepted");
    };
    assert!(e.contains("decreases at index 2"), "{e}");
    // Both read back, fine: expert 0 gets tokens 1 and 0, expert 1 none.
    let r = reading(&b, &p, 2, 4, 1, vec![(0, vec![0, 2, 2]), (1, vec![1, 0])]).unwrap();
    let want = reference(&b, &p, 2, &[(0, vec![0, 2, 2]), (1, vec![1, 0])]);
    check_run(&want, &r.ran).unwrap();
    let got: Vec<Vec<i64>> = want[1..].iter().map(|t| t.params.clone()).collect();
    assert_eq!(got, [vec![0, 1], vec![0, 0]]);
    // Two READBACKs: two barriers, each AICPU reads at both.
    assert_eq!(r.reads.len(), 4);
}

#[test]
fn threaded_runs_keep_the_launchs_values_without_memory() {
    let bytes = code(ROUTED);
    for aicpus in [1, 2, 6] {
        for window in [1, 8, 1024] {
            let v = verify(&bytes).unwrap();
            let vals = [
                Value::Scalar(8),
                Value::Scalar(4),
                Value::Array(&[1, 5, 0, 2]),
            ];
            let p = RuntimeParams::new(&v, &vals).unwrap();
            let o = sim::Options {
                aicpus,
                cube: 2 * aicpus,
                vector: 2 * aicpus,
                window,
                check: true,
                jitter: Some(aicpus as u64 + window as u64),
                work_steal: aicpus == 2,
                cores: [sim::CoreAlloc::Shared, sim::CoreAlloc::Partition][aicpus as usize % 2],
                ..sim::Options::default()
            };
            let r = sim::run(v, p, o).unwrap_or_else(|e| panic!("{o:?}: {e}"));
            assert!(r.checked);
            assert_eq!(r.tasks_total, 8 + 8);
            assert_eq!(r.read_back, [vec![1, 5, 0, 2]]);
        }
    }
}

#[test]
fn the_work_bound_uses_the_bound() {
    let bytes = code(ROUTED);
    let v = verify(&bytes).unwrap();
    let vals = [
        Value::Scalar(8),
        Value::Scalar(4),
        Value::Array(&[0, 0, 0, 0]),
    ];
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let b = ptovm_vm::Interpreter::new(v, p, 0, 1).unwrap().work_bound();
    // 8 routers, and up to 8 tasks for each of the 4 experts whatever the launch says.
    assert!(b.tasks >= 8 + 4, "{b:?}");
    assert!(b.iterations >= 8 + 4 + 4 * 8, "{b:?}");
}

fn asm_error(src: &str) -> (DiagKind, String, usize) {
    let e = assemble("e.pto", src, &Options::default()).unwrap_err();
    (e.0.kind, e.0.message.clone(), e.0.line)
}

#[test]
fn misplaced_waits_and_early_reads_are_located_errors() {
    let in_loop = ROUTED.replace(
        "  wait counts <= T\n",
        "  parallel_for z in dense[1] { wait counts <= T }\n",
    );
    assert!(asm_error(&in_loop).1.contains("top level of the workload"));
    let in_cond = ROUTED.replace(
        "  wait counts <= T\n",
        "  cond T > 0 { wait counts <= T }\n",
    );
    assert!(asm_error(&in_cond).1.contains("top level of the workload"));
    let early = ROUTED.replace(
        "  parallel_for t in %tok { task @route(t) resources(x[t], counts) }\n",
        "  parallel_for t in %tok { task @route(counts[0]) resources(x[t], counts) }\n",
    );
    let (_, m, line) = asm_error(&early);
    assert!(m.contains("read it after that statement"), "{m}");
    assert_eq!(line, 11);
    let planned = ROUTED.replace(
        "@param E = 4",
        "@param E = 4\n@plan most = max(e in 0 .. E: counts[e])",
    );
    assert!(asm_error(&planned).1.contains("cannot read it"));
    let float = ROUTED.replace("@tensor counts: i32[E]", "@tensor counts: f32[E]");
    assert!(asm_error(&float).1.contains("must be i32 or u32"));
    let unknown = ROUTED.replace("wait counts <= T", "wait tallies <= T");
    assert_eq!(asm_error(&unknown).0, DiagKind::UnknownName);
    let twice = ROUTED.replace(
        "  wait counts <= T\n",
        "  wait counts <= T\n  wait counts <= T\n",
    );
    assert_eq!(asm_error(&twice).0, DiagKind::DuplicateName);
    let looped_bound = ROUTED.replace("wait counts <= T", "wait counts <= t");
    let (kind, m, _) = asm_error(&looped_bound);
    assert_eq!(kind, DiagKind::Type);
    assert!(
        m.contains("`t` is a loop variable; a `wait`'s bound"),
        "{m}"
    );
}

#[test]
fn the_verifier_and_the_launch_refuse_what_the_format_forbids() {
    // A READBACK inside a loop, written as a listing.
    let listing = ptovm_assembler::disassemble(&code(ROUTED)).unwrap();
    // Turning the loop's end past the READBACK puts it inside the loop.
    let moved = listing.replace(
        ".code\n     0  PARALLEL_FOR axis=0 end=5",
        ".code\n     0  PARALLEL_FOR axis=0 end=6",
    );
    let e = assemble("l.ptol", &moved, &Options::default()).unwrap_err();
    assert!(
        e.0.message.contains("READBACK inside a loop"),
        "{}",
        e.0.message
    );
    // The stand-in must have one entry per element of the tensor.
    let bytes = code(ROUTED);
    let v = verify(&bytes).unwrap();
    let vals = [Value::Scalar(8), Value::Scalar(4), Value::Array(&[1, 2, 3])];
    let e = RuntimeParams::new(&v, &vals).unwrap_err();
    assert_eq!(
        e,
        ptovm_vm::ParamError::Readback {
            slot: 2,
            len: 3,
            elems: 4
        }
    );
    // Five experts' counts from an array of four: refused at launch, and by `ptovm run`.
    let vals = [
        Value::Scalar(8),
        Value::Scalar(5),
        Value::Array(&[1, 2, 3, 4]),
    ];
    assert!(matches!(
        RuntimeParams::new(&v, &vals),
        Err(ptovm_vm::ParamError::Readback { elems: 5, .. })
    ));
}

/// Rows' joins (spec/runtime.md §4.7) are not shared in a program with a `READBACK`: the
/// tables are laid out again after it, over words a join word could be read from. Two
/// all_to_all loops around a `READBACK` still use joins, each AICPU its own, and run correctly.
#[test]
fn a_program_with_a_readback_shares_no_rows_joins() {
    let src = "@param W = 20\n@param T = 5\n@param E = 2\n@param counts = [1, 1]\n\
        @tensor counts: i32[E]\n@tensor G: f32[T, W]\n@tensor H: f32[T, W]\n\
        @kernel count(): vector(out counts)\n@kernel first(t, i): vector(out g)\n\
        @kernel step(t, i): vector(in a, out g)\n\
        @workload w(%steps: dense_dyn(T), %points: dense_dyn(W)) {\n\
          for_each t in %steps { parallel_for i in %points {\n\
            cond t == 0 { task @first(t, i) resources(G[t, i]) }\n\
            else { task @step(t, i) resources(G[t - 1, 0 : W], G[t, i]) } } }\n\
          task @count() resources(counts)\n\
          wait counts <= T\n\
          for_each t in %steps { parallel_for i in %points {\n\
            cond t == 0 { task @first(t, i) resources(H[t, i]) }\n\
            else { task @step(t, i) resources(H[t - 1, 0 : W], H[t, i]) } } }\n\
        }\n";
    let bytes = code(src);
    let v = verify(&bytes).unwrap();
    // The module's defaults: W = 20 (rows wide enough for joins), T = 5, counts = [1, 1].
    let bound = ptovm_host_sim::Defaults::new(&v, &[]).unwrap();
    let vals = bound.values();
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let (mut joined, mut shared) = (0, 0);
    for seed in 0..6u64 {
        let mut o = sim::Options::of_program(&v, 24, 48, ptovm_host_sim::DepMode::Overlap);
        o.window = [1024, 64][seed as usize % 2];
        o.check = true;
        o.jitter = Some(seed);
        let r = sim::run(v, p, o).unwrap_or_else(|e| panic!("{o:?}: {e}"));
        assert!(r.checked);
        assert_eq!(r.tasks_total, 2 * 5 * 20 + 1);
        joined += r.joined_reads;
        shared += r.shared_joined_reads;
    }
    assert!(joined > 0, "no joins");
    assert_eq!(shared, 0);
}
