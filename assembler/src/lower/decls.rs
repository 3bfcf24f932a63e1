//! Tensor and kernel declarations.

use super::*;

impl<'a> Lower<'a, '_, '_> {
    pub(super) fn tensor_decl(&mut self, t: &crate::ast::TensorDecl) -> R<()> {
        let dtype = DType::from_name(&t.dtype.name)
            .filter(|d| *d != DType::Unknown)
            .ok_or_else(|| {
                self.rep.error(
                    DiagKind::Type,
                    t.dtype.span,
                    format!("unknown element type `{}`", t.dtype.name),
                )
            })?;
        if t.dims.len() > limits::MAX_RANK {
            return Err(self.rep.error(
                DiagKind::Limit,
                t.name.span,
                format!(
                    "tensor `{}` has {} dimensions; the limit is {}",
                    t.name.name,
                    t.dims.len(),
                    limits::MAX_RANK
                ),
            ));
        }
        let mut entry = TensorEntry {
            dtype: dtype as u8,
            rank: t.dims.len() as u8,
            ..Default::default()
        };
        for (i, d) in t.dims.iter().enumerate() {
            entry.dims[i] = U32::new(match d {
                Ok((v, span)) => {
                    if *v == 0 || *v >= DIM_IS_SLOT as u64 {
                        return Err(self.rep.error(
                            DiagKind::Overflow,
                            *span,
                            format!("dimension {v} is outside 1..=2147483647"),
                        ));
                    }
                    *v as u32
                }
                Err(name) => DIM_IS_SLOT | self.slot(name, ParamKind::Scalar)? as u32,
            });
        }
        self.add_tensor(&t.name, entry)?;
        Ok(())
    }

    pub(super) fn add_tensor(&mut self, name: &Ident, entry: TensorEntry) -> R<u16> {
        self.name_fits(name)?;
        let id = self.m.tensors.len();
        self.limit(id + 1, limits::MAX_TENSORS as usize, "tensors", name.span)?;
        self.m.tensors.push(Tensor {
            name: name.name.clone(),
            entry,
        });
        self.tensor_ids.insert(name.name.clone(), id as u16);
        Ok(id as u16)
    }

    pub(super) fn kernel_decl(&mut self, k: &'a KernelDecl) -> R<()> {
        let pool = Pool::from_name(&k.pool.name).ok_or_else(|| {
            self.rep.error(
                DiagKind::Type,
                k.pool.span,
                format!(
                    "unknown pool `{}`; expected `cube` or `vector`",
                    k.pool.name
                ),
            )
        })?;
        if k.params.len() > limits::MAX_TASK_PARAMS {
            return Err(self.rep.error(
                DiagKind::Limit,
                k.name.span,
                format!(
                    "kernel `{}` has {} parameters; the limit is {}",
                    k.name.name,
                    k.params.len(),
                    limits::MAX_TASK_PARAMS
                ),
            ));
        }
        if k.args.len() > limits::MAX_KERNEL_ARGS {
            return Err(self.rep.error(
                DiagKind::Limit,
                k.name.span,
                format!(
                    "kernel `{}` has {} arguments; the limit is {}",
                    k.name.name,
                    k.args.len(),
                    limits::MAX_KERNEL_ARGS
                ),
            ));
        }
        let mut names = HashSet::new();
        for n in k.params.iter().chain(k.args.iter().map(|(_, n)| n)) {
            if !names.insert(n.name.as_str()) {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    n.span,
                    format!("`{}` is named twice in kernel `{}`", n.name, k.name.name),
                ));
            }
        }
        let mut dirs = 0u32;
        for (i, (d, _)) in k.args.iter().enumerate() {
            let dir = Dir::from_name(&d.name).ok_or_else(|| {
                self.rep.error(
                    DiagKind::Type,
                    d.span,
                    format!(
                        "unknown direction `{}`; expected `in`, `out` or `inout`",
                        d.name
                    ),
                )
            })?;
            dirs |= (dir as u32) << (2 * i);
        }
        let entry = KernelEntry {
            pool: pool as u8,
            num_params: k.params.len() as u8,
            num_args: k.args.len() as u8,
            arg_dirs: U32::new(dirs),
            ..Default::default()
        };
        self.name_fits(&k.name)?;
        let id = self.m.kernels.len();
        self.limit(id + 1, limits::MAX_KERNELS as usize, "kernels", k.name.span)?;
        self.m.kernels.push(Kernel {
            name: k.name.name.clone(),
            entry,
        });
        self.kernel_ids
            .insert(k.name.name.clone(), (id as u16, Some(k)));
        Ok(())
    }
}
