//! The task descriptor (spec/runtime.md §3.8): what a core is told about the task it runs.
//!
//! A descriptor has a fixed size and no pointers into the interpreter (seed 000 §6.1): the
//! task's id, kernel and pool, its parameter values, and each of its regions resolved against
//! its tensor's [`Binding`] — the element offset of the region's first element from the
//! tensor's base, the byte address once the tensor is bound to memory, and per dimension the
//! extent and the stride (in elements). A kernel addresses element `(i₀, …, iᵣ₋₁)` of its
//! region at `offset + Σ iₖ · stride[k]`, `0 ≤ iₖ < extent[k]`.
//!
//! The AICPU that places a task in a window slot writes its descriptor into the slot's words
//! ([`write`]), packed — the header, the parameters, and per region only the extents and
//! strides of its rank — in the [`slot_words`] words the program's largest task needs (a few
//! hundred bytes for the bundled examples, against the 2,080 of the full struct: the windows'
//! descriptors stay small in memory). The core that takes the task reads it back into a
//! [`Descriptor`] ([`read`]) after the handshake hands the slot over. A slot is written only
//! while no core holds it (between its retirement and the next placement) and read only while
//! a core does, so the words need no more than `Relaxed` ordering: the slot's `task` word
//! (Release at placement) and the handshake order them. The slot is a run of atomic words so
//! that this takes no `unsafe` code; on AArch64 and x86-64 a relaxed atomic store or load is a
//! plain one.
//!
//! ```
//! use ptovm_vm::desc::{Descriptor, DESC_BYTES};
//! assert_eq!(core::mem::size_of::<Descriptor>(), DESC_BYTES);
//! ```

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::format::{limits, TensorEntry, TENSOR_STREAM};
use crate::interp::Task;
use crate::opcodes::Opcode;
use crate::params::RuntimeParams;
use crate::sync::{AtomicU64, Ordering};
use crate::verify::Verified;

/// One region of a task, resolved against its tensor (120 bytes).
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct RegionDesc {
    /// Tensor index in the program's tensor table.
    pub tensor: u16,
    /// Direction (`Dir` code: 1 in, 2 out, 3 inout).
    pub dir: u8,
    /// Dimensions described (the tensor's rank; 0 for an implicit tensor, which has no shape).
    pub rank: u8,
    /// The tensor's `DType` code (spec/bytecode.md).
    pub dtype: u8,
    /// Zero.
    pub reserved: [u8; 3],
    /// Elements from the tensor's first element to the region's first.
    pub offset: i64,
    /// The region's first byte when the tensor is bound to memory (the binding's base +
    /// `offset` × element size); 0 when it is not.
    pub addr: u64,
    /// Extent of each dimension (`extent[..rank]`; the rest 0).
    pub extent: [u32; 8],
    /// Stride of each dimension in elements (`stride[..rank]`; the rest 0).
    pub stride: [i64; 8],
}

/// A task as its core sees it (2,080 bytes; C: `ptovm_desc`).
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Descriptor {
    /// Program-order task id.
    pub id: u64,
    /// Kernel index in the program's kernel table.
    pub kernel: u16,
    /// Pool: 0 cube, 1 vector.
    pub pool: u8,
    /// Parameters given (`params[..nparams]`).
    pub nparams: u8,
    /// Regions given (`regions[..nregions]`).
    pub nregions: u8,
    /// The tier that chose the kernel in its tier set (0 for a task that names its kernel).
    pub tier: u8,
    /// Zero.
    pub reserved: [u8; 2],
    /// Where its scratch starts: bytes from the launch's workspace memory (the AICPUs' arenas
    /// one after another, spec/runtime.md §4.4); 0 with `workspace_bytes` 0 when its kernel
    /// has none.
    pub workspace_offset: u32,
    /// Its scratch's size: its kernel's workspace, bytes (a multiple of 64).
    pub workspace_bytes: u32,
    /// The scratch's first byte when the launcher gave workspace memory (its base +
    /// `workspace_offset`); 0 when it did not or the kernel has none.
    pub workspace_addr: u64,
    /// The task's parameter values, in its kernel's parameter order.
    pub params: [i64; 16],
    /// Its regions, in its `resources(…)` order.
    pub regions: [RegionDesc; 16],
}

/// A descriptor's size in bytes (the C struct a core reads it into; a window slot keeps it
/// packed, in [`slot_words`] words).
pub const DESC_BYTES: usize = DESC_WORDS * 8;
/// A descriptor's size in 64-bit words.
pub const DESC_WORDS: usize =
    HEADER_WORDS + limits::MAX_TASK_PARAMS + limits::MAX_TASK_IO * REGION_WORDS;
const HEADER_WORDS: usize = 4;
const REGION_WORDS: usize = 15;
// The C header (cbindgen) needs the array lengths as numbers: they are the format's limits.
const _: () = assert!(limits::MAX_RANK == 8 && limits::MAX_TASK_PARAMS == 16);
const _: () = assert!(limits::MAX_TASK_IO == 16);
const _: () = assert!(core::mem::size_of::<RegionDesc>() == REGION_WORDS * 8);
const _: () = assert!(core::mem::size_of::<Descriptor>() == DESC_BYTES);
// The words pack the fields in little-endian order (AArch64 and x86-64 both are).
const _: () = assert!(cfg!(target_endian = "little"));

impl Default for Descriptor {
    fn default() -> Descriptor {
        Descriptor::new_zeroed()
    }
}

impl Descriptor {
    /// The parameters.
    pub fn params(&self) -> &[i64] {
        &self.params[..(self.nparams as usize).min(limits::MAX_TASK_PARAMS)]
    }
    /// The regions.
    pub fn regions(&self) -> &[RegionDesc] {
        &self.regions[..(self.nregions as usize).min(limits::MAX_TASK_IO)]
    }
}

impl RegionDesc {
    /// The extents.
    pub fn extents(&self) -> &[u32] {
        &self.extent[..(self.rank as usize).min(limits::MAX_RANK)]
    }
    /// The strides.
    pub fn strides(&self) -> &[i64] {
        &self.stride[..(self.rank as usize).min(limits::MAX_RANK)]
    }
    /// Elements in the region.
    pub fn len(&self) -> u64 {
        self.extents().iter().map(|&e| e as u64).product::<u64>() * u64::from(self.rank > 0)
    }
    /// Whether the region has no elements (or no shape).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tensor as the launch sees it: its shape with the runtime parameters resolved, its strides
/// in elements (row-major unless the launcher binds others), and where it is in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Binding {
    /// Rank (0: an implicit tensor, or the stream-order tensor: no shape, no memory).
    pub rank: u8,
    /// [`crate::DType`] code.
    pub dtype: u8,
    /// Whether it is the stream-order tensor (`stream_by`), which no kernel sees.
    pub stream: bool,
    /// Extent of each dimension.
    pub dims: [u32; limits::MAX_RANK],
    /// Stride of each dimension, in elements.
    pub strides: [i64; limits::MAX_RANK],
    /// Address of its first element; 0 when it is not bound to memory.
    pub base: u64,
    /// Bytes per element.
    pub elem_bytes: u32,
}

impl Binding {
    /// The declared tensor `t`, shaped by the runtime parameters `p`, row-major, not bound to
    /// memory.
    pub fn declared(t: &TensorEntry, p: &RuntimeParams<'_>) -> Binding {
        let rank = (t.rank as usize).min(limits::MAX_RANK);
        let mut b = Binding {
            rank: rank as u8,
            dtype: t.dtype,
            stream: t.flags.get() & TENSOR_STREAM != 0,
            elem_bytes: crate::DType::from_u8(t.dtype).map_or(0, |d| d.size() as u32),
            ..Binding::default()
        };
        if b.stream {
            b.rank = 0;
            return b;
        }
        for d in 0..rank {
            b.dims[d] = p.tensor_dim(t, d);
        }
        let mut stride = 1i64;
        for d in (0..rank).rev() {
            b.strides[d] = stride;
            stride = stride.saturating_mul(b.dims[d] as i64);
        }
        b
    }
}

/// A tensor as the launcher binds it to memory (C: `ptovm_tensor`): where its element 0 is,
/// how many bytes from there it may use, its element type, and its strides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct TensorArg {
    /// Address of element 0 (bytes); 0 leaves the tensor unbound (descriptors then give
    /// `addr = 0` for its regions).
    pub base: u64,
    /// Bytes of memory from `base` the tensor may use.
    pub bytes: u64,
    /// Element type (`DType` code): must be the declared one.
    pub dtype: u8,
    /// 0: row-major strides of the declared shape; else the tensor's rank, and `strides` gives
    /// one stride per dimension.
    pub rank: u8,
    /// Zero.
    pub reserved: [u8; 6],
    /// Strides in elements (with `rank` > 0), each at least 1, no two elements at one address.
    pub strides: [i64; 8],
}

/// Why a tensor binding is refused (each names the tensor by its index in the program).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// Not one binding per tensor of the program.
    #[error("{given} tensor bindings for a program of {expected} tensors")]
    Count {
        /// The program's tensors.
        expected: usize,
        /// Bindings given.
        given: usize,
    },
    /// The tensor has no declared shape (used without `@tensor`, or the stream-order tensor).
    #[error("tensor {tensor} has no declared shape and cannot be bound to memory")]
    NoShape {
        /// The tensor.
        tensor: u16,
    },
    /// The element type differs from the declaration.
    #[error("tensor {tensor} is declared {declared} but bound as {given}")]
    DType {
        /// The tensor.
        tensor: u16,
        /// The declared type's name.
        declared: &'static str,
        /// The bound type's name.
        given: &'static str,
    },
    /// `base` is not a multiple of the element size.
    #[error(
        "tensor {tensor}'s base address {base:#x} is not aligned to its {align}-byte elements"
    )]
    Misaligned {
        /// The tensor.
        tensor: u16,
        /// The address.
        base: u64,
        /// The element size.
        align: u32,
    },
    /// Strides given for another rank.
    #[error("tensor {tensor} has rank {declared} but strides were given for rank {given}")]
    Rank {
        /// The tensor.
        tensor: u16,
        /// Its rank.
        declared: u8,
        /// The binding's.
        given: u8,
    },
    /// A stride below 1, or strides that put two elements at one address.
    #[error(
        "tensor {tensor}'s strides {strides:?} are not positive and non-overlapping for its shape"
    )]
    Strides {
        /// The tensor.
        tensor: u16,
        /// The strides.
        strides: [i64; 8],
    },
    /// The memory is smaller than the elements the shape and strides reach.
    #[error("tensor {tensor} needs {need} bytes from its base but is bound to {given}")]
    TooSmall {
        /// The tensor.
        tensor: u16,
        /// Bytes its elements span (`u64::MAX`: more than an address holds).
        need: u64,
        /// Bytes given.
        given: u64,
    },
}

impl Binding {
    /// Bytes from element 0 to past the last element the shape reaches with these strides.
    pub fn span_bytes(&self) -> Option<u64> {
        let mut last = 0u64;
        for d in 0..(self.rank as usize).min(limits::MAX_RANK) {
            if self.dims[d] == 0 {
                return Some(0);
            }
            let step = u64::try_from(self.strides[d]).ok()?;
            last = last.checked_add((u64::from(self.dims[d]) - 1).checked_mul(step)?)?;
        }
        last.checked_add(1)?.checked_mul(u64::from(self.elem_bytes))
    }

    /// This declared tensor (number `tensor`) bound as `arg` says, checked: the declared element
    /// type, an aligned base, strides that are positive and keep elements apart, and memory for
    /// every element the shape reaches — so a region inside the shape (the verifier and the
    /// interpreter keep every region there) is inside the memory. A `base` of 0 leaves it
    /// unbound.
    pub fn bind(self, tensor: u16, arg: &TensorArg) -> Result<Binding, BindError> {
        if arg.base == 0 {
            return Ok(self);
        }
        if self.rank == 0 {
            return Err(BindError::NoShape { tensor });
        }
        let name = |code: u8| crate::DType::from_u8(code).map_or("an unknown type", |d| d.name());
        if arg.dtype != self.dtype {
            return Err(BindError::DType {
                tensor,
                declared: name(self.dtype),
                given: name(arg.dtype),
            });
        }
        let align = self.elem_bytes.max(1);
        if !arg.base.is_multiple_of(u64::from(align)) {
            return Err(BindError::Misaligned {
                tensor,
                base: arg.base,
                align,
            });
        }
        let mut b = self;
        b.base = arg.base;
        if arg.rank != 0 {
            if arg.rank != self.rank {
                return Err(BindError::Rank {
                    tensor,
                    declared: self.rank,
                    given: arg.rank,
                });
            }
            let rank = self.rank as usize;
            b.strides[..rank].copy_from_slice(&arg.strides[..rank]);
            if !b.strides_keep_elements_apart() {
                return Err(BindError::Strides {
                    tensor,
                    strides: arg.strides,
                });
            }
        }
        let need = b.span_bytes().unwrap_or(u64::MAX);
        if need > arg.bytes || arg.base.checked_add(need).is_none() {
            return Err(BindError::TooSmall {
                tensor,
                need,
                given: arg.bytes,
            });
        }
        Ok(b)
    }

    /// Whether every stride is at least 1 and, taken from the smallest, each is at least the
    /// span of the dimensions below it: then no two elements share an address.
    fn strides_keep_elements_apart(&self) -> bool {
        let rank = (self.rank as usize).min(limits::MAX_RANK);
        let mut order = [0usize; limits::MAX_RANK];
        for (i, o) in order[..rank].iter_mut().enumerate() {
            *o = i;
        }
        order[..rank].sort_unstable_by_key(|&d| self.strides[d]);
        let mut below = 1i64; // elements the smaller-strided dimensions span
        for &d in &order[..rank] {
            let stride = self.strides[d];
            if stride < below.max(1) {
                return false;
            }
            let Some(span) = stride.checked_mul(i64::from(self.dims[d])) else {
                return false;
            };
            below = span;
        }
        true
    }
}

/// How many words a window slot's descriptor takes for program `v`: the most any of its task
/// sites needs in the packed form (`write`): 4 header words, one per parameter, and per region
/// 3 words plus `⌈rank / 2⌉` of extents and `rank` of strides, `rank` its tensor's (0 for the
/// stream-order tensor, which a descriptor leaves out). At least 4.
pub fn slot_words(v: &Verified<'_>) -> usize {
    let code = v.code();
    let tensors = v.tensors();
    let mut most = HEADER_WORDS;
    for (pc, r) in code.iter().enumerate() {
        if r.opcode != Opcode::TASK as u8 {
            continue;
        }
        let (np, nio) = ((r.op2() & 0xFFFF) as usize, (r.op2() >> 16) as usize);
        let first = pc + 1 + np;
        let regions: usize = code
            .get(first..first + nio)
            .unwrap_or(&[])
            .iter()
            .map(|o| match tensors.get(o.op1() as usize) {
                Some(t) if t.flags.get() & TENSOR_STREAM == 0 => region_words(t.rank as usize),
                _ => 0,
            })
            .sum();
        most = most.max(HEADER_WORDS + np + regions);
    }
    most
}

/// Words of a packed region of rank `rank`.
fn region_words(rank: usize) -> usize {
    let rank = rank.min(limits::MAX_RANK);
    3 + rank.div_ceil(2) + rank
}

/// Writes the descriptor of task `t` into a window slot's `words` (its regions resolved
/// against `tensors`, indexed by tensor), packed: the four header words (the workspace's two
/// zero until [`set_workspace`]), the parameters, then
/// per region a word of tensor, direction, rank and dtype, the extents two to a word, the
/// strides, the offset and the address. `false`, with nothing written, when the slot is too
/// small for the task (it is not when it has [`slot_words`] words) or a region's tensor has
/// no binding.
pub fn write(words: &[AtomicU64], t: &Task, tensors: &[Binding]) -> bool {
    let params = t.params();
    let ios = t.ios();
    // The size first, so that the stores below index a slice known to hold them.
    let mut need = HEADER_WORDS + params.len();
    let mut nregions = 0u64;
    for io in ios {
        match tensors.get(io.tensor as usize) {
            Some(b) if b.stream => {}
            Some(b) => {
                need += region_words(b.rank as usize);
                nregions += 1;
            }
            None => return false,
        }
    }
    let Some(w) = words.get(..need) else {
        return false;
    };
    let put = |at: usize, v: u64| w[at].store(v, Ordering::Relaxed);
    put(0, t.id);
    put(
        1,
        u64::from(t.kernel)
            | (crate::sched::pool_index(t.pool()) as u64) << 16
            | (params.len() as u64) << 24
            | nregions << 32
            | u64::from(t.tier) << 40,
    );
    // The workspace is the issuing AICPU's to fill in (`set_workspace`).
    put(2, 0);
    put(3, 0);
    let mut at = HEADER_WORDS;
    for &p in params {
        put(at, p as u64);
        at += 1;
    }
    for io in ios {
        let Some(b) = tensors.get(io.tensor as usize).filter(|b| !b.stream) else {
            continue;
        };
        let rank = (b.rank as usize).min(limits::MAX_RANK);
        put(
            at,
            u64::from(io.tensor)
                | u64::from(io.dir) << 16
                | (rank as u64) << 24
                | u64::from(b.dtype) << 32,
        );
        at += 1;
        let named = io.dims();
        let mut offset = 0i64;
        let mut pair = 0u64;
        for d in 0..rank {
            let extent = match named.get(d) {
                Some(&(start, end)) => {
                    offset = offset.wrapping_add(start.wrapping_mul(b.strides[d]));
                    end.saturating_sub(start).clamp(0, u32::MAX as i64) as u64
                }
                None => u64::from(b.dims[d]),
            };
            if d % 2 == 0 {
                pair = extent;
            } else {
                put(at, pair | extent << 32);
                at += 1;
            }
        }
        if rank % 2 == 1 {
            put(at, pair);
            at += 1;
        }
        for &stride in &b.strides[..rank] {
            put(at, stride as u64);
            at += 1;
        }
        put(at, offset as u64);
        let addr = if b.base == 0 {
            0
        } else {
            b.base
                .wrapping_add((offset as u64).wrapping_mul(u64::from(b.elem_bytes)))
        };
        put(at + 1, addr);
        at += 2;
    }
    true
}

/// Fills in a slot's workspace words (header words 2 and 3): where the task's scratch is,
/// written by the AICPU that hands the task to a core, before the handshake does.
pub fn set_workspace(words: &[AtomicU64], offset: u32, bytes: u32, addr: u64) {
    if let Some(w) = words.get(2..HEADER_WORDS) {
        w[0].store(
            u64::from(offset) | u64::from(bytes) << 32,
            Ordering::Relaxed,
        );
        w[1].store(addr, Ordering::Relaxed);
    }
}

/// Reads the descriptor last written into a window slot's `words`; every field the slot does
/// not give is 0.
pub fn read(words: &[AtomicU64]) -> Descriptor {
    let load = |i: usize| words.get(i).map_or(0, |w| w.load(Ordering::Relaxed));
    let mut d = Descriptor::new_zeroed();
    let header = load(1);
    d.id = load(0);
    d.kernel = header as u16;
    d.pool = (header >> 16) as u8;
    d.nparams = ((header >> 24) as u8).min(limits::MAX_TASK_PARAMS as u8);
    d.nregions = ((header >> 32) as u8).min(limits::MAX_TASK_IO as u8);
    d.tier = (header >> 40) as u8;
    let ws = load(2);
    d.workspace_offset = ws as u32;
    d.workspace_bytes = (ws >> 32) as u32;
    d.workspace_addr = load(3);
    for i in 0..d.nparams as usize {
        d.params[i] = load(HEADER_WORDS + i) as i64;
    }
    let mut at = HEADER_WORDS + d.nparams as usize;
    for r in &mut d.regions[..d.nregions as usize] {
        let w = load(at);
        r.tensor = w as u16;
        r.dir = (w >> 16) as u8;
        r.rank = ((w >> 24) as u8).min(limits::MAX_RANK as u8);
        r.dtype = (w >> 32) as u8;
        at += 1;
        let rank = r.rank as usize;
        for k in 0..rank.div_ceil(2) {
            let w = load(at);
            r.extent[2 * k] = w as u32;
            if 2 * k + 1 < rank {
                r.extent[2 * k + 1] = (w >> 32) as u32;
            }
            at += 1;
        }
        for stride in &mut r.stride[..rank] {
            *stride = load(at) as i64;
            at += 1;
        }
        r.offset = load(at) as i64;
        r.addr = load(at + 1);
        at += 2;
    }
    d
}
