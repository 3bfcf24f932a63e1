//! Typed verifier errors. Each names what is wrong and where: the section, the record index and
//! the byte offset in the file.

use crate::format::Section;

/// Where in the file a problem is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// The section.
    pub section: Section,
    /// Record index inside the section (instruction index for the code section); `None` for the
    /// header, the config section and the string table.
    pub index: Option<u32>,
    /// Byte offset in the file.
    pub offset: usize,
}

impl core::fmt::Display for Location {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match (self.section, self.index) {
            (Section::Code, Some(i)) => write!(f, "instruction {i} (byte offset {})", self.offset),
            (s, Some(i)) => write!(f, "{} entry {i} (byte offset {})", s.name(), self.offset),
            (s, None) => write!(f, "{} (byte offset {})", s.name(), self.offset),
        }
    }
}

/// What is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// Fewer bytes than a header.
    #[error("file is {len} bytes, shorter than the 64-byte header")]
    TooShort {
        /// Bytes present.
        len: usize,
    },
    /// The magic number is wrong.
    #[error("bad magic 0x{found:08X}, expected 0x50544F57 (\"PTOW\"): not a PTOW file")]
    BadMagic {
        /// Value found.
        found: u32,
    },
    /// A version this reader does not know.
    #[error(
        "unsupported PTOW version {found}; this reader understands version {v} only (assemble the source again)",
        v = crate::format::VERSION
    )]
    UnsupportedVersion {
        /// Version found.
        found: u32,
    },
    /// The header's length disagrees with the bytes given.
    #[error(
        "header says the file is {declared} bytes but {actual} were given (truncated or extended)"
    )]
    LengthMismatch {
        /// `total_len` in the header.
        declared: u32,
        /// Bytes given.
        actual: usize,
    },
    /// The section counts do not add up to the header's length.
    #[error("section counts imply {implied} bytes but the header says {declared}")]
    SectionSizeMismatch {
        /// Bytes implied by the counts.
        implied: usize,
        /// `total_len`.
        declared: u32,
    },
    /// The checksum is wrong.
    #[error(
        "checksum mismatch: stored 0x{stored:08X}, computed 0x{computed:08X} (corrupted transfer)"
    )]
    BadChecksum {
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// A count or value exceeds a limit of the spec.
    #[error("{what} is {value}, above the limit {max}")]
    LimitExceeded {
        /// What is counted.
        what: &'static str,
        /// Value found.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// A value is below its minimum.
    #[error("{what} is {value}, below the minimum {min}")]
    TooSmall {
        /// What.
        what: &'static str,
        /// Value found.
        value: u64,
        /// The minimum.
        min: u64,
    },
    /// A reserved field, unused operand bits or padding are not zero.
    #[error("{what} must be zero")]
    NonZero {
        /// Which field.
        what: &'static str,
    },
    /// A code byte names no value of its enumeration.
    #[error("{what} code {value} is not defined")]
    BadCode {
        /// Which enumeration.
        what: &'static str,
        /// The byte.
        value: u32,
    },
    /// A name is not in the string table where the canonical layout puts it.
    #[error("name at string offset {off} (length {len}) is not the next name of the string table (expected offset {expected})")]
    NameNotCanonical {
        /// Offset found.
        off: u32,
        /// Length found.
        len: u32,
        /// Where the canonical layout puts it.
        expected: u32,
    },
    /// A name is empty, too long or not an identifier.
    #[error("name is not an identifier of 1..=255 ASCII letters, digits and '_' starting with a letter or '_'")]
    BadName,
    /// The names do not fill the string table exactly.
    #[error("string table is {len} bytes but its names take {used}")]
    StrtabSlack {
        /// `strtab_len`.
        len: u32,
        /// Bytes used by names.
        used: u32,
    },
    /// An unknown opcode byte.
    #[error("unknown opcode 0x{byte:02X}")]
    UnknownOpcode {
        /// The byte.
        byte: u8,
    },
    /// An opcode where it may not appear.
    #[error("{op} is not allowed {place}")]
    Misplaced {
        /// Mnemonic.
        op: &'static str,
        /// Where it was found, as a phrase.
        place: &'static str,
    },
    /// The code section does not end with `HALT`.
    #[error("the code section must end with HALT")]
    MissingHalt,
    /// A body end outside the enclosing body.
    #[error("body end {end} is outside {lo}..={hi}")]
    BadEnd {
        /// The end found.
        end: u32,
        /// Smallest allowed.
        lo: u32,
        /// Largest allowed.
        hi: u32,
    },
    /// Structured statements nested deeper than the limit.
    #[error("statements nested deeper than {max}")]
    NestingTooDeep {
        /// The limit.
        max: usize,
    },
    /// Loops nested deeper than the limit.
    #[error("loops nested deeper than {max}")]
    LoopTooDeep {
        /// The limit.
        max: usize,
    },
    /// A COMBINE or SEQUENTIAL whose count disagrees with its children.
    #[error("{op} declares {declared} children but its body holds {found}")]
    ChildCount {
        /// Mnemonic.
        op: &'static str,
        /// Count in the operand.
        declared: u32,
        /// Children found.
        found: u32,
    },
    /// A COND with `else=1` not followed by a SEQUENTIAL.
    #[error("COND has an else block, but the instruction at its end ({end}) is not a SEQUENTIAL inside the enclosing body")]
    ElseNotSequential {
        /// The COND's end.
        end: u32,
    },
    /// An index into a table is out of range.
    #[error("{what} index {index} is out of range (table has {len})")]
    OutOfRange {
        /// Which table.
        what: &'static str,
        /// Index found.
        index: u32,
        /// Table length.
        len: u32,
    },
    /// A runtime slot of the wrong kind.
    #[error("runtime slot {slot} is used as a {expected} but declared otherwise")]
    SlotKind {
        /// The slot.
        slot: u32,
        /// Kind required.
        expected: &'static str,
    },
    /// SELECT over an axis that is not sparse.
    #[error("SELECT needs a sparse axis; axis {axis} is not")]
    SelectNotSparse {
        /// Axis index.
        axis: u32,
    },
    /// A TASK's operand records are wrong.
    #[error("TASK operand {position}: expected {expected}, found {found}")]
    TaskOperand {
        /// Position after the TASK (0-based).
        position: u32,
        /// What was expected.
        expected: &'static str,
        /// Mnemonic found (or "end of body").
        found: &'static str,
    },
    /// A task's parameter or IO count disagrees with its kernel.
    #[error("kernel {kernel} takes {expected} {what} but the task passes {found}")]
    Arity {
        /// Kernel index.
        kernel: u32,
        /// "parameters" or "IO regions".
        what: &'static str,
        /// Declared.
        expected: u32,
        /// Passed.
        found: u32,
    },
    /// An IO record's direction disagrees with its kernel argument.
    #[error(
        "argument {position} of kernel {kernel} is declared {declared} but the task passes {found}"
    )]
    Direction {
        /// Kernel index.
        kernel: u32,
        /// IO position.
        position: u32,
        /// Declared direction.
        declared: &'static str,
        /// Opcode found.
        found: &'static str,
    },
    /// A region with more dimensions than its tensor.
    #[error("region has {dims} dimensions but tensor {tensor} has rank {rank}")]
    RegionRank {
        /// Dimensions given.
        dims: u32,
        /// Tensor index.
        tensor: u32,
        /// Its rank.
        rank: u32,
    },
    /// An expression is malformed.
    #[error("expression at node {node}: {problem}")]
    Expr {
        /// The node where it went wrong.
        node: u32,
        /// What went wrong.
        problem: ExprProblem,
    },
    /// A loop variable that is not bound where it is used.
    #[error("loop depth {depth} is used where only {bound} loops enclose it")]
    UnboundLoopVar {
        /// Depth used.
        depth: u32,
        /// Loops enclosing the use.
        bound: u32,
    },
    /// A task nested less deeply than its dispatch policy needs.
    #[error("the dispatch policy reads loop depth {needed_minus_one} but this task is inside only {have} loops")]
    DispatchDepth {
        /// Deepest loop the policy reads.
        needed_minus_one: u32,
        /// Loops around the task.
        have: u32,
    },
    /// A threshold configuration is malformed.
    #[error("threshold policy: {problem}")]
    Threshold {
        /// What.
        problem: &'static str,
    },
    /// A module-header text is not printable ASCII free of `"` and `\\`.
    #[error("module-header text must be printable ASCII without '\"' or '\\'")]
    BadText,
    /// A planned value is malformed.
    #[error("planned value {plan}: {problem}")]
    Plan {
        /// The plan's index in the plan table.
        plan: u32,
        /// What.
        problem: &'static str,
    },
    /// A kernel's workspace does not fit the program's workspace arena.
    #[error("kernel {kernel}'s workspace of {need} bytes is larger than the {arena}-byte workspace arena")]
    Workspace {
        /// The kernel.
        kernel: u32,
        /// Its workspace, bytes.
        need: u32,
        /// The arena, bytes.
        arena: u32,
    },
    /// A `READBACK` that breaks a rule of §5.9.
    #[error("read-back: {problem}")]
    Readback {
        /// What.
        problem: &'static str,
    },
    /// A runtime parameter's default is not where or what the format requires.
    #[error("runtime parameter {slot}: {problem}")]
    BadDefault {
        /// The slot.
        slot: u32,
        /// What.
        problem: &'static str,
    },
    /// The module-header entries are out of order or repeated.
    #[error("module-header entries must be at most one module, then at most one version, then the targets")]
    InfoOrder,
    /// A tensor's layout does not give one entry per dimension.
    #[error("a layout of {len} dimension(s) for a tensor of rank {rank}")]
    LayoutRank {
        /// Dimensions the layout gives.
        len: u32,
        /// The tensor's rank.
        rank: u32,
    },
    /// The stream-order tensor of `stream_by`, or a task's access to it, is not as the format
    /// requires (spec/bytecode.md §3.6).
    #[error("stream order: {problem}")]
    StreamOrder {
        /// What.
        problem: &'static str,
    },
}

/// What is wrong with an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExprProblem {
    /// Unknown operator byte.
    #[error("unknown operator 0x{0:02X}")]
    UnknownOp(u8),
    /// An operator with too few operands on the stack.
    #[error("stack underflow")]
    Underflow,
    /// More than the evaluation stack holds.
    #[error("stack deeper than 8")]
    Overflow,
    /// Longer than the limit.
    #[error("longer than 64 nodes")]
    TooLong,
    /// `END` with other than one value on the stack.
    #[error("END leaves {0} values on the stack, expected 1")]
    NotSingle(u32),
    /// The pool ends inside an expression.
    #[error("expression pool ends before END")]
    Unterminated,
    /// Unused operand bits are set.
    #[error("unused operand bits are not zero")]
    NonCanonical,
    /// A loop variable where none may be read (a threshold selector).
    #[error("loop variables cannot be read here")]
    VarNotAllowed,
    /// A reduction or search outside a planned value's expression.
    #[error("reductions and searches may only compute planned values")]
    BinderOutsidePlan,
    /// A reduction or search whose body does not start an expression before it in the pool.
    #[error("a reduction's body must be an expression earlier in the pool")]
    BodyNotBefore,
    /// An expression named by a table that does not start one (its previous node is not `END`).
    #[error("does not start an expression")]
    NotStart,
    /// A task's parameter or region size (`ARG`, `SIZE`) outside a kernel's cost expression.
    #[error("a task's parameters and region sizes can only be read in a kernel's cost")]
    CostOnly,
}

/// A verifier error: what and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {kind}")]
pub struct VerifyError {
    /// What is wrong.
    pub kind: ErrorKind,
    /// Where.
    pub at: Location,
}

impl VerifyError {
    /// Whether the file itself is damaged or foreign (too short, bad magic, unknown version,
    /// length or section sizes that disagree, bad checksum) rather than a well-framed file whose
    /// program breaks a rule. The CLI gives the two different exit codes: the first usually
    /// means a broken transfer, the second a broken producer.
    pub fn is_framing(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::TooShort { .. }
                | ErrorKind::BadMagic { .. }
                | ErrorKind::UnsupportedVersion { .. }
                | ErrorKind::LengthMismatch { .. }
                | ErrorKind::SectionSizeMismatch { .. }
                | ErrorKind::BadChecksum { .. }
        )
    }

    /// A distinct small number per error variant, used by tests that want to match kinds
    /// without comparing messages.
    pub fn code(&self) -> u8 {
        match self.kind {
            ErrorKind::TooShort { .. } => 1,
            ErrorKind::BadMagic { .. } => 2,
            ErrorKind::UnsupportedVersion { .. } => 3,
            ErrorKind::LengthMismatch { .. } => 4,
            ErrorKind::SectionSizeMismatch { .. } => 5,
            ErrorKind::BadChecksum { .. } => 6,
            ErrorKind::LimitExceeded { .. } => 7,
            ErrorKind::TooSmall { .. } => 8,
            ErrorKind::NonZero { .. } => 9,
            ErrorKind::BadCode { .. } => 10,
            ErrorKind::NameNotCanonical { .. } => 11,
            ErrorKind::BadName => 12,
            ErrorKind::StrtabSlack { .. } => 13,
            ErrorKind::UnknownOpcode { .. } => 14,
            ErrorKind::Misplaced { .. } => 15,
            ErrorKind::MissingHalt => 16,
            ErrorKind::BadEnd { .. } => 17,
            ErrorKind::NestingTooDeep { .. } => 18,
            ErrorKind::LoopTooDeep { .. } => 19,
            ErrorKind::ChildCount { .. } => 20,
            ErrorKind::ElseNotSequential { .. } => 21,
            ErrorKind::OutOfRange { .. } => 22,
            ErrorKind::SlotKind { .. } => 23,
            ErrorKind::SelectNotSparse { .. } => 24,
            ErrorKind::TaskOperand { .. } => 25,
            ErrorKind::Arity { .. } => 26,
            ErrorKind::Direction { .. } => 27,
            ErrorKind::RegionRank { .. } => 28,
            ErrorKind::Expr { .. } => 29,
            ErrorKind::UnboundLoopVar { .. } => 30,
            ErrorKind::DispatchDepth { .. } => 31,
            ErrorKind::Threshold { .. } => 32,
            ErrorKind::BadText => 33,
            ErrorKind::BadDefault { .. } => 34,
            ErrorKind::InfoOrder => 35,
            ErrorKind::LayoutRank { .. } => 36,
            ErrorKind::StreamOrder { .. } => 37,
            ErrorKind::Plan { .. } => 38,
            ErrorKind::Workspace { .. } => 39,
            ErrorKind::Readback { .. } => 40,
        }
    }
}
