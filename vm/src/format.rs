//! Binary layout of PTOW v8 (spec/bytecode.md §2–3): little-endian, byte-aligned records read as
//! zero-copy views. Every multi-byte field uses `zerocopy`'s unaligned little-endian integers, so
//! a view can be taken over any byte slice without alignment or endianness assumptions.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// `"PTOW"` read as a big-endian u32; stored little-endian, so a file starts `57 4F 54 50`.
pub const MAGIC: u32 = 0x5054_4F57;
/// A kernel's workspace is given in units of this many bytes (a cache line), so every
/// allocation of an arena starts on a line of its own.
pub const WORKSPACE_UNIT: u32 = 64;
/// The only version this reader understands.
pub const VERSION: u32 = 8;

/// Limits every verified program respects (spec/bytecode.md §8).
pub mod limits {
    /// Largest accepted file, bytes.
    pub const MAX_TOTAL_LEN: u32 = 16 << 20;
    /// Instructions in the code section (including the final `HALT`).
    pub const MAX_INSTRUCTIONS: u32 = 1 << 20;
    /// Entries in the axis table.
    pub const MAX_AXES: u32 = 4096;
    /// Entries in the kernel table.
    pub const MAX_KERNELS: u32 = 4096;
    /// Entries in the tensor table.
    pub const MAX_TENSORS: u32 = 4096;
    /// Runtime-parameter slots.
    pub const MAX_PARAMS: u32 = 256;
    /// Nodes in the expression pool (indices are u16; 0xFFFF means "none").
    pub const MAX_EXPRS: u32 = 0xFFFF;
    /// Entries in the region table.
    pub const MAX_REGIONS: u32 = 0xFFFF;
    /// Bytes of the string table.
    pub const MAX_STRTAB: u32 = 1 << 20;
    /// Values in the default-value pool (all runtime parameters' defaults together).
    pub const MAX_DEFAULT_VALUES: u32 = 1 << 20;
    /// Entries of the module-header table (the name, the version and the targets).
    pub const MAX_MODULE_INFO: u32 = 64;
    /// Planned values (`@plan`, spec/bytecode.md §3.6.2): scalars computed at launch.
    pub const MAX_PLANS: u32 = 16;
    /// Reductions and searches nested in one another in a planned value's expression.
    pub const MAX_PLAN_NESTING: usize = 4;
    /// Expression nodes one launch's planning may evaluate, all planned values together
    /// (a sum over a million-entry array of a few nodes each fits; a quadratic plan over it
    /// does not).
    pub const MAX_PLAN_WORK: u64 = 1 << 26;
    /// `READBACK` instructions of a program (spec/bytecode.md §5.9).
    pub const MAX_READBACKS: usize = 4;
    /// Elements of one tensor read back (`READBACK`): a small tensor of counts and lists.
    pub const MAX_READBACK_ELEMS: usize = 1 << 16;
    /// Mesh axes a `layout` shard may name (`S(0)` ..= `S(13)`).
    pub const MAX_MESH_AXIS: u32 = 13;
    /// Bytes of one name.
    pub const MAX_NAME_LEN: usize = 255;
    /// Nested loops (the interpreter's loop stack).
    pub const MAX_LOOP_DEPTH: usize = 16;
    /// Nested structured statements of any kind (the verifier's and interpreter's frame stack).
    pub const MAX_NESTING: usize = 32;
    /// Parameters of one task.
    pub const MAX_TASK_PARAMS: usize = 16;
    /// IO regions of one task.
    pub const MAX_TASK_IO: usize = 16;
    /// Arguments (IO positions) of a declared kernel.
    pub const MAX_KERNEL_ARGS: usize = 16;
    /// Tensor rank.
    pub const MAX_RANK: usize = 8;
    /// Nodes of one expression, `END` included.
    pub const MAX_EXPR_LEN: usize = 64;
    /// Evaluation stack of one expression.
    pub const MAX_EXPR_STACK: usize = 8;
    /// AICPUs a dispatch configuration may name.
    pub const MAX_AICPUS: u16 = 64;
    /// Levels of a threshold policy.
    pub const MAX_LEVELS: usize = 8;
}

/// "No expression" / "no value" marker in u16 reference fields.
pub const NONE16: u16 = 0xFFFF;
/// In a tensor dimension: the value is a runtime scalar slot in the low 16 bits.
pub const DIM_IS_SLOT: u32 = 0x8000_0000;
/// `COND` flags bit: an else block (a `SEQUENTIAL`) follows the then body at `end`.
pub const COND_HAS_ELSE: u8 = 0x01;
/// Kernel flags bit: the kernel was used without a declaration (arity unchecked, every region
/// `IO_INOUT`).
pub const KERNEL_UNDECLARED: u8 = 0x01;
/// Tensor flags bit: the tensor was used without a declaration (rank and dtype unknown).
pub const TENSOR_IMPLICIT: u32 = 0x01;
/// Tensor flags bit: the stream-order token that `stream_by` lowers to (spec/bytecode.md §3.6):
/// rank 1, one element per stream, no memory. Every task's last IO record is an `IO_INOUT` of
/// its stream's element, so consecutive tasks of a stream depend on each other.
pub const TENSOR_STREAM: u32 = 0x02;
/// Parameter flags bit: the slot has a default value in the default-value pool.
pub const PARAM_HAS_DEFAULT: u8 = 0x01;
/// A tensor layout dimension (4 bits): no layout given.
pub const LAYOUT_NONE: u32 = 0;
/// A tensor layout dimension: replicated (`R`).
pub const LAYOUT_REPLICATE: u32 = 1;
/// A tensor layout dimension: `LAYOUT_SHARD + k` is sharded over mesh axis `k` (`S(k)`).
pub const LAYOUT_SHARD: u32 = 2;

/// Whether `s` may be a module-header text (spec/bytecode.md §3.6.1): at most 255 bytes of
/// printable ASCII without `"` or `\\`, so a listing can quote it as it is.
pub fn is_module_text(s: &[u8]) -> bool {
    s.len() <= limits::MAX_NAME_LEN
        && s.iter()
            .all(|c| (0x20..0x7F).contains(c) && *c != b'"' && *c != b'\\')
}

/// Dimension `d`'s 4-bit code in a tensor's `layout` word.
pub const fn layout_dim(layout: u32, d: usize) -> u32 {
    (layout >> (4 * d)) & 0xF
}

/// The 64-byte file header.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: U32,
    /// [`VERSION`].
    pub version: U32,
    /// Records in the code section.
    pub num_instructions: U32,
    /// Records in the axis section.
    pub num_axes: U32,
    /// Records in the kernel section.
    pub num_kernels: U32,
    /// Records in the tensor section.
    pub num_tensors: U32,
    /// Length of the whole file in bytes, header included.
    pub total_len: U32,
    /// CRC-32 (ISO-HDLC) of the whole file with this field read as zero.
    pub checksum: U32,
    /// Records in the expression pool.
    pub num_exprs: U32,
    /// Records in the region table.
    pub num_regions: U32,
    /// Runtime-parameter slots.
    pub num_params: U32,
    /// Bytes of names in the string table (before zero padding to 8).
    pub strtab_len: U32,
    /// Must be zero.
    pub flags: U32,
    /// Values in the default-value pool.
    pub num_defaults: U32,
    /// Entries of the module-header table.
    pub num_module_info: U32,
    /// Entries of the plan table (planned values).
    pub num_plans: U32,
}

/// One policy of a dispatch configuration or threshold level (4 bytes).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct PolicySpec {
    /// A [`crate::Policy`] code (never `threshold` inside a level).
    pub kind: u8,
    /// Loop depth for `static`; 0 otherwise.
    pub depth: u8,
    /// Key expression for `affinity` / `hash`; [`NONE16`] otherwise.
    pub key: U16,
}

/// The 128-byte configuration section: names, DispatchConfig and schedule knobs.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct Config {
    /// String-table offset of the workload name.
    pub workload_name_off: U32,
    /// Its length.
    pub workload_name_len: U16,
    /// Length of the schedule name.
    pub schedule_name_len: U16,
    /// String-table offset of the schedule name.
    pub schedule_name_off: U32,
    /// The AICPU count the schedule was written for (a launch may override it).
    pub num_aicpus: U16,
    /// The module's dispatch policy: kind, depth and key.
    pub policy: PolicySpec,
    /// Threshold policy: number of levels (1..=8); 0 otherwise.
    pub num_levels: u8,
    /// PTO-WSP levels ([`crate::Level`] codes): the workload's in bits 0–3, the schedule's in
    /// bits 4–7.
    pub level: u8,
    /// Threshold policy: selector expression (runtime scalars and constants only).
    pub selector: U16,
    /// Threshold policy: level `i` applies when `selector <= thresholds[i]`; unused ones zero.
    pub thresholds: [U32; 8],
    /// Threshold policy: the policy of each level; unused ones zero.
    pub levels: [PolicySpec; 8],
    /// `streams` knob.
    pub streams: U16,
    /// [`crate::Timing`] code.
    pub timing: u8,
    /// [`crate::ReadyPolicy`] code.
    pub ready: u8,
    /// Argument of `batched(N)`, `interleaved(N)`, `rate_limit(N)`; 0 for immediate.
    pub timing_arg: U32,
    /// [`crate::StartPolicy`] code.
    pub start: u8,
    /// [`crate::WindowMode`] code.
    pub window_mode: u8,
    /// `workspace = N` (v6): bytes of each AICPU's workspace arena, which its tasks' scratch
    /// is allocated from (spec/runtime.md §4.4); 0 sizes it at launch from the window.
    pub workspace_arena: U32,
    /// `start = threshold(N)`: N; 0 otherwise.
    pub start_threshold: U32,
    /// Task window size per AICPU (≥ 1).
    pub window: U32,
    /// In-flight limit per pool (0 = unlimited).
    pub pipeline_depth: U32,
    /// Dependency-release batch size (0 = release one at a time).
    pub batch_deps: U32,
    /// `cores = shared | partition` (v8): [`crate::sched::CoreAlloc`] code, which cores each
    /// AICPU hands tasks to (spec/runtime.md §4.6); a launch may override it.
    pub cores: u8,
    /// Must be zero.
    pub reserved2: [u8; 3],
    /// Must be zero.
    pub reserved3: [U32; 2],
}

/// An 8-byte record: an instruction, an axis definition or an expression node.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
)]
#[repr(C)]
pub struct Record {
    /// Opcode or expression operator byte.
    pub opcode: u8,
    /// Opcode-specific flags.
    pub flags: u8,
    /// First operand.
    pub operand1: U16,
    /// Second operand.
    pub operand2: U32,
}

impl Record {
    /// Builds a record.
    pub fn new(opcode: u8, flags: u8, operand1: u16, operand2: u32) -> Record {
        Record {
            opcode,
            flags,
            operand1: U16::new(operand1),
            operand2: U32::new(operand2),
        }
    }

    /// `operand1`.
    pub fn op1(&self) -> u16 {
        self.operand1.get()
    }

    /// `operand2`.
    pub fn op2(&self) -> u32 {
        self.operand2.get()
    }

    /// Reads a field slot.
    pub fn get(&self, slot: crate::Slot) -> u32 {
        use crate::Slot;
        match slot {
            Slot::Flags => self.flags as u32,
            Slot::Op1 => self.op1() as u32,
            Slot::Op2 | Slot::Op2Signed => self.op2(),
            Slot::Op2Lo => self.op2() & 0xFFFF,
            Slot::Op2Hi => self.op2() >> 16,
        }
    }

    /// Writes a field slot; the value is truncated to the slot's width (callers check ranges
    /// with [`slot_max`]).
    pub fn set(&mut self, slot: crate::Slot, v: u32) {
        use crate::Slot;
        match slot {
            Slot::Flags => self.flags = v as u8,
            Slot::Op1 => self.operand1 = U16::new(v as u16),
            Slot::Op2 | Slot::Op2Signed => self.operand2 = U32::new(v),
            Slot::Op2Lo => self.operand2 = U32::new((self.op2() & 0xFFFF_0000) | (v & 0xFFFF)),
            Slot::Op2Hi => self.operand2 = U32::new((self.op2() & 0xFFFF) | (v << 16)),
        }
    }

    /// The record with only the bits of `fields` kept: a record is canonical when this equals
    /// it with the opcode byte.
    pub fn masked(&self, fields: &[crate::Field]) -> Record {
        let mut r = Record::new(self.opcode, 0, 0, 0);
        for fl in fields {
            r.set(fl.slot, self.get(fl.slot));
        }
        r
    }
}

/// Largest value a slot holds.
pub const fn slot_max(slot: crate::Slot) -> u32 {
    use crate::Slot;
    match slot {
        Slot::Flags => 0xFF,
        Slot::Op1 | Slot::Op2Lo | Slot::Op2Hi => 0xFFFF,
        Slot::Op2 | Slot::Op2Signed => u32::MAX,
    }
}

/// A kernel-table entry (16 bytes).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct KernelEntry {
    /// String-table offset of the name.
    pub name_off: U32,
    /// Name length.
    pub name_len: U16,
    /// [`crate::Pool`] code.
    pub pool: u8,
    /// [`KERNEL_UNDECLARED`] or 0.
    pub flags: u8,
    /// Scalar parameters each task passes (0 if undeclared).
    pub num_params: u8,
    /// IO arguments each task passes (0 if undeclared).
    pub num_args: u8,
    /// Scratch bytes each of its tasks gets while it runs, in units of [`WORKSPACE_UNIT`]
    /// bytes (v6; 0 for none and for an undeclared kernel).
    pub workspace: U16,
    /// Direction of argument `i` in bits `2i..2i+2` ([`crate::Dir`] codes); unused bits zero.
    pub arg_dirs: U32,
    /// The expression giving one task's duration on the machine model (v7, spec/bytecode.md
    /// §6.2), or [`NO_COST`]: it reads the task's parameters (`ARG`), its regions' sizes
    /// (`SIZE`), runtime scalars and constants.
    pub cost_expr: U16,
    /// The cost's unit ([`CostUnit`] code; 0 without a cost).
    pub cost_unit: u8,
    /// Reserved, 0.
    pub reserved0: u8,
    /// `cores(N)` (v8): the most of its tasks that run at once in the launch, on any cores of
    /// its pool (spec/runtime.md §4.6); 0 for no limit (and for an undeclared kernel).
    pub core_limit: U16,
    /// Reserved, 0.
    pub reserved1: U16,
}

/// [`KernelEntry::cost_expr`] of a kernel that declares no cost.
pub const NO_COST: u16 = 0xFFFF;

/// The unit of a kernel's declared cost ([`KernelEntry::cost_unit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CostUnit {
    /// Nanoseconds.
    Ns = 0,
    /// AICore cycles (the machine model converts them with its core clock).
    Cycles = 1,
}

impl CostUnit {
    /// Decodes a unit byte.
    pub fn from_u8(b: u8) -> Option<CostUnit> {
        match b {
            0 => Some(CostUnit::Ns),
            1 => Some(CostUnit::Cycles),
            _ => None,
        }
    }

    /// Its `.pto` and listing spelling.
    pub fn name(self) -> &'static str {
        match self {
            CostUnit::Ns => "ns",
            CostUnit::Cycles => "cycles",
        }
    }
}

impl Default for KernelEntry {
    /// An entry of no name, pool 0, no arguments, workspace or cost.
    fn default() -> KernelEntry {
        KernelEntry {
            name_off: U32::new(0),
            name_len: U16::new(0),
            pool: 0,
            flags: 0,
            num_params: 0,
            num_args: 0,
            workspace: U16::new(0),
            arg_dirs: U32::new(0),
            cost_expr: U16::new(NO_COST),
            cost_unit: 0,
            reserved0: 0,
            core_limit: U16::new(0),
            reserved1: U16::new(0),
        }
    }
}

impl KernelEntry {
    /// The kernel's declared cost: its expression's first node and its unit.
    pub fn cost(&self) -> Option<(u16, CostUnit)> {
        match self.cost_expr.get() {
            NO_COST => None,
            e => Some((e, CostUnit::from_u8(self.cost_unit).unwrap_or(CostUnit::Ns))),
        }
    }
}

/// A tensor-table entry (48 bytes).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct TensorEntry {
    /// String-table offset of the name.
    pub name_off: U32,
    /// Name length.
    pub name_len: U16,
    /// [`crate::DType`] code.
    pub dtype: u8,
    /// Number of dimensions (0 for implicit tensors).
    pub rank: u8,
    /// [`TENSOR_IMPLICIT`], [`TENSOR_STREAM`] or 0.
    pub flags: U32,
    /// Dimension sizes; [`DIM_IS_SLOT`]` | slot` for a runtime scalar; unused ones zero.
    pub dims: [U32; 8],
    /// The schedule's `layout` of the tensor: 4 bits per dimension, dimension `d` in bits
    /// `4d..4d+4` ([`LAYOUT_NONE`], [`LAYOUT_REPLICATE`], or [`LAYOUT_SHARD`]` + k`); 0 when
    /// no layout is given.
    pub layout: U32,
}

/// A runtime-parameter slot (16 bytes).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct ParamEntry {
    /// String-table offset of the name.
    pub name_off: U32,
    /// Name length.
    pub name_len: U16,
    /// [`crate::ParamKind`] code.
    pub kind: u8,
    /// [`PARAM_HAS_DEFAULT`] or 0.
    pub flags: u8,
    /// With a default: index of its first value in the default-value pool; otherwise the
    /// pool's length so far (defaults are stored back to back in slot order).
    pub default_start: U32,
    /// With a default: its number of values (1 for a scalar); otherwise 0.
    pub default_len: U32,
}

/// A module-header entry (8 bytes): the module's name, version or one of its targets, as
/// text in the string table.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct ModuleInfoEntry {
    /// String-table offset of the text.
    pub text_off: U32,
    /// Its length (0 ..= 255).
    pub text_len: U16,
    /// [`crate::InfoKind`] code.
    pub kind: u8,
    /// Must be zero.
    pub reserved: u8,
}

/// A planned value (8 bytes, spec/bytecode.md §3.6.2): a runtime scalar computed at launch from
/// the runtime parameters and the planned values before it. Plan `i` is runtime slot
/// `num_params + i`.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct PlanEntry {
    /// String-table offset of the name.
    pub name_off: U32,
    /// Name length.
    pub name_len: U16,
    /// The expression that computes it (the only expressions that may hold reductions and
    /// searches).
    pub expr: U16,
}

/// One dimension of a task region (4 bytes): `[start, end)`, or the single index `start` when
/// `end` is [`NONE16`].
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct RegionDim {
    /// Expression giving the first index.
    pub start: U16,
    /// Expression giving the end (exclusive), or [`NONE16`] for a single index.
    pub end: U16,
}

/// Sizes of the fixed parts, in bytes.
pub mod sizes {
    /// Header.
    pub const HEADER: usize = 64;
    /// Configuration section.
    pub const CONFIG: usize = 128;
    /// Instruction, axis and expression records.
    pub const RECORD: usize = 8;
    /// Kernel entry.
    pub const KERNEL: usize = 24;
    /// Tensor entry.
    pub const TENSOR: usize = 48;
    /// Parameter entry.
    pub const PARAM: usize = 16;
    /// Default value.
    pub const DEFAULT: usize = 4;
    /// Module-header entry.
    pub const MODULE_INFO: usize = 8;
    /// Plan entry.
    pub const PLAN: usize = 8;
    /// Region dimension.
    pub const REGION: usize = 4;
}

const _: () = {
    assert!(core::mem::size_of::<Header>() == sizes::HEADER);
    assert!(core::mem::size_of::<Config>() == sizes::CONFIG);
    assert!(core::mem::size_of::<Record>() == sizes::RECORD);
    assert!(core::mem::size_of::<KernelEntry>() == sizes::KERNEL);
    assert!(core::mem::size_of::<TensorEntry>() == sizes::TENSOR);
    assert!(core::mem::size_of::<ParamEntry>() == sizes::PARAM);
    assert!(core::mem::size_of::<ModuleInfoEntry>() == sizes::MODULE_INFO);
    assert!(core::mem::size_of::<PlanEntry>() == sizes::PLAN);
    assert!(core::mem::size_of::<RegionDim>() == sizes::REGION);
};

/// Byte offset of the checksum field in the header.
pub const CHECKSUM_OFFSET: usize = 28;

/// The sections of a PTOW file, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Section {
    /// The 64-byte header.
    Header,
    /// The 128-byte configuration.
    Config,
    /// Instructions.
    Code,
    /// Axis definitions.
    Axes,
    /// Kernel table.
    Kernels,
    /// Tensor table.
    Tensors,
    /// Runtime-parameter slots.
    Params,
    /// Default values of runtime parameters (u32 each).
    Defaults,
    /// Module-header entries.
    ModuleInfo,
    /// Planned values.
    Plans,
    /// Expression pool.
    Exprs,
    /// Region table.
    Regions,
    /// Names, zero-padded to a multiple of 8.
    Strings,
}

impl Section {
    /// Every section in file order.
    pub const ALL: [Section; 13] = [
        Section::Header,
        Section::Config,
        Section::Code,
        Section::Axes,
        Section::Kernels,
        Section::Tensors,
        Section::Params,
        Section::Defaults,
        Section::ModuleInfo,
        Section::Plans,
        Section::Exprs,
        Section::Regions,
        Section::Strings,
    ];

    /// The section's name in messages and `inspect`.
    pub const fn name(self) -> &'static str {
        match self {
            Section::Header => "header",
            Section::Config => "config",
            Section::Code => "code",
            Section::Axes => "axes",
            Section::Kernels => "kernels",
            Section::Tensors => "tensors",
            Section::Params => "params",
            Section::Defaults => "defaults",
            Section::ModuleInfo => "module_info",
            Section::Plans => "plans",
            Section::Exprs => "exprs",
            Section::Regions => "regions",
            Section::Strings => "strings",
        }
    }
}

/// Byte ranges of every section, derived from the header's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `(offset, length)` of each section, in [`Section::ALL`] order.
    pub ranges: [(usize, usize); 13],
    /// Total file length the counts imply.
    pub total: usize,
}

impl Layout {
    /// Computes the layout for the given counts (each already checked against its limit, so no
    /// arithmetic here can overflow a 64-bit `usize`; on 32-bit targets the limits keep every
    /// sum below 2^31).
    pub fn from_header(h: &Header) -> Layout {
        let counts = [
            1usize,
            1,
            h.num_instructions.get() as usize,
            h.num_axes.get() as usize,
            h.num_kernels.get() as usize,
            h.num_tensors.get() as usize,
            h.num_params.get() as usize,
            h.num_defaults.get() as usize,
            h.num_module_info.get() as usize,
            h.num_plans.get() as usize,
            h.num_exprs.get() as usize,
            h.num_regions.get() as usize,
            padded_strtab(h.strtab_len.get() as usize),
        ];
        let widths = [
            sizes::HEADER,
            sizes::CONFIG,
            sizes::RECORD,
            sizes::RECORD,
            sizes::KERNEL,
            sizes::TENSOR,
            sizes::PARAM,
            sizes::DEFAULT,
            sizes::MODULE_INFO,
            sizes::PLAN,
            sizes::RECORD,
            sizes::REGION,
            1,
        ];
        let mut ranges = [(0usize, 0usize); 13];
        let mut off = 0usize;
        for i in 0..13 {
            let len = counts[i] * widths[i];
            ranges[i] = (off, len);
            off += len;
        }
        Layout { ranges, total: off }
    }

    /// `(offset, length)` of one section.
    pub fn range(&self, s: Section) -> (usize, usize) {
        self.ranges[s as usize]
    }
}

/// The string table padded with zeros to a multiple of 8 (so the file length is a multiple of
/// 4 and the next version can append 8-byte sections).
pub const fn padded_strtab(len: usize) -> usize {
    (len + 7) & !7
}

/// Byte offset of the `total_len` field in the header.
pub const TOTAL_LEN_OFFSET: usize = 24;

/// Sets a file's `total_len` to its length and its checksum to match (what an encoder does
/// last). Bytes shorter than the header are left as they are.
pub fn seal(bytes: &mut [u8]) {
    if bytes.len() < sizes::HEADER {
        return;
    }
    let len = bytes.len() as u32;
    bytes[TOTAL_LEN_OFFSET..TOTAL_LEN_OFFSET + 4].copy_from_slice(&len.to_le_bytes());
    let sum = checksum(bytes);
    bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&sum.to_le_bytes());
}

/// CRC-32 (ISO-HDLC, the zlib/PNG CRC) of `bytes` with the checksum field read as zero.
pub fn checksum(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    if bytes.len() < CHECKSUM_OFFSET + 4 {
        h.update(bytes);
        return h.finalize();
    }
    h.update(&bytes[..CHECKSUM_OFFSET]);
    h.update(&[0u8; 4]);
    h.update(&bytes[CHECKSUM_OFFSET + 4..]);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    #[test]
    fn checksum_is_the_standard_crc32() {
        // The CRC-32/ISO-HDLC check value.
        let mut h = crc32fast::Hasher::new();
        h.update(b"123456789");
        assert_eq!(h.finalize(), 0xCBF4_3926);
        // The checksum field is read as zero.
        let a = [7u8; 40];
        let mut b = a;
        b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(checksum(&a), checksum(&b));
        assert_eq!(checksum(&b), {
            let mut z = a;
            z[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&[0; 4]);
            let mut h = crc32fast::Hasher::new();
            h.update(&z);
            h.finalize()
        });
    }

    #[test]
    fn layout_follows_the_counts() {
        let h = Header {
            num_instructions: U32::new(3),
            num_axes: U32::new(1),
            num_kernels: U32::new(2),
            num_tensors: U32::new(1),
            num_params: U32::new(1),
            num_defaults: U32::new(3),
            num_module_info: U32::new(1),
            num_plans: U32::new(1),
            num_exprs: U32::new(2),
            num_regions: U32::new(3),
            strtab_len: U32::new(5),
            ..Header::default()
        };
        let l = Layout::from_header(&h);
        assert_eq!(l.range(Section::Config), (64, 128));
        assert_eq!(l.range(Section::Code), (192, 24));
        assert_eq!(l.range(Section::Axes), (216, 8));
        assert_eq!(l.range(Section::Kernels), (224, 48));
        assert_eq!(l.range(Section::Tensors), (272, 48));
        assert_eq!(l.range(Section::Params), (320, 16));
        assert_eq!(l.range(Section::Defaults), (336, 12));
        assert_eq!(l.range(Section::ModuleInfo), (348, 8));
        assert_eq!(l.range(Section::Plans), (356, 8));
        assert_eq!(l.range(Section::Exprs), (364, 16));
        assert_eq!(l.range(Section::Regions), (380, 12));
        assert_eq!(l.range(Section::Strings), (392, 8));
        assert_eq!(l.total, 400);
        assert_eq!(l.total % 4, 0);
    }

    #[test]
    fn records_are_little_endian() {
        let r = Record::new(0x10, 0x02, 0x0304, 0x0506_0708);
        assert_eq!(
            r.as_bytes(),
            &[0x10, 0x02, 0x04, 0x03, 0x08, 0x07, 0x06, 0x05]
        );
        assert_eq!(MAGIC.to_le_bytes(), *b"WOTP");
    }
}
