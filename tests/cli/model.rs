//! `ptovm run --model`: simulated time on the CLI — the summary, JSON, trace and HTML report
//! the same bytes on every run, and every kind of bad machine file, cost table and option
//! refused with a located error, exit code 2 and no file left behind.

use super::{examples, fails, ptovm, stderr};

#[test]
fn model_outputs_are_the_same_bytes_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("costs.toml"),
        "[kernels]\nmatmul_q = 2500\nrmsnorm = \"1.2 us\"\nqk_matmul = \"3000 cycles\"\n",
    )
    .unwrap();
    std::fs::write(d.join("m.toml"), "cube_cores = 12\n[aicpu]\ntask_ns = 90\n").unwrap();
    let run = |tag: &str, json: bool| {
        let report = format!("r{tag}.html");
        let trace = format!("t{tag}.json");
        let mut args = vec![
            "run",
            "--machine",
            "m.toml",
            "--costs",
            "costs.toml",
            "--param",
            "N=16",
            "--report",
            &report,
            "--trace",
            &trace,
            "--check",
        ];
        if json {
            args.push("--json");
        }
        let o = ptovm(&args, d);
        assert!(o.status.success(), "{}", stderr(&o));
        (
            o.stdout,
            std::fs::read(d.join(&report)).unwrap(),
            std::fs::read(d.join(&trace)).unwrap(),
        )
    };
    let a = run("a", false);
    assert_eq!(a, run("b", false));
    let text = String::from_utf8(a.0).unwrap();
    assert!(text.contains("simulated time"), "{text}");
    assert!(text.contains("12 cube + 48 vector cores"), "{text}");
    assert!(text.contains("checked against the reference: ok"), "{text}");
    let html = String::from_utf8(a.1).unwrap();
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.contains("<svg"),
        "{html}"
    );
    // Self-contained: no script, nothing fetched.
    assert!(!html.contains("<script") && !html.contains("src=") && !html.contains("href="));
    let trace: serde_json::Value = serde_json::from_slice(&a.2).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["cat"] == "round"));
    assert!(events.iter().any(|e| e["cat"] == "run"));
    let (json, _, _) = run("c", true);
    assert_eq!(json, run("d", true).0);
    let j: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(j["mode"], "simulated_time");
    assert_eq!(j["machine"]["cube_cores"], 12);
    assert_eq!(j["machine"]["aicpu"]["task_ns"], 90);
    assert!(j["makespan_ns"].as_u64().unwrap() >= j["lower_bound_ns"].as_u64().unwrap());
    assert_eq!(j["cores"].as_array().unwrap().len(), 60);
    assert_eq!(j["checked"], true);
}

#[test]
fn every_example_models_with_no_other_flag() {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(examples()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "pto") {
            let o = ptovm(&["run", "--model", path.to_str().unwrap()], dir.path());
            assert!(o.status.success(), "{}: {}", path.display(), stderr(&o));
        }
    }
}

#[test]
fn bad_machine_files_cost_tables_and_options() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let w = |name: &str, text: &str| std::fs::write(d.join(name), text).unwrap();
    w("unknown.toml", "aicpus = 6\nvector = 3\n");
    w("negative.toml", "handshake_ns = -1\n");
    w("no_cube.toml", "cube_cores = 0\n");
    w("clock.toml", "core_clock_mhz = 0\n");
    w("not_toml.toml", "aicpus = [\n");
    w("kernel.toml", "[kernels]\nnope = 100\n");
    w("neg_cost.toml", "[kernels]\nmatmul_q = -5\n");
    w("unit.toml", "[kernels]\nrmsnorm = \"3 weeks\"\n");
    w("shape.toml", "[kernels]\nrmsnorm = [1]\n");
    w("few.toml", "aicpus = 2\n");
    let report = ["--report", "out.html"];
    for (args, expected) in [
        (
            vec!["--machine", "unknown.toml"],
            "unknown.toml:2:1: unknown field `vector`",
        ),
        (vec!["--machine", "negative.toml"], "negative.toml:1:"),
        (
            vec!["--machine", "no_cube.toml"],
            "kernel `matmul_q` runs on cube cores and the machine has none",
        ),
        (
            vec!["--machine", "clock.toml"],
            "core_clock_mhz must be at least 1",
        ),
        (vec!["--machine", "not_toml.toml"], "not_toml.toml:"),
        (
            vec!["--costs", "kernel.toml"],
            "kernel.toml:2:1: `nope` is not a kernel of the program",
        ),
        (
            vec!["--costs", "neg_cost.toml"],
            "neg_cost.toml:2:12: a duration cannot be negative",
        ),
        (
            vec!["--costs", "unit.toml"],
            "the unit must be ns, us, ms or cycles",
        ),
        (
            vec!["--costs", "shape.toml"],
            "a duration is a number of ns or a string with a unit",
        ),
        (
            vec!["--machine", "few.toml", "--aicpus", "4"],
            "the schedule uses 4 AICPUs and the machine has 2",
        ),
        (
            vec!["--model", "--data", "1"],
            "cannot be combined with --model",
        ),
    ] {
        let mut all = vec!["run"];
        all.extend(args);
        all.extend(report);
        fails(d, &all, 2, expected);
    }
    fails(
        d,
        &["run", "--machine", "absent.toml"],
        3,
        "cannot read absent.toml",
    );
}

#[test]
fn sweep_models_every_combination_and_writes_csv() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "sweep",
        "--param",
        "N=8",
        "--vary",
        "window=16,1024",
        "--vary",
        "dispatch=affinity(t),hash(t),round_robin",
        "--vary",
        "stealing=off,on",
        "--csv",
        "s.csv",
    ];
    let o = ptovm(&args, d);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(table.starts_with("llama_layer: 12 points"), "{table}");
    // Knob columns in a fixed order whatever the order given.
    assert!(
        table.lines().nth(1).unwrap().starts_with("dispatch"),
        "{table}"
    );
    let csv = std::fs::read_to_string(d.join("s.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 13, "{csv}");
    assert!(
        rows[0].starts_with("dispatch,window,stealing,makespan_ns,"),
        "{csv}"
    );
    assert!(rows[1].starts_with("affinity(t),16,off,"), "{csv}");
    assert!(rows[12].starts_with("round_robin,1024,on,"), "{csv}");
    // Makespans are never below their lower bound; the same command gives the same bytes.
    for r in &rows[1..] {
        let f: Vec<&str> = r.split(',').collect();
        assert!(
            f[3].parse::<u64>().unwrap() >= f[4].parse::<u64>().unwrap(),
            "{r}"
        );
    }
    std::fs::remove_file(d.join("s.csv")).unwrap();
    let again = ptovm(&args, d);
    assert_eq!(again.stdout, o.stdout);
    assert_eq!(std::fs::read_to_string(d.join("s.csv")).unwrap(), csv);
    // A point of the sweep is `run --model` with those settings.
    let one = ptovm(
        &[
            "run", "--model", "--param", "N=8", "--window", "16", "--json",
        ],
        d,
    );
    let j: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    let own = rows
        .iter()
        .find(|r| r.starts_with("affinity(t),16,off,"))
        .unwrap();
    assert_eq!(
        own.split(',').nth(3).unwrap(),
        j["makespan_ns"].to_string(),
        "the LLaMA layer's own dispatch is affinity(t)"
    );
}

/// The skewed flash_decode case (spec/runtime.md §4.6): shared cores beat the partition, and
/// the sweep's point is `run --model --cores` with that setting.
#[test]
fn the_cores_knob_lifts_a_skewed_dispatch() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fd = super::examples().join("flash_decode.pto");
    let fd = fd.to_str().unwrap();
    let skew = [
        "--param",
        "kv_chunks=1,8,1,1",
        "--param",
        "kv_len=16,2048,16,16",
    ];
    let mut args = vec!["sweep", fd, "--vary", "cores=partition,shared", "--json"];
    args.extend(skew);
    let o = ptovm(&args, d);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let points = j["points"].as_array().unwrap();
    let makespan = |p: &serde_json::Value| p["makespan_ns"].as_u64().unwrap();
    assert_eq!(points.len(), 2, "{j}");
    let (partition, shared) = (makespan(&points[0]), makespan(&points[1]));
    assert!(
        shared * 2 < partition,
        "shared {shared} ns, partition {partition} ns"
    );
    for (alloc, expected) in [("partition", partition), ("shared", shared)] {
        let mut one = vec!["run", fd, "--model", "--json", "--cores", alloc];
        one.extend(skew);
        let o = ptovm(&one, d);
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["makespan_ns"].as_u64(), Some(expected), "{alloc}");
    }
}

#[test]
fn bad_sweeps_are_refused_with_no_csv() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bytecode = super::asm_example(d, "attention.pto");
    let b = bytecode.to_str().unwrap();
    let csv = ["--csv", "out.csv", "--param", "N=4"];
    for (args, code, expected) in [
        (
            vec!["--vary", "frob=1,2"],
            2,
            "unknown knob `frob` (the knobs: dispatch, aicpus",
        ),
        (
            vec!["--vary", "aicpus=0"],
            2,
            "--vary aicpus=0: expected an integer in 1..=64",
        ),
        (vec!["--vary", "stealing=maybe"], 2, "expected on or off"),
        (
            vec!["--vary", "cores=spread"],
            2,
            "--vary cores=spread: expected shared or partition",
        ),
        (vec!["--vary", "start=soon"], 2, "--vary start=soon:"),
        (vec!["--vary", "window=1,,2"], 2, "an empty value"),
        (
            vec!["--vary", "window=1", "--vary", "window=2"],
            2,
            "the knob is varied twice",
        ),
        (vec!["--vary", "window"], 2, "expected KNOB=VALUE,VALUE,..."),
        (vec![], 2, "nothing to sweep"),
        (
            vec!["--vary", "aicpus=7"],
            2,
            "the schedule uses 7 AICPUs and the machine has 6 (at aicpus=7)",
        ),
        (
            vec!["--vary", "dispatch=frob(t)"],
            5,
            "examples/llama_layer.pto:",
        ),
        (
            vec!["--vary", "dispatch=affinity(nope)"],
            8,
            "missing runtime parameter `nope`",
        ),
        (
            vec![b, "--vary", "dispatch=round_robin"],
            2,
            "--vary dispatch needs `.pto` text",
        ),
    ] {
        let mut all = vec!["sweep"];
        all.extend(args);
        all.extend(csv);
        fails(d, &all, code, expected);
    }
    let many = [
        "--vary",
        "window=1,2,3,4,5,6,7,8,9",
        "--vary",
        "aicpus=1,2,3,4,5,6",
        "--vary",
        "batch_deps=1,2,3,4,5,6,7,8,9,10",
        "--vary",
        "pipeline_depth=0,1,2,3,4,5,6,7,8",
    ];
    let mut all = vec!["sweep"];
    all.extend(many);
    all.extend(csv);
    fails(d, &all, 2, "more than 4096 points");
}

#[test]
fn asm_dispatch_overrides_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = examples().join("llama_layer.pto");
    let o = ptovm(
        &[
            "asm",
            "-q",
            src.to_str().unwrap(),
            "--dispatch",
            "hash(t)",
            "-o",
            "h.ptow",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j = ptovm(&["inspect", "h.ptow", "--json"], d);
    let j: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(j["config"]["dispatch"], "hash(v0)", "{j}");
    fails(
        d,
        &[
            "asm",
            src.to_str().unwrap(),
            "--dispatch",
            "frob(t)",
            "-o",
            "x.ptow",
        ],
        5,
        "unknown dispatch policy `frob`",
    );
    fails(
        d,
        &[
            "asm",
            src.to_str().unwrap(),
            "--dispatch",
            "round_robin } frob",
            "-o",
            "x.ptow",
        ],
        5,
        "is not one dispatch policy",
    );
}
