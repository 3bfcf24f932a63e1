//! Handing ready tasks to free cores (spec/runtime.md §4.3 step 2) under the program's `timing`
//! (spec/pto.md §4.2, [`IssueTiming`]). `immediate` and `rate_limit` pop the AICPU's ready
//! queues (`rate_limit` after taking a turn of the launch's token bucket, [`Shared::next_issue`]); `batched` and `interleaved` first take the ready tasks into the AICPU's private
//! `held` buffer (oldest first) and choose there — a held task is no longer in a queue, so other
//! AICPUs cannot steal it. An idle core may take another AICPU's ready task (work stealing)
//! when its own AICPU has none to issue.

use super::*;

/// The order in which AICPU `me` of `n` tries the others' deques, from the one that `draw`
/// (a SplitMix64 state, advanced by the caller at each steal) picks at random, cyclically.
fn victims(me: u32, n: u32, draw: u64) -> impl Iterator<Item = u32> {
    let others = n.saturating_sub(1).max(1);
    let first = (crate::interp::mix64(draw) % u64::from(others)) as u32;
    (0..n.saturating_sub(1)).map(move |k| (me + 1 + (first + k) % others) % n)
}

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// Issues what the timing allows to the free cores; returns whether it did anything.
    pub(super) fn issue<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        if self.plain(cfg) {
            return self.issue_plain(sh, env);
        }
        if self.nothing_ready(sh, cfg) {
            // The walk over the pools below would only stop waiting for cores (and put back in
            // its hand a core it took from there): what follows the walk is all it does.
            for pl in 0..2 {
                self.stop_waiting(sh, pl);
            }
            self.give_back_hand(sh, env);
            // As `publish_idle` finds it: nothing ready, held or parked.
            for pl in 0..2 {
                self.set_idle(sh, env, pl, self.lends(pl));
            }
            return Ok(false);
        }
        let mut progress = false;
        if cfg.timing.holds() {
            for pl in 0..2 {
                while let Some(slot) = self.pop_own(sh, cfg, pl) {
                    self.held.push(slot)?;
                    progress = true;
                }
            }
        }
        let rate = matches!(cfg.timing, IssueTiming::RateLimit(_));
        let mut rate_waited = false;
        'pools: for pl in 0..2 {
            loop {
                if cfg.pipeline_depth != 0 && self.running[pl] >= cfg.pipeline_depth {
                    self.stop_waiting(sh, pl);
                    break;
                }
                // Its next task waits for its kernel's core limit: no core for it yet.
                if self.at_limit(sh, pl) {
                    self.stop_waiting(sh, pl);
                    break;
                }
                // A core first. Under shared cores one of its hand costs nothing (and goes back
                // to it if no task comes); one of the bitmap it claims only with a task to give
                // it (claiming and returning cores for nothing would cost every AICPU), and an
                // AICPU with a task and no core announces that it waits for one (§4.6).
                let shared = self.alloc == CoreAlloc::Shared;
                let in_hand = if shared {
                    self.take_from_hand(sh, pl)
                } else {
                    None
                };
                if in_hand.is_none() && shared && !self.ready_for(sh, cfg, pl) {
                    self.stop_waiting(sh, pl);
                    break;
                }
                let Some(core) = in_hand.or_else(|| self.claim_core(sh, pl)) else {
                    if shared && self.wait_for_core(sh, pl) {
                        continue; // one came back meanwhile
                    }
                    break;
                };
                // `rate_limit`: a turn of the launch's bucket first, taken only when a task is
                // there to use it.
                let turn = if rate {
                    if !self.ready_for(sh, cfg, pl) {
                        self.unused_core(sh, env, core, pl);
                        break;
                    }
                    let now = env.now_ns();
                    match take_turn(sh, cfg.timing, now) {
                        Ok(prev) => {
                            if let Some(since) = self.rate_wait_since.take() {
                                self.counts.rate_wait_ns += now.saturating_sub(since);
                            }
                            Some((now, prev))
                        }
                        Err(due) => {
                            rate_waited = true;
                            self.rate_wait_since.get_or_insert(now);
                            self.rate_due_ns = due;
                            self.unused_core(sh, env, core, pl);
                            break 'pools;
                        }
                    }
                } else {
                    None
                };
                // A task that waits for workspace goes first: the pool's issue stalls behind it.
                let parked = self.parked[pl].take();
                let found = match parked {
                    Some(p) => Some(p),
                    None => match self.pick_own(sh, cfg, pl) {
                        Some(slot) => Some((self.me, slot)),
                        None if cfg.work_steal => self.steal(sh, pl),
                        None => None,
                    },
                };
                // Its scratch, first fit in the arena; none free: it waits, parked.
                let ws = match found {
                    Some(_) if self.kernel_ws.is_empty() => Some((0, 0)),
                    Some((owner, slot)) => {
                        let s = &sh.slots[owner as usize * sh.cap as usize + slot as usize];
                        let bytes = self.workspace_of(s.kernel.load(Ordering::Relaxed));
                        if bytes == 0 {
                            Some((0, 0))
                        } else {
                            self.first_fit(bytes).map(|at| (at, bytes))
                        }
                    }
                    None => None,
                };
                let found = match (found, ws) {
                    (Some(task), None) => {
                        if parked.is_none() || self.limit_parked[pl] {
                            self.counts.workspace_waits += 1;
                        }
                        self.parked[pl] = Some(task);
                        self.limit_parked[pl] = false;
                        self.stop_waiting_limit(sh);
                        None
                    }
                    // Its kernel's core limit (`limits.rs`): as many of its tasks running as
                    // it allows, it waits parked too.
                    (Some(task), Some(_)) if !self.take_limit(sh, task, pl) => {
                        self.parked[pl] = Some(task);
                        None
                    }
                    (found, _) => found,
                };
                let Some((owner, slot)) = found else {
                    self.unused_core(sh, env, core, pl);
                    // Another AICPU stole the task the turn was for: the turn goes back unless
                    // some AICPU has taken one since.
                    if let Some((now, prev)) = turn {
                        let taken = cfg.timing.next_turn(prev, now);
                        let _ = sh.next_issue.0.compare_exchange(
                            taken,
                            prev,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                    break;
                };
                let (ws_start, ws_len) = ws.unwrap_or((0, 0));
                let batch = if owner == self.me && matches!(cfg.timing, IssueTiming::Batched(_)) {
                    self.counts.issue_batches
                } else {
                    0
                };
                let at_ns = turn.map(|(now, _)| now);
                self.hand_out(
                    sh,
                    env,
                    (core, pl),
                    (owner, slot),
                    (ws_start, ws_len),
                    (batch, at_ns),
                )?;
                progress = true;
            }
        }
        // Before it publishes itself idle: the cores an idle AICPU lends are in the bitmap.
        self.give_back_hand(sh, env);
        for pl in 0..2 {
            self.publish_idle(sh, env, pl);
        }
        if rate_waited {
            self.counts.rate_waits += 1;
        } else if let Some(since) = self.rate_wait_since.take() {
            // Nothing left to wait for (its ready tasks were stolen): no longer waiting, or
            // `has_work` would stay false and `issue_at` in the past.
            self.counts.rate_wait_ns += env.now_ns().saturating_sub(since);
        }
        Ok(progress)
    }

    /// Whether the launch issues the plain way ([`Self::issue_plain`]): shared cores,
    /// `immediate` timing, no stealing, no pipeline depth, no kernel with scratch or a core
    /// limit. No task is ever held or parked then.
    #[inline(always)]
    fn plain(&self, cfg: &Config) -> bool {
        self.alloc == CoreAlloc::Shared
            && cfg.timing == IssueTiming::Immediate
            && !cfg.work_steal
            && cfg.pipeline_depth == 0
            && self.kernel_ws.is_empty()
            && self.kernel_limits.is_empty()
    }

    /// [`Self::issue`] under the plain settings ([`Self::plain`]), what the general walk does
    /// there without asking at each task about what those settings rule out: in each pool,
    /// while its ready queue has a task, a core (from its hand, else the bitmap; none: it
    /// waits for one), the task (which only it pops), the hand-out. One hop of a chain
    /// within one AICPU is an issue of one task: the walk's questions were a third of it.
    fn issue_plain<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        let mut progress = false;
        for pl in 0..2 {
            let q = self.me as usize * 2 + pl;
            loop {
                // Nothing ready: no core for it (one in its hand stays there).
                if sh.ready[q].is_empty() {
                    self.stop_waiting(sh, pl);
                    break;
                }
                let Some(core) = self
                    .take_from_hand(sh, pl)
                    .or_else(|| self.claim_core(sh, pl))
                else {
                    if self.wait_for_core(sh, pl) {
                        continue; // one came back meanwhile
                    }
                    break;
                };
                // Its own queue, which only it pops: the task it saw is still there.
                let Some(slot) = sh.ready[q].pop() else {
                    self.unused_core(sh, env, core, pl);
                    break;
                };
                self.hand_out(sh, env, (core, pl), (self.me, slot), (0, 0), (0, None))?;
                progress = true;
            }
        }
        // Before it publishes itself idle: the cores an idle AICPU lends are in the bitmap.
        self.give_back_hand(sh, env);
        for pl in 0..2 {
            // As `publish_idle` finds it: nothing held or parked.
            let idle = self.lends(pl) && sh.ready[self.me as usize * 2 + pl].is_empty();
            self.set_idle(sh, env, pl, idle);
        }
        Ok(progress)
    }

    /// Hands task `slot` of AICPU `owner` to core `core` of pool `pl`, which it took for it:
    /// with scratch `ws` (offset in its arena, bytes; 0 bytes: none), and, for the report, its
    /// `batch` and the clock reading its `rate_limit` turn was taken at.
    #[inline(always)]
    fn hand_out<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
        (core, pl): (u32, usize),
        (owner, slot): (u32, u32),
        (ws_start, ws_len): (u32, u32),
        (batch, at_ns): (u64, Option<u64>),
    ) -> Result<(), SchedError> {
        self.running[pl] += 1;
        self.count_home(core, pl, true);
        if owner != self.me {
            self.counts.stolen += 1;
        }
        let workspace = match ws_len {
            0 => (0, 0),
            _ => (self.me * self.arena + ws_start, ws_len),
        };
        if ws_len > 0 {
            self.arena_used += ws_len;
            self.counts.workspace_peak = self.counts.workspace_peak.max(u64::from(self.arena_used));
            if sh.desc_words > 0 {
                let offset = workspace.0;
                let addr = match sh.workspace.base {
                    0 => 0,
                    base => base + u64::from(offset),
                };
                desc::set_workspace(sh.desc(owner, slot), offset, ws_len, addr);
            }
        }
        // Read before the core may start: the slot stays the task's until it completes.
        let issued = env.watches_issues().then(|| {
            let s = &sh.slots[owner as usize * sh.cap as usize + slot as usize];
            Issued {
                aicpu: self.me,
                owner,
                core,
                task: s.task.load(Ordering::Relaxed),
                kernel: s.kernel.load(Ordering::Relaxed),
                stream: s.stream.load(Ordering::Relaxed),
                batch,
                at_ns,
                workspace,
            }
        });
        sh.cores[core as usize]
            .assign((owner as u64) << 32 | slot as u64)
            .map_err(|_| SchedError::Corrupted("a core was handed two tasks"))?;
        self.busy.push(Busy {
            core,
            owner,
            slot,
            ws_start,
            ws_len,
        })?;
        if let Some(issued) = &issued {
            env.issued(issued);
        }
        env.ring(core);
        Ok(())
    }

    /// A core it took and found no task for goes back: under shared cores to its hand (to the
    /// bitmap at the end of the issue; with a full hand now, waking the AICPUs waiting for one).
    fn unused_core<C, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
        core: u32,
        pl: usize,
    ) {
        if self.alloc == CoreAlloc::Partition || !self.keep_in_hand(core, pl) {
            self.core_back(sh, core, pl);
            self.wake_core_waiters(sh, env, 1 << pl);
        }
    }

    /// Bytes of scratch a task of kernel `kernel` gets.
    fn workspace_of(&self, kernel: u32) -> u32 {
        self.kernel_ws.get(kernel as usize).map_or(0, |k| {
            u32::from(k.workspace.get()) * crate::format::WORKSPACE_UNIT
        })
    }

    /// Whether no task is there for [`Self::issue`] to hand out, told before walking the pools
    /// (whose set-up costs a waiting AICPU's round more than the rest of it): shared cores,
    /// `immediate` timing, no stealing, no task parked, none in its ready queues. Under other
    /// settings the walk decides.
    #[inline(always)]
    fn nothing_ready<C: AsRef<[Cell]>, L>(&self, sh: &Shared<'_, C, L>, cfg: &Config) -> bool {
        // Its ready queues first: where a task is ready (a successor it just released), they
        // say so soonest. Without stealing they are all `own_ready_empty` reads.
        let q = self.me as usize * 2;
        sh.ready
            .get(q..q + 2)
            .is_some_and(|queues| queues.iter().all(|r| r.is_empty()))
            && !cfg.work_steal
            && self.alloc == CoreAlloc::Shared
            && cfg.timing == IssueTiming::Immediate
            && self.rate_wait_since.is_none()
            && self.parked.iter().all(Option::is_none)
    }

    /// The first offset in its arena where `bytes` bytes overlap no running task's scratch
    /// (first fit), if any. Running tasks are its busy cores' (at most one per core): each
    /// restart moves past one of their scratches, so this takes at most `busy²` steps.
    fn first_fit(&self, bytes: u32) -> Option<u32> {
        let mut at = 0u32;
        'scan: loop {
            if at.checked_add(bytes)? > self.arena {
                return None;
            }
            for b in self.busy.as_slice() {
                if b.ws_len > 0 && b.ws_start < at + bytes && at < b.ws_start + b.ws_len {
                    at = b.ws_start + b.ws_len;
                    continue 'scan;
                }
            }
            return Some(at);
        }
    }

    /// The next of its own ready tasks of pool `pl` the timing lets it issue, taken out.
    fn pick_own<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        pl: usize,
    ) -> Option<u32> {
        let me = self.me as usize;
        let pool_of = |slot: u32| {
            sh.slots[me * sh.cap as usize + slot as usize]
                .pool
                .load(Ordering::Relaxed) as usize
        };
        match cfg.timing {
            IssueTiming::Immediate | IssueTiming::RateLimit(_) => self.pop_own(sh, cfg, pl),
            IssueTiming::Batched(n) => {
                if self.batch_left == 0 {
                    let held = self.held.len;
                    // A smaller batch only when nothing it runs can complete and add to it.
                    let short = held < n as usize;
                    if held > 0 && (!short || self.busy.is_empty()) {
                        self.batch_left = held;
                        self.counts.issue_batches += 1;
                        self.counts.short_batches += u64::from(short);
                    }
                }
                let i = (0..self.batch_left).find(|&i| pool_of(self.held.buf[i]) == pl)?;
                self.batch_left -= 1;
                Some(self.held.remove(i))
            }
            IssueTiming::Interleaved(streams) => {
                let streams = streams.max(1);
                let stream_of = |slot: u32| {
                    sh.slots[me * sh.cap as usize + slot as usize]
                        .stream
                        .load(Ordering::Relaxed)
                };
                // The held task of pool `pl` whose stream comes first from `next_stream` on.
                let mut best: Option<(usize, u64)> = None;
                let mut oldest = None;
                for (i, &slot) in self.held.as_slice().iter().enumerate() {
                    if pool_of(slot) != pl {
                        continue;
                    }
                    oldest.get_or_insert(i);
                    // `next_stream < streams`; a stream is below `streams` when the verifier
                    // holds `interleaved(n)` to the stream count, and taken modulo it anyway.
                    let (s, n) = (stream_of(slot) as u64 % streams as u64, streams as u64);
                    let turn = (s + n - self.next_stream as u64) % n;
                    if best.is_none_or(|(_, t)| turn < t) {
                        best = Some((i, turn));
                    }
                }
                let (i, _) = best?;
                if oldest != Some(i) {
                    self.counts.reordered += 1;
                }
                let slot = self.held.remove(i);
                self.next_stream = ((stream_of(slot) % streams) as u64 + 1) as u32 % streams;
                Some(slot)
            }
        }
    }

    /// Whether a task of pool `pl` is ready for this AICPU to issue (its own, held or queued;
    /// another AICPU's under work stealing), as far as the timing's choice goes: a `batched`
    /// AICPU's held tasks count once a batch is open or could open.
    pub(super) fn ready_for<C: AsRef<[Cell]>, L>(
        &self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        pl: usize,
    ) -> bool {
        if self.parked[pl].is_some() {
            return true;
        }
        let me = self.me as usize;
        let pool_of = |slot: &u32| {
            sh.slots[me * sh.cap as usize + *slot as usize]
                .pool
                .load(Ordering::Relaxed) as usize
        };
        let held = match cfg.timing {
            IssueTiming::Batched(n) => {
                let open = if self.batch_left > 0 {
                    self.batch_left
                } else if self.held.len >= n as usize || self.busy.is_empty() {
                    self.held.len
                } else {
                    0
                };
                self.held.buf[..open].iter().any(|s| pool_of(s) == pl)
            }
            IssueTiming::Interleaved(_) => self.held.as_slice().iter().any(|s| pool_of(s) == pl),
            _ => false,
        };
        held || !self.own_ready_empty(sh, pl)
            || (cfg.work_steal
                && (0..sh.n as usize)
                    .any(|v| sh.stealable.get(v * 2 + pl).is_some_and(|d| !d.is_empty())))
    }

    /// Whether it has no ready task of pool `pl` queued: its ready queue (under stealing, its
    /// inbox) and, under stealing, its deque are empty.
    pub(super) fn own_ready_empty<C: AsRef<[Cell]>, L>(
        &self,
        sh: &Shared<'_, C, L>,
        pl: usize,
    ) -> bool {
        let q = self.me as usize * 2 + pl;
        sh.ready[q].is_empty() && sh.stealable.get(q).is_none_or(|d| d.is_empty())
    }

    /// How many of its own tasks of pool `pl` look ready in its queues (a hint): its ready
    /// queue (under stealing, its inbox and its deque).
    pub(super) fn own_ready_len<C: AsRef<[Cell]>, L>(
        &self,
        sh: &Shared<'_, C, L>,
        pl: usize,
    ) -> usize {
        let q = self.me as usize * 2 + pl;
        sh.ready[q].len() + sh.stealable.get(q).map_or(0, |d| d.len())
    }

    /// Its next ready task of pool `pl`: from its ready queue, or under stealing from the bottom
    /// of its deque (the newest).
    fn pop_own<C: AsRef<[Cell]>, L>(
        &self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        pl: usize,
    ) -> Option<u32> {
        let q = self.me as usize * 2 + pl;
        if cfg.work_steal {
            sh.stealable[q].pop()
        } else {
            sh.ready[q].pop()
        }
    }

    /// Under stealing: moves the tasks other AICPUs released to it (its inboxes) onto its
    /// deques, where it pops them and the others may steal them. The launch must have the
    /// deques exactly when it steals.
    pub(super) fn drain_inbox<C: AsRef<[Cell]>, L>(
        &self,
        sh: &Shared<'_, C, L>,
    ) -> Result<(), SchedError> {
        let n = sh.n as usize;
        if sh.stealable.len() < 2 * n {
            return Err(SchedError::Memory(
                "stealable deques (a launch under work_steal needs them)",
            ));
        }
        for pl in 0..2 {
            let q = self.me as usize * 2 + pl;
            while let Some(slot) = sh.ready[q].pop() {
                sh.stealable[q]
                    .push(slot)
                    .map_err(|_| SchedError::Corrupted("a stealable deque filled"))?;
            }
        }
        Ok(())
    }

    /// Under stealing: a ready task of pool `pl` taken from the top of another AICPU's deque
    /// (the oldest), trying the others from a random one on (seed 003 §3: random victims
    /// spread the thieves over the busy AICPUs instead of all trying the same one first).
    fn steal<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        pl: usize,
    ) -> Option<(u32, u32)> {
        if sh.n < 2 {
            return None;
        }
        self.victim_rng = self.victim_rng.wrapping_add(crate::interp::GOLDEN_GAMMA);
        victims(self.me, sh.n, self.victim_rng).find_map(|v| {
            sh.stealable
                .get(v as usize * 2 + pl)
                .and_then(|d| d.steal())
                .map(|s| (v, s))
        })
    }

    /// Under `rate_limit` timing, when a ready task waits for the rate: the clock reading
    /// ([`Env::now_ns`]) from which it may go. A caller that sleeps while [`Aicpu::has_work`]
    /// says nothing should wake by then.
    pub fn issue_at(&self) -> Option<u64> {
        self.rate_wait_since.map(|_| self.rate_due_ns)
    }
}

/// Takes a turn of the launch's `rate_limit` bucket at clock reading `now`: the turn's previous
/// value of [`Shared::next_issue`], or when the next turn is due if it is not yet.
fn take_turn<C: AsRef<[Cell]>, L>(
    sh: &Shared<'_, C, L>,
    timing: IssueTiming,
    now: u64,
) -> Result<u64, u64> {
    // Relaxed: the word publishes nothing but itself.
    let mut cur = sh.next_issue.0.load(Ordering::Relaxed);
    loop {
        if now < cur {
            return Err(cur);
        }
        let next = timing.next_turn(cur, now);
        match sh
            .next_issue
            .0
            .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return Ok(cur),
            Err(seen) => cur = seen,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::victims;

    #[test]
    fn victims_are_every_other_aicpu_once_from_a_uniform_first() {
        let (me, n) = (2u32, 6u32);
        let mut first = [0u32; 6];
        let mut draw = 0u64;
        for _ in 0..6_000 {
            draw = draw.wrapping_add(crate::interp::GOLDEN_GAMMA);
            let mut order: [u32; 5] = [0; 5];
            for (i, v) in victims(me, n, draw).enumerate() {
                order[i] = v;
            }
            first[order[0] as usize] += 1;
            let mut sorted = order;
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                [0, 1, 3, 4, 5],
                "each other AICPU once, never itself"
            );
        }
        // Each of the five others first about a fifth of the time (1,200 of 6,000).
        assert_eq!(first[2], 0);
        for (v, k) in first.iter().enumerate().filter(|&(v, _)| v != 2) {
            assert!(
                (1_000..1_400).contains(k),
                "AICPU {v} first {k} times: {first:?}"
            );
        }
        assert_eq!(victims(0, 1, 7).count(), 0);
    }
}
