//! The tensor classes of spec/runtime.md §3.5 (`ptovm_vm::share`) against the reference
//! expander: a read-only tensor is written by no task; two overlapping accesses of a local
//! tensor always belong to one AICPU; no task at or past a shared tensor's `writes_end` writes
//! it, none at or past `accesses_end` accesses it. The scheduler relies on all three to record
//! without waiting. And the recording rule (`use_of`, with loop-indexed tensors): an access it
//! does not look up conflicts with no earlier task's access, one it does not record with no
//! later task's, and every task of a site gets its site's answer. Each is checked on random
//! programs, on programs built around loop nests, and on the bundled examples.

use proptest::prelude::*;
use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{reference_expand, RefTask};
use ptovm_tests::{example, gen_params, values, Gen};

use ptovm_vm::share::{analyze, chain, use_of, Class, Sharing, CHAIN_SPAN};
use ptovm_vm::tmap::Use;
use ptovm_vm::{verify, Interpreter, RuntimeParams, Verified};

/// The classes of a program on `n` AICPUs.
fn classes(bytes: &[u8], params: &ptovm_tests::Params, n: u32) -> Vec<Sharing> {
    let v = verify(bytes).unwrap();
    let vals = values(params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let it = Interpreter::new(v, p, 0, n).unwrap();
    let mut out = vec![Sharing::default(); v.tensors().len()];
    analyze(&it, &mut out).unwrap();
    out
}

/// Checks the facts of the module's list against the reference tasks; returns the violations.
fn violations(v: &Verified<'_>, shares: &[Sharing], tasks: &[RefTask]) -> Vec<String> {
    recording(v, shares, tasks).0
}

/// The structural producers (§3.6–3.7) against the reference: for every task, the tasks
/// the program names (`chain(..).producers(iter)`) are exactly its reference predecessors
/// (overlap mode, one edge per pair, as a map finds them) through the accesses of its
/// chained tensors and of its carried tensors' loop bodies — what comes before and after a
/// carried tensor's loop the map finds, and
/// `the_in_order_window_finds_exactly_the_reference_edges_in_it` checks the two together —
/// owned by the task's AICPU, less than `CHAIN_SPAN` ids before it. Also counts them.
fn chain_violations(v: &Verified<'_>, shares: &[Sharing], tasks: &[RefTask]) -> (Vec<String>, u64) {
    let code = v.code();
    let named = |site: u32, io: &ptovm_vm::Io| {
        shares.get(io.tensor as usize).is_some_and(|s| {
            s.chained || s.carried && s.body < site && site < code[s.body as usize].op2()
        })
    };
    let only: Vec<RefTask> = tasks
        .iter()
        .map(|t| RefTask {
            io: t
                .io
                .iter()
                .copied()
                .filter(|io| named(t.site, io))
                .collect(),
            ..t.clone()
        })
        .collect();
    let mut want = vec![Vec::new(); tasks.len()];
    for e in ptovm_host_sim::edges(&only, ptovm_host_sim::DepMode::Overlap) {
        want[e.to as usize].push(e.from);
    }
    let mut bad = Vec::new();
    let mut count = 0;
    for (t, want) in tasks.iter().zip(want) {
        let c = chain(v, shares, t.site);
        let m = c.producers(t.iter);
        let got: Vec<u64> = (1..CHAIN_SPAN as u64)
            .rev()
            .filter(|d| m & 1 << d != 0)
            .map(|d| t.id.wrapping_sub(d))
            .collect();
        count += got.len() as u64;
        if got != want {
            bad.push(format!(
                "task {} (site {}, iter {}): structural producers {got:?}, reference {want:?}",
                t.id, t.site, t.iter
            ));
        }
        if m & 1 != 0 {
            bad.push(format!("task {} names itself", t.id));
        }
        for &p in &got {
            match tasks.get(p as usize) {
                Some(q) if q.owner == t.owner => {}
                _ => bad.push(format!(
                    "task {}'s producer {p} is not its AICPU's ({})",
                    t.id, t.owner
                )),
            }
        }
    }
    (bad, count)
}

/// [`violations`]: the class facts, and for every access the recording rule's — one `use_of`
/// does not look up conflicts (overlaps, one of the two a write) with no earlier task's
/// access, one it does not record with no later task's, a site's tasks all get one answer.
/// Also counts the
/// accesses whose lookup or record only a loop-indexed tensor's rule spares (the rest would be
/// looked up, or recorded, without it).
fn recording(v: &Verified<'_>, shares: &[Sharing], tasks: &[RefTask]) -> (Vec<String>, usize) {
    let mut bad = chain_violations(v, shares, tasks).0;
    let mut spared = 0;
    // The uses depend on the site alone (what `SiteUses` remembers).
    let mut by_site = std::collections::HashMap::new();
    for t in tasks {
        for (k, io) in t.io.iter().enumerate() {
            let u = use_of(shares, t.id, t.site, io);
            let first = *by_site.entry((t.site, k)).or_insert((t.id, u));
            if first.1 != u {
                bad.push(format!(
                    "task {} of site {}, region {k}: {u:?}, but {:?} for task {}",
                    t.id, t.site, first.1, first.0
                ));
            }
        }
    }
    for (x, s) in shares.iter().enumerate() {
        let accesses: Vec<(&RefTask, &ptovm_vm::Io)> = tasks
            .iter()
            .flat_map(|t| t.io.iter().map(move |io| (t, io)))
            .filter(|(_, io)| io.tensor as usize == x)
            .collect();
        let writes: Vec<(&RefTask, &ptovm_vm::Io)> = accesses
            .iter()
            .copied()
            .filter(|(_, io)| io.writes())
            .collect();
        let conflict =
            |a: &ptovm_vm::Io, b: &ptovm_vm::Io| a.overlaps(b) && (a.writes() || b.writes());
        for &(t, io) in &accesses {
            let how = use_of(shares, t.id, t.site, io).0;
            let lookup = matches!(how, Use::Record | Use::Lookup);
            let record =
                matches!(how, Use::Record | Use::Insert) || how == Use::Lookup && io.writes();
            let others: &[(&RefTask, &ptovm_vm::Io)] =
                if io.writes() { &accesses } else { &writes };
            // A chained tensor's edges, and a carried one's in its loop's body, are the
            // structural producers' (checked above) and the map's per iteration (the
            // in-order window test).
            let named = s.chained
                || s.carried && s.body < t.site && t.site < v.code()[s.body as usize].op2();
            if !lookup && !named {
                if let Some((b, _)) = others
                    .iter()
                    .find(|(b, bio)| b.id < t.id && conflict(io, bio))
                {
                    bad.push(format!(
                        "tensor {x} ({s:?}): task {} (site {}) is not looked up, but task {} before it conflicts",
                        t.id, t.site, b.id
                    ));
                }
            }
            if !record && !named {
                if let Some((b, _)) = others
                    .iter()
                    .find(|(b, bio)| b.id > t.id && conflict(io, bio))
                {
                    bad.push(format!(
                        "tensor {x} ({s:?}): task {} (site {}) is not recorded, but task {} after it conflicts",
                        t.id, t.site, b.id
                    ));
                }
            }
            let class_record = io.writes() || t.id < s.writes_end;
            if s.class != Class::ReadOnly && s.loop_indexed && (!lookup || !record && class_record)
            {
                spared += 1;
            }
        }
        for (t, io) in &accesses {
            if io.writes() && (s.class == Class::ReadOnly || t.id >= s.writes_end) {
                bad.push(format!(
                    "tensor {x} ({s:?}) is written by task {} at or past its bound",
                    t.id
                ));
            }
            if t.id >= s.accesses_end {
                bad.push(format!(
                    "tensor {x} ({s:?}) is accessed by task {} past its bound",
                    t.id
                ));
            }
        }
        if s.class == Class::Local {
            for (i, (a, ia)) in accesses.iter().enumerate() {
                for (b, ib) in &accesses[i + 1..] {
                    if a.owner != b.owner && ia.overlaps(ib) && (ia.writes() || ib.writes()) {
                        bad.push(format!(
                            "local tensor {x}: tasks {} (AICPU {}) and {} (AICPU {}) conflict",
                            a.id, a.owner, b.id, b.owner
                        ));
                    }
                }
            }
        }
    }
    (bad, spared)
}

/// Random programs whose dispatch key is used as a region index at some sites, so that
/// local, shared and read-only tensors all occur.
fn keyed_program(seed: u64) -> String {
    let mut g = Gen::new(seed);
    let policy = [
        "affinity(i)",
        "hash(i)",
        "round_robin(4)",
        "affinity(i + 1)",
        "static(i)",
    ][g.below(5) as usize];
    let mut body = String::new();
    // The key in dimension 0, in dimension 1 (`j, i`: local when every site keys the same
    // dimension), in both, or in none.
    let index = |g: &mut Gen| match g.below(9) {
        0 => "i",
        1 => "j",
        2 => "i + 1",
        3 => "i, j",
        4 => "j, i",
        5 => "0:2, i",
        6 => "j, i + 1",
        7 => "i, i",
        _ => "0:2",
    };
    for _ in 0..1 + g.below(4) {
        let (a, b) = (g.below(3), g.below(3));
        let (ia, ib) = (index(&mut g), index(&mut g));
        let kernel = ["r", "w", "rw"][g.below(3) as usize];
        let inner = format!("task @{kernel}(i) resources(T{a}[{ia}], T{b}[{ib}])");
        body += &if g.below(2) == 0 {
            format!("  parallel_for i in dense[6] {{ for_each j in dense[3] {{ {inner} }} }}\n")
        } else {
            format!(
                "  parallel_for i in dense[6] {{ for_each j in dense[3] {{ {inner} }} }}\n  parallel_for i in dense[{e}] {{ task @r(i) resources(T{a}[{ia}], T{b}[i]) }}\n",
                ia = ia.replace('j', "0"),
                // Another extent cuts a static partition's blocks elsewhere.
                e = [6, 3][g.below(2) as usize]
            )
        };
    }
    format!(
        "@tensor T0: f16[8, 8]\n@tensor T1: f16[8, 8]\n@tensor T2: f16[8, 8]\n\
         @kernel r(i): vector(in a, in b)\n@kernel w(i): vector(in a, out b)\n\
         @kernel rw(i): vector(inout a, inout b)\n\
         @workload k() {{\n{body}}}\n@schedule s for k {{ dispatch = {policy} }}"
    )
}

fn check_program(src: &str, params: &ptovm_tests::Params, n: u32) -> Option<Vec<Sharing>> {
    let out =
        assemble("gen.pto", src, &Options::default()).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let v = verify(&out.bytes).unwrap();
    let vals = values(params);
    let p = RuntimeParams::new(&v, &vals).ok()?;
    let tasks = reference_expand(&v, &p, n, 100_000).ok()?;
    let it = Interpreter::new(v, p, 0, n).ok()?;
    let mut shares = vec![Sharing::default(); v.tensors().len()];
    analyze(&it, &mut shares).ok()?;
    let bad = violations(&v, &shares, &tasks);
    assert!(bad.is_empty(), "{}\n{src}", bad.join("\n"));
    Some(shares)
}

#[test]
fn keyed_programs_have_every_class_and_no_violation() {
    let mut seen = [0usize; 3];
    for seed in 0..400u64 {
        let src = keyed_program(seed);
        for n in [1u32, 2, 3, 6] {
            if let Some(shares) = check_program(&src, &Vec::new(), n) {
                for s in &shares {
                    if n > 1 {
                        seen[s.class as usize] += 1;
                    }
                }
            }
        }
    }
    // The generator reaches every class on several AICPUs, so the checks above had work.
    assert!(seen.iter().all(|&k| k > 50), "classes seen: {seen:?}");
}

#[test]
fn loop_indexed_tensors_skip_only_what_nothing_meets() {
    let (mut spared, mut indexed, mut not) = (0, 0, 0);
    for seed in 0..400u64 {
        let src = ptovm_tests::indexed_program(seed);
        let out =
            assemble("gen.pto", &src, &Options::default()).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let v = verify(&out.bytes).unwrap();
        let p = RuntimeParams::new(&v, &[]).unwrap();
        for n in [1u32, 3] {
            let tasks = reference_expand(&v, &p, n, 100_000).unwrap();
            let s = classes(&out.bytes, &Vec::new(), n);
            let (bad, k) = recording(&v, &s, &tasks);
            assert!(bad.is_empty(), "{}\n{src}", bad.join("\n"));
            spared += k;
            indexed += s
                .iter()
                .filter(|s| s.loop_indexed && s.class != Class::ReadOnly)
                .count();
            not += s
                .iter()
                .filter(|s| !s.loop_indexed && s.class != Class::ReadOnly)
                .count();
        }
    }
    // Both kinds occur often, and the loop-indexed ones spared real work, so the checks had
    // some.
    assert!(
        spared > 1000 && indexed > 100 && not > 100,
        "{spared} {indexed} {not}"
    );
}

/// A sparse axis gives its loop variable the stored column indices, which may repeat: two
/// iterations of `select t` then name the same `h[e, t]`, so `h` is not loop-indexed, and
/// the second iteration's write must find the first's accesses.
#[test]
fn a_sparse_loop_does_not_index_its_tensors() {
    let src = "@tensor h: f16[2, 4]\n@tensor y: f16[2, 4]\n\
        @kernel up(e, t): vector(out h)\n@kernel down(e, t): vector(in h, out y)\n\
        @workload moe(%experts: dense[2]) {\n\
          parallel_for e in %experts {\n\
            select t in sparse_row(e, ptr, tokens) {\n\
              task @up(e, t) resources(h[e, t])\n\
              task @down(e, t) resources(h[e, t], y[e, t])\n\
            }\n\
          }\n\
        }\n@schedule s for moe { dispatch = affinity(e) }";
    let out = assemble("moe.pto", src, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    // Expert 0 routes token 1 twice, expert 1 tokens 0 and 3.
    let arrays = [("ptr", vec![0, 2, 4]), ("tokens", vec![1, 1, 0, 3])];
    let params: ptovm_tests::Params = out
        .module
        .params
        .iter()
        .map(|slot| {
            let (_, a) = arrays.iter().find(|(n, _)| *n == slot.name).unwrap();
            (slot.kind, 0, a.clone())
        })
        .collect();
    let v = verify(&out.bytes).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    for n in [1, 2] {
        let s = classes(&out.bytes, &params, n);
        assert!(!s[0].loop_indexed && !s[1].loop_indexed);
        let tasks = reference_expand(&v, &p, n, u64::MAX).unwrap();
        assert_eq!(tasks.len(), 8);
        let (bad, _) = recording(&v, &s, &tasks);
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_break_no_class(seed in any::<u64>(), n in 1u32..=6) {
        let src = Gen::runnable(seed).module();
        let out = assemble("gen.pto", &src, &Options::default()).unwrap();
        let params = gen_params(&out.module, seed);
        check_program(&src, &params, n);
    }
}

#[test]
fn the_llama_layer_shares_only_k_and_v() {
    let (bytes, params) = example("llama_layer.pto", &[("N", 8, vec![])]);
    let s = classes(&bytes, &params, 6);
    let names = [
        "X", "Xn", "Wqkv", "Wo", "Wgu", "Wd", "Q", "K", "V", "S", "P", "Stat", "Acc", "A", "H",
        "Hn", "G", "U", "Y",
    ];
    for (name, s) in names.iter().zip(&s) {
        let want = match *name {
            "X" | "Wqkv" | "Wo" | "Wgu" | "Wd" => Class::ReadOnly,
            "K" | "V" => Class::Shared,
            _ => Class::Local,
        };
        assert_eq!(s.class, want, "{name}");
    }
    // K and V are written in the first loop only (7 tasks per tile) and read to the end.
    assert_eq!(
        (s[7].writes_end, s[7].accesses_end),
        (7 * 8, 3 * 64 + 16 * 8)
    );
    // Loop-indexed: the tensors every site names by exactly the variables of its loops —
    // the score and probability tiles of the attention nest (`[t, k]`), the per-tile tensors
    // of either loop's body (`X`, `Xn`, `A`, `H`, `Hn`, `G`, `U`, `Y`). Not: those the
    // attention nest names by one of its two variables (`Q`, `K`, `V`, `Stat`, `Acc`) and the
    // weights (named by a constant, or whole).
    for (name, s) in names.iter().zip(&s) {
        let want = matches!(
            *name,
            "X" | "Xn" | "S" | "P" | "A" | "H" | "Hn" | "G" | "U" | "Y"
        );
        assert_eq!(s.loop_indexed, want, "{name}");
    }
    // Chained (§3.6): the loop-indexed local tensors whose sites all sit in one body of
    // `TASK` statements — `Xn` in the first loop's, `S` and `P` in the attention's inner one.
    // The second loop's per-tile tensors share its body with the attention nest.
    for (name, s) in names.iter().zip(&s) {
        assert_eq!(s.chained, matches!(*name, "Xn" | "S" | "P"), "{name}");
        // Carried (§3.7) by the attention's inner loop: the running statistics and the
        // accumulator, named `[t]` in its body, before it (`attn_init`) and after it.
        assert_eq!(s.carried, matches!(*name, "Stat" | "Acc"), "{name}");
    }
    // On one AICPU nothing is shared.
    let one = classes(&bytes, &params, 1);
    assert!(one.iter().all(|s| s.class != Class::Shared));
    let v = verify(&bytes).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let reference = reference_expand(&v, &p, 6, u64::MAX).unwrap();
    assert!(violations(&v, &s, &reference).is_empty());
}

#[test]
fn the_examples_break_no_class() {
    for (name, bytes, params) in ptovm_tests::examples() {
        let v = verify(&bytes).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        for n in [1, 2, 4, 6] {
            let s = classes(&bytes, &params, n);
            let reference = reference_expand(&v, &p, n, u64::MAX).unwrap();
            let bad = violations(&v, &s, &reference);
            assert!(bad.is_empty(), "{name} on {n}: {}", bad.join("\n"));
        }
    }
}

/// Task Bench's patterns under `static(i)` (chain under `round_robin`) name their tensor
/// `G[t, i]`: by the deciding loop's variable in dimension 1.
/// no_comm's and trivial's every access is, so `G` is local; the patterns that read other
/// points (`G[t - 1, i - 1 : i + 2]`, `G[t - 1, i / 2]`) share it. No reference edge joins two
/// AICPUs' accesses of a local tensor.
#[test]
fn task_benchs_tensor_is_local_exactly_when_every_access_is_keyed() {
    for (pattern, local) in [
        ("trivial", true),
        ("no_comm", true),
        ("stencil_1d", false),
        ("tree", false),
        ("spread", false),
        ("chain", false),
    ] {
        let (bytes, params) = ptovm_tests::example(
            &format!("taskbench/{pattern}.pto"),
            &[("W", 7, vec![]), ("T", 5, vec![])],
        );
        let v = verify(&bytes).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        for n in [2, 6] {
            let s = classes(&bytes, &params, n);
            let want = if local { Class::Local } else { Class::Shared };
            assert_eq!(s[0].class, want, "{pattern} on {n}");
            let reference = reference_expand(&v, &p, n, u64::MAX).unwrap();
            let bad = violations(&v, &s, &reference);
            assert!(bad.is_empty(), "{pattern} on {n}: {}", bad.join("\n"));
        }
    }
}

/// A tensor stepped by its outermost loop (§3.5: every write names dimension 0 by `t`, every
/// read by `t − c`, `c ≥ 1`, all inside that loop) has its reads only looked up; the facts
/// hold against the reference on every Task Bench pattern and on near misses, which are not
/// stepped: a read of the current row, a write of an earlier row, a read of a later row, an
/// access outside the loop, the loop inside another loop, a sparse outermost loop.
#[test]
fn stepped_tensors_are_read_without_being_recorded() {
    for pattern in ptovm_tests::taskbench::PATTERNS.iter().chain(&["chain"]) {
        let (bytes, params) = ptovm_tests::example(&format!("taskbench/{pattern}.pto"), &[]);
        let v = verify(&bytes).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        for n in [1, 2, 6] {
            let s = classes(&bytes, &params, n);
            assert!(s[0].stepped, "{pattern} on {n}: {:?}", s[0]);
            assert!(s[0].written_once, "{pattern} on {n}: {:?}", s[0]);
            let reference = reference_expand(&v, &p, n, u64::MAX).unwrap();
            let bad = violations(&v, &s, &reference);
            assert!(bad.is_empty(), "{pattern} on {n}: {}", bad.join("\n"));
        }
    }
    let stepped = "task @k(t, i) resources(G[t - 1, i], G[t, i])";
    for (body, outside, want) in [
        (stepped, "", true),
        (
            "task @k(t, i) resources(G[t - 2, i : i + 1], G[t, i])",
            "",
            true,
        ),
        (
            "task @k(t, i) resources(G[t, max(i, 1) - 1], G[t, i])",
            "",
            false,
        ),
        ("task @k(t, i) resources(G[t, i], G[t - 1, i])", "", false),
        (
            "task @k(t, i) resources(G[t - 1, i], G[t - 2, i])",
            "",
            false,
        ),
        ("task @k(t, i) resources(G[t + 1, i], G[t, i])", "", false),
        (
            stepped,
            "task @k(0, 0) resources(G[0, 0 : 4], G[3, 0])",
            false,
        ),
    ] {
        let src = format!(
            "@tensor G: f32[9, 4]\n@kernel k(a, b): vector(in x, out y)\n\
             @workload w() {{ for_each t in dense[8] {{ cond t >= 2 {{ parallel_for i in dense[4] {{\n\
             {body}\n}} }} }}\n{outside}\n}}\n@schedule s for w {{ dispatch = round_robin }}"
        );
        check_stepped(&src, want);
    }
    // The loop inside another loop (it runs twice), and a sparse outermost loop.
    check_stepped(
        "@tensor G: f32[8, 4]\n@kernel k(a, b): vector(in x, out y)\n\
         @workload w() { for_each r in dense[2] { for_each t in dense[8] { cond t >= 1 {\n\
         parallel_for i in dense[4] { task @k(t, i) resources(G[t - 1, i], G[t, i]) } } } } }",
        false,
    );
    check_stepped(
        "@param ptr = [0, 1, 2, 3, 4, 5, 6, 7, 8]\n@param idx = [0, 1, 2, 3, 4, 5, 6, 7]\n\
         @tensor G: f32[8, 4]\n@kernel k(a, b): vector(in x, out y)\n\
         @workload w() { select t in sparse(0, ptr, idx) { cond t >= 1 {\n\
         parallel_for i in dense[4] { task @k(t, i) resources(G[t - 1, i], G[t, i]) } } } }",
        false,
    );
}

/// A stepped tensor is written once (§3.5: every write names it by exactly its loops'
/// variables, any two writing sites in the two blocks of one `COND`) in a chain of three
/// exclusive sites, and not in its near misses: two writing sites in one block, a write of a
/// fixed column, a write inside a loop its region does not name, a write by a sparse loop's
/// variable (whose values may repeat), two sibling loops writing one row, a `COND` without an
/// else block around one of two writes. Each time, writes are looked up exactly when it is not,
/// and the recording facts hold against the reference.
#[test]
fn a_tensor_written_once_has_its_writes_only_inserted() {
    let three = "cond t == 1 { task @k(t, i) resources(G[t - 1, i], G[t, i]) } \
                 else cond i == 0 { task @k(t, i) resources(G[t - 1, i], G[t, i]) } \
                 else { task @k(t, i) resources(G[t - 2, i], G[t, i]) }";
    let two_in_one = "task @k(t, i) resources(G[t - 1, i], G[t, i])\n\
                      task @k(t, i) resources(G[t - 1, i], G[t, i])";
    let one_arm = "cond i == 0 { task @k(t, i) resources(G[t - 1, i], G[t, i]) }\n\
                   task @k(t, i) resources(G[t - 1, i], G[t, i])";
    for (body, want) in [
        (three, true),
        ("task @k(t, i) resources(G[t - 1, i], G[t, i])", true),
        (two_in_one, false),
        ("task @k(t, i) resources(G[t - 1, i], G[t, 0])", false),
        (
            "for_each j in dense[2] { task @k(t, i) resources(G[t - 1, i], G[t, i]) }",
            false,
        ),
        (one_arm, false),
    ] {
        let src = format!(
            "@tensor G: f32[9, 4]\n@kernel k(a, b): vector(in x, out y)\n\
             @workload w() {{ for_each t in dense[8] {{ cond t >= 2 {{ parallel_for i in dense[4] {{\n\
             {body}\n}} }} }} }}\n@schedule s for w {{ dispatch = round_robin }}"
        );
        check_written_once(&src, want);
    }
    // Two sibling loops writing one row; a sparse loop's variable.
    check_written_once(
        "@tensor G: f32[9, 4]\n@kernel k(a, b): vector(in x, out y)\n\
         @workload w() { for_each t in dense[8] { cond t >= 1 {\n\
         parallel_for i in dense[4] { task @k(t, i) resources(G[t - 1, i], G[t, i]) }\n\
         parallel_for j in dense[4] { task @k(t, j) resources(G[t - 1, j], G[t, j]) } } } }",
        false,
    );
    check_written_once(
        "@param ptr = [0, 2, 4, 6, 8, 10, 12, 14, 16]\n@param idx = [0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3]\n\
         @tensor G: f32[8, 4]\n@kernel k(a, b): vector(in x, out y)\n\
         @workload w() { for_each t in dense[8] { cond t >= 1 {\n\
         select i in sparse(t, ptr, idx) { task @k(t, i) resources(G[t - 1, i], G[t, i]) } } } }",
        false,
    );
}

/// [`check_stepped`] for a stepped tensor, and `G` written once as `want` says: its writes
/// only inserted exactly then.
fn check_written_once(src: &str, want: bool) {
    check_classes(src, true, Some(want));
}

/// Classes `src`'s tensor `G` (tensor 0) on 1, 2 and 6 AICPUs: stepped as `want` says, and the
/// recording facts hold against the reference.
fn check_stepped(src: &str, want: bool) {
    check_classes(src, want, None);
}

/// [`check_stepped`], and with `once`, `G` written once as it says and its writes only
/// inserted exactly then.
fn check_classes(src: &str, stepped: bool, once: Option<bool>) {
    let (bytes, params) = ptovm_tests::assemble_named("s", src, &[]);
    let v = verify(&bytes).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    for n in [1, 2, 6] {
        let s = classes(&bytes, &params, n);
        assert_eq!(s[0].stepped, stepped, "on {n}:\n{src}");
        let reference = reference_expand(&v, &p, n, u64::MAX).unwrap();
        let bad = violations(&v, &s, &reference);
        assert!(bad.is_empty(), "on {n}: {}\n{src}", bad.join("\n"));
        let Some(want) = once else { continue };
        assert_eq!(s[0].written_once, want, "on {n}:\n{src}");
        let writes = reference
            .iter()
            .flat_map(|t| t.io.iter().map(move |io| (t, io)));
        for (t, io) in writes.filter(|(_, io)| io.tensor == 0 && io.writes()) {
            let how = use_of(&s, t.id, t.site, io).0;
            assert_eq!(how == Use::Insert, want, "task {} on {n}:\n{src}", t.id);
        }
    }
}

#[test]
fn a_short_class_buffer_is_an_error() {
    let (bytes, params) = example("llama_layer.pto", &[("N", 2, vec![])]);
    let v = verify(&bytes).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let it = Interpreter::new(v, p, 0, 2).unwrap();
    let mut out = vec![Sharing::default(); 3];
    assert_eq!(
        analyze(&it, &mut out),
        Err(ptovm_vm::share::ShareError::Short { need: 19, got: 3 })
    );
}

/// The runtime parameters of a `chained_program`: `N` (its dynamic extent) set to `n`.
fn chained_params(out: &ptovm_assembler::Output, n: u32) -> ptovm_tests::Params {
    out.module
        .params
        .iter()
        .map(|slot| (slot.kind, n, Vec::new()))
        .collect()
}

#[test]
fn chained_tensors_name_exactly_their_reference_producers() {
    let (mut chained, mut named, mut broken, mut carried) = (0, 0, 0, 0);
    for seed in 0..600u64 {
        let src = ptovm_tests::chained_program(seed);
        let out =
            assemble("gen.pto", &src, &Options::default()).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let v = verify(&out.bytes).unwrap();
        let params = chained_params(&out, 1 + seed as u32 % 4);
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        for n in [1u32, 3] {
            let tasks = reference_expand(&v, &p, n, 100_000).unwrap();
            let s = classes(&out.bytes, &params, n);
            let (bad, _) = recording(&v, &s, &tasks);
            assert!(bad.is_empty(), "{}\n{src}", bad.join("\n"));
            chained += s.iter().filter(|s| s.chained).count();
            carried += s.iter().filter(|s| s.carried).count();
            broken += s
                .iter()
                .filter(|s| !s.chained && s.loop_indexed && s.class == Class::Local)
                .count();
            named += tasks
                .iter()
                .map(|t| chain(&v, &s, t.site).producers(t.iter).count_ones())
                .sum::<u32>();
        }
    }
    // Both chained tensors and loop-indexed local ones that are not chained occur often.
    assert!(
        chained > 200 && named > 10_000 && broken > 100 && carried > 300,
        "{chained} {named} {broken} {carried}"
    );
}

/// A body of `CHAIN_SPAN` tasks chains its tensors; one more task does not.
#[test]
fn a_chain_spans_at_most_chain_span_tasks() {
    for (n, want) in [(CHAIN_SPAN, true), (CHAIN_SPAN + 1, false)] {
        let body: String = (0..n)
            .map(|k| {
                if k == 0 {
                    "task @w(0) resources(T[i])\n".to_string()
                } else {
                    "task @r(0) resources(T[i])\n".to_string()
                }
            })
            .collect();
        let src = format!(
            "@tensor T: f16[4, 8]\n@kernel w(x): vector(out a)\n@kernel r(x): vector(in a)\n\
             @workload k() {{\nparallel_for i in dense[4] {{\n{body}}}\n}}\n\
             @schedule s for k {{ dispatch = affinity(i) }}"
        );
        let out = assemble("span.pto", &src, &Options::default()).unwrap();
        let v = verify(&out.bytes).unwrap();
        let p = RuntimeParams::new(&v, &[]).unwrap();
        let s = classes(&out.bytes, &Vec::new(), 2);
        assert_eq!(s[0].chained, want, "{n} tasks");
        let tasks = reference_expand(&v, &p, 2, u64::MAX).unwrap();
        let (bad, _) = recording(&v, &s, &tasks);
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        if want {
            // The last read names the write 63 tasks before it.
            let last = tasks[n as usize - 1].site;
            assert_eq!(chain(&v, &s, last).producers(0), 1 << (n - 1));
        }
    }
}

/// The single-instance measurement (`InOrderWindow`, behind `ptovm bench`), recording as the
/// scheduler records — classes, loop-indexed uses, chained producers counted by distance —
/// finds exactly the reference edges whose source is still in its window (task `t − d` is,
/// for `d` below the window), on chained programs and the bundled examples.
#[test]
fn the_in_order_window_finds_exactly_the_reference_edges_in_it() {
    let run = |bytes: &[u8], params: &ptovm_tests::Params, what: &str| -> u64 {
        let mut registrations = 0;
        let v = verify(bytes).unwrap();
        let vals = values(params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        let tasks = reference_expand(&v, &p, 1, 1_000_000).unwrap();
        let edges = ptovm_host_sim::edges(&tasks, ptovm_host_sim::DepMode::Overlap);
        for window in [1u32, 2, 3, 4, 8, 64, 100, 1024] {
            let layout = ptovm_vm::tmap::MapLayout::for_program(&v, window).unwrap();
            let mut d =
                ptovm_host_sim::InOrderWindow::new(layout, ptovm_host_sim::DepMode::Overlap)
                    .unwrap();
            d.classify(&Interpreter::new(v, p, 0, 1).unwrap()).unwrap();
            Interpreter::new(v, p, 0, 1)
                .unwrap()
                .run_to_end(&mut d)
                .unwrap();
            assert_eq!(d.error, None);
            let want = edges
                .iter()
                .filter(|e| e.to - e.from < window as u64)
                .count() as u64;
            assert_eq!(d.edges, want, "{what}, window {window}");
            assert!(d.registrations() <= d.edges, "{what}, window {window}");
            registrations = d.registrations();
        }
        registrations
    };
    for seed in 0..300u64 {
        let src = ptovm_tests::chained_program(seed);
        let out = assemble("gen.pto", &src, &Options::default()).unwrap();
        run(&out.bytes, &chained_params(&out, 2), &src);
    }
    for (name, bytes, params) in ptovm_tests::examples() {
        run(&bytes, &params, name);
    }
    // Task Bench's patterns: their tensor is written once, so the window answers it from its
    // written-once table (spec/runtime.md §4.8), which must count the same edges.
    for pattern in ptovm_tests::taskbench::PATTERNS
        .into_iter()
        .chain(["chain"])
    {
        let (bytes, params) = ptovm_tests::example(
            &format!("taskbench/{pattern}.pto"),
            &[("W", 8, vec![]), ("T", 12, vec![]), ("S", 3, vec![])],
        );
        run(&bytes, &params, pattern);
    }
    // all_to_all at W = 40: every task reads a whole row of 40, wide enough for a join
    // (spec/runtime.md §4.7). The window's joins stand for the row's writers: its edges stay
    // the reference's, and it registers a row's 40 writers once and each task once on the
    // join instead of 40 times: 2 × 40 a row from the second row on.
    let (bytes, params) = ptovm_tests::example(
        "taskbench/all_to_all.pto",
        &[("W", 40, vec![]), ("T", 6, vec![])],
    );
    assert_eq!(run(&bytes, &params, "all_to_all, W = 40"), 5 * 2 * 40);
    // More rows in the window than an AICPU has joins (`JOINS` = 32): the oldest is reused,
    // and the edges stay the reference's.
    let (bytes, params) = ptovm_tests::example(
        "taskbench/all_to_all.pto",
        &[("W", 16, vec![]), ("T", 40, vec![])],
    );
    assert_eq!(
        run(&bytes, &params, "all_to_all, W = 16, T = 40"),
        39 * 2 * 16
    );
    // A row a join stands for and a point of the same row, both read by every task: the
    // point's writer is also one of the join's, and counts once (the quick way pushes the
    // join's writers first for the point's read to meet them).
    let src = "@param W = 40\n@param T = 6\n@tensor G: f32[T, W]\n\
               @kernel first(t, i): vector(out g)\n\
               @kernel step(t, i): vector(in a, in b, out g)\n\
               @workload row_and_point(%steps: dense_dyn(T), %points: dense_dyn(W)) {\n\
                 for_each t in %steps { parallel_for i in %points {\n\
                   cond t == 0 { task @first(t, i) resources(G[t, i]) }\n\
                   else { task @step(t, i) resources(G[t - 1, 0 : W], G[t - 1, i], G[t, i]) }\n\
               } } }\n";
    let (bytes, params) = ptovm_tests::assemble_named("row_and_point.pto", src, &[]);
    assert_eq!(run(&bytes, &params, src), 5 * 2 * 40);
    // Task 4 finds X quiet (its writer, task 0, left a window of 4); task 6, whose site is 16
    // instructions after task 4's and so takes its place in the per-site memory, reads Y,
    // whose writer (task 3) is still in the window, with nothing inserted in between: the
    // memory of task 4's answer (`TaskUses::all_quiet`) must not pass to task 6.
    let src = "@tensor X: f16[4]\n@tensor Y: f16[4]\n@tensor Z: f16[4]\n@tensor R: f16[4]\n\
               @kernel w(): vector(out x)\n@kernel r(): vector(in x)\n\
               @kernel f(a, b, c, d, e, g, h, i, j, k, l, m): vector(in x)\n\
               @workload q() {\n task @w() resources(X)\n task @w() resources(Z)\n\
               task @w() resources(Z)\n task @w() resources(Y)\n task @r() resources(X)\n\
               task @f(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12) resources(R)\n\
               task @r() resources(Y)\n}\n";
    let out = assemble("memo.pto", src, &Options::default()).unwrap();
    let params = gen_params(&out.module, 0);
    let v = verify(&out.bytes).unwrap();
    let vals = values(&params);
    let tasks = reference_expand(&v, &RuntimeParams::new(&v, &vals).unwrap(), 1, 100).unwrap();
    assert_eq!(
        tasks[6].site,
        tasks[4].site + 16,
        "the two reads share a memory slot"
    );
    run(&out.bytes, &params, src);
    // The same past the first 64 tasks of a window of 64 (the measurement's quick path,
    // `SiteUses::no_map`): iterations 0–2 put 70 tasks between writing `X[i]` and reading
    // it, reads of a tensor nothing writes (they insert nothing), so the read finds `X`
    // quiet (its writer retired); iteration 3 does not, so its read must look again after
    // the write's insertion, and find it.
    let src = "@tensor X: f16[6]\n@tensor Z: f16[70]\n\
               @kernel w(a): vector(out x)\n@kernel r(a): vector(in x)\n\
               @workload q() { parallel_for i in dense[6] {\n\
                 task @w(i) resources(X[i])\n\
                 cond i < 3 { parallel_for j in dense[70] { task @r(j) resources(Z[j]) } }\n\
                 task @r(i) resources(X[i])\n\
               } }\n";
    let out = assemble("quick.pto", src, &Options::default()).unwrap();
    run(&out.bytes, &gen_params(&out.module, 0), src);
}
