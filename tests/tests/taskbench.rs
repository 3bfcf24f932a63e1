//! Task Bench's dependence patterns as ptovm modules (`examples/taskbench/*.pto`; issue 22): each
//! module's task graph — which tasks exist, and the edges `ptovm expand` finds between them — is
//! compared with the graph computed here from Task Bench's own definition
//! (StanfordLegion/task-bench, `core/core.cc`: `offset_at_timestep`, `width_at_timestep`,
//! `dependencies`, a dependency kept when the point exists at the previous timestep; the random
//! draws of `random_nearest` from `core_random.cc`'s hash, `ptovm_tests::taskbench`). Every
//! pattern also runs on the threaded simulator under `--check`.

use std::collections::BTreeSet;

use ptovm_host_sim::sim;
use ptovm_host_sim::{edges, reference_expand, DepMode};
use ptovm_tests::taskbench::{random_nearest_includes, random_nearest_keep, FRACTION, PATTERNS};
use ptovm_tests::{example, values};
use ptovm_vm::{verify, RuntimeParams};

/// Task Bench's number of dependence sets of `pattern` for width `w` and period `period`
/// (`max_dependence_sets`), and the set timestep `t` uses (`dependence_set_at_timestep`).
fn dependence_set(pattern: &str, w: i64, period: i64, t: i64) -> i64 {
    match pattern {
        "fft" => {
            let sets = (w as f64).log2().ceil() as i64;
            (t + sets - 1) % sets
        }
        "spread" | "random_nearest" => t % period,
        _ => 0,
    }
}

/// A point of the graph: (timestep, point).
type Point = (i64, i64);

/// Task Bench's graph of `pattern` over `w` points and `t` timesteps (radix `radix`, period
/// `period`): its points and its edges (dependency → dependent).
fn task_bench(
    pattern: &str,
    w: i64,
    t: i64,
    radix: i64,
    period: i64,
) -> (BTreeSet<Point>, BTreeSet<(Point, Point)>) {
    let offset = |s: i64| match pattern {
        "dom" => (s + w - t).max(0),
        _ => 0,
    };
    let width = |s: i64| match pattern {
        "dom" => w.min((s + 1).min(t - s)),
        "tree" => w.min(1i64 << s.min(62)),
        _ => w,
    };
    // core.cc's `dependencies(dset, point)`: inclusive ranges of points at the previous step.
    let deps = |dset: i64, p: i64| -> Vec<(i64, i64)> {
        match pattern {
            "trivial" => vec![],
            "no_comm" => vec![(p, p)],
            "stencil_1d" => vec![((p - 1).max(0), (p + 1).min(w - 1))],
            "stencil_1d_periodic" => {
                let mut v = vec![((p - 1).max(0), (p + 1).min(w - 1))];
                if p - 1 < 0 {
                    v.push((w - 1, w - 1));
                }
                if p + 1 >= w {
                    v.push((0, 0));
                }
                v
            }
            "dom" => vec![((p - 1).max(0), p)],
            "tree" => vec![(p / 2, p / 2)],
            "all_to_all" => vec![(0, w - 1)],
            "nearest" if radix > 0 => {
                vec![((p - radix / 2).max(0), (p + (radix - 1) / 2).min(w - 1))]
            }
            "nearest" => vec![],
            "fft" => {
                let (d1, d2) = (p - (1 << dset), p + (1 << dset));
                let mut v = Vec::new();
                if d1 >= 0 {
                    v.push((d1, d1));
                }
                v.push((p, p));
                if d2 < w {
                    v.push((d2, d2));
                }
                v
            }
            "random_nearest" => ((p - radix / 2).max(0)..=(p + (radix - 1) / 2).min(w - 1))
                .filter(|&i| random_nearest_includes(radix, FRACTION, dset, i, p))
                .map(|i| (i, i))
                .collect(),
            "spread" => (0..radix)
                .map(|k| {
                    let dep = (p + k * w / radix + if k > 0 { dset } else { 0 }) % w;
                    (dep, dep)
                })
                .collect(),
            other => panic!("no definition of {other}"),
        }
    };
    let mut points = BTreeSet::new();
    let mut out = BTreeSet::new();
    for s in 0..t {
        for p in offset(s)..offset(s) + width(s) {
            points.insert((s, p));
            if s == 0 {
                continue;
            }
            let (lo, n) = (offset(s - 1), width(s - 1));
            for (a, b) in deps(dependence_set(pattern, w, period, s), p) {
                for j in a.max(lo)..=b.min(lo + n - 1) {
                    out.insert(((s - 1, j), (s, p)));
                }
            }
        }
    }
    (points, out)
}

/// `fft.pto`'s S: ceil(log2(w)).
fn sets(w: u32) -> u32 {
    w.next_power_of_two().trailing_zeros()
}

/// The module's graph: its tasks' points (their parameters `t, i`) and the edges between them.
fn module(
    pattern: &str,
    w: u32,
    t: u32,
    radix: u32,
    period: u32,
) -> (BTreeSet<Point>, BTreeSet<(Point, Point)>) {
    let (code, params) = example(
        &format!("taskbench/{pattern}.pto"),
        &[
            ("W", w, vec![]),
            ("T", t, vec![]),
            ("R", radix, vec![]),
            ("P", period, vec![]),
            ("S", sets(w), vec![]),
            ("keep", 0, random_nearest_keep(w, period)),
        ],
    );
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let tasks = reference_expand(&v, &p, 1, u64::MAX).unwrap();
    let at = |id: u64| {
        let t = &tasks[id as usize];
        (t.params[0], t.params[1])
    };
    let points = tasks.iter().map(|x| at(x.id)).collect();
    let graph = edges(&tasks, DepMode::Overlap)
        .iter()
        .map(|e| (at(e.from), at(e.to)))
        .collect();
    (points, graph)
}

#[test]
fn every_pattern_has_task_benchs_points_and_edges() {
    for pattern in PATTERNS {
        for (w, t) in [
            (1, 1),
            (1, 4),
            (2, 5),
            (5, 7),
            (8, 6),
            (13, 9),
            (4, 12),
            (16, 9),
        ] {
            // fft needs two points; spread a period of at most ceil(W / 3).
            if pattern == "fft" && w < 2 {
                continue;
            }
            let radixes = if pattern == "nearest" {
                vec![0, 1, 2, 3, 4, 7]
            } else {
                vec![3]
            };
            let periods: Vec<i64> = match pattern {
                "spread" => (1..=(w as i64 + 2) / 3).collect(),
                "random_nearest" => vec![1, 2, 3, 5],
                _ => vec![3],
            };
            for radix in radixes {
                for &period in &periods {
                    let want = task_bench(pattern, w as i64, t as i64, radix, period);
                    let got = module(pattern, w, t, radix as u32, period as u32);
                    let at = format!("{pattern} W={w} T={t} R={radix} P={period}");
                    assert_eq!(got.0, want.0, "{at}: the points");
                    assert_eq!(got.1, want.1, "{at}: the edges");
                }
            }
        }
    }
}

/// `pattern`'s module assembled with W = 8, T = 6 (and random_nearest's draws for period 3).
fn small(pattern: &str) -> (Vec<u8>, ptovm_tests::Params) {
    example(
        &format!("taskbench/{pattern}.pto"),
        &[
            ("W", 8, vec![]),
            ("T", 6, vec![]),
            ("S", 3, vec![]),
            ("keep", 0, random_nearest_keep(8, 3)),
        ],
    )
}

#[test]
fn every_pattern_runs_checked_on_any_aicpus_and_window() {
    for pattern in PATTERNS {
        let (code, params) = small(pattern);
        let v = verify(&code).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        let (points, _) = task_bench(pattern, 8, 6, 3, 3);
        for aicpus in [1, 2, 6] {
            for window in [1, 8, 1024] {
                let o = sim::Options {
                    aicpus,
                    cube: 2 * aicpus,
                    vector: 2 * aicpus,
                    window,
                    check: true,
                    jitter: Some(u64::from(aicpus) * 31 + window as u64),
                    ..sim::Options::default()
                };
                let r = sim::run(v, p, o)
                    .unwrap_or_else(|e| panic!("{pattern}, {aicpus} AICPUs, window {window}: {e}"));
                assert!(r.checked);
                assert_eq!(r.tasks_total, points.len() as u64, "{pattern}");
            }
        }
    }
}

/// `run --latency` measures one hop for every task that waited: each pattern's tasks with a
/// predecessor in Task Bench's graph, split by whether the last predecessor's AICPU generated
/// it too, with every hop non-negative (the measurement fails on a start before its
/// predecessor's end).
#[test]
fn latency_measures_a_hop_for_every_task_with_a_predecessor() {
    for pattern in PATTERNS {
        let (code, params) = small(pattern);
        let v = verify(&code).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        let (_, graph) = task_bench(pattern, 8, 6, 3, 3);
        let waiting = graph
            .iter()
            .map(|&(_, to)| to)
            .collect::<BTreeSet<_>>()
            .len() as u64;
        for aicpus in [1, 2, 6] {
            let o = sim::Options {
                aicpus,
                cube: 2 * aicpus,
                vector: 2 * aicpus,
                latency: true,
                jitter: Some(u64::from(aicpus)),
                ..sim::Options::default()
            };
            let r = sim::run(v, p, o).unwrap_or_else(|e| panic!("{pattern}, {aicpus}: {e}"));
            let l = r.latency.expect("a latency");
            let at = format!("{pattern} on {aicpus} AICPUs");
            assert_eq!(l.within.count + l.across.count, waiting, "{at}");
            if aicpus == 1 {
                assert_eq!(l.across.count, 0, "{at}");
            }
            for h in [l.within, l.across].iter().filter(|h| h.count > 0) {
                assert!(
                    h.median_ns <= h.p90_ns && h.p90_ns <= h.p99_ns && h.p99_ns <= h.max_ns,
                    "{at}: {h:?}"
                );
            }
            // Only the trace keeps the runs' events.
            assert!(r.events.is_empty(), "{at}");
        }
    }
}

/// The chain of `chain.pto` dealt round robin: every hop stays on its AICPU with one, and
/// crosses to another with six.
#[test]
fn the_chains_hops_are_within_one_aicpu_or_all_across() {
    let (code, params) = example("taskbench/chain.pto", &[("T", 300, vec![])]);
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    for (aicpus, within, across) in [(1, 299, 0), (6, 0, 299)] {
        let o = sim::Options {
            aicpus,
            latency: true,
            trace: true,
            ..sim::Options::default()
        };
        let r = sim::run(v, p, o).unwrap();
        let l = r.latency.unwrap();
        assert_eq!((l.within.count, l.across.count), (within, across));
        assert!(r.events.iter().any(|e| e.kind == sim::EventKind::Run));
    }
}
