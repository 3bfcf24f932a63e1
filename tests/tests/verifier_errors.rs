//! One test per verifier error variant: each builds a small program that breaks exactly one rule
//! and checks the error kind, the section, the record index and the byte offset it reports.

use ptovm_assembler::model::{Kernel, Module, Param, Tensor};
use ptovm_vm::format::{
    checksum, KernelEntry, PolicySpec, RegionDim, TensorEntry, COND_HAS_ELSE, LAYOUT_REPLICATE,
    LAYOUT_SHARD, NONE16, TENSOR_STREAM,
};
use ptovm_vm::{
    verify, ErrorKind, ExprOp, ExprProblem, InfoKind, Opcode, ParamKind, Policy, Record, Section,
    Timing, VerifyError,
};
use zerocopy::little_endian::{U16, U32};

fn r(op: Opcode, flags: u8, op1: u16, op2: u32) -> Record {
    Record::new(op as u8, flags, op1, op2)
}

fn e(op: ExprOp, op1: u16, op2: u32) -> Record {
    Record::new(op as u8, 0, op1, op2)
}

/// A valid base program: one loop of four tasks writing `A[i]`.
fn base() -> Module {
    let mut m = Module::new("w", "s");
    m.params = vec![
        Param {
            name: "n".into(),
            kind: ParamKind::Scalar,
            default: None,
        },
        Param {
            name: "arr".into(),
            kind: ParamKind::Array,
            default: None,
        },
    ];
    let mut t = TensorEntry {
        dtype: 3,
        rank: 1,
        ..Default::default()
    };
    t.dims[0] = U32::new(4);
    m.tensors = vec![Tensor {
        name: "A".into(),
        entry: t,
    }];
    m.kernels = vec![Kernel {
        name: "k".into(),
        entry: KernelEntry {
            pool: 0,
            num_params: 1,
            num_args: 1,
            arg_dirs: U32::new(2),
            ..Default::default()
        },
    }];
    m.axes = vec![
        r(Opcode::AXIS_DENSE, 0, 0, 4),
        r(Opcode::AXIS_DENSE_DYN, 0, 0, 0),
        r(Opcode::AXIS_SPARSE, 0, 1, 1 << 16), // row = expr 0, indices = slot 1
    ];
    m.exprs = vec![
        e(ExprOp::VAR, 0, 0),
        e(ExprOp::END, 0, 0),
        e(ExprOp::CONST, 0, 0),
        e(ExprOp::END, 0, 0),
    ];
    m.regions = vec![
        RegionDim {
            start: U16::new(0),
            end: U16::new(NONE16),
        }, // [i]
        RegionDim {
            start: U16::new(2),
            end: U16::new(NONE16),
        }, // [0]
    ];
    m.code = vec![
        r(Opcode::PARALLEL_FOR, 0, 0, 4),
        r(Opcode::TASK, 0, 0, 1 | 1 << 16),
        r(Opcode::PARAM_LOOPVAR, 0, 0, 0),
        r(Opcode::IO_OUTPUT, 1, 0, 0),
        r(Opcode::HALT, 0, 0, 0),
    ];
    m
}

/// A task block that needs no enclosing loop: `task @k(3) resources(A[0])`.
fn task0() -> Vec<Record> {
    vec![
        r(Opcode::TASK, 0, 0, 1 | 1 << 16),
        r(Opcode::PARAM_CONST, 0, 0, 3),
        r(Opcode::IO_OUTPUT, 1, 0, 1),
    ]
}

/// `body` as the whole program, followed by HALT.
fn program(body: Vec<Record>) -> Module {
    let mut m = base();
    m.code = body;
    m.code.push(r(Opcode::HALT, 0, 0, 0));
    m
}

fn err(bytes: &[u8]) -> VerifyError {
    verify(bytes).expect_err("should be rejected")
}

fn check(m: &Module) -> VerifyError {
    err(&m.encode())
}

/// Byte offset of instruction `pc` (the code section follows the header and config).
fn code_off(pc: usize) -> usize {
    64 + 128 + 8 * pc
}

fn refix(mut b: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&b);
    b[28..32].copy_from_slice(&sum.to_le_bytes());
    b
}

fn at(e: &VerifyError, section: Section, index: Option<u32>) {
    assert_eq!((e.at.section, e.at.index), (section, index), "{e}");
}

#[test]
fn base_program_verifies() {
    let m = base();
    let b = m.encode();
    let v = verify(&b).unwrap();
    assert_eq!(v.task_sites(), 1);
    assert_eq!(v.max_loop_depth(), 1);
    assert_eq!(Module::decode(&v), m);
}

#[test]
fn too_short() {
    let e = err(&base().encode()[..63]);
    assert_eq!(e.kind, ErrorKind::TooShort { len: 63 });
    assert_eq!(
        e.to_string(),
        "header (byte offset 0): file is 63 bytes, shorter than the 64-byte header"
    );
}

#[test]
fn bad_magic() {
    let mut b = base().encode();
    b[3] = 0;
    assert_eq!(err(&b).kind, ErrorKind::BadMagic { found: 0x0054_4F57 });
}

#[test]
fn unsupported_version() {
    let mut b = base().encode();
    b[4] = 1;
    let e = err(&refix(b));
    assert_eq!(e.kind, ErrorKind::UnsupportedVersion { found: 1 });
    assert_eq!(e.at.offset, 4);
}

#[test]
fn length_mismatch() {
    let mut b = base().encode();
    let n = b.len();
    b.extend_from_slice(&[0; 8]);
    assert_eq!(
        err(&b).kind,
        ErrorKind::LengthMismatch {
            declared: n as u32,
            actual: n + 8
        }
    );
    assert_eq!(
        err(&b[..n - 1]).kind,
        ErrorKind::LengthMismatch {
            declared: n as u32,
            actual: n - 1
        }
    );
}

#[test]
fn bad_checksum() {
    let mut b = base().encode();
    let n = b.len();
    b[n - 20] ^= 1;
    let e = err(&b);
    assert!(matches!(e.kind, ErrorKind::BadChecksum { .. }), "{e}");
    assert_eq!(e.at.offset, 28);
}

#[test]
fn section_size_mismatch() {
    let mut b = base().encode();
    b[12] += 1; // one more axis than the bytes hold
    let e = err(&refix(b));
    assert!(
        matches!(e.kind, ErrorKind::SectionSizeMismatch { .. }),
        "{e}"
    );
}

#[test]
fn limit_exceeded() {
    let mut b = base().encode();
    b[40..44].copy_from_slice(&257u32.to_le_bytes());
    let e = err(&refix(b));
    assert_eq!(
        e.kind,
        ErrorKind::LimitExceeded {
            what: "parameter count",
            value: 257,
            max: 256
        }
    );
    assert_eq!(e.at.offset, 40);
}

#[test]
fn too_small() {
    let mut m = base();
    m.config.window = U32::new(0);
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::TooSmall {
            what: "task window",
            value: 0,
            min: 1
        }
    );
    at(&e, Section::Config, None);
    assert_eq!(e.at.offset, 64 + 104);
    let mut m = base();
    m.config.num_aicpus = U16::new(0);
    assert!(matches!(
        check(&m).kind,
        ErrorKind::TooSmall {
            what: "num_aicpus",
            ..
        }
    ));
}

#[test]
fn non_zero() {
    let mut b = base().encode();
    b[48] = 1;
    assert_eq!(
        err(&refix(b)).kind,
        ErrorKind::NonZero {
            what: "header flags"
        }
    );
    let mut m = base();
    m.code[0].flags = 0x80; // PARALLEL_FOR uses no flags
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::NonZero {
            what: "unused operand bits"
        }
    );
    at(&e, Section::Code, Some(0));
    assert_eq!(e.at.offset, code_off(0));
}

#[test]
fn bad_code() {
    let mut m = base();
    m.tensors[0].entry.dtype = 200;
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::BadCode {
            what: "dtype",
            value: 200
        }
    );
    at(&e, Section::Tensors, Some(0));
    let mut m = base();
    m.kernels[0].entry.pool = 2;
    assert_eq!(
        check(&m).kind,
        ErrorKind::BadCode {
            what: "pool",
            value: 2
        }
    );
}

#[test]
fn name_not_canonical() {
    let m = base();
    let mut b = m.encode();
    // Kernel 0's name offset (kernels follow code and axes).
    let k = 64 + 128 + 8 * m.code.len() + 8 * m.axes.len();
    b[k] += 1;
    let e = err(&refix(b));
    assert!(matches!(e.kind, ErrorKind::NameNotCanonical { .. }), "{e}");
    at(&e, Section::Kernels, Some(0));
}

#[test]
fn bad_name() {
    let mut m = base();
    m.kernels[0].name = "9lives".into();
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::BadName);
    at(&e, Section::Kernels, Some(0));
    let mut m = base();
    m.workload = String::new();
    assert_eq!(check(&m).kind, ErrorKind::BadName);
}

#[test]
fn strtab_slack() {
    let mut m = base();
    m.kernels[0].name = "kk".into();
    let names: usize = 1 + 1 + 1 + 3 + 1 + 2; // w s n arr A kk
    assert_ne!(names % 8, 0, "a padding byte exists to take");
    let mut b = m.encode();
    b[44] += 1; // claim one more byte of names (the padding byte, zero)
    let e = err(&refix(b));
    assert_eq!(
        e.kind,
        ErrorKind::StrtabSlack {
            len: names as u32 + 1,
            used: names as u32
        }
    );
}

#[test]
fn unknown_opcode() {
    let mut m = base();
    m.code[0] = Record::new(0x77, 0, 0, 0);
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::UnknownOpcode { byte: 0x77 });
    assert_eq!(
        e.to_string(),
        format!(
            "instruction 0 (byte offset {}): unknown opcode 0x77",
            code_off(0)
        )
    );
}

#[test]
fn misplaced() {
    let mut m = base();
    m.code.insert(0, r(Opcode::AXIS_DENSE, 0, 0, 1));
    m.code[1] = r(Opcode::PARALLEL_FOR, 0, 0, 5);
    assert_eq!(
        check(&m).kind,
        ErrorKind::Misplaced {
            op: "AXIS_DENSE",
            place: "in the code section"
        }
    );
    let mut m = base();
    m.code.insert(0, r(Opcode::HALT, 0, 0, 0));
    m.code[1] = r(Opcode::PARALLEL_FOR, 0, 0, 5);
    assert_eq!(
        check(&m).kind,
        ErrorKind::Misplaced {
            op: "HALT",
            place: "before the last instruction"
        }
    );
    let mut m = base();
    m.code.insert(0, r(Opcode::PARAM_CONST, 0, 0, 1));
    m.code[1] = r(Opcode::PARALLEL_FOR, 0, 0, 5);
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::Misplaced {
            op: "PARAM_CONST",
            place: "outside a TASK's operands"
        }
    );
    at(&e, Section::Code, Some(0));
    let mut m = base();
    m.axes[0] = r(Opcode::NOP, 0, 0, 0);
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::Misplaced {
            op: "NOP",
            place: "in the axis section"
        }
    );
    at(&e, Section::Axes, Some(0));
}

#[test]
fn missing_halt() {
    let mut m = base();
    let n = m.code.len();
    m.code[n - 1] = r(Opcode::NOP, 0, 0, 0);
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::MissingHalt);
    at(&e, Section::Code, Some(n as u32 - 1));
}

#[test]
fn bad_end() {
    let mut m = base();
    m.code[0] = r(Opcode::PARALLEL_FOR, 0, 0, 5); // past the HALT
    assert_eq!(
        check(&m).kind,
        ErrorKind::BadEnd {
            end: 5,
            lo: 1,
            hi: 4
        }
    );
    let mut m = base();
    m.code[0] = r(Opcode::PARALLEL_FOR, 0, 0, 0);
    assert_eq!(
        check(&m).kind,
        ErrorKind::BadEnd {
            end: 0,
            lo: 1,
            hi: 4
        }
    );
}

#[test]
fn nesting_too_deep() {
    let mut m = base();
    let depth = 33usize;
    let inner = depth + 1; // NOP at index `depth`, HALT after
    m.code = (0..depth)
        .map(|_| r(Opcode::COMBINE, 0, 1, inner as u32))
        .collect();
    m.code.push(r(Opcode::NOP, 0, 0, 0));
    m.code.push(r(Opcode::HALT, 0, 0, 0));
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::NestingTooDeep { max: 32 });
    at(&e, Section::Code, Some(32));
    // 32 deep is fine.
    m.code.remove(0);
    for c in m.code.iter_mut().take(32) {
        *c = r(Opcode::COMBINE, 0, 1, 33);
    }
    verify(&m.encode()).unwrap();
}

#[test]
fn loop_too_deep() {
    let mut m = base();
    let n = 17usize;
    m.code = (0..n)
        .map(|_| r(Opcode::PARALLEL_FOR, 0, 0, n as u32 + 1))
        .collect();
    m.code.push(r(Opcode::NOP, 0, 0, 0));
    m.code.push(r(Opcode::HALT, 0, 0, 0));
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::LoopTooDeep { max: 16 });
    at(&e, Section::Code, Some(16));
}

#[test]
fn child_count() {
    let mut body = vec![r(Opcode::COMBINE, 0, 3, 5)];
    body.extend(task0());
    body.push(r(Opcode::NOP, 0, 0, 0));
    let e = check(&program(body.clone()));
    assert_eq!(
        e.kind,
        ErrorKind::ChildCount {
            op: "COMBINE",
            declared: 3,
            found: 2
        }
    );
    at(&e, Section::Code, Some(0));
    body[0] = r(Opcode::COMBINE, 0, 2, 5);
    verify(&program(body).encode()).unwrap();
}

#[test]
fn else_not_sequential() {
    let mut body = vec![r(Opcode::COND, COND_HAS_ELSE, 2, 4)];
    body.extend(task0());
    body.push(r(Opcode::NOP, 0, 0, 0));
    let e = check(&program(body.clone()));
    assert_eq!(e.kind, ErrorKind::ElseNotSequential { end: 4 });
    // With the else block in place it verifies.
    body[4] = r(Opcode::SEQUENTIAL, 0, 1, 6);
    body.push(r(Opcode::NOP, 0, 0, 0));
    verify(&program(body).encode()).unwrap();
    // The else block belongs to the COND: the enclosing SEQUENTIAL has one child, not two.
    let mut outer = vec![
        r(Opcode::SEQUENTIAL, 0, 1, 7),
        r(Opcode::COND, COND_HAS_ELSE, 2, 5),
    ];
    outer.extend(task0());
    outer.push(r(Opcode::SEQUENTIAL, 0, 1, 7));
    outer.push(r(Opcode::NOP, 0, 0, 0));
    verify(&program(outer.clone()).encode()).unwrap();
    outer[0] = r(Opcode::SEQUENTIAL, 0, 2, 7);
    assert_eq!(
        check(&program(outer)).kind,
        ErrorKind::ChildCount {
            op: "SEQUENTIAL",
            declared: 2,
            found: 1
        }
    );
}

#[test]
fn out_of_range() {
    let mut m = base();
    m.code[1] = r(Opcode::TASK, 0, 9, 1 | 1 << 16);
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::OutOfRange {
            what: "kernel",
            index: 9,
            len: 1
        }
    );
    at(&e, Section::Code, Some(1));
    let mut m = base();
    m.code[0] = r(Opcode::PARALLEL_FOR, 0, 7, 4);
    assert_eq!(
        check(&m).kind,
        ErrorKind::OutOfRange {
            what: "axis",
            index: 7,
            len: 3
        }
    );
    let mut m = base();
    m.code[3] = r(Opcode::IO_OUTPUT, 1, 5, 0);
    assert_eq!(
        check(&m).kind,
        ErrorKind::OutOfRange {
            what: "tensor",
            index: 5,
            len: 1
        }
    );
    let mut m = base();
    m.code[3] = r(Opcode::IO_OUTPUT, 1, 0, 2);
    assert_eq!(
        check(&m).kind,
        ErrorKind::OutOfRange {
            what: "region",
            index: 2,
            len: 2
        }
    );
}

#[test]
fn slot_kind() {
    let mut m = base();
    m.axes[1] = r(Opcode::AXIS_DENSE_DYN, 0, 1, 0); // slot 1 is an array
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::SlotKind {
            slot: 1,
            expected: "scalar"
        }
    );
    at(&e, Section::Axes, Some(1));
}

#[test]
fn select_not_sparse() {
    let mut m = base();
    m.code[0] = r(Opcode::SELECT, 0, 0, 4);
    assert_eq!(check(&m).kind, ErrorKind::SelectNotSparse { axis: 0 });
    m.code[0] = r(Opcode::SELECT, 0, 2, 4);
    // The sparse axis' row expression reads loop depth 0, unbound at the outermost loop.
    assert_eq!(
        check(&m).kind,
        ErrorKind::UnboundLoopVar { depth: 0, bound: 0 }
    );
}

#[test]
fn task_operand() {
    let mut m = base();
    m.code[2] = r(Opcode::IO_OUTPUT, 1, 0, 0);
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::TaskOperand {
            position: 0,
            expected: "a PARAM_* record",
            found: "IO_OUTPUT"
        }
    );
    at(&e, Section::Code, Some(2));
    let mut m = base();
    m.code[0] = r(Opcode::PARALLEL_FOR, 0, 0, 3); // the body ends before the IO record
    m.code[3] = r(Opcode::NOP, 0, 0, 0);
    assert_eq!(
        check(&m).kind,
        ErrorKind::TaskOperand {
            position: 1,
            expected: "an IO_* record",
            found: "the end of the enclosing body"
        }
    );
}

#[test]
fn arity() {
    let mut m = base();
    m.code[1] = r(Opcode::TASK, 0, 0, 2 | 1 << 16);
    m.code.insert(3, r(Opcode::PARAM_CONST, 0, 0, 1));
    m.code[0] = r(Opcode::PARALLEL_FOR, 0, 0, 5);
    assert_eq!(
        check(&m).kind,
        ErrorKind::Arity {
            kernel: 0,
            what: "parameters",
            expected: 1,
            found: 2
        }
    );
}

#[test]
fn direction() {
    let mut m = base();
    m.code[3] = r(Opcode::IO_INPUT, 1, 0, 0);
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::Direction {
            kernel: 0,
            position: 0,
            declared: "out",
            found: "IO_INPUT"
        }
    );
    at(&e, Section::Code, Some(3));
}

#[test]
fn region_rank() {
    let mut m = base();
    m.code[3] = r(Opcode::IO_OUTPUT, 2, 0, 0);
    assert_eq!(
        check(&m).kind,
        ErrorKind::RegionRank {
            dims: 2,
            tensor: 0,
            rank: 1
        }
    );
}

#[test]
fn expr_problems() {
    let mut m = base();
    m.exprs[0] = e(ExprOp::ADD, 0, 0);
    let err = check(&m);
    assert_eq!(
        err.kind,
        ErrorKind::Expr {
            node: 0,
            problem: ExprProblem::Underflow
        }
    );
    at(&err, Section::Exprs, Some(0));
    let mut m = base();
    m.exprs.truncate(3);
    assert_eq!(
        check(&m).kind,
        ErrorKind::Expr {
            node: 3,
            problem: ExprProblem::Unterminated
        }
    );
    let mut m = base();
    m.exprs[1] = e(ExprOp::VAR, 0, 0);
    m.exprs[2] = e(ExprOp::END, 0, 0);
    m.exprs[3] = e(ExprOp::END, 0, 0);
    assert_eq!(
        check(&m).kind,
        ErrorKind::Expr {
            node: 2,
            problem: ExprProblem::NotSingle(2)
        }
    );
    let mut m = base();
    m.exprs = (0..9).map(|_| e(ExprOp::CONST, 0, 1)).collect();
    assert_eq!(
        check(&m).kind,
        ErrorKind::Expr {
            node: 8,
            problem: ExprProblem::Overflow
        }
    );
    let mut m = base();
    m.exprs = vec![Record::new(0x99, 0, 0, 0)];
    assert_eq!(
        check(&m).kind,
        ErrorKind::Expr {
            node: 0,
            problem: ExprProblem::UnknownOp(0x99)
        }
    );
}

#[test]
fn unbound_loop_var() {
    let mut m = base();
    m.code[2] = r(Opcode::PARAM_LOOPVAR, 0, 1, 0);
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::UnboundLoopVar { depth: 1, bound: 1 });
    at(&e, Section::Code, Some(2));
}

#[test]
fn dispatch_depth() {
    let mut m = program(task0());
    m.config.policy = PolicySpec {
        kind: Policy::Affinity as u8,
        depth: 0,
        key: U16::new(0),
    };
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::DispatchDepth {
            needed_minus_one: 0,
            have: 0
        }
    );
    at(&e, Section::Code, Some(0));
    let mut m = base();
    m.config.policy = PolicySpec {
        kind: Policy::Affinity as u8,
        depth: 0,
        key: U16::new(0),
    };
    verify(&m.encode()).unwrap();
}

#[test]
fn threshold() {
    let mut m = base();
    let c = &mut m.config;
    c.policy = PolicySpec {
        kind: Policy::Threshold as u8,
        depth: 0,
        key: U16::new(NONE16),
    };
    c.selector = U16::new(2);
    c.num_levels = 2;
    c.thresholds[0] = U32::new(8);
    c.thresholds[1] = U32::new(u32::MAX);
    c.levels[0] = PolicySpec {
        kind: Policy::StaticPartition as u8,
        depth: 0,
        key: U16::new(NONE16),
    };
    c.levels[1] = PolicySpec {
        kind: Policy::RoundRobin as u8,
        depth: 0,
        key: U16::new(NONE16),
    };
    verify(&m.encode()).unwrap();
    let mut bad = m.clone();
    bad.config.thresholds[0] = U32::new(u32::MAX);
    assert_eq!(
        check(&bad).kind,
        ErrorKind::Threshold {
            problem: "thresholds must strictly increase"
        }
    );
    let mut bad = m.clone();
    bad.config.thresholds[1] = U32::new(9);
    assert!(matches!(check(&bad).kind, ErrorKind::Threshold { .. }));
    let mut bad = m.clone();
    bad.config.selector = U16::new(0); // VAR 0: a loop variable in a launch-time selector
    assert_eq!(
        check(&bad).kind,
        ErrorKind::Expr {
            node: 0,
            problem: ExprProblem::VarNotAllowed
        }
    );
}

/// Every error variant has a distinct code, and every variant is exercised above.
#[test]
fn error_codes_are_distinct() {
    use std::collections::HashSet;
    let kinds = [
        ErrorKind::TooShort { len: 0 },
        ErrorKind::BadMagic { found: 0 },
        ErrorKind::UnsupportedVersion { found: 0 },
        ErrorKind::LengthMismatch {
            declared: 0,
            actual: 0,
        },
        ErrorKind::SectionSizeMismatch {
            implied: 0,
            declared: 0,
        },
        ErrorKind::BadChecksum {
            stored: 0,
            computed: 0,
        },
        ErrorKind::LimitExceeded {
            what: "",
            value: 0,
            max: 0,
        },
        ErrorKind::TooSmall {
            what: "",
            value: 0,
            min: 0,
        },
        ErrorKind::NonZero { what: "" },
        ErrorKind::BadCode { what: "", value: 0 },
        ErrorKind::NameNotCanonical {
            off: 0,
            len: 0,
            expected: 0,
        },
        ErrorKind::BadName,
        ErrorKind::StrtabSlack { len: 0, used: 0 },
        ErrorKind::UnknownOpcode { byte: 0 },
        ErrorKind::Misplaced { op: "", place: "" },
        ErrorKind::MissingHalt,
        ErrorKind::BadEnd {
            end: 0,
            lo: 0,
            hi: 0,
        },
        ErrorKind::NestingTooDeep { max: 0 },
        ErrorKind::LoopTooDeep { max: 0 },
        ErrorKind::ChildCount {
            op: "",
            declared: 0,
            found: 0,
        },
        ErrorKind::ElseNotSequential { end: 0 },
        ErrorKind::OutOfRange {
            what: "",
            index: 0,
            len: 0,
        },
        ErrorKind::SlotKind {
            slot: 0,
            expected: "",
        },
        ErrorKind::SelectNotSparse { axis: 0 },
        ErrorKind::TaskOperand {
            position: 0,
            expected: "",
            found: "",
        },
        ErrorKind::Arity {
            kernel: 0,
            what: "",
            expected: 0,
            found: 0,
        },
        ErrorKind::Direction {
            kernel: 0,
            position: 0,
            declared: "",
            found: "",
        },
        ErrorKind::RegionRank {
            dims: 0,
            tensor: 0,
            rank: 0,
        },
        ErrorKind::Expr {
            node: 0,
            problem: ExprProblem::Underflow,
        },
        ErrorKind::UnboundLoopVar { depth: 0, bound: 0 },
        ErrorKind::DispatchDepth {
            needed_minus_one: 0,
            have: 0,
        },
        ErrorKind::Threshold { problem: "" },
    ];
    let at = ptovm_vm::Location {
        section: Section::Header,
        index: None,
        offset: 0,
    };
    let codes: HashSet<u8> = kinds
        .iter()
        .map(|k| VerifyError { kind: *k, at }.code())
        .collect();
    assert_eq!(codes.len(), kinds.len());
}

/// `base()` with a module header, defaults for both slots and a layout.
fn with_v3_fields() -> Module {
    let mut m = base();
    m.info = vec![
        (InfoKind::Module, "demo".into()),
        (InfoKind::Version, "9.1".into()),
        (InfoKind::Target, "cpu_sim".into()),
    ];
    m.params[0].default = Some(vec![4]);
    m.params[1].default = Some(vec![0, 1]);
    m.tensors[0].entry.layout = U32::new(LAYOUT_SHARD); // S(0) on a rank-1 tensor
    m
}

#[test]
fn module_header_defaults_and_layout_read_back() {
    let m = with_v3_fields();
    let b = m.encode();
    let v = verify(&b).unwrap();
    assert_eq!(Module::decode(&v), m);
    assert_eq!(v.info_text(&v.module_info()[0]), "demo");
    assert_eq!(
        v.param_default(1).and_then(|d| match d {
            ptovm_vm::ParamDefault::Array(a) => Some(a.iter().map(|x| x.get()).collect::<Vec<_>>()),
            _ => None,
        }),
        Some(vec![0, 1])
    );
}

#[test]
fn bad_text() {
    let mut m = with_v3_fields();
    m.info[1].1 = "9\"1".into();
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::BadText);
    at(&e, Section::ModuleInfo, Some(1));
}

#[test]
fn info_order() {
    let mut m = with_v3_fields();
    m.info.swap(0, 1); // version before module
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::InfoOrder);
    at(&e, Section::ModuleInfo, Some(1));
    let mut m = with_v3_fields();
    m.info.push((InfoKind::Version, "again".into()));
    assert_eq!(check(&m).kind, ErrorKind::InfoOrder);
    let mut b = with_v3_fields().encode();
    let off = verify(&b).unwrap().layout().range(Section::ModuleInfo).0;
    b[off + 6] = 3; // kind
    let e = err(&refix(b));
    assert_eq!(
        e.kind,
        ErrorKind::BadCode {
            what: "module-header entry kind",
            value: 3
        }
    );
}

#[test]
fn bad_default() {
    let good = with_v3_fields().encode();
    let params = verify(&good).unwrap().layout().range(Section::Params).0;
    // Slot 0 (a scalar) claims two values.
    let mut b = good.clone();
    b[params + 12] = 2;
    let e = err(&refix(b));
    assert_eq!(
        e.kind,
        ErrorKind::BadDefault {
            slot: 0,
            problem: "a scalar's default is one value"
        }
    );
    at(&e, Section::Params, Some(0));
    // Slot 1's default starts past where slot 0's ends.
    let mut b = good.clone();
    b[params + 16 + 8] = 2;
    assert_eq!(
        err(&refix(b)).kind,
        ErrorKind::BadDefault {
            slot: 1,
            problem: "its default does not start where the previous slot's ends"
        }
    );
    // Slot 1 uses one of its two values: the pool holds a value no slot uses.
    let mut b = good.clone();
    b[params + 16 + 12] = 1;
    let e = err(&refix(b));
    assert_eq!(
        e.kind,
        ErrorKind::BadDefault {
            slot: 2,
            problem: "the default-value pool holds values no slot uses"
        }
    );
    assert_eq!(e.at.section, Section::Defaults);
    // No default flag, yet a length.
    let mut b = good;
    b[params + 16 + 7] = 0;
    assert_eq!(
        err(&refix(b)).kind,
        ErrorKind::BadDefault {
            slot: 1,
            problem: "a slot without a default has default length 0"
        }
    );
}

#[test]
fn layout_rank_and_level() {
    let mut m = with_v3_fields();
    m.tensors[0].entry.layout = U32::new(LAYOUT_REPLICATE | LAYOUT_REPLICATE << 4);
    let e = check(&m);
    assert_eq!(e.kind, ErrorKind::LayoutRank { len: 2, rank: 1 });
    at(&e, Section::Tensors, Some(0));
    m.tensors[0].entry.layout = U32::new(LAYOUT_REPLICATE << 4); // dimension 0 unset
    assert_eq!(
        check(&m).kind,
        ErrorKind::NonZero {
            what: "layout codes after an unset dimension"
        }
    );
    let mut m = with_v3_fields();
    m.config.level = 0x20; // schedule level 2
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::BadCode {
            what: "level",
            value: 2
        }
    );
    assert_eq!(e.at.offset, 64 + 19);
}

/// The base program under `stream_by`: a stream-order tensor of 2 streams (tensor 1) and each
/// task's stream record, `A`'s record then `IO_INOUT stream[i % 2]`.
fn streamed() -> Module {
    let mut m = base();
    let mut t = TensorEntry {
        rank: 1,
        flags: U32::new(TENSOR_STREAM),
        ..Default::default()
    };
    t.dims[0] = U32::new(2);
    m.config.streams = U16::new(2);
    m.tensors.push(Tensor {
        name: "stream_order".into(),
        entry: t,
    });
    let key = m.exprs.len() as u16;
    m.exprs.extend([
        e(ExprOp::VAR, 0, 0),
        e(ExprOp::CONST, 0, 2),
        e(ExprOp::MOD, 0, 0),
        e(ExprOp::END, 0, 0),
    ]);
    m.regions.push(RegionDim {
        start: U16::new(key),
        end: U16::new(NONE16),
    });
    m.code = vec![
        r(Opcode::PARALLEL_FOR, 0, 0, 5),
        r(Opcode::TASK, 0, 0, 1 | 2 << 16),
        r(Opcode::PARAM_LOOPVAR, 0, 0, 0),
        r(Opcode::IO_OUTPUT, 1, 0, 0),
        r(Opcode::IO_INOUT, 1, 1, 2),
        r(Opcode::HALT, 0, 0, 0),
    ];
    m
}

#[test]
fn stream_order() {
    let good = streamed();
    assert_eq!(verify(&good.encode()).unwrap().stream_tensor(), Some(1));
    let problem = |m: &Module| match check(m).kind {
        ErrorKind::StreamOrder { problem } => problem,
        other => panic!("{other:?}"),
    };
    // The tensor: one dimension, the config's stream count.
    let mut m = good.clone();
    m.config.streams = U16::new(3);
    assert!(problem(&m).contains("the config's stream count"));
    at(&check(&m), Section::Tensors, Some(1));
    let mut m = good.clone();
    m.tensors[1].entry.dtype = 3;
    assert!(problem(&m).contains("no dtype"));
    let mut m = good.clone();
    m.tensors[1].entry.flags = U32::new(TENSOR_STREAM | 1);
    assert!(problem(&m).contains("implicit"));
    let mut m = good.clone();
    m.tensors.push(m.tensors[1].clone());
    assert!(problem(&m).contains("second"));
    // The task: the stream record last, an IO_INOUT of one index.
    let mut m = good.clone();
    m.code[1] = r(Opcode::TASK, 0, 0, 1 | 1 << 16);
    m.code.remove(4);
    m.code[0] = r(Opcode::PARALLEL_FOR, 0, 0, 4);
    assert_eq!(
        check(&m).kind,
        ErrorKind::Arity {
            kernel: 0,
            what: "IO regions",
            expected: 2,
            found: 1
        }
    );
    let mut m = good.clone();
    m.code[4] = r(Opcode::IO_OUTPUT, 1, 1, 2);
    assert!(problem(&m).contains("last IO record"));
    at(&check(&m), Section::Code, Some(4));
    let mut m = good.clone();
    m.regions[2].end = U16::new(0); // [i % 2, i)
    assert!(problem(&m).contains("one index"));
    // Only the last record may name it.
    let mut m = good.clone();
    m.code[3] = r(Opcode::IO_OUTPUT, 1, 1, 0);
    assert!(problem(&m).contains("only a task's last"));
    at(&check(&m), Section::Code, Some(3));
    // `interleaved(n)` rotates over the streams: it needs the tensor and names their count.
    let mut m = good.clone();
    m.config.timing = Timing::Interleaved as u8;
    m.config.timing_arg = U32::new(2);
    assert!(verify(&m.encode()).is_ok());
    m.config.timing_arg = U32::new(3);
    assert!(problem(&m).contains("interleaved timing"));
    at(&check(&m), Section::Config, None);
    let mut m = base();
    m.config.timing = Timing::Interleaved as u8;
    m.config.timing_arg = U32::new(1);
    assert!(problem(&m).contains("interleaved timing"));
}

#[test]
fn a_workspace_larger_than_the_arena() {
    let mut m = base();
    m.kernels[0].entry.workspace = U16::new(2); // 128 bytes
    assert!(
        verify(&m.encode()).is_ok(),
        "an arena sized at launch fits it"
    );
    m.config.workspace_arena = U32::new(64);
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::Workspace {
            kernel: 0,
            need: 128,
            arena: 64
        }
    );
    at(&e, Section::Kernels, Some(0));
    m.config.workspace_arena = U32::new(128);
    assert!(verify(&m.encode()).is_ok());
    // An undeclared kernel has no workspace.
    let mut m = base();
    m.kernels[0].entry = KernelEntry {
        flags: ptovm_vm::format::KERNEL_UNDECLARED,
        workspace: U16::new(1),
        ..Default::default()
    };
    assert!(matches!(check(&m).kind, ErrorKind::NonZero { .. }));
}

/// The base program with kernel 0 costing the expression at node 4 (appended: `nodes`, END).
fn costed(nodes: Vec<Record>, unit: u8) -> Module {
    let mut m = base();
    m.exprs.extend(nodes);
    m.exprs.push(e(ExprOp::END, 0, 0));
    m.kernels[0].entry.cost_expr = U16::new(4);
    m.kernels[0].entry.cost_unit = unit;
    m
}

#[test]
fn kernel_costs() {
    // A valid cost: 100 + a0 * size(r0), in cycles.
    let ok = costed(
        vec![
            e(ExprOp::CONST, 0, 100),
            e(ExprOp::ARG, 0, 0),
            e(ExprOp::SIZE, 0, 0),
            e(ExprOp::MUL, 0, 0),
            e(ExprOp::ADD, 0, 0),
        ],
        1,
    );
    let b = ok.encode();
    let v = verify(&b).unwrap();
    assert_eq!(
        v.kernels()[0].cost(),
        Some((4, ptovm_vm::format::CostUnit::Cycles))
    );
    // A parameter the kernel's tasks do not pass, a region they do not name.
    let e1 = check(&costed(vec![e(ExprOp::ARG, 1, 0)], 0));
    assert_eq!(
        e1.kind,
        ErrorKind::OutOfRange {
            what: "task parameter of the kernel",
            index: 1,
            len: 1
        }
    );
    at(&e1, Section::Kernels, Some(0));
    let e2 = check(&costed(vec![e(ExprOp::SIZE, 1, 0)], 0));
    assert!(
        matches!(
            e2.kind,
            ErrorKind::OutOfRange {
                what: "region of the kernel",
                index: 1,
                ..
            }
        ),
        "{e2}"
    );
    // A dimension past the rank limit (context-free check of the pool).
    let e3 = check(&costed(vec![e(ExprOp::SIZE, 0, 9)], 0));
    assert!(matches!(e3.kind, ErrorKind::LimitExceeded { .. }), "{e3}");
    // No loop variable in a cost.
    let e4 = check(&costed(vec![e(ExprOp::VAR, 0, 0)], 0));
    assert_eq!(
        e4.kind,
        ErrorKind::Expr {
            node: 4,
            problem: ExprProblem::VarNotAllowed
        }
    );
    // A unit that is neither ns nor cycles; a unit without a cost.
    let e5 = check(&costed(vec![e(ExprOp::CONST, 0, 1)], 2));
    assert_eq!(
        e5.kind,
        ErrorKind::BadCode {
            what: "cost unit",
            value: 2
        }
    );
    let mut m = base();
    m.kernels[0].entry.cost_unit = 1;
    assert!(matches!(check(&m).kind, ErrorKind::NonZero { .. }));
    // A cost that does not start an expression (node 5 is inside `CONST 1, END`'s... here the
    // base's node 1 is END, node 2 starts one: node 3 does not).
    let mut m = base();
    m.kernels[0].entry.cost_expr = U16::new(3);
    assert_eq!(
        check(&m).kind,
        ErrorKind::Expr {
            node: 3,
            problem: ExprProblem::NotStart
        }
    );
    // An index past the pool.
    let mut m = base();
    m.kernels[0].entry.cost_expr = U16::new(40);
    assert!(matches!(
        check(&m).kind,
        ErrorKind::OutOfRange {
            what: "expression",
            ..
        }
    ));
    // Reserved bytes.
    let mut m = base();
    m.kernels[0].entry.reserved1 = U16::new(1);
    assert!(matches!(check(&m).kind, ErrorKind::NonZero { .. }));
    // An undeclared kernel has no cost.
    let mut m = costed(vec![e(ExprOp::CONST, 0, 1)], 0);
    m.kernels[0].entry = KernelEntry {
        flags: ptovm_vm::format::KERNEL_UNDECLARED,
        cost_expr: U16::new(4),
        ..Default::default()
    };
    m.code[1] = r(Opcode::TASK, 0, 0, 1 << 16);
    m.code.remove(2);
    assert!(
        matches!(check(&m).kind, ErrorKind::NonZero { .. }),
        "{}",
        check(&m)
    );
}

#[test]
fn task_parameters_and_sizes_are_read_in_costs_only() {
    // `ARG` as a task's parameter expression: refused where the instruction uses it.
    let mut m = base();
    m.exprs[0] = e(ExprOp::ARG, 0, 0);
    let err = check(&m);
    assert_eq!(
        err.kind,
        ErrorKind::Expr {
            node: 0,
            problem: ExprProblem::CostOnly
        }
    );
    // `SIZE` in a planned value.
    let mut m = base();
    m.exprs.push(e(ExprOp::SIZE, 0, 0));
    m.exprs.push(e(ExprOp::END, 0, 0));
    m.plans = vec![ptovm_assembler::model::Plan {
        name: "p".into(),
        expr: 4,
    }];
    let err = check(&m);
    assert_eq!(
        err.kind,
        ErrorKind::Expr {
            node: 4,
            problem: ExprProblem::CostOnly
        }
    );
}

/// PTOW v8 (spec/bytecode.md §3.1, §3.4): the schedule's core allocation and a kernel's core
/// limit.
#[test]
fn core_allocation_and_core_limits() {
    let mut m = base();
    m.config.cores = 1;
    m.kernels[0].entry.core_limit = U16::new(3);
    assert!(verify(&m.encode()).is_ok(), "partition and a limit of 3");
    m.config.cores = 2;
    let e = check(&m);
    assert_eq!(
        e.kind,
        ErrorKind::BadCode {
            what: "core allocation",
            value: 2
        }
    );
    assert_eq!(e.at.offset, 64 + 116);
    let mut m = base();
    m.config.reserved2[1] = 1;
    assert!(matches!(check(&m).kind, ErrorKind::NonZero { .. }));
    let mut m = base();
    m.config.reserved3[0] = U32::new(1);
    assert!(matches!(check(&m).kind, ErrorKind::NonZero { .. }));
    // An undeclared kernel has no limit.
    let mut m = base();
    m.kernels[0].entry = KernelEntry {
        flags: ptovm_vm::format::KERNEL_UNDECLARED,
        core_limit: U16::new(1),
        ..Default::default()
    };
    assert_eq!(
        check(&m).kind,
        ErrorKind::NonZero {
            what: "the core limit of an undeclared kernel"
        }
    );
}
