//! CLI tests: spawn the `ptovm` binary on success paths and on every kind of bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod hostile;
mod model;

fn ptovm(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ptovm"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("spawn ptovm")
}

/// Runtime parameters `examples/moe.pto` accepts: two token tiles, each routed to one expert.
const MOE_PARAMS: [&str; 6] = [
    "--param",
    "T=2",
    "--param",
    "expert_ptr=0,1,1,1,1,1,1,1,2",
    "--param",
    "expert_tokens=1,0",
];

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Assembles an example into `dir`, returning the output path.
fn asm_example(dir: &Path, name: &str) -> PathBuf {
    let src = examples().join(name);
    let out = dir.join(name.replace(".pto", ".ptow"));
    let o = ptovm(
        &[
            "asm",
            "-q",
            src.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

#[test]
fn asm_verify_disasm_roundtrip_for_every_example() {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(examples()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if !name.ends_with(".pto") {
            continue;
        }
        let ptow = asm_example(dir.path(), &name);
        let o = ptovm(&["verify", ptow.to_str().unwrap()], dir.path());
        assert!(o.status.success());
        assert_eq!(String::from_utf8_lossy(&o.stdout), "ok\n");
        // disasm to a file with an arbitrary name, assemble it back: identical bytes.
        let listing = dir.path().join("listing.weird-extension");
        let o = ptovm(
            &[
                "disasm",
                ptow.to_str().unwrap(),
                "-o",
                listing.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let again = dir.path().join("again.bin");
        let o = ptovm(
            &[
                "asm",
                listing.to_str().unwrap(),
                "-o",
                again.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            std::fs::read(&ptow).unwrap(),
            std::fs::read(&again).unwrap(),
            "{name}"
        );
        assert!(
            stderr(&o).is_empty(),
            "a listing assembles without warnings"
        );
    }
}

/// `run`, `expand` and `inspect` on `.pto` text print the assembler's warnings — after their
/// output, once the command succeeded; a failing command's first stderr line stays its error.
#[test]
fn commands_on_text_print_its_warnings_after_success() {
    let dir = tempfile::tempdir().unwrap();
    let src = examples().join("attention.pto");
    let src = src.to_str().unwrap();
    for args in [
        vec!["run", src],
        vec!["expand", src, "--summary"],
        vec!["inspect", src],
    ] {
        let o = ptovm(&args, dir.path());
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("warning: `streams = 4` without `stream_by` orders nothing"),
            "{args:?}: {err}"
        );
    }
    let o = ptovm(&["run", src, "--param", "batch=x"], dir.path());
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.starts_with("error: "), "{err}");
    assert!(!err.contains("warning"), "{err}");
}

/// DESIGN.md §3's module as PTO-WSP writes it: no kernel or tensor declarations.
const PLAIN_ATTENTION: &str = "@workload attention(%batch: dense_dyn(batch), %heads: dense[8]) {
  parallel_for b in dense_dyn(batch) {
    parallel_for h in dense[8] {
      task @attn_kernel(b, h) resources(Q, K, V, O)
    }
  }
}
@schedule attn_sched for attention {
  dispatch = round_robin(4)
  streams = 4
  timing = immediate
}
";

#[test]
fn asm_warns_about_undeclared_kernels_and_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("plain.pto");
    std::fs::write(&src, PLAIN_ATTENTION).unwrap();
    let o = ptovm(&["asm", src.to_str().unwrap(), "-o", "a.ptow"], dir.path());
    assert!(o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("plain.pto:4:13: warning: kernel `attn_kernel` is not declared"),
        "{err}"
    );
    assert!(
        err.contains("warning: resource `Q` has no `@tensor` declaration"),
        "{err}"
    );
    let o = ptovm(
        &["asm", "-q", src.to_str().unwrap(), "-o", "b.ptow"],
        dir.path(),
    );
    assert!(stderr(&o).is_empty());
}

#[test]
fn asm_default_output_and_stdout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(examples().join("moe.pto"), dir.path().join("moe.pto")).unwrap();
    let o = ptovm(&["asm", "moe.pto"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let file = std::fs::read(dir.path().join("moe.ptow")).unwrap();
    let o = ptovm(&["asm", "moe.pto", "-o", "-"], dir.path());
    assert!(o.status.success());
    assert_eq!(o.stdout, file);
    assert_eq!(&file[..4], b"WOTP", "magic 0x50544F57 little-endian");
}

#[test]
fn asm_overrides_change_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let src = examples().join("llama_layer.pto");
    let o = ptovm(
        &[
            "asm",
            "-q",
            src.to_str().unwrap(),
            "-o",
            "l.ptow",
            "--aicpus",
            "3",
            "--window",
            "64",
            "--window-mode",
            "benchmark",
            "--streams",
            "7",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = ptovm(&["inspect", "--json", "l.ptow"], dir.path());
    assert!(o.status.success());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["config"]["aicpus"], 3);
    assert_eq!(j["config"]["window"], 64);
    assert_eq!(j["config"]["window_mode"], "benchmark");
    assert_eq!(j["config"]["streams"], 7);
    assert_eq!(j["config"]["dispatch"], "affinity(v0)");
}

#[test]
fn inspect_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let p = asm_example(dir.path(), "control.pto");
    let o = ptovm(&["inspect", p.to_str().unwrap()], dir.path());
    assert!(o.status.success());
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("workload train_step [cpu]   schedule train_sched [cpu]"),
        "{t}"
    );
    assert!(t.contains("    0  M (scalar) default 16\n"), "{t}");
    assert!(t.contains("threshold on M: [<= 8: static(v0)] [<= 64: affinity(v0)] [otherwise: hash(v0 * 131 + 7)]"), "{t}");
    assert!(t.contains("timing batched(16)"), "{t}");
    let o = ptovm(&["inspect", "--json", p.to_str().unwrap()], dir.path());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let len = std::fs::metadata(&p).unwrap().len();
    assert_eq!(j["total_bytes"], len);
    let sum: u64 = j["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["size"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, len, "sections cover the file");
    assert_eq!(j["kernels"].as_array().unwrap().len(), 5);
    assert_eq!(j["config"]["levels"].as_array().unwrap().len(), 3);
    assert_eq!(j["params"][0]["default"], 16);
    assert_eq!(j["workload_level"], "cpu");
    // inspect also takes module text, assembled in memory.
    let o = ptovm(
        &[
            "inspect",
            "--json",
            examples().join("control.pto").to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success());
    let j2: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j, j2);
}

/// Runs a command expected to fail: checks the exit code, that the message is the one line
/// `expected` names, and that no file appeared in the directory.
fn fails(dir: &Path, args: &[&str], code: i32, expected: &str) {
    let before = files(dir);
    let o = ptovm(args, dir);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    let first = err.lines().next().unwrap_or("");
    assert!(
        first.contains(expected),
        "{args:?}: expected {expected:?} in {first:?}"
    );
    assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    assert_eq!(files(dir), before, "{args:?}: no file left behind");
}

#[test]
fn bad_bytecode_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = std::fs::read(asm_example(d, "llama_layer.pto")).unwrap();
    let write = |name: &str, b: &[u8]| std::fs::write(d.join(name), b).unwrap();
    let fix = |mut b: Vec<u8>| {
        let sum = ptovm_vm::format::checksum(&b);
        b[28..32].copy_from_slice(&sum.to_le_bytes());
        b
    };
    write("empty.ptow", b"");
    write("trunc.ptow", &good[..good.len() - 8]);
    write("short.ptow", &good[..40]);
    let mut b = good.clone();
    b[0] = b'X';
    write("magic.ptow", &b);
    let mut b = good.clone();
    b[4] = 1;
    write("version.ptow", &fix(b));
    let mut b = good.clone();
    let n = b.len();
    b[n / 2] ^= 0x40;
    write("corrupt.ptow", &b);
    let mut b = good.clone();
    b[192] = 0x77; // first instruction's opcode
    write("opcode.ptow", &fix(b));
    for cmd in ["verify", "disasm", "inspect"] {
        fails(
            d,
            &[cmd, "missing.ptow"],
            3,
            "error: cannot read missing.ptow",
        );
        fails(
            d,
            &[cmd, "empty.ptow"],
            6,
            "file is 0 bytes, shorter than the 64-byte header",
        );
        fails(
            d,
            &[cmd, "short.ptow"],
            6,
            "shorter than the 64-byte header",
        );
        fails(d, &[cmd, "trunc.ptow"], 6, "(truncated or extended)");
        fails(d, &[cmd, "magic.ptow"], 6, "bad magic");
        fails(d, &[cmd, "version.ptow"], 6, "unsupported PTOW version 1");
        fails(d, &[cmd, "corrupt.ptow"], 6, "checksum mismatch");
        fails(
            d,
            &[cmd, "opcode.ptow"],
            7,
            "instruction 0 (byte offset 192): unknown opcode 0x77",
        );
    }
    for name in [
        "empty.ptow",
        "trunc.ptow",
        "magic.ptow",
        "version.ptow",
        "corrupt.ptow",
        "opcode.ptow",
    ] {
        let o = ptovm(&["verify", name], d);
        assert_eq!(stderr(&o).lines().count(), 1, "{name}: one-line error");
    }
    // Disassembling into a file that fails leaves nothing behind.
    fails(
        d,
        &["disasm", "corrupt.ptow", "-o", "out.txt"],
        6,
        "checksum mismatch",
    );
}

#[test]
fn bad_text_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("syntax.pto"),
        "@workload w() {\n  parallel_for i in dense[4] {\n    task @k(i) resources(A[i)\n  }\n}\n",
    )
    .unwrap();
    std::fs::write(d.join("empty.pto"), "").unwrap();
    std::fs::write(d.join("binary.pto"), [0xff, 0xfe, 0x00]).unwrap();
    std::fs::write(
        d.join("listing.txt"),
        ".ptow 8\n.workload w\n.code\n0 HALT\n",
    )
    .unwrap();
    fails(
        d,
        &["asm", "syntax.pto", "-o", "out.ptow"],
        5,
        "syntax.pto:3:29: error: expected `,` or `]`, found `)`",
    );
    fails(
        d,
        &["asm", "empty.pto", "-o", "out.ptow"],
        5,
        "empty.pto:1:1: error: the module has no `@workload`",
    );
    fails(
        d,
        &["asm", "binary.pto", "-o", "out.ptow"],
        5,
        "is not UTF-8 text",
    );
    fails(
        d,
        &["asm", "missing.pto", "-o", "out.ptow"],
        3,
        "cannot read missing.pto",
    );
    fails(
        d,
        &["asm", "listing.txt", "-o", "out.ptow"],
        5,
        "listing has no `.config` line",
    );
    // The caret line points at the offending token.
    let o = ptovm(&["asm", "syntax.pto", "-o", "out.ptow"], d);
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines[2], "3 |     task @k(i) resources(A[i)");
    assert_eq!(lines[3], "  |                             ^");
    // An existing output file survives a failed assembly untouched.
    std::fs::write(d.join("keep.ptow"), b"precious").unwrap();
    let o = ptovm(&["asm", "syntax.pto", "-o", "keep.ptow"], d);
    assert_eq!(o.status.code(), Some(5));
    assert_eq!(std::fs::read(d.join("keep.ptow")).unwrap(), b"precious");
}

#[test]
fn bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let src = examples().join("attention.pto");
    let s = src.to_str().unwrap();
    for args in [
        vec!["asm", s, "--aicpus", "0"],
        vec!["asm", s, "--aicpus", "65"],
        vec!["asm", s, "--window", "0"],
        vec!["frobnicate"],
        vec!["asm"],
    ] {
        let o = ptovm(&args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).starts_with("error:"), "{args:?}: {}", stderr(&o));
    }
    assert!(files(dir.path()).is_empty());
    let o = ptovm(
        &["asm", "-q", s, "--workload", "nope", "-o", "x.ptow"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(5));
    assert!(stderr(&o).contains("the module has no workload `nope`"));
}

#[test]
fn expand_lists_tasks_and_json_has_the_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let llama = examples().join("llama_layer.pto");
    let l = llama.to_str().unwrap();
    let o = ptovm(&["expand", l, "--param", "N=4", "--json"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["tasks_total"], 3 * 16 + 16 * 4);
    assert_eq!(j["tasks"].as_array().unwrap().len(), 3 * 16 + 16 * 4);
    let per: Vec<u64> = j["per_aicpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(per.len(), 6);
    assert_eq!(per.iter().sum::<u64>(), 112);
    assert_eq!(j["visits_per_aicpu"].as_array().unwrap().len(), 6);
    assert!(j["bytecode_bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        j["edges"].as_array().unwrap().len() as u64,
        j["edges_total"].as_u64().unwrap()
    );
    let t0 = &j["tasks"][0];
    assert_eq!(t0["kernel"], "rmsnorm");
    assert_eq!(t0["regions"][0]["tensor"], "X");
    assert_eq!(t0["regions"][0]["ranges"], serde_json::json!([[0, 1]]));
    // Text: one line per task with its owner and predecessors.
    let o = ptovm(
        &[
            "expand", l, "--param", "N=2", "--aicpus", "2", "--aicpu", "1", "--limit", "3",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.starts_with("llama_layer: 44 tasks (22 cube, 22 vector)"),
        "{t}"
    );
    assert_eq!(t.lines().filter(|l| l.starts_with('#')).count(), 3);
    assert!(
        t.lines()
            .filter(|l| l.starts_with('#'))
            .all(|l| l.contains("AICPU 1 ")),
        "{t}"
    );
    assert!(t.contains("... 19 more tasks"), "{t}");
    // Summary: totals only.
    let o = ptovm(
        &[
            "expand",
            l,
            "--param",
            "N=2",
            "--summary",
            "--format",
            "json",
            "--deps",
            "exact",
        ],
        d,
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["tasks"].as_array().unwrap().len(), 0);
    assert_eq!(j["deps"], "exact");
    // Bytecode input and array parameters.
    let moe = examples().join("moe.pto");
    let o = ptovm(&["asm", "-q", moe.to_str().unwrap(), "-o", "moe.ptow"], d);
    assert!(o.status.success());
    let o = ptovm(
        &[
            "expand",
            "moe.ptow",
            "--param",
            "T=2",
            "--param",
            "expert_ptr=[0,1,1,1,1,1,1,1,2]",
            "--param",
            "expert_tokens=1,0",
            "--json",
            "--summary",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["tasks_total"], 2 + 4 + 2);
}

/// PTO-WSP's flattened `ragged(outer, lengths)`: the outer count is checked against its array
/// before anything runs (exit 8), and within it the axis has `lengths[0] + … + lengths[outer-1]`
/// iterations.
#[test]
fn flattened_axes_count_and_reject_an_outer_past_the_array() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("tokens.pto"),
        "@workload w(%tokens: ragged(B, lens)) {\n  parallel_for t in %tokens { task @k(t) }\n}\n",
    )
    .unwrap();
    let o = ptovm(
        &[
            "expand",
            "tokens.pto",
            "--param",
            "B=2",
            "--param",
            "lens=3,4,5",
            "--json",
            "--summary",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["tasks_total"], 3 + 4);
    for cmd in ["expand", "run"] {
        fails(
            d,
            &[cmd, "tokens.pto", "--param", "B=4", "--param", "lens=3,4,5"],
            8,
            "a ragged axis has outer count 4, but its runtime array 1 has 3 entries (at most 3 allowed)",
        );
    }
}

#[test]
fn expand_rejects_bad_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let moe = examples().join("moe.pto");
    let m = moe.to_str().unwrap();
    let full = MOE_PARAMS;
    fn build<'a>(
        m: &'a str,
        full: &[&'a str],
        extra: &[&'a str],
        drop: Option<&str>,
    ) -> Vec<&'a str> {
        let mut v = vec!["expand", m];
        let mut i = 0;
        while i < full.len() {
            if drop.is_none_or(|p| !full[i + 1].starts_with(p)) {
                v.extend_from_slice(&full[i..i + 2]);
            }
            i += 2;
        }
        v.extend_from_slice(extra);
        v
    }
    let with = |extra: &[&'static str], drop: Option<&str>| build(m, &full, extra, drop);
    // A parameter not given takes its default (`@param T = 16`): 16 router and 16 combine
    // tasks around the 2 routed pairs' 4 expert tasks.
    let o = ptovm(&with(&["--summary"], Some("T=")), d);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.starts_with("moe: 36 tasks (4 cube, 32 vector)"),
        "{out}"
    );
    let bare = d.join("bare.pto");
    std::fs::write(
        &bare,
        "@tensor A: f16[T]\n@kernel k(t): vector(out a)\n@workload w(%t: dense_dyn(T)) { parallel_for t in %t { task @k(t) resources(A[t]) } }\n",
    )
    .unwrap();
    fails(
        d,
        &["expand", bare.to_str().unwrap()],
        8,
        "error: missing runtime parameter `T` (scalar): pass --param T=4, or give it a default in the module (`@param T = 4`)",
    );
    fails(d, &with(&["--param", "Q=1"], None), 8, "error: --param Q: the program has no runtime parameter `Q` (it has: T, D, F, expert_ptr, expert_tokens, token_experts)");
    fails(
        d,
        &with(&["--param", "T=3"], None),
        8,
        "error: --param T: given twice",
    );
    fails(
        d,
        &["expand", m, "--param", "T=x"],
        8,
        "error: --param T: \"x\" is not an unsigned 32-bit integer",
    );
    fails(
        d,
        &[
            "expand",
            m,
            "--param",
            "T=1",
            "--param",
            "expert_ptr=0,2,1",
            "--param",
            "expert_tokens=1",
        ],
        8,
        "decreases at index 2",
    );
    fails(
        d,
        &[
            "expand",
            m,
            "--param",
            "T=1",
            "--param",
            "expert_ptr=",
            "--param",
            "expert_tokens=1",
        ],
        8,
        "must have at least one entry",
    );
    fails(
        d,
        &[
            "expand",
            m,
            "--param",
            "T=1",
            "--param",
            "expert_ptr=0,5",
            "--param",
            "expert_tokens=1",
        ],
        8,
        "ends at 5 but its indices array",
    );
    fails(
        d,
        &with(&["--aicpu", "6"], None),
        2,
        "error: --aicpu 6 is not below the AICPU count 6",
    );
    fails(d, &with(&["--aicpus", "0"], None), 2, "error:");
    // A runtime error names the instruction.
    let f = examples().join("flash_decode.pto");
    fails(
        d,
        &[
            "expand",
            f.to_str().unwrap(),
            "--param",
            "B=2",
            "--param",
            "max_chunks=4",
            "--param",
            "kv_chunks=2",
        ],
        1,
        "error: instruction 2: index 1 is outside runtime array",
    );
}

#[test]
fn run_simulates_and_checks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The bundled LLaMA layer, smaller N, checked.
    let o = ptovm(
        &[
            "run", "--param", "N=8", "--check", "--json", "--aicpus", "3", "--window", "4",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in [
        "tasks_total",
        "per_aicpu",
        "cube_tasks",
        "vector_tasks",
        "cross_aicpu_edges",
        "window_stalls",
        "wall_ms",
        "tasks_per_ms",
        "checked",
        "dep_batches",
    ] {
        assert!(j.get(key).is_some(), "missing {key}");
    }
    assert_eq!(j["tasks_total"], 3 * 64 + 16 * 8);
    assert_eq!(j["checked"], true);
    assert_eq!(j["deps"], "overlap");
    assert_eq!(j["timing"]["policy"], "immediate");
    assert_eq!(j["timing"]["issue_batches"], 0);
    // pto-isa's exact matching: the LLaMA layer names each tensor's regions one way, so it
    // finds the same dependencies and passes the check.
    let o = ptovm(
        &[
            "run", "--param", "N=8", "--check", "--json", "--deps", "exact",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (e["deps"].as_str(), e["checked"].as_bool()),
        (Some("exact"), Some(true))
    );
    assert_eq!(j["per_aicpu"].as_array().unwrap().len(), 3);
    assert_eq!(
        j["cube_tasks"].as_u64().unwrap() + j["vector_tasks"].as_u64().unwrap(),
        3 * 64 + 16 * 8
    );
    // Human summary, a file argument.
    let moe = examples().join("moe.pto");
    let o = ptovm(
        &[
            "run",
            moe.to_str().unwrap(),
            "--param",
            "T=3",
            "--param",
            "expert_ptr=0,1,1,2,2,2,2,2,3",
            "--param",
            "expert_tokens=2,0,1",
            "--check",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.starts_with("moe: 12 tasks"), "{t}");
    assert!(t.contains("checked against the reference: ok"), "{t}");
}

/// `ptovm metg` sweeps kernel durations by halves from --longest-ns, stops below
/// --shortest-ns, and reports each run; the kernels' time never exceeds the driver threads'
/// (at most one kernel a thread at a time), so the efficiency is at most 1. Wall time itself is
/// not asserted.
#[test]
fn metg_sweeps_busy_waiting_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = examples().join("taskbench/no_comm.pto");
    let args = [
        "metg",
        file.to_str().unwrap(),
        "--param",
        "W=8",
        "--param",
        "T=8",
        "--longest-ns",
        "20000",
        "--shortest-ns",
        "5000",
        "--json",
    ];
    let o = ptovm(&args, d);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = j["runs"].as_array().unwrap();
    assert!((1..=3).contains(&runs.len()), "{runs:?}");
    for (k, r) in runs.iter().enumerate() {
        assert_eq!(r["kernel_ns"].as_u64(), Some(20_000 >> k));
        assert_eq!(r["tasks"], 64);
        let e = r["efficiency"].as_f64().unwrap();
        assert!(e > 0.0 && e <= 1.0, "{e}");
        let g = r["granularity_ns"].as_f64().unwrap();
        // granularity = kernel / efficiency.
        assert!((g * e - (20_000 >> k) as f64).abs() < 1.0, "{g} {e}");
    }
    assert_eq!(j["threads"], 2);
    assert!(["crossed", "at_most", "not_reached"].contains(&j["metg50"].as_str().unwrap()));
    // The table.
    let o = ptovm(&args[..args.len() - 1], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("METG(50 %)"), "{text}");
    // A range upside down, and a duration of 0, are usage errors.
    fails(
        d,
        &["metg", "--longest-ns", "100", "--shortest-ns", "1000"],
        2,
        "--shortest-ns 1000 is longer than --longest-ns 100",
    );
    fails(d, &["metg", "--longest-ns", "0"], 2, "error");
}

#[test]
fn bench_measures_the_three_figures() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The bundled LLaMA layer at N = 8: 320 tasks, fewer than its window of 1024, so the
    // dependency measurement keeps every task and finds every reference edge.
    let o = ptovm(&["bench", "--param", "N=8", "--runs", "3", "--json"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["runs"], 3);
    assert_eq!(j["window"], 1024);
    assert_eq!(
        j["descriptor_words"], 30,
        "the LLaMA layer's largest task, packed"
    );
    let src = std::fs::read_to_string(examples().join("llama_layer.pto")).unwrap();
    let bytes = ptovm_assembler::assemble("l", &src, &ptovm_assembler::Options::default())
        .unwrap()
        .bytes;
    let v = ptovm_vm::verify(&bytes).unwrap();
    // N = 8 (D and F keep their defaults).
    let vals = [
        ptovm_vm::Value::Scalar(8),
        ptovm_vm::Value::Scalar(4096),
        ptovm_vm::Value::Scalar(11008),
    ];
    let p = ptovm_vm::RuntimeParams::new(&v, &vals).unwrap();
    let tasks = ptovm_host_sim::reference_expand(&v, &p, 1, u64::MAX).unwrap();
    let edges = ptovm_host_sim::edges(&tasks, ptovm_host_sim::DepMode::Overlap).len();
    for (key, want_edges) in [
        ("generate", Some(0)),
        ("generate_deps", Some(edges)),
        ("run", None),
        ("run_descriptors", None),
    ] {
        let x = &j[key];
        assert_eq!(x["tasks"], 3 * 64 + 16 * 8, "{key}");
        if let Some(e) = want_edges {
            assert_eq!(x["edges"].as_u64(), Some(e as u64), "{key}");
        }
        let rates: Vec<f64> = x["tasks_per_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_f64().unwrap())
            .collect();
        assert_eq!(rates.len(), 3, "{key}");
        assert!(rates.iter().all(|r| *r > 0.0), "{key}: {rates:?}");
        let (f, m, s) = (
            x["fastest"].as_f64().unwrap(),
            x["median"].as_f64().unwrap(),
            x["slowest"].as_f64().unwrap(),
        );
        let mut sorted = rates.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!((s, m, f), (sorted[0], sorted[1], sorted[2]), "{key}");
    }
    // The summary: one line a measurement.
    let o = ptovm(&["bench", "--param", "N=4", "--runs", "1"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.starts_with("llama_layer: 112 tasks, 1 round "), "{t}");
    for what in ["generate ", "generate + dependencies", "run "] {
        assert!(
            t.lines().any(|l| l.trim_start().starts_with(what)),
            "{what}: {t}"
        );
    }
    assert!(files(d).is_empty(), "bench writes no file");
}

#[test]
fn run_writes_a_chrome_trace() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = ptovm(
        &[
            "run", "--param", "N=4", "--aicpus", "2", "--cube", "2", "--vector", "4", "--trace",
            "t.json", "--check",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("t.json")).unwrap()).unwrap();
    let ev = j["traceEvents"].as_array().unwrap();
    let tasks = 3 * 16 + 16 * 4;
    let runs: Vec<&serde_json::Value> = ev.iter().filter(|e| e["cat"] == "run").collect();
    let gens = ev.iter().filter(|e| e["cat"] == "generate").count();
    assert_eq!(runs.len(), tasks);
    assert_eq!(
        gens, tasks,
        "one generation span per task on its AICPU's track"
    );
    // Cube kernels on cube cores (tracks 0..2), vector kernels on vector cores (2..6).
    for r in runs {
        let core = r["tid"].as_u64().unwrap();
        let cube = r["name"].as_str().unwrap().contains("matmul")
            || r["name"] == "qk_matmul"
            || r["name"] == "pv_matmul";
        assert_eq!(core < 2, cube, "{r}");
    }
    let names = ev.iter().filter(|e| e["name"] == "thread_name").count();
    assert_eq!(names, 2 + 6, "a named track per AICPU and per core");
    // An instant per issue on the issuing AICPU's track.
    let issues: Vec<&serde_json::Value> = ev.iter().filter(|e| e["cat"] == "issue").collect();
    assert_eq!(issues.len(), tasks);
    assert!(issues
        .iter()
        .all(|e| e["ph"] == "i" && e["pid"] == 1 && e["tid"].as_u64().unwrap() < 2));
}

/// `run --latency` reports the dependency latency: in `--json`, hops within an AICPU and across
/// AICPUs with their distribution, and a line each in the summary; `--model` refuses it.
#[test]
fn run_measures_the_dependency_latency() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let chain = examples().join("taskbench/chain.pto");
    let chain = chain.to_str().unwrap();
    let o = ptovm(
        &[
            "run",
            chain,
            "--param",
            "T=500",
            "--aicpus",
            "1",
            "--latency",
            "--json",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (within, across) = (
        &j["latency"]["within_aicpu"],
        &j["latency"]["across_aicpus"],
    );
    assert_eq!(within["hops"], 499, "{j}");
    assert_eq!(across["hops"], 0, "{j}");
    for k in ["median_ns", "p90_ns", "p99_ns", "max_ns", "mean_ns"] {
        assert!(within[k].is_number(), "{k}: {j}");
    }
    assert!(within["median_ns"].as_u64() <= within["max_ns"].as_u64());
    // Without the flag there is none.
    let o = ptovm(&["run", chain, "--param", "T=5", "--json"], d);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["latency"].is_null(), "{j}");
    let o = ptovm(&["run", chain, "--param", "T=500", "--latency"], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("across AICPUs: median ") && text.contains("(499 hops)"),
        "{text}"
    );
    fails(
        d,
        &["run", chain, "--latency", "--model"],
        2,
        "--latency times the threaded run",
    );
}

/// A module's `timing` is applied by `ptovm run`, which reports what it did: `control.pto`
/// issues in batches of 16 (its counters in `--json`, a summary line, the batch of each issue
/// in the trace).
#[test]
fn run_applies_and_reports_the_timing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let example = examples().join("control.pto");
    let example = example.to_str().unwrap();
    let o = ptovm(
        &["run", example, "--check", "--json", "--trace", "t.json"],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = &j["timing"];
    assert_eq!(t["policy"], "batched(16)");
    let batches = t["issue_batches"].as_u64().unwrap();
    assert!(
        batches > 0 && t["short_batches"].as_u64().unwrap() <= batches,
        "{t}"
    );
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("t.json")).unwrap()).unwrap();
    let issued = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "issue")
        .map(|e| e["args"]["batch"].as_u64().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(issued.len() as u64, j["tasks_total"].as_u64().unwrap());
    assert!(
        issued.iter().all(|&b| (1..=batches).contains(&b)),
        "{issued:?}"
    );
    let o = ptovm(&["run", example], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("timing batched(16): "), "{out}");
}

/// Bytecode cut at every section boundary (and inside every section), as transferred (the
/// length and checksum then disagree) and resealed (length and checksum fixed, so the verifier
/// reaches the counts and the sections): `verify`, `disasm -o`, `inspect`, `run` and `expand`
/// each fail with a one-line error, exit code 1, nothing on stdout and no file left behind.
#[test]
fn bytecode_cut_at_every_section_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for example in ["llama_layer.pto", "moe.pto"] {
        let good = std::fs::read(asm_example(d, example)).unwrap();
        let layout = *ptovm_vm::verify(&good).unwrap().layout();
        let mut cuts: Vec<usize> = layout
            .ranges
            .iter()
            .flat_map(|&(off, len)| [off, off + len / 2, off + len])
            .filter(|&c| c < good.len())
            .collect();
        cuts.sort();
        cuts.dedup();
        for cut in cuts {
            let raw = good[..cut].to_vec();
            let mut sealed = raw.clone();
            ptovm_vm::format::seal(&mut sealed);
            for (kind, bytes) in [("raw", raw), ("sealed", sealed)] {
                let name = format!("cut-{kind}-{cut}.ptow");
                std::fs::write(d.join(&name), &bytes).unwrap();
                for args in [
                    vec!["verify", name.as_str()],
                    vec!["disasm", name.as_str(), "-o", "out.txt"],
                    vec!["inspect", name.as_str()],
                    vec!["run", name.as_str()],
                    vec!["expand", name.as_str()],
                ] {
                    let before = files(d);
                    let o = ptovm(&args, d);
                    let err = stderr(&o);
                    // A cut file is damaged (exit 6) whether or not its header was resealed.
                    assert_eq!(o.status.code(), Some(6), "{example} {args:?}: {err}");
                    assert_eq!(
                        err.lines().count(),
                        1,
                        "{example} {args:?}: one line: {err}"
                    );
                    assert!(err.starts_with("error: "), "{example} {args:?}: {err}");
                    assert!(o.stdout.is_empty(), "{example} {args:?}: nothing on stdout");
                    assert_eq!(files(d), before, "{example} {args:?}: no file left behind");
                }
                std::fs::remove_file(d.join(&name)).unwrap();
            }
        }
    }
}

#[test]
fn every_example_runs_with_no_flags() {
    // The README's promise: `ptovm run examples/NAME.pto` with no flags, each runtime
    // parameter taking the module's `@param` default; `--param` overrides a default.
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    let dirs = [examples(), examples().join("taskbench")];
    for e in dirs.iter().flat_map(|d| std::fs::read_dir(d).unwrap()) {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("pto") {
            continue;
        }
        n += 1;
        let path = p.to_str().unwrap();
        let o = ptovm(&["run", path], dir.path());
        assert!(o.status.success(), "{path}: {}", stderr(&o));
        let o = ptovm(&["run", path, "--check", "--aicpus", "3"], dir.path());
        assert!(o.status.success(), "{path} --check: {}", stderr(&o));
    }
    assert!(n >= 13, "found {n} examples");
    let llama = examples().join("llama_layer.pto");
    let o = ptovm(&["run", llama.to_str().unwrap()], dir.path());
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.starts_with("llama_layer: 200704 tasks"), "{out}");
    let o = ptovm(
        &["run", llama.to_str().unwrap(), "--param", "N=4"],
        dir.path(),
    );
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.starts_with("llama_layer: 112 tasks"), "{out}");
}

/// `run --data`: every computing example runs on data, matches its in-order run bit for bit and
/// its model within tolerance, and saves the tensors it writes as `.npy` files.
#[test]
fn run_data_computes_checks_and_saves_every_example() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: [(&str, &[&str], &[&str]); 4] = [
        ("attention.pto", &["--param", "batch=2"], &["O"]),
        (
            "llama_layer.pto",
            &["--param", "N=8", "--param", "D=64", "--param", "F=176"],
            &["A", "H", "Y"],
        ),
        (
            "moe.pto",
            &["--param", "D=64", "--param", "F=128"],
            &["out"],
        ),
        ("flash_decode.pto", &[], &["out"]),
    ];
    for (name, params, outputs) in cases {
        let src = examples().join(name);
        let save = format!("saved-{name}");
        let mut args = vec!["run", src.to_str().unwrap(), "--data", "7", "--save", &save];
        args.extend_from_slice(params);
        let o = ptovm(&args, d);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            out.contains("every tensor bit-identical to the run's"),
            "{out}"
        );
        assert!(out.contains("model: "), "{out}");
        assert!(out.contains("% of the time is the simulator's"), "{out}");
        for t in outputs {
            let line = out
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{t} ")))
                .unwrap_or_else(|| panic!("{name}: no line for {t} in {out}"));
            assert!(line.ends_with(": ok"), "{line}");
            let npy = std::fs::read(d.join(&save).join(format!("{t}.npy"))).unwrap();
            assert_eq!(&npy[..6], b"\x93NUMPY", "{name}: {t}.npy");
        }
        // The same through --json, on another AICPU count.
        args.extend_from_slice(&["--json", "--aicpus", "2"]);
        let o = ptovm(&args, d);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["data"]["seed"], 7);
        assert_eq!(j["data"]["bit_identical"], true);
        for x in j["data"]["model"]["outputs"].as_array().unwrap() {
            assert!(x["max_rel"].as_f64().unwrap() <= x["tolerance"].as_f64().unwrap());
        }
    }
}

#[test]
fn run_and_inspect_show_planned_values_and_refuse_to_take_them() {
    let dir = tempfile::tempdir().unwrap();
    let src = "@param B = 4\n@param pages = [40, 16, 120, 0]\n@param heads = 8\n\
        @plan top = max(b in 0 .. B: pages[b])\n\
        @plan chunk = search(c in 1 ..= top: sum(b in 0 .. B: ceil_div(pages[b], c)) * heads <= 64 || c == top)\n\
        @kernel k(b, c): vector()\n\
        @workload w(%r: dense_dyn(B)) { parallel_for b in %r { parallel_for c in tile(dense_dyn(pages[b]), chunk) { task @k(b, c) } } }\n";
    std::fs::write(dir.path().join("plan.pto"), src).unwrap();
    let o = ptovm(&["run", "plan.pto", "--check"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("w: 8 tasks"), "{out}");
    assert!(
        out.contains("planned at launch: top = 120, chunk = 24 ("),
        "{out}"
    );
    let o = ptovm(&["run", "plan.pto", "--json"], dir.path());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["planning_work"].as_u64().unwrap() > 0);
    let o = ptovm(&["inspect", "plan.pto"], dir.path());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("planned values (2, computed at launch):")
            && out.contains("top = max(v0 in 0 .. B: pages[v0])"),
        "{out}"
    );
    fails(
        dir.path(),
        &["run", "plan.pto", "--param", "chunk=3"],
        8,
        "`chunk` is a planned value (`@plan`)",
    );
    fails(
        dir.path(),
        &["run", "plan.pto", "--param", "B=0"],
        8,
        "planned value 0: max over the empty range [0, 0)",
    );
}

#[test]
fn run_reports_the_workspace_and_refuses_an_arena_too_small() {
    let dir = tempfile::tempdir().unwrap();
    let src = "@param B = 8\n@kernel k(b): vector(out x) workspace(4000)\n\
        @workload w(%r: dense_dyn(B)) { parallel_for b in %r { task @k(b) resources(X[b]) } }\n";
    std::fs::write(dir.path().join("ws.pto"), src).unwrap();
    let o = ptovm(
        &["run", "ws.pto", "--check", "--workspace", "4096"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("workspace: 4096 bytes an AICPU, at most 4032 in use at once;"),
        "{out}"
    );
    let o = ptovm(&["run", "ws.pto", "--json"], dir.path());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // 4,032 bytes (63 lines) for each of the 72 cores an AICPU may drive at once under shared
    // cores, and of its 12 under a partition (6 AICPUs).
    assert_eq!(j["workspace"]["arena_bytes"], 72 * 4032);
    let o = ptovm(
        &["run", "ws.pto", "--json", "--cores", "partition"],
        dir.path(),
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["workspace"]["arena_bytes"], 12 * 4032);
    assert_eq!(j["workspace"]["waits"], 0);
    fails(
        dir.path(),
        &["run", "ws.pto", "--workspace", "4000"],
        2,
        "kernel 0 needs 4032 bytes, the arena of each of 6 AICPUs has 4000",
    );
    fails(dir.path(), &["run", "ws.pto", "--workspace", "0"], 2, "0");
}
