//! The tables' checks (spec/bytecode.md §7, steps 2-5, 7-8): strings, runtime-parameter
//! slots, tensors, kernels, axes and regions.

use super::*;

impl<'v, 'a> Checker<'v, 'a> {
    /// Names must be identifiers laid out back to back in canonical order: workload, schedule,
    /// the module-header texts (printable ASCII), params, tensors, kernels; together they fill
    /// the string table exactly.
    pub(super) fn strings(&mut self) -> R<()> {
        let v = self.v;
        let mut expected = 0u32;
        let mut check = |off: u32, len: u32, text: bool, at: Location| -> R<()> {
            if off != expected {
                return Err(VerifyError {
                    kind: ErrorKind::NameNotCanonical { off, len, expected },
                    at,
                });
            }
            let s = v.strtab.get(off as usize..off as usize + len as usize);
            match s {
                Some(s) if text && is_module_text(s) => {}
                Some(_) if text => {
                    return Err(VerifyError {
                        kind: ErrorKind::BadText,
                        at,
                    })
                }
                Some(s) if is_ident(s) => {}
                _ => {
                    return Err(VerifyError {
                        kind: ErrorKind::BadName,
                        at,
                    })
                }
            }
            expected += len;
            Ok(())
        };
        let c = v.config;
        check(
            c.workload_name_off.get(),
            c.workload_name_len.get() as u32,
            false,
            self.cfg_loc(offset_of!(Config, workload_name_off)),
        )?;
        check(
            c.schedule_name_off.get(),
            c.schedule_name_len.get() as u32,
            false,
            self.cfg_loc(offset_of!(Config, schedule_name_off)),
        )?;
        for (i, e) in v.module_info.iter().enumerate() {
            check(
                e.text_off.get(),
                e.text_len.get() as u32,
                true,
                self.loc(Section::ModuleInfo, i as u32, sizes::MODULE_INFO),
            )?;
        }
        for (i, p) in v.params.iter().enumerate() {
            check(
                p.name_off.get(),
                p.name_len.get() as u32,
                false,
                self.loc(Section::Params, i as u32, sizes::PARAM),
            )?;
        }
        for (i, p) in v.plans.iter().enumerate() {
            check(
                p.name_off.get(),
                p.name_len.get() as u32,
                false,
                self.loc(Section::Plans, i as u32, sizes::PLAN),
            )?;
        }
        for (i, t) in v.tensors.iter().enumerate() {
            check(
                t.name_off.get(),
                t.name_len.get() as u32,
                false,
                self.loc(Section::Tensors, i as u32, sizes::TENSOR),
            )?;
        }
        for (i, k) in v.kernels.iter().enumerate() {
            check(
                k.name_off.get(),
                k.name_len.get() as u32,
                false,
                self.loc(Section::Kernels, i as u32, sizes::KERNEL),
            )?;
        }
        let len = v.header.strtab_len.get();
        if expected != len {
            return Err(err(
                ErrorKind::StrtabSlack {
                    len,
                    used: expected,
                },
                Section::Strings,
                None,
                v.layout.range(Section::Strings).0,
            ));
        }
        Ok(())
    }

    /// Module-header entries: kinds defined, reserved byte zero, at most one module name and
    /// one version, in the order module, version, targets.
    pub(super) fn module_info(&mut self) -> R<()> {
        let mut last: Option<InfoKind> = None;
        for (i, e) in self.v.module_info.iter().enumerate() {
            let at = self.loc(Section::ModuleInfo, i as u32, sizes::MODULE_INFO);
            let Some(kind) = InfoKind::from_u8(e.kind) else {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "module-header entry kind",
                        value: e.kind as u32,
                    },
                    at,
                });
            };
            if e.reserved != 0 {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "module-header entry reserved byte",
                    },
                    at,
                });
            }
            let in_order = match last {
                None => true,
                Some(prev) => kind as u8 > prev as u8 || (kind == InfoKind::Target && prev == kind),
            };
            if !in_order {
                return Err(VerifyError {
                    kind: ErrorKind::InfoOrder,
                    at,
                });
            }
            last = Some(kind);
        }
        Ok(())
    }

    pub(super) fn params(&mut self) -> R<()> {
        let mut next_default = 0u32;
        for (i, p) in self.v.params.iter().enumerate() {
            let at = self.loc(Section::Params, i as u32, sizes::PARAM);
            if ParamKind::from_u8(p.kind).is_none() {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "parameter kind",
                        value: p.kind as u32,
                    },
                    at,
                });
            }
            if p.flags & !PARAM_HAS_DEFAULT != 0 {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "undefined parameter flag bits",
                    },
                    at,
                });
            }
            // Defaults lie back to back in slot order and fill the pool exactly.
            let bad = |problem| {
                Err(VerifyError {
                    kind: ErrorKind::BadDefault {
                        slot: i as u32,
                        problem,
                    },
                    at,
                })
            };
            let (start, len) = (p.default_start.get(), p.default_len.get());
            if start != next_default {
                return bad("its default does not start where the previous slot's ends");
            }
            if p.flags & PARAM_HAS_DEFAULT == 0 {
                if len != 0 {
                    return bad("a slot without a default has default length 0");
                }
            } else if p.kind == ParamKind::Scalar as u8 && len != 1 {
                return bad("a scalar's default is one value");
            }
            next_default = match next_default.checked_add(len) {
                Some(n) if n <= self.v.defaults.len() as u32 => n,
                _ => return bad("its default runs past the default-value pool"),
            };
        }
        if next_default as usize != self.v.defaults.len() {
            return Err(err(
                ErrorKind::BadDefault {
                    slot: self.v.params.len() as u32,
                    problem: "the default-value pool holds values no slot uses",
                },
                Section::Defaults,
                None,
                self.v.layout.range(Section::Defaults).0,
            ));
        }
        Ok(())
    }

    pub(super) fn slot(&self, slot: u32, kind: ParamKind, at: Location) -> R<()> {
        let given = self.v.params.len();
        // A planned value (past the given slots) is a scalar.
        let slot_kind = match self.v.params.get(slot as usize) {
            Some(p) => p.kind,
            None if (slot as usize) < given + self.v.plans.len() => ParamKind::Scalar as u8,
            None => {
                return Err(VerifyError {
                    kind: ErrorKind::OutOfRange {
                        what: "runtime slot",
                        index: slot,
                        len: (given + self.v.plans.len()) as u32,
                    },
                    at,
                })
            }
        };
        if slot_kind != kind as u8 {
            return Err(VerifyError {
                kind: ErrorKind::SlotKind {
                    slot,
                    expected: kind.name(),
                },
                at,
            });
        }
        Ok(())
    }

    /// Checks the tensor table; returns the index of the stream-order tensor, if any.
    pub(super) fn tensors(&mut self) -> R<Option<usize>> {
        let mut stream = None;
        for (i, t) in self.v.tensors.iter().enumerate() {
            let at = self.loc(Section::Tensors, i as u32, sizes::TENSOR);
            let nz = |what| {
                Err(VerifyError {
                    kind: ErrorKind::NonZero { what },
                    at,
                })
            };
            if DType::from_u8(t.dtype).is_none() {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "dtype",
                        value: t.dtype as u32,
                    },
                    at,
                });
            }
            let flags = t.flags.get();
            if flags & !(TENSOR_IMPLICIT | TENSOR_STREAM) != 0 {
                return nz("undefined tensor flag bits");
            }
            let rank = t.rank as usize;
            limit("tensor rank", rank as u32, limits::MAX_RANK as u32, at)?;
            if flags & TENSOR_STREAM != 0 {
                let bad = |problem| {
                    Err(VerifyError {
                        kind: ErrorKind::StreamOrder { problem },
                        at,
                    })
                };
                if flags != TENSOR_STREAM {
                    return bad("a stream-order tensor cannot also be implicit");
                }
                if stream.replace(i).is_some() {
                    return bad("a second stream-order tensor");
                }
                if t.dtype != DType::Unknown as u8 || t.layout.get() != 0 {
                    return bad("a stream-order tensor has no dtype and no layout");
                }
                if rank != 1 || t.dims[0].get() != self.v.config.streams.get() as u32 {
                    return bad(
                        "a stream-order tensor has one dimension, the config's stream count",
                    );
                }
                if t.dims[1..].iter().any(|d| d.get() != 0) {
                    return nz("dimensions beyond the rank");
                }
                continue;
            }
            if flags & TENSOR_IMPLICIT != 0 {
                if t.dtype != DType::Unknown as u8 || rank != 0 {
                    return nz("dtype and rank of an implicit tensor");
                }
            } else if t.dtype == DType::Unknown as u8 {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "dtype of a declared tensor",
                        value: 0,
                    },
                    at,
                });
            }
            // A layout gives every dimension or none: a run of non-zero codes from dimension
            // 0, as long as the rank (any length for an implicit tensor, whose rank is not
            // known).
            let layout = t.layout.get();
            let given = (0..limits::MAX_RANK)
                .take_while(|&d| layout_dim(layout, d) != LAYOUT_NONE)
                .count() as u32;
            if layout >> (4 * given) != 0 {
                return nz("layout codes after an unset dimension");
            }
            if given != 0 && flags & TENSOR_IMPLICIT == 0 && given != rank as u32 {
                return Err(VerifyError {
                    kind: ErrorKind::LayoutRank {
                        len: given,
                        rank: rank as u32,
                    },
                    at,
                });
            }
            for (d, dim) in t.dims.iter().enumerate() {
                let dim = dim.get();
                if d >= rank {
                    if dim != 0 {
                        return nz("dimensions beyond the rank");
                    }
                } else if dim & DIM_IS_SLOT != 0 {
                    if dim & 0x7FFF_0000 != 0 {
                        return nz("bits 16..31 of a runtime dimension");
                    }
                    self.slot(dim & 0xFFFF, ParamKind::Scalar, at)?;
                } else if dim == 0 {
                    return Err(VerifyError {
                        kind: ErrorKind::TooSmall {
                            what: "tensor dimension",
                            value: 0,
                            min: 1,
                        },
                        at,
                    });
                }
            }
        }
        Ok(stream)
    }

    pub(super) fn kernels(&mut self) -> R<()> {
        for (i, k) in self.v.kernels.iter().enumerate() {
            let at = self.loc(Section::Kernels, i as u32, sizes::KERNEL);
            let nz = |what| {
                Err(VerifyError {
                    kind: ErrorKind::NonZero { what },
                    at,
                })
            };
            if Pool::from_u8(k.pool).is_none() {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "pool",
                        value: k.pool as u32,
                    },
                    at,
                });
            }
            if k.flags & !KERNEL_UNDECLARED != 0 {
                return nz("undefined kernel flag bits");
            }
            if k.reserved0 != 0 || k.reserved1.get() != 0 {
                return nz("reserved kernel fields");
            }
            if k.flags & KERNEL_UNDECLARED != 0 && k.core_limit.get() != 0 {
                return nz("the core limit of an undeclared kernel");
            }
            // Its cost's expression is checked with the pool's (`costs`).
            match k.cost() {
                None if k.cost_unit != 0 => return nz("the unit of a kernel without a cost"),
                Some(_) if CostUnit::from_u8(k.cost_unit).is_none() => {
                    return Err(VerifyError {
                        kind: ErrorKind::BadCode {
                            what: "cost unit",
                            value: k.cost_unit as u32,
                        },
                        at,
                    })
                }
                _ => {}
            }
            if k.flags & KERNEL_UNDECLARED != 0 {
                if k.num_params != 0
                    || k.num_args != 0
                    || k.arg_dirs.get() != 0
                    || k.workspace.get() != 0
                    || k.cost().is_some()
                {
                    return nz("arity, directions, workspace and cost of an undeclared kernel");
                }
                continue;
            }
            // A task's scratch must fit the arena it is allocated from (0: sized at launch).
            let arena = self.v.config.workspace_arena.get();
            let need = u32::from(k.workspace.get()) * WORKSPACE_UNIT;
            if arena != 0 && need > arena {
                return Err(VerifyError {
                    kind: ErrorKind::Workspace {
                        kernel: i as u32,
                        need,
                        arena,
                    },
                    at,
                });
            }
            limit(
                "kernel parameter count",
                k.num_params as u32,
                limits::MAX_TASK_PARAMS as u32,
                at,
            )?;
            limit(
                "kernel argument count",
                k.num_args as u32,
                limits::MAX_KERNEL_ARGS as u32,
                at,
            )?;
            let dirs = k.arg_dirs.get();
            for a in 0..16u32 {
                let d = (dirs >> (2 * a)) & 3;
                if a < k.num_args as u32 {
                    if d == 0 {
                        return Err(VerifyError {
                            kind: ErrorKind::BadCode {
                                what: "argument direction",
                                value: 0,
                            },
                            at,
                        });
                    }
                } else if d != 0 {
                    return nz("directions beyond the argument count");
                }
            }
        }
        Ok(())
    }

    pub(super) fn axes(&mut self) -> R<()> {
        for (i, r) in self.v.axes.iter().enumerate() {
            let at = self.loc(Section::Axes, i as u32, sizes::RECORD);
            let Some(op) = Opcode::from_u8(r.opcode) else {
                return Err(VerifyError {
                    kind: ErrorKind::UnknownOpcode { byte: r.opcode },
                    at,
                });
            };
            if op.class() != OpClass::Axis {
                return Err(VerifyError {
                    kind: ErrorKind::Misplaced {
                        op: op.mnemonic(),
                        place: "in the axis section",
                    },
                    at,
                });
            }
            if r.masked(op.fields()) != *r {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "unused operand bits",
                    },
                    at,
                });
            }
            let nexpr = self.v.exprs.len() as u32;
            let row_ok = |row: u32| -> R<()> {
                if row >= nexpr {
                    return Err(VerifyError {
                        kind: ErrorKind::OutOfRange {
                            what: "expression",
                            index: row,
                            len: nexpr,
                        },
                        at,
                    });
                }
                Ok(())
            };
            match op {
                Opcode::AXIS_DENSE_DYN => self.slot(r.op1() as u32, ParamKind::Scalar, at)?,
                Opcode::AXIS_RAGGED | Opcode::AXIS_RAGGED_ROW => {
                    self.slot(r.op1() as u32, ParamKind::Array, at)?;
                    row_ok(r.op2())?;
                }
                Opcode::AXIS_SPARSE | Opcode::AXIS_SPARSE_ROW => {
                    self.slot(r.op1() as u32, ParamKind::Array, at)?;
                    self.slot(r.op2() >> 16, ParamKind::Array, at)?;
                    row_ok(r.op2() & 0xFFFF)?;
                }
                Opcode::AXIS_TILE => {
                    // The base: an earlier axis whose values are its indices 0 .. extent and
                    // whose extent is one number (not a tile, a flattened or a sparse axis).
                    let base = r.op1() as u32;
                    if base >= i as u32 {
                        return Err(VerifyError {
                            kind: ErrorKind::OutOfRange {
                                what: "tiled axis (an earlier axis)",
                                index: base,
                                len: i as u32,
                            },
                            at,
                        });
                    }
                    let b = self.v.axes[base as usize].opcode;
                    let tileable = [
                        Opcode::AXIS_DENSE,
                        Opcode::AXIS_DENSE_DYN,
                        Opcode::AXIS_RAGGED_ROW,
                    ]
                    .iter()
                    .any(|o| *o as u8 == b);
                    if !tileable {
                        return Err(VerifyError {
                            kind: ErrorKind::BadCode {
                                what: "tiled axis kind (dense, dense_dyn or a ragged row)",
                                value: b as u32,
                            },
                            at,
                        });
                    }
                    row_ok(r.op2())?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub(super) fn regions(&mut self) -> R<()> {
        let n = self.v.exprs.len() as u32;
        for (i, d) in self.v.regions.iter().enumerate() {
            let at = self.loc(Section::Regions, i as u32, sizes::REGION);
            for (e, what) in [(d.start.get(), false), (d.end.get(), true)] {
                if e as u32 >= n && !(what && e == NONE16) {
                    return Err(VerifyError {
                        kind: ErrorKind::OutOfRange {
                            what: "expression",
                            index: e as u32,
                            len: n,
                        },
                        at,
                    });
                }
            }
        }
        Ok(())
    }
}
