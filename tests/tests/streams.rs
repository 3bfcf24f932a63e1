//! `streams = N` with `stream_by = key` (PTO-WSP's stream assignment; spec/pto.md §4.2): every
//! task joins stream `key % N`, and the tasks of one stream run one after another in program
//! order, whichever AICPUs own them. The expected order is computed here from the tasks'
//! parameters, independently of how the assembler lowers the knob; the threaded runs are
//! checked from their trace (every task of a stream starts after the previous one ended).

use std::collections::{BTreeMap, HashSet};
use std::sync::mpsc;
use std::time::Duration;

use ptovm_assembler::{assemble, DiagKind, Options};
use ptovm_host_sim::sim::{self, EventKind, SimError};
use ptovm_host_sim::{edges, reference_expand, DepMode, RefTask};
use ptovm_vm::{verify, RunError, RuntimeParams, Value, WindowMode};

/// Two tasks per `(b, h)`: `k` then `c` on the same tile. Data alone orders only the pair; the
/// schedule puts head `h` in stream `h % streams`.
fn module(schedule: &str) -> String {
    format!(
        "@param B = 3
@tensor X: f32[B, 8]
@kernel k(b, h): vector(inout x)
@kernel c(b, h): cube(in x)
@workload w(%B: dense_dyn(B), %H: dense[8]) {{
  parallel_for b in %B {{
    parallel_for h in %H {{
      task @k(b, h) resources(X[b, h])
      task @c(b, h) resources(X[b, h])
    }}
  }}
}}
@schedule s for w {{
{schedule}
}}"
    )
}

const STREAMED: &str = "  dispatch = round_robin(3)\n  streams = 3\n  stream_by = h";

fn tasks(bytes: &[u8], aicpus: u32) -> Vec<RefTask> {
    let v = verify(bytes).unwrap();
    let p = RuntimeParams::new(&v, &[Value::Scalar(3)]).unwrap();
    reference_expand(&v, &p, aicpus, u64::MAX).unwrap()
}

/// Consecutive tasks of each stream, `h % 3` with `h` the second parameter.
fn stream_pairs(tasks: &[RefTask]) -> Vec<(u64, u64)> {
    let mut last: BTreeMap<i64, u64> = BTreeMap::new();
    let mut pairs = vec![];
    for t in tasks {
        let stream = t.params[1] % 3;
        if let Some(prev) = last.insert(stream, t.id) {
            pairs.push((prev, t.id));
        }
    }
    pairs
}

#[test]
fn each_stream_is_a_chain_in_program_order() {
    let out = assemble("s.pto", &module(STREAMED), &Options::default()).unwrap();
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    let ts = tasks(&out.bytes, 3);
    assert_eq!(ts.len(), 3 * 8 * 2);
    let pairs = stream_pairs(&ts);
    assert_eq!(pairs.len(), ts.len() - 3);
    let found: HashSet<(u64, u64)> = edges(&ts, DepMode::Overlap)
        .iter()
        .map(|e| (e.from, e.to))
        .collect();
    for p in &pairs {
        assert!(found.contains(p), "stream edge {p:?} missing");
    }
    // The kernels see only their own resources; the stream's record comes last.
    assert!(ts.iter().all(|t| t.io.len() == 2));
    // Without `stream_by` most of those edges are not there: the test tells the two apart.
    let plain = assemble(
        "p.pto",
        &module("  dispatch = round_robin(3)"),
        &Options::default(),
    )
    .unwrap();
    let pts = tasks(&plain.bytes, 3);
    let plain_edges: HashSet<(u64, u64)> = edges(&pts, DepMode::Overlap)
        .iter()
        .map(|e| (e.from, e.to))
        .collect();
    let missing = pairs.iter().filter(|p| !plain_edges.contains(p)).count();
    assert_eq!(
        missing,
        pairs.len() - 3 * 8,
        "only the k→c pairs are data edges"
    );
}

fn run_bounded(bytes: Vec<u8>, o: sim::Options) -> Result<sim::Report, SimError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let v = verify(&bytes).unwrap();
        let p = RuntimeParams::new(&v, &[Value::Scalar(3)]).unwrap();
        let _ = tx.send(sim::run(v, p, o));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the simulator did not finish (deadlock?) with {o:?}"))
}

#[test]
fn threaded_runs_keep_each_streams_order() {
    let bytes = assemble("s.pto", &module(STREAMED), &Options::default())
        .unwrap()
        .bytes;
    let ts = tasks(&bytes, 1);
    let pairs = stream_pairs(&ts);
    for aicpus in [1, 2, 6] {
        for window in [1, 8, 1024] {
            for jitter in [None, Some(aicpus as u64 * 7 + window as u64)] {
                let o = sim::Options {
                    aicpus,
                    cube: 2 * aicpus,
                    vector: 2 * aicpus,
                    window,
                    mode: WindowMode::Stall,
                    threads: 2,
                    check: true,
                    jitter,
                    naive: false,
                    trace: true,
                    latency: false,
                    start: sim::Start::Immediate,
                    pipeline_depth: 0,
                    work_steal: aicpus == 2,
                    cores: [sim::CoreAlloc::Shared, sim::CoreAlloc::Partition][aicpus as usize % 2],
                    batch_deps: 0,
                    timing: sim::IssueTiming::Immediate,
                    deps: DepMode::Overlap,
                    descriptors: false,
                    workspace: None,
                };
                let r = run_bounded(bytes.clone(), o)
                    .unwrap_or_else(|e| panic!("{aicpus} AICPUs, window {window}: {e}"));
                assert!(r.checked);
                let mut span = vec![(0u64, 0u64); ts.len()];
                for e in r.events.iter().filter(|e| e.kind == EventKind::Run) {
                    span[e.task as usize] = (e.start_ns, e.end_ns);
                }
                for &(a, b) in &pairs {
                    assert!(
                        span[a as usize].1 <= span[b as usize].0,
                        "{aicpus} AICPUs, window {window}: task {b} started before {a} of its stream ended"
                    );
                }
            }
        }
    }
}

fn error_of(schedule: &str) -> (DiagKind, usize, String) {
    let e = assemble("e.pto", &module(schedule), &Options::default()).unwrap_err();
    let d = e.diag();
    (d.kind, d.line, d.message.clone())
}

#[test]
fn bad_stream_keys_are_located_errors() {
    // A key that reads no loop variable.
    let (kind, line, msg) = error_of("  streams = 2\n  stream_by = B");
    assert_eq!((kind, line), (DiagKind::Type, 15), "{msg}");
    assert!(msg.contains("names no loop variable"), "{msg}");
    // A name bound nowhere is a runtime scalar, which is just as wrong.
    let (_, _, msg) = error_of("  streams = 2\n  stream_by = head");
    assert!(msg.contains("names no loop variable"), "{msg}");
    // A task outside the loop the key reads.
    let src = "@kernel k(i): vector(inout x)
@workload w(%H: dense[4]) {
  task @k(0) resources(X)
  parallel_for h in %H { task @k(h) resources(X) }
}
@schedule s for w { streams = 2  stream_by = h }";
    let e = assemble("e.pto", src, &Options::default()).unwrap_err();
    let d = e.diag();
    assert_eq!((d.kind, d.line), (DiagKind::Type, 3), "{}", d.message);
    assert!(d.message.contains("`stream_by` at line 6"), "{}", d.message);
    // No room for the stream's record beside 16 resources.
    let names: Vec<String> = (0..16).map(|i| format!("T{i}")).collect();
    let src = format!(
        "@workload w(%H: dense[4]) {{ parallel_for h in %H {{ task @k(h) resources({}) }} }}
@schedule s for w {{ streams = 2  stream_by = h }}",
        names.join(", ")
    );
    let e = assemble("e.pto", &src, &Options::default()).unwrap_err();
    let d = e.diag();
    assert_eq!(d.kind, DiagKind::Limit, "{}", d.message);
    assert!(d.message.contains("stream-order record"), "{}", d.message);
}

#[test]
fn streams_without_a_key_and_one_stream_are_warned_about() {
    let out = assemble("w.pto", &module("  streams = 4"), &Options::default()).unwrap();
    assert_eq!(out.warnings.len(), 1);
    assert_eq!(out.warnings[0].kind, DiagKind::NoEffect);
    assert!(verify(&out.bytes).unwrap().stream_tensor().is_none());
    let out = assemble("w.pto", &module("  stream_by = h"), &Options::default()).unwrap();
    assert_eq!(out.warnings.len(), 1);
    assert!(out.warnings[0].message.contains("one stream"));
    // One stream: every task after the previous one.
    let ts = tasks(&out.bytes, 1);
    let found: HashSet<(u64, u64)> = edges(&ts, DepMode::Overlap)
        .iter()
        .map(|e| (e.from, e.to))
        .collect();
    assert!((1..ts.len() as u64).all(|i| found.contains(&(i - 1, i))));
}

#[test]
fn a_negative_key_is_a_runtime_error() {
    // `b - 1` is -1 for the first request: no stream is guessed for it.
    let bytes = assemble(
        "n.pto",
        &module("  streams = 2\n  stream_by = b - 1"),
        &Options::default(),
    )
    .unwrap()
    .bytes;
    let v = verify(&bytes).unwrap();
    let p = RuntimeParams::new(&v, &[Value::Scalar(3)]).unwrap();
    let e = reference_expand(&v, &p, 1, u64::MAX).unwrap_err();
    assert!(
        matches!(
            e,
            RunError::RegionBounds { start: -1, .. } | RunError::BadRegion { start: -1, .. }
        ),
        "{e:?}"
    );
    let r = run_bounded(bytes, sim::Options::default());
    assert!(
        matches!(r, Err(SimError::Launch(ptovm_vm::LaunchError::Run(_)))),
        "{r:?}"
    );
}

#[test]
fn the_stream_order_survives_disassembly() {
    let out = assemble("s.pto", &module(STREAMED), &Options::default()).unwrap();
    let text = ptovm_assembler::disassemble(&out.bytes).unwrap();
    assert!(text.contains(" stream streams=3\n"), "{text}");
    let again = assemble("l", &text, &Options::default()).unwrap();
    assert_eq!(again.bytes, out.bytes);
}

#[test]
fn the_stream_count_override_reaches_the_stream_order() {
    let opts = Options {
        overrides: ptovm_assembler::Overrides {
            streams: Some(4),
            ..Default::default()
        },
        ..Options::default()
    };
    let out = assemble("s.pto", &module(STREAMED), &opts).unwrap();
    let v = verify(&out.bytes).unwrap();
    let st = v.stream_tensor().unwrap();
    assert_eq!(v.tensors()[st as usize].dims[0].get(), 4);
    assert_eq!(v.config().streams.get(), 4);
    // A listing spells its key out: the override cannot change it there.
    let text = ptovm_assembler::disassemble(&out.bytes).unwrap();
    let e = assemble(
        "l",
        &text,
        &Options {
            overrides: ptovm_assembler::Overrides {
                streams: Some(2),
                ..Default::default()
            },
            ..Options::default()
        },
    )
    .unwrap_err();
    assert!(
        e.diag().message.contains("--streams cannot change"),
        "{}",
        e.diag().message
    );
}
