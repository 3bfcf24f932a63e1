//! Differential tests of the interpreter against the reference expander: for random programs,
//! runtime parameters, dispatch configurations and AICPU counts, the per-AICPU task sets are
//! disjoint and their union is exactly the reference expansion (same ids, same contents).

use proptest::prelude::*;
use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{expand_aicpu, reference_expand, RefTask, NEXT_TASK};
use ptovm_tests::{gen_params, values, Gen};
use ptovm_vm::{verify, LaunchError, RuntimeParams};

/// Checks one program; returns whether the reference expansion succeeded (so the caller can
/// tell how many cases did real work).
fn check(src: &str, seed: u64, aicpus: u32, step: u64) -> bool {
    let out =
        assemble("gen.pto", src, &Options::default()).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let v = verify(&out.bytes).unwrap();
    let owned = gen_params(&out.module, seed);
    let vals = values(&owned);
    let p = RuntimeParams::new(&v, &vals).unwrap_or_else(|e| panic!("{e}"));
    let Ok(reference) = reference_expand(&v, &p, aicpus, 200_000) else {
        return false;
    };
    let mut union: Vec<RefTask> = Vec::new();
    for i in 0..aicpus {
        let e = match expand_aicpu(v, p, i, aicpus, usize::MAX, step) {
            Ok(e) => e,
            Err(LaunchError::Run(e)) => {
                panic!("AICPU {i}/{aicpus} failed where the reference did not: {e}\n{src}")
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            e.total,
            reference.len() as u64,
            "AICPU {i}/{aicpus} counts the program's tasks\n{src}"
        );
        assert!(
            e.tasks.windows(2).all(|w| w[0].id < w[1].id),
            "ids increase"
        );
        for t in &e.tasks {
            let r = &reference[t.id as usize];
            assert_eq!(
                r.owner, i,
                "task {} belongs to AICPU {} but AICPU {i} emitted it\n{src}",
                t.id, r.owner
            );
            assert_eq!(t, r, "task {} differs from the reference\n{src}", t.id);
        }
        assert_eq!(e.stats.emitted + e.stats.skipped, reference.len() as u64);
        union.extend(e.tasks);
    }
    union.sort_by_key(|t| t.id);
    assert_eq!(
        union.len(),
        reference.len(),
        "the union covers every task exactly once\n{src}"
    );
    assert_eq!(union, reference);
    true
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn instances_partition_the_reference(seed in any::<u64>(), aicpus in 1u32..=8, step in prop::sample::select(vec![NEXT_TASK, 1, 2, 7, u64::MAX])) {
        let src = Gen::runnable(seed).module();
        check(&src, seed, aicpus, step);
    }
}

/// Programs built around loop nests whose sites name tensors by the loops' variables, where
/// the interpreter's fast paths apply (index dimensions written without checks, and records
/// of an innermost loop's sites kept from one iteration to the next with only the loop
/// variable's fields rewritten): the same check, on 1–6 AICPUs, with pauses after every task
/// (through `run` and through `next_task`, which refills a kept record without going back
/// into the loop), every few tasks, or none.
#[test]
fn loop_nest_programs_partition_the_reference() {
    let mut ran = 0;
    for seed in 0..300u64 {
        let src = if seed % 2 == 0 {
            ptovm_tests::indexed_program(seed)
        } else {
            ptovm_tests::chained_program(seed)
        };
        let aicpus = 1 + (seed % 6) as u32;
        let step = [NEXT_TASK, 1, 3, u64::MAX][(seed / 2 % 4) as usize];
        ran += check(&src, seed, aicpus, step) as u32;
    }
    assert!(ran >= 250, "only {ran} of 300 programs ran");
    // Parameters named by the inner loop's variable, the outer one's and constants, in
    // every position.
    for policy in ["affinity(i)", "round_robin(3)", "static(i)"] {
        let src = format!(
            "@tensor A: f16[4, 6]\n@tensor B: f16[6, 4]\n\
             @kernel k(a, b, c): vector(in x, out y)\n@kernel m(a, b): cube(inout x)\n\
             @workload w() {{ parallel_for i in dense[4] {{ for_each j in dense[6] {{\n\
               task @k(i, 7, j) resources(A[i, j], B[j, i])\n\
               task @m(j, i) resources(A[i, j])\n\
               task @k(j, j, i) resources(B[j, i], A[i, j])\n\
             }} }} }}\n@schedule s for w {{ dispatch = {policy} }}"
        );
        for aicpus in 1..=4 {
            for step in [NEXT_TASK, 1, 2, 5, u64::MAX] {
                assert!(check(&src, 0, aicpus, step));
            }
        }
    }
    // More task sites in one loop (20) than the interpreter keeps decoded (16), of several
    // lengths so their instruction indices share cache slots, next to a loop of 7: every
    // task is still its own site's.
    let mut body = String::new();
    for s in 0..20 {
        body += &match s % 3 {
            0 => format!(
                "task @k(i, {s}, i) resources(A[i, {}], B[{}, i])\n",
                s % 6,
                s % 6
            ),
            1 => format!("task @m(i, {s}) resources(A[i, {}])\n", s % 6),
            _ => format!("task @n(i) resources(B[{}, i], A[i, 0], A[i, 1])\n", s % 6),
        };
    }
    let src = format!(
        "@tensor A: f16[4, 6]\n@tensor B: f16[6, 4]\n\
         @kernel k(a, b, c): vector(in x, out y)\n@kernel m(a, b): cube(inout x)\n\
         @kernel n(a): vector(in x, in y, out z)\n\
         @workload w() {{ parallel_for i in dense[4] {{\n{body}}}\n\
           parallel_for i in dense[4] {{ for_each j in dense[3] {{\n\
             task @m(i, j) resources(A[i, j])\n task @k(j, i, 1) resources(A[i, j], B[j, i])\n\
           }}\n{body}}} }}\n@schedule s for w {{ dispatch = affinity(i) }}"
    );
    for aicpus in 1..=3 {
        for step in [NEXT_TASK, 1, 4, u64::MAX] {
            assert!(check(&src, 0, aicpus, step));
        }
    }
}

/// Innermost loops whose body is one `cond` / `else cond` chain on the variables of the loops
/// around them (the interpreter picks the branch once per run of the loop and runs its tasks
/// as a leaf loop, keeping records whose other fields read only those variables), next to near
/// misses that take the general path: a condition on the loop's own variable, a task after
/// the chain, a loop inside a branch. Branches of one, two and no tasks; regions and
/// parameters that are expressions of the outer variable; on 1–4 AICPUs under each policy
/// (the leaf path steps over the positions it does not own under `static(j)` and
/// `affinity(j)`), pausing after every task (through `run` and `next_task`), every few, or
/// never.
#[test]
fn leaf_loops_over_a_cond_chain_partition_the_reference() {
    let bodies = [
        // The stencil's shape: the first step, then the others.
        "cond i == 0 { task @k(i, j) resources(A[i, j]) }\n\
         else { task @m(i, j, i - 1) resources(A[i - 1, max(0, j - 1) : min(j + 2, 6)], A[i, j]) }",
        // Three ways, one taking no branch (i == 3), regions of the outer variable only.
        "cond i % 3 == 0 { task @k(i, j) resources(A[i, j])\n task @k(j, i) resources(B[j, i]) }\n\
         else cond i % 3 == 1 { task @m(i * 2, j, 5) resources(A[i - 1, j], A[i, j]) }",
        // A condition on a runtime parameter and the outer variable.
        "cond i < P { task @m(j, i, P) resources(B[j, i], A[i, j]) } else { task @k(i, j) resources(A[i, 0 : 6]) }",
        // Chains inside a branch, on the outer variable too (decided once per run).
        "cond i != 1 { cond i % 2 == 0 { task @k(i, j) resources(A[i, j]) } else { task @k(j, i) resources(B[j, i])\n task @m(i, j, 3) resources(A[i, j], B[j, i]) } } else { task @k(i, j) resources(A[i, j]) }",
        // Near misses: the loop's own variable, a task after the chain, a loop in a branch.
        "cond j % 2 == 0 { task @k(i, j) resources(A[i, j]) } else { task @k(j, i) resources(B[j, i]) }",
        "cond i == 1 { task @k(i, j) resources(A[i, j]) }\n task @k(j, i) resources(B[j, i])",
        "cond i != 2 { for_each u in dense[2] { task @m(i, j, u) resources(B[j, i], A[i, j]) } } else { task @k(i, j) resources(A[i, j]) }",
        // Chains on the loop's own variable. One task whatever they decide (counted without
        // being evaluated at positions another AICPU owns), inside a guard on the outer
        // variable (fft's shape):
        "cond 6 / (i + 1) > 0 { cond j == 0 { task @k(i, j) resources(A[i, j]) }\n\
         else cond j == 5 { task @k(j, i) resources(B[j, i]) }\n\
         else { task @m(i, j, j - 1) resources(A[i, j - 1 : j + 1], A[i, j]) } }",
        // a guard on the loop's variable without an else block (tree's and dom's shape: one
        // task or none), and branches of two tasks and one:
        "cond j >= i { cond j % 2 == 0 { task @k(i, j) resources(A[i, j]) } else { task @m(j, i, 1) resources(B[j, i], A[i, j]) } }",
        "cond j == 0 { task @k(i, j) resources(A[i, j])\n task @k(j, i) resources(B[j, i]) } else { task @m(i, j, 0) resources(A[i, j], B[j, i]) }",
        // Guards on an interval of the loop's variable (counted from their bounds at
        // positions another AICPU owns): empty, partial, past the loop's ends, one value.
        "cond j >= i && j < i + 3 { task @k(i, j) resources(A[i, j]) } else { task @k(j, i) resources(B[j, i])\n task @m(i, j, 1) resources(A[i, j], B[j, i]) }",
        "cond 2 < j && j <= i + 2 { task @k(i, j) resources(A[i, j]) }",
        "cond i - 1 == j { task @m(i, j, 2) resources(A[i, j], B[j, i]) }",
        "cond i > 2 && j > 0 { task @k(i, j) resources(A[i, j]) }",
        "cond j < 0 - i { task @k(i, j) resources(A[i, j]) } else cond j >= 5 { task @k(j, i) resources(B[j, i]) }",
        // The variable plus or minus the outer one (fft's `i + 2^d < W`), decided once a run;
        // a condition no iteration reaches (its division by zero never raised).
        "cond j + i < 5 && j >= i { task @k(i, j) resources(A[i, j]) } else cond j - 1 == i { task @k(j, i) resources(B[j, i]) } else { task @m(i, j, 1) resources(A[i, j], B[j, i]) }",
        "cond j >= 0 { task @k(i, j) resources(A[i, j]) } else cond 1 / (i - i) == 1 { task @k(j, i) resources(B[j, i]) }",
        // Branches of more sites than records are kept (4): a branch's last site is filled
        // in full after its first ones are refilled, the branch taken again after another
        // (the walk must resume in the branch it is in, not in the one it paused in last),
        // decided at every iteration or kept for an interval.
        "cond j % 2 == 0 { task @k(i, j) resources(A[i, j])\n task @k(j, i) resources(B[j, i])\n task @m(i, j, 1) resources(A[i, j], B[j, i])\n task @m(j, i, 2) resources(B[j, i], A[i, j])\n task @k(i, j) resources(A[i, 0 : 6]) } else { task @m(i, j, 3) resources(B[j, i], A[i, j]) }",
        "cond j == 2 { task @m(i, j, 3) resources(B[j, i], A[i, j]) } else { task @k(i, j) resources(A[i, j])\n task @k(j, i) resources(B[j, i])\n task @m(i, j, 1) resources(A[i, j], B[j, i])\n task @m(j, i, 2) resources(B[j, i], A[i, j])\n task @k(i, j) resources(A[i, 0 : 6]) }",
    ];
    for body in bodies {
        // Ownership decided by the outer loop, per task, or by the leaf loop itself (its
        // blocks, every n-th position, or a key the leaf path does not step by).
        for policy in [
            "affinity(i)",
            "round_robin(2)",
            "static(i)",
            "static(j)",
            "affinity(j)",
            "hash(j)",
        ] {
            let src = format!(
                "@param P = 2\n@tensor A: f16[4, 6]\n@tensor B: f16[6, 4]\n\
                 @kernel k(a, b): vector(inout x)\n@kernel m(a, b, c): vector(in x, out y)\n\
                 @workload w() {{ for_each i in dense[4] {{ parallel_for j in dense[6] {{\n{body}\n}} }} }}\n\
                 @schedule s for w {{ dispatch = {policy} }}"
            );
            for aicpus in 1..=4 {
                for step in [NEXT_TASK, 1, 2, 5, u64::MAX] {
                    assert!(check(&src, 0, aicpus, step), "{src}");
                }
            }
        }
    }
    // Two points loops in each step, one after the other: their frames take the same place
    // and the chains they look at alternate, and each loop keeps only what its own code
    // decides (its count's dependence on its variable, its interval guard, its chain).
    for pair in bodies.windows(2) {
        for policy in ["affinity(i)", "static(j)", "affinity(j)"] {
            let src = format!(
                "@param P = 2\n@tensor A: f16[4, 6]\n@tensor B: f16[6, 4]\n\
                 @kernel k(a, b): vector(inout x)\n@kernel m(a, b, c): vector(in x, out y)\n\
                 @workload w() {{ for_each i in dense[4] {{\n\
                 parallel_for j in dense[6] {{\n{}\n}}\nparallel_for j in dense[6] {{\n{}\n}} }} }}\n\
                 @schedule s for w {{ dispatch = {policy} }}",
                pair[0], pair[1]
            );
            for aicpus in [1, 3] {
                for step in [NEXT_TASK, 2, u64::MAX] {
                    assert!(check(&src, 0, aicpus, step), "{src}");
                }
            }
        }
    }
}

/// What a leaf loop evaluates fails as the iteration would, with the same error on every path
/// and AICPU count (on the AICPU that owns the failing task): a condition it evaluates once
/// per run (dividing by zero at one outer value), a region bound it recomputes in a kept record
/// (past the tensor at the last point), a parameter it recomputes (overflowing at the fourth
/// point), the bound of an interval guard; under the default policy and under `static(j)` and
/// `affinity(j)`, where the points' loop decides ownership itself.
#[test]
fn leaf_loops_fail_where_the_iteration_would() {
    for (body, policy) in [
        "cond 6 / (i - 2) > 0 { task @k(i, j) resources(A[i, j]) } else { task @k(j, i) resources(A[i, j]) }",
        "cond i == 0 { task @k(i, j) resources(A[i, j]) } else { task @k(j, i) resources(A[i, j + 1]) }",
        "task @k(i, j * 2147483647 * 2147483647) resources(A[i, j])",
        // A condition of a chain on the loop's variable that fails where an iteration first
        // reaches it (past the first point).
        "cond j == 0 { task @k(i, j) resources(A[i, j]) } else cond j < 6 / (i - 2) { task @k(j, i) resources(A[i, j]) } else { task @k(i, j) resources(A[i, j + 0]) }",
        // A condition inside a guard, evaluated once per run.
        "cond i < 9 { cond 6 / (i - 2) > 0 { task @k(i, j) resources(A[i, j]) } else { task @k(j, i) resources(A[i, j]) } }",
        // A bound of an interval guard (also evaluated by the AICPUs that count the
        // positions they do not own from it).
        "cond j < (i == 2) * 2147483647 * 2147483647 * 2147483647 { task @k(i, j) resources(A[i, j]) }",
        // Fields of a kept record recomputed from their expressions folded for the loop (the
        // parts that read only `i` computed once a run), failing past the first point: a
        // parameter and a region that divide by zero, and a region whose folded form reads
        // the variable twice that leaves the tensor.
        "task @k(i, 6 / (j - 3 + i)) resources(A[i, j])",
        "task @k(i, j) resources(A[i, 5 / (5 - j + i * 0)])",
        "task @k(i, j) resources(A[i, j * j / (4 + i)])",
        // One whose folded form does not fit a kept record's room: evaluated in full.
        "task @k(i, 1 / (j + j + j + j + j + j + j + j + j + j + j + j + j + j + j + j + j - 51 + i * 0)) resources(A[i, j])",
    ]
    .into_iter()
    .flat_map(|body| ["", "static(j)", "affinity(j)"].map(|policy| (body, policy)))
    {
        let schedule = if policy.is_empty() {
            String::new()
        } else {
            format!("\n@schedule s for w {{ dispatch = {policy} }}")
        };
        let src = format!(
            "@tensor A: f16[4, 6]\n@kernel k(a, b): vector(inout x)\n\
             @workload w() {{ for_each i in dense[4] {{ parallel_for j in dense[6] {{\n{body}\n}} }} }}{schedule}"
        );
        let out = assemble("w.pto", &src, &Options::default()).unwrap();
        let v = verify(&out.bytes).unwrap();
        let p = RuntimeParams::new(&v, &[]).unwrap();
        let reference = reference_expand(&v, &p, 1, 1000).unwrap_err();
        // An AICPU evaluates only what it emits: the one that owns the failing task fails
        // (all of them, for a condition every one evaluates); the others may finish.
        for aicpus in 1..=3 {
            for step in [NEXT_TASK, 1, 4, u64::MAX] {
                let mut failed = 0;
                for i in 0..aicpus {
                    match expand_aicpu(v, p, i, aicpus, usize::MAX, step) {
                        Err(LaunchError::Run(e)) => {
                            assert_eq!(e, reference, "{src}: {aicpus} AICPUs, step {step}");
                            failed += 1;
                        }
                        Ok(_) => {}
                        Err(e) => panic!("{src}: {e}"),
                    }
                }
                assert!(failed >= 1, "{src}: {aicpus} AICPUs, step {step}: none failed");
            }
        }
    }
}

#[test]
fn most_generated_programs_run() {
    // The differential property is only as strong as the share of cases that get past the
    // runtime checks; keep it high.
    let mut ok = 0;
    let mut tasks = 0;
    for seed in 0..200u64 {
        let src = Gen::runnable(seed).module();
        if check(&src, seed, 1 + (seed % 8) as u32, 3) {
            ok += 1;
            let out = assemble("g", &src, &Options::default()).unwrap();
            let v = verify(&out.bytes).unwrap();
            let owned = gen_params(&out.module, seed);
            let vals = values(&owned);
            let p = RuntimeParams::new(&v, &vals).unwrap();
            tasks += reference_expand(&v, &p, 1, 200_000).unwrap().len();
        }
    }
    assert!(ok >= 150, "only {ok} of 200 generated programs ran");
    assert!(
        tasks >= 2000,
        "generated programs are too small: {tasks} tasks in all"
    );
}

/// Debug aid: `PTOVM_DEBUG_SEED=N cargo test -p ptovm-tests --test partition debug_seed -- --ignored --nocapture`
#[test]
#[ignore]
fn debug_seed() {
    let seed: u64 = std::env::var("PTOVM_DEBUG_SEED").unwrap().parse().unwrap();
    let aicpus: u32 = std::env::var("PTOVM_DEBUG_N")
        .map(|s| s.parse().unwrap())
        .unwrap_or(2);
    let src = std::env::var("PTOVM_DEBUG_SRC")
        .map(|f| std::fs::read_to_string(f).unwrap())
        .unwrap_or_else(|_| Gen::runnable(seed).module());
    println!("{src}");
    let out = assemble("gen.pto", &src, &Options::default()).unwrap();
    let v = verify(&out.bytes).unwrap();
    let owned = gen_params(&out.module, seed);
    let vals = values(&owned);
    println!("{vals:?}");
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let reference = reference_expand(&v, &p, aicpus, 200_000).unwrap();
    if std::env::var("PTOVM_DEBUG_SITES").is_ok() {
        let r: Vec<(u64, u32, u32)> = reference
            .iter()
            .map(|t| (t.id, t.site, t.owner))
            .take(60)
            .collect();
        println!("reference (id, site, owner): {r:?}");
    }
    for i in 0..aicpus {
        let e = expand_aicpu(v, p, i, aicpus, usize::MAX, u64::MAX).unwrap();
        if std::env::var("PTOVM_DEBUG_SITES").is_ok() {
            let g: Vec<(u64, u32)> = e.tasks.iter().map(|t| (t.id, t.site)).take(30).collect();
            println!("aicpu {i} (id, site): {g:?}");
        }
        let got: Vec<u64> = e.tasks.iter().map(|t| t.id).collect();
        let want: Vec<u64> = reference
            .iter()
            .filter(|t| t.owner == i)
            .map(|t| t.id)
            .collect();
        println!(
            "aicpu {i}: got  {got:?}\n         want {want:?}\n  stats {:?}",
            e.stats
        );
    }
}

/// Round robin in a leaf loop whose positions all run the same number of tasks
/// (spec/bytecode.md §5.8): an AICPU steps from a position holding an id of its residue to
/// the next and counts the positions between. Bodies of one to four tasks, plain or a `cond`
/// chain on the loop's variable (equal branches, and unequal ones, walked position by
/// position), on one to seven AICPUs, pausing after every task (`next_task`, which steps on
/// from a kept record) or every few, or never: the same tasks as the reference.
#[test]
fn round_robin_leaf_loops_partition_the_reference() {
    for body in [
        "task @a(j)",
        "task @a(j) task @b(i, j)",
        "task @a(j) task @b(i, j) task @c(j)",
        "task @a(j) task @b(i, j) task @c(j) task @a(i)",
        "cond j == 0 { task @a(j) } else { task @b(i, j) }",
        "cond j % 2 == 0 { task @a(j) task @b(i, j) } else { task @c(j) task @a(i) }",
        "cond j == 0 { task @a(j) task @c(j) task @a(i) } else cond j == W - 1 { task @b(i, j) task @b(j, i) task @c(i) } else { task @c(j) task @a(j) task @b(j, j) }",
        "cond j % 3 == 0 { task @a(j) } else { task @b(i, j) task @c(j) }",
    ] {
        let src = format!(
            "@param W = 17\n@kernel a(x): vector()\n@kernel b(x, y): vector()\n@kernel c(x): cube()\n\
             @workload w() {{ for_each i in dense[3] {{ parallel_for j in dense_dyn(W) {{\n{body}\n}} }} }}\n\
             @schedule s for w {{ dispatch = round_robin }}"
        );
        for aicpus in 1..=7 {
            for step in [NEXT_TASK, 1, 3, u64::MAX] {
                assert!(check(&src, 0, aicpus, step), "{body}");
            }
        }
    }
}
