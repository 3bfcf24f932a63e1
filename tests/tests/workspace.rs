//! Workspace (spec/runtime.md §4.4, seed 000 §6.1): each task of a kernel with `workspace(N)`
//! owns N bytes of its AICPU's arena from its issue to its reclaim, never a byte another such
//! task holds at the same time; a task whose scratch does not fit waits; the offset reaches the
//! kernel in its descriptor. Checked from the issue and reclaim events, independently of the
//! scheduler's own bookkeeping, in the adversarial interleavings of `tests/src/sched.rs` and in
//! threaded runs; and every way of asking for an arena too small is refused.

use std::collections::HashMap;

use ptovm_assembler::{assemble, DiagKind, Options};
use ptovm_host_sim::sim;
use ptovm_tests::sched::{check, config, run_with, Extra, Run};
use ptovm_vm::{verify, ParamKind, RuntimeParams, Value, WindowMode};

/// Three kernels with scratch of 1,000 (1,024 as lines), 200 (256) and 64 bytes, one without,
/// over `B` requests with chains through `X[b]` and reads of a shared `Y`.
const MODULE: &str = "
@param B = 12
@tensor X: f32[B, 4]
@tensor Y: f32[4]
@kernel big(b): cube(inout x) workspace(1000)
@kernel mid(b): vector(inout x, in y) workspace(200)
@kernel small(b): vector(inout x) workspace(64)
@kernel plain(b): vector(in x, out y)
@workload w(%reqs: dense_dyn(B)) {
  parallel_for b in %reqs {
    task @big(b) resources(X[b, 0])
    task @mid(b) resources(X[b, 1], Y[b % 4])
    task @small(b) resources(X[b, 2])
    task @plain(b) resources(X[b, 3], Y[b % 4])
  }
}
";

fn bytes(src: &str) -> Vec<u8> {
    assemble("ws.pto", src, &Options::default()).unwrap().bytes
}

fn scratch_of(kernel: u32) -> u32 {
    [1024, 256, 64, 0][kernel as usize]
}

/// Every issued task's scratch lies in its issuing AICPU's arena, its core's descriptor says
/// where, and two tasks of one arena whose scratches share a byte never hold them at once
/// (from issue to reclaim).
fn no_shared_bytes(r: &Run, arena: u32) -> Result<(), String> {
    let reclaimed: HashMap<u64, u64> = r.reclaims.iter().copied().collect();
    let descs: HashMap<u64, (u32, u32)> = r.descs.iter().map(|&(t, o, b)| (t, (o, b))).collect();
    let mut held: Vec<(u32, u32, u32, u64, u64, u64)> = vec![];
    for (at, i) in &r.issues {
        let (offset, bytes) = i.workspace;
        if bytes != scratch_of(i.kernel) {
            return Err(format!("task {} got {bytes} bytes", i.task));
        }
        if descs.get(&i.task) != Some(&(offset, bytes)) {
            return Err(format!(
                "task {}'s descriptor says {:?}, its issue {offset}+{bytes}",
                i.task,
                descs.get(&i.task)
            ));
        }
        if bytes == 0 {
            continue;
        }
        let base = i.aicpu * arena;
        if offset < base || offset + bytes > base + arena || offset % 64 != 0 {
            return Err(format!(
                "task {}'s scratch {offset}+{bytes} is outside AICPU {}'s arena",
                i.task, i.aicpu
            ));
        }
        let end = *reclaimed
            .get(&i.task)
            .ok_or(format!("task {}'s scratch was never reclaimed", i.task))?;
        held.push((i.aicpu, offset, offset + bytes, *at, end, i.task));
    }
    for (k, a) in held.iter().enumerate() {
        for b in &held[k + 1..] {
            let bytes_meet = a.1 < b.2 && b.1 < a.2;
            let times_meet = a.3 < b.4 && b.3 < a.4;
            if bytes_meet && times_meet {
                return Err(format!(
                    "tasks {} and {} held bytes {}..{} and {}..{} at once",
                    a.5, b.5, a.1, a.2, b.1, b.2
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn no_two_running_tasks_share_bytes_in_any_interleaving() {
    let code = bytes(MODULE);
    let params = vec![(ParamKind::Scalar, 12, vec![])];
    let mut waits = 0;
    let mut runs = 0;
    for seed in 0..240u64 {
        let n = [1u32, 2, 3][seed as usize % 3];
        let window = [1u32, 2, 8, 64][(seed / 3) as usize % 4];
        // The largest scratch alone, a little more, two of them, or room for every core.
        let arena = [Some(1024), Some(1088), Some(2048), None][(seed / 12) as usize % 4];
        let cfg = config(seed, window);
        let extra = Extra {
            arena,
            ..Extra::default()
        };
        let r = run_with(&code, &params, (n, window), cfg, seed, extra)
            .unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
        check(&code, &params, n, &r).unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
        // Without one: room for the largest scratch on min(window, cores) tasks.
        let arena = arena.unwrap_or(1024 * window.min(r.cores));
        assert_eq!(r.arena, arena);
        no_shared_bytes(&r, arena).unwrap_or_else(|e| panic!("seed {seed}: {e} ({cfg:?})"));
        assert_eq!(r.ran.len(), 48);
        waits += r.counts.workspace_waits;
        assert!(r.counts.workspace_peak <= u64::from(arena));
        runs += 1;
    }
    // Small arenas made tasks wait (exhaustion stalls rather than overlapping).
    assert!(waits > 0, "{runs} runs and no task waited for workspace");
}

#[test]
fn an_arena_of_one_scratch_runs_the_tasks_one_at_a_time() {
    // Only the 1,024-byte task fits alone: every two tasks with scratch on one AICPU are
    // apart in time, the peak is one task's.
    let code = bytes(MODULE);
    let params = vec![(ParamKind::Scalar, 12, vec![])];
    for seed in 0..40u64 {
        let cfg = config(seed, 8);
        let extra = Extra {
            arena: Some(1024),
            ..Extra::default()
        };
        let r = run_with(&code, &params, (1, 8), cfg, seed, extra).unwrap();
        check(&code, &params, 1, &r).unwrap();
        no_shared_bytes(&r, 1024).unwrap();
        let mut open: Vec<u64> = vec![];
        let reclaimed: HashMap<u64, u64> = r.reclaims.iter().copied().collect();
        for (at, i) in r.issues.iter().filter(|(_, i)| i.workspace.1 >= 1024) {
            open.retain(|&end| end > *at);
            assert!(open.is_empty(), "seed {seed}: two big scratches at once");
            open.push(reclaimed[&i.task]);
        }
        assert!(r.counts.workspace_peak <= 1024);
    }
}

#[test]
fn threaded_runs_with_small_arenas_check() {
    let v_bytes = bytes(MODULE);
    for (aicpus, window, arena) in [(1, 4, 1024), (2, 1, 1088), (3, 16, 1344), (6, 64, 1024)] {
        for jitter in [None, Some(7u64 + aicpus as u64)] {
            let v = verify(&v_bytes).unwrap();
            let p = RuntimeParams::new(&v, &[Value::Scalar(40)]).unwrap();
            let o = sim::Options {
                aicpus,
                cube: 2 * aicpus,
                vector: 4 * aicpus,
                window,
                mode: WindowMode::Stall,
                check: true,
                jitter,
                descriptors: true,
                workspace: Some(arena),
                ..sim::Options::default()
            };
            let r = sim::run(v, p, o).unwrap_or_else(|e| panic!("{o:?}: {e}"));
            assert!(r.checked);
            assert_eq!(r.tasks_total, 160);
            assert_eq!(r.workspace_arena, arena);
            assert!(r.workspace_peak <= u64::from(arena));
        }
    }
}

#[test]
fn the_default_arena_fits_every_core() {
    let v_bytes = bytes(MODULE);
    let v = verify(&v_bytes).unwrap();
    // 1,024 bytes for each of min(window, cores) tasks.
    assert_eq!(ptovm_vm::sched::Workspace::largest(&v), 1024);
    assert_eq!(
        ptovm_vm::sched::Workspace::arena_for(&v, 1024, 12),
        12 * 1024
    );
    assert_eq!(ptovm_vm::sched::Workspace::arena_for(&v, 2, 12), 2 * 1024);
    let p = RuntimeParams::new(&v, &[Value::Scalar(40)]).unwrap();
    let o = sim::Options {
        aicpus: 2,
        cube: 4,
        vector: 8,
        check: true,
        ..sim::Options::default()
    };
    // Shared cores: an AICPU may run a task on each of the 12 cores at once; under a
    // partition on its own 2 + 4.
    let r = sim::run(v, p, o).unwrap();
    assert_eq!(r.workspace_arena, 12 * 1024);
    assert_eq!(r.workspace_waits, 0);
    let o = sim::Options {
        cores: sim::CoreAlloc::Partition,
        ..o
    };
    let r = sim::run(v, p, o).unwrap();
    assert_eq!(r.workspace_arena, 6 * 1024);
    assert_eq!(r.workspace_waits, 0);
    // The program's own arena.
    let own = bytes(&format!(
        "{MODULE}\n@schedule s for w {{ workspace = 3000 }}"
    ));
    let v = verify(&own).unwrap();
    assert_eq!(v.config().workspace_arena.get(), 3000);
    let r = sim::run(v, p_of(&v), sim::Options::default()).unwrap();
    assert_eq!(r.workspace_arena, 3000);
}

fn p_of<'a>(v: &ptovm_vm::Verified<'a>) -> RuntimeParams<'static> {
    RuntimeParams::new(v, &[Value::Scalar(12)]).unwrap()
}

#[test]
fn an_arena_smaller_than_a_workspace_is_refused_everywhere() {
    // At assembly, located at the kernel.
    let src = format!("{MODULE}\n@schedule s for w {{ workspace = 1000 }}");
    let e = assemble("ws.pto", &src, &Options::default()).unwrap_err();
    assert_eq!(e.0.kind, DiagKind::Overflow);
    assert!(
        e.0.message.contains(
            "kernel `big`'s workspace of 1024 bytes is larger than the 1000-byte workspace arena"
        ),
        "{}",
        e.0.message
    );
    assert_eq!(e.0.line, 5);
    // A workspace the format cannot hold.
    let e = assemble(
        "ws.pto",
        &MODULE.replace("workspace(1000)", "workspace(5000000)"),
        &Options::default(),
    )
    .unwrap_err();
    assert!(
        e.0.message.contains("the limit is 4194240"),
        "{}",
        e.0.message
    );
    // By the verifier, from a listing that says so (tests/tests/verifier_errors.rs checks the
    // error's kind and place on raw bytes).
    let listing = ptovm_assembler::disassemble(&bytes(MODULE)).unwrap();
    let bad = listing.replace("batch_deps=0", "batch_deps=0 workspace=512");
    let e = assemble("bad.ptol", &bad, &Options::default()).unwrap_err();
    assert_eq!(e.0.kind, DiagKind::Verify);
    assert!(
        e.0.message
            .contains("workspace of 1024 bytes is larger than the 512-byte workspace arena"),
        "{}",
        e.0.message
    );
    let fine = listing.replace("batch_deps=0", "batch_deps=0 workspace=1024");
    assert!(assemble("ok.ptol", &fine, &Options::default()).is_ok());
    // At launch: the simulator's option, and an undeclared kernel may not have workspace.
    let v_bytes = bytes(MODULE);
    let v = verify(&v_bytes).unwrap();
    let o = sim::Options {
        workspace: Some(1000),
        ..sim::Options::default()
    };
    let e = sim::run(v, p_of(&v), o).unwrap_err();
    assert!(
        matches!(&e, sim::SimError::Options(m) if m.contains("kernel 0 needs 1024 bytes")),
        "{e}"
    );
    // Arenas whose sum passes 4 GiB.
    let o = sim::Options {
        workspace: Some(u32::MAX / 2),
        ..sim::Options::default()
    };
    assert!(matches!(
        sim::run(v, p_of(&v), o),
        Err(sim::SimError::Options(_))
    ));
}
