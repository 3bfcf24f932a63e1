//! The verifier: the only way to obtain a [`Verified`] program. It checks every byte of the file
//! against spec/bytecode.md §7 in one bounded pass, with no recursion, no heap and no panics, so
//! later stages (the interpreter, the disassembler) need no checks of their own.
//!
//! This file holds [`Verified`] and the header checks; the rooms beside it check the tables
//! (`tables`), the expression pool (`exprs`), the config (`config`) and the code (`code`).

mod code;
mod config;
mod exprs;
mod tables;

use core::mem::offset_of;

use zerocopy::little_endian::U32;
use zerocopy::FromBytes;

use crate::error::{ErrorKind, ExprProblem, Location, VerifyError};
use crate::format::{
    checksum, is_module_text, layout_dim, limits, padded_strtab, sizes, Config, CostUnit, Header,
    KernelEntry, Layout, ModuleInfoEntry, ParamEntry, PlanEntry, PolicySpec, Record, RegionDim,
    Section, TensorEntry, COND_HAS_ELSE, DIM_IS_SLOT, KERNEL_UNDECLARED, LAYOUT_NONE, MAGIC,
    NONE16, PARAM_HAS_DEFAULT, TENSOR_IMPLICIT, TENSOR_STREAM, VERSION, WORKSPACE_UNIT,
};
use crate::opcodes::{Dir, ExprKind, ExprOp, OpClass, Opcode};
use crate::{
    DType, InfoKind, Level, ParamKind, Policy, Pool, ReadyPolicy, StartPolicy, Timing, WindowMode,
};

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
    defaults: &'a [U32],
    module_info: &'a [ModuleInfoEntry],
    plans: &'a [PlanEntry],
    exprs: &'a [Record],
    regions: &'a [RegionDim],
    strtab: &'a [u8],
    max_loop_depth: u32,
    task_sites: u32,
    stream_tensor: Option<u16>,
    readbacks: Readbacks,
}

/// The `READBACK`s of a program (spec/bytecode.md §5.9): the runtime arrays they fill and
/// their instruction indices, in code order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readbacks {
    slots: [u16; limits::MAX_READBACKS],
    pcs: [u32; limits::MAX_READBACKS],
    len: u8,
}

impl Readbacks {
    /// `(instruction index, runtime array)` of each, in code order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.pcs
            .iter()
            .copied()
            .zip(self.slots.iter().copied())
            .take(self.len as usize)
    }
    /// How many.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
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
    /// The default-value pool (every slot's default, back to back in slot order).
    pub fn defaults(&self) -> &'a [U32] {
        self.defaults
    }
    /// The default of runtime slot `slot`, if it has one (`None` also for a slot the program
    /// does not have).
    pub fn param_default(&self, slot: usize) -> Option<ParamDefault<'a>> {
        let p = self.params.get(slot)?;
        if p.flags & PARAM_HAS_DEFAULT == 0 {
            return None;
        }
        let (start, len) = (p.default_start.get() as usize, p.default_len.get() as usize);
        let values = self.defaults.get(start..start + len)?;
        Some(match ParamKind::from_u8(p.kind)? {
            ParamKind::Scalar => ParamDefault::Scalar(values.first()?.get()),
            ParamKind::Array => ParamDefault::Array(values),
        })
    }
    /// Module-header entries: the module's name, version and targets.
    pub fn module_info(&self) -> &'a [ModuleInfoEntry] {
        self.module_info
    }
    /// Planned values (`@plan`): plan `i` is runtime slot `params().len() + i`, a scalar
    /// computed at launch (spec/bytecode.md §3.6.2).
    pub fn plans(&self) -> &'a [PlanEntry] {
        self.plans
    }
    /// Runtime slots in all: the given ones ([`Verified::params`]) and the planned ones.
    pub fn slots(&self) -> usize {
        self.params.len() + self.plans.len()
    }
    /// The text of a module-header entry (verified printable ASCII).
    pub fn info_text(&self, e: &ModuleInfoEntry) -> &'a str {
        self.name(e.text_off.get(), e.text_len.get() as u32)
    }
    /// The PTO-WSP level of the workload.
    pub fn workload_level(&self) -> Level {
        Level::from_u8(self.config.level & 0xF).unwrap_or(Level::Cpu)
    }
    /// The PTO-WSP level of the schedule.
    pub fn schedule_level(&self) -> Level {
        Level::from_u8(self.config.level >> 4).unwrap_or(Level::Cpu)
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
    /// The `READBACK`s (spec/bytecode.md §5.9).
    pub fn readbacks(&self) -> &Readbacks {
        &self.readbacks
    }
    /// The stream-order tensor of `stream_by` ([`crate::format::TENSOR_STREAM`]), if the
    /// schedule orders streams: every task's last IO region is its stream's element of it.
    pub fn stream_tensor(&self) -> Option<u16> {
        self.stream_tensor
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

    /// A name or text from the string table (verified to be an ASCII identifier, or printable
    /// ASCII for module-header texts).
    pub fn name(&self, off: u32, len: u32) -> &'a str {
        let s = self
            .strtab
            .get(off as usize..off as usize + len as usize)
            .unwrap_or(&[]);
        core::str::from_utf8(s).unwrap_or("")
    }
    /// The names of the kernels, in kernel-table order (a task's `kernel` indexes them).
    pub fn kernel_names(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.kernels()
            .iter()
            .map(|k| self.name(k.name_off.get(), k.name_len.get() as u32))
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

/// A runtime parameter's default value, as stored in the file (little-endian, unaligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamDefault<'a> {
    /// A scalar's default.
    Scalar(u32),
    /// An array's default values.
    Array(&'a [U32]),
}

impl<'a> ParamDefault<'a> {
    /// The default as a runtime value borrowing the file, when the file's bytes allow it: an
    /// array's values must lie 4-byte aligned in memory and the target be little-endian (as
    /// on the AICPU). `None` otherwise: copy the values out instead.
    pub fn as_value(&self) -> Option<crate::Value<'a>> {
        match *self {
            ParamDefault::Scalar(x) => Some(crate::Value::Scalar(x)),
            ParamDefault::Array(a) => {
                if cfg!(target_endian = "big") {
                    return None;
                }
                let bytes: &'a [u8] = zerocopy::IntoBytes::as_bytes(a);
                <[u32]>::ref_from_bytes(bytes).ok().map(crate::Value::Array)
            }
        }
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
    let counts: [(&'static str, u32, u32, usize); 11] = [
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
            "default-value count",
            header.num_defaults.get(),
            limits::MAX_DEFAULT_VALUES,
            offset_of!(Header, num_defaults),
        ),
        (
            "module-header entry count",
            header.num_module_info.get(),
            limits::MAX_MODULE_INFO,
            offset_of!(Header, num_module_info),
        ),
        (
            "plan count",
            header.num_plans.get(),
            limits::MAX_PLANS,
            offset_of!(Header, num_plans),
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
    let defaults = <[U32]>::ref_from_bytes(sect(Section::Defaults))
        .map_err(|_| bad_layout(Section::Defaults))?;
    let module_info = <[ModuleInfoEntry]>::ref_from_bytes(sect(Section::ModuleInfo))
        .map_err(|_| bad_layout(Section::ModuleInfo))?;
    let plans = <[PlanEntry]>::ref_from_bytes(sect(Section::Plans))
        .map_err(|_| bad_layout(Section::Plans))?;
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
        defaults,
        module_info,
        plans,
        exprs,
        regions,
        strtab,
        max_loop_depth: 0,
        task_sites: 0,
        stream_tensor: None,
        readbacks: Readbacks::default(),
    };
    let mut c = Checker {
        v: &v,
        stream: None,
    };
    c.strings()?;
    c.params()?;
    c.module_info()?;
    c.stream = c.tensors()?.map(|i| i as u32);
    c.kernels()?;
    c.expr_pool()?;
    c.plans()?;
    c.costs()?;
    c.axes()?;
    c.regions()?;
    let need = c.config()?;
    let (depth, tasks, readbacks) = c.code(need)?;
    let stream = c.stream;
    v.readbacks = readbacks;
    v.stream_tensor = stream.map(|i| i as u16);
    v.max_loop_depth = depth;
    v.task_sites = tasks;
    Ok(v)
}

struct Checker<'v, 'a> {
    v: &'v Verified<'a>,
    /// The stream-order tensor, once the tensor table is checked.
    stream: Option<u32>,
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
}
