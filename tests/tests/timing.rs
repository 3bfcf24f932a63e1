//! `timing` (PTO-WSP's issue timing; spec/pto.md §4.2): `batched(n)`, `interleaved(n)` and
//! `rate_limit(n)` change when an AICPU hands its ready tasks to its cores, never which tasks
//! run or what they wait for. The scheduler is driven on one thread in seeded interleavings of
//! steps and core starts and ends, with a fake clock (`ptovm_tests::sched`): each policy's rule
//! is checked against the log of issues and the places of starts and ends in the same event
//! sequence, and every run against the reference expander. Threaded runs check the same
//! policies end to end, with their counters and trace.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

use ptovm_assembler::{assemble, DiagKind, Options};
use ptovm_host_sim::sim::{self, EventKind};
use ptovm_tests::sched::{check, run_with, Extra, Run};
use ptovm_vm::sched::{Config, IssueTiming, Start, RATE_CREDIT_NS};
use ptovm_vm::{verify, RuntimeParams, WindowMode};

fn bytes(src: &str) -> Vec<u8> {
    assemble("timing.pto", src, &Options::default())
        .unwrap_or_else(|e| panic!("{e}\n{src}"))
        .bytes
}

fn config(timing: IssueTiming, window: u32) -> Config {
    Config {
        window,
        mode: WindowMode::Stall,
        start: Start::Immediate,
        pipeline_depth: 0,
        work_steal: false,
        cores: ptovm_vm::sched::CoreAlloc::Shared,
        batch_deps: 0,
        timing,
        naive: false,
    }
}

/// Runs and checks against the reference; panics with the seed on failure.
fn run_checked(code: &[u8], n: u32, window: u32, timing: IssueTiming, seed: u64) -> Run {
    // Two cores of each pool per AICPU, whatever the seed: the rate, not the cores, must bind.
    let cores = Some((2 * n as usize, 2 * n as usize));
    let extra = Extra {
        cores,
        ..Extra::default()
    };
    let r = run_with(code, &[], (n, window), config(timing, window), seed, extra)
        .unwrap_or_else(|e| panic!("{timing}, {n} AICPUs, window {window}, seed {seed}: {e}"));
    check(code, &[], n, &r)
        .unwrap_or_else(|e| panic!("{timing}, {n} AICPUs, window {window}, seed {seed}: {e}"));
    let issued: usize = r.issues.len();
    assert_eq!(issued as u64, r.counts.tasks, "every task issued once");
    r
}

/// Two cube producers, each read by three vector consumers.
const FAN: &str = "@tensor X: f16[2]
@tensor Y: f16[6]
@kernel p(i): cube(out x)
@kernel c(i): vector(in x, out y)
@workload w() {
  parallel_for i in dense[2] { task @p(i) resources(X[i]) }
  parallel_for j in dense[6] { task @c(j) resources(X[j / 3], Y[j]) }
}";

/// `batched(4)`: the two producers go out as a short batch (fewer than 4 ready, no core busy);
/// the first producer's three consumers are then held while the second producer runs (3 < 4
/// and a core is busy), so no consumer is issued before both producers ended, and all six go
/// out as one batch.
#[test]
fn batched_holds_ready_tasks_until_the_batch_fills() {
    let code = bytes(FAN);
    for seed in 0..200 {
        let r = run_checked(&code, 1, 16, IssueTiming::Batched(4), seed);
        assert_eq!(
            (r.counts.issue_batches, r.counts.short_batches),
            (2, 1),
            "seed {seed}"
        );
        let last_producer_end = r.ran[..2].iter().map(|t| t.1).max().unwrap();
        for (at, i) in &r.issues {
            if i.task >= 2 {
                assert!(*at > last_producer_end, "seed {seed}: {i:?} issued early");
                assert_eq!(i.batch, 2, "seed {seed}");
            } else {
                assert_eq!(i.batch, 1, "seed {seed}");
            }
        }
        // Without batching, some seed issues a consumer while the other producer runs.
    }
    let early = (0..200).any(|seed| {
        let r = run_checked(&code, 1, 16, IssueTiming::Immediate, seed);
        let last = r.ran[..2].iter().map(|t| t.1).max().unwrap();
        r.issues.iter().any(|(at, i)| i.task >= 2 && *at < last)
    });
    assert!(early, "immediate timing never issued a consumer early");
}

/// A batch never fills beyond the window, and nothing waits for one that cannot: five
/// independent tasks under `batched(8)` go out as one short batch; under `batched(4)` as one
/// full batch of five.
#[test]
fn batches_that_cannot_fill_go_out_short() {
    let code = bytes(
        "@tensor Y: f16[5]
@kernel c(i): vector(out y)
@workload w() { parallel_for i in dense[5] { task @c(i) resources(Y[i]) } }",
    );
    for seed in 0..50 {
        let r = run_checked(&code, 1, 8, IssueTiming::Batched(8), seed);
        assert_eq!((r.counts.issue_batches, r.counts.short_batches), (1, 1));
        let r = run_checked(&code, 1, 8, IssueTiming::Batched(4), seed);
        assert_eq!((r.counts.issue_batches, r.counts.short_batches), (1, 0));
        let r = run_checked(&code, 1, 8, IssueTiming::Immediate, seed);
        assert!(r.issues.iter().all(|(_, i)| i.batch == 0));
    }
}

/// Over random programs' worth of shapes: every batch of an AICPU is issued whole before the
/// next (batch numbers rise by one), and the batches with fewer than `n` tasks are exactly the
/// short ones the counters report.
#[test]
fn batches_are_issued_whole_and_counted() {
    let code = bytes(
        "@tensor X: f16[24]
@tensor Y: f16[24]
@kernel p(i): cube(out x)
@kernel c(i): vector(in x, out y)
@workload w() { parallel_for i in dense[24] {
  task @p(i) resources(X[i])
  task @c(i) resources(X[i / 2 * 2], Y[i])
} }
@schedule s for w { dispatch = round_robin }",
    );
    for seed in 0..120 {
        let (n, window, size) = (
            1 + seed as u32 % 3,
            [2, 5, 64][seed as usize % 3],
            [1, 3, 8][(seed / 3) as usize % 3],
        );
        let r = run_checked(&code, n, window, IssueTiming::Batched(size), seed);
        let mut sizes: HashMap<(u32, u64), u32> = HashMap::new();
        let mut last: HashMap<u32, u64> = HashMap::new();
        for (_, i) in &r.issues {
            let prev = last.insert(i.aicpu, i.batch).unwrap_or(1);
            assert!(
                i.batch == prev || i.batch == prev + 1,
                "seed {seed}: AICPU {} went from batch {prev} to {}",
                i.aicpu,
                i.batch
            );
            *sizes.entry((i.aicpu, i.batch)).or_default() += 1;
        }
        assert_eq!(sizes.len() as u64, r.counts.issue_batches, "seed {seed}");
        let short = sizes.values().filter(|&&k| k < size).count() as u64;
        assert_eq!(short, r.counts.short_batches, "seed {seed}");
    }
}

/// `streams` streams of six tasks (`stream_by = b`), each stream in program order.
fn streams(streams: u32) -> String {
    format!(
        "@tensor X: f16[{streams}, 6]
@kernel k(b, c): vector(inout x)
@workload w() {{ parallel_for b in dense[{streams}] {{ for_each c in dense[6] {{ task @k(b, c) resources(X[b, c]) }} }} }}
@schedule s for w {{ streams = {streams}
  stream_by = b }}"
    )
}

/// `interleaved(n)`: each issue is of the first stream, from the one after the last issued
/// (cyclically), that has a ready task. A stream's next task is ready once the previous one of
/// its stream ended (the first at once): that is read from the event sequence, independently
/// of the scheduler. Three and four streams (the rotation's arithmetic is modulo `n`).
#[test]
fn interleaved_issues_round_robin_over_the_streams() {
    for n in [3u32, 4] {
        let code = bytes(&streams(n));
        let mut reordered = 0;
        for seed in 0..200 {
            let r = run_checked(&code, 1, 32, IssueTiming::Interleaved(n), seed);
            reordered += r.counts.reordered;
            let mut next = vec![0u64; n as usize]; // each stream's next task not yet issued
            let mut cursor = 0u32;
            for (at, i) in &r.issues {
                let ready: Vec<u32> = (0..n)
                    .filter(|&q| {
                        let c = next[q as usize];
                        c < 6
                            && (c == 0 || {
                                let prev_end = r.ran[(q as u64 * 6 + c - 1) as usize].1;
                                prev_end != 0 && prev_end < *at
                            })
                    })
                    .collect();
                let s = i.stream;
                assert_eq!(i.task, s as u64 * 6 + next[s as usize], "seed {seed}");
                assert!(ready.contains(&s), "seed {seed}: {i:?} was not ready");
                let turn = |q: u32| (q + n - cursor) % n;
                for q in ready {
                    assert!(
                        turn(q) >= turn(s),
                        "seed {seed}: issued stream {s} while stream {q} was ready, cursor {cursor}"
                    );
                }
                next[s as usize] += 1;
                cursor = (s + 1) % n;
            }
        }
        // Cores finishing out of order make FIFO and the rotation differ.
        assert!(reordered > 0, "the rotation never differed from FIFO order");
    }
}

/// `rate_limit(n)`: the launch has a turn every `spacing = ceil(10⁶ / n)` ns of the clock on
/// average, shared by its AICPUs, and makes up at most `RATE_CREDIT_NS` of missed turns:
/// between any two issues `k` apart in time, `k · spacing ≤ gap + RATE_CREDIT_NS`. The fake
/// clock moves 1,000 ns a driver round. At 100 tasks/ms (a turn every 10 µs) ready tasks wait
/// for the rate; at 100,000 tasks/ms (a turn every 10 ns) the launch issues several tasks in one
/// round — one a step would cap the rate far below `n`.
#[test]
fn rate_limit_spaces_the_launchs_issues() {
    let code = bytes(
        "@tensor Y: f16[40]
@kernel c(i): vector(out y)
@workload w() { parallel_for i in dense[40] { task @c(i) resources(Y[i]) } }
@schedule s for w { dispatch = round_robin }",
    );
    for rate in [100, 100_000] {
        let mut same_round = 0;
        for seed in 0..60 {
            let n = 1 + seed as u32 % 3;
            let timing = IssueTiming::RateLimit(rate);
            let spacing = timing.spacing_ns();
            assert_eq!(spacing, 1_000_000 / rate as u64);
            let r = run_checked(&code, n, 16, timing, seed);
            let times: Vec<u64> = r
                .issues
                .iter()
                .map(|(_, i)| {
                    i.at_ns
                        .expect("a rate-limited issue carries its clock reading")
                })
                .collect();
            assert_within_rate(&times, spacing, &format!("rate {rate}, seed {seed}"));
            same_round += times.windows(2).filter(|w| w[0] == w[1]).count();
            if rate == 100 {
                assert!(r.counts.rate_waits > 0 && r.counts.rate_wait_ns > 0);
            }
        }
        if rate == 100_000 {
            assert!(
                same_round > 0,
                "a fast rate never issued twice in one round"
            );
        }
    }
}

/// Checks the token bucket's bound on a launch's issue times (any order).
fn assert_within_rate(times: &[u64], spacing: u64, what: &str) {
    let mut times = times.to_vec();
    times.sort_unstable();
    for (a, &ta) in times.iter().enumerate() {
        for (k, &tb) in times[a + 1..].iter().enumerate() {
            let k = k as u64 + 1;
            assert!(
                k * spacing <= tb - ta + RATE_CREDIT_NS,
                "{what}: {} issues from {ta} to {tb} ns",
                k + 1
            );
        }
    }
}

/// Spacing rounds up, and a rate above a task per nanosecond still spaces by 1 ns. After an
/// idle spell the launch makes up exactly `RATE_CREDIT_NS` of turns at once, then issues one
/// a spacing.
#[test]
fn rate_limit_spacing() {
    let timing = IssueTiming::RateLimit(1_000); // a turn every 1,000 ns
    let (mut next, now) = (0, 1_000_000_000);
    let mut burst = 0;
    while next <= now {
        next = timing.next_turn(next, now);
        burst += 1;
    }
    assert_eq!(burst, 1 + RATE_CREDIT_NS / 1_000);
    assert_eq!(
        timing.next_turn(next, next),
        next + 1_000,
        "no credit when on time"
    );
    assert_eq!(timing.next_turn(0, 0), 1_000, "the first turn, at clock 0");
    assert_eq!(IssueTiming::RateLimit(3).spacing_ns(), 333_334);
    assert_eq!(IssueTiming::RateLimit(u32::MAX).spacing_ns(), 1);
    assert_eq!(IssueTiming::Batched(3).spacing_ns(), 0);
}

/// A program whose streams also carry data: eight requests of sixteen `k` tasks and a cube
/// `m` that reads them, dispatched by request, four streams by request.
fn streamed(timing: &str) -> String {
    format!(
        "@tensor X: f16[8, 16]
@tensor Y: f16[8]
@kernel k(b, c): vector(inout x)
@kernel m(b): cube(in x, out y)
@workload w() {{ parallel_for b in dense[8] {{
  for_each c in dense[16] {{ task @k(b, c) resources(X[b, c]) }}
  task @m(b) resources(X[b], Y[b])
}} }}
@schedule s for w {{
  dispatch = affinity(b)
  streams = 4
  stream_by = b
  timing = {timing}
}}"
    )
}

fn run_bounded(code: Vec<u8>, o: sim::Options) -> sim::Report {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let v = verify(&code).unwrap();
        let p = RuntimeParams::new(&v, &[]).unwrap();
        let _ = tx.send(sim::run(v, p, o));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("no end within 60 s (deadlock?) with {o:?}"))
        .unwrap_or_else(|e| panic!("{e} with {o:?}"))
}

/// Every policy end to end on the threaded simulator: the program's timing is applied (its
/// counters move), the run passes the check at 1, 2 and 6 AICPUs, windows 1, 8 and 1,024, with
/// and without injected yields; a rate-limited AICPU's issues in the trace are spaced.
#[test]
fn threaded_runs_apply_the_timing() {
    for timing in [
        "immediate",
        "batched(6)",
        "interleaved(4)",
        "rate_limit(50000)",
    ] {
        let code = bytes(&streamed(timing));
        let v = verify(&code).unwrap();
        let own = Config::of_program(&v);
        assert_eq!(own.timing.to_string(), timing);
        for aicpus in [1, 2, 6] {
            for window in [1, 8, 1024] {
                for jitter in [None, Some(aicpus as u64 * 31 + window as u64)] {
                    let o = sim::Options {
                        aicpus,
                        cube: 2 * aicpus,
                        vector: 2 * aicpus,
                        window,
                        check: true,
                        jitter,
                        trace: true,
                        work_steal: aicpus == 2,
                        cores: [sim::CoreAlloc::Shared, sim::CoreAlloc::Partition]
                            [aicpus as usize % 2],
                        timing: own.timing,
                        ..sim::Options::default()
                    };
                    let r = run_bounded(code.clone(), o);
                    assert!(r.checked);
                    assert_eq!(r.tasks_total, 8 * 17);
                    let issues: Vec<_> = r
                        .events
                        .iter()
                        .filter(|e| e.kind == EventKind::Issue)
                        .collect();
                    assert_eq!(issues.len() as u64, r.tasks_total, "{timing}: {o:?}");
                    match own.timing {
                        IssueTiming::Batched(_) => {
                            assert!(r.issue_batches > 0);
                            // Stolen tasks go out between batches (batch 0 never appears
                            // without stealing).
                            assert!(o.work_steal || issues.iter().all(|e| e.batch > 0), "{o:?}");
                        }
                        IssueTiming::RateLimit(_) => {
                            let times: Vec<u64> = issues.iter().map(|e| e.start_ns).collect();
                            assert_within_rate(&times, own.timing.spacing_ns(), &format!("{o:?}"));
                        }
                        _ => assert_eq!(r.issue_batches + r.rate_waits, 0),
                    }
                }
            }
        }
    }
}

/// The assembler's errors and warnings: `interleaved` needs the streams of `stream_by` and
/// names their count; a batch larger than the window never fills.
#[test]
fn timing_that_cannot_take_effect_is_refused() {
    let module = |schedule: &str| {
        format!(
            "@tensor X: f16[4]
@kernel k(b): vector(inout x)
@workload w() {{ parallel_for b in dense[4] {{ task @k(b) resources(X[b]) }} }}
@schedule s for w {{ {schedule} }}"
        )
    };
    let err = |schedule: &str| {
        assemble("t.pto", &module(schedule), &Options::default())
            .err()
            .unwrap_or_else(|| panic!("`{schedule}` assembled"))
            .to_string()
    };
    let e = err("timing = interleaved(2)");
    assert!(e.contains("t.pto:4:") && e.contains("has none"), "{e}");
    let e = err("streams = 4\n stream_by = b\n timing = interleaved(2)");
    assert!(e.contains("names 2 streams, but the schedule has 4"), "{e}");
    let out = assemble(
        "t.pto",
        &module("window = 8\n timing = batched(9)"),
        &Options::default(),
    )
    .unwrap();
    assert!(
        out.warnings
            .iter()
            .any(|w| w.kind == DiagKind::NoEffect && w.message.contains("never fills a batch")),
        "{:?}",
        out.warnings
    );
    assert!(assemble(
        "t.pto",
        &module("streams = 4\n stream_by = b\n timing = interleaved(4)"),
        &Options::default()
    )
    .is_ok());
}
