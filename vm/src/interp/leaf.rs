//! The leaf-loop fast path (spec/bytecode.md §5.8): an innermost loop whose iterations run
//! only TASK statements — its body, or the branch a `cond` chain takes — runs them without
//! dispatching instructions one by one, stepping from one owned position to the next, and keeps
//! each site's task record from one iteration to the next (`plan::Template`).

use super::walk::block_end;
use super::*;

/// What `Interpreter::leaf_body` finds every iteration of a loop runs in a run of it.
#[derive(Clone, Copy)]
pub(super) enum LeafBody {
    /// The TASK statements `.0 .. .1`, `.2` of them.
    Tasks(u32, u32, u32),
    /// The chain `.0 .. .1`, whose first condition reads the loop's variable.
    Chain(u32, u32),
    /// Anything else: the general walk.
    Neither,
}

impl<'a, 'p> Interpreter<'a, 'p> {
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
            if f.varying {
                // The next iteration's branch is known only by evaluating its chain:
                // `varying_next`.
                return None;
            }
            (0, true)
        } else if f.varying {
            (self.kept_slot(self.pc, self.kept), false)
        } else {
            (self.resume.1 as usize, false)
        };
        let (at, mine) = if advance {
            let (next, mine) = self.next_position(f);
            (next < f.stop, mine)
        } else {
            let at = self.pc < f.end && self.pc != f.at + 1 && self.resume.0 == self.pc;
            (at, self.next_is_mine(f))
        };
        (at && mine && k < TEMPLATES && self.kept & 1 << k != 0).then_some((k, advance))
    }

    /// Whether the walk is at the end of an iteration of a varying leaf loop (`leaf_loop` runs
    /// it, its chain on its variable giving each iteration's branch) that has another
    /// position this instance owns, whose task is this instance's: `next_task` then moves
    /// there itself, as `kept_next` lets it for a loop of fixed body.
    #[inline]
    pub(super) fn varying_next(&self) -> bool {
        if self.done || self.sp == 0 {
            return false;
        }
        let f = &self.frames[self.sp];
        let (next, mine) = self.next_position(f);
        self.kept_loop == f.at && f.varying && self.pc == f.end && next < f.stop && mine
    }

    /// At the end of position `f.pos` of the leaf loop `f` (the next id is its next
    /// position's first): the next position this instance owns (`leaf_stride`, or under round
    /// robin `round_robin_next`), and whether that position's first task is this instance's.
    #[inline(always)]
    pub(super) fn next_position(&self, f: &Frame) -> (u64, bool) {
        match self.round_robin_next(f, f.pos) {
            Some(next) => next,
            None => (f.pos.saturating_add(f.step), self.next_is_mine(f)),
        }
    }

    /// Under round robin (each task is AICPU `id mod n`'s; the loop decides nothing), in a
    /// leaf loop whose every position runs the same `s` tasks (`Frame::simple`), at the end
    /// of position `pos` (the next id, `next_id`, is the first of position `pos + 1`): the
    /// next position holding an id of this instance's residue — `ahead` ids on, `ahead / s`
    /// positions past `pos + 1` — and whether that id is the position's first. The positions
    /// between run only other AICPUs' tasks: counted, not walked. `None` for other loops, and
    /// on one AICPU (every position is its own).
    #[inline(always)]
    fn round_robin_next(&self, f: &Frame, pos: u64) -> Option<(u64, bool)> {
        if !self.round_robin_strides(f) {
            return None;
        }
        let ahead = (self.me + self.n - self.next_id % self.n) % self.n;
        let s = u64::from(f.simple);
        Some((pos + 1 + ahead / s, ahead.is_multiple_of(s)))
    }

    /// Whether [`Interpreter::round_robin_next`] steps through the leaf loop `f`: round robin
    /// on more than one AICPU, the same count of tasks at every position.
    #[inline(always)]
    fn round_robin_strides(&self, f: &Frame) -> bool {
        f.own == Own::Undecided
            && f.policy.kind == Policy::RoundRobin as u8
            && self.n > 1
            && (1..VARIES).contains(&f.simple)
    }

    /// Whether the next task of the leaf loop `f` is this instance's, without deciding its
    /// site's owner: in a loop it owns, or by round robin.
    #[inline(always)]
    fn next_is_mine(&self, f: &Frame) -> bool {
        match f.own {
            Own::Mine => true,
            Own::Undecided if f.policy.kind == Policy::RoundRobin as u8 => {
                self.next_id % self.n == self.me
            }
            _ => false,
        }
    }

    /// The fast path for an innermost loop whose iterations run the same TASK statements
    /// (`leaf_body`), or the branch a chain on its variable gives each (`varying_body`), and
    /// whose owned positions are known without deciding each one (`leaf_stride`): runs its
    /// iterations without dispatching instructions one by one. Applies at the start of an
    /// iteration.
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
            let (at, end, depth) = (f.at, f.end, f.depth);
            let stride = self.leaf_stride(f);
            let body = match stride {
                Some(_) => self.leaf_body(at + 1, end, depth)?,
                None => LeafBody::Neither,
            };
            let leaf = match body {
                LeafBody::Tasks(start, end, n) => (n, (start, end), false),
                LeafBody::Chain(start, end) => match self.varying_body_kept(start, end) {
                    Some(n) => (n, (start, end), true),
                    None => (NOT_SIMPLE, (0, 0), false),
                },
                LeafBody::Neither => (NOT_SIMPLE, (0, 0), false),
            };
            let f = &mut self.frames[self.sp];
            (f.simple, f.leaf, f.varying) = leaf;
            (f.step, f.stop) = stride.unwrap_or((1, 0));
        }
        let f = self.frames[self.sp];
        if f.simple == NOT_SIMPLE || (f.simple == VARIES && f.own == Own::NotMine) {
            return Ok(Leaf::NotApplicable);
        }
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
            let ran = if f.varying {
                self.leaf_runs::<true, true, S>(sink, budget, emitted, &f, kept)?
            } else if f.step == 1 && f.stop == f.ext && !self.round_robin_strides(&f) {
                self.leaf_runs::<false, false, S>(sink, budget, emitted, &f, kept)?
            } else {
                self.leaf_runs::<true, false, S>(sink, budget, emitted, &f, kept)?
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
    /// stays as tight as it was), else every `f.step`-th before `f.stop` (under round robin
    /// the next holding an id of this instance's: `round_robin_next`), counting the tasks
    /// of the positions between; `VARYING` (`f.varying`, always `STRIDED`: a step of 1 is
    /// one) evaluates the body's chain at each for its branch. False if emission paused.
    #[inline(always)]
    fn leaf_runs<const STRIDED: bool, const VARYING: bool, S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
        f: &Frame,
        mut kept: u32,
    ) -> R<bool> {
        let mut pos = f.pos;
        loop {
            let (mut q, branch_end) = if VARYING {
                self.leaf_branch(f.leaf.0, f.leaf.1)?
            } else {
                f.leaf
            };
            let mut k = 0usize;
            let iter = if VARYING { 0 } else { f.leaf_iter(pos) };
            while q < branch_end {
                if VARYING {
                    k = self.kept_slot(q, kept);
                }
                let site = (q, k, pos, iter, branch_end);
                let (next, paused) = self.leaf_site(sink, budget, emitted, f, site, &mut kept)?;
                if paused {
                    return Ok(false);
                }
                q = next;
                k += 1;
            }
            if STRIDED {
                // The next position this AICPU owns, past those it does not (their tasks
                // are counted), or the loop's end.
                let next = match self.round_robin_next(f, pos) {
                    Some((next, _)) => next,
                    None => pos.saturating_add(f.step),
                };
                if next >= f.stop {
                    self.skip_leaf(pos + 1, f.ext)?;
                    return Ok(true);
                }
                self.skip_leaf(pos + 1, next)?;
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
        let iter = if f.varying { 0 } else { f.leaf_iter(f.pos) };
        let branch_end = if f.varying { f.branch_end } else { f.leaf.1 };
        while q < branch_end {
            if f.varying {
                k = self.kept_slot(q, kept);
            }
            let site = (q, k, f.pos, iter, branch_end);
            let (next, paused) = self.leaf_site(sink, budget, emitted, &f, site, &mut kept)?;
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
    /// loop `f` (its flags `iter`), in the branch of the body that ends at `branch_end`: emits
    /// its task if this instance owns it, in the record kept for the site where it can (`k`:
    /// the record's slot; in a varying loop, `kept_slot`'s). Gives the next site's index and
    /// whether emission paused (then the interpreter's state is saved to resume at the next
    /// site).
    #[inline(always)]
    pub(super) fn leaf_site<S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
        f: &Frame,
        (q, k, pos, iter, branch_end): (u32, usize, u64, u8, u32),
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
            let after = if next >= branch_end { f.end } else { next };
            if (f.varying || f.simple as usize <= TEMPLATES)
                && self.keep_template(q, after, k, f.depth)
            {
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
            let at = if next >= branch_end { f.end } else { next };
            self.kept = *kept;
            self.resume = (at, k as u32 + 1);
            self.frames[self.sp].pos = pos;
            self.frames[self.sp].branch_end = branch_end;
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

    /// Counts the tasks of positions `from .. to` of the leaf loop in frame `sp`, which this
    /// AICPU does not own: each runs `simple` tasks, or, in a varying loop whose branches
    /// differ (`VARIES`), what `count_varying` finds.
    #[inline]
    pub(super) fn skip_leaf(&mut self, from: u64, to: u64) -> R<()> {
        if from >= to {
            return Ok(());
        }
        let simple = self.frames[self.sp].simple;
        let n = if simple == VARIES {
            self.count_varying(from, to)?
        } else {
            (simple as u64)
                .checked_mul(to - from)
                .ok_or(RunError::TooManyTasks)?
        };
        self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
        self.stats.skipped += n;
        Ok(())
    }

    /// What every iteration of the innermost loop at `depth` (body `start .. end`) runs in
    /// this run of the loop: the body itself when it is only TASK statements; for a body that
    /// is one `cond` / `else cond` chain, the conditions that read no variable of this loop
    /// (only runtime parameters and the variables of the loops around it, which keep their
    /// values for the whole run) are decided here, and the block they lead to is either TASK
    /// statements only (`Tasks`; none if no branch is taken) or a chain whose first
    /// condition reads the loop's variable (`Chain`: `varying_body` looks at it). Evaluates
    /// the conditions it passes, as the iteration would, in order.
    pub(super) fn leaf_body(&self, start: u32, end: u32, depth: u8) -> R<LeafBody> {
        let (mut start, mut end) = (start, end);
        loop {
            if let Some(n) = self.tasks_only(start, end) {
                return Ok(LeafBody::Tasks(start, end, n));
            }
            let r = self.rec(start);
            if r.opcode != Opcode::COND as u8 {
                return Ok(LeafBody::Neither);
            }
            if expr::loops_read(self.v.exprs(), r.op1() as u32) > depth as u32 {
                return Ok(LeafBody::Chain(start, end));
            }
            let (then_end, after) = (r.op2(), self.cond_end(r));
            if after != end {
                // Something follows the chain in the body.
                return Ok(LeafBody::Neither);
            }
            if self.eval(r.op1() as u32, start)? != 0 {
                // The then block: TASK statements, or a chain inside (fft's guard).
                (start, end) = (start + 1, then_end);
                continue;
            }
            if r.flags & COND_HAS_ELSE == 0 {
                return Ok(LeafBody::Tasks(end, end, 0));
            }
            // The else block: a SEQUENTIAL whose body is the rest of the chain.
            (start, end) = (then_end + 1, after);
        }
    }

    /// [`Interpreter::varying_body`] of `start .. end`, kept from the last time it was looked
    /// at (it reads the code alone): a loop entered at every iteration of the one around it
    /// looks at its chain once.
    fn varying_body_kept(&mut self, start: u32, end: u32) -> Option<u32> {
        let (s, e, found) = self.varying_kept;
        if (s, e) == (start, end) {
            return found;
        }
        let found = self.varying_body(start, end);
        self.varying_kept = (start, end, found);
        found
    }

    /// A leaf body (`start .. end`, the innermost loop's, or the block `leaf_body` decided it
    /// runs) that is a `cond` chain whose conditions may read the loop's variable, each
    /// branch of TASK statements only or one such chain (Task Bench's `cond i == 0 { … }
    /// else cond i == W - 1 { … } else { … }`): each iteration evaluates the chain for its
    /// branch (`leaf_branch`).
    /// Gives the number of tasks every branch holds (`fixed_count`; the path counts the
    /// positions it steps over by it), or `VARIES` when they differ (`count_varying` counts
    /// them). `None` for any other body, or one of no tasks at all.
    pub(super) fn varying_body(&self, start: u32, end: u32) -> Option<u32> {
        // Every block is TASK statements only, or one COND that fills it.
        let mut blocks = [(0u32, 0u32); 2 * (limits::MAX_NESTING + 1)];
        let mut n = 1usize;
        blocks[0] = (start, end);
        while n > 0 {
            n -= 1;
            let (start, end) = blocks[n];
            if self.tasks_only(start, end).is_some() {
                continue;
            }
            let r = self.rec(start);
            if r.opcode != Opcode::COND as u8 || n + 2 > blocks.len() {
                return None;
            }
            let then_end = r.op2();
            if self.cond_end(r) != end {
                return None;
            }
            if r.flags & COND_HAS_ELSE != 0 {
                blocks[n] = (then_end + 1, end);
                n += 1;
            }
            blocks[n] = (start + 1, then_end);
            n += 1;
        }
        match self.fixed_count(start, end) {
            Some(0) => None,
            Some(c) => u32::try_from(c).ok().filter(|&c| c < VARIES),
            None => Some(VARIES),
        }
    }

    /// The tasks of positions `from .. to` of the varying leaf loop in frame `sp` whose
    /// branches hold different counts: from the bounds of its guard when it is one COND on an
    /// interval of the variable (`count_by_interval`: tree's `cond i < pow2[t]`), else by
    /// evaluating the chain at each position, as counting the subtree would
    /// (`Stats::count_visits`).
    #[inline(never)]
    fn count_varying(&mut self, from: u64, to: u64) -> R<u64> {
        if let Some(n) = self.count_by_interval(from, to)? {
            return Ok(n);
        }
        let f = self.frames[self.sp];
        let mut n = 0u64;
        for p in from..to {
            self.bind(f.depth, p, f.ext, f.base, f.indices);
            self.stats.count_visits += 1;
            let (start, end) = self.leaf_branch(f.leaf.0, f.leaf.1)?;
            // (A branch of TASK statements only: `varying_body` checked every block.)
            let c = self.tasks_only(start, end).unwrap_or(0);
            n = n.checked_add(c as u64).ok_or(RunError::TooManyTasks)?;
        }
        Ok(n)
    }

    /// The branch of the varying leaf body `start .. end` (`varying_body`) the current
    /// iteration runs, as the walk would find it: its conditions decided in order, each where
    /// its COND stands (so an error is the walk's). Empty when no branch is taken. The first
    /// time in a run of the loop a predicate is looked at as an interval of the loop's values
    /// (`cond_interval`: `i == 0`, `i + d < W`), and every later iteration compares the
    /// variable with it; a predicate of another form is evaluated at every iteration. The
    /// interval's bounds are evaluated where the walk would first evaluate the predicate, and
    /// no operation on the variable can fail, so an error is the walk's. The branch found
    /// last holds for an interval of the loop's values when every condition on its way is
    /// decided by an interval (then none can fail): while the variable stays in it, that
    /// branch is the answer (`branch`: chain's `cond t == 0 { … } else { … }` decides its
    /// conditions once, at `t = 1`).
    #[inline]
    pub(super) fn leaf_branch(&mut self, start: u32, end: u32) -> R<(u32, u32)> {
        let v = self.vars[self.frames[self.sp].depth as usize % limits::MAX_LOOP_DEPTH];
        let b = &self.branch;
        if (b.start, b.end) == (start, end) && b.lo <= v && v < b.hi {
            return Ok(b.found);
        }
        self.find_leaf_branch(start, end, v)
    }

    /// [`Interpreter::leaf_branch`] by deciding the conditions, keeping the branch and the
    /// values it holds for when every condition on its way is an interval.
    #[inline(never)]
    fn find_leaf_branch(&mut self, start: u32, end: u32, v: i64) -> R<(u32, u32)> {
        let (chain_start, chain_end) = (start, end);
        let (mut start, mut end) = (start, end);
        // The values the branch holds for (`None` once a condition is no interval).
        let mut holds_for = Some((i64::MIN, i64::MAX));
        let found = loop {
            let r = self.rec(start);
            if start >= end || r.opcode != Opcode::COND as u8 {
                break (start, end);
            }
            let then_end = r.op2();
            let holds = match self.cond_interval(start, r.op1() as u32)? {
                Some((lo, hi)) => {
                    let holds = lo <= v && v < hi;
                    // Where the condition decides the same as at `v`.
                    let same = match (holds, v < lo) {
                        (true, _) => (lo, hi),
                        (false, true) => (i64::MIN, lo),
                        (false, false) => (hi, i64::MAX),
                    };
                    holds_for = holds_for.map(|(a, b)| (a.max(same.0), b.min(same.1)));
                    holds
                }
                None => {
                    holds_for = None;
                    self.eval(r.op1() as u32, start)? != 0
                }
            };
            if holds {
                (start, end) = (start + 1, then_end);
            } else if r.flags & COND_HAS_ELSE != 0 {
                // The else block: a SEQUENTIAL whose body is the rest of the chain.
                (start, end) = (then_end + 1, self.rec(then_end).op2());
            } else {
                break (end, end);
            }
        };
        if let Some((lo, hi)) = holds_for {
            self.branch = Branch {
                start: chain_start,
                end: chain_end,
                lo,
                hi,
                found,
            };
        }
        Ok(found)
    }

    /// The values of the variable of the loop in frame `sp` (not a sparse axis's: `None`
    /// there) on which the predicate `pred` of the COND at `pc` in its body holds, as
    /// `eval_interval` gives them (`None` for a predicate of another form). Found once per
    /// run of the loop and kept (`conds`, emptied when a loop is entered): the predicate reads
    /// only runtime parameters and the variables of the loops around, which keep their values
    /// for the run. `leaf_branch` and the counting of the positions this AICPU does not own
    /// (`count_by_interval`) share it.
    #[inline(always)]
    pub(super) fn cond_interval(&mut self, pc: u32, pred: u32) -> R<Option<(i64, i64)>> {
        let n = self.nconds as usize % (COND_MEMO + 1);
        match self.conds[..n].iter().find(|c| c.0 == pc) {
            Some(&(_, lo, hi)) => Ok((lo <= hi).then_some((lo, hi))),
            None => self.find_cond_interval(pc, pred),
        }
    }

    /// [`Interpreter::cond_interval`] the first time in a run: evaluates and keeps it.
    #[inline(never)]
    fn find_cond_interval(&mut self, pc: u32, pred: u32) -> R<Option<(i64, i64)>> {
        let n = self.nconds as usize % (COND_MEMO + 1);
        let f = &self.frames[self.sp];
        let holds = if f.indices != NONE16 {
            None
        } else {
            let at = (pred, f.depth as u16, f.ext);
            eval_interval(self.v.exprs(), &self.p, &self.vars, at, pc)?
        };
        // (The loop's values are below i64::MAX: an interval up to it is unbounded.)
        let clamp = |x: i128| x.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        let holds = holds.map(|(lo, hi)| (clamp(lo), clamp(hi).max(clamp(lo))));
        if n < COND_MEMO {
            self.conds[n] = match holds {
                Some((lo, hi)) => (pc, lo, hi),
                None => (pc, 1, 0),
            };
            self.nconds += 1;
        }
        Ok(holds)
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
}
