//! Hand-checked expansions: every opcode, axis kind and dispatch policy on small programs with
//! the expected task lists written out; counts of the LLaMA example; the work bound; one test
//! per runtime-parameter and runtime error.

use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{expand_aicpu, reference_expand, NEXT_TASK};
use ptovm_vm::interp::mix64;
use ptovm_vm::{
    verify, Interpreter, LaunchError, ParamError, RunError, RuntimeParams, Status, Value,
};

/// A parameter value by name: `S(n)` scalar, `A(&[..])` array.
enum P {
    S(u32),
    A(Vec<u32>),
}
use P::{A, S};

struct Prog {
    bytes: Vec<u8>,
    module: ptovm_assembler::Module,
}

fn prog(src: &str) -> Prog {
    let out = assemble("t.pto", src, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    Prog {
        bytes: out.bytes,
        module: out.module,
    }
}

impl Prog {
    /// The parameters `given` by name, in slot order; one not given takes the module's
    /// default.
    fn values<'a>(&'a self, given: &'a [(&str, P)]) -> Vec<Value<'a>> {
        self.module
            .params
            .iter()
            .map(|p| match given.iter().find(|(n, _)| *n == p.name) {
                Some((_, S(x))) => Value::Scalar(*x),
                Some((_, A(a))) => Value::Array(a),
                None => match (&p.default, p.kind) {
                    (Some(d), ptovm_vm::ParamKind::Scalar) => Value::Scalar(d[0]),
                    (Some(d), _) => Value::Array(d),
                    (None, _) => panic!("no value for {}", p.name),
                },
            })
            .collect()
    }

    /// Expands on `n` AICPUs; checks the partition against the reference; returns each AICPU's
    /// tasks as `(id, kernel name, params, regions)` strings.
    fn run(&self, given: &[(&str, P)], n: u32) -> Vec<Vec<String>> {
        let v = verify(&self.bytes).unwrap();
        let vals = self.values(given);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        let reference = reference_expand(&v, &p, n, 1 << 20).unwrap();
        let mut out = vec![];
        let mut all = 0;
        for i in 0..n {
            let e = expand_aicpu(v, p, i, n, usize::MAX, 1).unwrap();
            for t in &e.tasks {
                assert_eq!(t, &reference[t.id as usize]);
            }
            all += e.tasks.len();
            out.push(e.tasks.iter().map(|t| self.show(t)).collect());
        }
        assert_eq!(all, reference.len());
        out
    }

    fn show(&self, t: &ptovm_host_sim::RefTask) -> String {
        let k = &self.module.kernels[t.kernel as usize].name;
        let io: Vec<String> =
            t.io.iter()
                .map(|io| {
                    let name = &self.module.tensors[io.tensor as usize].name;
                    let dims: Vec<String> = io
                        .dims()
                        .iter()
                        .map(|(a, b)| {
                            if b - a == 1 {
                                a.to_string()
                            } else {
                                format!("{a}:{b}")
                            }
                        })
                        .collect();
                    let dir = match io.direction() {
                        ptovm_vm::Dir::In => "r",
                        ptovm_vm::Dir::Out => "w",
                        ptovm_vm::Dir::InOut => "rw",
                    };
                    format!("{dir}:{name}[{}]", dims.join(","))
                })
                .collect();
        let params: Vec<String> = t.params.iter().map(|p| p.to_string()).collect();
        format!("{} {k}({}) {}", t.id, params.join(","), io.join(" "))
            .trim_end()
            .to_string()
    }

    fn one(&self, given: &[(&str, P)]) -> Vec<String> {
        self.run(given, 1).remove(0)
    }
}

#[test]
fn dense_loops_params_and_regions() {
    let p = prog(
        "@tensor A: f32[2, 3]
         @kernel k(x, y, z): vector(in a, out b)
         @workload w() {
           parallel_for i in dense[2] {
             for_each j in dense_dyn(m) { task @k(i, 7, i * 10 + j) resources(A[i], A[i, j : j + 1]) }
           }
         }",
    );
    assert_eq!(
        p.one(&[("m", S(2))]),
        [
            "0 k(0,7,0) r:A[0] w:A[0,0]",
            "1 k(0,7,1) r:A[0] w:A[0,1]",
            "2 k(1,7,10) r:A[1] w:A[1,0]",
            "3 k(1,7,11) r:A[1] w:A[1,1]",
        ]
    );
    assert!(
        p.one(&[("m", S(0))]).is_empty(),
        "an empty dynamic axis runs no iteration"
    );
}

/// ptovm's per-row forms: `dense_dyn(lens[b])` is row b of a ragged array, `sparse_row(b, …)`
/// row b of a CSR matrix.
#[test]
fn row_axes() {
    let p = prog(
        "@workload w() {
           parallel_for b in dense[3] {
             for_each c in dense_dyn(lens[b]) { task @r(b, c) }
             select e in sparse_row(b, ptr, idx) { task @s(b, e) }
           }
         }",
    );
    let got = p.one(&[
        ("lens", A(vec![2, 0, 1])),
        ("ptr", A(vec![0, 1, 1, 3])),
        ("idx", A(vec![7, 4, 9])),
    ]);
    assert_eq!(
        got,
        ["0 r(0,0)", "1 r(0,1)", "2 s(0,7)", "3 r(2,0)", "4 s(2,4)", "5 s(2,9)"]
    );
}

/// PTO-WSP's forms, worked by hand: `ragged(outer, lens)` is one flattened axis of
/// `lens[0] + … + lens[outer − 1]` indices, and `sparse(outer, ptr, idx)` runs over
/// `idx[0 .. ptr[outer]]`.
#[test]
fn pto_wsp_flattened_axes() {
    let p = prog(
        "@workload w() {
           parallel_for b in dense[3] {
             for_each c in ragged(b, lens) { task @r(b, c) }
             select e in sparse(b, ptr, idx) { task @s(b, e) }
           }
         }",
    );
    let got = p.one(&[
        ("lens", A(vec![2, 0, 1])),
        ("ptr", A(vec![0, 1, 1, 3])),
        ("idx", A(vec![7, 4, 9])),
    ]);
    // b = 0: no rows, no entries. b = 1: lens[0] = 2 indices; ptr[1] = 1 entry (idx[0]).
    // b = 2: lens[0] + lens[1] = 2 indices; ptr[2] = 1 entry.
    assert_eq!(
        got,
        ["0 r(1,0)", "1 r(1,1)", "2 s(1,7)", "3 r(2,0)", "4 r(2,1)", "5 s(2,7)"]
    );
    // As PTO-WSP writes them (the module of spec/pto.md §6): the outer count is a runtime
    // scalar; a parameter axis; a sparse axis under `select` and under `parallel_for`.
    let p = prog(
        "@workload routed(%tokens: ragged(B, lens), %routing: sparse(E, ptr, idx)) {
           parallel_for t in %tokens { task @token_op(t) resources(X) }
           select v in sparse(E, ptr, idx) { task @expert(v) resources(W) }
           parallel_for v in %routing { task @expert(v) resources(W) }
         }",
    );
    let got = p.one(&[
        ("B", S(3)),
        ("lens", A(vec![2, 0, 1, 5])),
        ("E", S(3)),
        ("ptr", A(vec![0, 1, 1, 3])),
        ("idx", A(vec![7, 4, 9])),
    ]);
    assert_eq!(
        got,
        [
            "0 token_op(0) rw:X[]",
            "1 token_op(1) rw:X[]",
            "2 token_op(2) rw:X[]",
            "3 expert(7) rw:W[]",
            "4 expert(4) rw:W[]",
            "5 expert(9) rw:W[]",
            "6 expert(7) rw:W[]",
            "7 expert(4) rw:W[]",
            "8 expert(9) rw:W[]"
        ]
    );
}

#[test]
fn cond_combine_sequential_and_expression_params() {
    let p = prog(
        "@workload w() {
           for_each i in dense[4] {
             cond i == 0 { task @a(i) } else cond i % 2 == 1 { task @b(i, -i, ceil_div(i, 2), min(i, 2), max(i, 2), i / 2, !i, i >= 1 && i < 3) } else { task @c(i) }
             combine { task @d(i) sequential { task @e(i) } }
           }
         }",
    );
    assert_eq!(
        p.one(&[]),
        [
            "0 a(0)",
            "1 d(0)",
            "2 e(0)",
            "3 b(1,-1,1,1,2,0,0,1)",
            "4 d(1)",
            "5 e(1)",
            "6 c(2)",
            "7 d(2)",
            "8 e(2)",
            "9 b(3,-3,2,2,3,1,0,0)",
            "10 d(3)",
            "11 e(3)",
        ]
    );
}

#[test]
fn runtime_scalars_and_arrays_in_expressions() {
    let p = prog("@workload w() { parallel_for i in dense[3] { cond tab[i] > lim { task @k(tab[i], lim) } } }");
    assert_eq!(
        p.one(&[("tab", A(vec![5, 1, 9])), ("lim", S(2))]),
        ["0 k(5,2)", "1 k(9,2)"]
    );
}

#[test]
fn nop_from_a_listing() {
    let src = ".ptow 8\n.workload w\n.schedule s\n.config workload_level=cpu schedule_level=cpu aicpus=1 policy=round_robin depth=0 key=- levels=0 selector=- streams=1 timing=immediate timing_arg=0 ready=fifo start=immediate start_threshold=0 window=1 window_mode=stall pipeline_depth=0 batch_deps=0\n.kernel 0 k vector undeclared\n.code\n0 NOP\n1 TASK kernel=0 params=0 io=0 tier=0\n2 NOP\n3 HALT\n";
    assert_eq!(prog(src).one(&[]), ["0 k()"]);
}

#[test]
fn whole_and_implicit_regions() {
    let p = prog(
        "@tensor T: f16[2, n]
         @workload w() { task @k() resources(T, T[1], U, U[3, 0 : 2]) }",
    );
    assert_eq!(
        p.one(&[("n", S(4))]),
        ["0 k() rw:T[] rw:T[1] rw:U[] rw:U[3,0:2]"]
    );
}

const POLICIES: &str = "@workload w() {
  parallel_for i in dense[6] { parallel_for j in dense[2] { task @k(i, j) } }
}
";

fn owners(src: &str, n: u32, given: &[(&str, P)]) -> Vec<Vec<u32>> {
    // Returns, per AICPU, the task ids it owns.
    let p = prog(src);
    p.run(given, n)
        .iter()
        .map(|ts| {
            ts.iter()
                .map(|s| s.split(' ').next().unwrap().parse().unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn round_robin_policy() {
    let o = owners(
        &format!("{POLICIES}@schedule s for w {{ dispatch = round_robin(3) }}"),
        3,
        &[],
    );
    assert_eq!(o, [vec![0, 3, 6, 9], vec![1, 4, 7, 10], vec![2, 5, 8, 11]]);
}

#[test]
fn affinity_policy() {
    let o = owners(
        &format!("{POLICIES}@schedule s for w {{ dispatch = affinity(i) }}"),
        4,
        &[],
    );
    // Task ids 2i and 2i+1 belong to i mod 4.
    assert_eq!(
        o,
        [vec![0, 1, 8, 9], vec![2, 3, 10, 11], vec![4, 5], vec![6, 7]]
    );
    let o = owners(
        &format!("{POLICIES}@schedule s for w {{ dispatch = affinity(j - i) }}"),
        2,
        &[],
    );
    // (j - i) mod 2 with the euclidean remainder: even for (0,0), (1,1), ...
    assert_eq!(o, [vec![0, 3, 4, 7, 8, 11], vec![1, 2, 5, 6, 9, 10]]);
}

#[test]
fn hash_policy() {
    let o = owners(
        &format!("{POLICIES}@schedule s for w {{ dispatch = hash(i) }}"),
        3,
        &[],
    );
    for (aicpu, ids) in o.iter().enumerate() {
        for id in ids {
            assert_eq!(mix64(*id as u64 / 2) % 3, aicpu as u64, "task {id}");
        }
    }
}

#[test]
fn static_policy() {
    let o = owners(
        &format!("{POLICIES}@schedule s for w {{ dispatch = static(i) }}"),
        4,
        &[],
    );
    // 6 rows in 4 blocks: floor(i * 4 / 6) = 0,0,1,2,2,3.
    assert_eq!(
        o,
        [vec![0, 1, 2, 3], vec![4, 5], vec![6, 7, 8, 9], vec![10, 11]]
    );
    let o = owners(
        &format!("{POLICIES}@schedule s for w {{ dispatch = static(j) }}"),
        2,
        &[],
    );
    assert_eq!(o, [vec![0, 2, 4, 6, 8, 10], vec![1, 3, 5, 7, 9, 11]]);
}

#[test]
fn threshold_policy_selects_its_level_at_launch() {
    let src = format!(
        "{POLICIES}@schedule s for w {{ dispatch = threshold(m, 4: static(i), round_robin) }}"
    );
    assert_eq!(
        owners(&src, 2, &[("m", S(4))]),
        [vec![0, 1, 2, 3, 4, 5], vec![6, 7, 8, 9, 10, 11]]
    );
    assert_eq!(
        owners(&src, 2, &[("m", S(5))]),
        [vec![0, 2, 4, 6, 8, 10], vec![1, 3, 5, 7, 9, 11]]
    );
}

#[test]
fn dispatch_blocks_override_the_module_policy() {
    let src = "@workload w() {
      parallel_for i in dense[4] {
        task @a(i)
        dispatch affinity(i + 1) { task @b(i) }
        dispatch round_robin { task @c(i) }
      }
    }
    @schedule s for w { dispatch = affinity(i) }";
    let o = owners(src, 2, &[]);
    // ids: 3i (a: owner i mod 2), 3i+1 (b: (i+1) mod 2), 3i+2 (c: round robin on the id).
    assert_eq!(o, [vec![0, 2, 4, 6, 8, 10], vec![1, 3, 5, 7, 9, 11]]);
}

fn example(name: &str) -> Prog {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    prog(&std::fs::read_to_string(path).unwrap())
}

fn counted(p: &Prog, given: &[(&str, P)]) -> u64 {
    let v = verify(&p.bytes).unwrap();
    let vals = p.values(given);
    let rp = RuntimeParams::new(&v, &vals).unwrap();
    Interpreter::new(v, rp, 0, 1)
        .unwrap()
        .count_tasks()
        .unwrap()
}

#[test]
fn llama_layer_generates_3n2_plus_16n_tasks() {
    let p = example("llama_layer.pto");
    for n in [1u64, 2, 3, 7, 16, 64, 256] {
        assert_eq!(
            counted(&p, &[("N", S(n as u32))]),
            3 * n * n + 16 * n,
            "N = {n}"
        );
    }
    // And the expansion agrees with the count, on 1 and 6 AICPUs.
    for aicpus in [1, 6] {
        let per = p.run(&[("N", S(8))], aicpus);
        assert_eq!(per.iter().map(|t| t.len()).sum::<usize>(), 3 * 64 + 16 * 8);
    }
}

#[test]
fn bundled_examples_expand() {
    let fd = example("flash_decode.pto");
    let per = fd.run(
        &[
            ("B", S(3)),
            ("max_chunks", S(4)),
            ("kv_chunks", A(vec![1, 3, 2])),
        ],
        4,
    );
    // Per head: request 0 one unsplit task, request 1 three chunks + merge, request 2 two + merge.
    assert_eq!(per.iter().map(|t| t.len()).sum::<usize>(), 32 * (1 + 4 + 3));
    assert!(
        per.iter().filter(|t| !t.is_empty()).count() == 3,
        "affinity(b): three requests on three AICPUs"
    );
    let moe = example("moe.pto");
    let per = moe.run(
        &[
            ("T", S(4)),
            ("expert_ptr", A(vec![0, 2, 2, 3, 4, 4, 4, 4, 5])),
            ("expert_tokens", A(vec![0, 3, 1, 2, 0])),
        ],
        6,
    );
    // 4 router + 5 routed pairs * 2 + 4 combine.
    assert_eq!(per.iter().map(|t| t.len()).sum::<usize>(), 4 + 10 + 4);
    let ctl = example("control.pto");
    let per = ctl.run(&[("M", S(5))], 3);
    // Per layer: 5 forward + allreduce + optimizer, then checkpoint (layer 3) or log (layers 0, 2).
    assert_eq!(per.iter().map(|t| t.len()).sum::<usize>(), 4 * 7 + 1 + 2);
    let att = example("attention.pto");
    assert_eq!(
        att.run(&[("batch", S(3))], 4)
            .iter()
            .map(|t| t.len())
            .sum::<usize>(),
        24
    );
}

#[test]
fn pausing_and_resuming_gives_the_same_tasks() {
    let p = example("llama_layer.pto");
    let v = verify(&p.bytes).unwrap();
    let given = [("N", S(5))];
    let vals = p.values(&given);
    let rp = RuntimeParams::new(&v, &vals).unwrap();
    for aicpus in [1, 3] {
        for aicpu in 0..aicpus {
            let whole = expand_aicpu(v, rp, aicpu, aicpus, usize::MAX, u64::MAX).unwrap();
            for step in [ptovm_host_sim::NEXT_TASK, 1, 2, 5] {
                let stepped = expand_aicpu(v, rp, aicpu, aicpus, usize::MAX, step).unwrap();
                assert_eq!(stepped.tasks, whole.tasks);
                assert_eq!(stepped.stats, whole.stats, "step {step}");
            }
        }
    }
    // A sink that asks to stop pauses the run after that task.
    struct StopAt(u64, Vec<u64>);
    impl ptovm_vm::Sink for StopAt {
        fn task(&mut self, t: &ptovm_vm::Task) -> bool {
            self.1.push(t.id);
            t.id != self.0
        }
    }
    let mut it = Interpreter::new(v, rp, 0, 1).unwrap();
    let mut s = StopAt(10, vec![]);
    assert_eq!(it.run(&mut s, u64::MAX).unwrap(), Status::Paused);
    assert_eq!(s.1.len(), 11);
    assert_eq!(it.run(&mut s, u64::MAX).unwrap(), Status::Done);
    assert_eq!(s.1.len() as u64, 3 * 25 + 16 * 5);
    assert_eq!(
        it.run(&mut s, u64::MAX).unwrap(),
        Status::Done,
        "running a finished interpreter does nothing"
    );
}

/// The work bound of spec/bytecode.md §5.8: with affinity on the outer loop's variable or a
/// static partition, an AICPU's loop-index visits are at most its own tasks, and counting the
/// skipped subtrees costs a constant per loop entry, not per skipped task.
#[test]
fn skipped_subtrees_cost_no_visits() {
    let n = 64u64;
    let total = 3 * n * n + 16 * n;
    for policy in ["affinity(t)", "static(t)"] {
        let src = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto"),
        )
        .unwrap()
        .replace("dispatch = affinity(t)", &format!("dispatch = {policy}"));
        let q = prog(&src);
        let v = verify(&q.bytes).unwrap();
        let given = [("N", S(n as u32))];
        let vals = q.values(&given);
        let rp = RuntimeParams::new(&v, &vals).unwrap();
        let mut sum = 0;
        for aicpus in [1u32, 2, 6] {
            for i in 0..aicpus {
                let e = expand_aicpu(v, rp, i, aicpus, 0, u64::MAX).unwrap();
                let s = e.stats;
                assert!(s.visits <= s.emitted, "{policy} {i}/{aicpus}: {s:?}");
                assert!(
                    s.count_visits <= 4,
                    "{policy} {i}/{aicpus}: counting is per loop entry: {s:?}"
                );
                assert_eq!(s.emitted + s.skipped, total);
                if aicpus == 6 {
                    sum += s.emitted;
                }
            }
        }
        assert_eq!(sum, total);
    }
    // Round robin decides per task, so no subtree is skipped; but a leaf loop whose positions
    // run the same tasks steps from a position holding an id of the AICPU's residue to the
    // next, counting the others: an AICPU visits no more positions than it emits tasks (it
    // visited all 2N + N² on every AICPU before).
    let rr = prog(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto"),
        )
        .unwrap()
        .replace("dispatch = affinity(t)", "dispatch = round_robin"),
    );
    let v = verify(&rr.bytes).unwrap();
    let given = [("N", S(n as u32))];
    let vals = rr.values(&given);
    let rp = RuntimeParams::new(&v, &vals).unwrap();
    for aicpus in [2u32, 6] {
        let mut sum = 0;
        for i in 0..aicpus {
            let s = expand_aicpu(v, rp, i, aicpus, 0, u64::MAX).unwrap().stats;
            assert!(s.visits <= s.emitted, "round robin {i}/{aicpus}: {s:?}");
            assert_eq!(s.emitted + s.skipped, total);
            sum += s.emitted;
        }
        assert_eq!(sum, total);
    }
}

/// A module of `steps` × `points` iterations (`i`, then `j` over `dense_dyn(W)`, `W = points`)
/// whose points' loop runs `body` (kernels `a`, `b`, `c` of one parameter), under `policy`.
fn points_loop(steps: u64, points: u64, body: &str, policy: &str) -> String {
    format!(
        "@param W = {points}\n@kernel a(x): vector()\n@kernel b(x): vector()\n@kernel c(x): vector()\n\
         @workload w() {{ for_each i in dense[{steps}] {{ parallel_for j in dense_dyn(W) {{\n{body}\n}} }} }}\n\
         @schedule s for w {{ dispatch = {policy} }}"
    )
}

/// A `cond` chain on a loop's variable whose branches hold the same number of tasks (Task
/// Bench's `cond i == 0 { … } else cond i == W - 1 { … } else { … }`) does not make the loop's
/// task count depend on the variable: an AICPU counts the positions other AICPUs own by
/// multiplying, without evaluating the chain at each (spec/bytecode.md §5.8); nor does one on
/// an interval of it, counted from its bounds. Other chains are evaluated at every such
/// position: the contrast.
#[test]
fn chains_of_equal_branches_are_counted_without_evaluating() {
    let (steps, points) = (4u64, 600u64);
    for (chain, fixed) in [
        (
            "cond j == 0 { task @a(j) } else cond j == W - 1 { task @b(j) } else { task @c(j) }",
            true,
        ),
        (
            "cond i < 9 { cond j % 2 == 0 { task @a(j) } else { task @b(j) } }",
            true,
        ),
        (
            "cond j % 2 == 0 { task @a(j) task @b(j) } else { task @c(j) }",
            false,
        ),
        ("cond j % 3 == 0 { task @a(j) }", false),
        // One condition on an interval of the variable, branches of fixed counts: counted
        // from its bounds (Task Bench's tree and dom).
        ("cond j < 100 { task @a(j) }", true),
        (
            "cond j >= i * 100 && j < i * 100 + 250 { task @a(j) } else { task @b(j) task @c(j) }",
            true,
        ),
    ] {
        for policy in ["static(j)", "affinity(j)"] {
            let src = points_loop(steps, points, chain, policy);
            let q = prog(&src);
            let v = verify(&q.bytes).unwrap();
            let vals = q.values(&[]);
            let rp = RuntimeParams::new(&v, &vals).unwrap();
            let total = reference_expand(&v, &rp, 1, u64::MAX).unwrap().len() as u64;
            // Counting the whole program (the launch's tensor analysis does, on every AICPU)
            // enters the points' loop only where its count depends on its variable.
            let mut whole = Interpreter::new(v, rp, 0, 1).unwrap();
            assert_eq!(whole.count_tasks(), Ok(total), "{chain}");
            let visits = whole.stats().count_visits;
            assert_eq!(visits <= 1 + 2 * steps, fixed, "{chain}: {visits}");
            let mut sum = 0;
            for i in 0..6 {
                let s = expand_aicpu(v, rp, i, 6, 0, u64::MAX).unwrap().stats;
                assert_eq!(s.emitted + s.skipped, total, "{chain} {policy}");
                sum += s.emitted;
                // The chain's count known once, or one count for every position another
                // AICPU owns.
                let counted = if fixed {
                    0
                } else {
                    steps * (points - points / 6)
                };
                assert_eq!(s.count_visits, counted, "{chain} {policy} {i}/6: {s:?}");
            }
            assert_eq!(sum, total);
        }
    }
}

/// An innermost loop whose body is a `cond` chain on its own variable runs on the leaf path
/// (spec/bytecode.md §5.8): one instruction counted a task (the site), the chain evaluated
/// without dispatching its records — on one AICPU, and on six under `static(j)` (the positions
/// of the others counted by the branches' common count, from an interval guard's bounds, or
/// by evaluating the chain at each) and round robin (equal branches: the positions of other
/// AICPUs' ids counted; unequal ones: every position visited). The general
/// path (a task after the chain) dispatches the COND and SEQUENTIAL records too: the contrast.
#[test]
fn chains_on_the_loop_variable_run_on_the_leaf_path() {
    let (steps, points) = (4u64, 300u64);
    for chain in [
        "cond j == 0 { task @a(j) } else cond j == W - 1 { task @b(j) } else { task @c(j) }",
        "cond i < 9 { cond j % 2 == 0 { task @a(j) } else { task @b(j) task @c(j) } }",
        "cond j < 200 { cond j % 2 == 0 { task @a(j) } else { task @b(j) } }",
        "cond j % 3 == 0 { task @a(j) } else { task @b(j) task @c(j) }",
        "cond j == 0 { task @a(j) } else { task @b(j) }\n task @c(j)",
    ] {
        for (policy, aicpus) in [("static(j)", 1), ("static(j)", 6), ("round_robin", 6)] {
            let src = points_loop(steps, points, chain, policy);
            let q = prog(&src);
            let v = verify(&q.bytes).unwrap();
            let vals = q.values(&[]);
            let rp = RuntimeParams::new(&v, &vals).unwrap();
            let total = reference_expand(&v, &rp, 1, u64::MAX).unwrap().len() as u64;
            let leaf = !chain.ends_with("task @c(j)");
            let mut sum = 0;
            for i in 0..aicpus {
                let s = expand_aicpu(v, rp, i, aicpus, 0, u64::MAX).unwrap().stats;
                sum += s.emitted;
                let sites = if policy == "round_robin" {
                    s.emitted + s.skipped
                } else {
                    s.emitted
                };
                if leaf {
                    assert!(
                        s.instructions <= sites + 2 * steps,
                        "{chain} {policy} {i}/{aicpus}: {s:?}"
                    );
                    // Counted without evaluating the chain at each position: equal
                    // branches, or an interval guard around them.
                    if chain.starts_with("cond j == 0") || chain.starts_with("cond j < 200") {
                        assert_eq!(s.count_visits, 0, "{chain} {policy} {i}/{aicpus}: {s:?}");
                    }
                } else {
                    assert!(
                        s.instructions > 2 * sites,
                        "{chain} {policy} {i}/{aicpus}: {s:?}"
                    );
                }
            }
            assert_eq!(sum, total);
        }
    }
}

fn launch(src: &str, given: &[(&str, P)]) -> Result<u64, LaunchError> {
    let p = prog(src);
    let v = verify(&p.bytes).unwrap();
    let vals = p.values(given);
    let rp = RuntimeParams::new(&v, &vals)?;
    let e = expand_aicpu(v, rp, 0, 1, 0, u64::MAX)?;
    Ok(e.total)
}

#[test]
fn parameter_errors() {
    let p = prog("@workload w() { parallel_for i in dense_dyn(n) { select e in sparse_row(i, ptr, idx) { task @k() } } }");
    let v = verify(&p.bytes).unwrap();
    let ptr = [0u32, 2, 1];
    let idx = [5u32];
    let err = |vals: &[Value]| RuntimeParams::new(&v, vals).unwrap_err();
    assert_eq!(
        err(&[Value::Scalar(1)]),
        ParamError::Count {
            expected: 3,
            given: 1
        }
    );
    assert_eq!(
        err(&[Value::Array(&idx), Value::Array(&ptr), Value::Array(&idx)]),
        ParamError::Kind {
            slot: 0,
            expected: "a scalar",
            given: "array"
        }
    );
    assert_eq!(
        err(&[Value::Scalar(1), Value::Scalar(1), Value::Array(&idx)]),
        ParamError::Kind {
            slot: 1,
            expected: "an array",
            given: "scalar"
        }
    );
    assert_eq!(
        err(&[Value::Scalar(1), Value::Array(&[]), Value::Array(&idx)]),
        ParamError::EmptyIndptr { slot: 1 }
    );
    assert_eq!(
        err(&[Value::Scalar(1), Value::Array(&ptr), Value::Array(&idx)]),
        ParamError::IndptrNotMonotone {
            slot: 1,
            at: 2,
            prev: 2,
            next: 1
        }
    );
    assert_eq!(
        err(&[Value::Scalar(1), Value::Array(&[0, 2]), Value::Array(&idx)]),
        ParamError::IndptrPastIndices {
            slot: 1,
            last: 2,
            indices: 2,
            len: 1
        }
    );
    let ok = [Value::Scalar(1), Value::Array(&[0, 1]), Value::Array(&idx)];
    let rp = RuntimeParams::new(&v, &ok).unwrap();
    for (aicpu, count) in [(0, 0), (1, 1), (0, 65)] {
        assert_eq!(
            Interpreter::new(v, rp, aicpu, count).unwrap_err(),
            LaunchError::Params(ParamError::Aicpu { aicpu, count })
        );
    }
    assert_eq!(expand_aicpu(v, rp, 0, 1, 9, 1).unwrap().total, 1);
}

/// A flattened axis's `outer` count: checked at launch when runtime parameters alone give it
/// (a ragged outer past its lengths, an indptr shorter than `outer + 1`), when evaluated
/// otherwise.
#[test]
fn outer_counts_of_flattened_axes() {
    let params = |src: &str, given: &[(&str, P)]| match launch(src, given) {
        Err(LaunchError::Params(e)) => e,
        other => panic!("expected a parameter error, got {other:?}"),
    };
    let run = |src: &str, given: &[(&str, P)]| match launch(src, given) {
        Err(LaunchError::Run(e)) => e,
        other => panic!("expected a run error, got {other:?}"),
    };
    let ragged = "@workload w() { for_each c in ragged(B, l) { task @k(c) } }";
    assert_eq!(launch(ragged, &[("B", S(2)), ("l", A(vec![1, 3]))]), Ok(4));
    assert_eq!(
        params(ragged, &[("B", S(3)), ("l", A(vec![1, 3]))]),
        ParamError::OuterOutOfRange {
            what: "ragged",
            slot: 1,
            outer: 3,
            len: 2,
            max: 2
        }
    );
    let sparse = "@workload w() { select c in sparse(E, p, i) { task @k(c) } }";
    let ok = [("E", S(1)), ("p", A(vec![0, 2])), ("i", A(vec![4, 5]))];
    assert_eq!(launch(sparse, &ok), Ok(2));
    assert_eq!(
        params(
            sparse,
            &[("E", S(2)), ("p", A(vec![0, 2])), ("i", A(vec![4, 5]))]
        ),
        ParamError::OuterOutOfRange {
            what: "sparse",
            slot: 1,
            outer: 2,
            len: 2,
            max: 1
        }
    );
    // Reading a loop variable, the count is known only where the loop starts.
    assert_eq!(
        run(
            "@workload w() { parallel_for b in dense[3] { for_each c in ragged(b, l) { } } }",
            &[("l", A(vec![1]))]
        ),
        RunError::Index {
            pc: 1,
            slot: 0,
            index: 2,
            len: 1
        }
    );
    assert_eq!(
        run(
            "@workload w() { parallel_for b in dense[3] { select c in sparse(b - 1, p, i) { } } }",
            &[("p", A(vec![0, 1])), ("i", A(vec![0]))]
        ),
        RunError::Index {
            pc: 1,
            slot: 0,
            index: -1,
            len: 2
        }
    );
}

#[test]
fn runtime_errors() {
    let run = |src: &str, given: &[(&str, P)]| match launch(src, given) {
        Err(LaunchError::Run(e)) => e,
        other => panic!("expected a run error, got {other:?}"),
    };
    assert_eq!(
        run(
            "@workload w() { cond 2147483647 * 2147483647 * 4 > 0 { } }",
            &[]
        ),
        RunError::Overflow { pc: 0 }
    );
    assert_eq!(
        run("@workload w() { cond 1 / z { } }", &[("z", S(0))]),
        RunError::DivByZero { pc: 0 }
    );
    assert_eq!(
        run("@workload w() { cond 1 % z { } }", &[("z", S(0))]),
        RunError::DivByZero { pc: 0 }
    );
    assert_eq!(
        run("@workload w() { task @k(t[3]) }", &[("t", A(vec![1, 2]))]),
        RunError::Index {
            pc: 1,
            slot: 0,
            index: 3,
            len: 2
        }
    );
    assert_eq!(
        run(
            "@workload w() { for_each c in dense_dyn(l[2]) { } }",
            &[("l", A(vec![1]))]
        ),
        RunError::Index {
            pc: 0,
            slot: 0,
            index: 2,
            len: 1
        }
    );
    assert_eq!(
        run(
            "@workload w() { select c in sparse_row(1, p, i) { } }",
            &[("p", A(vec![0, 1])), ("i", A(vec![0]))]
        ),
        RunError::Index {
            pc: 0,
            slot: 0,
            index: 2,
            len: 2
        }
    );
    assert_eq!(
        run("@workload w() { task @k() resources(U[3 : 1]) }", &[]),
        RunError::BadRegion {
            pc: 1,
            tensor: 0,
            dim: 0,
            start: 3,
            end: 1
        }
    );
    assert_eq!(
        run("@workload w() { task @k() resources(U[-1]) }", &[]),
        RunError::BadRegion {
            pc: 1,
            tensor: 0,
            dim: 0,
            start: -1,
            end: 0
        }
    );
    assert_eq!(
        run(
            "@tensor T: f16[4, n]\n@workload w() { task @k() resources(T[1, 5]) }",
            &[("n", S(5))]
        ),
        RunError::RegionBounds {
            pc: 1,
            tensor: 0,
            dim: 1,
            start: 5,
            end: 6,
            extent: 5
        }
    );
    let big = "@workload w() { parallel_for a in dense[4294967295] { parallel_for b in dense[4294967295] { parallel_for c in dense[4294967295] { task @k() } } } }";
    let p = prog(big);
    let v = verify(&p.bytes).unwrap();
    let rp = RuntimeParams::new(&v, &[]).unwrap();
    assert_eq!(
        Interpreter::new(v, rp, 0, 1).unwrap().count_tasks(),
        Err(RunError::TooManyTasks)
    );
    assert_eq!(run("@workload w() { task @k() resources(U[1]) }\n@schedule s for w { dispatch = threshold(1 / z, round_robin) }", &[("z", S(0))]), RunError::DivByZero { pc: 0 });
}

/// A region bound that is a gather (spec/bytecode.md §5.8: the variable moved by a runtime-array
/// element at an affine index of it, clamped; random_nearest's) gives what the reference
/// interpreter gives at every point, and fails where its expression does: at the first point
/// whose element lies past the array, after the kept record has evaluated the points before it.
#[test]
fn gathers_give_and_fail_as_their_expressions() {
    let src = "@tensor G: f32[2, 8]\n@workload w() { for_each t in dense[2] { parallel_for i in dense[8] { task @k(t, i) resources(G[t, max(i - k[(t * 8 + i) * 2], 0) : min(i + 1 + k[(t * 8 + i) * 2 + 1], 8)]) } } }";
    let p = prog(src);
    let v = verify(&p.bytes).unwrap();
    let draws: Vec<u32> = (0..32).map(|x| [0, 1, 3, 0, 2][x % 5]).collect();
    // Every element, then one short of the last point's right element.
    for len in [32, 31] {
        let given = [("k", A(draws[..len].to_vec()))];
        let vals = p.values(&given);
        let rp = RuntimeParams::new(&v, &vals).unwrap();
        for (n, step) in [(1, u64::MAX), (2, u64::MAX), (1, NEXT_TASK)] {
            let want = reference_expand(&v, &rp, n, 1 << 20);
            assert_eq!(want.is_err(), len == 31, "{want:?}");
            let got: Result<Vec<_>, _> = (0..n)
                .map(|a| match expand_aicpu(v, rp, a, n, usize::MAX, step) {
                    Ok(e) => Ok(e.tasks),
                    Err(LaunchError::Run(e)) => Err(e),
                    Err(e) => panic!("{e:?}"),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|per| {
                    let mut all: Vec<_> = per.into_iter().flatten().collect();
                    all.sort_by_key(|t| t.id);
                    all
                });
            match (&want, got) {
                (Ok(want), Ok(got)) => assert_eq!(*want, got, "{len} draws, {n} AICPUs"),
                (Err(want), Err(got)) => {
                    assert_eq!(*want, got, "{len} draws, {n} AICPUs");
                    assert!(
                        matches!(
                            got,
                            RunError::Index {
                                index: 31,
                                len: 31,
                                ..
                            }
                        ),
                        "{got:?}"
                    );
                }
                (want, got) => panic!("{len} draws, {n} AICPUs: {want:?} against {got:?}"),
            }
        }
    }
}

/// A loop variable named as a single index is checked against the tensor's extent unless its
/// loop (dense or dynamic, a fixed extent) cannot leave it; a loop one longer than the tensor,
/// a dynamic extent past it, a ragged row (whose length changes) or a sparse column index
/// (not an iteration index) are still caught, at the first task out of bounds.
#[test]
fn loop_indices_are_checked_unless_their_loop_stays_inside() {
    let run = |src: &str, given: &[(&str, P)]| launch(src, given);
    let bounds = |pc, start| {
        Err(LaunchError::Run(RunError::RegionBounds {
            pc,
            tensor: 0,
            dim: 0,
            start,
            end: start + 1,
            extent: 4,
        }))
    };
    let t = "@tensor T: f16[4, 4]\n";
    let go =
        |body: &str, given: &[(&str, P)]| run(&format!("{t}@workload w() {{ {body} }}"), given);
    assert_eq!(
        go(
            "parallel_for i in dense[4] { task @k() resources(T[i]) }",
            &[]
        ),
        Ok(4)
    );
    assert_eq!(
        go(
            "parallel_for i in dense[5] { task @k() resources(T[i]) }",
            &[]
        ),
        bounds(2, 4)
    );
    let dynamic = "parallel_for i in dense_dyn(n) { for_each j in dense[4] { task @k() resources(T[i, j]) } }";
    assert_eq!(go(dynamic, &[("n", S(4))]), Ok(16));
    assert_eq!(go(dynamic, &[("n", S(6))]), bounds(3, 4));
    let ragged = "parallel_for b in dense[2] { parallel_for c in dense_dyn(lens[b]) { task @k() resources(T[c]) } }";
    assert_eq!(go(ragged, &[("lens", A(vec![4, 4]))]), Ok(8));
    assert_eq!(go(ragged, &[("lens", A(vec![2, 5]))]), bounds(3, 4));
    let sparse = "parallel_for b in dense[2] { select c in sparse_row(b, ptr, idx) { task @k() resources(T[c]) } }";
    assert_eq!(
        go(
            sparse,
            &[("ptr", A(vec![0, 2, 3])), ("idx", A(vec![0, 3, 1]))]
        ),
        Ok(3)
    );
    assert_eq!(
        go(sparse, &[("ptr", A(vec![0, 1, 2])), ("idx", A(vec![1, 7]))]),
        bounds(3, 7)
    );
}

#[test]
fn task_sites_with_many_region_dimensions() {
    // 4 regions of 8 dimensions: more than the interpreter's per-site plan holds, so this site
    // is decoded at every task; the result must not differ.
    let dims = |v: &str| {
        (0..8)
            .map(|d| format!("{v} + {d}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let src = format!(
        "@tensor T: f16[20, 20, 20, 20, 20, 20, 20, 20]
         @kernel k(): vector(in a, in b, in c, out d)
         @workload w() {{ parallel_for i in dense[3] {{ task @k() resources(T[{}], T[{}], T[{}], T[{}]) }} }}",
        dims("i"),
        dims("i + 1"),
        dims("i + 2"),
        dims("2 * i")
    );
    let p = prog(&src);
    let got = p.run(&[], 2);
    assert_eq!(got.iter().map(|t| t.len()).sum::<usize>(), 3);
    assert!(
        got[0][0].starts_with("0 k() r:T[0,1,2,3,4,5,6,7] r:T[1,2,3,4,5,6,7,8]"),
        "{:?}",
        got[0][0]
    );
}

/// `Interpreter::work_bound`, computed from the code and the parameters without walking,
/// bounds what the walk does: the reference expansion's tasks, and every instance's loop
/// iterations (walked and counted) on 1 to 4 AICPUs; the LLaMA layer's tasks are bounded by
/// exactly its task count (every loop at its full extent, no COND).
#[test]
fn the_work_bound_bounds_the_walk() {
    let mut checked = 0;
    for seed in 0..300u64 {
        let src = ptovm_tests::Gen::runnable(seed).module();
        let out = assemble("gen.pto", &src, &Options::default()).unwrap();
        let owned = ptovm_tests::gen_params(&out.module, seed);
        let vals = ptovm_tests::values(&owned);
        let v = verify(&out.bytes).unwrap();
        let Ok(p) = RuntimeParams::new(&v, &vals) else {
            continue;
        };
        let Ok(reference) = reference_expand(&v, &p, 1, 100_000) else {
            continue;
        };
        for n in 1..=4u32 {
            let bound = Interpreter::new(v, p, 0, n).unwrap().work_bound();
            assert!(reference.len() as u64 <= bound.tasks, "{bound:?}\n{src}");
            for i in 0..n {
                let e = expand_aicpu(v, p, i, n, 0, u64::MAX).unwrap();
                let walked = e.stats.visits + e.stats.count_visits;
                assert!(walked <= bound.iterations, "{walked} > {bound:?}\n{src}");
            }
        }
        checked += 1;
    }
    assert!(checked > 150, "only {checked} programs ran");
    let (bytes, params) = ptovm_tests::example("llama_layer.pto", &[("N", 16, vec![])]);
    let v = verify(&bytes).unwrap();
    let vals = ptovm_tests::values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let b = Interpreter::new(v, p, 0, 6).unwrap().work_bound();
    assert_eq!(b.tasks, 3 * 16 * 16 + 16 * 16);
    assert_eq!(b.iterations, 16 + 16 + 16 * 16);
}

/// `Interpreter::outer_start` (the watermark of a read a join stands for, spec/runtime.md
/// §3.5): for every task of every Task Bench pattern, on 1, 2 and 6 AICPUs, the id of the
/// first task of its step (the reference's smallest id with the task's `t`, its kernel's first
/// parameter), whatever the AICPU skipped. The chain's loop holds its tasks directly and runs
/// by the leaf loops' fast path: there it may not know (`None`), but never says a wrong id.
#[test]
fn outer_start_is_the_first_id_of_the_task_s_step() {
    let patterns = ptovm_tests::taskbench::PATTERNS.iter().chain(&["chain"]);
    for pattern in patterns {
        let given: &[(&str, u32, Vec<u32>)] = match *pattern {
            "random_nearest" => &[],
            "fft" => &[("W", 16, vec![]), ("S", 4, vec![])],
            "chain" => &[("T", 40, vec![])],
            _ => &[("W", 12, vec![]), ("T", 9, vec![])],
        };
        let (bytes, params) = ptovm_tests::example(&format!("taskbench/{pattern}.pto"), given);
        let v = verify(&bytes).unwrap();
        let vals = ptovm_tests::values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        let reference = reference_expand(&v, &p, 1, 1 << 20).unwrap();
        let mut first = std::collections::BTreeMap::new();
        for t in &reference {
            first.entry(t.params[0]).or_insert(t.id);
        }
        for n in [1u32, 2, 6] {
            let mut known = 0;
            for a in 0..n {
                let mut it = Interpreter::new(v, p, a, n).unwrap();
                while it.next_task().unwrap() == Status::Paused {
                    let t = it.current_task();
                    let step = reference[t.id as usize].params[0];
                    let want = first[&step];
                    match it.outer_start() {
                        Some(got) => {
                            assert_eq!(got, want, "{pattern}, {n} AICPUs, task {}", t.id);
                            known += 1;
                        }
                        None => assert_eq!(*pattern, "chain", "{pattern}: task {}", t.id),
                    }
                }
            }
            if *pattern != "chain" {
                assert_eq!(known, reference.len(), "{pattern}, {n} AICPUs");
            }
        }
    }
}
