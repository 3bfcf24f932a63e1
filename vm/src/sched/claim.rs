//! An AICPU's side of core allocation (spec/runtime.md §4.6): taking a core of a pool for
//! a ready task, giving it back when the task completes, and under shared cores borrowing the
//! cores of idle AICPUs, publishing its own idleness and waiting for a core without losing a
//! wake-up. The shared bitmap and waiter words these use are in `cores.rs`.

use super::*;

impl<S: Storage> Aicpu<'_, '_, '_, S> {
    /// Whether a core of pool `pl` looks free to it (under shared cores a hint: another AICPU
    /// may claim it first): under shared cores, one of its home share or, when it may borrow
    /// ([`Self::may_borrow`]), of an idle AICPU's (§4.6).
    pub(super) fn core_free<C: AsRef<[Cell]>, L>(&self, sh: &Shared<'_, C, L>, pl: usize) -> bool {
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
                    || (self.may_borrow(sh, pl)
                        && self
                            .in_idle_homes(sh, pl, |h| h.any_free(sh.free_cores).then_some(()))
                            .is_some())
            }
        }
    }

    /// Claims a free core of pool `pl` it may use, if there is one: under a partition one of its
    /// own, under shared cores one of the bitmap (the caller looked in its hand first,
    /// [`Self::take_from_hand`]). The partition's few instructions inline in the issue loop,
    /// the bitmap's claim out of line (so are the other rare paths of the loop's helpers:
    /// callgrind counted ~4 % fewer instructions in the threaded LLaMA run this way).
    #[inline(always)]
    pub(super) fn claim_core<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        pl: usize,
    ) -> Option<u32> {
        match self.alloc {
            CoreAlloc::Partition if pl == 0 => {
                self.free_cube = self.free_cube.checked_sub(1)?;
                Some(self.cores[self.free_cube])
            }
            CoreAlloc::Partition => {
                self.free_vector = self.free_vector.checked_sub(1)?;
                Some(self.cores[self.ncube + self.free_vector])
            }
            CoreAlloc::Shared => self.claim_shared(sh, pl),
        }
    }

    /// [`Self::claim_core`] under shared cores.
    #[inline(never)]
    fn claim_shared<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        pl: usize,
    ) -> Option<u32> {
        // Its home share unless its own tasks run on all of it (no load of the bitmap's line,
        // which the others write), then idle AICPUs' shares.
        let home_busy = self.home_running[pl] as usize >= self.home[pl].len();
        let core = match home_busy {
            true => None,
            false => self.home_cores[pl].claim(sh.free_cores),
        }
        .or_else(|| {
            self.may_borrow(sh, pl)
                .then(|| self.in_idle_homes(sh, pl, |h| h.claim(sh.free_cores)))
                .flatten()
        })?;
        self.counts.core_claims += 1;
        self.stop_waiting(sh, pl);
        Some(core)
    }

    /// Whether it may borrow a core of pool `pl` now (§4.6): with no task of the pool running
    /// for it, always; with some, only for a backlog its own share will not soon start — more
    /// of its tasks ready than its share has cores. (A shorter one its cores take as its
    /// running tasks finish; a look at the others' shares costs loads of lines they write,
    /// and a borrowed core goes back and forth around its owner's next busy spell.)
    fn may_borrow<C: AsRef<[Cell]>, L>(&self, sh: &Shared<'_, C, L>, pl: usize) -> bool {
        self.running[pl] == 0 || self.own_ready_len(sh, pl) > self.home[pl].len()
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

    /// Under shared cores, a core of pool `pl` whose task it saw complete this round: kept in
    /// its hand for this round's dispatch instead of given back and claimed again (two atomic
    /// operations on the bitmap's line, which every AICPU claims from). Whether it kept it (a
    /// full hand: the caller gives it back now).
    pub(super) fn keep_in_hand(&mut self, core: u32, pl: usize) -> bool {
        let kind = usize::from(!self.home[pl].contains(&core));
        self.hand.push(pl, kind, core)
    }

    /// A core of pool `pl` from its hand that it may claim now, as it would from the bitmap:
    /// of its home share first, else one it borrowed from an AICPU still idle in the pool.
    #[inline(always)]
    pub(super) fn take_from_hand<C, L>(&mut self, sh: &Shared<'_, C, L>, pl: usize) -> Option<u32> {
        let core = match self.hand.pop_home(pl) {
            Some(core) => core,
            None if self.hand.is_empty(pl, BORROWED) => return None,
            None => self.take_borrowed(sh, pl)?,
        };
        // It has a core (as from a claim): it no longer waits for one.
        self.stop_waiting(sh, pl);
        Some(core)
    }

    /// A core of pool `pl` it borrowed, kept in its hand, whose home AICPU is still idle.
    #[inline(never)]
    fn take_borrowed<C, L>(&mut self, sh: &Shared<'_, C, L>, pl: usize) -> Option<u32> {
        let idle = sh.core_waiters[2 + pl].0.load(Ordering::Relaxed);
        let (pool, n) = (self.pool_range[pl].clone(), sh.n);
        self.hand.pop(pl, BORROWED, |core| {
            idle & (1u64 << (cores::home_of(pool.clone(), core, n) % 64)) != 0
        })
    }

    /// Gives back the cores left in its hand (the end of its dispatch: no task took them, or
    /// it may not use them) and wakes the AICPUs waiting for a core of their pools.
    pub(super) fn give_back_hand<C, L>(&mut self, sh: &Shared<'_, C, L>, env: &mut impl Env) {
        let pools = self.hand.pools();
        if pools != 0 {
            self.give_back_held(sh, env, pools);
        }
    }

    /// [`Self::give_back_hand`] with cores of the pools `pools` in its hand.
    #[inline(never)]
    fn give_back_held<C, L>(&mut self, sh: &Shared<'_, C, L>, env: &mut impl Env, pools: u32) {
        let mut give_back = cores::GiveBack::new(sh.free_cores);
        for core in self.hand.drain() {
            give_back.add(core);
        }
        give_back.done();
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
    /// of it ready: its queue empty, none held or parked; and a core of its home share to lend),
    /// when that changed.
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
        let idle =
            self.lends(pl) && self.own_ready_empty(sh, pl) && !held && self.parked[pl].is_none();
        self.set_idle(sh, env, pl, idle);
    }

    /// Whether it has a core of its home share of pool `pl` to lend: its own tasks on all of
    /// it leave nothing to lend, and no borrower need look.
    pub(super) fn lends(&self, pl: usize) -> bool {
        (self.home_running[pl] as usize) < self.home[pl].len()
    }

    /// [`Self::publish_idle`] once it is known whether the AICPU is `idle` in pool `pl`.
    pub(super) fn set_idle<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
        pl: usize,
        idle: bool,
    ) {
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
    pub(super) fn wait_for_core<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        pl: usize,
    ) -> bool {
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
    #[inline(always)]
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

/// The cores of its home share in a [`Hand`].
const HOME: usize = 0;
/// The cores it borrowed in a [`Hand`].
const BORROWED: usize = 1;

/// An AICPU's hand under shared cores (`Aicpu::hand`): the cores whose tasks it saw complete
/// this round, kept for the round's dispatch, in a stack per pool and kind ([`HOME`],
/// [`BORROWED`]) so that taking one of its home share is a pop. Empty between rounds.
pub(super) struct Hand {
    cores: [[[u32; HAND]; 2]; 2],
    len: [[u8; 2]; 2],
}

impl Hand {
    pub(super) const EMPTY: Hand = Hand {
        cores: [[[0; HAND]; 2]; 2],
        len: [[0; 2]; 2],
    };

    /// Keeps `core` in the stack of pool `pl` and kind `kind`; false when that one is full.
    fn push(&mut self, pl: usize, kind: usize, core: u32) -> bool {
        let len = &mut self.len[pl][kind];
        let Some(spot) = self.cores[pl][kind].get_mut(usize::from(*len)) else {
            return false;
        };
        *spot = core;
        *len += 1;
        true
    }

    fn is_empty(&self, pl: usize, kind: usize) -> bool {
        self.len[pl][kind] == 0
    }

    /// Takes the newest core of its home share of pool `pl`, if any.
    #[inline]
    fn pop_home(&mut self, pl: usize) -> Option<u32> {
        let len = self.len[pl][HOME].checked_sub(1)?;
        self.len[pl][HOME] = len;
        Some(self.cores[pl][HOME][usize::from(len)])
    }

    /// Takes the newest core of that stack that `may` allows, if any.
    fn pop(&mut self, pl: usize, kind: usize, may: impl Fn(u32) -> bool) -> Option<u32> {
        let len = usize::from(self.len[pl][kind]);
        let stack = &mut self.cores[pl][kind];
        let i = (0..len).rev().find(|&i| may(stack[i]))?;
        let core = stack[i];
        stack[i] = stack[len - 1];
        self.len[pl][kind] -= 1;
        Some(core)
    }

    /// The pools it holds cores of (bit `p` for pool `p`).
    fn pools(&self) -> u32 {
        (0..2)
            .filter(|&pl| self.len[pl] != [0, 0])
            .fold(0, |m, pl| m | 1 << pl)
    }

    /// Empties it, giving its cores.
    fn drain(&mut self) -> impl Iterator<Item = u32> + '_ {
        let len = core::mem::take(&mut self.len);
        let cores = &self.cores;
        (0..4).flat_map(move |k| {
            let (pl, kind) = (k / 2, k % 2);
            cores[pl][kind][..usize::from(len[pl][kind])]
                .iter()
                .copied()
        })
    }
}
