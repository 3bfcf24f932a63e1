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
