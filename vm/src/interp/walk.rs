//! The walk (spec/bytecode.md §5.1, §5.8): loops and blocks entered and closed, ownership
//! decided per iteration, subtrees owned elsewhere skipped; `run` and `next_task` (which hand
//! innermost loops of tasks to the fast path in `leaf`).

use super::*;

/// The first of the positions `0 .. ext` that `static` gives AICPU `me` of `n` (its block
/// runs to the next AICPU's first).
#[inline]
pub(super) fn block_start(me: u64, n: u64, ext: u64) -> u64 {
    (me as u128 * ext as u128).div_ceil(n as u128) as u64
}

/// The end of AICPU `me`'s block of the positions `0 .. ext` under `static` among `n`.
#[inline]
pub(super) fn block_end(me: u64, n: u64, ext: u64) -> u64 {
    block_start(me + 1, n, ext)
}

impl<'a, 'p> Interpreter<'a, 'p> {
    // ---------------------------------------------------------------- the walk

    /// Skips positions `[from, to)` of the loop in frame `sp` (none of them owned here):
    /// advances the task id by their tasks.
    pub(super) fn skip_positions(&mut self, from: u64, to: u64) -> R<()> {
        if from >= to {
            return Ok(());
        }
        let f = self.frames[self.sp];
        let (start, end) = (f.at + 1, f.end);
        if f.depends == UNKNOWN {
            self.frames[self.sp].depends = self.count_depends(start, end, f.depth) as u8;
        }
        let saved = self.loops;
        self.loops = f.depth as u32 + 1;
        let res = if self.frames[self.sp].depends == 0 {
            let c = match f.body_count {
                NO_COUNT => {
                    self.bind(f.depth, from, f.ext, f.base, f.indices);
                    let c = self.count_range(start, end)?;
                    self.frames[self.sp].body_count = c;
                    c
                }
                c => c,
            };
            c.checked_mul(to - from).ok_or(RunError::TooManyTasks)
        } else if let Some(n) = self.count_by_interval(from, to)? {
            Ok(n)
        } else {
            let mut total = 0u64;
            let mut p = from;
            let mut res = Ok(0);
            while p < to {
                self.bind(f.depth, p, f.ext, f.base, f.indices);
                self.stats.count_visits += 1;
                match self.count_range(start, end) {
                    Ok(c) => match total.checked_add(c) {
                        Some(t) => total = t,
                        None => {
                            res = Err(RunError::TooManyTasks);
                            break;
                        }
                    },
                    Err(e) => {
                        res = Err(e);
                        break;
                    }
                }
                p += 1;
            }
            res.map(|_: u64| total)
        };
        self.loops = saved;
        let n = res?;
        self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
        self.stats.skipped += n;
        Ok(())
    }

    /// Starts the next iteration of the loop in frame `sp` at position `from` or later, binding
    /// its variable and deciding ownership; skips positions owned elsewhere. Returns false when
    /// the loop has no more iterations. For a loop outside every other loop, remembers the id
    /// its iteration starts at ([`Interpreter::outer_start`]): the tasks of the positions
    /// before it have all been walked or counted.
    pub(super) fn next_iteration(&mut self, from: u64) -> R<bool> {
        let started = self.start_iteration(from)?;
        let f = &self.frames[self.sp];
        if started && f.depth == 0 {
            self.outer = Outer {
                frame: self.sp as u32,
                at: f.at,
                pos: f.pos,
                start: self.next_id,
            };
        }
        Ok(started)
    }

    /// [`Interpreter::next_iteration`] but for the loop's first id.
    fn start_iteration(&mut self, mut p: u64) -> R<bool> {
        let f = self.frames[self.sp];
        let parent_own = self.frames[self.sp - 1].own;
        let deciding = parent_own == Own::Undecided
            && f.policy.kind != Policy::RoundRobin as u8
            && f.need == f.depth as u32 + 1;
        if !deciding {
            if p >= f.ext {
                return Ok(false);
            }
            self.bind(f.depth, p, f.ext, f.base, f.indices);
            self.frames[self.sp].own = parent_own;
            self.frames[self.sp].pos = p;
            self.stats.visits += 1;
            return Ok(true);
        }
        let kind = Policy::from_u8(f.policy.kind);
        if f.filter == UNKNOWN {
            self.frames[self.sp].filter = self.has_filter(f.at + 1, f.end) as u8;
        }
        // A dispatch block in the body may give some of its tasks to this AICPU even in
        // iterations it does not own: then no iteration is skipped.
        let skippable = self.frames[self.sp].filter == 0;
        loop {
            if p >= f.ext {
                return Ok(false);
            }
            // Fast paths: the owned positions are known without evaluating each one.
            if skippable && kind == Some(Policy::StaticPartition) && f.policy.depth == f.depth {
                let lo = block_start(self.me, self.n, f.ext);
                let hi = block_end(self.me, self.n, f.ext);
                if p < lo {
                    self.skip_positions(p, lo)?;
                    p = lo;
                }
                if p >= hi {
                    self.skip_positions(p, f.ext)?;
                    return Ok(false);
                }
                break;
            }
            if skippable && self.keyed_by_own_variable(&f) {
                let q = p + (self.me + self.n - p % self.n) % self.n;
                let q = q.min(f.ext);
                self.skip_positions(p, q)?;
                p = q;
                if p >= f.ext {
                    return Ok(false);
                }
                break;
            }
            self.bind(f.depth, p, f.ext, f.base, f.indices);
            if self.owner(&f.policy, f.at)? == self.me {
                break;
            }
            if !skippable {
                // A dispatch block inside may give some of its tasks to this AICPU: walk it.
                self.frames[self.sp].own = Own::NotMine;
                self.frames[self.sp].pos = p;
                self.stats.visits += 1;
                return Ok(true);
            }
            self.skip_positions(p, p + 1)?;
            p += 1;
        }
        self.bind(f.depth, p, f.ext, f.base, f.indices);
        self.frames[self.sp].own = Own::Mine;
        self.frames[self.sp].pos = p;
        self.stats.visits += 1;
        Ok(true)
    }

    /// Emits this instance's next task and pauses after it (the task is then
    /// [`Interpreter::current_task`]): what `run` does with a budget of one task, for a
    /// caller that takes tasks one at a time, as the scheduler stages them. In a loop whose
    /// body is only tasks, when the next site (in this iteration, or the first of the next
    /// one) is this instance's and its record is kept, it refills that record directly: what
    /// `run` would do, without its way back into the loop.
    pub fn next_task(&mut self) -> R<Status> {
        struct Pause;
        impl Sink for Pause {
            fn task(&mut self, _: &Task) -> bool {
                false
            }
        }
        if let Some((k, advance)) = self.kept_next() {
            if advance {
                self.advance_leaf()?;
            }
            return self.emit_kept(k);
        }
        if self.varying_next() {
            // The end of an owned iteration of a varying leaf loop: on to the next position
            // it owns, whose branch `leaf_branch` gives (at once while the variable stays
            // where the last branch holds); its first site is refilled if its record is kept.
            self.advance_leaf()?;
            let f = &self.frames[self.sp];
            let (at, leaf) = (f.at, f.leaf);
            let (q, branch_end) = self.leaf_branch(leaf.0, leaf.1)?;
            let k = self.kept_slot(q, self.kept);
            if q < branch_end && k < TEMPLATES && self.kept & 1 << k != 0 {
                self.frames[self.sp].branch_end = branch_end;
                return self.emit_kept(k);
            }
            // Otherwise `run` takes the iteration from its start (the position is bound).
            self.pc = at + 1;
        }
        self.run(&mut Pause, 1)
    }

    /// What `close` and `next_iteration` do at the end of an owned iteration of the leaf loop
    /// in frame `sp`: on to the next position this AICPU owns (`leaf_stride`), past the others
    /// (their tasks counted). The caller has checked there is one (`kept_next`,
    /// `varying_next`).
    #[inline(always)]
    fn advance_leaf(&mut self) -> R<()> {
        let pos = self.frames[self.sp].pos;
        let (p, _) = self.next_position(&self.frames[self.sp]);
        self.skip_leaf(pos + 1, p)?;
        let f = &self.frames[self.sp];
        let (depth, ext, base, indices) = (f.depth, f.ext, f.base, f.indices);
        self.bind(depth, p, ext, base, indices);
        self.frames[self.sp].pos = p;
        self.stats.visits += 1;
        Ok(())
    }

    /// Emits the next task in `templates[k]`, the record kept for the site the walk is at
    /// (`kept_next`), and pauses after it.
    #[inline(always)]
    fn emit_kept(&mut self, k: usize) -> R<Status> {
        let f = &self.frames[self.sp];
        let iter = if f.varying { 0 } else { f.leaf_iter(f.pos) };
        let id = self.next_id;
        self.next_id = id.checked_add(1).ok_or(RunError::TooManyTasks)?;
        self.stats.instructions += 1;
        let next = self.refill(k, id)?;
        self.current = k as u8 + 1;
        self.templates[k % TEMPLATES].iter = iter;
        self.stats.emitted += 1;
        self.resume = (next, k as u32 + 1);
        self.pc = next;
        Ok(Status::Paused)
    }

    /// Runs the program to its end, every task to `sink`; a `READBACK` keeps the launch's
    /// values of its runtime array (what a caller with no memory to read does). Stops early only
    /// if the sink asks to pause (then returns [`Status::Paused`]).
    pub fn run_to_end<S: Sink + ?Sized>(&mut self, sink: &mut S) -> R<Status> {
        loop {
            match self.run(sink, u64::MAX)? {
                Status::Readback => continue,
                other => return Ok(other),
            }
        }
    }

    /// Runs until the program ends, `budget` tasks were emitted, or the sink asks to pause.
    pub fn run<S: Sink + ?Sized>(&mut self, sink: &mut S, budget: u64) -> R<Status> {
        let mut emitted = 0u64;
        if self.done {
            return Ok(Status::Done);
        }
        loop {
            if self.pc >= self.frames[self.sp].end {
                if self.sp == 0 {
                    self.done = true;
                    return Ok(Status::Done);
                }
                self.close()?;
                continue;
            }
            if emitted >= budget {
                return Ok(Status::Paused);
            }
            match self.leaf_loop(sink, budget, &mut emitted)? {
                Leaf::NotApplicable => {}
                Leaf::Ran | Leaf::Rest => continue,
                Leaf::Paused => return Ok(Status::Paused),
            }
            let pc = self.pc;
            let r = self.rec(pc);
            self.stats.instructions += 1;
            match Opcode::from_u8(r.opcode).map(|o| o.class()) {
                Some(OpClass::Task) => {
                    let np = r.op2() & 0xFFFF;
                    let nio = r.op2() >> 16;
                    self.pc = pc + 1 + np + nio;
                    let id = self.next_id;
                    self.next_id = id.checked_add(1).ok_or(RunError::TooManyTasks)?;
                    let f = &self.frames[self.sp];
                    let mine = match f.own {
                        Own::Mine => true,
                        Own::NotMine => false,
                        Own::Undecided => match Policy::from_u8(f.policy.kind) {
                            Some(Policy::RoundRobin) | None => id % self.n == self.me,
                            _ => self.owner(&f.policy.clone(), pc)? == self.me,
                        },
                    };
                    if !mine {
                        self.stats.skipped += 1;
                        continue;
                    }
                    self.fill_task(pc, r, id)?;
                    self.current = 0;
                    let f = &self.frames[self.sp];
                    self.task.iter =
                        if Opcode::from_u8(f.op).map(|o| o.class()) == Some(OpClass::Loop) {
                            iter_flags(f.pos, f.ext)
                        } else {
                            0
                        };
                    self.stats.emitted += 1;
                    emitted += 1;
                    if !sink.task(&self.task) {
                        return Ok(Status::Paused);
                    }
                }
                Some(OpClass::Loop) => self.enter_loop(pc, r)?,
                Some(OpClass::Block) => self.enter_block(pc, r)?,
                Some(OpClass::Sync) => return self.stop_at_readback(pc, r),
                _ => self.pc = pc + 1,
            }
        }
    }

    /// A `READBACK`: every AICPU stops here (the verifier keeps it out of loops, conds and
    /// dispatch blocks); the caller waits, reads back, rebinds and runs on. Out of line: the
    /// walk's loop stays as small as without it.
    #[cold]
    #[inline(never)]
    fn stop_at_readback(&mut self, pc: u32, r: Record) -> R<Status> {
        let bound = self.eval(r.op2() >> 16, pc)?;
        self.pc = pc + 1;
        self.readback = Some(crate::readback::Readback {
            pc,
            tensor: r.op1(),
            slot: (r.op2() & 0xFFFF) as u16,
            bound,
            index: self.readbacks,
        });
        self.readbacks += 1;
        Ok(Status::Readback)
    }

    pub(super) fn push(&mut self, mut f: Frame) {
        // The verifier bounds nesting to MAX_NESTING; the check keeps a malformed state from
        // indexing out of bounds.
        if self.sp + 1 < self.frames.len() {
            let parent = self.frames[self.sp];
            if f.op != Opcode::DISPATCH_FILTER as u8 {
                f.policy = parent.policy;
                f.need = parent.need;
                f.own = parent.own;
            }
            self.sp += 1;
            // What the code alone decides about a loop (`count_depends`, `has_filter`,
            // `interval_shape`) was found in an earlier run of it if its frame is still in
            // this place: a loop entered at every iteration of the one around it (Task
            // Bench's points loop) looks at its body once. (An interval the predicate's values
            // did not give, `interval = 0`, is looked for again.)
            let old = &self.frames[self.sp];
            if old.at == f.at && old.op == f.op && f.op != Opcode::HALT as u8 {
                f.depends = old.depends;
                f.filter = old.filter;
                if old.interval == 1 {
                    (f.interval, f.branch_counts) = (1, old.branch_counts);
                }
            }
            self.frames[self.sp] = f;
        }
    }

    pub(super) fn enter_loop(&mut self, pc: u32, r: Record) -> R<()> {
        // The variables of the loops around this one may have changed since its last run:
        // no record kept for an innermost loop, nor interval of a condition, stays valid.
        self.kept = 0;
        self.nconds = 0;
        self.branch = NO_BRANCH;
        let (ext, base, indices) = self.axis(r.op1(), pc)?;
        let end = r.op2();
        if ext == 0 {
            self.pc = end;
            return Ok(());
        }
        let parent = self.frames[self.sp];
        if parent.own == Own::NotMine && (parent.filter == 0 || !self.has_filter(pc + 1, end)) {
            // Not ours and no dispatch block inside: count instead of walking.
            let n = self.count_range(pc, end)?;
            self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
            self.stats.skipped += n;
            self.pc = end;
            return Ok(());
        }
        let depth = self.loops as u8;
        self.push(Frame {
            op: r.opcode,
            at: pc,
            end,
            after: end,
            depth,
            pos: 0,
            ext,
            base,
            indices,
            ..Frame::top(end, parent.policy, parent.need)
        });
        self.loops += 1;
        let parent_own = self.frames[self.sp - 1].own;
        let f = &mut self.frames[self.sp];
        f.deciding = parent_own == Own::Undecided
            && f.policy.kind != Policy::RoundRobin as u8
            && f.need == f.depth as u32 + 1;
        if self.next_iteration(0)? {
            self.pc = pc + 1;
        } else {
            self.sp -= 1;
            self.loops -= 1;
            self.pc = end;
        }
        Ok(())
    }

    pub(super) fn enter_block(&mut self, pc: u32, r: Record) -> R<()> {
        let end = r.op2();
        let mut after = end;
        if r.opcode == Opcode::COND as u8 {
            if self.eval(r.op1() as u32, pc)? == 0 {
                self.pc = end; // runs the else block (a SEQUENTIAL) if there is one
                return Ok(());
            }
            after = self.cond_end(r);
        }
        let mut f = Frame {
            op: r.opcode,
            at: pc,
            after,
            ..Frame::top(end, PolicySpec::default(), 0)
        };
        if r.opcode == Opcode::DISPATCH_FILTER as u8 {
            let policy = match Policy::from_u8(r.flags) {
                Some(Policy::StaticPartition) => PolicySpec {
                    kind: r.flags,
                    depth: r.op1() as u8,
                    key: NONE16.into(),
                },
                Some(Policy::Affinity) | Some(Policy::Hash) => PolicySpec {
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
            f.policy = policy;
            f.need = self.need(&policy);
            f.own = self.decide_scope(&policy, f.need, pc)?;
        } else if self.frames[self.sp].own == Own::NotMine && !self.has_filter(pc + 1, end) {
            let n = self.count_range(pc, after.max(end))?;
            self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
            self.stats.skipped += n;
            self.pc = after;
            return Ok(());
        }
        self.push(f);
        self.pc = pc + 1;
        Ok(())
    }

    pub(super) fn close(&mut self) -> R<()> {
        let f = self.frames[self.sp];
        if Opcode::from_u8(f.op).map(|o| o.class()) == Some(OpClass::Loop) {
            if self.next_iteration(f.pos + 1)? {
                self.pc = f.at + 1;
                return Ok(());
            }
            self.loops -= 1;
        }
        self.sp -= 1;
        self.pc = f.after;
        Ok(())
    }
}
