//! A kernel's view of one region of its task: the descriptor's region (spec/runtime.md §3.8)
//! over the tensor's memory.

use ptovm_vm::desc::RegionDesc;
use ptovm_vm::{DType, Dir};

use super::memory::{Memory, Tensor};
use crate::kernel::KernelError;

/// Region `index` of a task: the elements `offset + Σ iₖ · stride[k]`, `0 ≤ iₖ < extent[k]`,
/// of its tensor, checked to lie inside the tensor's memory when the view is made.
#[derive(Clone, Copy)]
pub struct View<'m> {
    tensor: &'m Tensor,
    region: RegionDesc,
    index: usize,
}

impl std::fmt::Debug for View<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}", self.tensor.name, self.shape())
    }
}

impl<'m> View<'m> {
    /// The view of `region`, the task's region number `index`, in `memory`; an error when its
    /// tensor has no memory or the region reaches outside it (which a verified program bound
    /// to this memory never does).
    pub fn new(
        memory: &'m Memory,
        region: &RegionDesc,
        index: usize,
    ) -> Result<View<'m>, KernelError> {
        let tensor = memory
            .tensors()
            .get(region.tensor as usize)
            .ok_or_else(|| {
                KernelError::new(format!(
                    "region {index} names tensor {}, which the program does not have",
                    region.tensor
                ))
            })?;
        if !tensor.has_memory() {
            return Err(KernelError::new(format!(
                "region {index} is of tensor {}, which has no declared shape and so no memory (declare it with @tensor)",
                tensor.name
            )));
        }
        let v = View {
            tensor,
            region: *region,
            index,
        };
        if !v.is_empty() {
            // The first and the last element the region reaches, with non-negative strides.
            let mut last = i128::from(region.offset);
            let mut ok = region.offset >= 0;
            for (&e, &s) in region.extents().iter().zip(region.strides()) {
                ok &= s >= 0;
                last += i128::from(e - 1) * i128::from(s);
            }
            if !ok || last >= tensor.len() as i128 {
                return Err(KernelError::new(format!(
                    "region {index} of tensor {} (offset {}, extents {:?}, strides {:?}) reaches outside its {} elements",
                    tensor.name,
                    region.offset,
                    region.extents(),
                    region.strides(),
                    tensor.len()
                )));
            }
        }
        Ok(v)
    }

    /// The tensor's name.
    pub fn name(&self) -> &'m str {
        &self.tensor.name
    }

    /// The tensor's element type.
    pub fn dtype(&self) -> DType {
        self.tensor.dtype
    }

    /// The region's direction.
    pub fn dir(&self) -> Option<Dir> {
        Dir::from_u8(self.region.dir)
    }

    /// The region's extents.
    pub fn shape(&self) -> &[u32] {
        self.region.extents()
    }

    /// Elements in the region.
    pub fn len(&self) -> usize {
        self.region.len() as usize
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// The region as a matrix: rows are the product of every extent but the last, columns
    /// the last (a region of rank 1 is one row).
    pub fn matrix(&self) -> (usize, usize) {
        match self.shape().split_last() {
            None => (0, 0),
            Some((&cols, rows)) => (rows.iter().map(|&r| r as usize).product(), cols as usize),
        }
    }

    /// An error about this region, for a kernel to return: "region 2 (Acc, extents [1, 64]): …".
    pub fn error(&self, what: impl std::fmt::Display) -> KernelError {
        KernelError::new(format!(
            "region {} ({} {:?}): {what}",
            self.index,
            self.tensor.name,
            self.shape()
        ))
    }

    /// Element indices of the region in row-major order.
    fn for_each_index(&self, mut f: impl FnMut(usize, usize)) {
        if self.is_empty() {
            return;
        }
        let ext = self.region.extents();
        let stride = self.region.strides();
        let rank = ext.len();
        let mut at = [0u32; 8];
        let mut index = self.region.offset as usize;
        for k in 0..self.len() {
            f(k, index);
            // Next coordinate, row-major: the last dimension fastest.
            let mut d = rank;
            while d > 0 {
                d -= 1;
                at[d] += 1;
                index = index.wrapping_add(stride[d] as usize);
                if at[d] < ext[d] {
                    break;
                }
                index = index.wrapping_sub((stride[d] as usize).wrapping_mul(ext[d] as usize));
                at[d] = 0;
            }
        }
    }

    /// The region's elements as `f32`, row-major.
    pub fn load(&self) -> Vec<f32> {
        let mut v = vec![0.0; self.len()];
        self.for_each_index(|k, i| v[k] = self.tensor.get(i));
        v
    }

    /// Stores `values` (row-major, one per element) into the region, each rounded to the
    /// element type.
    pub fn store(&self, values: &[f32]) -> Result<(), KernelError> {
        if values.len() != self.len() {
            return Err(self.error(format_args!(
                "a kernel stored {} values into its {} elements",
                values.len(),
                self.len()
            )));
        }
        self.for_each_index(|k, i| self.tensor.set(i, values[k]));
        Ok(())
    }
}
