//! The verifier: the only way to obtain a [`Verified`] program. It checks every byte of the file
//! against spec/bytecode.md §7 in one bounded pass, with no recursion, no heap and no panics, so
//! later stages (the interpreter, the disassembler) need no checks of their own.

use core::mem::offset_of;

use zerocopy::FromBytes;

use crate::error::{ErrorKind, ExprProblem, Location, VerifyError};
use crate::format::{
    checksum, limits, padded_strtab, sizes, Config, Header, KernelEntry, Layout, ParamEntry,
    PolicySpec, Record, RegionDim, Section, TensorEntry, COND_HAS_ELSE, DIM_IS_SLOT,
    KERNEL_UNDECLARED, MAGIC, NONE16, TENSOR_IMPLICIT, VERSION,
};
use crate::opcodes::{Dir, ExprKind, ExprOp, OpClass, Opcode};
use crate::{DType, ParamKind, Policy, Pool, ReadyPolicy, StartPolicy, Timing, WindowMode};

/// A program the verifier accepted: zero-copy views over the original bytes.
#[derive(Clone, Copy, Debug)]
pub struct Verified<'a> {
    bytes: &'a [u8],
    layout: Layout,
    header: &'a Header,
    config: &'a Config,
    code: &'a [Record],
    axes: &'a [Record],
    kernels: &'a [KernelEntry],
    tensors: &'a [TensorEntry],
    params: &'a [ParamEntry],
    exprs: &'a [Record],
    regions: &'a [RegionDim],
    strtab: &'a [u8],
    max_loop_depth: u32,
    task_sites: u32,
}

impl<'a> Verified<'a> {
    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Section byte ranges.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The header.
    pub fn header(&self) -> &'a Header {
        self.header
    }
    /// The configuration section.
    pub fn config(&self) -> &'a Config {
        self.config
    }
    /// Instructions; the last is `HALT`.
    pub fn code(&self) -> &'a [Record] {
        self.code
    }
    /// Axis definitions.
    pub fn axes(&self) -> &'a [Record] {
        self.axes
    }
    /// Kernel table.
    pub fn kernels(&self) -> &'a [KernelEntry] {
        self.kernels
    }
    /// Tensor table.
    pub fn tensors(&self) -> &'a [TensorEntry] {
        self.tensors
    }
    /// Runtime-parameter slots.
    pub fn params(&self) -> &'a [ParamEntry] {
        self.params
    }
    /// Expression pool.
    pub fn exprs(&self) -> &'a [Record] {
        self.exprs
    }
    /// Region table.
    pub fn regions(&self) -> &'a [RegionDim] {
        self.regions
    }
    /// Deepest loop nesting in the code.
    pub fn max_loop_depth(&self) -> u32 {
        self.max_loop_depth
    }
    /// Number of `TASK` instructions.
    pub fn task_sites(&self) -> u32 {
        self.task_sites
    }
    /// The largest number of IO regions of any task site (0 without tasks): what a
    /// scheduler's TensorMap sizes its entries by.
    pub fn max_task_io(&self) -> u32 {
        self.code
            .iter()
            .filter(|r| r.opcode == crate::Opcode::TASK as u8)
            .map(|r| r.op2() >> 16)
            .max()
            .unwrap_or(0)
    }
    /// The largest number of IO regions of any task site whose region a TensorMap must store
    /// (0 without tasks): every region but those its key is the whole of — no dimension named
    /// (the whole tensor), or one or two dimensions each named by a single index, which a map
    /// rebuilds from the key (`tmap`, spec/runtime.md §3.3). Never above [`Self::max_task_io`].
    pub fn max_stored_io(&self) -> u32 {
        let code = &self.code;
        let mut most = 0;
        for (pc, r) in code.iter().enumerate() {
            if r.opcode != crate::Opcode::TASK as u8 {
                continue;
            }
            let (np, nio) = ((r.op2() & 0xFFFF) as usize, (r.op2() >> 16) as usize);
            let first = pc + 1 + np;
            let stored = code
                .get(first..first + nio)
                .unwrap_or(&[])
                .iter()
                .filter(|o| !self.keyed_io(o))
                .count() as u32;
            most = most.max(stored);
        }
        most
    }

    /// Whether every region of IO record `o` is its key: no named dimension, or one or two
    /// each named by a single index.
    fn keyed_io(&self, o: &crate::Record) -> bool {
        let ndims = o.flags as usize;
        if ndims > 2 {
            return false;
        }
        let first = o.op2() as usize;
        self.regions
            .get(first..first + ndims)
            .is_some_and(|dims| dims.iter().all(|d| d.end.get() == crate::format::NONE16))
    }

    /// A name from the string table (verified to be an ASCII identifier).
    pub fn name(&self, off: u32, len: u32) -> &'a str {
        let s = self
            .strtab
            .get(off as usize..off as usize + len as usize)
            .unwrap_or(&[]);
        core::str::from_utf8(s).unwrap_or("")
    }
    /// The workload's name.
    pub fn workload_name(&self) -> &'a str {
        self.name(
            self.config.workload_name_off.get(),
            self.config.workload_name_len.get() as u32,
        )
    }
    /// The schedule's name.
    pub fn schedule_name(&self) -> &'a str {
        self.name(
            self.config.schedule_name_off.get(),
            self.config.schedule_name_len.get() as u32,
        )
    }
}

type R<T> = Result<T, VerifyError>;

fn err(kind: ErrorKind, section: Section, index: Option<u32>, offset: usize) -> VerifyError {
    VerifyError {
        kind,
        at: Location {
            section,
            index,
            offset,
        },
    }
}

fn limit(what: &'static str, value: u32, max: u32, at: Location) -> R<()> {
    if value > max {
        return Err(VerifyError {
            kind: ErrorKind::LimitExceeded {
                what,
                value: value as u64,
                max: max as u64,
            },
            at,
        });
    }
    Ok(())
}

fn is_ident(s: &[u8]) -> bool {
    match s.first() {
        Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {}
        _ => return false,
    }
    s.len() <= limits::MAX_NAME_LEN && s.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// Verifies a PTOW file. On success the returned [`Verified`] borrows `bytes`.
pub fn verify(bytes: &[u8]) -> R<Verified<'_>> {
    let hdr_at = |off: usize| Location {
        section: Section::Header,
        index: None,
        offset: off,
    };
    let Some(hbytes) = bytes.get(..sizes::HEADER) else {
        return Err(VerifyError {
            kind: ErrorKind::TooShort { len: bytes.len() },
            at: hdr_at(0),
        });
    };
    let Ok(header) = Header::ref_from_bytes(hbytes) else {
        return Err(VerifyError {
            kind: ErrorKind::TooShort { len: bytes.len() },
            at: hdr_at(0),
        });
    };
    if header.magic.get() != MAGIC {
        return Err(VerifyError {
            kind: ErrorKind::BadMagic {
                found: header.magic.get(),
            },
            at: hdr_at(0),
        });
    }
    if header.version.get() != VERSION {
        return Err(VerifyError {
            kind: ErrorKind::UnsupportedVersion {
                found: header.version.get(),
            },
            at: hdr_at(offset_of!(Header, version)),
        });
    }
    let declared = header.total_len.get();
    if declared as usize != bytes.len() {
        return Err(VerifyError {
            kind: ErrorKind::LengthMismatch {
                declared,
                actual: bytes.len(),
            },
            at: hdr_at(offset_of!(Header, total_len)),
        });
    }
    limit(
        "file length",
        declared,
        limits::MAX_TOTAL_LEN,
        hdr_at(offset_of!(Header, total_len)),
    )?;
    let computed = checksum(bytes);
    if computed != header.checksum.get() {
        return Err(VerifyError {
            kind: ErrorKind::BadChecksum {
                stored: header.checksum.get(),
                computed,
            },
            at: hdr_at(offset_of!(Header, checksum)),
        });
    }
    let counts: [(&'static str, u32, u32, usize); 8] = [
        (
            "instruction count",
            header.num_instructions.get(),
            limits::MAX_INSTRUCTIONS,
            offset_of!(Header, num_instructions),
        ),
        (
            "axis count",
            header.num_axes.get(),
            limits::MAX_AXES,
            offset_of!(Header, num_axes),
        ),
        (
            "kernel count",
            header.num_kernels.get(),
            limits::MAX_KERNELS,
            offset_of!(Header, num_kernels),
        ),
        (
            "tensor count",
            header.num_tensors.get(),
            limits::MAX_TENSORS,
            offset_of!(Header, num_tensors),
        ),
        (
            "expression count",
            header.num_exprs.get(),
            limits::MAX_EXPRS,
            offset_of!(Header, num_exprs),
        ),
        (
            "region count",
            header.num_regions.get(),
            limits::MAX_REGIONS,
            offset_of!(Header, num_regions),
        ),
        (
            "parameter count",
            header.num_params.get(),
            limits::MAX_PARAMS,
            offset_of!(Header, num_params),
        ),
        (
            "string table length",
            header.strtab_len.get(),
            limits::MAX_STRTAB,
            offset_of!(Header, strtab_len),
        ),
    ];
    for (what, v, max, off) in counts {
        limit(what, v, max, hdr_at(off))?;
    }
    if header.flags.get() != 0 {
        return Err(err(
            ErrorKind::NonZero {
                what: "header flags",
            },
            Section::Header,
            None,
            offset_of!(Header, flags),
        ));
    }
    if header.reserved.iter().any(|r| r.get() != 0) {
        return Err(err(
            ErrorKind::NonZero {
                what: "header reserved words",
            },
            Section::Header,
            None,
            offset_of!(Header, reserved),
        ));
    }
    if header.num_instructions.get() == 0 {
        return Err(err(
            ErrorKind::TooSmall {
                what: "instruction count",
                value: 0,
                min: 1,
            },
            Section::Header,
            None,
            offset_of!(Header, num_instructions),
        ));
    }
    let layout = Layout::from_header(header);
    if layout.total != declared as usize {
        return Err(err(
            ErrorKind::SectionSizeMismatch {
                implied: layout.total,
                declared,
            },
            Section::Header,
            None,
            offset_of!(Header, total_len),
        ));
    }
    let sect = |s: Section| {
        let (off, len) = layout.range(s);
        bytes.get(off..off + len).unwrap_or(&[])
    };
    // Every slice below has exactly the length the layout gives it, so the views cannot fail;
    // failures are still mapped to errors rather than unwrapped.
    let bad_layout = |s: Section| {
        err(
            ErrorKind::SectionSizeMismatch {
                implied: layout.total,
                declared,
            },
            s,
            None,
            layout.range(s).0,
        )
    };
    let config =
        Config::ref_from_bytes(sect(Section::Config)).map_err(|_| bad_layout(Section::Config))?;
    let code =
        <[Record]>::ref_from_bytes(sect(Section::Code)).map_err(|_| bad_layout(Section::Code))?;
    let axes =
        <[Record]>::ref_from_bytes(sect(Section::Axes)).map_err(|_| bad_layout(Section::Axes))?;
    let kernels = <[KernelEntry]>::ref_from_bytes(sect(Section::Kernels))
        .map_err(|_| bad_layout(Section::Kernels))?;
    let tensors = <[TensorEntry]>::ref_from_bytes(sect(Section::Tensors))
        .map_err(|_| bad_layout(Section::Tensors))?;
    let params = <[ParamEntry]>::ref_from_bytes(sect(Section::Params))
        .map_err(|_| bad_layout(Section::Params))?;
    let exprs =
        <[Record]>::ref_from_bytes(sect(Section::Exprs)).map_err(|_| bad_layout(Section::Exprs))?;
    let regions = <[RegionDim]>::ref_from_bytes(sect(Section::Regions))
        .map_err(|_| bad_layout(Section::Regions))?;
    let strings = sect(Section::Strings);
    let strtab_len = header.strtab_len.get() as usize;
    let strtab = strings.get(..strtab_len).unwrap_or(&[]);
    let (str_off, _) = layout.range(Section::Strings);
    if let Some(p) = strings
        .get(strtab_len..)
        .and_then(|pad| pad.iter().position(|b| *b != 0))
    {
        return Err(err(
            ErrorKind::NonZero {
                what: "string table padding",
            },
            Section::Strings,
            None,
            str_off + strtab_len + p,
        ));
    }
    debug_assert_eq!(strings.len(), padded_strtab(strtab_len));

    let mut v = Verified {
        bytes,
        layout,
        header,
        config,
        code,
        axes,
        kernels,
        tensors,
        params,
        exprs,
        regions,
        strtab,
        max_loop_depth: 0,
        task_sites: 0,
    };
    let mut c = Checker { v: &v };
    c.strings()?;
    c.params()?;
    c.tensors()?;
    c.kernels()?;
    c.expr_pool()?;
    c.axes()?;
    c.regions()?;
    let need = c.config()?;
    let (depth, tasks) = c.code(need)?;
    v.max_loop_depth = depth;
    v.task_sites = tasks;
    Ok(v)
}

struct Checker<'v, 'a> {
    v: &'v Verified<'a>,
}

#[derive(Clone, Copy)]
struct Frame {
    end: u32,
    op: Option<Opcode>,
    children: u32,
    is_loop: bool,
    need: u32,
    at: u32,
}

impl<'v, 'a> Checker<'v, 'a> {
    fn loc(&self, s: Section, index: u32, width: usize) -> Location {
        Location {
            section: s,
            index: Some(index),
            offset: self.v.layout.range(s).0 + index as usize * width,
        }
    }
    fn cfg_loc(&self, field_off: usize) -> Location {
        Location {
            section: Section::Config,
            index: None,
            offset: self.v.layout.range(Section::Config).0 + field_off,
        }
    }
    fn code_loc(&self, pc: u32) -> Location {
        self.loc(Section::Code, pc, sizes::RECORD)
    }

    /// Names must be identifiers laid out back to back in canonical order: workload, schedule,
    /// params, tensors, kernels; together they fill the string table exactly.
    fn strings(&mut self) -> R<()> {
        let v = self.v;
        let mut expected = 0u32;
        let mut check = |off: u32, len: u32, at: Location| -> R<()> {
            if off != expected {
                return Err(VerifyError {
                    kind: ErrorKind::NameNotCanonical { off, len, expected },
                    at,
                });
            }
            let s = v.strtab.get(off as usize..off as usize + len as usize);
            match s {
                Some(s) if is_ident(s) => {}
                _ => {
                    return Err(VerifyError {
                        kind: ErrorKind::BadName,
                        at,
                    })
                }
            }
            expected += len;
            Ok(())
        };
        let c = v.config;
        check(
            c.workload_name_off.get(),
            c.workload_name_len.get() as u32,
            self.cfg_loc(offset_of!(Config, workload_name_off)),
        )?;
        check(
            c.schedule_name_off.get(),
            c.schedule_name_len.get() as u32,
            self.cfg_loc(offset_of!(Config, schedule_name_off)),
        )?;
        for (i, p) in v.params.iter().enumerate() {
            check(
                p.name_off.get(),
                p.name_len.get() as u32,
                self.loc(Section::Params, i as u32, sizes::PARAM),
            )?;
        }
        for (i, t) in v.tensors.iter().enumerate() {
            check(
                t.name_off.get(),
                t.name_len.get() as u32,
                self.loc(Section::Tensors, i as u32, sizes::TENSOR),
            )?;
        }
        for (i, k) in v.kernels.iter().enumerate() {
            check(
                k.name_off.get(),
                k.name_len.get() as u32,
                self.loc(Section::Kernels, i as u32, sizes::KERNEL),
            )?;
        }
        let len = v.header.strtab_len.get();
        if expected != len {
            return Err(err(
                ErrorKind::StrtabSlack {
                    len,
                    used: expected,
                },
                Section::Strings,
                None,
                v.layout.range(Section::Strings).0,
            ));
        }
        Ok(())
    }

    fn params(&mut self) -> R<()> {
        for (i, p) in self.v.params.iter().enumerate() {
            let at = self.loc(Section::Params, i as u32, sizes::PARAM);
            if ParamKind::from_u8(p.kind).is_none() {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "parameter kind",
                        value: p.kind as u32,
                    },
                    at,
                });
            }
            if p.reserved != 0 {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "parameter reserved byte",
                    },
                    at,
                });
            }
        }
        Ok(())
    }

    fn slot(&self, slot: u32, kind: ParamKind, at: Location) -> R<()> {
        let Some(p) = self.v.params.get(slot as usize) else {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "runtime slot",
                    index: slot,
                    len: self.v.params.len() as u32,
                },
                at,
            });
        };
        if p.kind != kind as u8 {
            return Err(VerifyError {
                kind: ErrorKind::SlotKind {
                    slot,
                    expected: kind.name(),
                },
                at,
            });
        }
        Ok(())
    }

    fn tensors(&mut self) -> R<()> {
        for (i, t) in self.v.tensors.iter().enumerate() {
            let at = self.loc(Section::Tensors, i as u32, sizes::TENSOR);
            let nz = |what| {
                Err(VerifyError {
                    kind: ErrorKind::NonZero { what },
                    at,
                })
            };
            if DType::from_u8(t.dtype).is_none() {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "dtype",
                        value: t.dtype as u32,
                    },
                    at,
                });
            }
            if t.reserved.get() != 0 {
                return nz("tensor reserved word");
            }
            let flags = t.flags.get();
            if flags & !TENSOR_IMPLICIT != 0 {
                return nz("undefined tensor flag bits");
            }
            let rank = t.rank as usize;
            limit("tensor rank", rank as u32, limits::MAX_RANK as u32, at)?;
            if flags & TENSOR_IMPLICIT != 0 {
                if t.dtype != DType::Unknown as u8 || rank != 0 {
                    return nz("dtype and rank of an implicit tensor");
                }
            } else if t.dtype == DType::Unknown as u8 {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "dtype of a declared tensor",
                        value: 0,
                    },
                    at,
                });
            }
            for (d, dim) in t.dims.iter().enumerate() {
                let dim = dim.get();
                if d >= rank {
                    if dim != 0 {
                        return nz("dimensions beyond the rank");
                    }
                } else if dim & DIM_IS_SLOT != 0 {
                    if dim & 0x7FFF_0000 != 0 {
                        return nz("bits 16..31 of a runtime dimension");
                    }
                    self.slot(dim & 0xFFFF, ParamKind::Scalar, at)?;
                } else if dim == 0 {
                    return Err(VerifyError {
                        kind: ErrorKind::TooSmall {
                            what: "tensor dimension",
                            value: 0,
                            min: 1,
                        },
                        at,
                    });
                }
            }
        }
        Ok(())
    }

    fn kernels(&mut self) -> R<()> {
        for (i, k) in self.v.kernels.iter().enumerate() {
            let at = self.loc(Section::Kernels, i as u32, sizes::KERNEL);
            let nz = |what| {
                Err(VerifyError {
                    kind: ErrorKind::NonZero { what },
                    at,
                })
            };
            if Pool::from_u8(k.pool).is_none() {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "pool",
                        value: k.pool as u32,
                    },
                    at,
                });
            }
            if k.reserved.get() != 0 {
                return nz("kernel reserved field");
            }
            if k.flags & !KERNEL_UNDECLARED != 0 {
                return nz("undefined kernel flag bits");
            }
            if k.flags & KERNEL_UNDECLARED != 0 {
                if k.num_params != 0 || k.num_args != 0 || k.arg_dirs.get() != 0 {
                    return nz("arity and directions of an undeclared kernel");
                }
                continue;
            }
            limit(
                "kernel parameter count",
                k.num_params as u32,
                limits::MAX_TASK_PARAMS as u32,
                at,
            )?;
            limit(
                "kernel argument count",
                k.num_args as u32,
                limits::MAX_KERNEL_ARGS as u32,
                at,
            )?;
            let dirs = k.arg_dirs.get();
            for a in 0..16u32 {
                let d = (dirs >> (2 * a)) & 3;
                if a < k.num_args as u32 {
                    if d == 0 {
                        return Err(VerifyError {
                            kind: ErrorKind::BadCode {
                                what: "argument direction",
                                value: 0,
                            },
                            at,
                        });
                    }
                } else if d != 0 {
                    return nz("directions beyond the argument count");
                }
            }
        }
        Ok(())
    }

    /// Context-free pass over the pool: it is a sequence of well-formed postfix expressions.
    fn expr_pool(&mut self) -> R<()> {
        let mut sp = 0u32;
        let mut len = 0usize;
        for (i, r) in self.v.exprs.iter().enumerate() {
            let at = self.loc(Section::Exprs, i as u32, sizes::RECORD);
            let e = |problem| {
                Err(VerifyError {
                    kind: ErrorKind::Expr {
                        node: i as u32,
                        problem,
                    },
                    at,
                })
            };
            let Some(op) = ExprOp::from_u8(r.opcode) else {
                return e(ExprProblem::UnknownOp(r.opcode));
            };
            if r.masked(op.fields()) != *r {
                return e(ExprProblem::NonCanonical);
            }
            len += 1;
            if len > limits::MAX_EXPR_LEN {
                return e(ExprProblem::TooLong);
            }
            match op {
                ExprOp::VAR => limit(
                    "loop depth",
                    r.op1() as u32,
                    limits::MAX_LOOP_DEPTH as u32 - 1,
                    at,
                )?,
                ExprOp::PARAM => self.slot(r.op1() as u32, ParamKind::Scalar, at)?,
                ExprOp::ELEM => self.slot(r.op1() as u32, ParamKind::Array, at)?,
                _ => {}
            }
            match op.kind() {
                ExprKind::End => {
                    if sp != 1 {
                        return e(ExprProblem::NotSingle(sp));
                    }
                    sp = 0;
                    len = 0;
                }
                ExprKind::Leaf => {
                    sp += 1;
                    if sp as usize > limits::MAX_EXPR_STACK {
                        return e(ExprProblem::Overflow);
                    }
                }
                ExprKind::Unary => {
                    if sp < 1 {
                        return e(ExprProblem::Underflow);
                    }
                }
                ExprKind::Binary => {
                    if sp < 2 {
                        return e(ExprProblem::Underflow);
                    }
                    sp -= 1;
                }
            }
        }
        if len != 0 {
            let n = self.v.exprs.len() as u32;
            return Err(VerifyError {
                kind: ErrorKind::Expr {
                    node: n,
                    problem: ExprProblem::Unterminated,
                },
                at: self.loc(Section::Exprs, n, sizes::RECORD),
            });
        }
        Ok(())
    }

    /// Checks the expression starting at node `idx` where `loops` loops enclose its use (or,
    /// with `loops == None`, where no loop variable may be read). Returns the number of
    /// enclosing loops it needs (deepest depth read + 1).
    fn expr(&self, idx: u32, loops: Option<u32>, at: Location) -> R<u32> {
        let n = self.v.exprs.len() as u32;
        if idx >= n {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "expression",
                    index: idx,
                    len: n,
                },
                at,
            });
        }
        let mut sp = 0u32;
        let mut need = 0u32;
        for i in idx..n.min(idx + limits::MAX_EXPR_LEN as u32) {
            let e = |problem| {
                Err(VerifyError {
                    kind: ErrorKind::Expr { node: i, problem },
                    at,
                })
            };
            let Some(r) = self.v.exprs.get(i as usize) else {
                break;
            };
            let Some(op) = ExprOp::from_u8(r.opcode) else {
                return e(ExprProblem::UnknownOp(r.opcode));
            };
            if op == ExprOp::VAR {
                let depth = r.op1() as u32;
                match loops {
                    None => return e(ExprProblem::VarNotAllowed),
                    Some(bound) if depth >= bound => {
                        return Err(VerifyError {
                            kind: ErrorKind::UnboundLoopVar { depth, bound },
                            at,
                        })
                    }
                    Some(_) => need = need.max(depth + 1),
                }
            }
            match op.kind() {
                ExprKind::End => {
                    if sp != 1 {
                        return e(ExprProblem::NotSingle(sp));
                    }
                    return Ok(need);
                }
                ExprKind::Leaf => sp += 1,
                ExprKind::Unary if sp < 1 => return e(ExprProblem::Underflow),
                ExprKind::Unary => {}
                ExprKind::Binary if sp < 2 => return e(ExprProblem::Underflow),
                ExprKind::Binary => sp -= 1,
            }
        }
        // Unreachable for a pool that passed `expr_pool`, kept as an error, not a panic.
        Err(VerifyError {
            kind: ErrorKind::Expr {
                node: idx,
                problem: ExprProblem::TooLong,
            },
            at,
        })
    }

    fn axes(&mut self) -> R<()> {
        for (i, r) in self.v.axes.iter().enumerate() {
            let at = self.loc(Section::Axes, i as u32, sizes::RECORD);
            let Some(op) = Opcode::from_u8(r.opcode) else {
                return Err(VerifyError {
                    kind: ErrorKind::UnknownOpcode { byte: r.opcode },
                    at,
                });
            };
            if op.class() != OpClass::Axis {
                return Err(VerifyError {
                    kind: ErrorKind::Misplaced {
                        op: op.mnemonic(),
                        place: "in the axis section",
                    },
                    at,
                });
            }
            if r.masked(op.fields()) != *r {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "unused operand bits",
                    },
                    at,
                });
            }
            let nexpr = self.v.exprs.len() as u32;
            let row_ok = |row: u32| -> R<()> {
                if row >= nexpr {
                    return Err(VerifyError {
                        kind: ErrorKind::OutOfRange {
                            what: "expression",
                            index: row,
                            len: nexpr,
                        },
                        at,
                    });
                }
                Ok(())
            };
            match op {
                Opcode::AXIS_DENSE_DYN => self.slot(r.op1() as u32, ParamKind::Scalar, at)?,
                Opcode::AXIS_RAGGED => {
                    self.slot(r.op1() as u32, ParamKind::Array, at)?;
                    row_ok(r.op2())?;
                }
                Opcode::AXIS_SPARSE => {
                    self.slot(r.op1() as u32, ParamKind::Array, at)?;
                    self.slot(r.op2() >> 16, ParamKind::Array, at)?;
                    row_ok(r.op2() & 0xFFFF)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn regions(&mut self) -> R<()> {
        let n = self.v.exprs.len() as u32;
        for (i, d) in self.v.regions.iter().enumerate() {
            let at = self.loc(Section::Regions, i as u32, sizes::REGION);
            for (e, what) in [(d.start.get(), false), (d.end.get(), true)] {
                if e as u32 >= n && !(what && e == NONE16) {
                    return Err(VerifyError {
                        kind: ErrorKind::OutOfRange {
                            what: "expression",
                            index: e as u32,
                            len: n,
                        },
                        at,
                    });
                }
            }
        }
        Ok(())
    }

    /// Checks one policy; returns the loops a task needs around it for the policy to apply.
    fn policy(&self, p: &PolicySpec, allow_threshold: bool, at: Location) -> R<u32> {
        let Some(kind) = Policy::from_u8(p.kind) else {
            return Err(VerifyError {
                kind: ErrorKind::BadCode {
                    what: "dispatch policy",
                    value: p.kind as u32,
                },
                at,
            });
        };
        let nz = |what| {
            Err(VerifyError {
                kind: ErrorKind::NonZero { what },
                at,
            })
        };
        match kind {
            Policy::RoundRobin | Policy::Threshold => {
                if kind == Policy::Threshold && !allow_threshold {
                    return Err(VerifyError {
                        kind: ErrorKind::Threshold {
                            problem: "a level cannot itself be a threshold policy",
                        },
                        at,
                    });
                }
                if p.depth != 0 || p.key.get() != NONE16 {
                    return nz("depth and key (must be 0 and 0xFFFF)");
                }
                Ok(0)
            }
            Policy::Affinity | Policy::Hash => {
                if p.depth != 0 {
                    return nz("depth of an affinity/hash policy");
                }
                self.expr(p.key.get() as u32, Some(limits::MAX_LOOP_DEPTH as u32), at)
            }
            Policy::StaticPartition => {
                if p.key.get() != NONE16 {
                    return nz("key of a static policy (must be 0xFFFF)");
                }
                limit(
                    "static partition depth",
                    p.depth as u32,
                    limits::MAX_LOOP_DEPTH as u32 - 1,
                    at,
                )?;
                Ok(p.depth as u32 + 1)
            }
        }
    }

    /// Returns the loops a task needs around it for the module's dispatch policy.
    fn config(&mut self) -> R<u32> {
        let c = self.v.config;
        let at = |o| self.cfg_loc(o);
        let code = |what: &'static str, value: u8, ok: bool, o: usize| -> R<()> {
            if ok {
                Ok(())
            } else {
                Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what,
                        value: value as u32,
                    },
                    at: self.cfg_loc(o),
                })
            }
        };
        let n = c.num_aicpus.get();
        if n == 0 {
            return Err(VerifyError {
                kind: ErrorKind::TooSmall {
                    what: "num_aicpus",
                    value: 0,
                    min: 1,
                },
                at: at(offset_of!(Config, num_aicpus)),
            });
        }
        limit(
            "num_aicpus",
            n as u32,
            limits::MAX_AICPUS as u32,
            at(offset_of!(Config, num_aicpus)),
        )?;
        let mut need = self.policy(&c.policy, true, at(offset_of!(Config, policy)))?;
        let threshold = c.policy.kind == Policy::Threshold as u8;
        let levels = c.num_levels as usize;
        if threshold {
            if levels == 0 {
                return Err(VerifyError {
                    kind: ErrorKind::Threshold {
                        problem: "needs at least one level",
                    },
                    at: at(offset_of!(Config, num_levels)),
                });
            }
            limit(
                "threshold levels",
                levels as u32,
                limits::MAX_LEVELS as u32,
                at(offset_of!(Config, num_levels)),
            )?;
            self.expr(
                c.selector.get() as u32,
                None,
                at(offset_of!(Config, selector)),
            )?;
            let mut prev: Option<u32> = None;
            for i in 0..levels {
                let t = c.thresholds[i].get();
                if prev.is_some_and(|p| t <= p) {
                    return Err(VerifyError {
                        kind: ErrorKind::Threshold {
                            problem: "thresholds must strictly increase",
                        },
                        at: at(offset_of!(Config, thresholds) + 4 * i),
                    });
                }
                prev = Some(t);
                need = need.max(self.policy(
                    &c.levels[i],
                    false,
                    at(offset_of!(Config, levels) + 4 * i),
                )?);
            }
            if prev != Some(u32::MAX) {
                return Err(VerifyError {
                    kind: ErrorKind::Threshold {
                        problem: "the last level's threshold must be 4294967295 (the catch-all)",
                    },
                    at: at(offset_of!(Config, thresholds) + 4 * (levels - 1)),
                });
            }
        } else if levels != 0 || c.selector.get() != NONE16 {
            return Err(VerifyError {
                kind: ErrorKind::NonZero {
                    what: "threshold fields of a non-threshold policy (levels 0, selector 0xFFFF)",
                },
                at: at(offset_of!(Config, num_levels)),
            });
        }
        for i in levels..limits::MAX_LEVELS {
            if c.thresholds[i].get() != 0 || c.levels[i] != PolicySpec::default() {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "unused threshold levels",
                    },
                    at: at(offset_of!(Config, thresholds) + 4 * i),
                });
            }
        }
        code(
            "timing",
            c.timing,
            Timing::from_u8(c.timing).is_some(),
            offset_of!(Config, timing),
        )?;
        code(
            "ready policy",
            c.ready,
            ReadyPolicy::from_u8(c.ready).is_some(),
            offset_of!(Config, ready),
        )?;
        code(
            "start policy",
            c.start,
            StartPolicy::from_u8(c.start).is_some(),
            offset_of!(Config, start),
        )?;
        code(
            "window mode",
            c.window_mode,
            WindowMode::from_u8(c.window_mode).is_some(),
            offset_of!(Config, window_mode),
        )?;
        if c.timing == Timing::Immediate as u8 && c.timing_arg.get() != 0 {
            return Err(VerifyError {
                kind: ErrorKind::NonZero {
                    what: "timing argument of immediate timing",
                },
                at: at(offset_of!(Config, timing_arg)),
            });
        }
        if c.timing != Timing::Immediate as u8 && c.timing_arg.get() == 0 {
            return Err(VerifyError {
                kind: ErrorKind::TooSmall {
                    what: "timing argument",
                    value: 0,
                    min: 1,
                },
                at: at(offset_of!(Config, timing_arg)),
            });
        }
        let st = c.start_threshold.get();
        if c.start == StartPolicy::Threshold as u8 {
            if st == 0 {
                return Err(VerifyError {
                    kind: ErrorKind::TooSmall {
                        what: "start threshold",
                        value: 0,
                        min: 1,
                    },
                    at: at(offset_of!(Config, start_threshold)),
                });
            }
        } else if st != 0 {
            return Err(VerifyError {
                kind: ErrorKind::NonZero {
                    what: "start threshold without start = threshold",
                },
                at: at(offset_of!(Config, start_threshold)),
            });
        }
        if c.streams.get() == 0 {
            return Err(VerifyError {
                kind: ErrorKind::TooSmall {
                    what: "streams",
                    value: 0,
                    min: 1,
                },
                at: at(offset_of!(Config, streams)),
            });
        }
        if c.window.get() == 0 {
            return Err(VerifyError {
                kind: ErrorKind::TooSmall {
                    what: "task window",
                    value: 0,
                    min: 1,
                },
                at: at(offset_of!(Config, window)),
            });
        }
        if c.reserved0 != 0 || c.reserved1.get() != 0 || c.reserved2.iter().any(|r| r.get() != 0) {
            return Err(VerifyError {
                kind: ErrorKind::NonZero {
                    what: "config reserved fields",
                },
                at: at(offset_of!(Config, reserved0)),
            });
        }
        Ok(need)
    }

    fn axis(&self, axis: u32, loops: u32, at: Location) -> R<Opcode> {
        let n = self.v.axes.len() as u32;
        let Some(r) = self.v.axes.get(axis as usize) else {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "axis",
                    index: axis,
                    len: n,
                },
                at,
            });
        };
        // Axis records were checked by `axes`; the opcode is an AXIS_* one.
        let op = Opcode::from_u8(r.opcode).unwrap_or(Opcode::AXIS_DENSE);
        match op {
            Opcode::AXIS_RAGGED => {
                self.expr(r.op2(), Some(loops), at)?;
            }
            Opcode::AXIS_SPARSE => {
                self.expr(r.op2() & 0xFFFF, Some(loops), at)?;
            }
            _ => {}
        }
        Ok(op)
    }

    /// The structural pass over the code section. Returns (deepest loop nesting, TASK count).
    fn code(&mut self, module_need: u32) -> R<(u32, u32)> {
        let code = self.v.code;
        let n = code.len() as u32;
        let last = n - 1;
        let halt = Record::new(Opcode::HALT as u8, 0, 0, 0);
        if code.get(last as usize) != Some(&halt) {
            return Err(VerifyError {
                kind: ErrorKind::MissingHalt,
                at: self.code_loc(last),
            });
        }
        let top = Frame {
            end: last,
            op: None,
            children: 0,
            is_loop: false,
            need: module_need,
            at: 0,
        };
        let mut stack = [top; limits::MAX_NESTING + 1];
        let mut sp = 0usize; // index of the top frame
        let mut loops = 0u32;
        let mut max_loops = 0u32;
        let mut tasks = 0u32;
        let mut else_pending = false;
        let mut pc = 0u32;
        loop {
            // Close every body that ends here.
            while sp > 0 && stack[sp].end == pc {
                let f = stack[sp];
                self.close(&f)?;
                if f.is_loop {
                    loops -= 1;
                }
                if f.op == Some(Opcode::COND) && code[f.at as usize].flags & COND_HAS_ELSE != 0 {
                    else_pending = true;
                }
                sp -= 1;
            }
            if pc >= last {
                break;
            }
            let at = self.code_loc(pc);
            let r = &code[pc as usize];
            let Some(op) = Opcode::from_u8(r.opcode) else {
                return Err(VerifyError {
                    kind: ErrorKind::UnknownOpcode { byte: r.opcode },
                    at,
                });
            };
            if r.masked(op.fields()) != *r {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "unused operand bits",
                    },
                    at,
                });
            }
            if else_pending {
                // The else block of the COND just closed belongs to that COND, not the parent.
                else_pending = false;
            } else {
                stack[sp].children += 1;
            }
            let parent_end = stack[sp].end;
            match op.class() {
                OpClass::Halt => {
                    return Err(VerifyError {
                        kind: ErrorKind::Misplaced {
                            op: "HALT",
                            place: "before the last instruction",
                        },
                        at,
                    })
                }
                OpClass::Param | OpClass::Io => {
                    return Err(VerifyError {
                        kind: ErrorKind::Misplaced {
                            op: op.mnemonic(),
                            place: "outside a TASK's operands",
                        },
                        at,
                    })
                }
                OpClass::Axis => {
                    return Err(VerifyError {
                        kind: ErrorKind::Misplaced {
                            op: op.mnemonic(),
                            place: "in the code section",
                        },
                        at,
                    })
                }
                OpClass::Nop => {}
                OpClass::Task => {
                    let used = self.task(pc, loops, stack[sp].need, parent_end)?;
                    tasks += 1;
                    pc += 1 + used;
                    continue;
                }
                OpClass::Loop | OpClass::Block => {
                    let end = r.op2();
                    if end <= pc || end > parent_end {
                        return Err(VerifyError {
                            kind: ErrorKind::BadEnd {
                                end,
                                lo: pc + 1,
                                hi: parent_end,
                            },
                            at,
                        });
                    }
                    if sp + 1 > limits::MAX_NESTING {
                        return Err(VerifyError {
                            kind: ErrorKind::NestingTooDeep {
                                max: limits::MAX_NESTING,
                            },
                            at,
                        });
                    }
                    let mut need = stack[sp].need;
                    let is_loop = op.class() == OpClass::Loop;
                    match op {
                        Opcode::PARALLEL_FOR | Opcode::FOR_EACH | Opcode::SELECT => {
                            let axis = r.op1() as u32;
                            let kind = self.axis(axis, loops, at)?;
                            if op == Opcode::SELECT && kind != Opcode::AXIS_SPARSE {
                                return Err(VerifyError {
                                    kind: ErrorKind::SelectNotSparse { axis },
                                    at,
                                });
                            }
                            if loops as usize >= limits::MAX_LOOP_DEPTH {
                                return Err(VerifyError {
                                    kind: ErrorKind::LoopTooDeep {
                                        max: limits::MAX_LOOP_DEPTH,
                                    },
                                    at,
                                });
                            }
                        }
                        Opcode::COND => {
                            self.expr(r.op1() as u32, Some(loops), at)?;
                            if r.flags & !COND_HAS_ELSE != 0 {
                                return Err(VerifyError {
                                    kind: ErrorKind::NonZero {
                                        what: "undefined COND flag bits",
                                    },
                                    at,
                                });
                            }
                            if r.flags & COND_HAS_ELSE != 0 {
                                let ok = end < parent_end
                                    && code.get(end as usize).is_some_and(|e| {
                                        e.opcode == Opcode::SEQUENTIAL as u8
                                            && e.op2() <= parent_end
                                    });
                                if !ok {
                                    return Err(VerifyError {
                                        kind: ErrorKind::ElseNotSequential { end },
                                        at,
                                    });
                                }
                            }
                        }
                        Opcode::DISPATCH_FILTER => {
                            let spec = match Policy::from_u8(r.flags) {
                                Some(Policy::Affinity) | Some(Policy::Hash) => PolicySpec {
                                    kind: r.flags,
                                    depth: 0,
                                    key: r.operand1,
                                },
                                Some(Policy::StaticPartition) => {
                                    limit("static partition depth", r.op1() as u32, 255, at)?;
                                    PolicySpec {
                                        kind: r.flags,
                                        depth: r.op1() as u8,
                                        key: NONE16.into(),
                                    }
                                }
                                Some(Policy::RoundRobin) if r.op1() == 0 => PolicySpec {
                                    kind: r.flags,
                                    depth: 0,
                                    key: NONE16.into(),
                                },
                                Some(Policy::RoundRobin) => {
                                    return Err(VerifyError {
                                        kind: ErrorKind::NonZero {
                                            what: "arg of a round_robin filter",
                                        },
                                        at,
                                    })
                                }
                                Some(Policy::Threshold) => {
                                    return Err(VerifyError {
                                        kind: ErrorKind::Misplaced {
                                            op: "a threshold policy",
                                            place: "in DISPATCH_FILTER",
                                        },
                                        at,
                                    })
                                }
                                None => {
                                    return Err(VerifyError {
                                        kind: ErrorKind::BadCode {
                                            what: "dispatch policy",
                                            value: r.flags as u32,
                                        },
                                        at,
                                    })
                                }
                            };
                            need = self.policy(&spec, false, at)?;
                        }
                        _ => {}
                    }
                    sp += 1;
                    stack[sp] = Frame {
                        end,
                        op: Some(op),
                        children: 0,
                        is_loop,
                        need,
                        at: pc,
                    };
                    if is_loop {
                        loops += 1;
                        max_loops = max_loops.max(loops);
                    }
                }
            }
            pc += 1;
        }
        Ok((max_loops, tasks))
    }

    fn close(&self, f: &Frame) -> R<()> {
        let Some(op) = f.op else { return Ok(()) };
        if matches!(op, Opcode::COMBINE | Opcode::SEQUENTIAL) {
            let declared = self.v.code[f.at as usize].op1() as u32;
            if declared != f.children {
                return Err(VerifyError {
                    kind: ErrorKind::ChildCount {
                        op: op.mnemonic(),
                        declared,
                        found: f.children,
                    },
                    at: self.code_loc(f.at),
                });
            }
        }
        Ok(())
    }

    /// Checks a TASK at `pc` and its operand records; returns how many operand records follow.
    fn task(&mut self, pc: u32, loops: u32, need: u32, parent_end: u32) -> R<u32> {
        let code = self.v.code;
        let at = self.code_loc(pc);
        let r = &code[pc as usize];
        let kernel = r.op1() as u32;
        let np = r.op2() & 0xFFFF;
        let nio = r.op2() >> 16;
        limit(
            "task parameter count",
            np,
            limits::MAX_TASK_PARAMS as u32,
            at,
        )?;
        limit("task IO count", nio, limits::MAX_TASK_IO as u32, at)?;
        let nk = self.v.kernels.len() as u32;
        let Some(k) = self.v.kernels.get(kernel as usize) else {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "kernel",
                    index: kernel,
                    len: nk,
                },
                at,
            });
        };
        if need > loops {
            return Err(VerifyError {
                kind: ErrorKind::DispatchDepth {
                    needed_minus_one: need - 1,
                    have: loops,
                },
                at,
            });
        }
        let undeclared = k.flags & KERNEL_UNDECLARED != 0;
        if !undeclared {
            if np != k.num_params as u32 {
                return Err(VerifyError {
                    kind: ErrorKind::Arity {
                        kernel,
                        what: "parameters",
                        expected: k.num_params as u32,
                        found: np,
                    },
                    at,
                });
            }
            if nio != k.num_args as u32 {
                return Err(VerifyError {
                    kind: ErrorKind::Arity {
                        kernel,
                        what: "IO regions",
                        expected: k.num_args as u32,
                        found: nio,
                    },
                    at,
                });
            }
        }
        for pos in 0..np + nio {
            let ipc = pc + 1 + pos;
            let want = if pos < np {
                OpClass::Param
            } else {
                OpClass::Io
            };
            let expected = if pos < np {
                "a PARAM_* record"
            } else {
                "an IO_* record"
            };
            if ipc >= parent_end {
                return Err(VerifyError {
                    kind: ErrorKind::TaskOperand {
                        position: pos,
                        expected,
                        found: "the end of the enclosing body",
                    },
                    at,
                });
            }
            let oat = self.code_loc(ipc);
            let o = &code[ipc as usize];
            let Some(op) = Opcode::from_u8(o.opcode) else {
                return Err(VerifyError {
                    kind: ErrorKind::UnknownOpcode { byte: o.opcode },
                    at: oat,
                });
            };
            if op.class() != want {
                return Err(VerifyError {
                    kind: ErrorKind::TaskOperand {
                        position: pos,
                        expected,
                        found: op.mnemonic(),
                    },
                    at: oat,
                });
            }
            if o.masked(op.fields()) != *o {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "unused operand bits",
                    },
                    at: oat,
                });
            }
            match op {
                Opcode::PARAM_LOOPVAR => {
                    let depth = o.op1() as u32;
                    if depth >= loops {
                        return Err(VerifyError {
                            kind: ErrorKind::UnboundLoopVar {
                                depth,
                                bound: loops,
                            },
                            at: oat,
                        });
                    }
                }
                Opcode::PARAM_EXPR => {
                    self.expr(o.op2(), Some(loops), oat)?;
                }
                Opcode::PARAM_CONST => {}
                _ => {
                    // IO record.
                    let io = pos - np;
                    let dir = Dir::of_io(op).unwrap_or(Dir::InOut);
                    if undeclared {
                        if dir != Dir::InOut {
                            return Err(VerifyError {
                                kind: ErrorKind::Direction {
                                    kernel,
                                    position: io,
                                    declared: "inout (undeclared kernel)",
                                    found: op.mnemonic(),
                                },
                                at: oat,
                            });
                        }
                    } else {
                        let d = (k.arg_dirs.get() >> (2 * io)) & 3;
                        if d != dir as u32 {
                            let declared = Dir::from_u8(d as u8).map(|d| d.name()).unwrap_or("?");
                            return Err(VerifyError {
                                kind: ErrorKind::Direction {
                                    kernel,
                                    position: io,
                                    declared,
                                    found: op.mnemonic(),
                                },
                                at: oat,
                            });
                        }
                    }
                    self.io(o, loops, oat)?;
                }
            }
        }
        Ok(np + nio)
    }

    fn io(&self, o: &Record, loops: u32, at: Location) -> R<()> {
        let tensor = o.op1() as u32;
        let nt = self.v.tensors.len() as u32;
        let Some(t) = self.v.tensors.get(tensor as usize) else {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "tensor",
                    index: tensor,
                    len: nt,
                },
                at,
            });
        };
        let dims = o.flags as u32;
        limit("region dimensions", dims, limits::MAX_RANK as u32, at)?;
        if t.flags.get() & TENSOR_IMPLICIT == 0 && dims > t.rank as u32 {
            return Err(VerifyError {
                kind: ErrorKind::RegionRank {
                    dims,
                    tensor,
                    rank: t.rank as u32,
                },
                at,
            });
        }
        let first = o.op2();
        if dims == 0 {
            if first != 0 {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "region index of a whole-tensor IO",
                    },
                    at,
                });
            }
            return Ok(());
        }
        let nr = self.v.regions.len() as u32;
        if first >= nr || nr - first < dims {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "region",
                    index: first.saturating_add(dims - 1),
                    len: nr,
                },
                at,
            });
        }
        for d in first..first + dims {
            let rd = &self.v.regions[d as usize];
            self.expr(rd.start.get() as u32, Some(loops), at)?;
            if rd.end.get() != NONE16 {
                self.expr(rd.end.get() as u32, Some(loops), at)?;
            }
        }
        Ok(())
    }
}
