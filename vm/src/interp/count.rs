//! Task counts of subtrees an instance skips, and the work bound known before running
//! (spec/bytecode.md §5.7-5.8).

use super::*;

impl<'a, 'p> Interpreter<'a, 'p> {
    // ---------------------------------------------------------------- counting

    /// The number of tasks the statements `[start, end)` generate with the current loop
    /// variables (`self.loops` of them bound). Walks only what the count depends on: a loop
    /// whose body's count does not depend on its variable is counted once and multiplied.
    pub fn count_range(&mut self, start: u32, end: u32) -> R<u64> {
        #[derive(Clone, Copy)]
        struct C {
            end: u32,
            after: u32,
            sum: u64,
            mult: u64,
            is_loop: bool,
            at: u32,
            depth: u8,
            pos: u64,
            ext: u64,
            base: u32,
            indices: u16,
            dependent: bool,
        }
        let base_frame = C {
            end,
            after: end,
            sum: 0,
            mult: 1,
            is_loop: false,
            at: start,
            depth: 0,
            pos: 0,
            ext: 0,
            base: 0,
            indices: NONE16,
            dependent: false,
        };
        let mut st = [base_frame; limits::MAX_NESTING + 1];
        let mut sp = 0usize;
        let mut depth = self.loops as u8;
        let mut pc = start;
        loop {
            if pc >= st[sp].end {
                let f = st[sp];
                if sp == 0 {
                    return Ok(f.sum);
                }
                if f.is_loop && f.dependent && f.pos + 1 < f.ext {
                    let p = f.pos + 1;
                    st[sp].pos = p;
                    self.bind(f.depth, p, f.ext, f.base, f.indices);
                    self.stats.count_visits += 1;
                    pc = f.at + 1;
                    continue;
                }
                let add = f.sum.checked_mul(f.mult).ok_or(RunError::TooManyTasks)?;
                sp -= 1;
                st[sp].sum = st[sp].sum.checked_add(add).ok_or(RunError::TooManyTasks)?;
                if f.is_loop {
                    depth -= 1;
                }
                pc = f.after;
                continue;
            }
            let r = self.rec(pc);
            match Opcode::from_u8(r.opcode).map(|o| o.class()) {
                Some(OpClass::Task) => {
                    st[sp].sum = st[sp].sum.checked_add(1).ok_or(RunError::TooManyTasks)?;
                    pc += 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
                }
                Some(OpClass::Loop) => {
                    let (ext, base, indices) = self.axis(r.op1(), pc)?;
                    if ext == 0 || sp + 1 >= st.len() {
                        pc = r.op2();
                        continue;
                    }
                    let dependent = self.count_depends(pc + 1, r.op2(), depth);
                    if dependent && indices == NONE16 {
                        // One COND on an interval of the variable: counted from its bounds.
                        let n = match self.interval_shape(pc, r.op2()) {
                            Some(counts) => {
                                self.interval_count((pc, depth, ext), counts, 0, ext)?
                            }
                            None => None,
                        };
                        if let Some(n) = n {
                            st[sp].sum = st[sp].sum.checked_add(n).ok_or(RunError::TooManyTasks)?;
                            pc = r.op2();
                            continue;
                        }
                    }
                    self.bind(depth, 0, ext, base, indices);
                    self.stats.count_visits += 1;
                    sp += 1;
                    st[sp] = C {
                        end: r.op2(),
                        after: r.op2(),
                        sum: 0,
                        mult: if dependent { 1 } else { ext },
                        is_loop: true,
                        at: pc,
                        depth,
                        pos: 0,
                        ext,
                        base,
                        indices,
                        dependent,
                    };
                    depth += 1;
                    pc += 1;
                }
                Some(OpClass::Block) => {
                    let mut after = r.op2();
                    if r.opcode == Opcode::COND as u8 {
                        if self.eval(r.op1() as u32, pc)? == 0 {
                            pc = r.op2(); // the else block, if any, runs as a SEQUENTIAL
                            continue;
                        }
                        after = self.cond_end(r);
                    }
                    if sp + 1 >= st.len() {
                        pc = after;
                        continue;
                    }
                    sp += 1;
                    st[sp] = C {
                        end: r.op2(),
                        after,
                        sum: 0,
                        mult: 1,
                        is_loop: false,
                        at: pc,
                        ..base_frame
                    };
                    pc += 1;
                }
                _ => pc += 1,
            }
        }
    }

    /// The tasks of positions `[from, to)` of the loop in frame `sp` when its body is one COND
    /// on an interval of the loop's values with branches of fixed counts (`interval_shape`,
    /// looked for once per run of the loop), from one evaluation of the interval's bounds
    /// (`interval_count`). `None` for any other body.
    pub(super) fn count_by_interval(&mut self, from: u64, to: u64) -> R<Option<u64>> {
        let f = self.frames[self.sp];
        if f.interval == UNKNOWN {
            let shape = self.interval_shape(f.at, f.end);
            let f = &mut self.frames[self.sp];
            f.interval = shape.is_some() as u8;
            f.branch_counts = shape.unwrap_or((0, 0));
        }
        let f = self.frames[self.sp];
        if f.interval != 1 || f.indices != NONE16 {
            return Ok(None);
        }
        let pred = self.rec(f.at + 1).op1() as u32;
        let Some((lo, hi)) = self.cond_interval(f.at + 1, pred)? else {
            self.frames[self.sp].interval = 0;
            return Ok(None);
        };
        let n = interval_tasks(f.branch_counts, (lo as i128, hi as i128), from, to)?;
        Ok(Some(n))
    }

    /// The task counts (then, else) of the body of the loop at `at` (ending at `end`) when it
    /// is one COND whose blocks hold fixed counts (`fixed_count`; no else block: 0).
    pub(super) fn interval_shape(&self, at: u32, end: u32) -> Option<(u16, u16)> {
        let r = self.rec(at + 1);
        let after = self.cond_end(r);
        if r.opcode != Opcode::COND as u8 || after != end {
            return None;
        }
        let then = self.fixed_count(at + 2, r.op2())?;
        let other = if r.flags & COND_HAS_ELSE != 0 {
            self.fixed_count(r.op2(), after)?
        } else {
            0
        };
        Some((u16::try_from(then).ok()?, u16::try_from(other).ok()?))
    }

    /// The tasks of positions `[from, to)` of the loop at `at` (its variable at `depth`, its
    /// values its positions `0 .. ext`: not a sparse axis) whose body is a COND of the branch
    /// counts `(then, other)` (`interval_shape`), when the COND's predicate holds on an
    /// interval of the variable (`eval_interval`: Task Bench's `cond i < pow2[t] { … }`, `cond
    /// i >= a && i < b { … }`): the positions inside times the then block's count, the others
    /// times the else block's. `None` when the predicate is not of that form.
    pub(super) fn interval_count(
        &self,
        (at, depth, ext): (u32, u8, u64),
        (then, other): (u16, u16),
        from: u64,
        to: u64,
    ) -> R<Option<u64>> {
        let pred = self.rec(at + 1).op1() as u32;
        let holds = eval_interval(
            self.v.exprs(),
            &self.p,
            &self.vars,
            (pred, depth as u16, ext),
            at + 1,
        )?;
        let Some(interval) = holds else {
            return Ok(None);
        };
        interval_tasks((then, other), interval, from, to).map(Some)
    }

    /// The number of tasks the statements `[start, end)` generate if it is the same whatever
    /// their CONDs decide, known from the code alone: TASK statements, blocks, and CONDs
    /// whose branches hold equal counts (a COND without an else block: none in its own
    /// block). `None` if a COND's branches differ, or for a loop or a DISPATCH_FILTER.
    pub(super) fn fixed_count(&self, start: u32, end: u32) -> Option<u64> {
        #[derive(Clone, Copy)]
        enum Part {
            /// A block's body, or the whole range.
            Body,
            /// A COND's then block; its else block (a SEQUENTIAL) follows at the frame's
            /// end when there is one, and the statement ends at `after`.
            Then { after: u32, has_else: bool },
            /// An else block, which must hold `then` tasks.
            Else { then: u64 },
        }
        let mut st = [(end, Part::Body, 0u64); limits::MAX_NESTING + 1];
        let mut sp = 0usize;
        let mut pc = start;
        loop {
            let (frame_end, part, sum) = st[sp];
            if pc >= frame_end {
                let (add, next) = match part {
                    Part::Body if sp == 0 => return Some(sum),
                    Part::Body => (sum, frame_end),
                    Part::Then { after, has_else } => {
                        if has_else {
                            st[sp] = (after, Part::Else { then: sum }, 0);
                            continue;
                        }
                        if sum != 0 {
                            return None;
                        }
                        (0, frame_end)
                    }
                    Part::Else { then } if then == sum => (sum, frame_end),
                    Part::Else { .. } => return None,
                };
                sp -= 1;
                st[sp].2 = st[sp].2.checked_add(add)?;
                pc = next;
                continue;
            }
            let r = self.rec(pc);
            let part = match Opcode::from_u8(r.opcode) {
                Some(Opcode::TASK) => {
                    st[sp].2 = st[sp].2.checked_add(1)?;
                    pc += 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
                    continue;
                }
                Some(Opcode::COND) => Part::Then {
                    after: self.cond_end(r),
                    has_else: r.flags & COND_HAS_ELSE != 0,
                },
                Some(Opcode::SEQUENTIAL | Opcode::COMBINE) => Part::Body,
                Some(o) if o.class() == OpClass::Loop || o == Opcode::DISPATCH_FILTER => {
                    return None
                }
                _ => {
                    pc += 1;
                    continue;
                }
            };
            if sp + 1 >= st.len() {
                return None;
            }
            sp += 1;
            st[sp] = (r.op2(), part, 0);
            pc += 1;
        }
    }

    /// An upper bound on the walk, from the code and the runtime parameters alone, in one pass
    /// over the code (no loop is entered): the loop iterations a walk of the whole program can
    /// start (an instance, which skips what it does not own, starts no more, counting included),
    /// and the tasks it can emit, with every loop at the largest extent its axis can
    /// have (`max_extent`) and
    /// every COND branch taken. Saturates at `u64::MAX`. A host or device can refuse a program
    /// whose bound is over its budget before running or counting anything
    /// (`count_tasks` walks the loops whose task count depends on their variable, so its own
    /// cost is up to `iterations`).
    pub fn work_bound(&self) -> WorkBound {
        let code = self.v.code();
        let last = code.len().saturating_sub(1) as u32;
        // The enclosing loops: their ends and the iterations each of their bodies runs.
        let mut stack = [(0u32, 1u64); limits::MAX_NESTING + 1];
        let mut sp = 0usize;
        let mut b = WorkBound::default();
        let mut pc = 0u32;
        while pc < last {
            while sp > 0 && stack[sp].0 <= pc {
                sp -= 1;
            }
            let mult = stack[sp].1;
            let r = self.rec(pc);
            match Opcode::from_u8(r.opcode).map(|o| o.class()) {
                Some(OpClass::Loop) => {
                    let runs = mult.saturating_mul(self.max_extent(r.op1()));
                    b.iterations = b.iterations.saturating_add(runs);
                    if sp + 1 < stack.len() {
                        sp += 1;
                        stack[sp] = (r.op2(), runs);
                    }
                    pc += 1;
                }
                Some(OpClass::Task) => {
                    b.tasks = b.tasks.saturating_add(mult);
                    pc += 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
                }
                _ => pc += 1,
            }
        }
        b.planning = self.p.planned().work;
        b
    }

    /// The largest extent axis `axis` can have with these runtime parameters: a flattened
    /// ragged axis the sum of all lengths, a flattened sparse axis the last indptr entry (its
    /// largest: the block was checked to be non-decreasing), a row of either its longest row.
    fn max_extent(&self, axis: u16) -> u64 {
        let a = self.axis_rec(axis);
        let array = self.p.array(a.op1() as usize);
        // An array read back later (`READBACK`) holds values up to its bound, whatever the
        // launch's stand-in holds: a row's extent is at most the bound, a flattened ragged
        // axis' every length is.
        if let Some(bound) = self.readback_bound(a.op1()) {
            return match Opcode::from_u8(a.opcode) {
                Some(Opcode::AXIS_RAGGED) => (array.len() as u64).saturating_mul(bound),
                Some(Opcode::AXIS_SPARSE | Opcode::AXIS_SPARSE_ROW) => bound,
                Some(Opcode::AXIS_RAGGED_ROW) => bound,
                Some(Opcode::AXIS_TILE) if a.op1() != axis => self.max_extent(a.op1()),
                _ => self.max_extent_of(a, axis, array),
            };
        }
        self.max_extent_of(a, axis, array)
    }

    /// The largest value a runtime array read back into `slot` may hold (its bound; a bound
    /// that fails to evaluate counts as unbounded), `None` for an array no `READBACK` fills.
    fn readback_bound(&self, slot: u16) -> Option<u64> {
        let (pc, r) = crate::readback::records(&self.v).find(|(_, r)| r.op2() as u16 == slot)?;
        Some(
            self.eval(r.op2() >> 16, pc)
                .map_or(u64::MAX, |b| b.max(0) as u64),
        )
    }

    /// [`Interpreter::max_extent`] from the launch's values of `array`.
    fn max_extent_of(&self, a: Record, axis: u16, array: &[u32]) -> u64 {
        match Opcode::from_u8(a.opcode) {
            Some(Opcode::AXIS_DENSE) => a.op2() as u64,
            Some(Opcode::AXIS_DENSE_DYN) => self.p.scalar(a.op1() as usize) as u64,
            Some(Opcode::AXIS_RAGGED) => {
                array.iter().fold(0u64, |s, &l| s.saturating_add(l as u64))
            }
            Some(Opcode::AXIS_SPARSE) => array.iter().copied().max().unwrap_or(0) as u64,
            Some(Opcode::AXIS_RAGGED_ROW) => array.iter().max().map_or(0, |&l| l as u64),
            // At most one tile per element (a size is at least 1); the base is not a tile.
            Some(Opcode::AXIS_TILE) if a.op1() != axis => self.max_extent(a.op1()),
            Some(Opcode::AXIS_SPARSE_ROW) => array
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]) as u64)
                .max()
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// The number of tasks the whole program generates with these runtime parameters: the
    /// bound on work that is known before running.
    pub fn count_tasks(&mut self) -> R<u64> {
        self.count_top(0, self.v.code().len() as u32 - 1)
    }

    /// The number of tasks the top-level statements `[start, end)` generate.
    pub fn count_top(&mut self, start: u32, end: u32) -> R<u64> {
        let saved = self.loops;
        self.loops = 0;
        let n = self.count_range(start, end);
        self.loops = saved;
        n
    }
}

/// The tasks of positions `[from, to)` of a loop whose body is a COND of branch counts
/// `(then, other)` holding on the values `lo .. hi` of its variable.
fn interval_tasks((then, other): (u16, u16), (lo, hi): (i128, i128), from: u64, to: u64) -> R<u64> {
    let inside = (hi.min(to as i128) - lo.max(from as i128)).max(0) as u64;
    (then as u64)
        .checked_mul(inside)
        .zip((other as u64).checked_mul(to - from - inside))
        .and_then(|(a, b)| a.checked_add(b))
        .ok_or(RunError::TooManyTasks)
}
