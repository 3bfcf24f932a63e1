//! The AICPU library on aarch64: `device/harness/harness.c`, linked with the
//! `aarch64-unknown-none` static library by the aarch64 cross gcc (`scripts/harness.sh`), runs
//! under `qemu-aarch64` — one thread per AICPU stepping its instance, one per AICore polling its
//! handshake slot — and prints the task log, which is checked task by task against the
//! reference expander, for every bundled example and several AICPU counts, each task's
//! descriptor (`ptovm_core_descriptor`) against one computed from the reference.
//!
//! Without the cross tools the test says so and passes, unless `PTOVM_QEMU=required` (set by
//! `.ci/run`, which installs them), when their absence fails it.

use std::path::PathBuf;
use std::process::Command;

use ptovm_tests::{check_run, desc, examples, Params, Ran};
use ptovm_vm::{ParamKind, Pool};

/// Whether qemu-aarch64 and the `built` files (made by `script`) are here; without them the
/// test says so and passes, unless `PTOVM_QEMU=required`.
fn available(built: &[&PathBuf], script: &str) -> bool {
    let qemu = Command::new("qemu-aarch64")
        .arg("--version")
        .output()
        .is_ok();
    let missing = built.iter().find(|p| !p.exists());
    let why = match (qemu, missing) {
        (true, None) => return true,
        (false, _) => "qemu-aarch64 is not installed".to_string(),
        (true, Some(p)) => format!("{} is not built ({script})", p.display()),
    };
    if std::env::var("PTOVM_QEMU").as_deref() == Ok("required") {
        panic!("PTOVM_QEMU=required but {why}");
    }
    eprintln!("skipping a qemu cross-check: {why}");
    false
}

fn harness() -> Option<PathBuf> {
    let h = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/aarch64-unknown-none/release/ptovm_harness");
    available(&[&h], "scripts/harness.sh").then_some(h)
}

/// Runs the harness; gives the log as a run, or the harness's error output. Checks each task's
/// descriptor against the reference's.
fn run(h: &PathBuf, code: &[u8], params: &Params, n: u32, window: u32) -> Result<Ran, String> {
    let want = desc::expected(code, params);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.ptow");
    std::fs::write(&file, code).unwrap();
    let args: Vec<String> = params
        .iter()
        .map(|(k, v, a)| match k {
            ParamKind::Scalar => format!("s:{v}"),
            ParamKind::Array => format!(
                "a:{}",
                a.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
        })
        .collect();
    let out = Command::new("qemu-aarch64")
        .arg(h)
        .arg(&file)
        .args([n, window, 2 * n, 3 * n].map(|x| x.to_string()))
        .args(&args)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    // The harness asks for the work bound first (`ptovm_work_bound` on aarch64).
    let err = String::from_utf8_lossy(&out.stderr);
    let bound: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("harness: work bound: "))
        .and_then(|l| l.split(' ').nth(3))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("no work bound in {err:?}"))?;
    let mut ran: Ran = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // task ID aicpu A pool P core C start S end E desc k=… p=… r=…
        let w: Vec<&str> = line.split(' ').collect();
        if w.len() != 16 || w[12] != "desc" {
            return Err(format!("a log line without its descriptor: {line}"));
        }
        let num = |i: usize| w[i].parse::<u64>().unwrap();
        let id = num(1) as usize;
        if ran.len() <= id {
            ran.resize(id + 1, (0, 0, Pool::Vector, u32::MAX));
        }
        if ran[id].1 != 0 {
            return Err(format!("task {id} ran twice"));
        }
        let pool = if num(5) == 0 {
            Pool::Cube
        } else {
            Pool::Vector
        };
        ran[id] = (num(9), num(11), pool, num(3) as u32);
        let got = w[13..].join(" ");
        match want.get(id) {
            Some(d) if desc::text(d) == got => {}
            Some(d) => {
                return Err(format!(
                    "task {id}'s descriptor is\n  {got}\nnot\n  {}",
                    desc::text(d)
                ))
            }
            None => return Err(format!("task {id} is not in the reference")),
        }
    }
    if ran.len() as u64 > bound {
        return Err(format!(
            "{} tasks ran, above the work bound {bound}",
            ran.len()
        ));
    }
    Ok(ran)
}

#[test]
fn every_example_runs_on_aarch64_under_qemu() {
    let Some(h) = harness() else { return };
    for (name, code, params) in examples() {
        // The programs' own windows, and a window of 2 slots but for control.pto, whose
        // schedule aborts on a full window (the next test).
        let small = if name == "control.pto" { 0 } else { 2 };
        for (n, window) in [(1, 0), (2, small), (6, 0)] {
            let ran = run(&h, &code, &params, n, window)
                .unwrap_or_else(|e| panic!("{name} on {n} AICPUs: {e}"));
            check_run(&code, &params, n, &ran)
                .unwrap_or_else(|e| panic!("{name} on {n} AICPUs: {e}"));
        }
    }
}

#[test]
fn a_failure_on_aarch64_is_reported() {
    let Some(h) = harness() else { return };
    // control.pto's schedule aborts on a full window; with 2 slots it overflows.
    let (name, code, params) = examples()
        .into_iter()
        .find(|e| e.0 == "control.pto")
        .unwrap();
    let e = run(&h, &code, &params, 3, 2).unwrap_err();
    assert!(e.contains("window (2 slots) is full"), "{name}: {e}");
}

#[test]
fn a_larger_llama_layer_on_aarch64() {
    let Some(h) = harness() else { return };
    // N = 64: 13,312 tasks, 6 AICPUs with their windows of 1024, 12 cube + 18 vector cores.
    let (code, params) = ptovm_tests::example("llama_layer.pto", &[("N", 64, vec![])]);
    let ran = run(&h, &code, &params, 6, 1024).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ran.len(), 3 * 64 * 64 + 16 * 64);
    check_run(&code, &params, 6, &ran).unwrap_or_else(|e| panic!("{e}"));
}

/// The AICPU shared object and its dlopen harness (`scripts/aicpu-so.sh`), with the same
/// skip-unless-required rule as `harness`.
fn aicpu_so() -> Option<(PathBuf, PathBuf)> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/aarch64-unknown-linux-gnu/aicpu");
    let (h, so) = (
        dir.join("ptovm_aicpu_harness"),
        dir.join("libptovm_aicpu.so"),
    );
    available(&[&h, &so], "scripts/aicpu-so.sh").then_some((h, so))
}

/// A tile of an MLP: `E = A·B + D`, 8 row tiles of 8 rows, `first[t]` the first row of tile t.
const MLP: &str = "@param first = [0, 8, 16, 24, 32, 40, 48, 56]
@tensor A: f32[64, 32]
@tensor B: f32[32, 16]
@tensor C: f32[64, 16]
@tensor D: f32[64, 16]
@tensor E: f32[64, 16]
@kernel matmul(t): cube(in x, in w, out y)
@kernel add(t): vector(in x, in y, out z)
@workload mlp(%tiles: dense[8]) {
  parallel_for t in %tiles {
    task @matmul(t) resources(A[first[t] : first[t] + 8], B, C[first[t] : first[t] + 8])
    task @add(t) resources(C[first[t] : first[t] + 8], D[first[t] : first[t] + 8], E[first[t] : first[t] + 8])
  }
}
@schedule s for mlp { dispatch = round_robin(3) }";

/// The harness's inputs: element `i` of tensor `t` (an exact binary fraction).
fn fill(t: usize, i: usize) -> f32 {
    ((i * 7 + t * 13) % 23) as f32 * 0.125 - 1.375
}

/// Runs the harness: `Ok(stdout, every tensor's bits)` or `Err(stderr)`.
fn run_so(
    (h, so): &(PathBuf, PathBuf),
    code: &[u8],
    n: u32,
    window: u32,
    sizes: &[usize],
    first: &[u32],
) -> Result<(String, Vec<u32>), String> {
    let dir = tempfile::tempdir().unwrap();
    let (file, out) = (dir.path().join("mlp.ptow"), dir.path().join("out.bin"));
    std::fs::write(&file, code).unwrap();
    let join = |v: &[String]| v.join(",");
    let o = Command::new("qemu-aarch64")
        .args(["-L", "/usr/aarch64-linux-gnu"])
        .arg(h)
        .arg(so)
        .arg(&file)
        .arg(&out)
        .args([n, window, 2 * n, 2 * n].map(|x| x.to_string()))
        .arg("matmul,add")
        .arg(join(
            &sizes.iter().map(usize::to_string).collect::<Vec<_>>(),
        ))
        .arg(format!(
            "a:{}",
            join(&first.iter().map(u32::to_string).collect::<Vec<_>>())
        ))
        .output()
        .unwrap();
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    let bytes = std::fs::read(&out).map_err(|e| e.to_string())?;
    let bits = bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    Ok((String::from_utf8_lossy(&o.stdout).into_owned(), bits))
}

/// `libptovm_aicpu.so`, loaded with `dlopen` by a C launcher on aarch64 (under qemu): its
/// entry points lay out the launch and run every AICPU; the launcher's AICores run C kernels
/// (matmul, element-wise add) on the regions their descriptors give, in f32 memory bound at
/// launch. The outputs are bit for bit those of the host's kernel library run in program order
/// on the same inputs — on 1, 2 and 3 AICPUs, small and large windows. A binding the
/// declarations refuse, and a runtime error on one AICPU, fail the launch with the code and
/// message, and every AICPU stops (the harness returns).
#[test]
fn the_aicpu_shared_object_runs_real_kernels_under_qemu() {
    use ptovm_host_sim::compute::{kernels, run_in_order, Memory};
    let Some(so) = aicpu_so() else { return };
    let code = ptovm_assembler::assemble("mlp.pto", MLP, &ptovm_assembler::Options::default())
        .unwrap()
        .bytes;
    let first: Vec<u32> = (0..8).map(|t| 8 * t).collect();
    // The host's answer.
    let v = ptovm_vm::verify(&code).unwrap();
    let vals = [ptovm_vm::Value::Array(&first)];
    let p = ptovm_vm::RuntimeParams::new(&v, &vals).unwrap();
    let memory = Memory::new(&v, &p).unwrap();
    for (t, tensor) in memory.tensors().iter().enumerate() {
        for i in 0..tensor.len() {
            tensor.set(i, fill(t, i));
        }
    }
    assert_eq!(
        run_in_order(v, p, &kernels::library(), &memory).unwrap(),
        16
    );
    let want: Vec<u32> = memory
        .tensors()
        .iter()
        .flat_map(|t| (0..t.len()).map(|i| t.bits(i) as u32).collect::<Vec<_>>())
        .collect();
    let sizes: Vec<usize> = memory.tensors().iter().map(|t| t.len()).collect();
    // E is not its inputs: the kernels ran.
    assert_ne!(memory.tensor("E").unwrap().get(0), fill(4, 0));
    for (n, window) in [(1, 16), (2, 1), (2, 16), (3, 4)] {
        let (stdout, got) = run_so(&so, &code, n, window, &sizes, &first)
            .unwrap_or_else(|e| panic!("{n} AICPUs, window {window}: {e}"));
        assert_eq!(stdout.trim(), "ok: 16 tasks");
        assert!(
            got == want,
            "{n} AICPUs, window {window}: the outputs differ from the host's"
        );
    }
    // Tensor D bound to 1,000 elements, not 1,024: refused, with the tensor named.
    let mut small = sizes.clone();
    small[3] = 1000;
    let e = run_so(&so, &code, 2, 16, &small, &first).unwrap_err();
    assert!(e.contains("launch failed: -9"), "{e}");
    assert!(
        e.contains("tensor 3 needs 4096 bytes from its base but is bound to 4000"),
        "{e}"
    );
    // Tile 5 starts at row 60: its region [60, 68) is outside A on the AICPU that owns it; the
    // others stop instead of waiting for its tasks.
    let mut bad = first.clone();
    bad[5] = 60;
    for n in [1, 3] {
        let e = run_so(&so, &code, n, 16, &sizes, &bad).unwrap_err();
        assert!(e.contains("launch failed: -5"), "{n} AICPUs: {e}");
        assert!(e.contains("outside its extent 64"), "{n} AICPUs: {e}");
    }
    // B declared 16 x 16: the C matmul finds x (8 x 32) and w (16 x 16) do not fit and reports
    // it (`ptovm_core_fail`); the launch fails with the task and kernel named.
    let wrong = MLP.replace("@tensor B: f32[32, 16]", "@tensor B: f32[16, 16]");
    let wrong =
        ptovm_assembler::assemble("wrong.pto", &wrong, &ptovm_assembler::Options::default())
            .unwrap()
            .bytes;
    let mut sizes_wrong = sizes.clone();
    sizes_wrong[1] = 256;
    for n in [1, 2] {
        let e = run_so(&so, &wrong, n, 16, &sizes_wrong, &first).unwrap_err();
        assert!(e.contains("launch failed: -10: task "), "{n} AICPUs: {e}");
        assert!(
            e.contains("(kernel matmul) failed on core"),
            "{n} AICPUs: {e}"
        );
        assert!(e.contains("kernel code 2"), "{n} AICPUs: {e}");
    }
}
