//! Tensor memory of a computing run: one host buffer per declared tensor, filled from a seed.
//!
//! Elements live in atomic words of their element's width (`AtomicU16` for `f16`, …), read and
//! written with `Relaxed` loads and stores, which are plain loads and stores on x86-64 and
//! AArch64. That keeps the simulator free of `unsafe` code and of undefined behaviour even
//! when a schedule is wrong: two kernels that the dependencies failed to order can only
//! produce a wrong answer — which the in-order comparison then reports — never a data race in
//! the Rust sense.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use half::{bf16, f16};
use ptovm_vm::desc::{Binding, TensorArg};
use ptovm_vm::format::{TENSOR_IMPLICIT, TENSOR_STREAM};
use ptovm_vm::interp::mix64;
use ptovm_vm::{DType, Opcode, RuntimeParams, Verified};
use zerocopy::FromZeros;

use super::DataError;

/// The elements of one tensor, in atomic words of the element's width.
enum Buffer {
    /// No memory: an implicit tensor (used without `@tensor`) or the stream-order tensor.
    None,
    B1(Box<[AtomicU8]>),
    B2(Box<[AtomicU16]>),
    B4(Box<[AtomicU32]>),
    B8(Box<[AtomicU64]>),
}

/// One tensor of the program and its memory.
pub struct Tensor {
    /// Its name in the module.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its shape, runtime parameters resolved (empty for a tensor without memory).
    pub dims: Vec<u32>,
    /// Whether a task writes it (an `out` or `inout` region names it): an output or an
    /// intermediate. The others are the workload's inputs.
    pub written: bool,
    data: Buffer,
}

impl Tensor {
    /// Number of elements (0 without memory).
    pub fn len(&self) -> usize {
        match &self.data {
            Buffer::None => 0,
            Buffer::B1(b) => b.len(),
            Buffer::B2(b) => b.len(),
            Buffer::B4(b) => b.len(),
            Buffer::B8(b) => b.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it has memory (a declared shape).
    pub fn has_memory(&self) -> bool {
        !matches!(self.data, Buffer::None)
    }

    /// Element `i`'s bits, zero-extended.
    pub fn bits(&self, i: usize) -> u64 {
        match &self.data {
            Buffer::None => 0,
            Buffer::B1(b) => u64::from(b[i].load(Ordering::Relaxed)),
            Buffer::B2(b) => u64::from(b[i].load(Ordering::Relaxed)),
            Buffer::B4(b) => u64::from(b[i].load(Ordering::Relaxed)),
            Buffer::B8(b) => b[i].load(Ordering::Relaxed),
        }
    }

    fn set_bits(&self, i: usize, v: u64) {
        match &self.data {
            Buffer::None => {}
            Buffer::B1(b) => b[i].store(v as u8, Ordering::Relaxed),
            Buffer::B2(b) => b[i].store(v as u16, Ordering::Relaxed),
            Buffer::B4(b) => b[i].store(v as u32, Ordering::Relaxed),
            Buffer::B8(b) => b[i].store(v, Ordering::Relaxed),
        }
    }

    /// Reads the raw 32-bit words of every element into `into` (a `READBACK`, which the
    /// verifier keeps to `i32` and `u32` tensors) and says it did: not without memory or
    /// with another element count.
    pub fn read_words(&self, into: &mut [u32]) -> bool {
        if !self.has_memory() || self.len() != into.len() {
            return false;
        }
        for (i, x) in into.iter_mut().enumerate() {
            *x = self.bits(i) as u32;
        }
        true
    }

    /// Element `i` as an `f32` (integers converted, `bool` 0 or 1). Panics past the end.
    pub fn get(&self, i: usize) -> f32 {
        let b = self.bits(i);
        match self.dtype {
            DType::F16 => f16::from_bits(b as u16).to_f32(),
            DType::Bf16 => bf16::from_bits(b as u16).to_f32(),
            DType::F32 => f32::from_bits(b as u32),
            DType::F64 => f64::from_bits(b) as f32,
            DType::I8 => b as u8 as i8 as f32,
            DType::I16 => b as u16 as i16 as f32,
            DType::I32 => b as u32 as i32 as f32,
            DType::I64 => b as i64 as f32,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => b as f32,
            DType::Bool => f32::from(u8::from(b != 0)),
            // `Memory::new` gives these no memory.
            DType::F8 | DType::Unknown => 0.0,
        }
    }

    /// Stores `x` in element `i`, rounded to the element type (to nearest, ties to even, for
    /// floats; integers saturate, NaN becomes 0; `bool` is `x != 0`). Panics past the end.
    pub fn set(&self, i: usize, x: f32) {
        let bits = match self.dtype {
            DType::F16 => u64::from(f16::from_f32(x).to_bits()),
            DType::Bf16 => u64::from(bf16::from_f32(x).to_bits()),
            DType::F32 => u64::from(x.to_bits()),
            DType::F64 => f64::from(x).to_bits(),
            DType::I8 => x.round() as i8 as u8 as u64,
            DType::I16 => x.round() as i16 as u16 as u64,
            DType::I32 => x.round() as i32 as u32 as u64,
            DType::I64 => x.round() as i64 as u64,
            DType::U8 => u64::from(x.round() as u8),
            DType::U16 => u64::from(x.round() as u16),
            DType::U32 => u64::from(x.round() as u32),
            DType::U64 => x.round() as u64,
            DType::Bool => u64::from(x != 0.0),
            DType::F8 | DType::Unknown => 0,
        };
        self.set_bits(i, bits);
    }

    /// Every element as an `f32`, in row-major order.
    pub fn to_f32(&self) -> Vec<f32> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    /// The element index `i` as coordinates of the shape: `Y[3, 17]`.
    pub fn coords(&self, mut i: usize) -> String {
        let mut c = vec![0usize; self.dims.len()];
        for (d, &n) in self.dims.iter().enumerate().rev() {
            let n = n.max(1) as usize;
            c[d] = i % n;
            i /= n;
        }
        let c: Vec<String> = c.iter().map(usize::to_string).collect();
        format!("{}[{}]", self.name, c.join(", "))
    }

    /// The tensor as a NumPy `.npy` file: its shape and element type (`bf16`, which NumPy
    /// lacks, is written as `f32`, exactly; `bool` as `|b1`).
    pub fn npy(&self) -> std::io::Result<Vec<u8>> {
        use npyz::WriterBuilder;
        let shape: Vec<u64> = self.dims.iter().map(|&d| u64::from(d)).collect();
        let mut out = Vec::new();
        macro_rules! put {
            ($t:ty, $f:expr) => {{
                let mut w = npyz::WriteOptions::<$t>::new()
                    .default_dtype()
                    .shape(&shape)
                    .writer(&mut out)
                    .begin_nd()?;
                w.extend((0..self.len()).map(|i| $f(self.bits(i))))?;
                w.finish()?;
            }};
        }
        match self.dtype {
            DType::F16 => put!(f16, |b: u64| f16::from_bits(b as u16)),
            DType::Bf16 => put!(f32, |b: u64| bf16::from_bits(b as u16).to_f32()),
            DType::F32 => put!(f32, |b: u64| f32::from_bits(b as u32)),
            DType::F64 => put!(f64, f64::from_bits),
            DType::I8 => put!(i8, |b: u64| b as u8 as i8),
            DType::I16 => put!(i16, |b: u64| b as u16 as i16),
            DType::I32 => put!(i32, |b: u64| b as u32 as i32),
            DType::I64 => put!(i64, |b: u64| b as i64),
            DType::U8 => put!(u8, |b: u64| b as u8),
            DType::U16 => put!(u16, |b: u64| b as u16),
            DType::U32 => put!(u32, |b: u64| b as u32),
            DType::U64 => put!(u64, |b: u64| b),
            DType::Bool => put!(bool, |b: u64| b != 0),
            DType::F8 | DType::Unknown => {
                return Err(std::io::Error::other(format!(
                    "tensor {} has no memory to write",
                    self.name
                )))
            }
        }
        Ok(out)
    }
}

/// The memory of every tensor of a program (spec/runtime.md §3.9).
pub struct Memory {
    tensors: Vec<Tensor>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.tensors.iter().map(|t| (&t.name, t.dtype, &t.dims)))
            .finish()
    }
}

/// The most memory one copy of a program's tensors may take (4 GiB; a computing run keeps two,
/// the threaded run's and the in-order run's): a bigger shape is refused with a
/// [`DataError::TooBig`] before anything is allocated.
pub const MAX_BYTES: u64 = 4 << 30;

impl Memory {
    /// Zeroed memory for every declared tensor of `v`, shaped by `p`. Refuses element types
    /// the kernels cannot compute with (`f8`) and more than [`MAX_BYTES`] in all.
    pub fn new(v: &Verified<'_>, p: &RuntimeParams<'_>) -> Result<Memory, DataError> {
        let written = written_tensors(v);
        let mut total = 0u64;
        let mut plan = Vec::new();
        for (i, t) in v.tensors().iter().enumerate() {
            let name = v
                .name(t.name_off.get(), t.name_len.get() as u32)
                .to_string();
            let dtype = DType::from_u8(t.dtype).unwrap_or(DType::Unknown);
            let shaped = t.flags.get() & (TENSOR_IMPLICIT | TENSOR_STREAM) == 0 && t.rank > 0;
            if shaped && matches!(dtype, DType::F8 | DType::Unknown) {
                return Err(DataError::DType {
                    tensor: name,
                    dtype: dtype.name(),
                });
            }
            let b = Binding::declared(t, p);
            let dims: Vec<u32> = if shaped {
                b.dims[..b.rank as usize].to_vec()
            } else {
                Vec::new()
            };
            let elems = dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(u64::from(d)));
            let bytes = elems.and_then(|e| e.checked_mul(dtype.size() as u64));
            total = match (shaped, bytes) {
                (false, _) => total,
                (true, Some(b)) => total.saturating_add(b),
                (true, None) => u64::MAX,
            };
            plan.push((name, dtype, dims, written[i], shaped, elems.unwrap_or(0)));
        }
        if total > MAX_BYTES {
            return Err(DataError::TooBig {
                bytes: total,
                limit: MAX_BYTES,
            });
        }
        let mut tensors = Vec::with_capacity(plan.len());
        for (name, dtype, dims, written, shaped, elems) in plan {
            let n = elems as usize;
            let oom = || DataError::TooBig {
                bytes: total,
                limit: MAX_BYTES,
            };
            let data = if !shaped {
                Buffer::None
            } else {
                match dtype.size() {
                    1 => Buffer::B1(<[AtomicU8]>::new_box_zeroed_with_elems(n).map_err(|_| oom())?),
                    2 => {
                        Buffer::B2(<[AtomicU16]>::new_box_zeroed_with_elems(n).map_err(|_| oom())?)
                    }
                    4 => {
                        Buffer::B4(<[AtomicU32]>::new_box_zeroed_with_elems(n).map_err(|_| oom())?)
                    }
                    _ => {
                        Buffer::B8(<[AtomicU64]>::new_box_zeroed_with_elems(n).map_err(|_| oom())?)
                    }
                }
            };
            tensors.push(Tensor {
                name,
                dtype,
                dims,
                written,
                data,
            });
        }
        Ok(Memory { tensors })
    }

    /// The tensors, by index in the program's tensor table.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Fills every input tensor (one no task writes) with values drawn from `seed`, and zeroes
    /// the others. Floats are uniform in [-1, 1) (then rounded to the element type), signed
    /// integers in [-8, 8), unsigned ones in [0, 16), `bool` 0 or 1. Each tensor's values
    /// depend only on the seed and the tensor's name, so adding a tensor to a module does not
    /// change the others' data.
    pub fn fill(&self, seed: u64) {
        for t in &self.tensors {
            let stream = seed ^ name_hash(&t.name);
            for i in 0..t.len() {
                if t.written {
                    t.set_bits(i, 0);
                    continue;
                }
                let r = mix64(stream.wrapping_add(mix64(i as u64)));
                let unit = (r >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                let x = match t.dtype {
                    DType::I8 | DType::I16 | DType::I32 | DType::I64 => (r % 16) as f32 - 8.0,
                    DType::U8 | DType::U16 | DType::U32 | DType::U64 => (r % 16) as f32,
                    DType::Bool => (r & 1) as f32,
                    _ => 2.0 * unit - 1.0,
                };
                t.set(i, x);
            }
        }
    }

    /// Copies every element of `other`, a memory of the same program and parameters.
    pub fn copy_from(&self, other: &Memory) {
        for (a, b) in self.tensors.iter().zip(&other.tensors) {
            for i in 0..a.len().min(b.len()) {
                a.set_bits(i, b.bits(i));
            }
        }
    }

    /// The binding of each tensor to its memory, for the launch (`sim::run_bound`): its
    /// buffer's address and size, row-major; tensors without memory stay unbound.
    pub fn bindings(&self) -> Vec<TensorArg> {
        self.tensors
            .iter()
            .map(|t| {
                let (base, elems) = match &t.data {
                    Buffer::None => (0, 0),
                    Buffer::B1(b) => (b.as_ptr() as u64, b.len()),
                    Buffer::B2(b) => (b.as_ptr() as u64, b.len()),
                    Buffer::B4(b) => (b.as_ptr() as u64, b.len()),
                    Buffer::B8(b) => (b.as_ptr() as u64, b.len()),
                };
                // A buffer of no elements has a dangling (aligned, non-null) address; binding
                // it is harmless, as no region of it has an element.
                TensorArg {
                    base,
                    bytes: (elems * t.dtype.size()) as u64,
                    dtype: t.dtype as u8,
                    ..TensorArg::default()
                }
            })
            .collect()
    }
}

/// Which tensors some task writes: an `IO_OUTPUT` or `IO_INOUT` record names them.
fn written_tensors(v: &Verified<'_>) -> Vec<bool> {
    let mut w = vec![false; v.tensors().len()];
    for r in v.code() {
        if r.opcode == Opcode::IO_OUTPUT as u8 || r.opcode == Opcode::IO_INOUT as u8 {
            if let Some(x) = w.get_mut(r.op1() as usize) {
                *x = true;
            }
        }
    }
    if let Some(s) = v.stream_tensor() {
        w[s as usize] = false;
    }
    w
}

/// FNV-1a of a name: a tensor's fill stream.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
