//! Generation order (spec/pto.md §4.6, seed 000 §5.3): `order b = interleaved(n)` generates the
//! iterations of the loop inside `b` round by round across groups of `n` values of `b`
//! (`B0C0, B1C0, B2C0, B3C0, B0C1, …`); `sequential` and `parallel` set the loop's kind;
//! `affinity b = core_group` is the dispatch policy `affinity(b)`; `prefetch` and the other
//! affinities are refused. The expected orders are computed here with cursors over each group,
//! independently of how the assembler rewrites the loops; every expansion is checked against
//! the reference expander on several AICPU counts, and the threaded runs with `--check`.

use std::sync::mpsc;
use std::time::Duration;

use ptovm_assembler::{assemble, DiagKind, Options};
use ptovm_host_sim::sim::{self, SimError};
use ptovm_host_sim::{edges, expand_aicpu, reference_expand, DepMode, RefTask};
use ptovm_vm::{verify, Opcode, RuntimeParams, Value, WindowMode};

use ptovm_tests::{assemble_text as asm, named_values as values};

fn expand(src: &str, given: &[(&str, Vec<u32>)], n: u32) -> Vec<RefTask> {
    ptovm_tests::expand_checked(src, given, n)
}

/// The tasks' parameters in generation order.
fn order(src: &str, given: &[(&str, Vec<u32>)], n: u32) -> Vec<Vec<i64>> {
    expand(src, given, n)
        .into_iter()
        .map(|t| t.params)
        .collect()
}

/// Seed 000 §5.3's example: four requests of three chunks each.
fn seed_example(schedule: &str) -> String {
    format!(
        "@tensor o: f32[4, 3]
@kernel attend(b, c): vector(out o)
@workload w(%batch: dense[4]) {{
  parallel_for b in %batch {{
    parallel_for c in dense[3] {{
      task @attend(b, c) resources(o[b, c])
    }}
  }}
}}
@schedule s for w {{ {schedule} }}"
    )
}

#[test]
fn interleaved_four_is_the_seeds_order() {
    let got = order(&seed_example("order b = interleaved(4)"), &[], 1);
    let want: Vec<Vec<i64>> = (0..3)
        .flat_map(|c| (0..4).map(move |b| vec![b, c]))
        .collect();
    assert_eq!(got, want); // B0C0, B1C0, B2C0, B3C0, B0C1, …
                           // Program order without the knob, and with `interleaved(1)`.
    let plain: Vec<Vec<i64>> = (0..4)
        .flat_map(|b| (0..3).map(move |c| vec![b, c]))
        .collect();
    assert_eq!(order(&seed_example(""), &[], 1), plain);
    assert_eq!(
        order(&seed_example("order b = interleaved(1)"), &[], 1),
        plain
    );
    // Groups of two: B0C0, B1C0, B0C1, B1C1, B0C2, B1C2, then B2 and B3.
    let got = order(&seed_example("order b = interleaved(2)"), &[], 3);
    let want: Vec<Vec<i64>> = (0..2)
        .flat_map(|g| (0..3).flat_map(move |c| (0..2).map(move |m| vec![2 * g + m, c])))
        .collect();
    assert_eq!(got, want);
}

/// Requests of different lengths: `c` runs over `lens[b]` values.
fn ragged(n: u32, schedule_extra: &str) -> String {
    format!(
        "@param B = 6
@param lens = [3, 0, 5, 1, 2, 4]
@tensor X: f32[B, 16]
@kernel k(b, c): vector(inout x)
@workload w(%reqs: dense_dyn(B)) {{
  parallel_for b in %reqs {{
    for_each c in dense_dyn(lens[b]) {{
      task @k(b, c) resources(X[b, c])
    }}
  }}
}}
@schedule s for w {{ order b = interleaved({n}) {schedule_extra} }}"
    )
}

/// The seed's order by cursors: each group of `n` requests in turn; within a group, the next
/// value of every request that has one, in request order, until none has.
fn by_cursors(lens: &[u32], n: usize) -> Vec<Vec<i64>> {
    let mut out = vec![];
    for group in lens.chunks(n).enumerate() {
        let (g, members) = group;
        let mut next = vec![0u32; members.len()];
        loop {
            let mut any = false;
            for (m, &len) in members.iter().enumerate() {
                if next[m] < len {
                    out.push(vec![(g * n + m) as i64, next[m] as i64]);
                    next[m] += 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }
    out
}

#[test]
fn interleaving_requests_of_different_lengths_follows_the_cursors() {
    let cases: [&[u32]; 6] = [
        &[3, 0, 5, 1, 2, 4],
        &[0, 0, 0],
        &[],
        &[7],
        &[1, 1, 1, 1, 1, 1, 1],
        &[0, 9, 0, 0, 2],
    ];
    for lens in cases {
        for n in 1..=7u32 {
            for aicpus in [1, 2, 3, 6] {
                let given = [("B", vec![lens.len() as u32]), ("lens", lens.to_vec())];
                let got = order(&ragged(n, ""), &given, aicpus);
                assert_eq!(got, by_cursors(lens, n as usize), "lens {lens:?}, n {n}");
            }
        }
    }
}

#[test]
fn the_rounds_are_a_planned_value_with_the_longest_request() {
    let out = assemble("r.pto", &ragged(4, ""), &Options::default()).unwrap();
    let plans: Vec<&str> = out.module.plans.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(plans, ["b__rounds"]);
    let v = verify(&out.bytes).unwrap();
    for (lens, want) in [
        (vec![3, 0, 5, 1, 2, 4], 5),
        (vec![0, 0], 0),
        (vec![], 0),
        (vec![9], 9),
    ] {
        let given = [("B", vec![lens.len() as u32]), ("lens", lens.clone())];
        let vals = values(&out.module, &given);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        assert_eq!(p.planned().values[0], want, "{lens:?}");
    }
    // A loop whose extent does not depend on `b` needs no plan.
    let out = assemble(
        "s.pto",
        &seed_example("order b = interleaved(4)"),
        &Options::default(),
    )
    .unwrap();
    assert!(out.module.plans.is_empty());
}

/// FlashAttention-style split KV: `c` over the tiles of each request's tokens, with the
/// tile's bounds as parameters and region; the tile size a planned value.
const TILED: &str = "
@param B = 5
@param kv_len = [40, 16, 0, 1, 33]
@param min_chunk = 8
@plan chunk = max(min_chunk, max(b in 0 .. B: kv_len[b]) / 3)
@tensor kv: f16[B, 64]
@kernel attend(b, c, start, end): vector(in kv)
@workload w(%reqs: dense_dyn(B)) {
  parallel_for b in %reqs {
    parallel_for c in tile(dense_dyn(kv_len[b]), chunk) {
      task @attend(b, c, tile_start(c), tile_end(c)) resources(kv[b, tile_start(c) : tile_end(c)])
    }
  }
}
@schedule s for w { dispatch = affinity(b) ORDER }
";

#[test]
fn interleaved_tiles_keep_their_bounds() {
    let plain = order(&TILED.replace("ORDER", ""), &[], 1);
    // chunk = max(8, 40 / 3) = 13: 4 + 2 + 0 + 1 + 3 tiles.
    assert_eq!(plain.len(), 10);
    for n in [2u32, 3, 4, 5, 8] {
        let src = TILED.replace("ORDER", &format!("order b = interleaved({n})"));
        for aicpus in [1, 2, 4] {
            let got = order(&src, &[], aicpus);
            // The same tasks, with the same bounds, in the cursors' order.
            let lens: Vec<u32> = [40u32, 16, 0, 1, 33]
                .iter()
                .map(|l| l.div_ceil(13))
                .collect();
            let want: Vec<Vec<i64>> = by_cursors(&lens, n as usize)
                .into_iter()
                .map(|bc| plain.iter().find(|p| p[..2] == bc[..]).unwrap().clone())
                .collect();
            assert_eq!(got, want, "n {n}");
        }
    }
}

#[test]
fn dependencies_follow_the_new_program_order() {
    // Every task adds to one accumulator: the chain of edges follows generation order.
    let src = |sched: &str| {
        format!(
            "@tensor acc: f32[1]
@kernel k(b, c): vector(inout acc)
@workload w(%batch: dense[3]) {{
  parallel_for b in %batch {{
    for_each c in dense[2] {{
      task @k(b, c) resources(acc[0])
    }}
  }}
}}
@schedule s for w {{ {sched} }}"
        )
    };
    for (sched, want) in [
        ("", vec![[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1]]),
        (
            "order b = interleaved(3)",
            vec![[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1]],
        ),
    ] {
        let ts = expand(&src(sched), &[], 2);
        let got: Vec<[i64; 2]> = ts.iter().map(|t| [t.params[0], t.params[1]]).collect();
        assert_eq!(got, want);
        let chain: Vec<(u64, u64)> = edges(&ts, DepMode::Overlap)
            .iter()
            .map(|e| (e.from, e.to))
            .collect();
        assert_eq!(chain, (0..5).map(|i| (i, i + 1)).collect::<Vec<_>>());
    }
}

#[test]
fn interleaving_keeps_subtree_skipping() {
    // With `dispatch = affinity(b)` an AICPU skips the members it does not own without walking
    // their rounds' bodies: its visits stay well below the whole program's.
    let src = ragged(4, "dispatch = affinity(b)");
    let lens: Vec<u32> = (0..64).map(|i| (i * 7) % 11).collect();
    let given = [("B", vec![64]), ("lens", lens.clone())];
    let (bytes, m) = asm(&src);
    let v = verify(&bytes).unwrap();
    let vals = values(&m, &given);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let all = reference_expand(&v, &p, 4, 1 << 20).unwrap();
    assert_eq!(all.len() as u32, lens.iter().sum::<u32>());
    for aicpu in 0..4 {
        let e = expand_aicpu(v, p, aicpu, 4, 1 << 20, 64).unwrap();
        assert!(e.tasks.iter().all(|t| t.params[0] % 4 == aicpu as i64));
        assert!(e.stats.skipped > 0);
    }
    // The same tasks as program order.
    let mut a: Vec<Vec<i64>> = all.iter().map(|t| t.params.clone()).collect();
    a.sort();
    let plain = src.replace("order b = interleaved(4)", "");
    let mut b = order(&plain, &given, 4);
    b.sort();
    assert_eq!(a, b);
}

#[test]
fn sequential_and_parallel_set_the_loops_kind() {
    let kinds = |sched: &str| -> Vec<Opcode> {
        let out = assemble("k.pto", &seed_example(sched), &Options::default()).unwrap();
        out.module
            .code
            .iter()
            .filter_map(|r| Opcode::from_u8(r.opcode))
            .filter(|o| matches!(o, Opcode::PARALLEL_FOR | Opcode::FOR_EACH))
            .collect()
    };
    assert_eq!(kinds(""), [Opcode::PARALLEL_FOR, Opcode::PARALLEL_FOR]);
    assert_eq!(
        kinds("order b = sequential"),
        [Opcode::FOR_EACH, Opcode::PARALLEL_FOR]
    );
    assert_eq!(
        kinds("order c = sequential; order b = parallel"),
        [Opcode::PARALLEL_FOR, Opcode::FOR_EACH]
    );
    // Neither changes which tasks are generated or their order.
    assert_eq!(
        order(&seed_example("order b = sequential"), &[], 2),
        order(&seed_example(""), &[], 2)
    );
}

#[test]
fn core_group_affinity_is_the_affinity_dispatch() {
    let a = assemble(
        "a.pto",
        &seed_example("affinity b = core_group"),
        &Options::default(),
    )
    .unwrap();
    let d = assemble(
        "d.pto",
        &seed_example("dispatch = affinity(b)"),
        &Options::default(),
    )
    .unwrap();
    assert_eq!(a.module.config.policy, d.module.config.policy);
    assert_eq!(a.module.exprs, d.module.exprs);
    // With interleaving, the key is b's value.
    let ts = expand(
        &seed_example("affinity b = core_group; order b = interleaved(4); aicpus = 3"),
        &[],
        3,
    );
    assert!(ts.iter().all(|t| t.owner as i64 == t.params[0] % 3));
}

fn run_bounded(
    bytes: Vec<u8>,
    vals: Vec<(ptovm_vm::ParamKind, u32, Vec<u32>)>,
    o: sim::Options,
) -> Result<sim::Report, SimError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let v = verify(&bytes).unwrap();
        let vv: Vec<Value<'_>> = ptovm_tests::values(&vals);
        let p = RuntimeParams::new(&v, &vv).unwrap();
        let _ = tx.send(sim::run(v, p, o));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the simulator did not finish (deadlock?) with {o:?}"))
}

#[test]
fn threaded_runs_of_interleaved_loops_check() {
    // A chain per request through `acc[b]`, and one accumulator all tasks of a round share.
    let src = "
@param B = 7
@param lens = [3, 0, 5, 1, 2, 4, 6]
@tensor acc: f32[B]
@tensor round: f32[8]
@kernel k(b, c): vector(inout a, inout r)
@workload w(%reqs: dense_dyn(B)) {
  parallel_for b in %reqs {
    for_each c in dense_dyn(lens[b]) {
      task @k(b, c) resources(acc[b], round[c])
    }
  }
}
@schedule s for w { order b = interleaved(3) }";
    let out = assemble("t.pto", src, &Options::default()).unwrap();
    let vals: Vec<(ptovm_vm::ParamKind, u32, Vec<u32>)> = out
        .module
        .params
        .iter()
        .map(|p| {
            let d = p.default.clone().unwrap();
            match p.kind {
                ptovm_vm::ParamKind::Scalar => (p.kind, d[0], vec![]),
                ptovm_vm::ParamKind::Array => (p.kind, 0, d),
            }
        })
        .collect();
    for aicpus in [1, 2, 6] {
        for window in [1, 8, 1024] {
            let o = sim::Options {
                aicpus,
                cube: 2 * aicpus,
                vector: 2 * aicpus,
                window,
                mode: WindowMode::Stall,
                check: true,
                jitter: Some(aicpus as u64 * 31 + window as u64),
                ..sim::Options::default()
            };
            let r = run_bounded(out.bytes.clone(), vals.clone(), o)
                .unwrap_or_else(|e| panic!("{aicpus} AICPUs, window {window}: {e}"));
            assert!(r.checked);
            assert_eq!(r.tasks_total, 21);
        }
    }
}

fn error(src: &str) -> (DiagKind, String) {
    let e = assemble("e.pto", src, &Options::default()).unwrap_err();
    (e.0.kind, e.0.message.clone())
}

#[test]
fn bad_orders_are_located_errors() {
    let cases: &[(&str, &str)] = &[
        ("order b = interleaved(0)", "1 ..= 65535"),
        ("order b = interleaved", "needs the group size"),
        ("order b = sequential(2)", "takes no argument"),
        ("order b = shuffled", "unknown order `shuffled`"),
        ("order z = sequential", "no loop of workload `w` binds `z`"),
        ("order b = sequential; order b = parallel", "set twice"),
        ("prefetch b = 1", "`prefetch b` is not supported"),
        ("affinity b = core_local", "not supported"),
        ("affinity b = spread", "not supported"),
        ("affinity b = nearby", "unknown affinity"),
        (
            "affinity b = core_group; dispatch = round_robin",
            "sets `dispatch` too",
        ),
        ("order c = interleaved(2)", "exactly that one loop"),
        (
            "order b = interleaved(2); dispatch = static(b)",
            "cannot be a `static` partition",
        ),
    ];
    for (sched, want) in cases {
        let src = seed_example(sched);
        let (_, msg) = error(&src);
        assert!(msg.contains(want), "{sched}: {msg}");
    }
    // `order = …` without the variable.
    let (kind, msg) = error(&seed_example("order = interleaved(4)"));
    assert_eq!(kind, DiagKind::Syntax);
    assert!(msg.contains("order b = interleaved(4)"), "{msg}");
    // Axes without a per-value extent.
    let sparse = "
@param B = 2
@param ptr = [0, 1, 2]
@param idx = [0, 1]
@kernel k(b, c): vector()
@workload w(%reqs: dense_dyn(B)) {
  parallel_for b in %reqs {
    select c in sparse_row(b, ptr, idx) { task @k(b, c) resources() }
  }
}
@schedule s for w { order b = interleaved(2) }";
    assert!(error(sparse).1.contains("ragged and sparse axes"));
    // The rounds are planned at launch: the inner extent may not read an outer loop variable.
    let outer = "
@param lens = [1, 2, 3, 4]
@kernel k(a, b, c): vector()
@workload w(%two: dense[2]) {
  parallel_for a in %two {
    parallel_for b in dense[2] {
      for_each c in dense_dyn(lens[2 * a + b]) { task @k(a, b, c) resources() }
    }
  }
}
@schedule s for w { order b = interleaved(2) }";
    assert!(
        error(outer).1.contains("reads loop variable `a`"),
        "{}",
        error(outer).1
    );
    // … but when it does not depend on `b` it may (the rounds are the loop itself).
    let fine = outer.replace("lens[2 * a + b]", "lens[a]");
    let got = order(&fine, &[], 2);
    assert_eq!(got.len(), 2 + 2 * 2);
    assert_eq!(got[..2], [vec![0, 0, 0], vec![0, 1, 0]]);
    // `b` passed to a call, or used as an array.
    let call = "
@kernel k(x): vector()
@workload w(%batch: dense[4]) {
  parallel_for b in %batch {
    parallel_for c in dense[2] { call @inner(b) }
  }
}
@workload inner(%x: dense[1]) { task @k(0) resources() }
@schedule s for w { order b = interleaved(2) }";
    assert!(
        error(call).1.contains("cannot be passed to a call"),
        "{}",
        error(call).1
    );
}

/// spec/pto.md §6's generation-order example generates what it says.
#[test]
fn the_spec_example_generates_what_the_spec_says() {
    let spec = include_str!("../../spec/pto.md");
    let start = spec.find("Generation order (§4.6): the chunks").unwrap();
    let block = &spec[start..];
    let code = &block[block.find("```pto\n").unwrap() + 7..];
    let (code, after) = code.split_at(code.find("```").unwrap());
    let ts = expand(code, &[], 6);
    let got: Vec<String> = ts
        .iter()
        .map(|t| format!("({}, {})", t.params[0], t.params[1]))
        .collect();
    let text = after.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains(&format!(
            "The {} tasks are generated as `(b, c)` = {}:",
            got.len(),
            got.join(", ")
        )),
        "{got:?}"
    );
    assert!(ts.iter().all(|t| t.owner as i64 == t.params[0] % 6));
    let (bytes, m) = asm(code);
    let v = verify(&bytes).unwrap();
    let vals = values(&m, &[]);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    assert_eq!(m.plans[0].name, "b__rounds");
    assert_eq!(p.planned().values[0], 3);
    assert!(text.contains("the planned `b__rounds` is 3"));
}
