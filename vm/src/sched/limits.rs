//! Per-kernel core limits (spec/runtime.md §4.6; seed 002 §6.1 `CA_REQUEST`): a kernel
//! declared `cores(N)` has at most `N` tasks running at once in the whole launch, on any cores
//! of its pool, so that two kernels meant to run side by side each keep cores for itself.
//!
//! `Shared::kernel_running[k]` counts kernel `k`'s tasks issued and not yet seen complete. An
//! AICPU issuing one takes a unit by compare-and-swap below the limit; the AICPU that sees the
//! task complete gives it back. A task whose kernel is at its limit is **parked**, as a task
//! waiting for workspace is (`issue.rs`): it leaves its queue, and its pool's issue on that
//! AICPU waits behind it, so the AICPU's order is kept. Its AICPU then announces itself in
//! `Shared::core_waiters[LIMIT_WAITERS]`, fences (SeqCst) and tries again; a returner fences and reads
//! the word — either the returner sees the announcement or the waiter sees the freed unit
//! (the same Dekker pairing as the cores' waiter words, `cores.rs`).
//!
//! No deadlock: a limit is at least 1, so a kernel at its limit has tasks running, which
//! depend on nothing and finish.
//!
//! ```
//! use ptovm_vm::sync::AtomicU32;
//! use ptovm_vm::sched::limits;
//! let running = AtomicU32::new(0);
//! assert!(limits::take(&running, 2) && limits::take(&running, 2));
//! assert!(!limits::take(&running, 2));
//! limits::give_back(&running);
//! assert!(limits::take(&running, 2));
//! ```

use super::*;

/// The waiter word of core limits: `Shared::core_waiters[LIMIT_WAITERS]`.
pub const LIMIT_WAITERS: usize = 4;

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// The core limit of kernel `kernel`, 0 for none.
    fn limit_of(&self, kernel: u32) -> u32 {
        self.kernel_limits
            .get(kernel as usize)
            .map_or(0, |k| u32::from(k.core_limit.get()))
    }

    /// The kernel of the task in slot `slot` of AICPU `owner`.
    fn kernel_of<C, L>(sh: &Shared<'_, C, L>, (owner, slot): (u32, u32)) -> u32 {
        sh.slots[owner as usize * sh.cap as usize + slot as usize]
            .kernel
            .load(Ordering::Relaxed)
    }

    /// Before issuing the task `task` of pool `pl`: takes a unit of its kernel's core limit,
    /// if it has one. Without a unit free the task waits: the caller parks it, and this AICPU
    /// has announced that it waits (it is woken when a task of a limited kernel completes).
    #[inline(always)]
    pub(super) fn take_limit<C, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        task: (u32, u32),
        pl: usize,
    ) -> bool {
        self.kernel_limits.is_empty() || self.take_limit_unit(sh, task, pl)
    }

    /// [`Self::take_limit`] in a launch whose kernels may have limits.
    #[inline(never)]
    fn take_limit_unit<C, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        task: (u32, u32),
        pl: usize,
    ) -> bool {
        let kernel = Self::kernel_of(sh, task);
        let limit = self.limit_of(kernel);
        if limit == 0 {
            return true;
        }
        let running = &sh.kernel_running[kernel as usize];
        let got = take(running, limit) || {
            // Announce (and fence), then look again: a unit given back before the announcement
            // is seen now, one after it comes with a wake-up.
            self.waiting_limit = true;
            cores::announce(&sh.core_waiters[LIMIT_WAITERS], self.me);
            take(running, limit)
        };
        if !got && !self.limit_parked[pl] {
            self.counts.core_limit_waits += 1;
        }
        self.limit_parked[pl] = !got;
        if got {
            self.stop_waiting_limit(sh);
        }
        got
    }

    /// Whether the parked task of pool `pl` waits for its kernel's core limit and a unit is
    /// free now (a hint: another AICPU may take it first).
    pub(super) fn limit_free<C, L>(&self, sh: &Shared<'_, C, L>, pl: usize) -> bool {
        match self.parked[pl] {
            Some(task) if self.limit_parked[pl] => {
                let kernel = Self::kernel_of(sh, task);
                sh.kernel_running[kernel as usize].load(Ordering::Relaxed) < self.limit_of(kernel)
            }
            _ => false,
        }
    }

    /// Whether pool `pl`'s issue waits for a core limit: its parked task's kernel has as many
    /// tasks running as its limit allows (no core is claimed for it meanwhile).
    pub(super) fn at_limit<C, L>(&self, sh: &Shared<'_, C, L>, pl: usize) -> bool {
        self.limit_parked[pl] && !self.limit_free(sh, pl)
    }

    /// A task of `task`'s slot completed on a core it issued to: gives back its kernel's unit,
    /// if it has a limit; whether it did (then the caller wakes the waiters of
    /// [`LIMIT_WAITERS`], once for all it gave back).
    pub(super) fn give_back_limit<C, L>(&self, sh: &Shared<'_, C, L>, task: (u32, u32)) -> bool {
        if self.kernel_limits.is_empty() {
            return false;
        }
        let kernel = Self::kernel_of(sh, task);
        if self.limit_of(kernel) == 0 {
            return false;
        }
        give_back(&sh.kernel_running[kernel as usize]);
        true
    }

    /// Withdraws its announcement once no parked task of it waits for a limit.
    pub(super) fn stop_waiting_limit<C, L>(&mut self, sh: &Shared<'_, C, L>) {
        if self.waiting_limit && !self.limit_parked.iter().any(|&p| p) {
            self.waiting_limit = false;
            cores::withdraw(&sh.core_waiters[LIMIT_WAITERS], self.me);
        }
    }
}

/// Takes a unit of a kernel's count `running` if it is below `limit`. Whoever finds none
/// announces itself ([`cores::announce`] on the limit waiter word) and tries again before it
/// sleeps.
pub fn take(running: &AtomicU32, limit: u32) -> bool {
    let mut cur = running.load(Ordering::Relaxed);
    while cur < limit {
        match running.compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
    false
}

/// Gives a unit of `running` back (its task completed). Whoever gives units back then calls
/// [`cores::waiting`] on the limit waiter word and wakes whom it names.
pub fn give_back(running: &AtomicU32) {
    running.fetch_sub(1, Ordering::Relaxed);
}
