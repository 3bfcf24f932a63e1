//! An AICPU's side of core allocation (spec/runtime.md §4.6): taking a core of a pool for
//! a ready task, giving it back when the task completes, and under shared cores borrowing the
//! cores of idle AICPUs, publishing its own idleness and waiting for a core without losing a
//! wake-up. The shared bitmap and waiter words these use are in `cores.rs`.

use super::*;

impl<S: Storage> Aicpu<'_, '_, '_, S> {
    /// Whether a core of pool `pl` looks free to it (under shared cores a hint: another AICPU
    /// may claim it first): under shared cores, one of its home share or of an idle AICPU's
    /// (§4.6).
    pub(super) fn core_free<C, L>(&self, sh: &Shared<'_, C, L>, pl: usize) -> bool {
        match self.alloc {
            CoreAlloc::Partition => {
                if pl == 0 {
                    self.free_cube > 0
                } else {
                    self.free_vector > 0
                }
            }
            CoreAlloc::Shared => {
                self.home_cores[pl].any_free(sh.free_cores)
                    || self
                        .in_idle_homes(sh, pl, |h| h.any_free(sh.free_cores).then_some(()))
                        .is_some()
            }
        }
    }

    /// Takes a core of pool `pl` it may use, if there is one.
    pub(super) fn take_core<C, L>(&mut self, sh: &Shared<'_, C, L>, pl: usize) -> Option<u32> {
        match self.alloc {
            CoreAlloc::Partition if pl == 0 => {
                self.free_cube = self.free_cube.checked_sub(1)?;
                Some(self.cores[self.free_cube])
            }
            CoreAlloc::Partition => {
                self.free_vector = self.free_vector.checked_sub(1)?;
                Some(self.cores[self.ncube + self.free_vector])
            }
            CoreAlloc::Shared => {
                // Its hand first, then its home share unless its own tasks run on all of it
                // (no load of the bitmap's line, which the others write), then idle homes.
                let home_busy = self.home_running[pl] as usize >= self.home[pl].len();
                let core = match self.take_from_hand(sh, pl) {
                    Some(core) => core,
                    None => {
                        let core = match home_busy {
                            true => None,
                            false => self.home_cores[pl].claim(sh.free_cores),
                        }
                        .or_else(|| self.in_idle_homes(sh, pl, |h| h.claim(sh.free_cores)))?;
                        self.counts.core_claims += 1;
                        core
                    }
                };
                self.stop_waiting(sh, pl);
                Some(core)
            }
        }
    }

    /// A task of pool `pl` it issued started on core `core` (`started`), or completed: counts
    /// the cores of its home share that run its tasks.
    pub(super) fn count_home(&mut self, core: u32, pl: usize, started: bool) {
        if self.home[pl].contains(&core) {
            if started {
                self.home_running[pl] += 1;
            } else {
                self.home_running[pl] = self.home_running[pl].saturating_sub(1);
            }
        }
    }

    /// Under shared cores, a core whose task it saw complete this round: kept in its hand for
    /// this round's dispatch instead of given back and claimed again (two atomic operations on
    /// the bitmap's line, which every AICPU claims from). Whether it kept it (a full hand: the
    /// caller gives it back now).
    pub(super) fn keep_in_hand(&mut self, core: u32) -> bool {
        let Some(spot) = self.hand.get_mut(self.in_hand) else {
            return false;
        };
        *spot = core;
        self.in_hand += 1;
        true
    }

    /// A core of pool `pl` from its hand that it may claim now, as it would from the bitmap:
    /// of its home share first, else of an AICPU idle in the pool.
    fn take_from_hand<C, L>(&mut self, sh: &Shared<'_, C, L>, pl: usize) -> Option<u32> {
        let pool = self.pool_range[pl].clone();
        let mut borrowable = None;
        let mut idle_word = None;
        for i in 0..self.in_hand {
            let core = self.hand[i];
            if !pool.contains(&core) {
                continue;
            }
            if self.home[pl].contains(&core) {
                borrowable = Some(i);
                break;
            }
            let home = cores::home_of(pool.clone(), core, sh.n);
            let idle =
                *idle_word.get_or_insert_with(|| sh.core_waiters[2 + pl].0.load(Ordering::Relaxed));
            if borrowable.is_none() && idle & (1u64 << (home % 64)) != 0 {
                borrowable = Some(i);
            }
        }
        let i = borrowable?;
        self.in_hand -= 1;
        let core = self.hand[i];
        self.hand[i] = self.hand[self.in_hand];
        Some(core)
    }

    /// Gives back the cores left in its hand (the end of its dispatch: no task took them, or
    /// it may not use them) and wakes the AICPUs waiting for a core of their pools.
    pub(super) fn give_back_hand<C, L>(&mut self, sh: &Shared<'_, C, L>, env: &mut impl Env) {
        if self.in_hand == 0 {
            return;
        }
        let mut give_back = cores::GiveBack::new(sh.free_cores);
        let mut pools = 0;
        for &core in &self.hand[..self.in_hand] {
            give_back.add(core);
            pools |= 1 << usize::from(!self.pool_range[0].contains(&core));
        }
        give_back.done();
        self.in_hand = 0;
        self.wake_core_waiters(sh, env, pools);
    }

    /// Under shared cores: the first `Some` that `f` gives for the home shares of pool `pl` of
    /// the other AICPUs idle in it (`Shared::core_waiters[2 + pl]`), whose free cores it may
    /// borrow, starting from the next AICPU.
    fn in_idle_homes<C, L, R>(
        &self,
        sh: &Shared<'_, C, L>,
        pl: usize,
        mut f: impl FnMut(cores::Span) -> Option<R>,
    ) -> Option<R> {
        let idle = sh.core_waiters[2 + pl].0.load(Ordering::Relaxed) & !(1u64 << (self.me % 64));
        // Mostly every core of the pool is busy: one load a bitmap word says so, before a look
        // at each idle AICPU's share.
        if idle == 0 || !cores::Span::new(self.pool_range[pl].clone()).any_free(sh.free_cores) {
            return None;
        }
        for k in 1..sh.n {
            let b = (self.me + k) % sh.n;
            if idle & (1u64 << (b % 64)) != 0 {
                let home = cores::home(self.pool_range[pl].clone(), b, sh.n);
                if let Some(r) = f(cores::Span::new(home)) {
                    return Some(r);
                }
            }
        }
        None
    }

    /// Under shared cores, after issuing: publishes whether it is idle in pool `pl` (no task
    /// of it ready: its queue empty, none held or parked), when that changed.
    pub(super) fn publish_idle<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
        pl: usize,
    ) {
        if self.alloc == CoreAlloc::Partition {
            return;
        }
        let me = self.me as usize;
        let held = self.held.as_slice().iter().any(|&slot| {
            sh.slots[me * sh.cap as usize + slot as usize]
                .pool
                .load(Ordering::Relaxed) as usize
                == pl
        });
        let idle = self.own_ready_empty(sh, pl) && !held && self.parked[pl].is_none();
        if idle != self.idle[pl] {
            self.idle[pl] = idle;
            let bit = 1u64 << (self.me % 64);
            let word = &sh.core_waiters[2 + pl].0;
            if idle {
                word.fetch_or(bit, Ordering::Relaxed);
                // Its home cores are now borrowable: an AICPU that waits for a core (one
                // whose own share is empty) must hear of it (fence and wake, as a return).
                self.wake_core_waiters(sh, env, 1 << pl);
            } else {
                word.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    /// Under shared cores, with a task of pool `pl` ready, no core it may use and none of the
    /// pool running for it: announces that it waits for one (§4.6) and looks again; whether
    /// one is free now.
    pub(super) fn wait_for_core<C, L>(&mut self, sh: &Shared<'_, C, L>, pl: usize) -> bool {
        // With a core of the pool busy it needs no wake-up: that core's finish brings it back,
        // and its home share is claimed first.
        if self.alloc == CoreAlloc::Partition || self.running[pl] > 0 {
            return false;
        }
        self.counts.core_waits += 1;
        cores::announce(&sh.core_waiters[pl], self.me);
        self.waiting_core[pl] = true;
        self.core_free(sh, pl)
    }

    /// It no longer waits for a core of pool `pl` (it got one, or has no task for one).
    pub(super) fn stop_waiting<C, L>(&mut self, sh: &Shared<'_, C, L>, pl: usize) {
        if self.waiting_core[pl] {
            self.waiting_core[pl] = false;
            cores::withdraw(&sh.core_waiters[pl], self.me);
        }
    }

    /// A core it took is free again (the task it ran completed, or it found no task for it).
    /// Under shared cores the caller then wakes the AICPUs waiting for one ([`Self::wake_core_waiters`]).
    pub(super) fn core_back<C, L>(&mut self, sh: &Shared<'_, C, L>, core: u32, pl: usize) {
        match self.alloc {
            CoreAlloc::Partition if pl == 0 => {
                self.cores[self.free_cube] = core;
                self.free_cube += 1;
            }
            CoreAlloc::Partition => {
                self.cores[self.ncube + self.free_vector] = core;
                self.free_vector += 1;
            }
            CoreAlloc::Shared => cores::give_back(sh.free_cores, core),
        }
    }

    /// Under shared cores, after giving cores of the pools in `pools` (bit `p` for pool `p`)
    /// back: wakes the other AICPUs that wait for one.
    pub(super) fn wake_core_waiters<C, L>(
        &self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
        pools: u32,
    ) {
        if self.alloc == CoreAlloc::Partition {
            return;
        }
        for pl in 0..2 {
            if pools & (1 << pl) != 0 {
                self.wake_named(sh, pl, env);
            }
        }
    }

    /// Fences, then wakes the other AICPUs named in waiter word `word` of
    /// `Shared::core_waiters` ([`cores::waiting`]).
    pub(super) fn wake_named<C, L>(&self, sh: &Shared<'_, C, L>, word: usize, env: &mut impl Env) {
        let mut waiting = cores::waiting(&sh.core_waiters[word], self.me);
        while waiting != 0 {
            env.wake(waiting.trailing_zeros());
            waiting &= waiting - 1;
        }
    }

    /// The pool index of core `core`.
    pub(super) fn pool_of_core<C, L>(sh: &Shared<'_, C, L>, core: u32) -> usize {
        usize::from(sh.cores[core as usize].core_type.load(Ordering::Relaxed) != handshake::CUBE)
    }
}
