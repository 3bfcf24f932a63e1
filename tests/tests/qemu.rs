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

fn harness() -> Option<PathBuf> {
    let h = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/aarch64-unknown-none/release/ptovm_harness");
    let qemu = Command::new("qemu-aarch64")
        .arg("--version")
        .output()
        .is_ok();
    if h.exists() && qemu {
        return Some(h);
    }
    let why = if qemu {
        format!("{} is not built (scripts/harness.sh)", h.display())
    } else {
        "qemu-aarch64 is not installed".to_string()
    };
    if std::env::var("PTOVM_QEMU").as_deref() == Ok("required") {
        panic!("PTOVM_QEMU=required but {why}");
    }
    eprintln!("skipping the qemu cross-check: {why}");
    None
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
