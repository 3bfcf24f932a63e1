//! The hostile-input matrix: every kind of malformed input (bytecode, `.pto` text, runtime
//! parameters, command-line arguments, a program that fails or asks too much) through every
//! command that reads it. Each must end with the exit code of its kind, one error line (text
//! errors add the source line and a caret under it), nothing on standard output and no file
//! left behind, not even the `--trace` or `-o` file the command was asked to write.

use super::*;
use ptovm_assembler::model::Module;
use ptovm_vm::{Opcode, Record};

/// The kinds of failure and their exit codes, as README.md and `ptovm --help` list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Failed,
    Usage,
    Io,
    Text,
    Damaged,
    Invalid,
    Params,
}

impl Kind {
    fn code(self) -> i32 {
        match self {
            Kind::Failed => 1,
            Kind::Usage => 2,
            Kind::Io => 3,
            Kind::Text => 5,
            Kind::Damaged => 6,
            Kind::Invalid => 7,
            Kind::Params => 8,
        }
    }
}

/// Runs `args` in `d`, expecting a failure of `kind` whose first line contains `expected`.
/// `located`: a text error (`file:line:col: error: ...`, then the source line and a caret).
fn hostile(d: &Path, args: &[&str], kind: Kind, expected: &str, located: bool) {
    let before = files(d);
    let o = ptovm(args, d);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(kind.code()), "{args:?}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.first().is_some_and(|l| l.contains(expected)),
        "{args:?}: expected {expected:?} in {err:?}"
    );
    if located {
        assert_eq!(
            lines.len(),
            4,
            "{args:?}: location, blank gutter, line, caret: {err}"
        );
        assert!(lines[3].trim_end().ends_with('^'), "{args:?}: caret: {err}");
    } else {
        assert_eq!(lines.len(), 1, "{args:?}: one line: {err}");
        assert!(lines[0].starts_with("error: "), "{args:?}: {err}");
    }
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    assert_eq!(files(d), before, "{args:?}: no file left behind");
}

/// The LLaMA layer's module, to break in one place at a time.
fn llama(d: &Path) -> (Vec<u8>, Module) {
    let good = std::fs::read(asm_example(d, "llama_layer.pto")).unwrap();
    std::fs::remove_file(d.join("llama_layer.ptow")).unwrap();
    let v = ptovm_vm::verify(&good).unwrap();
    let m = Module::decode(&v);
    (good, m)
}

fn rec(op: Opcode, flags: u8, op1: u16, op2: u32) -> Record {
    Record::new(op as u8, flags, op1, op2)
}

/// Bytecode broken in each way the issue lists (and a few more), with the kind and message.
fn bad_bytecode(d: &Path) -> Vec<(&'static str, Vec<u8>, Kind, &'static str)> {
    let (good, base) = llama(d);
    let mut out = vec![];
    let mut b = good.clone();
    b[0] = b'X';
    out.push(("magic", b, Kind::Damaged, "bad magic"));
    let mut b = good.clone();
    b[4] = 9;
    ptovm_vm::format::seal(&mut b);
    out.push(("version", b, Kind::Damaged, "unsupported PTOW version 9"));
    let mut b = good.clone();
    let n = b.len();
    b[n - 3] ^= 0x10;
    out.push(("checksum", b, Kind::Damaged, "checksum mismatch"));
    let mut b = good.clone();
    b.extend_from_slice(&[0; 8]);
    out.push(("extended", b, Kind::Damaged, "(truncated or extended)"));
    out.push((
        "header only",
        good[..64].to_vec(),
        Kind::Damaged,
        "(truncated or extended)",
    ));
    out.push((
        "not bytecode",
        vec![0xff, 0xfe, 0, 1],
        Kind::Damaged,
        "shorter than the 64-byte header",
    ));
    let task = base
        .code
        .iter()
        .position(|r| r.opcode == Opcode::TASK as u8)
        .unwrap();
    let io = base
        .code
        .iter()
        .position(|r| r.opcode == Opcode::IO_INPUT as u8 || r.opcode == Opcode::IO_OUTPUT as u8)
        .unwrap();
    let lp = base
        .code
        .iter()
        .position(|r| r.opcode == Opcode::PARALLEL_FOR as u8 || r.opcode == Opcode::FOR_EACH as u8)
        .unwrap();
    let mut m = base.clone();
    let r = m.code[task];
    m.code[task] = Record::new(r.opcode, r.flags, 4000, r.op2());
    out.push((
        "kernel index",
        m.encode(),
        Kind::Invalid,
        "instruction 1 (byte offset 200): kernel index 4000 is out of range (table has 17)",
    ));
    let mut m = base.clone();
    let r = m.code[io];
    m.code[io] = Record::new(r.opcode, r.flags, 4000, r.op2());
    out.push((
        "tensor index",
        m.encode(),
        Kind::Invalid,
        "tensor index 4000 is out of range",
    ));
    let mut m = base.clone();
    let r = m.code[lp];
    m.code[lp] = Record::new(r.opcode, r.flags, 4000, r.op2());
    out.push((
        "axis index",
        m.encode(),
        Kind::Invalid,
        "axis index 4000 is out of range",
    ));
    let mut m = base.clone();
    let r = m.code[lp];
    let past = m.code.len() as u32 + 10;
    m.code[lp] = Record::new(r.opcode, r.flags, r.op1(), past);
    out.push((
        "body past the end",
        m.encode(),
        Kind::Invalid,
        "instruction 0 (byte offset 192): body end 103 is outside 1..=92",
    ));
    let mut m = base.clone();
    m.exprs.truncate(1);
    out.push((
        "expression pool cut",
        m.encode(),
        Kind::Invalid,
        "expression pool ends before END",
    ));
    let mut m = base.clone();
    m.code = (0..17)
        .map(|_| rec(Opcode::PARALLEL_FOR, 0, 0, 18))
        .collect();
    m.code.push(rec(Opcode::NOP, 0, 0, 0));
    m.code.push(rec(Opcode::HALT, 0, 0, 0));
    out.push((
        "loops too deep",
        m.encode(),
        Kind::Invalid,
        "loops nested deeper than 16",
    ));
    let mut m = base.clone();
    m.code = (0..33).map(|_| rec(Opcode::COMBINE, 0, 1, 34)).collect();
    m.code.push(rec(Opcode::NOP, 0, 0, 0));
    m.code.push(rec(Opcode::HALT, 0, 0, 0));
    out.push((
        "statements too deep",
        m.encode(),
        Kind::Invalid,
        "statements nested deeper than 32",
    ));
    let mut m = base.clone();
    m.config.window.set(0);
    out.push((
        "window 0",
        m.encode(),
        Kind::Invalid,
        "task window is 0, below the minimum 1",
    ));
    let mut m = base.clone();
    m.config.num_aicpus.set(0);
    out.push((
        "no AICPUs",
        m.encode(),
        Kind::Invalid,
        "config (byte offset 76): num_aicpus is 0, below the minimum 1",
    ));
    let mut m = base.clone();
    m.config.num_aicpus.set(65);
    out.push((
        "65 AICPUs",
        m.encode(),
        Kind::Invalid,
        "num_aicpus is 65, above the limit 64",
    ));
    let mut b = good.clone();
    b[64 + 128] = 0x77;
    ptovm_vm::format::seal(&mut b);
    out.push((
        "unknown opcode",
        b,
        Kind::Invalid,
        "instruction 0 (byte offset 192): unknown opcode 0x77",
    ));
    out
}

#[test]
fn bad_bytecode_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (name, bytes, kind, expected) in bad_bytecode(d) {
        std::fs::write(d.join("bad.ptow"), &bytes).unwrap();
        for args in [
            &["verify", "bad.ptow"][..],
            &["disasm", "bad.ptow", "-o", "out.txt"],
            &["inspect", "bad.ptow", "--json"],
            &["run", "bad.ptow", "--param", "N=4", "--trace", "t.json"],
            &["run", "bad.ptow", "--check", "--json"],
            &["expand", "bad.ptow", "--param", "N=4", "--json"],
            &["bench", "bad.ptow", "--param", "N=4", "--runs", "1"],
            &["metg", "bad.ptow", "--param", "N=4", "--json"],
            &["disasm", "-"],
        ] {
            if args[1] == "-" {
                // Standard input: the same bytes through a pipe.
                let o = Command::new(env!("CARGO_BIN_EXE_ptovm"))
                    .args(args)
                    .current_dir(d)
                    .stdin(std::fs::File::open(d.join("bad.ptow")).unwrap())
                    .output()
                    .unwrap();
                assert_eq!(o.status.code(), Some(kind.code()), "{name}: stdin");
                assert!(o.stdout.is_empty(), "{name}: stdin");
                continue;
            }
            hostile(d, args, kind, expected, false);
        }
        // Messages name where the problem is.
        let o = ptovm(&["verify", "bad.ptow"], d);
        let err = stderr(&o);
        assert!(err.contains("byte offset"), "{name}: {err}");
        std::fs::remove_file(d.join("bad.ptow")).unwrap();
    }
}

#[test]
fn bad_text_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let deep = {
        let mut s = String::from("@workload w() {\n");
        for i in 0..17 {
            s += &format!("{}parallel_for i{i} in dense[2] {{\n", "  ".repeat(i + 1));
        }
        s += &format!("{}task @k(i0) resources(A[i0])\n", "  ".repeat(18));
        for i in (0..17).rev() {
            s += &format!("{}}}\n", "  ".repeat(i + 1));
        }
        s + "}\n"
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "syntax",
            "@workload w() {\n  parallel_for i in dense[4] {\n    task @k(i) resources(A[i)\n  }\n}\n".into(),
            "3:29: error: expected `,` or `]`, found `)`",
        ),
        ("too deep", deep, "18:35: error: loops nested deeper than 16"),
        (
            "extent",
            "@workload w() {\n  parallel_for i in dense[99999999999] {\n    task @k(i) resources(A[i])\n  }\n}\n".into(),
            "2:27: error: extent 99999999999 does not fit in 32 bits",
        ),
        (
            "unknown parameter axis",
            "@workload w() {\n  parallel_for i in %nope {\n    task @k(i) resources(A[i])\n  }\n}\n".into(),
            "2:22: error: unknown axis `nope`",
        ),
        (
            "unclosed",
            "@workload w() {\n  parallel_for i in dense[4] {\n    task @k(i) resources(A[i])\n".into(),
            "error:",
        ),
    ];
    for (name, src, expected) in cases {
        std::fs::write(d.join("bad.pto"), &src).unwrap();
        for args in [
            &["asm", "bad.pto", "-o", "out.ptow"][..],
            &["inspect", "bad.pto"],
            &["run", "bad.pto", "--trace", "t.json"],
            &["expand", "bad.pto", "--json"],
            &["bench", "bad.pto", "--json"],
            &["metg", "bad.pto", "--json"],
        ] {
            let _ = name;
            hostile(d, args, Kind::Text, expected, true);
        }
    }
    // An empty file: `asm` wants text; the commands that take either read it as bytecode.
    std::fs::write(d.join("empty.pto"), "").unwrap();
    hostile(
        d,
        &["asm", "empty.pto", "-o", "out.ptow"],
        Kind::Text,
        "empty.pto:1:1: error: the module has no `@workload`",
        true,
    );
    hostile(
        d,
        &["run", "empty.pto"],
        Kind::Damaged,
        "file is 0 bytes",
        false,
    );
    // A listing (disassembly text) with a bad line.
    std::fs::write(d.join("bad.txt"), ".ptow 8\n.workload w\n.code\n0 HALT\n").unwrap();
    hostile(
        d,
        &["asm", "bad.txt", "-o", "out.ptow"],
        Kind::Text,
        "listing has no `.config` line",
        true,
    );
    // Not UTF-8: `asm` wants text; the commands that take either read it as bytecode.
    std::fs::write(d.join("bin.pto"), [0xff, 0xfe, 0x00]).unwrap();
    hostile(
        d,
        &["asm", "bin.pto", "-o", "out.ptow"],
        Kind::Text,
        "is not UTF-8 text",
        false,
    );
    hostile(
        d,
        &["run", "bin.pto"],
        Kind::Damaged,
        "shorter than the 64-byte header",
        false,
    );
    // Selecting what the module does not have.
    let att = examples().join("attention.pto");
    let a = att.to_str().unwrap();
    hostile(
        d,
        &["asm", a, "--workload", "nope", "-o", "out.ptow"],
        Kind::Text,
        "error: the module has no workload `nope` (it has: attention)",
        true,
    );
    hostile(
        d,
        &["asm", a, "--schedule", "nope", "-o", "out.ptow"],
        Kind::Text,
        "error: the module has no schedule `nope` (it has: attn_sched)",
        true,
    );
}

#[test]
fn bad_parameters_through_run_expand_and_bench() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let moe = examples().join("moe.pto");
    let m = moe.to_str().unwrap();
    let fd = examples().join("flash_decode.pto");
    let f = fd.to_str().unwrap();
    let ok = [MOE_PARAMS[1], MOE_PARAMS[3], MOE_PARAMS[5]];
    // The MoE module without its `@param` defaults.
    let bare = d.join("moe_no_defaults.pto");
    let text = std::fs::read_to_string(&moe).unwrap();
    let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with("@param")).collect();
    std::fs::write(&bare, kept.join("\n")).unwrap();
    let bare = bare.to_str().unwrap();
    // (parameters, kind, message) on the MoE program unless the first is a file.
    let cases: Vec<(Vec<&str>, Kind, &str)> = vec![
        (vec![bare, "T=2", "D=4", "F=4", "expert_tokens=1,0"], Kind::Params, "missing runtime parameter `expert_ptr` (array)"),
        // A parameter not given takes its default, which is checked like a given one.
        (vec!["T=2", "expert_tokens=1,0"], Kind::Params, "ends at 32 but its indices array 4 has 2 entries"),
        (vec![ok[0], ok[1], ok[2], "Q=1"], Kind::Params, "the program has no runtime parameter `Q`"),
        (vec![ok[0], ok[1], ok[2], "T=3"], Kind::Params, "--param T: given twice"),
        (vec!["T=x", ok[1], ok[2]], Kind::Params, "is not an unsigned 32-bit integer"),
        (vec!["T=4294967296", ok[1], ok[2]], Kind::Params, "is not an unsigned 32-bit integer"),
        (vec!["T=-1", ok[1], ok[2]], Kind::Params, "is not an unsigned 32-bit integer"),
        (vec!["T", ok[1], ok[2]], Kind::Params, "expected NAME=VALUE"),
        (vec!["T=1,2", ok[1], ok[2]], Kind::Params, "--param T: \"1,2\" is not an unsigned 32-bit integer"),
        (vec![ok[0], "expert_ptr=", ok[2]], Kind::Params, "must have at least one entry"),
        (vec![ok[0], "expert_ptr=0,2,1,1,1,1,1,1,2", ok[2]], Kind::Params, "decreases at index 2"),
        (vec![ok[0], "expert_ptr=0,1,1,1,1,1,1,1,5", ok[2]], Kind::Params, "ends at 5 but its indices array"),
        (vec![ok[0], "expert_ptr=0,x", ok[2]], Kind::Params, "is not an unsigned 32-bit integer"),
        // Wrong lengths the parameter check cannot see: found where they are read.
        (vec![ok[0], "expert_ptr=0,1", ok[2]], Kind::Failed, "error: instruction 9: index 2 is outside runtime array 3 (2 entries)"),
        (vec![ok[0], ok[1], "expert_tokens=1,9"], Kind::Failed, "error: instruction 13: region dimension 0 of tensor 0 is [9, 10), outside its extent 2"),
        (vec![f, "B=2", "max_chunks=4", "kv_chunks=2"], Kind::Failed, "instruction 2: index 1 is outside runtime array"),
    ];
    for (params, kind, expected) in cases {
        let (file, params) = match params.first() {
            Some(p) if p.ends_with(".pto") => (p.to_string(), params[1..].to_vec()),
            _ => (m.to_string(), params),
        };
        let mut tail: Vec<&str> = vec![];
        for p in &params {
            tail.push("--param");
            tail.push(p);
        }
        let mut run = vec!["run", file.as_str(), "--check", "--trace", "t.json"];
        run.extend_from_slice(&tail);
        hostile(d, &run, kind, expected, false);
        let mut exp = vec!["expand", file.as_str()];
        exp.extend_from_slice(&tail);
        hostile(d, &exp, kind, expected, false);
        let mut bench = vec!["bench", file.as_str(), "--runs", "1"];
        bench.extend_from_slice(&tail);
        hostile(d, &bench, kind, expected, false);
        let mut metg = vec!["metg", file.as_str(), "--longest-ns", "1000"];
        metg.extend_from_slice(&tail);
        hostile(d, &metg, kind, expected, false);
    }
}

#[test]
fn bad_arguments_and_failing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let moe = examples().join("moe.pto");
    let m = moe.to_str().unwrap();
    let p = MOE_PARAMS;
    let with = |head: &[&'static str]| -> Vec<&str> {
        let mut v: Vec<&str> = head.to_vec();
        v.insert(1, m);
        v.extend_from_slice(&p);
        v
    };
    let usage: Vec<(Vec<&str>, &str)> = vec![
        (with(&["run", "--window", "0"]), "0 is not in 1..=65536"),
        (with(&["run", "--aicpus", "0"]), "0 is not in 1..=64"),
        (with(&["run", "--aicpus", "65"]), "65 is not in 1..=64"),
        (
            with(&[
                "run",
                "--cube",
                "2",
                "--aicpus",
                "3",
                "--cores",
                "partition",
            ]),
            "under a core partition every AICPU needs at least one cube and one vector core",
        ),
        (
            with(&["run", "--cores", "spread"]),
            "invalid value 'spread' for '--cores",
        ),
        (
            with(&["run", "--start", "threshold:0"]),
            "is not a task count",
        ),
        (with(&["run", "--max-tasks", "0"]), "0 is not in 1.."),
        (with(&["bench", "--runs", "0"]), "0 is not in 1..=1000"),
        (with(&["bench", "--max-tasks", "0"]), "0 is not in 1.."),
        (with(&["metg", "--max-tasks", "0"]), "0 is not in 1.."),
        (with(&["metg", "--aicpus", "0"]), "0 is not in 1..=64"),
        (with(&["metg", "--window", "0"]), "0 is not in 1..=65536"),
        (
            with(&["metg", "--longest-ns", "20000000"]),
            "20000000 is not in 1..=10000000",
        ),
        (
            with(&["run", "--window-mode", "drop"]),
            "invalid value 'drop'",
        ),
        (
            with(&["run", "--frobnicate"]),
            "unexpected argument '--frobnicate'",
        ),
        (
            with(&["expand", "--aicpu", "6"]),
            "--aicpu 6 is not below the AICPU count 6",
        ),
        (
            with(&["expand", "--aicpus", "2", "--aicpu", "2"]),
            "--aicpu 2 is not below the AICPU count 2",
        ),
        (with(&["expand", "--aicpus", "65"]), "65 is not in 1..=64"),
        (vec!["asm", m, "--window", "0"], "0 is not in 1.."),
        (vec!["asm", m, "--streams", "0"], "0 is not in 1.."),
        (vec!["asm"], "required arguments were not provided"),
        (vec!["frobnicate"], "unrecognized subcommand 'frobnicate'"),
    ];
    for (args, expected) in usage {
        let before = files(d);
        let o = ptovm(&args, d);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(Kind::Usage.code()), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(
            err.contains(expected),
            "{args:?}: expected {expected:?} in {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}");
        assert_eq!(files(d), before, "{args:?}");
    }
    // Programs that fail, or ask for more than the budget, while running: exit 1, no trace.
    hostile(
        d,
        &[
            "run",
            "--param",
            "N=8",
            "--window-mode",
            "abort",
            "--window",
            "1",
            "--aicpus",
            "2",
            "--trace",
            "t.json",
        ],
        Kind::Failed,
        "task window (1 slots) is full and the window mode is abort",
        false,
    );
    hostile(
        d,
        &[
            "run",
            "--param",
            "N=8",
            "--max-tasks",
            "319",
            "--trace",
            "t.json",
        ],
        Kind::Failed,
        "the program generates 320 tasks, more than --max-tasks 319",
        false,
    );
    std::fs::write(
        d.join("huge.pto"),
        "@workload w(%n: dense_dyn(n)) {\n  parallel_for a in %n {\n    parallel_for b in %n {\n      parallel_for c in %n {\n        task @k(a) resources(A[a])\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    hostile(
        d,
        &["bench", "--param", "N=8", "--max-tasks", "319"],
        Kind::Failed,
        "the program generates 320 tasks, more than --max-tasks 319",
        false,
    );
    // Three loops of 2^32 - 1: the bound saturates and nothing is walked.
    for cmd in ["run", "expand", "bench", "metg"] {
        hostile(
            d,
            &[cmd, "huge.pto", "--param", "n=4294967295"],
            Kind::Failed,
            "the program can start 2^64 or more loop iterations",
            false,
        );
    }
    hostile(
        d,
        &["expand", "huge.pto", "--param", "n=200"],
        Kind::Failed,
        "the program generates 8000000 tasks, more than the 4000000 `expand` holds in memory",
        false,
    );
    // I/O: a missing input, an output directory that does not exist.
    hostile(
        d,
        &["run", "missing.ptow"],
        Kind::Io,
        "cannot read missing.ptow",
        false,
    );
    hostile(
        d,
        &["asm", m, "-o", "no/such/dir/out.ptow"],
        Kind::Io,
        "cannot write no/such/dir/out.ptow",
        false,
    );
    hostile(
        d,
        &["run", "--param", "N=2", "--trace", "no/such/dir/t.json"],
        Kind::Io,
        "cannot write no/such/dir/t.json",
        false,
    );
}

/// Each kind has its own code, and the codes are the ones `ptovm --help` documents.
#[test]
fn exit_codes_are_distinct_and_documented() {
    let kinds = [
        Kind::Failed,
        Kind::Usage,
        Kind::Io,
        Kind::Text,
        Kind::Damaged,
        Kind::Invalid,
        Kind::Params,
    ];
    let codes: std::collections::HashSet<i32> = kinds.iter().map(|k| k.code()).collect();
    assert_eq!(codes.len(), kinds.len());
    let o = ptovm(&["--help"], Path::new("."));
    let help = String::from_utf8_lossy(&o.stdout);
    for k in kinds {
        assert!(
            help.contains(&format!("\n  {}  ", k.code())),
            "{k:?} ({}) is listed in --help: {help}",
            k.code()
        );
    }
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for k in kinds {
        assert!(
            readme.contains(&format!("| {} |", k.code())),
            "{k:?} ({}) is in README's exit-code table",
            k.code()
        );
    }
}

/// `run --data` on what it cannot compute or check: each a one-line error with its exit code,
/// nothing on standard output, and no `.npy` file or directory left behind.
#[test]
fn bad_data_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let control = examples().join("control.pto");
    let moe = examples().join("moe.pto");
    // 40 doublings overflow f16; RMSNorm of infinities is NaN.
    std::fs::write(
        d.join("nan.pto"),
        "@tensor A: f16[2, 4]\n@tensor X: f16[2, 4]\n@tensor Y: f16[2, 4]\n\
         @kernel residual(i): vector(in x, inout y)\n@kernel rmsnorm(i): vector(in x, out y)\n\
         @workload k() {\n  task @residual(0) resources(A, X)\n  \
         for_each i in dense[40] { task @residual(i) resources(X, X) }\n  \
         task @rmsnorm(0) resources(X, Y)\n}\n",
    )
    .unwrap();
    // A matmul whose weight does not fit its input.
    std::fs::write(
        d.join("shape.pto"),
        "@tensor X: f32[4, 8]\n@tensor W: f32[7, 8]\n@tensor Y: f32[4, 8]\n\
         @kernel matmul(t): cube(in x, in w, out y)\n\
         @workload k() { parallel_for t in dense[4] { task @matmul(t) resources(X[t], W, Y[t]) } }\n",
    )
    .unwrap();
    // A workload called `attention` that copies instead of attending: its model fails it.
    std::fs::write(
        d.join("fake.pto"),
        "@tensor Q: f16[1, 2, 4, 8]\n@tensor K: f16[1, 2, 4, 8]\n@tensor V: f16[1, 2, 4, 8]\n\
         @tensor O: f16[1, 2, 4, 8]\n@kernel residual(h): vector(in x, inout y)\n\
         @workload attention() { parallel_for h in dense[2] { task @residual(h) resources(V[0, h], O[0, h]) } }\n",
    )
    .unwrap();
    std::fs::write(d.join("a-file"), "").unwrap();
    let c = control.to_str().unwrap();
    let m = moe.to_str().unwrap();
    let cases: Vec<(Vec<&str>, Kind, &str)> = vec![
        (vec![c, "--data", "1", "--save", "out"], Kind::Failed, "error: kernel forward has no implementation in the simulator's kernel library"),
        (vec!["nan.pto", "--data", "1", "--save", "out"], Kind::Failed, "error: Y[0, 0] is NaN after the run (tensor Y is written by the workload)"),
        (vec!["shape.pto", "--data", "1"], Kind::Failed, "error: task 0 (kernel matmul) failed: region 2 (Y [1, 8]): a 1×8 by 7×8 product does not fit a 1×8 result"),
        (vec!["fake.pto", "--data", "1", "--save", "out"], Kind::Failed, "error: the outputs are not those of naive softmax attention per (batch, head) (the workload's model): O is"),
        (vec![m, "--data", "1", "--param", "D=1048576", "--param", "F=1048576"], Kind::Failed, "a computing run allocates; give smaller shapes with --param"),
        // The directory cannot be made: a file is in the way.
        (vec![m, "--data", "1", "--param", "D=8", "--param", "F=8", "--save", "a-file/sub"], Kind::Io, "error: cannot write to a-file/sub"),
    ];
    for (args, kind, expected) in cases {
        let mut all = vec!["run"];
        all.extend_from_slice(&args);
        hostile(d, &all, kind, expected, false);
        assert!(!d.join("out").exists(), "{all:?}");
    }
    // Usage errors (clap's, of several lines): `--save` needs `--data`, a seed is a number.
    for (args, expected) in [
        (
            ["run", "shape.pto", "--save", "out"],
            "required arguments were not provided",
        ),
        (
            ["run", "shape.pto", "--data", "x"],
            "invalid value 'x' for '--data <SEED>'",
        ),
    ] {
        let o = ptovm(&args, d);
        assert_eq!(o.status.code(), Some(Kind::Usage.code()), "{args:?}");
        assert!(stderr(&o).contains(expected), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty() && !d.join("out").exists());
    }
}
