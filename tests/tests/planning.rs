//! Planned values (`@plan`, spec/pto.md §4.4, spec/bytecode.md §3.6.2 and §6.1): FlashInfer's
//! split-KV chunk-size search on hand-worked and random batches against FlashInfer's own rule,
//! the reductions, launch errors, assembly errors, the verifier's rules, and plans as axes.

use ptovm_assembler::{assemble, Module, Options};
use ptovm_host_sim::reference_expand;
use ptovm_vm::{
    verify, ErrorKind, ExprError, ExprProblem, Interpreter, ParamError, PlanProblem, RuntimeParams,
};

use ptovm_tests::{assemble_text as asm, named_values as values};

/// The planned values of `src` with `given`, or the launch error.
fn plan(src: &str, given: &[(&str, Vec<u32>)]) -> Result<Vec<u32>, ParamError> {
    let (bytes, m) = asm(src);
    let v = verify(&bytes).unwrap();
    let vals = values(&m, given);
    let p = RuntimeParams::new(&v, &vals)?;
    Ok(p.planned().values[..v.plans().len()].to_vec())
}

/// FlashInfer's decode planning (`PartitionPagedKVCacheBinarySearchMinNumPagePerBatch`,
/// include/flashinfer/attention/scheduler.cuh), written from its description: `low` starts at
/// the lower bound and `high` at the largest page count (0 for none); while `low < high`, the
/// middle's chunk count `Σ ceil_div(pages, mid)` times `gdy` over the grid moves `low` up,
/// else `high` down; the chunk count of the result gives every request — an empty one too —
/// at least one chunk. Returns (pages per chunk, chunks).
fn flashinfer(max_grid: u64, gdy: u64, pages: &[u64], min_pages: u64) -> (u64, u64) {
    let (mut low, mut high) = (min_pages, pages.iter().copied().fold(0, u64::max));
    while low < high {
        let mid = (low + high) / 2;
        let chunks: u64 = pages.iter().map(|p| p.div_ceil(mid)).sum();
        if chunks * gdy > max_grid {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    let chunks = pages.iter().map(|p| (*p).max(1).div_ceil(low)).sum();
    (low, chunks)
}

/// The same planning as a module: the search's range ends at the largest page count (at
/// least the lower bound, where FlashInfer's loop does not run), and holds there as
/// FlashInfer's loop ends there when no chunk size fits the grid.
const DECODE_PLAN: &str = "
@param B = 1
@param gdy = 1
@param max_grid = 1
@param min_pages = 1
@param pages = [1]
@plan max_pages = max(b in 0 .. B: pages[b])
@plan top = max(min_pages, max_pages)
@plan chunk = search(c in min_pages ..= top:
    sum(b in 0 .. B: ceil_div(pages[b], c)) * gdy <= max_grid || c == top)
@plan chunks = sum(b in 0 .. B: ceil_div(max(pages[b], 1), chunk))
@kernel decode(b, chunk, n): vector()
@workload w(%reqs: dense_dyn(B)) {
  parallel_for b in %reqs { task @decode(b, chunk, ceil_div(max(pages[b], 1), chunk)) }
}
";

fn decode_plan(max_grid: u32, gdy: u32, pages: &[u32], min_pages: u32) -> (u32, u32) {
    let given = [
        ("B", vec![pages.len() as u32]),
        ("gdy", vec![gdy]),
        ("max_grid", vec![max_grid]),
        ("min_pages", vec![min_pages]),
        ("pages", pages.to_vec()),
    ];
    let p = plan(DECODE_PLAN, &given).unwrap_or_else(|e| panic!("{e}"));
    (p[2], p[3])
}

#[test]
fn decode_planning_matches_flashinfer_on_hand_worked_batches() {
    // (grid, heads, pages per request, lower bound) → (pages per chunk, chunks).
    type Case<'a> = (u32, u32, &'a [u32], u32, (u32, u32));
    let cases: &[Case] = &[
        // 2 + 1 + 5 + 0 = 8 chunks of 8 heads fill 64 at 24 pages; 23 would make 9. The empty
        // request still gets a chunk: 9 in all.
        (64, 8, &[40, 16, 120, 0], 1, (24, 9)),
        // The search's lower bound: every request already fits one chunk of 4.
        (100, 1, &[3, 2], 4, (4, 2)),
        // Nothing fits (3 requests × 4 heads > 8 even unsplit): the largest, one chunk each.
        (8, 4, &[10, 10, 10], 1, (10, 3)),
        // ceil(1000 / c) + 1 ≤ 10 first at c = 112 (1000 / 111 > 9).
        (20, 2, &[1000, 1], 1, (112, 10)),
        // One request, one page, a grid of one: one chunk of one page.
        (1, 1, &[1], 1, (1, 1)),
        // A grid that fits one chunk per page: the lower bound wins.
        (1000, 1, &[7, 9], 1, (1, 16)),
    ];
    for &(grid, gdy, pages, min, want) in cases {
        let wide: Vec<u64> = pages.iter().map(|&p| p as u64).collect();
        let (c, n) = flashinfer(grid as u64, gdy as u64, &wide, min as u64);
        assert_eq!((c as u32, n as u32), want, "FlashInfer's rule on {pages:?}");
        assert_eq!(
            decode_plan(grid, gdy, pages, min),
            want,
            "the plan on {pages:?}"
        );
    }
}

#[test]
fn decode_planning_matches_flashinfer_on_random_batches() {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % n
    };
    for _ in 0..300 {
        let b = 1 + next(12) as usize;
        let pages: Vec<u32> = (0..b)
            .map(|_| if next(5) == 0 { 0 } else { next(3000) as u32 })
            .collect();
        let (grid, gdy, min) = (
            1 + next(400) as u32,
            1 + next(16) as u32,
            1 + next(8) as u32,
        );
        let wide: Vec<u64> = pages.iter().map(|&p| p as u64).collect();
        let (c, n) = flashinfer(grid as u64, gdy as u64, &wide, min as u64);
        assert_eq!(
            decode_plan(grid, gdy, &pages, min),
            (c as u32, n as u32),
            "grid {grid}, heads {gdy}, lower bound {min}, pages {pages:?}"
        );
    }
}

#[test]
fn the_plan_reaches_the_tasks_identically_on_every_aicpu() {
    let (bytes, m) = asm(DECODE_PLAN);
    let v = verify(&bytes).unwrap();
    let given = [
        ("B", vec![4]),
        ("gdy", vec![8]),
        ("max_grid", vec![64]),
        ("pages", vec![40, 16, 120, 0]),
    ];
    let vals = values(&m, &given);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let tasks = reference_expand(&v, &p, 3, 1 << 10).unwrap();
    let params: Vec<Vec<i64>> = tasks.iter().map(|t| t.params.clone()).collect();
    assert_eq!(
        params,
        [
            vec![0, 24, 2],
            vec![1, 24, 1],
            vec![2, 24, 5],
            vec![3, 24, 1]
        ]
    );
    // Each AICPU plans for itself, with the same result and the same work, which the work
    // bound reports.
    let mut work = vec![];
    for aicpu in 0..3 {
        let it = Interpreter::new(v, RuntimeParams::new(&v, &vals).unwrap(), aicpu, 3).unwrap();
        work.push(it.work_bound().planning);
    }
    assert!(
        work[0] > 0 && work.iter().all(|w| *w == work[0]),
        "{work:?}"
    );
}

#[test]
fn reductions_sum_max_min_and_nest() {
    let src = "
@param n = 5
@param a = [3, 9, 1, 7, 4]
@plan total = sum(i in 0 .. n: a[i])
@plan largest = max(i in 0 .. n: a[i])
@plan smallest = min(i in 1 ..= 3: a[i])
@plan empty = sum(i in 3 .. 3: a[i])
@plan pairs = sum(i in 0 .. n: sum(j in i + 1 .. n: a[i] < a[j]))
@plan best_gap = max(i in 0 .. n: max(j in 0 .. n: a[i] - a[j]))
@plan first_big = search(i in 0 .. n: a[i] >= 7 || i == n - 1)
@plan uses_plans = total * 10 + largest
@kernel k(x): vector()
@workload w(%x: dense[1]) { parallel_for i in %x { task @k(uses_plans) } }
";
    let a = [3i64, 9, 1, 7, 4];
    let pairs = (0..5)
        .flat_map(|i| (i + 1..5).map(move |j| (i, j)))
        .filter(|&(i, j)| a[i] < a[j])
        .count() as u32;
    // `search` over a predicate that is not monotone (true at 1, false at 2) still gives one
    // answer, the binary search's: low = 0, high = 4 → mid 2 (false) → low 3 → mid 3 (true).
    assert_eq!(plan(src, &[]).unwrap(), [24, 9, 1, 0, pairs, 8, 3, 249]);
}

#[test]
fn a_plan_is_an_extent_a_dimension_and_a_key() {
    let src = "
@param len = 100
@param tile = 16
@plan tiles = ceil_div(len, tile)
@tensor x: f32[tiles]
@kernel k(t): vector(out x)
@workload w() {
  parallel_for t in dense_dyn(tiles) { task @k(t) resources(x[t]) }
}
@schedule s for w { dispatch = affinity(t + tiles) }
";
    let (bytes, m) = asm(src);
    let v = verify(&bytes).unwrap();
    for (len, want) in [(100u32, 7usize), (96, 6), (0, 0), (1, 1)] {
        let given = [("len", vec![len])];
        let vals = values(&m, &given);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        let tasks = reference_expand(&v, &p, 2, 1 << 10).unwrap();
        assert_eq!(tasks.len(), want, "len {len}");
        for (i, t) in tasks.iter().enumerate() {
            assert_eq!(t.owner as usize, (i + want) % 2);
        }
    }
}

fn launch_problem(src: &str, given: &[(&str, Vec<u32>)]) -> (u32, PlanProblem) {
    match plan(src, given) {
        Err(ParamError::Plan { plan, problem }) => (plan, problem),
        other => panic!("expected a plan error, got {other:?}"),
    }
}

#[test]
fn launch_errors_name_the_plan_and_the_problem() {
    let head = "@param n = 3\n@param a = [5, 0, 2]\n@plan ok = n + 1\n";
    let tail = "\n@kernel k(x): vector()\n@workload w(%x: dense[1]) { parallel_for i in %x { task @k(ok) } }";
    let run = |body: &str, given: &[(&str, Vec<u32>)]| {
        launch_problem(&format!("{head}{body}{tail}"), given)
    };
    assert_eq!(
        run("@plan m = max(i in 0 .. n: a[i])", &[("n", vec![0])]),
        (
            1,
            PlanProblem::EmptyRange {
                what: "max",
                lo: 0,
                hi: 0
            }
        )
    );
    assert_eq!(
        run("@plan m = min(i in n .. 1: a[i])", &[]),
        (
            1,
            PlanProblem::EmptyRange {
                what: "min",
                lo: 3,
                hi: 1
            }
        )
    );
    assert_eq!(
        run("@plan s = search(c in 1 .. 10: c > 20)", &[]),
        (1, PlanProblem::NeverHolds { lo: 1, hi: 10 })
    );
    assert_eq!(
        run("@plan s = search(c in 4 .. 4: 1)", &[]),
        (
            1,
            PlanProblem::EmptyRange {
                what: "search",
                lo: 4,
                hi: 4
            }
        )
    );
    assert_eq!(
        run("@plan neg = ok - 10", &[]),
        (1, PlanProblem::NotU32(-6))
    );
    assert_eq!(
        run("@plan big = sum(i in 0 .. 3: 2000000000)", &[]),
        (1, PlanProblem::NotU32(6_000_000_000))
    );
    assert_eq!(
        run("@plan d = sum(i in 0 .. n: 10 / a[i])", &[]),
        (1, PlanProblem::Expr(ExprError::DivByZero))
    );
    assert_eq!(
        run("@plan e = sum(i in 0 .. n + 1: a[i])", &[]),
        (
            1,
            PlanProblem::Expr(ExprError::Index {
                slot: 1,
                index: 3,
                len: 3
            })
        )
    );
    // 2^27 iterations of a 3-node body: refused once the work passes 2^26 nodes.
    assert_eq!(
        run("@plan slow = sum(i in 0 .. 134217728: 0) + 1", &[]),
        (1, PlanProblem::TooCostly)
    );
    // The message names the plan and says what went wrong.
    let e = plan(
        &format!("{head}@plan s = search(c in 1 .. 10: c > 20){tail}"),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "planned value 1: search over [1, 10): the condition does not hold at 9, so no value in the range satisfies it"
    );
}

fn asm_error(src: &str) -> String {
    match assemble("t.pto", src, &Options::default()) {
        Ok(_) => panic!("assembled: {src}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn assembly_refuses_misplaced_and_circular_plans() {
    let w = "\n@kernel k(x): vector()\n@workload w(%x: dense[4]) { parallel_for i in %x { task @k(X) } }";
    let with = |plans: &str, x: &str| {
        format!(
            "@param n = 3\n@param a = [1, 2, 3]\n{plans}{}",
            w.replace('X', x)
        )
    };
    for (src, says) in [
        (with("", "sum(j in 0 .. n: a[j])"), "may only compute a `@plan` value"),
        (with("@plan p = q + 1\n@plan q = 2\n", "p"), "planned value `q` is computed after this one"),
        (with("@plan p = p + 1\n", "p"), "planned value `p` is computed by this one"),
        (with("@plan n = 4\n", "n"), "`n` is already a `@param`"),
        (with("@plan p = 1\n@plan p = 2\n", "p"), "`p` is already another `@plan`"),
        (with("@plan p = 1\n", "p[0]"), "`p` is a planned value, a scalar, not a runtime array"),
        (
            with("@plan p = sum(j in 0 .. n: sum(j in 0 .. n: j))\n", "p"),
            "`j` is already bound by an enclosing reduction",
        ),
        (
            with(
                "@plan p = sum(a0 in 0 .. 2: sum(a1 in 0 .. 2: sum(a2 in 0 .. 2: sum(a3 in 0 .. 2: sum(a4 in 0 .. 2: 1)))))\n",
                "p",
            ),
            "nest more than 4 deep",
        ),
        (with("@plan p = sum(j in 0 ; n: j)\n", "p"), "expected `..`"),
    ] {
        let e = asm_error(&src);
        assert!(e.contains(says), "{src}\n→ {e}");
    }
    // `max(a, b)` keeps its meaning; `max(v in …)` is a reduction only with `in`.
    let (bytes, m) = asm(&with("@plan p = max(n, 7) + min(n, 7)\n", "p"));
    let v = verify(&bytes).unwrap();
    let vals = values(&m, &[]);
    assert_eq!(
        RuntimeParams::new(&v, &vals).unwrap().planned().values[0],
        10
    );
}

/// A module whose plan reads the given slots and one reduction, re-encoded after `edit`.
fn edited(edit: impl FnOnce(&mut Module)) -> Result<(), ErrorKind> {
    let (_, mut m) = asm("
@param n = 3
@plan p = sum(i in 0 .. n: i * 2)
@plan q = p + 1
@kernel k(x): vector()
@workload w(%x: dense[2]) { parallel_for i in %x { task @k(q + i) } }
");
    edit(&mut m);
    verify(&m.encode()).map(|_| ()).map_err(|e| e.kind)
}

#[test]
fn the_verifier_keeps_reductions_in_plans_and_plans_in_order() {
    assert_eq!(edited(|_| {}), Ok(()));
    let find = |m: &Module, op: ptovm_vm::ExprOp| {
        m.exprs.iter().position(|r| r.opcode == op as u8).unwrap()
    };
    // The task parameter's expression replaced by one holding the plan's reduction: refused
    // there.
    let r = edited(|m| {
        let sum = m.exprs[find(m, ptovm_vm::ExprOp::SUM)];
        let start = m.exprs.len() as u32;
        m.exprs.extend([
            ptovm_vm::Record::new(ptovm_vm::ExprOp::CONST as u8, 0, 0, 0),
            ptovm_vm::Record::new(ptovm_vm::ExprOp::CONST as u8, 0, 0, 3),
            sum,
            ptovm_vm::Record::new(ptovm_vm::ExprOp::END as u8, 0, 0, 0),
        ]);
        let at = m
            .code
            .iter()
            .position(|r| r.opcode == ptovm_vm::Opcode::PARAM_EXPR as u8)
            .unwrap();
        m.code[at] = ptovm_vm::Record::new(m.code[at].opcode, 0, 0, start);
    });
    assert!(
        matches!(
            r,
            Err(ErrorKind::Expr {
                problem: ExprProblem::BinderOutsidePlan,
                ..
            })
        ),
        "{r:?}"
    );
    // A body at or after its reduction could loop.
    let r = edited(|m| {
        let at = find(m, ptovm_vm::ExprOp::SUM);
        let s = m.exprs[at];
        m.exprs[at] = ptovm_vm::Record::new(s.opcode, 0, s.op1(), at as u32);
    });
    assert!(
        matches!(
            r,
            Err(ErrorKind::Expr {
                problem: ExprProblem::BodyNotBefore,
                ..
            })
        ),
        "{r:?}"
    );
    // Plan 0 reading plan 1 (not yet computed), or itself.
    for slot_of_plan in [1u16, 0] {
        let r = edited(|m| {
            let base = m.params.len() as u16;
            let e = m.plans[0].expr as usize;
            m.exprs[e] =
                ptovm_vm::Record::new(ptovm_vm::ExprOp::PARAM as u8, 0, base + slot_of_plan, 0);
        });
        assert!(matches!(r, Err(ErrorKind::Plan { plan: 0, .. })), "{r:?}");
    }
    // A reduction binding the wrong depth, and a body reading an unbound variable.
    let r = edited(|m| {
        let at = find(m, ptovm_vm::ExprOp::SUM);
        let s = m.exprs[at];
        m.exprs[at] = ptovm_vm::Record::new(s.opcode, 0, 1, s.op2());
    });
    assert!(matches!(r, Err(ErrorKind::Plan { plan: 0, .. })), "{r:?}");
    let r = edited(|m| {
        let e = m.plans[1].expr as usize;
        m.exprs[e] = ptovm_vm::Record::new(ptovm_vm::ExprOp::VAR as u8, 0, 0, 0);
    });
    assert!(matches!(r, Err(ErrorKind::UnboundLoopVar { .. })), "{r:?}");
}

#[test]
fn plans_survive_the_listing_round_trip() {
    let (bytes, _) = asm(DECODE_PLAN);
    let v = verify(&bytes).unwrap();
    let listing = ptovm_assembler::disassemble(v.bytes()).unwrap();
    assert!(listing.contains(".plan 2 chunk expr="), "{listing}");
    let again = assemble("t.ptol", &listing, &Options::default()).unwrap();
    assert_eq!(again.bytes, bytes);
}

/// spec/pto.md §6's planned-value example plans and tiles what it says: `chunk` is 24, 8 tasks.
#[test]
fn the_spec_example_plans_what_the_spec_says() {
    let spec = include_str!("../../spec/pto.md");
    let start = spec.find("A planned value (§4.4) and tiles (§4)").unwrap();
    let block = &spec[start..];
    let code = &block[block.find("```pto\n").unwrap() + 7..];
    let (code, after) = code.split_at(code.find("```").unwrap());
    assert_eq!(plan(code, &[]).unwrap(), [120, 24]);
    assert!(after.contains("`chunk` is 24 here"));
    assert!(after.contains("8 tasks, request 0's covering pages 0–24 and 24–40"));
    let (bytes, m) = asm(code);
    let v = verify(&bytes).unwrap();
    let vals = values(&m, &[]);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let tasks = reference_expand(&v, &p, 1, 1 << 10).unwrap();
    let chunks: Vec<&[i64]> = tasks.iter().map(|t| &t.params[..]).collect();
    assert_eq!(chunks.len(), 8);
    assert_eq!(chunks[..2], [&[0, 0, 0, 24][..], &[0, 1, 24, 40][..]]);
}
