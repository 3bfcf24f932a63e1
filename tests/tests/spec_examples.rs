//! The examples in spec/*.md and examples/*.pto assemble and behave as the documents say.

use std::path::{Path, PathBuf};

use ptovm_assembler::{assemble, disassemble, Module, Options};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Fenced code blocks of a markdown file: (info string, body, line of the opening fence).
fn blocks(md: &str) -> Vec<(String, String, usize)> {
    let mut out = vec![];
    let mut cur: Option<(String, String, usize)> = None;
    for (i, line) in md.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("```") {
            match cur.take() {
                Some(b) => out.push(b),
                None => cur = Some((rest.trim().to_string(), String::new(), i + 1)),
            }
        } else if let Some((_, body, _)) = cur.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// Assembles, verifies and checks the disassembly round trip.
fn roundtrip(name: &str, src: &str) -> Vec<u8> {
    let out = assemble(name, src, &Options::default()).unwrap_or_else(|e| panic!("{name}:\n{e}"));
    ptovm_vm::verify(&out.bytes).unwrap();
    let text = disassemble(&out.bytes).unwrap();
    let again = assemble("listing", &text, &Options::default())
        .unwrap_or_else(|e| panic!("{name} listing:\n{e}\n{text}"));
    assert!(again.from_listing);
    assert_eq!(again.bytes, out.bytes, "{name}: asm(disasm(b)) == b");
    out.bytes
}

#[test]
fn pto_spec_examples() {
    let md = std::fs::read_to_string(root().join("spec/pto.md")).unwrap();
    let bs = blocks(&md);
    let mut n = 0;
    for (i, (info, body, line)) in bs.iter().enumerate() {
        match info.as_str() {
            "pto" => {
                roundtrip(&format!("spec/pto.md:{line}"), body);
                n += 1;
            }
            "pto-error" => {
                // The next block is the exact error text `ptovm asm` prints.
                let e = assemble("spec.pto", body, &Options::default())
                    .expect_err("the example is an error");
                let (info2, expected, _) = &bs[i + 1];
                assert_eq!(info2, "text");
                assert_eq!(
                    e.to_string().trim_end(),
                    expected.trim_end(),
                    "spec/pto.md:{line}"
                );
                n += 1;
            }
            _ => {}
        }
    }
    assert!(n >= 4, "found {n} examples");
}

#[test]
fn design_md_module_assembles_unchanged() {
    // The PTO-WSP module of DESIGN.md §3 is the first example of spec/pto.md, the same program
    // both ways; examples/attention.pto holds its workload and schedule verbatim, after the
    // ptovm extensions that let it run with no flags and compute (`@param` defaults, `@tensor`
    // and `@kernel` declarations), and generates the same tasks.
    let md = std::fs::read_to_string(root().join("spec/pto.md")).unwrap();
    let first = blocks(&md).into_iter().find(|b| b.0 == "pto").unwrap().1;
    let spec_bytes = roundtrip("spec", &first);
    let ex = std::fs::read_to_string(root().join("examples/attention.pto")).unwrap();
    assert!(
        ex.contains(first.trim()),
        "the example holds the module verbatim"
    );
    let ex_bytes = roundtrip("example", &ex);
    let m = Module::decode(&ptovm_vm::verify(&ex_bytes).unwrap());
    assert_eq!(m.params[0].default, Some(vec![4]));
    let tasks = |bytes: &[u8], vals: &[ptovm_vm::Value<'_>]| {
        let v = ptovm_vm::verify(bytes).unwrap();
        let p = ptovm_vm::RuntimeParams::new(&v, vals).unwrap();
        ptovm_host_sim::reference_expand(&v, &p, 4, u64::MAX)
            .unwrap()
            .iter()
            .map(|t| (t.id, t.params.clone(), t.owner))
            .collect::<Vec<_>>()
    };
    use ptovm_vm::Value::Scalar;
    assert_eq!(
        tasks(&spec_bytes, &[Scalar(4)]),
        tasks(&ex_bytes, &[Scalar(4), Scalar(16)])
    );
    let design = root().join("../shared/DESIGN.md");
    if let Ok(d) = std::fs::read_to_string(design) {
        let block = d.split("```").nth(1).expect("DESIGN.md has a code block");
        assert_eq!(roundtrip("DESIGN.md", block), spec_bytes);
    }
}

#[test]
fn bytecode_spec_listing_example() {
    let md = std::fs::read_to_string(root().join("spec/bytecode.md")).unwrap();
    let bs = blocks(&md);
    let i = bs
        .iter()
        .position(|b| b.0 == "ptow")
        .expect("a listing example");
    let listing =
        assemble("listing", &bs[i].1, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(listing.from_listing);
    assert_eq!(bs[i + 1].0, "pto", "the module follows its listing");
    let module = roundtrip("module", &bs[i + 1].1);
    assert_eq!(
        listing.bytes, module,
        "the listing is the assembly of the module"
    );
}

#[test]
fn bytecode_spec_tables_match_the_vm() {
    // Every opcode and expression operator of the vm crate is documented with its number and
    // mnemonic in spec/bytecode.md.
    let md = std::fs::read_to_string(root().join("spec/bytecode.md")).unwrap();
    for op in ptovm_vm::Opcode::ALL {
        let row = format!("| 0x{:02X} | {} |", *op as u8, op.mnemonic());
        assert!(md.contains(&row), "spec/bytecode.md lacks {row}");
    }
    for op in ptovm_vm::ExprOp::ALL {
        let code = *op as u8;
        let documented = md.contains(&format!("| 0x{code:02X} | {} |", op.mnemonic()))
            || (0x30..=0x35).contains(&code);
        assert!(
            documented,
            "spec/bytecode.md lacks expression operator {}",
            op.mnemonic()
        );
    }
    for (what, v) in [
        ("1,048,576", ptovm_vm::limits::MAX_INSTRUCTIONS as u64),
        ("65,535", ptovm_vm::limits::MAX_EXPRS as u64),
        (
            "| loop nesting | 16 |",
            ptovm_vm::limits::MAX_LOOP_DEPTH as u64,
        ),
        (
            "| statement nesting | 32 |",
            ptovm_vm::limits::MAX_NESTING as u64,
        ),
    ] {
        assert!(md.contains(what), "limit {what} ({v}) documented");
    }
}

#[test]
fn every_example_is_documented_and_round_trips() {
    let mut n = 0;
    let dirs = [root().join("examples"), root().join("examples/taskbench")];
    for e in dirs.iter().flat_map(|d| std::fs::read_dir(d).unwrap()) {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("pto") {
            continue;
        }
        let src = std::fs::read_to_string(&p).unwrap();
        assert!(
            src.starts_with("// "),
            "{} starts with a comment header",
            p.display()
        );
        let bytes = roundtrip(&p.display().to_string(), &src);
        assert!(
            bytes.len() <= 4096,
            "{}: {} bytes",
            p.display(),
            bytes.len()
        );
        n += 1;
    }
    assert!(n >= 5);
}

#[test]
fn examples_have_the_documented_structure() {
    let load = |n: &str| {
        let src = std::fs::read_to_string(root().join("examples").join(n)).unwrap();
        let out = assemble(n, &src, &Options::default()).unwrap();
        assert!(
            out.warnings.is_empty() || n == "attention.pto",
            "{n}: {:?}",
            out.warnings
        );
        out.module
    };
    use ptovm_vm::Opcode::*;
    let count = |m: &ptovm_assembler::Module, op: ptovm_vm::Opcode| {
        m.code.iter().filter(|r| r.opcode == op as u8).count()
    };
    let l = load("llama_layer.pto");
    assert_eq!(
        count(&l, TASK),
        16 + 3,
        "16 per-tile task sites and 3 per tile pair"
    );
    assert_eq!(l.params.len(), 3, "N, D and F");
    let c = load("control.pto");
    for op in [FOR_EACH, COMBINE, SEQUENTIAL, COND, PARALLEL_FOR] {
        assert!(count(&c, op) > 0, "control.pto uses {op:?}");
    }
    let moe = load("moe.pto");
    assert!(count(&moe, SELECT) == 1 && count(&moe, DISPATCH_FILTER) == 1);
    let fd = load("flash_decode.pto");
    assert!(fd.axes.iter().any(|a| a.opcode == AXIS_RAGGED_ROW as u8));
    assert!(moe.axes.iter().any(|a| a.opcode == AXIS_SPARSE_ROW as u8));
}
