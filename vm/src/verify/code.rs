//! The code section's structural pass (spec/bytecode.md §7, step 10): nesting, bodies, task
//! operands and their arity, directions and regions.

use super::*;

impl<'v, 'a> Checker<'v, 'a> {
    pub(super) fn axis(&self, axis: u32, loops: u32, at: Location) -> R<Opcode> {
        let n = self.v.axes.len() as u32;
        let Some(r) = self.v.axes.get(axis as usize) else {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "axis",
                    index: axis,
                    len: n,
                },
                at,
            });
        };
        // Axis records were checked by `axes`; the opcode is an AXIS_* one.
        let op = Opcode::from_u8(r.opcode).unwrap_or(Opcode::AXIS_DENSE);
        for e in Opcode::loop_exprs(self.v.axes, r).into_iter().flatten() {
            self.expr(e, Some(loops), at)?;
        }
        Ok(op)
    }

    /// The structural pass over the code section. Returns the deepest loop nesting, the TASK
    /// count and the `READBACK`s' instruction indices.
    pub(super) fn code(&mut self, module_need: u32) -> R<(u32, u32, Readbacks)> {
        let code = self.v.code;
        let n = code.len() as u32;
        let last = n - 1;
        let halt = Record::new(Opcode::HALT as u8, 0, 0, 0);
        if code.get(last as usize) != Some(&halt) {
            return Err(VerifyError {
                kind: ErrorKind::MissingHalt,
                at: self.code_loc(last),
            });
        }
        let top = Frame {
            end: last,
            op: None,
            children: 0,
            is_loop: false,
            need: module_need,
            at: 0,
        };
        let mut stack = [top; limits::MAX_NESTING + 1];
        let mut sp = 0usize; // index of the top frame
        let mut loops = 0u32;
        let mut max_loops = 0u32;
        let mut tasks = 0u32;
        let mut else_pending = false;
        // The `READBACK`s so far: the runtime arrays they fill and where they are.
        let mut readbacks = Readbacks::default();
        let mut pc = 0u32;
        loop {
            // Close every body that ends here.
            while sp > 0 && stack[sp].end == pc {
                let f = stack[sp];
                self.close(&f)?;
                if f.is_loop {
                    loops -= 1;
                }
                if f.op == Some(Opcode::COND) && code[f.at as usize].flags & COND_HAS_ELSE != 0 {
                    else_pending = true;
                }
                sp -= 1;
            }
            if pc >= last {
                break;
            }
            let at = self.code_loc(pc);
            let r = &code[pc as usize];
            let Some(op) = Opcode::from_u8(r.opcode) else {
                return Err(VerifyError {
                    kind: ErrorKind::UnknownOpcode { byte: r.opcode },
                    at,
                });
            };
            if r.masked(op.fields()) != *r {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "unused operand bits",
                    },
                    at,
                });
            }
            if else_pending {
                // The else block of the COND just closed belongs to that COND, not the parent.
                else_pending = false;
            } else {
                stack[sp].children += 1;
            }
            let parent_end = stack[sp].end;
            match op.class() {
                OpClass::Halt => {
                    return Err(VerifyError {
                        kind: ErrorKind::Misplaced {
                            op: "HALT",
                            place: "before the last instruction",
                        },
                        at,
                    })
                }
                OpClass::Param | OpClass::Io => {
                    return Err(VerifyError {
                        kind: ErrorKind::Misplaced {
                            op: op.mnemonic(),
                            place: "outside a TASK's operands",
                        },
                        at,
                    })
                }
                OpClass::Axis => {
                    return Err(VerifyError {
                        kind: ErrorKind::Misplaced {
                            op: op.mnemonic(),
                            place: "in the code section",
                        },
                        at,
                    })
                }
                OpClass::Nop => {}
                OpClass::Sync => {
                    let top_level = stack[1..=sp]
                        .iter()
                        .all(|f| matches!(f.op, Some(Opcode::SEQUENTIAL | Opcode::COMBINE)));
                    self.readback(pc, r, top_level, &mut readbacks, at)?;
                }
                OpClass::Task => {
                    let used = self.task(pc, loops, stack[sp].need, parent_end)?;
                    tasks += 1;
                    pc += 1 + used;
                    continue;
                }
                OpClass::Loop | OpClass::Block => {
                    let end = r.op2();
                    if end <= pc || end > parent_end {
                        return Err(VerifyError {
                            kind: ErrorKind::BadEnd {
                                end,
                                lo: pc + 1,
                                hi: parent_end,
                            },
                            at,
                        });
                    }
                    if sp + 1 > limits::MAX_NESTING {
                        return Err(VerifyError {
                            kind: ErrorKind::NestingTooDeep {
                                max: limits::MAX_NESTING,
                            },
                            at,
                        });
                    }
                    let mut need = stack[sp].need;
                    let is_loop = op.class() == OpClass::Loop;
                    match op {
                        Opcode::PARALLEL_FOR | Opcode::FOR_EACH | Opcode::SELECT => {
                            let axis = r.op1() as u32;
                            let kind = self.axis(axis, loops, at)?;
                            if op == Opcode::SELECT && !kind.is_sparse_axis() {
                                return Err(VerifyError {
                                    kind: ErrorKind::SelectNotSparse { axis },
                                    at,
                                });
                            }
                            if loops as usize >= limits::MAX_LOOP_DEPTH {
                                return Err(VerifyError {
                                    kind: ErrorKind::LoopTooDeep {
                                        max: limits::MAX_LOOP_DEPTH,
                                    },
                                    at,
                                });
                            }
                        }
                        Opcode::COND => {
                            self.expr(r.op1() as u32, Some(loops), at)?;
                            if r.flags & !COND_HAS_ELSE != 0 {
                                return Err(VerifyError {
                                    kind: ErrorKind::NonZero {
                                        what: "undefined COND flag bits",
                                    },
                                    at,
                                });
                            }
                            if r.flags & COND_HAS_ELSE != 0 {
                                let ok = end < parent_end
                                    && code.get(end as usize).is_some_and(|e| {
                                        e.opcode == Opcode::SEQUENTIAL as u8
                                            && e.op2() <= parent_end
                                    });
                                if !ok {
                                    return Err(VerifyError {
                                        kind: ErrorKind::ElseNotSequential { end },
                                        at,
                                    });
                                }
                            }
                        }
                        Opcode::DISPATCH_FILTER => {
                            let spec = match Policy::from_u8(r.flags) {
                                Some(Policy::Affinity) | Some(Policy::Hash) => PolicySpec {
                                    kind: r.flags,
                                    depth: 0,
                                    key: r.operand1,
                                },
                                Some(Policy::StaticPartition) => {
                                    limit("static partition depth", r.op1() as u32, 255, at)?;
                                    PolicySpec {
                                        kind: r.flags,
                                        depth: r.op1() as u8,
                                        key: NONE16.into(),
                                    }
                                }
                                Some(Policy::RoundRobin) if r.op1() == 0 => PolicySpec {
                                    kind: r.flags,
                                    depth: 0,
                                    key: NONE16.into(),
                                },
                                Some(Policy::RoundRobin) => {
                                    return Err(VerifyError {
                                        kind: ErrorKind::NonZero {
                                            what: "arg of a round_robin filter",
                                        },
                                        at,
                                    })
                                }
                                Some(Policy::Threshold) => {
                                    return Err(VerifyError {
                                        kind: ErrorKind::Misplaced {
                                            op: "a threshold policy",
                                            place: "in DISPATCH_FILTER",
                                        },
                                        at,
                                    })
                                }
                                None => {
                                    return Err(VerifyError {
                                        kind: ErrorKind::BadCode {
                                            what: "dispatch policy",
                                            value: r.flags as u32,
                                        },
                                        at,
                                    })
                                }
                            };
                            need = self.policy(&spec, false, at)?;
                        }
                        _ => {}
                    }
                    sp += 1;
                    stack[sp] = Frame {
                        end,
                        op: Some(op),
                        children: 0,
                        is_loop,
                        need,
                        at: pc,
                    };
                    if is_loop {
                        loops += 1;
                        max_loops = max_loops.max(loops);
                    }
                }
            }
            pc += 1;
        }
        Ok((max_loops, tasks, readbacks))
    }

    pub(super) fn close(&self, f: &Frame) -> R<()> {
        let Some(op) = f.op else { return Ok(()) };
        if matches!(op, Opcode::COMBINE | Opcode::SEQUENTIAL) {
            let declared = self.v.code[f.at as usize].op1() as u32;
            if declared != f.children {
                return Err(VerifyError {
                    kind: ErrorKind::ChildCount {
                        op: op.mnemonic(),
                        declared,
                        found: f.children,
                    },
                    at: self.code_loc(f.at),
                });
            }
        }
        Ok(())
    }

    /// Checks a TASK at `pc` and its operand records; returns how many operand records follow.
    /// A `READBACK` (§5.9): at the top level (inside `SEQUENTIAL` and `COMBINE` blocks only,
    /// so every AICPU reaches it once); a declared integer tensor; a runtime array slot that
    /// no other `READBACK` fills; a bound that reads no loop variable; at most
    /// `MAX_READBACKS` of them.
    fn readback(
        &self,
        pc: u32,
        r: &Record,
        top_level: bool,
        seen: &mut Readbacks,
        at: Location,
    ) -> R<()> {
        let bad = |problem| {
            Err(VerifyError {
                kind: ErrorKind::Readback { problem },
                at,
            })
        };
        if !top_level {
            return bad("a READBACK inside a loop, a COND or a dispatch block");
        }
        let tensor = r.op1() as u32;
        let Some(t) = self.v.tensors.get(tensor as usize) else {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "tensor",
                    index: tensor,
                    len: self.v.tensors.len() as u32,
                },
                at,
            });
        };
        if t.flags.get() & (TENSOR_IMPLICIT | TENSOR_STREAM) != 0 {
            return bad("the tensor read back has no declared shape");
        }
        if t.dtype != DType::I32 as u8 && t.dtype != DType::U32 as u8 {
            return bad("the tensor read back is not of i32 or u32 elements");
        }
        let slot = (r.op2() & 0xFFFF) as u16;
        match self.v.params.get(slot as usize) {
            Some(p) if p.kind == ParamKind::Array as u8 => {}
            Some(_) => return bad("the slot read back into is not a runtime array"),
            None => {
                return Err(VerifyError {
                    kind: ErrorKind::OutOfRange {
                        what: "runtime parameter",
                        index: slot as u32,
                        len: self.v.params.len() as u32,
                    },
                    at,
                })
            }
        }
        let n = seen.len as usize;
        if seen.slots[..n].contains(&slot) {
            return bad("two READBACKs fill one runtime array");
        }
        if n == limits::MAX_READBACKS {
            return bad("more than 4 READBACKs");
        }
        seen.slots[n] = slot;
        seen.pcs[n] = pc;
        seen.len += 1;
        self.expr(r.op2() >> 16, Some(0), at)?;
        Ok(())
    }

    pub(super) fn task(&mut self, pc: u32, loops: u32, need: u32, parent_end: u32) -> R<u32> {
        let code = self.v.code;
        let at = self.code_loc(pc);
        let r = &code[pc as usize];
        let kernel = r.op1() as u32;
        let np = r.op2() & 0xFFFF;
        let nio = r.op2() >> 16;
        limit(
            "task parameter count",
            np,
            limits::MAX_TASK_PARAMS as u32,
            at,
        )?;
        limit("task IO count", nio, limits::MAX_TASK_IO as u32, at)?;
        let nk = self.v.kernels.len() as u32;
        let Some(k) = self.v.kernels.get(kernel as usize) else {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "kernel",
                    index: kernel,
                    len: nk,
                },
                at,
            });
        };
        if need > loops {
            return Err(VerifyError {
                kind: ErrorKind::DispatchDepth {
                    needed_minus_one: need - 1,
                    have: loops,
                },
                at,
            });
        }
        let undeclared = k.flags & KERNEL_UNDECLARED != 0;
        // Under `stream_by`, one IO record beyond the kernel's resources: the stream's.
        let streamed = u32::from(self.stream.is_some());
        if streamed > nio {
            return Err(VerifyError {
                kind: ErrorKind::StreamOrder {
                    problem: "a task without its stream's IO record",
                },
                at,
            });
        }
        if !undeclared {
            if np != k.num_params as u32 {
                return Err(VerifyError {
                    kind: ErrorKind::Arity {
                        kernel,
                        what: "parameters",
                        expected: k.num_params as u32,
                        found: np,
                    },
                    at,
                });
            }
            if nio != k.num_args as u32 + streamed {
                return Err(VerifyError {
                    kind: ErrorKind::Arity {
                        kernel,
                        what: "IO regions",
                        expected: k.num_args as u32 + streamed,
                        found: nio,
                    },
                    at,
                });
            }
        }
        for pos in 0..np + nio {
            let ipc = pc + 1 + pos;
            let want = if pos < np {
                OpClass::Param
            } else {
                OpClass::Io
            };
            let expected = if pos < np {
                "a PARAM_* record"
            } else {
                "an IO_* record"
            };
            if ipc >= parent_end {
                return Err(VerifyError {
                    kind: ErrorKind::TaskOperand {
                        position: pos,
                        expected,
                        found: "the end of the enclosing body",
                    },
                    at,
                });
            }
            let oat = self.code_loc(ipc);
            let o = &code[ipc as usize];
            let Some(op) = Opcode::from_u8(o.opcode) else {
                return Err(VerifyError {
                    kind: ErrorKind::UnknownOpcode { byte: o.opcode },
                    at: oat,
                });
            };
            if op.class() != want {
                return Err(VerifyError {
                    kind: ErrorKind::TaskOperand {
                        position: pos,
                        expected,
                        found: op.mnemonic(),
                    },
                    at: oat,
                });
            }
            if o.masked(op.fields()) != *o {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "unused operand bits",
                    },
                    at: oat,
                });
            }
            match op {
                Opcode::PARAM_LOOPVAR => {
                    let depth = o.op1() as u32;
                    if depth >= loops {
                        return Err(VerifyError {
                            kind: ErrorKind::UnboundLoopVar {
                                depth,
                                bound: loops,
                            },
                            at: oat,
                        });
                    }
                }
                Opcode::PARAM_EXPR => {
                    self.expr(o.op2(), Some(loops), oat)?;
                }
                Opcode::PARAM_CONST => {}
                _ => {
                    // IO record.
                    let io = pos - np;
                    let dir = Dir::of_io(op).unwrap_or(Dir::InOut);
                    if let Some(st) = self.stream {
                        let last = io + 1 == nio;
                        if last {
                            // Bounds first (a region index past the table is that error).
                            self.io(o, loops, oat)?;
                        }
                        let ok = if last {
                            o.op1() as u32 == st
                                && dir == Dir::InOut
                                && o.flags == 1
                                && self.v.regions[o.op2() as usize].end.get() == NONE16
                        } else {
                            o.op1() as u32 != st
                        };
                        if !ok {
                            return Err(VerifyError {
                                kind: ErrorKind::StreamOrder {
                                    problem: if last {
                                        "a task's last IO record must be an IO_INOUT of one index of the stream-order tensor"
                                    } else {
                                        "only a task's last IO record may name the stream-order tensor"
                                    },
                                },
                                at: oat,
                            });
                        }
                        if last {
                            continue;
                        }
                    }
                    if undeclared {
                        if dir != Dir::InOut {
                            return Err(VerifyError {
                                kind: ErrorKind::Direction {
                                    kernel,
                                    position: io,
                                    declared: "inout (undeclared kernel)",
                                    found: op.mnemonic(),
                                },
                                at: oat,
                            });
                        }
                    } else {
                        let d = (k.arg_dirs.get() >> (2 * io)) & 3;
                        if d != dir as u32 {
                            let declared = Dir::from_u8(d as u8).map(|d| d.name()).unwrap_or("?");
                            return Err(VerifyError {
                                kind: ErrorKind::Direction {
                                    kernel,
                                    position: io,
                                    declared,
                                    found: op.mnemonic(),
                                },
                                at: oat,
                            });
                        }
                    }
                    self.io(o, loops, oat)?;
                }
            }
        }
        Ok(np + nio)
    }

    pub(super) fn io(&self, o: &Record, loops: u32, at: Location) -> R<()> {
        let tensor = o.op1() as u32;
        let nt = self.v.tensors.len() as u32;
        let Some(t) = self.v.tensors.get(tensor as usize) else {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "tensor",
                    index: tensor,
                    len: nt,
                },
                at,
            });
        };
        let dims = o.flags as u32;
        limit("region dimensions", dims, limits::MAX_RANK as u32, at)?;
        if t.flags.get() & TENSOR_IMPLICIT == 0 && dims > t.rank as u32 {
            return Err(VerifyError {
                kind: ErrorKind::RegionRank {
                    dims,
                    tensor,
                    rank: t.rank as u32,
                },
                at,
            });
        }
        let first = o.op2();
        if dims == 0 {
            if first != 0 {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "region index of a whole-tensor IO",
                    },
                    at,
                });
            }
            return Ok(());
        }
        let nr = self.v.regions.len() as u32;
        if first >= nr || nr - first < dims {
            return Err(VerifyError {
                kind: ErrorKind::OutOfRange {
                    what: "region",
                    index: first.saturating_add(dims - 1),
                    len: nr,
                },
                at,
            });
        }
        for d in first..first + dims {
            let rd = &self.v.regions[d as usize];
            self.expr(rd.start.get() as u32, Some(loops), at)?;
            if rd.end.get() != NONE16 {
                self.expr(rd.end.get() as u32, Some(loops), at)?;
            }
        }
        Ok(())
    }
}
