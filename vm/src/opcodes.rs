//! The one list of PTOW opcodes and expression operators.
//!
//! Everything that needs to know the opcodes (the enum, decoding from a byte, mnemonics, the
//! operand fields the listing format prints, and the facts the verifier checks) is generated from
//! the two tables below. Nothing else in ptovm lists opcodes.

/// Where an operand field lives inside an 8-byte record `{opcode u8, flags u8, operand1 u16,
/// operand2 u32}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The `flags` byte.
    Flags,
    /// `operand1` (u16).
    Op1,
    /// All of `operand2` (u32), printed unsigned.
    Op2,
    /// All of `operand2`, read as a two's-complement `i32`.
    Op2Signed,
    /// The low 16 bits of `operand2`.
    Op2Lo,
    /// The high 16 bits of `operand2`.
    Op2Hi,
}

/// A named operand field of an opcode, as printed and parsed by the listing format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's name in the listing (`axis=3`).
    pub name: &'static str,
    /// Where the value is stored.
    pub slot: Slot,
}

/// What kind of instruction an opcode is, and so where it may appear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    /// `HALT`: the last instruction of the code section, exactly once.
    Halt,
    /// `NOP`: a statement with no effect.
    Nop,
    /// A loop over an axis: binds one loop variable for its body.
    Loop,
    /// A structured statement whose body follows it and ends at `operand2`.
    Block,
    /// `TASK`: followed by its parameter and IO operand instructions.
    Task,
    /// A task parameter (`PARAM_*`): only directly after a `TASK`.
    Param,
    /// A task IO region (`IO_*`): only after a `TASK`'s parameters.
    Io,
    /// An axis definition: only in the axis section.
    Axis,
    /// `READBACK`: a point where every AICPU waits for all earlier tasks, then reads a tensor
    /// back as a runtime array (spec/bytecode.md §5.9).
    Sync,
}

macro_rules! opcode_table {
    ($( $(#[doc = $doc:literal])* $name:ident = $code:literal, $class:ident, [$($fname:literal : $fslot:ident),*]; )*) => {
        /// A PTOW instruction opcode (spec/bytecode.md §4).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        #[allow(non_camel_case_types)]
        pub enum Opcode {
            $( $(#[doc = $doc])* $name = $code, )*
        }

        impl Opcode {
            /// Every opcode, in numeric order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name),*];

            /// Decodes an opcode byte; `None` for a byte that names no opcode.
            #[inline]
            pub const fn from_u8(b: u8) -> Option<Opcode> {
                match b {
                    $($code => Some(Opcode::$name),)*
                    _ => None,
                }
            }

            /// The opcode's mnemonic, as in the seed (`PARALLEL_FOR`).
            pub const fn mnemonic(self) -> &'static str {
                match self {
                    $(Opcode::$name => stringify!($name),)*
                }
            }

            /// Where the opcode may appear and how it is checked.
            #[inline]
            pub const fn class(self) -> OpClass {
                match self {
                    $(Opcode::$name => OpClass::$class,)*
                }
            }

            /// The operand fields the opcode uses. Every other bit of the record must be zero.
            pub const fn fields(self) -> &'static [Field] {
                match self {
                    $(Opcode::$name => &[$(Field { name: $fname, slot: Slot::$fslot }),*],)*
                }
            }

            /// Looks an opcode up by mnemonic.
            pub fn from_mnemonic(s: &str) -> Option<Opcode> {
                match s {
                    $(stringify!($name) => Some(Opcode::$name),)*
                    _ => None,
                }
            }
        }
    };
}

opcode_table! {
    /// End of the program. The last instruction of the code section, and only there.
    HALT = 0x00, Halt, [];
    /// No effect.
    NOP = 0x01, Nop, [];
    /// `parallel_for v in axis { body }`: iterations are independent.
    PARALLEL_FOR = 0x10, Loop, ["axis": Op1, "end": Op2];
    /// `for_each v in axis { body }`: iterations are ordered.
    FOR_EACH = 0x11, Loop, ["axis": Op1, "end": Op2];
    /// `select v in sparse(...) { body }`: iterates the selected indices of a sparse axis.
    SELECT = 0x12, Loop, ["axis": Op1, "end": Op2];
    /// `cond pred { then } [else { else }]`; with `else=1` the else block is the `SEQUENTIAL`
    /// at `end`.
    COND = 0x13, Block, ["else": Flags, "pred": Op1, "end": Op2];
    /// `combine { branches }`: `branches` direct child statements, independent.
    COMBINE = 0x14, Block, ["branches": Op1, "end": Op2];
    /// `sequential { steps }`: `steps` direct child statements, in order.
    SEQUENTIAL = 0x15, Block, ["steps": Op1, "end": Op2];
    /// `wait tensor <= bound`: every AICPU waits until every task before it has completed,
    /// then reads `tensor` back into the runtime array `slot` (each element in 0 ..= `bound`),
    /// which later statements read (v6 addition; top level only).
    READBACK = 0x16, Sync, ["tensor": Op1, "slot": Op2Lo, "bound": Op2Hi];
    /// Emits one task of `kernel`, followed by `params` PARAM_* and `io` IO_* records; `tier`
    /// is the index of the tier that chose `kernel` in its tier set (0 without one), which the
    /// task's descriptor carries.
    TASK = 0x20, Task, ["kernel": Op1, "params": Op2Lo, "io": Op2Hi, "tier": Flags];
    /// A constant task parameter.
    PARAM_CONST = 0x21, Param, ["value": Op2Signed];
    /// A task parameter equal to the loop variable at `depth` (0 = outermost).
    PARAM_LOOPVAR = 0x22, Param, ["depth": Op1];
    /// A task input region of `tensor`: `dims` region dimensions from `region` (0 = whole).
    IO_INPUT = 0x23, Io, ["dims": Flags, "tensor": Op1, "region": Op2];
    /// A task output region.
    IO_OUTPUT = 0x24, Io, ["dims": Flags, "tensor": Op1, "region": Op2];
    /// A task region that is both read and written (ptovm extension).
    IO_INOUT = 0x25, Io, ["dims": Flags, "tensor": Op1, "region": Op2];
    /// A task parameter computed by the expression at `expr` (ptovm extension).
    PARAM_EXPR = 0x26, Param, ["expr": Op2];
    /// `dense[extent]`.
    AXIS_DENSE = 0x30, Axis, ["extent": Op2];
    /// `dense_dyn(slot)`: the extent is the runtime scalar in `slot`.
    AXIS_DENSE_DYN = 0x31, Axis, ["slot": Op1];
    /// `ragged(outer, lengths)` (PTO-WSP): a flattened axis of `lengths[0] + … +
    /// lengths[outer − 1]` values 0, 1, …; `outer` an expression.
    AXIS_RAGGED = 0x32, Axis, ["lengths": Op1, "outer": Op2];
    /// `sparse(outer, indptr, indices)` (PTO-WSP): the values `indices[0 .. indptr[outer]]`.
    AXIS_SPARSE = 0x33, Axis, ["indptr": Op1, "outer": Op2Lo, "indices": Op2Hi];
    /// `dense_dyn(lengths[row])` (ptovm): the values 0 .. `lengths[row]`, one row of a
    /// ragged array; `row` an expression.
    AXIS_RAGGED_ROW = 0x34, Axis, ["lengths": Op1, "row": Op2];
    /// `sparse_row(row, indptr, indices)` (ptovm): the values
    /// `indices[indptr[row] .. indptr[row+1]]`, one row of a CSR matrix.
    AXIS_SPARSE_ROW = 0x35, Axis, ["indptr": Op1, "row": Op2Lo, "indices": Op2Hi];
    /// `tile(base, size)` (ptovm; PTO-WSP's `PTO_TILE`): the tiles of the axis `base` (a
    /// dense, dynamic or ragged-row axis earlier in the table) of `size` elements each, the
    /// last one partial: the values 0 .. ceil(extent / size); `size` an expression, at least
    /// 1 where the loop starts.
    AXIS_TILE = 0x36, Axis, ["axis": Op1, "size": Op2];
    /// Overrides the dispatch policy for its body (ptovm: `dispatch policy { body }`).
    DISPATCH_FILTER = 0x40, Block, ["policy": Flags, "arg": Op1, "end": Op2];
}

impl Opcode {
    /// Whether this opcode opens a body that ends at `operand2`.
    pub const fn has_body(self) -> bool {
        matches!(self.class(), OpClass::Loop | OpClass::Block)
    }

    /// For an axis opcode: the expression its record `r` evaluates where a loop over it
    /// starts (a ragged or sparse axis's `outer` count or `row`), if any.
    #[inline]
    pub fn axis_expr(self, r: &crate::Record) -> Option<u32> {
        match self {
            Opcode::AXIS_RAGGED | Opcode::AXIS_RAGGED_ROW | Opcode::AXIS_TILE => Some(r.op2()),
            Opcode::AXIS_SPARSE | Opcode::AXIS_SPARSE_ROW => Some(r.op2() & 0xFFFF),
            _ => None,
        }
    }

    /// The expressions a loop over the axis record `r` (of the table `axes`) evaluates where
    /// it starts: the axis's own ([`Opcode::axis_expr`]: a tiled axis's `size`) and, for a
    /// tiled axis, its base axis's (a ragged row's `row`).
    pub fn loop_exprs(axes: &[crate::Record], r: &crate::Record) -> [Option<u32>; 2] {
        let Some(op) = Opcode::from_u8(r.opcode) else {
            return [None, None];
        };
        let base = match op {
            Opcode::AXIS_TILE => axes
                .get(r.op1() as usize)
                .and_then(|b| Opcode::from_u8(b.opcode).and_then(|o| o.axis_expr(b))),
            _ => None,
        };
        [op.axis_expr(r), base]
    }

    /// For an axis opcode: whether its values are stored column indices (a sparse axis;
    /// `SELECT` iterates only these) rather than the iteration indices 0, 1, ….
    #[inline]
    pub const fn is_sparse_axis(self) -> bool {
        matches!(self, Opcode::AXIS_SPARSE | Opcode::AXIS_SPARSE_ROW)
    }
}

/// Arity class of an expression operator: how many values it pops and pushes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExprKind {
    /// Terminates an expression (pops the result).
    End,
    /// Pushes one value, pops none (constants, variables, runtime scalars).
    Leaf,
    /// Pops one, pushes one.
    Unary,
    /// Pops two, pushes one.
    Binary,
    /// A reduction or search (planned values only, spec/bytecode.md §6.1): pops the bounds
    /// `lo` and `hi` of a range, binds its variable to values of `[lo, hi)` and evaluates the
    /// expression `body` at each; pushes one.
    Binder,
}

macro_rules! expr_table {
    ($( $(#[doc = $doc:literal])* $name:ident = $code:literal, $kind:ident, $sym:literal, [$($fname:literal : $fslot:ident),*]; )*) => {
        /// An expression operator (spec/bytecode.md §6). Expressions are postfix sequences of
        /// 8-byte records in the expression pool, each terminated by `END`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum ExprOp {
            $( $(#[doc = $doc])* $name = $code, )*
        }

        impl ExprOp {
            /// Every operator, in numeric order.
            pub const ALL: &'static [ExprOp] = &[$(ExprOp::$name),*];

            /// Decodes an operator byte.
            #[inline(always)]
            pub const fn from_u8(b: u8) -> Option<ExprOp> {
                match b {
                    $($code => Some(ExprOp::$name),)*
                    _ => None,
                }
            }

            /// The operator's mnemonic (`ADD`).
            pub const fn mnemonic(self) -> &'static str {
                match self {
                    $(ExprOp::$name => stringify!($name),)*
                }
            }

            /// Its arity class.
            #[inline]
            pub const fn kind(self) -> ExprKind {
                match self {
                    $(ExprOp::$name => ExprKind::$kind,)*
                }
            }

            /// Its `.pto` spelling: an infix symbol, a prefix symbol or a function name; empty
            /// for leaves and `END`.
            pub const fn symbol(self) -> &'static str {
                match self {
                    $(ExprOp::$name => $sym,)*
                }
            }

            /// The operand fields it uses; every other bit must be zero.
            pub const fn fields(self) -> &'static [Field] {
                match self {
                    $(ExprOp::$name => &[$(Field { name: $fname, slot: Slot::$fslot }),*],)*
                }
            }

            /// Looks an operator up by mnemonic.
            pub fn from_mnemonic(s: &str) -> Option<ExprOp> {
                match s {
                    $(stringify!($name) => Some(ExprOp::$name),)*
                    _ => None,
                }
            }
        }
    };
}

expr_table! {
    /// Ends an expression; its value is the single value left on the stack.
    END = 0x00, End, "", [];
    /// Pushes the constant `value` (i32, sign-extended).
    CONST = 0x01, Leaf, "", ["value": Op2Signed];
    /// Pushes the loop variable at `depth` (0 = outermost enclosing loop).
    VAR = 0x02, Leaf, "", ["depth": Op1];
    /// Pushes the runtime scalar in `slot`.
    PARAM = 0x03, Leaf, "", ["slot": Op1];
    /// Pops `i`, pushes element `i` of the runtime array in `slot`.
    ELEM = 0x04, Unary, "", ["slot": Op1];
    /// Pushes the task's scalar parameter `index` (a kernel's cost expression only, §6.2).
    ARG = 0x05, Leaf, "", ["index": Op1];
    /// Pushes a size of the task's region `region` (a kernel's cost expression only, §6.2):
    /// its elements for `dim` 0, its extent in dimension `dim − 1` otherwise.
    SIZE = 0x06, Leaf, "", ["region": Op1, "dim": Op2];
    /// Negation.
    NEG = 0x10, Unary, "-", [];
    /// Logical not: 1 if the operand is 0, else 0.
    NOT = 0x11, Unary, "!", [];
    /// Addition.
    ADD = 0x20, Binary, "+", [];
    /// Subtraction.
    SUB = 0x21, Binary, "-", [];
    /// Multiplication.
    MUL = 0x22, Binary, "*", [];
    /// Division truncating toward zero.
    DIV = 0x23, Binary, "/", [];
    /// Remainder with the sign of the dividend.
    MOD = 0x24, Binary, "%", [];
    /// Smaller of two.
    MIN = 0x25, Binary, "min", [];
    /// Larger of two.
    MAX = 0x26, Binary, "max", [];
    /// Division rounding toward positive infinity.
    CEILDIV = 0x27, Binary, "ceil_div", [];
    /// 1 if equal, else 0.
    EQ = 0x30, Binary, "==", [];
    /// 1 if not equal.
    NE = 0x31, Binary, "!=", [];
    /// 1 if less.
    LT = 0x32, Binary, "<", [];
    /// 1 if less or equal.
    LE = 0x33, Binary, "<=", [];
    /// 1 if greater.
    GT = 0x34, Binary, ">", [];
    /// 1 if greater or equal.
    GE = 0x35, Binary, ">=", [];
    /// 1 if both are non-zero.
    AND = 0x36, Binary, "&&", [];
    /// 1 if either is non-zero.
    OR = 0x37, Binary, "||", [];
    /// `sum(v in lo .. hi: body)`: the sum of `body` over the range (0 if it is empty).
    SUM = 0x40, Binder, "sum", ["var": Op1, "body": Op2];
    /// `max(v in lo .. hi: body)`: the largest value of `body` (the range must not be empty).
    MAXOF = 0x41, Binder, "max", ["var": Op1, "body": Op2];
    /// `min(v in lo .. hi: body)`: the smallest.
    MINOF = 0x42, Binder, "min", ["var": Op1, "body": Op2];
    /// `search(v in lo .. hi: body)`: the smallest `v` of the range at which `body` is non-zero,
    /// by binary search (`body` must hold at `hi − 1` and, to be meaningful, from some value on).
    SEARCH = 0x43, Binder, "search", ["var": Op1, "body": Op2];
}

macro_rules! named_enum {
    ($(#[doc = $tdoc:literal])* $ty:ident { $( $(#[doc = $doc:literal])* $name:ident = $code:literal, $text:literal; )* }) => {
        $(#[doc = $tdoc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $ty {
            $( $(#[doc = $doc])* $name = $code, )*
        }

        impl $ty {
            /// Every value, in numeric order.
            pub const ALL: &'static [$ty] = &[$($ty::$name),*];

            /// Decodes the byte; `None` if it names no value.
            #[inline]
            pub const fn from_u8(b: u8) -> Option<$ty> {
                match b {
                    $($code => Some($ty::$name),)*
                    _ => None,
                }
            }

            /// The value's name in `.pto` text and listings.
            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$name => $text,)*
                }
            }

            /// Looks a value up by its name.
            pub fn from_name(s: &str) -> Option<$ty> {
                match s {
                    $($text => Some($ty::$name),)*
                    _ => None,
                }
            }
        }
    };
}

named_enum! {
    /// Which AICore pool runs a kernel (seed 001 §5.1: Vector 0, Cube 1).
    Pool {
        /// The vector (AIV) cores.
        Vector = 0, "vector";
        /// The cube (AIC) cores.
        Cube = 1, "cube";
    }
}

named_enum! {
    /// How a kernel argument (a task IO region) is accessed.
    Dir {
        /// Read only.
        In = 1, "in";
        /// Written only.
        Out = 2, "out";
        /// Read and written.
        InOut = 3, "inout";
    }
}

impl Dir {
    /// The IO opcode that carries a region with this direction.
    pub const fn io_opcode(self) -> Opcode {
        match self {
            Dir::In => Opcode::IO_INPUT,
            Dir::Out => Opcode::IO_OUTPUT,
            Dir::InOut => Opcode::IO_INOUT,
        }
    }

    /// The direction an IO opcode carries; `None` for other opcodes.
    pub const fn of_io(op: Opcode) -> Option<Dir> {
        match op {
            Opcode::IO_INPUT => Some(Dir::In),
            Opcode::IO_OUTPUT => Some(Dir::Out),
            Opcode::IO_INOUT => Some(Dir::InOut),
            _ => None,
        }
    }
}

named_enum! {
    /// Element type of a tensor.
    DType {
        /// Unknown: the tensor was used without a declaration.
        Unknown = 0, "unknown";
        /// IEEE half.
        F16 = 1, "f16";
        /// bfloat16.
        Bf16 = 2, "bf16";
        /// IEEE single.
        F32 = 3, "f32";
        /// IEEE double.
        F64 = 4, "f64";
        /// 8-bit float (e4m3).
        F8 = 5, "f8";
        /// Signed integers.
        I8 = 6, "i8";
        /// 16-bit signed.
        I16 = 7, "i16";
        /// 32-bit signed.
        I32 = 8, "i32";
        /// 64-bit signed.
        I64 = 9, "i64";
        /// Unsigned 8-bit.
        U8 = 10, "u8";
        /// Unsigned 16-bit.
        U16 = 11, "u16";
        /// Unsigned 32-bit.
        U32 = 12, "u32";
        /// Unsigned 64-bit.
        U64 = 13, "u64";
        /// Boolean (one byte).
        Bool = 14, "bool";
    }
}

impl DType {
    /// Bytes per element (0 for `Unknown`).
    pub fn size(self) -> usize {
        match self {
            DType::Unknown => 0,
            DType::F8 | DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F16 | DType::Bf16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }
}

named_enum! {
    /// Kind of a runtime-parameter slot.
    ParamKind {
        /// One u32 value (a dynamic extent, a scalar in expressions).
        Scalar = 0, "scalar";
        /// An array of u32 values (ragged lengths, sparse indptr or indices).
        Array = 1, "array";
    }
}

named_enum! {
    /// What a module-header entry holds (PTO-WSP's `module`, `version` and `target` lines).
    InfoKind {
        /// `module "NAME"`.
        Module = 0, "module";
        /// `version "TEXT"`.
        Version = 1, "version";
        /// One of `target "A" | "B"`.
        Target = 2, "target";
    }
}

named_enum! {
    /// A PTO-WSP workload or schedule level (`@workload[npu]`; PTO-WSP's default is `cpu`).
    Level {
        /// Host-side orchestration, PTO-WSP's default.
        Cpu = 0, "cpu";
        /// NPU level: PTO-WSP allows no `parallel_for` in an NPU-level workload.
        Npu = 1, "npu";
    }
}

named_enum! {
    /// A dispatch policy (seed 001 §4.1, plus `hash`).
    Policy {
        /// Task `t` goes to AICPU `t mod n` (t = program-order task id).
        RoundRobin = 0, "round_robin";
        /// Task goes to AICPU `key mod n`; the key is an expression over loop variables.
        Affinity = 1, "affinity";
        /// Multi-level: a launch-time selector chooses one of up to 8 level policies.
        Threshold = 2, "threshold";
        /// The loop at `depth` is cut into `n` contiguous blocks, block `i` to AICPU `i`.
        StaticPartition = 3, "static";
        /// Task goes to AICPU `mix(key) mod n` (a fixed 64-bit mixing function).
        Hash = 4, "hash";
    }
}

named_enum! {
    /// `timing` schedule knob (PTO-WSP).
    Timing {
        /// Issue tasks as soon as they are ready.
        Immediate = 0, "immediate";
        /// Issue in batches of at least `arg` ready tasks.
        Batched = 1, "batched";
        /// Issue round-robin over the `arg` streams of `stream_by`.
        Interleaved = 2, "interleaved";
        /// Issue at most `arg` tasks per millisecond (the whole launch).
        RateLimit = 3, "rate_limit";
    }
}

named_enum! {
    /// Ready-queue policy (seed 003).
    ReadyPolicy {
        /// First in, first out per pool.
        Fifo = 0, "fifo";
        /// Chase-Lev work stealing between AICPUs.
        WorkSteal = 1, "work_steal";
    }
}

named_enum! {
    /// When execution starts relative to generation (seed 003 §7).
    StartPolicy {
        /// Execute as tasks become ready.
        Immediate = 0, "immediate";
        /// Wait until generation has finished.
        AfterOrchestration = 1, "after_orchestration";
        /// Wait until `start_threshold` tasks were generated.
        Threshold = 2, "threshold";
    }
}

named_enum! {
    /// What a full task window does (seed 003 §2.4).
    WindowMode {
        /// Generation waits for a slot.
        Stall = 0, "stall";
        /// The run stops with an error.
        Abort = 1, "abort";
        /// Overflows are counted and the window grows past its size (measurement only).
        Benchmark = 2, "benchmark";
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{slot_max, Record};

    #[test]
    fn opcode_table_is_consistent() {
        for op in Opcode::ALL {
            assert_eq!(Opcode::from_u8(*op as u8), Some(*op));
            assert_eq!(Opcode::from_mnemonic(op.mnemonic()), Some(*op));
            // Fields of one opcode never share bits: setting each to its maximum and reading
            // them back gives the maximum for every field.
            let mut r = Record::new(*op as u8, 0, 0, 0);
            for f in op.fields() {
                r.set(f.slot, slot_max(f.slot));
            }
            for f in op.fields() {
                assert_eq!(r.get(f.slot), slot_max(f.slot), "{op:?}.{}", f.name);
            }
            assert_eq!(r.masked(op.fields()), r);
        }
        let defined = (0..=255u8)
            .filter(|b| Opcode::from_u8(*b).is_some())
            .count();
        assert_eq!(defined, Opcode::ALL.len());
        // The seed's opcode numbers (seed 001 §3.1).
        let seed = [
            ("HALT", 0x00),
            ("NOP", 0x01),
            ("PARALLEL_FOR", 0x10),
            ("FOR_EACH", 0x11),
            ("SELECT", 0x12),
            ("COND", 0x13),
            ("COMBINE", 0x14),
            ("SEQUENTIAL", 0x15),
            ("TASK", 0x20),
            ("PARAM_CONST", 0x21),
            ("PARAM_LOOPVAR", 0x22),
            ("IO_INPUT", 0x23),
            ("IO_OUTPUT", 0x24),
            ("AXIS_DENSE", 0x30),
            ("AXIS_DENSE_DYN", 0x31),
            ("AXIS_RAGGED", 0x32),
            ("AXIS_SPARSE", 0x33),
            ("DISPATCH_FILTER", 0x40),
            // ptovm's own.
            ("IO_INOUT", 0x25),
            ("PARAM_EXPR", 0x26),
            ("AXIS_RAGGED_ROW", 0x34),
            ("AXIS_SPARSE_ROW", 0x35),
            ("AXIS_TILE", 0x36),
        ];
        for (name, code) in seed {
            assert_eq!(
                Opcode::from_mnemonic(name).map(|o| o as u8),
                Some(code),
                "{name}"
            );
        }
    }

    #[test]
    fn expr_table_is_consistent() {
        for op in ExprOp::ALL {
            assert_eq!(ExprOp::from_u8(*op as u8), Some(*op));
            assert_eq!(ExprOp::from_mnemonic(op.mnemonic()), Some(*op));
            let binary_symbol = !op.symbol().is_empty() && op.kind() == ExprKind::Binary;
            let unary_symbol = !op.symbol().is_empty() && op.kind() == ExprKind::Unary;
            let binder = !op.symbol().is_empty() && op.kind() == ExprKind::Binder;
            assert!(binary_symbol || unary_symbol || binder || op.symbol().is_empty());
        }
        assert_eq!(ExprOp::END as u8, 0, "a zeroed record ends an expression");
    }

    #[test]
    fn named_enums_round_trip() {
        for d in Dir::ALL {
            assert_eq!(Dir::of_io(d.io_opcode()), Some(*d));
            assert_eq!(Dir::from_name(d.name()), Some(*d));
        }
        for p in Policy::ALL {
            assert_eq!(Policy::from_u8(*p as u8), Some(*p));
        }
        assert_eq!(Pool::from_name("cube"), Some(Pool::Cube));
        assert_eq!(DType::from_u8(15), None);
    }
}
