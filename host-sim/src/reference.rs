//! The reference expander: walks the whole program on one thread in program order, the way the
//! pto-isa task-graph runtime does, and names each task's owner for a given AICPU count. It is
//! written independently of the interpreter (a plain recursive walk with its own expression
//! evaluator, no skipping, no counting) so that it can serve as the ground truth the
//! interpreter's per-AICPU expansions are compared against.

use ptovm_vm::format::{PolicySpec, Record, COND_HAS_ELSE, DIM_IS_SLOT, NONE16, TENSOR_IMPLICIT};
use ptovm_vm::interp::mix64;
use ptovm_vm::readback::Readback;
use ptovm_vm::{Dir, ExprOp, Io, Opcode, Policy, Pool, RunError, RuntimeParams, Value, Verified};

/// A task of the reference expansion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefTask {
    /// Program-order id.
    pub id: u64,
    /// Kernel index.
    pub kernel: u16,
    /// Pool.
    pub pool: Pool,
    /// The tier that chose its kernel in a tier set (the `TASK`'s `tier`; 0 without one).
    pub tier: u8,
    /// Instruction index of the TASK.
    pub site: u32,
    /// Where its iteration sits in the loop whose body holds the TASK directly
    /// (`ptovm_vm::Task::iter`): first (1), last (2), both, or 0 outside a loop's body.
    pub iter: u8,
    /// Parameter values.
    pub params: Vec<i64>,
    /// IO regions.
    pub io: Vec<Io>,
    /// The AICPU that owns it.
    pub owner: u32,
}

impl RefTask {
    /// Builds the reference form of an interpreter task (for comparisons).
    pub fn from_task(t: &ptovm_vm::Task, owner: u32) -> RefTask {
        RefTask {
            id: t.id,
            kernel: t.kernel,
            pool: t.pool(),
            tier: t.tier,
            site: t.site,
            iter: t.iter,
            params: t.params().to_vec(),
            io: t
                .ios()
                .iter()
                .map(|io| {
                    let mut x = *io;
                    x.ranges[io.ndims as usize..].fill((0, 0));
                    x
                })
                .collect(),
            owner,
        }
    }
}

struct Walker<'v, 'a, 'p> {
    v: &'v Verified<'a>,
    p: &'v RuntimeParams<'p>,
    n: u64,
    vars: Vec<i64>,
    pos: Vec<(u64, u64)>,
    out: Vec<RefTask>,
    limit: u64,
    /// The runtime arrays read back so far (`READBACK`), by slot.
    read: Vec<Option<Vec<u32>>>,
    readbacks: u32,
    on_readback: &'v mut OnReadback<'v>,
}

/// What a `READBACK` reads ([`expand_with`]): given the point and every task before it (all
/// of which have completed by then), the tensor's elements as raw 32-bit words, or `None` to
/// keep the launch's values of the runtime array (no memory to read).
pub type OnReadback<'x> = dyn FnMut(&Readback, &[RefTask]) -> Option<Vec<u32>> + 'x;

type R<T> = Result<T, RunError>;

/// Expands the whole program; `aicpus` is the AICPU count that owners are computed for.
/// Stops with `RunError::TooManyTasks` past `limit` tasks. A `READBACK` keeps the launch's
/// values of its runtime array (as a run whose tensors have no memory does).
pub fn expand(v: &Verified<'_>, p: &RuntimeParams<'_>, aicpus: u32, limit: u64) -> R<Vec<RefTask>> {
    expand_with(v, p, aicpus, limit, &mut |_: &Readback, _: &[RefTask]| None)
}

/// [`expand`] with the values each `READBACK` reads given by `on_readback`.
pub fn expand_with<'v>(
    v: &'v Verified<'_>,
    p: &'v RuntimeParams<'_>,
    aicpus: u32,
    limit: u64,
    on_readback: &'v mut OnReadback<'v>,
) -> R<Vec<RefTask>> {
    let mut w = Walker {
        v,
        p,
        n: aicpus.max(1) as u64,
        vars: vec![],
        pos: vec![],
        out: vec![],
        limit,
        read: vec![None; p.values().len()],
        readbacks: 0,
        on_readback,
    };
    let c = v.config();
    let mut policy = c.policy;
    if policy.kind == Policy::Threshold as u8 {
        let sel = w.eval(c.selector.get() as u32, 0)?;
        let levels = c.num_levels as usize;
        let mut chosen = levels - 1;
        for i in 0..levels {
            if sel <= c.thresholds[i].get() as i64 {
                chosen = i;
                break;
            }
        }
        policy = c.levels[chosen];
    }
    w.block(0, v.code().len() as u32 - 1, policy, 0)?;
    Ok(w.out)
}

impl Walker<'_, '_, '_> {
    fn rec(&self, pc: u32) -> Record {
        self.v.code()[pc as usize]
    }

    /// Runtime array `slot`: the values read back into it, or the launch's.
    fn array(&self, slot: usize) -> &[u32] {
        match self.read.get(slot) {
            Some(Some(a)) => a,
            _ => self.p.array(slot),
        }
    }

    /// A `READBACK`: the values its tensor holds once every task before it has completed,
    /// checked (range, and the launch's rules for runtime arrays), in place of the array's.
    fn readback(&mut self, pc: u32, r: Record) -> R<()> {
        let slot = (r.op2() & 0xFFFF) as usize;
        let rb = Readback {
            pc,
            tensor: r.op1(),
            slot: slot as u16,
            bound: self.eval(r.op2() >> 16, pc)?,
            index: self.readbacks,
        };
        self.readbacks += 1;
        let launch = self.array(slot).to_vec();
        let values = (self.on_readback)(&rb, &self.out).unwrap_or_else(|| launch.clone());
        if values.len() != launch.len() {
            return Err(RunError::ReadbackParams {
                pc,
                problem: ptovm_vm::ParamError::Readback {
                    slot,
                    len: values.len(),
                    elems: launch.len() as u64,
                },
            });
        }
        let dtype = self.v.tensors()[r.op1() as usize].dtype;
        ptovm_vm::readback::check_values(&rb, dtype, &values)?;
        self.read[slot] = Some(values);
        let slots: Vec<Value<'_>> = (0..self.read.len())
            .map(|s| match (&self.read[s], self.p.values()[s]) {
                (Some(a), _) => Value::Array(a),
                (None, v) => v,
            })
            .collect();
        self.p
            .rebind(self.v, &slots)
            .map_err(|problem| RunError::ReadbackParams { pc, problem })?;
        Ok(())
    }

    fn eval(&self, start: u32, pc: u32) -> R<i64> {
        let mut st: Vec<i64> = vec![];
        let ovf = RunError::Overflow { pc };
        let mut i = start as usize;
        loop {
            let r = self.v.exprs()[i];
            i += 1;
            let op = ExprOp::from_u8(r.opcode).expect("verified");
            if op == ExprOp::END {
                return Ok(st.pop().expect("verified"));
            }
            let x = match op {
                ExprOp::CONST => r.op2() as i32 as i64,
                ExprOp::VAR => self.vars[r.op1() as usize],
                ExprOp::PARAM => self.p.scalar(r.op1() as usize) as i64,
                ExprOp::ELEM => {
                    let idx = st.pop().expect("verified");
                    let arr = self.array(r.op1() as usize);
                    if idx < 0 || idx as usize >= arr.len() {
                        return Err(RunError::Index {
                            pc,
                            slot: r.op1(),
                            index: idx,
                            len: arr.len(),
                        });
                    }
                    arr[idx as usize] as i64
                }
                ExprOp::NEG => st.pop().expect("verified").checked_neg().ok_or(ovf)?,
                ExprOp::NOT => (st.pop().expect("verified") == 0) as i64,
                _ => {
                    let b = st.pop().expect("verified");
                    let a = st.pop().expect("verified");
                    let div = |a: i64, b: i64| {
                        if b == 0 {
                            Err(RunError::DivByZero { pc })
                        } else {
                            a.checked_div(b).ok_or(ovf)
                        }
                    };
                    match op {
                        ExprOp::ADD => a.checked_add(b).ok_or(ovf)?,
                        ExprOp::SUB => a.checked_sub(b).ok_or(ovf)?,
                        ExprOp::MUL => a.checked_mul(b).ok_or(ovf)?,
                        ExprOp::DIV => div(a, b)?,
                        ExprOp::MOD => {
                            let q = div(a, b)?;
                            a - b * q
                        }
                        ExprOp::CEILDIV => {
                            let q = div(a, b)?;
                            // Round toward +inf: up when the exact quotient is positive and
                            // inexact.
                            if q.checked_mul(b).ok_or(ovf)? != a && ((a < 0) == (b < 0)) {
                                q + 1
                            } else {
                                q
                            }
                        }
                        ExprOp::MIN => a.min(b),
                        ExprOp::MAX => a.max(b),
                        ExprOp::EQ => (a == b) as i64,
                        ExprOp::NE => (a != b) as i64,
                        ExprOp::LT => (a < b) as i64,
                        ExprOp::LE => (a <= b) as i64,
                        ExprOp::GT => (a > b) as i64,
                        ExprOp::GE => (a >= b) as i64,
                        ExprOp::AND => (a != 0 && b != 0) as i64,
                        ExprOp::OR => (a != 0 || b != 0) as i64,
                        _ => unreachable!("verified"),
                    }
                }
            };
            st.push(x);
        }
    }

    /// The values a loop's variable takes (positions are their indices).
    fn values(&self, axis: u16, pc: u32) -> R<Vec<i64>> {
        let a = self.v.axes()[axis as usize];
        let op = Opcode::from_u8(a.opcode).expect("verified");
        let array = self.array(a.op1() as usize);
        let index_error = |index: i64| RunError::Index {
            pc,
            slot: a.op1(),
            index,
            len: array.len(),
        };
        let indices = || self.array((a.op2() >> 16) as usize);
        Ok(match op {
            Opcode::AXIS_DENSE => (0..a.op2() as i64).collect(),
            Opcode::AXIS_DENSE_DYN => (0..self.p.scalar(a.op1() as usize) as i64).collect(),
            // PTO-WSP's ragged(outer, lengths): one axis over all the first `outer` rows.
            Opcode::AXIS_RAGGED => {
                let outer = self.eval(a.op2(), pc)?;
                if outer < 0 || outer as usize > array.len() {
                    return Err(index_error(outer));
                }
                let total: u64 = array[..outer as usize].iter().map(|&l| l as u64).sum();
                (0..total as i64).collect()
            }
            // PTO-WSP's sparse(outer, indptr, indices): the stored indices of the first
            // `outer` rows, in storage order.
            Opcode::AXIS_SPARSE => {
                let outer = self.eval(a.op2() & 0xFFFF, pc)?;
                if outer < 0 || outer as usize >= array.len() {
                    return Err(index_error(outer));
                }
                indices()[..array[outer as usize] as usize]
                    .iter()
                    .map(|x| *x as i64)
                    .collect()
            }
            Opcode::AXIS_RAGGED_ROW => {
                let row = self.eval(a.op2(), pc)?;
                if row < 0 || row as usize >= array.len() {
                    return Err(index_error(row));
                }
                (0..array[row as usize] as i64).collect()
            }
            // PTO-WSP's PTO_TILE: the tiles of the base axis, the last one partial.
            Opcode::AXIS_TILE => {
                let elements = self.values(a.op1(), pc)?.len() as u64;
                let size = self.eval(a.op2(), pc)?;
                if size < 1 {
                    return Err(RunError::TileSize { pc, size });
                }
                (0..elements.div_ceil(size as u64) as i64).collect()
            }
            Opcode::AXIS_SPARSE_ROW => {
                let row = self.eval(a.op2() & 0xFFFF, pc)?;
                if row < 0 || row as usize + 1 >= array.len() {
                    return Err(index_error(row.saturating_add(1)));
                }
                indices()[array[row as usize] as usize..array[row as usize + 1] as usize]
                    .iter()
                    .map(|x| *x as i64)
                    .collect()
            }
            other => unreachable!("verified: {other:?} is not an axis"),
        })
    }

    fn owner(&self, policy: &PolicySpec, id: u64, pc: u32) -> R<u32> {
        let n = self.n;
        Ok(match Policy::from_u8(policy.kind).expect("verified") {
            Policy::RoundRobin | Policy::Threshold => (id % n) as u32,
            Policy::Affinity => self.eval(policy.key.get() as u32, pc)?.rem_euclid(n as i64) as u32,
            Policy::Hash => (mix64(self.eval(policy.key.get() as u32, pc)? as u64) % n) as u32,
            Policy::StaticPartition => {
                let (pos, ext) = self.pos[policy.depth as usize];
                (pos as u128 * n as u128 / ext as u128) as u32
            }
        })
    }

    /// Runs the statements `[start, end)`; `iter` is the position flags of the iteration when
    /// they are a loop's body (0 otherwise).
    fn block(&mut self, start: u32, end: u32, policy: PolicySpec, iter: u8) -> R<()> {
        let mut pc = start;
        while pc < end {
            let r = self.rec(pc);
            let op = Opcode::from_u8(r.opcode).expect("verified");
            match op {
                Opcode::NOP => pc += 1,
                Opcode::READBACK => {
                    self.readback(pc, r)?;
                    pc += 1;
                }
                Opcode::TASK => {
                    self.task(pc, r, &policy, iter)?;
                    pc += 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
                }
                Opcode::PARALLEL_FOR | Opcode::FOR_EACH | Opcode::SELECT => {
                    let vals = self.values(r.op1(), pc)?;
                    let ext = vals.len() as u64;
                    for (i, x) in vals.into_iter().enumerate() {
                        self.vars.push(x);
                        self.pos.push((i as u64, ext));
                        let first = if i == 0 {
                            ptovm_vm::interp::ITER_FIRST
                        } else {
                            0
                        };
                        let last = if i as u64 + 1 == ext {
                            ptovm_vm::interp::ITER_LAST
                        } else {
                            0
                        };
                        let res = self.block(pc + 1, r.op2(), policy, first | last);
                        self.vars.pop();
                        self.pos.pop();
                        res?;
                    }
                    pc = r.op2();
                }
                Opcode::COND => {
                    let has_else = r.flags & COND_HAS_ELSE != 0;
                    let after = if has_else {
                        self.rec(r.op2()).op2()
                    } else {
                        r.op2()
                    };
                    if self.eval(r.op1() as u32, pc)? != 0 {
                        self.block(pc + 1, r.op2(), policy, 0)?;
                    } else if has_else {
                        self.block(r.op2() + 1, after, policy, 0)?;
                    }
                    pc = after;
                }
                Opcode::COMBINE | Opcode::SEQUENTIAL => {
                    self.block(pc + 1, r.op2(), policy, 0)?;
                    pc = r.op2();
                }
                Opcode::DISPATCH_FILTER => {
                    let p = match Policy::from_u8(r.flags).expect("verified") {
                        Policy::StaticPartition => PolicySpec {
                            kind: r.flags,
                            depth: r.op1() as u8,
                            key: NONE16.into(),
                        },
                        Policy::Affinity | Policy::Hash => PolicySpec {
                            kind: r.flags,
                            depth: 0,
                            key: r.operand1,
                        },
                        _ => PolicySpec {
                            kind: Policy::RoundRobin as u8,
                            depth: 0,
                            key: NONE16.into(),
                        },
                    };
                    self.block(pc + 1, r.op2(), p, 0)?;
                    pc = r.op2();
                }
                _ => unreachable!("verified code holds no {op:?} here"),
            }
        }
        Ok(())
    }

    fn task(&mut self, pc: u32, r: Record, policy: &PolicySpec, iter: u8) -> R<()> {
        let id = self.out.len() as u64;
        if id >= self.limit {
            return Err(RunError::TooManyTasks);
        }
        let np = r.op2() & 0xFFFF;
        let nio = r.op2() >> 16;
        let kernel = self.v.kernels()[r.op1() as usize];
        let mut params = vec![];
        for i in 0..np {
            let opc = pc + 1 + i;
            let o = self.rec(opc);
            params.push(match Opcode::from_u8(o.opcode).expect("verified") {
                Opcode::PARAM_CONST => o.op2() as i32 as i64,
                Opcode::PARAM_LOOPVAR => self.vars[o.op1() as usize],
                _ => self.eval(o.op2(), opc)?,
            });
        }
        let mut io = vec![];
        for j in 0..nio {
            let opc = pc + 1 + np + j;
            let o = self.rec(opc);
            let t = self.v.tensors()[o.op1() as usize];
            let implicit = t.flags.get() & TENSOR_IMPLICIT != 0;
            let ndims = o.flags as usize;
            let extent = |d: usize| {
                let x = t.dims[d].get();
                if x & DIM_IS_SLOT != 0 {
                    self.p.scalar((x & 0xFFFF) as usize) as i64
                } else {
                    x as i64
                }
            };
            let mut region = Io {
                tensor: o.op1(),
                dir: Dir::of_io(Opcode::from_u8(o.opcode).expect("verified")).expect("verified")
                    as u8,
                ndims: ndims as u8,
                ..Io::default()
            };
            for d in 0..ndims {
                let rd = self.v.regions()[o.op2() as usize + d];
                let s = self.eval(rd.start.get() as u32, opc)?;
                let e = if rd.end.get() == NONE16 {
                    s.checked_add(1).ok_or(RunError::Overflow { pc: opc })?
                } else {
                    self.eval(rd.end.get() as u32, opc)?
                };
                if s < 0 || e < s {
                    return Err(RunError::BadRegion {
                        pc: opc,
                        tensor: o.op1(),
                        dim: d as u8,
                        start: s,
                        end: e,
                    });
                }
                if !implicit && e > extent(d) {
                    return Err(RunError::RegionBounds {
                        pc: opc,
                        tensor: o.op1(),
                        dim: d as u8,
                        start: s,
                        end: e,
                        extent: extent(d),
                    });
                }
                region.ranges[d] = (s, e);
            }
            io.push(region);
        }
        let owner = self.owner(policy, id, pc)?;
        self.out.push(RefTask {
            id,
            kernel: r.op1(),
            pool: Pool::from_u8(kernel.pool).expect("verified"),
            tier: r.flags,
            site: pc,
            iter,
            params,
            io,
            owner,
        });
        Ok(())
    }
}
