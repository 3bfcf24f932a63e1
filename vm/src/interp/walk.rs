//! The walk (spec/bytecode.md §5.1, §5.8): loops and blocks entered and closed, ownership
//! decided per iteration, subtrees owned elsewhere skipped, and the fast path of innermost
//! loops whose bodies are only tasks.

use super::*;

/// The first of the positions `0 .. ext` that `static` gives AICPU `me` of `n` (its block
/// runs to the next AICPU's first).
#[inline]
fn block_start(me: u64, n: u64, ext: u64) -> u64 {
    (me as u128 * ext as u128).div_ceil(n as u128) as u64
}

/// The end of AICPU `me`'s block of the positions `0 .. ext` under `static` among `n`.
#[inline]
fn block_end(me: u64, n: u64, ext: u64) -> u64 {
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
                Some(c) => c,
                None => {
                    self.bind(f.depth, from, f.ext, f.base, f.indices);
                    let c = self.count_range(start, end);
                    self.frames[self.sp].body_count = c.ok();
                    c?
                }
            };
            c.checked_mul(to - from).ok_or(RunError::TooManyTasks)
        } else {
            let mut total = 0u64;
            let mut p = from;
            let mut res = Ok(0);
            while p < to {
                self.bind(f.depth, p, f.ext, f.base, f.indices);
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
    /// the loop has no more iterations.
    pub(super) fn next_iteration(&mut self, mut p: u64) -> R<bool> {
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
                // What `close` and `next_iteration` do at the end of an owned iteration: on
                // to the next position this AICPU owns (`leaf_stride`), past the others.
                let f = self.frames[self.sp];
                let p = f.pos + f.step;
                self.skip_leaf(&f, f.step - 1)?;
                self.bind(f.depth, p, f.ext, f.base, f.indices);
                self.frames[self.sp].pos = p;
                self.stats.visits += 1;
            }
            let f = &self.frames[self.sp];
            let iter = f.leaf_iter(f.pos);
            let id = self.next_id;
            self.next_id = id.checked_add(1).ok_or(RunError::TooManyTasks)?;
            self.stats.instructions += 1;
            let next = self.refill(k, id)?;
            self.current = k as u8 + 1;
            self.templates[k % TEMPLATES].iter = iter;
            self.stats.emitted += 1;
            self.resume = (next, k as u32 + 1);
            self.pc = next;
            return Ok(Status::Paused);
        }
        self.run(&mut Pause, 1)
    }

    /// The kept record of the next site when `run` would go on in a loop whose body is only
    /// tasks (`leaf_loop` has run it): inside an iteration where `leaf_loop` paused
    /// (`leaf_rest`), or at the end of one with another to go (then `true`: the loop advances
    /// first, as `close` would advance it, to the next position this instance owns:
    /// `leaf_stride`). Only a site this instance owns
    /// (in a loop it owns, or by round robin) whose record is kept.
    #[inline]
    pub(super) fn kept_next(&self) -> Option<(usize, bool)> {
        if self.done || self.sp == 0 {
            return None;
        }
        let f = &self.frames[self.sp];
        // (Only `leaf_loop` sets `kept_loop`, to a loop's header: a frame there is that loop,
        // and `enter_loop` empties `kept` when it starts a run of it.)
        if self.kept_loop != f.at {
            return None;
        }
        let (k, advance) = if self.pc == f.end {
            (0, true)
        } else {
            (self.resume.1 as usize, false)
        };
        let at = if advance {
            f.pos.saturating_add(f.step) < f.stop
        } else {
            self.pc < f.end && self.pc != f.at + 1 && self.resume.0 == self.pc
        };
        let mine = match f.own {
            Own::Mine => true,
            Own::Undecided if f.policy.kind == Policy::RoundRobin as u8 => {
                self.next_id % self.n == self.me
            }
            _ => false,
        };
        (at && mine && k < TEMPLATES && self.kept & 1 << k != 0).then_some((k, advance))
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
                _ => self.pc = pc + 1,
            }
        }
    }

    /// The fast path for an innermost loop whose iterations run the same TASK statements
    /// (`leaf_body`) and whose owned positions are known without deciding each one
    /// (`leaf_stride`): runs its iterations without dispatching instructions one by one.
    /// Applies at the start of an iteration.
    #[inline]
    pub(super) fn leaf_loop<S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
    ) -> R<Leaf> {
        if self.sp == 0 {
            return Ok(Leaf::NotApplicable);
        }
        let f = &self.frames[self.sp];
        if Opcode::from_u8(f.op).map(|o| o.class()) != Some(OpClass::Loop) {
            return Ok(Leaf::NotApplicable);
        }
        if self.pc != f.at + 1 {
            // Inside an iteration: where this path paused (the scheduler stages one task at
            // a time), it runs the rest of the iteration.
            if self.kept_loop == f.at && self.resume.0 == self.pc && f.own != Own::NotMine {
                return self.leaf_rest(sink, budget, emitted);
            }
            return Ok(Leaf::NotApplicable);
        }
        if f.simple == UNKNOWN_SIMPLE {
            let stride = self.leaf_stride(f);
            let body = match stride {
                Some(_) => self.leaf_body(f.at + 1, f.end, f.depth)?,
                None => None,
            };
            let f = &mut self.frames[self.sp];
            (f.simple, f.leaf) = match body {
                Some((start, end, n)) => (n, (start, end)),
                None => (NOT_SIMPLE, (0, 0)),
            };
            (f.step, f.stop) = stride.unwrap_or((1, 0));
        }
        if self.frames[self.sp].simple == NOT_SIMPLE {
            return Ok(Leaf::NotApplicable);
        }
        let f = self.frames[self.sp];
        if f.own == Own::NotMine || f.simple == 0 {
            // Not ours, or none: the remaining iterations' tasks are counted, not generated.
            let n = (f.simple as u64)
                .checked_mul(f.ext - f.pos)
                .ok_or(RunError::TooManyTasks)?;
            self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
            self.stats.skipped += n;
        } else {
            // Bit `k`: `templates[k]` holds the `k`-th site's record from this run of the
            // loop (kept across pauses: only entering a loop clears it).
            let kept = if self.kept_loop == f.at { self.kept } else { 0 };
            self.kept_loop = f.at;
            let ran = if f.step == 1 && f.stop == f.ext {
                self.leaf_runs::<false, S>(sink, budget, emitted, f, kept)?
            } else {
                self.leaf_runs::<true, S>(sink, budget, emitted, f, kept)?
            };
            if !ran {
                return Ok(Leaf::Paused);
            }
        }
        self.kept = 0;
        self.sp -= 1;
        self.loops -= 1;
        self.pc = f.after;
        Ok(Leaf::Ran)
    }

    /// The iterations of the leaf loop `f` from its current one on (`kept`: the records kept
    /// so far): every position when not `STRIDED` (the common case, kept apart so its loop
    /// stays as tight as it was), else every `f.step`-th before `f.stop`, counting the tasks
    /// of the positions between. False if emission paused.
    #[inline(always)]
    fn leaf_runs<const STRIDED: bool, S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
        f: Frame,
        mut kept: u32,
    ) -> R<bool> {
        let f = &f;
        let mut pos = f.pos;
        loop {
            let mut q = f.leaf.0;
            let mut k = 0usize;
            let iter = f.leaf_iter(pos);
            while q < f.leaf.1 {
                let (next, paused) =
                    self.leaf_site(sink, budget, emitted, f, (q, k, pos, iter), &mut kept)?;
                if paused {
                    return Ok(false);
                }
                q = next;
                k += 1;
            }
            if STRIDED {
                // The next position this AICPU owns, past those it does not (their tasks
                // are counted), or the loop's end.
                let next = pos.saturating_add(f.step);
                if next >= f.stop {
                    self.skip_leaf(f, f.ext - pos - 1)?;
                    return Ok(true);
                }
                self.skip_leaf(f, next - pos - 1)?;
                pos = next;
            } else {
                pos += 1;
                if pos >= f.ext {
                    return Ok(true);
                }
            }
            self.bind(f.depth, pos, f.ext, f.base, f.indices);
            self.stats.visits += 1;
        }
    }

    /// `leaf_loop` from inside an iteration where it paused: the rest of the iteration's
    /// sites, then back to the loop's usual end-of-body step.
    #[inline(never)]
    pub(super) fn leaf_rest<S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
    ) -> R<Leaf> {
        let f = self.frames[self.sp];
        let (mut q, mut k) = (self.pc, self.resume.1 as usize);
        let mut kept = self.kept;
        let iter = f.leaf_iter(f.pos);
        while q < f.leaf.1 {
            let (next, paused) =
                self.leaf_site(sink, budget, emitted, &f, (q, k, f.pos, iter), &mut kept)?;
            if paused {
                return Ok(Leaf::Paused);
            }
            q = next;
            k += 1;
        }
        self.kept = kept;
        self.pc = f.end;
        Ok(Leaf::Rest)
    }

    /// One task site of a `leaf_loop` body, the `k`-th, at `q`, in iteration `pos` of the
    /// loop `f` (its flags `iter`): emits its task if this instance owns it, in the record
    /// kept for the site where it can. Gives the next site's index and whether emission
    /// paused (then the interpreter's state is saved to resume at the next site).
    #[inline(always)]
    pub(super) fn leaf_site<S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
        f: &Frame,
        (q, k, pos, iter): (u32, usize, u64, u8),
        kept: &mut u32,
    ) -> R<(u32, bool)> {
        let id = self.next_id;
        self.next_id = id.checked_add(1).ok_or(RunError::TooManyTasks)?;
        self.stats.instructions += 1;
        let mine = match f.own {
            Own::Mine => true,
            Own::Undecided if f.policy.kind == Policy::RoundRobin as u8 => id % self.n == self.me,
            _ => self.owner(&f.policy, q)? == self.me,
        };
        let (next, t) = if mine && k < TEMPLATES && *kept & 1 << k != 0 {
            (self.refill(k, id)?, k + 1)
        } else {
            let r = self.rec(q);
            let next = q + 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
            if !mine {
                self.stats.skipped += 1;
                return Ok((next, false));
            }
            self.fill_task(q, r, id)?;
            // A kept record's next site: past the last one, the body's end (`next_task`
            // goes on from there).
            let after = if next >= f.leaf.1 { f.end } else { next };
            if f.simple as usize <= TEMPLATES && self.keep_template(q, after, k, f.depth) {
                *kept |= 1 << k;
                (next, k + 1)
            } else {
                (next, 0)
            }
        };
        self.current = t as u8;
        let task = match t {
            0 => &mut self.task,
            t => &mut self.templates[(t - 1) % TEMPLATES],
        };
        task.iter = iter;
        self.stats.emitted += 1;
        *emitted += 1;
        if !sink.task(task) || *emitted >= budget {
            // After the last site the iteration is over: its end is the body's (past a
            // cond chain's other branches).
            let at = if next >= f.leaf.1 { f.end } else { next };
            self.kept = *kept;
            self.resume = (at, k as u32 + 1);
            self.frames[self.sp].pos = pos;
            self.pc = at;
            return Ok((next, true));
        }
        Ok((next, false))
    }

    /// Which positions of the loop `f` (at the start of an owned iteration) this AICPU owns,
    /// when the leaf path can step from one to the next without deciding each: every `step`-th
    /// position before `stop`. All of them for a loop that does not decide ownership; under
    /// `static(v)` decided at this loop, its block (positions up to `stop`); under an
    /// `affinity(v)` decided at this loop by its bare variable, every `n`-th. `None` for
    /// other deciding loops, or one with a dispatch block inside.
    fn leaf_stride(&self, f: &Frame) -> Option<(u64, u64)> {
        if !f.deciding {
            return Some((1, f.ext));
        }
        if f.filter != 0 {
            return None;
        }
        match Policy::from_u8(f.policy.kind) {
            Some(Policy::StaticPartition) if f.policy.depth == f.depth => {
                Some((1, block_end(self.me, self.n, f.ext)))
            }
            Some(Policy::Affinity) if self.keyed_by_own_variable(f) => Some((self.n, f.ext)),
            _ => None,
        }
    }

    /// Whether the loop `f` decides ownership by `affinity(v)` of its own variable `v` over
    /// positions that are its values (not a sparse axis): it owns every `n`-th position.
    pub(super) fn keyed_by_own_variable(&self, f: &Frame) -> bool {
        let key = f.policy.key.get() as u32;
        f.indices == NONE16
            && Policy::from_u8(f.policy.kind) == Some(Policy::Affinity)
            && self.expr_at(key).opcode == ExprOp::VAR as u8
            && self.expr_at(key).op1() == f.depth as u16
            && self.expr_at(key + 1).opcode == ExprOp::END as u8
    }

    /// Counts the tasks of `positions` positions of the leaf loop `f` that this AICPU does not
    /// own (each runs `f.simple` tasks).
    #[inline]
    pub(super) fn skip_leaf(&mut self, f: &Frame, positions: u64) -> R<()> {
        if positions == 0 {
            return Ok(());
        }
        let n = (f.simple as u64)
            .checked_mul(positions)
            .ok_or(RunError::TooManyTasks)?;
        self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
        self.stats.skipped += n;
        Ok(())
    }

    /// The TASK statements every iteration of the innermost loop at `depth` (body `start ..
    /// end`) runs in this run of the loop, as `(first, end, count)`: the body itself when it
    /// is only TASK statements; for a body that is one `cond` / `else cond` chain whose
    /// conditions read no variable of this loop (only runtime parameters and the variables
    /// of the loops around it, which keep their values for the whole run), the branch the
    /// chain takes, if that is only TASK statements (none if no branch is taken). `None`
    /// otherwise. Evaluates the conditions it passes, as the iteration would, in order.
    pub(super) fn leaf_body(&self, start: u32, end: u32, depth: u8) -> R<Option<(u32, u32, u32)>> {
        let (mut start, mut end) = (start, end);
        loop {
            if let Some(n) = self.tasks_only(start, end) {
                return Ok(Some((start, end, n)));
            }
            let r = self.rec(start);
            if r.opcode != Opcode::COND as u8
                || expr::loops_read(self.v.exprs(), r.op1() as u32) > depth as u32
            {
                return Ok(None);
            }
            let then_end = r.op2();
            let has_else = r.flags & COND_HAS_ELSE != 0;
            let after = if has_else {
                self.rec(then_end).op2()
            } else {
                then_end
            };
            if after != end {
                // Something follows the chain in the body.
                return Ok(None);
            }
            if self.eval(r.op1() as u32, start)? != 0 {
                return Ok(self
                    .tasks_only(start + 1, then_end)
                    .map(|n| (start + 1, then_end, n)));
            }
            if !has_else {
                return Ok(Some((end, end, 0)));
            }
            // The else block: a SEQUENTIAL whose body is the rest of the chain.
            (start, end) = (then_end + 1, after);
        }
    }

    /// The number of statements of `start .. end` if they are all TASK statements.
    fn tasks_only(&self, start: u32, end: u32) -> Option<u32> {
        let (mut q, mut n) = (start, 0u32);
        while q < end {
            let r = self.rec(q);
            if r.opcode != Opcode::TASK as u8 {
                return None;
            }
            n += 1;
            q += 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
        }
        Some(n)
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
            self.frames[self.sp] = f;
        }
    }

    pub(super) fn enter_loop(&mut self, pc: u32, r: Record) -> R<()> {
        // The variables of the loops around this one may have changed since its last run:
        // no record kept for an innermost loop stays valid.
        self.kept = 0;
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
            if r.flags & COND_HAS_ELSE != 0 {
                after = self.rec(end).op2();
            }
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
