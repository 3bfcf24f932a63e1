//! Task descriptors computed independently of `vm::desc`: from the reference expansion and
//! the tensor declarations, regions resolved row-major (spec/runtime.md §3.8). The threaded
//! simulator's kernels and the aarch64 harness's cores must see exactly these.

use ptovm_vm::desc::{Descriptor, RegionDesc, TensorArg};
use ptovm_vm::format::{DIM_IS_SLOT, TENSOR_STREAM};
use ptovm_vm::{verify, DType, Pool, RuntimeParams};

use crate::{values, Params};

/// The descriptor of every task of `code` under `params`, in id order.
pub fn expected(code: &[u8], params: &Params) -> Vec<Descriptor> {
    try_expected(code, params).expect("a program that verifies, takes its parameters and expands")
}

/// [`expected`], or `None` when the program does not verify, refuses its parameters or fails
/// while expanding.
pub fn try_expected(code: &[u8], params: &Params) -> Option<Vec<Descriptor>> {
    expected_bound(code, params, &[])
}

/// [`try_expected`] with the tensors bound as `tensors` says (none: unbound): a binding's own
/// strides replace the row-major ones, and a bound tensor's regions get their byte address.
pub fn expected_bound(
    code: &[u8],
    params: &Params,
    tensors: &[TensorArg],
) -> Option<Vec<Descriptor>> {
    expected_reading(code, params, tensors, &[])
}

/// [`expected_bound`] where a `READBACK` of tensor `t` reads `memory`'s values for `t` (the
/// others keep the launch's values).
pub fn expected_reading(
    code: &[u8],
    params: &Params,
    tensors: &[TensorArg],
    memory: &[(u16, Vec<u32>)],
) -> Option<Vec<Descriptor>> {
    let v = verify(code).ok()?;
    let vals = values(params);
    let p = RuntimeParams::new(&v, &vals).ok()?;
    // A given scalar, or past them a planned value (`@plan`, which a tensor dimension may name).
    let scalar = |slot: usize| p.scalar(slot);
    let mut read = |rb: &ptovm_vm::readback::Readback, _: &[ptovm_host_sim::RefTask]| {
        memory
            .iter()
            .find(|(t, _)| *t == rb.tensor)
            .map(|(_, m)| m.clone())
    };
    let tasks = ptovm_host_sim::reference_expand_with(&v, &p, 1, u64::MAX, &mut read).ok()?;
    let descs = tasks
        .iter()
        .map(|t| {
            let mut d = Descriptor {
                id: t.id,
                kernel: t.kernel,
                pool: u8::from(t.pool != Pool::Cube),
                nparams: t.params.len() as u8,
                tier: t.tier,
                // Where the scratch is depends on the run; its size is the kernel's.
                workspace_bytes: u32::from(v.kernels()[t.kernel as usize].workspace.get())
                    * ptovm_vm::format::WORKSPACE_UNIT,
                ..Descriptor::default()
            };
            d.params[..t.params.len()].copy_from_slice(&t.params);
            for io in &t.io {
                let decl = &v.tensors()[io.tensor as usize];
                if decl.flags.get() & TENSOR_STREAM != 0 {
                    continue;
                }
                let rank = decl.rank as usize;
                let dims: Vec<i64> = (0..rank)
                    .map(|k| {
                        let x = decl.dims[k].get();
                        if x & DIM_IS_SLOT != 0 {
                            scalar((x & 0xFFFF) as usize) as i64
                        } else {
                            x as i64
                        }
                    })
                    .collect();
                let mut r = RegionDesc {
                    tensor: io.tensor,
                    dir: io.dir,
                    rank: rank as u8,
                    dtype: decl.dtype,
                    reserved: [0; 3],
                    offset: 0,
                    addr: 0,
                    extent: [0; 8],
                    stride: [0; 8],
                };
                let bound = tensors.get(io.tensor as usize).filter(|b| b.base != 0);
                for k in 0..rank {
                    r.stride[k] = match bound {
                        Some(b) if b.rank > 0 => b.strides[k],
                        // Saturating, as spec/runtime.md §3.8 says: only a tensor of more than
                        // 2^63 elements (which no binding accepts) reaches the limit.
                        _ => dims[k + 1..].iter().fold(1i64, |p, &d| p.saturating_mul(d)),
                    };
                    let (start, end) = io.dims().get(k).copied().unwrap_or((0, dims[k]));
                    r.offset = r.offset.wrapping_add(start.wrapping_mul(r.stride[k]));
                    r.extent[k] = (end - start).clamp(0, u32::MAX as i64) as u32;
                }
                if let Some(b) = bound {
                    let size = DType::from_u8(decl.dtype).map_or(0, |d| d.size()) as u64;
                    r.addr = b.base.wrapping_add((r.offset as u64).wrapping_mul(size));
                }
                d.regions[d.nregions as usize] = r;
                d.nregions += 1;
            }
            d
        })
        .collect();
    Some(descs)
}

/// A descriptor as one word of text, the form the aarch64 harness prints
/// (`device/harness/harness.c`): `k=KERNEL/POOL p=P,P,… r=REGION|REGION…`, each region
/// `tensor:dir:rank:dtype:offset:addr:e,e,…:s,s,…`.
pub fn text(d: &Descriptor) -> String {
    fn join<T: ToString>(xs: &[T]) -> String {
        xs.iter().map(T::to_string).collect::<Vec<_>>().join(",")
    }
    let regions: Vec<String> = d
        .regions()
        .iter()
        .map(|r| {
            format!(
                "{}:{}:{}:{}:{}:{}:{}:{}",
                r.tensor,
                r.dir,
                r.rank,
                r.dtype,
                r.offset,
                r.addr,
                join(r.extents()),
                join(r.strides())
            )
        })
        .collect();
    format!(
        "k={}/{} p={} r={}",
        d.kernel,
        d.pool,
        join(d.params()),
        regions.join("|")
    )
}
