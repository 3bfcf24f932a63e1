//! The invariants the fuzz targets check (`fuzz/`, cargo-fuzz), as plain functions over the
//! fuzzer's input, so that the same checks run on stable over the checked-in corpus and every
//! regression input (`tests/tests/fuzz_corpus.rs`), and a crash reproduces with one command:
//! `cargo test -p ptovm-tests --test fuzz_corpus` after saving the input under
//! `fuzz/regressions/<target>/`, or `cargo +nightly fuzz run <target> <file>` in `fuzz/`.
//!
//! Each returns `Err` with what broke; the fuzz targets panic on it. None may panic or hang on
//! any input: that is checked by the fuzzers themselves.

use ptovm_assembler::{assemble, disassemble, Module, Options};
use ptovm_host_sim::{expand_aicpu, reference_expand};
use ptovm_vm::{
    verify, Interpreter, ParamKind, RuntimeParams, Sink, Status, Task, Value, Verified,
};

use crate::{gen_params, values, Gen};

/// The names of the targets, for the corpus test and the scripts.
pub const TARGETS: [&str; 6] = [
    "bytes",
    "text",
    "roundtrip",
    "partition",
    "schedule",
    "device",
];

/// Runs target `name` on `data`.
pub fn check(name: &str, data: &[u8]) -> Result<(), String> {
    match name {
        "bytes" => bytes(data),
        "text" => text(data),
        "roundtrip" => roundtrip(data),
        "partition" => partition(data),
        "schedule" => schedule(data),
        "device" => device(data),
        _ => Err(format!("no fuzz target {name}")),
    }
}

/// Most tasks a fuzz case expands (more is skipped: the fuzzers want many small cases).
const MAX_TASKS: u64 = 20_000;
/// Most loop iterations a fuzz case may start ([`Interpreter::work_bound`]).
const MAX_ITERATIONS: u64 = 200_000;

struct Count(u64);
impl Sink for Count {
    fn task(&mut self, _: &Task) -> bool {
        self.0 += 1;
        true
    }
}

/// `bytes`: raw bytes as a PTOW file. Verifying them never panics; neither does verifying a
/// copy whose length and checksum fields are set to match (so that mutations reach the checks
/// behind the checksum). A program the verifier accepts is launched on 1 to 4 AICPUs with
/// runtime parameters made from its slot kinds and the input: when the parameters are
/// accepted and the work bound computed before running is within the fuzzing budget, counting
/// and every instance's walk stay within that bound, every instance runs to its end, and
/// together they emit exactly the task count computed before running, each walking exactly
/// the program's ids.
pub fn bytes(data: &[u8]) -> Result<(), String> {
    let _ = verify(data);
    let mut sealed = data.to_vec();
    ptovm_vm::format::seal(&mut sealed);
    let Ok(v) = verify(&sealed) else {
        return Ok(());
    };
    // Parameters from the input's last bytes: small scalars, short arrays of small values.
    let tail: Vec<u32> = data.iter().rev().take(64).map(|&b| b as u32 % 9).collect();
    let owned: Vec<(ParamKind, u32, Vec<u32>)> = v
        .params()
        .iter()
        .enumerate()
        .map(|(i, slot)| {
            let x = tail.get(i).copied().unwrap_or(1);
            if slot.kind == ParamKind::Scalar as u8 {
                (ParamKind::Scalar, x, Vec::new())
            } else {
                let mut acc = 0;
                let arr = (0..16u32)
                    .map(|k| {
                        acc += tail.get((i + k as usize) % tail.len().max(1)).unwrap_or(&1) % 3;
                        acc
                    })
                    .collect();
                (ParamKind::Array, 0, arr)
            }
        })
        .collect();
    let vals = values(&owned);
    let Ok(p) = RuntimeParams::new(&v, &vals) else {
        return Ok(());
    };
    let n = 1 + data.first().map_or(0, |b| *b as u32 % 4);
    run_all(v, p, n)
}

/// Launches every instance of `n`; checks the task count, the id walk and the work bound.
fn run_all(v: Verified<'_>, p: RuntimeParams<'_>, n: u32) -> Result<(), String> {
    let Ok(mut counter) = Interpreter::new(v, p, 0, n) else {
        return Ok(());
    };
    // The bound known before anything runs: programs over the fuzzing budget are not run
    // (counting alone walks up to `iterations`).
    let bound = counter.work_bound();
    if bound.iterations > MAX_ITERATIONS || bound.tasks > MAX_TASKS {
        return Ok(());
    }
    let Ok(total) = counter.count_tasks() else {
        return Ok(());
    };
    if total > bound.tasks || counter.stats().count_visits > bound.iterations {
        return Err(format!(
            "{total} tasks counted in {} iterations, over the bound {bound:?}",
            counter.stats().count_visits
        ));
    }
    let mut emitted = 0;
    for i in 0..n {
        let mut it = Interpreter::new(v, p, i, n).map_err(|e| format!("launch {i}/{n}: {e}"))?;
        let mut sink = Count(0);
        // A READBACK stops the walk (and keeps the launch's values when it goes on): at most
        // one stop per READBACK.
        let mut stops = 0;
        loop {
            match it.run(&mut sink, u64::MAX) {
                Ok(Status::Done) => break,
                Ok(Status::Readback) if stops < v.readbacks().len() => stops += 1,
                Ok(other) => return Err(format!("AICPU {i}/{n}: unbounded run ended {other:?}")),
                // A runtime error is the program's (the interpreter's tests check where it is
                // reported); the invariant is only that it is reported, not a panic.
                Err(_) => return Ok(()),
            }
        }
        let s = it.stats();
        if s.visits + s.count_visits > bound.iterations {
            return Err(format!(
                "AICPU {i}/{n} started {} + {} iterations, over the bound {bound:?}",
                s.visits, s.count_visits
            ));
        }
        if s.emitted != sink.0 || s.emitted + s.skipped != total || it.next_id() != total {
            return Err(format!(
                "AICPU {i}/{n}: emitted {} (sink {}), skipped {}, next id {}, for {total} tasks",
                s.emitted,
                sink.0,
                s.skipped,
                it.next_id()
            ));
        }
        emitted += sink.0;
    }
    if emitted != total {
        return Err(format!("{n} AICPUs emitted {emitted} of {total} tasks"));
    }
    Ok(())
}

/// `text`: raw text to the assembler. It never panics; an error names a line and column that
/// exist in the input (1-based; the column may be one past the line's end), quotes that line,
/// and has a caret of at least one character; an accepted module verifies.
pub fn text(data: &[u8]) -> Result<(), String> {
    let src = String::from_utf8_lossy(data);
    match assemble("fuzz.pto", &src, &Options::default()) {
        Ok(out) => verify(&out.bytes)
            .map(|_| ())
            .map_err(|e| format!("the assembler returned bytes that do not verify: {e}")),
        Err(e) => {
            let d = e.diag();
            let lines: Vec<&str> = src.split('\n').collect();
            let Some(line) = d.line.checked_sub(1).and_then(|i| lines.get(i)) else {
                return Err(format!("line {} of {} lines: {e}", d.line, lines.len()));
            };
            let line = line.strip_suffix('\r').unwrap_or(line);
            let chars = line.chars().count();
            if d.col == 0 || d.col > chars + 1 || d.width == 0 {
                return Err(format!(
                    "column {} (caret {}) on a line of {chars} characters: {e}",
                    d.col, d.width
                ));
            }
            let _ = e.to_string();
            Ok(())
        }
    }
}

/// `roundtrip`: a module generated from the input (every choice of [`Gen`] one input byte)
/// assembles and verifies; decoding and encoding it gives the same bytes; its disassembly
/// assembles back to the same bytes.
pub fn roundtrip(data: &[u8]) -> Result<(), String> {
    let src = Gen::from_bytes(data, false).module();
    let out = assemble("gen.pto", &src, &Options::default())
        .map_err(|e| format!("a generated module does not assemble: {e}\n{src}"))?;
    let v = verify(&out.bytes).map_err(|e| format!("{e}\n{src}"))?;
    if Module::decode(&v).encode() != out.bytes {
        return Err(format!("decode then encode changed the bytes\n{src}"));
    }
    let listing = disassemble(&out.bytes).map_err(|e| format!("{e}\n{src}"))?;
    let again = assemble("gen.ptol", &listing, &Options::default())
        .map_err(|e| format!("the disassembly does not assemble: {e}\n{listing}"))?;
    if again.bytes != out.bytes {
        return Err(format!(
            "disassembly then assembly changed the bytes\n{src}\n{listing}"
        ));
    }
    Ok(())
}

/// `partition`: a runnable module generated from the input after its first byte, which picks
/// the AICPU count (1 to 8) and the emission budget per call. When the reference expander
/// runs it (within 20,000 tasks), the instances' task sets are disjoint, each task comes from
/// its owner, equals the reference's, and together they are exactly the reference expansion.
pub fn partition(data: &[u8]) -> Result<(), String> {
    let Some((&first, rest)) = data.split_first() else {
        return Ok(());
    };
    let n = 1 + first as u32 % 8;
    let step = [ptovm_host_sim::NEXT_TASK, 1, 2, 7, u64::MAX][(first >> 3) as usize % 5];
    let src = Gen::from_bytes(rest, true).module();
    let out = assemble("gen.pto", &src, &Options::default())
        .map_err(|e| format!("a generated module does not assemble: {e}\n{src}"))?;
    let v = verify(&out.bytes).map_err(|e| format!("{e}\n{src}"))?;
    let seed = rest
        .iter()
        .fold(first as u64, |h, &b| h.rotate_left(5) ^ b as u64);
    let owned = gen_params(&out.module, seed);
    let vals: Vec<Value<'_>> = values(&owned);
    let p = RuntimeParams::new(&v, &vals).map_err(|e| format!("{e}\n{src}"))?;
    let Ok(reference) = reference_expand(&v, &p, n, MAX_TASKS) else {
        return Ok(());
    };
    let mut union = Vec::with_capacity(reference.len());
    for i in 0..n {
        let e = expand_aicpu(v, p, i, n, usize::MAX, step)
            .map_err(|e| format!("AICPU {i}/{n} failed where the reference did not: {e}\n{src}"))?;
        if e.total != reference.len() as u64 {
            return Err(format!(
                "AICPU {i}/{n} counts {} tasks, the reference {}\n{src}",
                e.total,
                reference.len()
            ));
        }
        for t in &e.tasks {
            let Some(r) = reference.get(t.id as usize) else {
                return Err(format!("task id {} past the reference\n{src}", t.id));
            };
            if r.owner != i || t != r {
                return Err(format!(
                    "AICPU {i}/{n} emitted task {} (owner {}) unlike the reference\n{src}",
                    t.id, r.owner
                ));
            }
        }
        union.extend(e.tasks);
    }
    union.sort_by_key(|t| t.id);
    if union != reference {
        return Err(format!(
            "the {n} instances' {} tasks are not the reference's {}\n{src}",
            union.len(),
            reference.len()
        ));
    }
    Ok(())
}

/// `schedule`: a small runnable module generated from the input after its first four bytes,
/// which pick the AICPU count (1 to 4), the window (1 to 64 slots), the scheduling settings and
/// the interleaving, run through the shared scheduler (`vm::sched`) on one thread with AICPU
/// steps and core starts and ends in that interleaving (`crate::sched`, the driver of
/// `tests/tests/sched.rs`): it ends, and passes the check against the reference expander —
/// every task once, on a core of its pool, after all its predecessors.
pub fn schedule(data: &[u8]) -> Result<(), String> {
    if data.len() < 4 {
        return Ok(());
    }
    let (head, rest) = data.split_at(4);
    let n = 1 + head[0] as u32 % 4;
    let window = [1u32, 2, 3, 8, 64][head[1] as usize % 5];
    let seed = rest.iter().fold(
        u64::from(u16::from_le_bytes([head[2], head[3]])),
        |h, &b| h.rotate_left(7) ^ b as u64,
    );
    let cfg = crate::sched::config(seed, window);
    let src = Gen::from_bytes(rest, true).module();
    let out = assemble("gen.pto", &src, &Options::default())
        .map_err(|e| format!("a generated module does not assemble: {e}\n{src}"))?;
    let params = gen_params(&out.module, seed);
    {
        let v = verify(&out.bytes).map_err(|e| format!("{e}\n{src}"))?;
        let vals = values(&params);
        let Ok(p) = RuntimeParams::new(&v, &vals) else {
            return Ok(());
        };
        let Ok(it) = Interpreter::new(v, p, 0, n) else {
            return Ok(());
        };
        // Small cases: every run is checked against the reference graph.
        let b = it.work_bound();
        if b.tasks > 2_000 || b.iterations > 20_000 {
            return Ok(());
        }
    }
    match crate::sched::run(&out.bytes, &params, n, window, cfg, seed) {
        Ok(r) => crate::sched::check(&out.bytes, &params, n, &r)
            .map_err(|e| format!("{e} ({n} AICPUs, {cfg:?}, seed {seed})\n{src}")),
        // Runtime errors of the program are the interpreter's tests.
        Err(e) if e.contains("parameter") || e.contains("instruction") => Ok(()),
        Err(e) => Err(format!("{e} ({n} AICPUs, {cfg:?}, seed {seed})\n{src}")),
    }
}

/// `device`: the AICPU library's C ABI on raw bytes. The first six bytes choose the launch —
/// AICPU count (0: the program's), window (0: the program's), cube and vector cores, window
/// mode, match mode — and the rest is a PTOW file (its length and checksum set to match).
/// `ptovm_work_bound` and `ptovm_layout` return 0 or a documented error code with a message;
/// when the program verifies, takes the parameters made from its slot kinds, and its work and
/// memory are within the fuzzing budget, the launch runs on one thread (`device::run_single`)
/// to its end and passes the reference check, or stops with a runtime error of the program
/// (`PTOVM_E_RUN`, `PTOVM_E_WINDOW`) — never with a broken state, a lost task or a task run
/// twice — and the library never reports a panic.
pub fn device(data: &[u8]) -> Result<(), String> {
    use ptovm_device::*;
    let (head, rest) = data.split_at(data.len().min(6));
    let b = |i: usize| head.get(i).copied().unwrap_or(0) as u32;
    let mut code = rest.to_vec();
    ptovm_vm::format::seal(&mut code);
    let launch = PtovmLaunch {
        aicpus: b(0) % 9,
        window: b(1) % 40,
        cube_cores: b(2) % 13,
        vector_cores: b(3) % 13,
        window_mode: b(4) as i32 % 4 - 1,
        exact_deps: b(5) & 1,
        ..Default::default()
    };
    let codes = [
        PTOVM_E_ARGUMENT,
        PTOVM_E_VERIFY,
        PTOVM_E_PARAMS,
        PTOVM_E_MEMORY,
        PTOVM_E_RUN,
    ];
    let result = match crate::device::layout(&code, &launch) {
        Err((rc, msg)) if !codes.contains(&rc) || msg.is_empty() => {
            Err(format!("layout: code {rc}, message {msg:?}"))
        }
        Err(_) => Ok(()),
        Ok(_) => device_launch(&code, launch),
    };
    if ptovm_panicked() != 0 {
        return Err("the library reports a panic".into());
    }
    result
}

/// The launch part of [`device`]: the work bound, then the run within the budget.
fn device_launch(code: &[u8], launch: ptovm_device::PtovmLaunch) -> Result<(), String> {
    use ptovm_device::*;
    let Ok(v) = verify(code) else {
        return Err("ptovm_layout accepted bytecode the verifier rejects".into());
    };
    let owned: Vec<(ParamKind, u32, Vec<u32>)> = v
        .params()
        .iter()
        .map(|slot| {
            if slot.kind == ParamKind::Scalar as u8 {
                (ParamKind::Scalar, 3, Vec::new())
            } else {
                (ParamKind::Array, 0, vec![0, 1, 2, 2, 3, 4, 4, 4])
            }
        })
        .collect();
    let work = match crate::device::work_bound(code, &owned) {
        Ok(w) => w,
        // The parameters were refused (or the launch-time selector failed): a code, a message.
        Err((PTOVM_E_PARAMS | PTOVM_E_RUN, msg)) if !msg.is_empty() => return Ok(()),
        Err((rc, msg)) => return Err(format!("work bound: code {rc}, message {msg:?}")),
    };
    if work.iterations > MAX_ITERATIONS || work.tasks > 2_000 {
        return Ok(());
    }
    match crate::device::run_single(code, &owned, launch, 64 << 20, 1_000_000) {
        Ok(None) => Ok(()),
        Ok(Some((ran, n))) => {
            if ran.len() as u64 > work.tasks {
                return Err(format!("{} tasks ran, above the bound {work:?}", ran.len()));
            }
            if launch.exact_deps == 0 {
                return crate::check_run(code, &owned, n, &ran);
            }
            // Exact matching misses the edges between overlapping regions that differ (as
            // pto-isa's map does): only "every task once" holds.
            let want = crate::task_count(code, &owned).unwrap_or(0);
            let once = ran.iter().filter(|r| r.1 != 0).count() as u64;
            if ran.len() as u64 != want || once != want {
                return Err(format!("{once} of {want} tasks ran (exact deps)"));
            }
            Ok(())
        }
        // The program's own runtime errors, reported with a message.
        Err(f) if [PTOVM_E_RUN, PTOVM_E_WINDOW].contains(&f.code) && !f.message.is_empty() => {
            Ok(())
        }
        // Another AICPU's failure stops the others.
        Err(f) if f.code == PTOVM_E_FAILED => Ok(()),
        Err(f) => Err(format!("{f:?}")),
    }
}
