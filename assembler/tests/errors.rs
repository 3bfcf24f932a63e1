//! One test per assembler diagnostic kind: the message, the line, the column and the caret.

use ptovm_assembler::{assemble, DiagKind, Diagnostic, Options, Select, Severity};

fn fail(src: &str) -> Diagnostic {
    fail_with(src, &Options::default())
}

fn fail_with(src: &str, o: &Options) -> Diagnostic {
    let e = assemble("t.pto", src, o).expect_err("should fail");
    e.diag().clone()
}

fn is(d: &Diagnostic, kind: DiagKind, line: usize, col: usize, msg: &str) {
    assert_eq!((d.kind, d.line, d.col), (kind, line, col), "{d}");
    assert_eq!(d.message, msg, "{d}");
    assert_eq!(d.severity, Severity::Error);
}

const K: &str = "@kernel k(i): vector(out a)\n";

#[test]
fn syntax() {
    let d = fail(
        "@workload w() {\n  parallel_for i in dense[4] {\n    task @k(i) resources(A[i)\n  }\n}\n",
    );
    is(
        &d,
        DiagKind::Syntax,
        3,
        29,
        "expected `,` or `]`, found `)`",
    );
    assert_eq!(d.to_string(), "t.pto:3:29: error: expected `,` or `]`, found `)`\n  |\n3 |     task @k(i) resources(A[i)\n  |                             ^");
    is(
        &fail("@workload w() { task @k() } ^"),
        DiagKind::Syntax,
        1,
        29,
        "unexpected character '^'",
    );
    is(
        &fail("@workload w() {\n  parallel_for i in dense[4] {\n"),
        DiagKind::Syntax,
        2,
        30,
        "this `{` is never closed",
    );
    is(
        &fail("@workload w() { frob }"),
        DiagKind::Syntax,
        1,
        17,
        "unknown statement `frob`",
    );
    is(
        &fail("@flow w() {}"),
        DiagKind::Syntax,
        1,
        2,
        "unknown item `@flow`; expected `@workload`, `@schedule`, `@tensor`, `@kernel`, `@param`, `@plan` or `@tiers`",
    );
    is(
        &fail(""),
        DiagKind::Syntax,
        1,
        1,
        "the module has no `@workload`",
    );
}

#[test]
fn unknown_name() {
    is(
        &fail("@workload w() { parallel_for i in %n { } }"),
        DiagKind::UnknownName,
        1,
        36,
        "unknown axis `n`: not a parameter of this workload",
    );
    is(
        &fail("@workload w() { }\n@schedule s for v { }"),
        DiagKind::UnknownName,
        2,
        17,
        "schedule `s` is for unknown workload `v`",
    );
    is(
        &fail("@workload w() { }\n@schedule s for w { dispatch = static(q) }"),
        DiagKind::UnknownName,
        2,
        39,
        "`q` is not a loop variable of the workload",
    );
    let o = Options {
        select: Select {
            workload: Some("x".into()),
            schedule: None,
        },
        ..Default::default()
    };
    assert_eq!(
        fail_with("@workload w() { }", &o).message,
        "the module has no workload `x` (it has: w)"
    );
}

#[test]
fn duplicate_name() {
    is(
        &fail("@tensor A: f16[4]\n@tensor A: f32[2]\n@workload w() {}"),
        DiagKind::DuplicateName,
        2,
        9,
        "tensor `A` is already defined at line 1",
    );
    is(
        &fail("@workload w() { parallel_for i in dense[2] { parallel_for i in dense[2] { } } }"),
        DiagKind::DuplicateName,
        1,
        59,
        "loop variable `i` is already bound by an enclosing loop",
    );
    is(
        &fail("@workload w() { }\n@schedule s for w { streams = 2 streams = 3 }"),
        DiagKind::DuplicateName,
        2,
        33,
        "schedule knob `streams` is set twice",
    );
    is(
        &fail("@kernel k(a): cube(in a)\n@workload w() { }"),
        DiagKind::DuplicateName,
        1,
        23,
        "`a` is named twice in kernel `k`",
    );
}

#[test]
fn arity() {
    let src = format!(
        "{K}@workload w() {{ parallel_for i in dense[2] {{ task @k(i) resources(A, B) }} }}"
    );
    is(
        &fail(&src),
        DiagKind::Arity,
        2,
        52,
        "kernel `k` takes 1 resource(s) but 2 are given",
    );
    let src = format!("{K}@workload w() {{ task @k() resources(A) }}");
    is(
        &fail(&src),
        DiagKind::Arity,
        2,
        23,
        "kernel `k` takes 1 parameter(s) but 0 are given",
    );
}

#[test]
fn type_errors() {
    is(
        &fail("@tensor A: f17[4]\n@workload w() {}"),
        DiagKind::Type,
        1,
        12,
        "unknown element type `f17`",
    );
    is(
        &fail("@kernel k(): gpu(in a)\n@workload w() {}"),
        DiagKind::Type,
        1,
        14,
        "unknown pool `gpu`; expected `cube` or `vector`",
    );
    is(
        &fail("@workload w() { select t in dense[4] { } }"),
        DiagKind::Type,
        1,
        17,
        "`select` needs a sparse axis: `select v in sparse(outer, indptr, indices)` or `sparse_row(row, indptr, indices)`",
    );
    let src = format!("@tensor A: f16[4]\n{K}@workload w() {{ parallel_for i in dense[4] {{ task @k(i) resources(A[i, 0]) }} }}");
    is(
        &fail(&src),
        DiagKind::Type,
        3,
        67,
        "tensor `A` has rank 1 but 2 indices are given",
    );
    is(
        &fail("@workload w() { parallel_for i in dense_dyn(n) { cond n[i] { } } }"),
        DiagKind::Type,
        1,
        55,
        "runtime parameter `n` is used as array here but as scalar elsewhere",
    );
    let src = "@workload w() { task @k() }\n@schedule s for w { dispatch = affinity(1) }";
    assert!(
        assemble("t.pto", src, &Options::default()).is_ok(),
        "a constant key needs no loop"
    );
    let src = "@workload w() { parallel_for i in dense[2] { } task @k() }\n@schedule s for w { dispatch = affinity(i) }";
    is(&fail(src), DiagKind::Type, 1, 48, "the dispatch policy at line 2 reads the loop variable at depth 0, but this task is inside only 0 loop(s)");
    is(
        &fail("@workload w() { }\n@schedule s for w { timing = batched }"),
        DiagKind::Type,
        2,
        30,
        "`batched` needs an argument: `batched(N)`",
    );
    let src = "@workload w() { parallel_for i in dense[2] { task @k() } }\n@schedule s for w { dispatch = threshold(i, 4: round_robin, round_robin) }";
    is(&fail(src), DiagKind::Type, 2, 42, "`i` is a loop variable; a threshold selector is evaluated at launch and may only read runtime parameters");
}

#[test]
fn nesting() {
    let deep = "combine { ".repeat(33) + &"}".repeat(33);
    let d = fail(&format!("@workload w() {{ {deep} }}"));
    assert_eq!(
        (d.kind, d.message.as_str()),
        (DiagKind::Nesting, "statements nested deeper than 32"),
        "{d}"
    );
    let loops: String = (0..17)
        .map(|i| format!("parallel_for v{i} in dense[2] {{ "))
        .collect();
    let d = fail(&format!("@workload w() {{ {loops}{} }}", "}".repeat(17)));
    assert_eq!(
        (d.kind, d.message.as_str()),
        (DiagKind::Nesting, "loops nested deeper than 16"),
        "{d}"
    );
    let d = fail(&format!(
        "@workload w() {{ cond {}1{} {{ }} }}",
        "(".repeat(70),
        ")".repeat(70)
    ));
    assert_eq!(
        (d.kind, d.message.as_str()),
        (DiagKind::Nesting, "expression nested deeper than 64"),
        "{d}"
    );
    // Hostile depth far beyond the limits is an error, not a stack overflow.
    let d = fail(&format!(
        "@workload w() {{ cond {}1 {{ }} }}",
        "(".repeat(100_000)
    ));
    assert_eq!(d.kind, DiagKind::Nesting);
    let d = fail(&format!(
        "@workload w() {{ cond {}1 {{ }} }}",
        "-".repeat(100_000)
    ));
    assert_eq!(
        d.kind,
        DiagKind::Limit,
        "a unary chain is too long before it is too deep"
    );
    let d = fail(&format!(
        "@workload w() {{ {} }}",
        "sequential { ".repeat(100_000)
    ));
    assert_eq!(d.kind, DiagKind::Nesting);
}

#[test]
fn overflow() {
    is(
        &fail("@workload w() { cond 2147483648 { } }"),
        DiagKind::Overflow,
        1,
        22,
        "integer 2147483648 does not fit in 32 bits (the largest is 2147483647)",
    );
    is(
        &fail("@workload w() { parallel_for i in dense[4294967296] { } }"),
        DiagKind::Overflow,
        1,
        41,
        "extent 4294967296 does not fit in 32 bits",
    );
    is(
        &fail("@workload w() { cond 99999999999999999999 { } }"),
        DiagKind::Overflow,
        1,
        22,
        "integer literal 99999999999999999999 does not fit in 64 bits",
    );
    is(
        &fail("@tensor A: f16[0]\n@workload w() {}"),
        DiagKind::Overflow,
        1,
        16,
        "dimension 0 is outside 1..=2147483647",
    );
    is(
        &fail("@workload w() { }\n@schedule s for w { aicpus = 65 }"),
        DiagKind::Overflow,
        2,
        30,
        "the AICPU count must be in 1..=64",
    );
    is(
        &fail("@workload w() { }\n@schedule s for w { window = 0 }"),
        DiagKind::Overflow,
        2,
        30,
        "the task window must be at least 1",
    );
}

#[test]
fn limit() {
    let args = vec!["1"; 17].join(", ");
    is(
        &fail(&format!("@workload w() {{ task @k({args}) }}")),
        DiagKind::Limit,
        1,
        23,
        "17 task parameters; the limit is 16",
    );
    let e = (0..9).map(|i| format!("(a{i} + ")).collect::<String>() + "1" + &")".repeat(9);
    let d = fail(&format!("@workload w() {{ cond {e} {{ }} }}"));
    assert_eq!(d.kind, DiagKind::Limit, "{d}");
    assert!(
        d.message
            .starts_with("expression too complex: it needs 10 evaluation stack entries"),
        "{d}"
    );
    let long = vec!["x"; 40].join(" + ");
    let d = fail(&format!("@workload w() {{ cond {long} {{ }} }}"));
    assert_eq!(
        d.message,
        "expression too long: more than 63 operators and operands (the bytecode limit is 64 nodes)"
    );
}

#[test]
fn listing_errors() {
    let d = fail(".ptow 3\n");
    assert_eq!((d.kind, d.line, d.col), (DiagKind::Listing, 1, 7));
    assert_eq!(
        d.message,
        "unsupported listing version \"3\"; this assembler reads and writes version 8"
    );
    let d = fail(".ptow 8\n.workload w\n.schedule s\n.code\n0 HALT\n1 FROB x=1\n");
    assert_eq!(
        (d.kind, d.line, d.col, d.message.as_str()),
        (DiagKind::UnknownName, 6, 3, "unknown opcode \"FROB\"")
    );
    let d = fail(".ptow 8\n.code\n0 PARALLEL_FOR axis=0\n");
    assert_eq!((d.line, d.message.as_str()), (3, "missing field `end`"));
    let d = fail(".ptow 8\n.code\n0 NOP x=1\n");
    assert_eq!(
        (d.line, d.col, d.message.as_str()),
        (3, 7, "unknown field `x`")
    );
    let d = fail(".ptow 8\n.code\n1 NOP\n");
    assert_eq!(d.message, "instruction index 1 out of sequence; expected 0");
    let d = fail(".ptow 8\n.code\n0 PARAM_CONST value=2147483648\n");
    assert_eq!(
        (d.kind, d.message.as_str()),
        (DiagKind::Overflow, "2147483648 is larger than 2147483647")
    );
}

#[test]
fn verify_errors_in_listings_point_at_the_line() {
    let src = ".ptow 8\n.workload w\n.schedule s\n.config workload_level=cpu schedule_level=cpu aicpus=1 policy=round_robin depth=0 key=- levels=0 selector=- streams=1 timing=immediate timing_arg=0 ready=fifo start=immediate start_threshold=0 window=8 window_mode=stall pipeline_depth=0 batch_deps=0\n.code\n0 NOP\n1 PARALLEL_FOR axis=3 end=2\n2 HALT\n";
    let d = fail(src);
    assert_eq!((d.kind, d.line, d.col), (DiagKind::Verify, 7, 1), "{d}");
    assert_eq!(d.message, "the listing does not describe a valid program: instruction 1 (byte offset 200): axis index 3 is out of range (table has 0)");
}

#[test]
fn warnings() {
    let src = "@workload w() { task @k() resources(A) }\n@schedule s for w { color = blue(3) streams = 2 }";
    let out = assemble("t.pto", src, &Options::default()).unwrap();
    let w: Vec<(DiagKind, usize, usize)> = out
        .warnings
        .iter()
        .map(|d| (d.kind, d.line, d.col))
        .collect();
    assert_eq!(
        w,
        vec![
            (DiagKind::UnknownKnob, 2, 21),
            (DiagKind::NoEffect, 2, 37),
            (DiagKind::UndeclaredKernel, 1, 23),
            (DiagKind::UndeclaredTensor, 1, 37)
        ]
    );
    assert!(out.warnings.iter().all(|d| d.severity == Severity::Warning));
    assert_eq!(
        out.module.config.streams.get(),
        2,
        "the knob after an unknown one still applies"
    );
}

#[test]
fn carets_handle_tabs_and_unicode() {
    let d = fail("// héllo wörld\n@workload w() {\n\tfrob\n}");
    assert_eq!((d.line, d.col), (3, 2));
    assert!(d.to_string().ends_with("3 |  frob\n  |  ^^^^"), "{d}");
    let d = fail("@workload w() { ü }");
    assert_eq!(
        (d.col, d.message.as_str()),
        (17, "unexpected character 'ü'")
    );
}

#[test]
fn long_operator_chains_are_rejected_without_deep_recursion() {
    // A left-associative chain builds a deep tree; it is cut at the bytecode's expression
    // limit while parsing, so neither lowering nor dropping the tree can overflow the stack.
    let chain = vec!["1"; 200_000].join(" + ");
    let d = fail(&format!("@workload w() {{ cond {chain} {{ }} }}"));
    assert_eq!(d.kind, DiagKind::Limit, "{d}");
    assert_eq!(
        d.message,
        "expression too long: more than 63 operators and operands (the bytecode limit is 64 nodes)"
    );
    assert_eq!(
        d.col,
        22 + 4 * 31 + 2,
        "the caret is on the operator that crosses the limit"
    );
}

#[test]
fn names_longer_than_the_string_table_allows() {
    let long = "k".repeat(256);
    let d = fail(&format!("@workload w() {{ task @{long}() }}"));
    assert_eq!(
        (d.kind, d.col, d.message.as_str()),
        (DiagKind::Limit, 23, "a name of 256 bytes; the limit is 255")
    );
    let d = fail(&format!("@workload {long}() {{ }}"));
    assert_eq!(d.kind, DiagKind::Limit);
    let d = fail(&format!(
        "@workload w() {{ parallel_for i in dense_dyn({long}) {{ }} }}"
    ));
    assert_eq!(d.kind, DiagKind::Limit);
    let ok = "k".repeat(255);
    assert!(assemble(
        "t.pto",
        &format!("@workload w() {{ task @{ok}() resources({ok}) }}"),
        &Options::default()
    )
    .is_ok());
}

#[test]
fn loop_variables_out_of_scope_are_not_runtime_parameters() {
    let d = fail(
        "@workload w() {\n  dispatch affinity(e) { parallel_for e in dense[2] { task @k(e) } }\n}",
    );
    assert_eq!((d.kind, d.line, d.col), (DiagKind::UnknownName, 2, 21));
    assert_eq!(d.message, "loop variable `e` is not bound here (it belongs to a loop that does not enclose this point)");
}

#[test]
fn pto_wsp_constructs() {
    // Levels: unknown, and PTO-WSP's rule (no parallel_for in an NPU-level workload).
    is(
        &fail("@workload[gpu] w() { }"),
        DiagKind::UnknownName,
        1,
        11,
        "unknown level `gpu`; expected `npu` or `cpu`",
    );
    is(
        &fail("@workload[npu] w() {\n  for_each i in dense[2] { parallel_for j in dense[2] { task @k(i) } }\n}"),
        DiagKind::Type,
        2,
        28,
        "`parallel_for` cannot appear in NPU-level workload `w` (PTO-WSP's level rule): use `for_each`, or make the workload `@workload[cpu]`",
    );
    // Calls: unknown callee, a cycle, the wrong number of arguments, a value used as an axis.
    is(
        &fail("@workload w() { call @nope() }"),
        DiagKind::UnknownName,
        1,
        23,
        "call of unknown workload `nope` (the module has: w)",
    );
    is(
        &fail("@workload a() { call @b() }\n@workload b() { call @a() }"),
        DiagKind::Recursion,
        2,
        23,
        "recursive call: a -> b -> a (a call is expanded inline, so it cannot recurse)",
    );
    is(
        &fail("@workload w() { call @a() }\n@workload a(%n: dense[2]) { task @k() }"),
        DiagKind::Arity,
        1,
        23,
        "workload `a` takes 1 parameter(s) but 0 are given",
    );
    is(
        &fail("@workload w(%m: dense[4]) { parallel_for j in %m { call @a(j) } }\n@workload a(%n: dense[2]) { parallel_for i in %n { task @k(i) } }"),
        DiagKind::Type,
        2,
        48,
        "`n` is a loop variable, a value, not an axis (`n` is bound to `j` by the call of `a` at line 1)",
    );
    // The header comes first; its text is printable ASCII.
    is(
        &fail("@workload w() { }\nmodule \"m\""),
        DiagKind::Syntax,
        2,
        1,
        "the module header (`module`) comes before the first `@` item",
    );
    is(
        &fail("module \"tab\\there\"\n@workload w() { task @k() }"),
        DiagKind::Type,
        1,
        8,
        "module-header text must be printable ASCII without `\"` or `\\` (the bytecode stores it as is)",
    );
    is(
        &fail("module \"open\n@workload w() { }"),
        DiagKind::Syntax,
        1,
        8,
        "unterminated string: a closing `\"` is missing on this line",
    );
    // Layout: an unknown tensor, a rank mismatch, a mesh axis past the format's.
    let body = "@tensor A: f16[4, 4]\n@workload w() { task @k() resources(A, B) }\n";
    is(
        &fail(&format!("{body}@schedule s for w {{ layout C = (R) }}")),
        DiagKind::UnknownName,
        3,
        28,
        "layout of unknown tensor `C`: it is neither declared with `@tensor` nor used by workload `w`",
    );
    is(
        &fail(&format!("{body}@schedule s for w {{ layout A = (R) }}")),
        DiagKind::Type,
        3,
        28,
        "the layout of `A` gives 1 dimension(s) but the tensor has rank 2",
    );
    is(
        &fail(&format!("{body}@schedule s for w {{ layout B = (S(14)) }}")),
        DiagKind::Limit,
        3,
        33,
        "mesh axis 14; the format records S(0) to S(13)",
    );
    is(
        &fail(&format!(
            "{body}@schedule s for w {{ layout A = (R, R) layout A = (R, R) }}"
        )),
        DiagKind::DuplicateName,
        3,
        46,
        "the layout of `A` is given twice",
    );
    // spatial_map is refused; task_window counts tasks.
    is(
        &fail("@workload w() { task @k() }\n@schedule s for w { spatial_map = (4, 4) }"),
        DiagKind::Type,
        2,
        35,
        "`spatial_map` is not supported: ptovm places tasks on the cube and vector pools of one NPU by dispatch policy, not on a spatial tile grid (remove the knob)",
    );
    is(
        &fail("@workload w() { task @k() }\n@schedule s for w { task_window = 64 bytes }"),
        DiagKind::Type,
        2,
        38,
        "ptovm's task window counts tasks; `bytes` is not supported (write `task_window = N` or `N tasks`)",
    );
}

#[test]
fn param_defaults() {
    let ok = assemble(
        "t.pto",
        "@param n = 3\n@param lens = [1, 2, 3]\n@param unused = 1\n@workload w() { parallel_for i in dense_dyn(lens[n - 1]) { task @k(i) } }",
        &Options::default(),
    )
    .unwrap();
    let p = &ok.module.params;
    assert_eq!(
        (p[0].name.as_str(), p[0].default.clone()),
        ("lens", Some(vec![1, 2, 3]))
    );
    assert_eq!(
        (p[1].name.as_str(), p[1].default.clone()),
        ("n", Some(vec![3]))
    );
    assert_eq!(
        p.len(),
        2,
        "a declared parameter the workload never reads gets no slot"
    );
    assert!(ok.warnings.iter().any(|w| w.kind == DiagKind::NoEffect
        && w.message == "runtime parameter `unused` is declared but workload `w` never reads it; it gets no slot"));
    is(
        &fail("@param n = 3\n@param n = 4\n@workload w() { task @k(n) }"),
        DiagKind::DuplicateName,
        2,
        8,
        "runtime parameter `n` is already declared at line 1",
    );
    is(
        &fail("@param n = [3]\n@workload w() { task @k(n) }"),
        DiagKind::Type,
        2,
        25,
        "runtime parameter `n` is used as scalar here but declared as array at line 1",
    );
    is(
        &fail("@param n = 4294967296\n@workload w() { task @k(n) }"),
        DiagKind::Overflow,
        1,
        12,
        "a runtime parameter's value 4294967296 does not fit in 32 bits",
    );
}

#[test]
fn kernel_costs() {
    let w = "@tensor A: f16[4, 8]\n@workload w() {\n  parallel_for i in dense[4] { task @k(i) resources(A[i]) }\n}\n";
    // Assembles: parameters, sizes, extents, runtime parameters, a unit.
    let ok = format!(
        "@kernel k(i): vector(out a) cost(10 + i * size(a) + extent(a, 1) * n, cycles)\n{w}"
    );
    assemble("t.pto", &ok, &Options::default()).unwrap();
    is(
        &fail(&format!("@kernel k(i): vector(out a) cost(size(b))\n{w}")),
        DiagKind::UnknownName,
        1,
        39,
        "kernel `k` has no argument `b` (its arguments: a)",
    );
    is(
        &fail(&format!(
            "@kernel k(i): vector(out a) cost(extent(a, 8))\n{w}"
        )),
        DiagKind::Limit,
        1,
        44,
        "dimension 8: a region has at most 8 dimensions (0 .. 7)",
    );
    is(
        &fail(&format!("@kernel k(i): vector(out a) cost(1, hours)\n{w}")),
        DiagKind::Type,
        1,
        37,
        "`hours` is not a unit of a cost: `ns` or `cycles`",
    );
    is(
        &fail(&format!("@kernel k(j): vector(out a) cost(i * 2)\n{w}")),
        DiagKind::Type,
        1,
        34,
        "`i` is a loop variable; a kernel's cost reads its own parameters, `size(arg)`, `extent(arg, d)` and runtime parameters",
    );
    is(
        &fail(&format!("{K}@tensor A: f16[4]\n@workload w() {{\n  parallel_for i in dense[size(a)] {{ }}\n}}\n")),
        DiagKind::Syntax,
        4,
        27,
        "expected an extent, found `size`",
    );
    is(
        &fail(&format!("{K}@tensor A: f16[4]\n@workload w() {{\n  parallel_for i in dense[4] {{ task @k(size(a)) resources(A[i]) }}\n}}\n")),
        DiagKind::Type,
        4,
        40,
        "`size(…)` and `extent(…)` measure a task's region: they may only be used in a kernel's `cost(…)`",
    );
}

#[test]
fn core_allocation_and_core_limits() {
    let w = "@tensor A: f16[4]\n@workload w() {\n  parallel_for i in dense[4] { task @k(i) resources(A[i]) }\n}\n";
    // Assembles: a limit, with the other attributes in any order, and the schedule's knob.
    let ok = format!(
        "@kernel k(i): vector(out a) cores(3) workspace(64) cost(10)\n{w}@schedule s for w {{ cores = partition }}\n"
    );
    let out = assemble("t.pto", &ok, &Options::default()).unwrap();
    assert_eq!(out.module.kernels[0].entry.core_limit.get(), 3);
    assert_eq!(out.module.config.cores, 1);
    is(
        &fail(&format!("@kernel k(i): vector(out a) cores(0)\n{w}")),
        DiagKind::Overflow,
        1,
        35,
        "a core limit of 0: the kernel's tasks could never run (at least 1)",
    );
    is(
        &fail(&format!("@kernel k(i): vector(out a) cores(65536)\n{w}")),
        DiagKind::Overflow,
        1,
        35,
        "a core limit of 65536; the largest is 65535",
    );
    is(
        &fail(&format!("@kernel k(i): vector(out a) cores(2) cores(3)\n{w}")),
        DiagKind::Syntax,
        1,
        38,
        "expected `@workload`, `@schedule`, `@tensor`, `@kernel`, `@param`, `@plan`, `@tiers` or a header line (`module \"name\"`), found `cores`",
    );
    is(
        &fail(&format!("{K}{w}@schedule s for w {{ cores = spread }}\n")),
        DiagKind::Type,
        6,
        29,
        "unknown core allocation `spread`; expected shared or partition",
    );
    is(
        &fail(&format!(
            "{K}{w}@schedule s for w {{ cores = shared(2) }}\n"
        )),
        DiagKind::Type,
        6,
        36,
        "`shared` takes no argument",
    );
}
