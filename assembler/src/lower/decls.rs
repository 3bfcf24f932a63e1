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
        // Whole cache lines of scratch (spec/bytecode.md §3.4).
        let unit = u64::from(ptovm_vm::format::WORKSPACE_UNIT);
        let most = u64::from(u16::MAX) * unit;
        let workspace = match k.workspace {
            None => 0,
            Some((n, span)) if n > most => {
                return Err(self.rep.error(
                    DiagKind::Overflow,
                    span,
                    format!(
                    "a workspace of {n} bytes; the limit is {most} (65535 lines of {unit} bytes)"
                ),
                ))
            }
            Some((n, _)) => n.div_ceil(unit) as u16,
        };
        // At most this many of its tasks run at once (spec/runtime.md §4.6): a limit of 0
        // would never run one.
        let core_limit = match k.cores {
            None => 0,
            Some((0, span)) => {
                return Err(self.rep.error(
                    DiagKind::Overflow,
                    span,
                    "a core limit of 0: the kernel's tasks could never run (at least 1)",
                ))
            }
            Some((n, span)) if n > u64::from(u16::MAX) => {
                return Err(self.rep.error(
                    DiagKind::Overflow,
                    span,
                    format!("a core limit of {n}; the largest is {}", u16::MAX),
                ))
            }
            Some((n, _)) => n as u16,
        };
        let entry = KernelEntry {
            pool: pool as u8,
            core_limit: U16::new(core_limit),
            num_params: k.params.len() as u8,
            num_args: k.args.len() as u8,
            arg_dirs: U32::new(dirs),
            workspace: U16::new(workspace),
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

impl<'a> Lower<'a, '_, '_> {
    /// The module header, as PTO-WSP reads it: a later `module` or `version` line replaces an
    /// earlier one (with a warning here), `target` lines add targets. Stored as module, version,
    /// then the targets.
    pub(super) fn header(&mut self) -> R<()> {
        let ast = self.ast;
        let mut module: Option<&str> = None;
        let mut version: Option<&str> = None;
        let mut targets: Vec<&str> = vec![];
        for (kind, text, span) in &ast.header {
            if text.len() > limits::MAX_NAME_LEN {
                return Err(self.rep.error(
                    DiagKind::Limit,
                    *span,
                    format!(
                        "module-header text of {} bytes; the limit is {}",
                        text.len(),
                        limits::MAX_NAME_LEN
                    ),
                ));
            }
            if !ptovm_vm::format::is_module_text(text.as_bytes()) {
                return Err(self.rep.error(
                    DiagKind::Type,
                    *span,
                    "module-header text must be printable ASCII without `\"` or `\\` (the bytecode stores it as is)",
                ));
            }
            let slot = match kind {
                InfoKind::Module => &mut module,
                InfoKind::Version => &mut version,
                InfoKind::Target => {
                    targets.push(text);
                    continue;
                }
            };
            if slot.replace(text).is_some() {
                self.rep.warn(
                    DiagKind::NoEffect,
                    *span,
                    format!(
                        "`{}` is given again; this one replaces the earlier one (as in PTO-WSP)",
                        kind.name()
                    ),
                );
            }
        }
        let entries = module
            .map(|t| (InfoKind::Module, t))
            .into_iter()
            .chain(version.map(|t| (InfoKind::Version, t)))
            .chain(targets.into_iter().map(|t| (InfoKind::Target, t)));
        self.m.info = entries.map(|(k, t)| (k, t.to_string())).collect();
        if let Some((_, _, span)) = ast.header.last() {
            self.limit(
                self.m.info.len(),
                limits::MAX_MODULE_INFO as usize,
                "module-header entries",
                *span,
            )?;
        }
        Ok(())
    }

    /// `@param` declarations: names unique, values in range. A declared parameter takes its
    /// slot where it is first used, as any runtime parameter.
    pub(super) fn param_decls(&mut self) -> R<()> {
        let ast = self.ast;
        let mut total = 0usize;
        for d in &ast.params {
            if let Some(prev) = self.param_decls.insert(d.name.name.clone(), d) {
                let line = self.line_of(prev.name.span);
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    d.name.span,
                    format!(
                        "runtime parameter `{}` is already declared at line {line}",
                        d.name.name
                    ),
                ));
            }
            let values: Vec<(u64, Span)> = match &d.value {
                ParamValue::Scalar(v, s) => vec![(*v, *s)],
                ParamValue::Array(v) => v.clone(),
            };
            for (v, s) in &values {
                self.u32(*v, *s, 0, "a runtime parameter's value")?;
            }
            total += values.len();
            self.limit(
                total,
                limits::MAX_DEFAULT_VALUES as usize,
                "default values",
                d.name.span,
            )?;
        }
        Ok(())
    }

    /// The default of a declared parameter first used as `kind` at `use_span`.
    pub(super) fn default_value(
        &self,
        d: &ParamDecl,
        kind: ParamKind,
        use_span: Span,
    ) -> R<Vec<u32>> {
        let (declared, values) = match &d.value {
            ParamValue::Scalar(v, _) => (ParamKind::Scalar, vec![*v as u32]),
            ParamValue::Array(v) => (ParamKind::Array, v.iter().map(|(x, _)| *x as u32).collect()),
        };
        if declared != kind {
            let line = self.line_of(d.name.span);
            return Err(self.rep.error(
                DiagKind::Type,
                use_span,
                format!(
                    "runtime parameter `{}` is used as {} here but declared as {} at line {line}",
                    d.name.name,
                    kind.name(),
                    declared.name()
                ),
            ));
        }
        Ok(values)
    }

    /// Warns of `@param` declarations the lowered workload never reads.
    pub(super) fn unused_param_decls(&mut self) {
        let ast = self.ast;
        for d in &ast.params {
            if !self.slots.contains_key(&d.name.name) {
                self.rep.warn(
                    DiagKind::NoEffect,
                    d.name.span,
                    format!(
                        "runtime parameter `{}` is declared but workload `{}` never reads it; it gets no slot",
                        d.name.name, self.m.workload
                    ),
                );
            }
        }
    }

    /// Every kernel's `workspace(N)` fits the schedule's arena (`workspace = N`), when it sets
    /// one (else the arena is sized at launch to fit).
    pub(super) fn workspaces_fit(&self) -> R<()> {
        let Some(knob) = self.workspace_span else {
            return Ok(());
        };
        let arena = self.m.config.workspace_arena.get();
        for k in &self.ast.kernels {
            let Some((n, span)) = k.workspace else {
                continue;
            };
            let lines = n.div_ceil(u64::from(ptovm_vm::format::WORKSPACE_UNIT));
            let bytes = lines * u64::from(ptovm_vm::format::WORKSPACE_UNIT);
            if bytes > u64::from(arena) {
                return Err(self.rep.error(
                    DiagKind::Overflow,
                    span,
                    format!(
                        "kernel `{}`'s workspace of {bytes} bytes is larger than the {arena}-byte workspace arena of the schedule (line {}): its tasks could never run",
                        k.name.name,
                        self.line_of(knob)
                    ),
                ));
            }
        }
        Ok(())
    }
}
