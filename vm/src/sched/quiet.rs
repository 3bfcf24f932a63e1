//! Quiet rounds (spec/runtime.md §4.3): a round of an AICPU that did nothing in its last round
//! and on which nothing has moved since does nothing either, and a few loads say so.
//!
//! Most rounds of an AICPU that waits do nothing: its window is full and none of its cores has
//! finished, or its staged task waits for another AICPU's watermark. A full round still walks
//! every step of §4.3 to find that out — completions, the start policy, both pools' dispatch
//! and idle publication, the deferred task, the barrier, generation, the wake scan — some 400
//! to 600 instructions on the host. On a chain spread over six AICPUs eight rounds of nine do
//! nothing, and they cost more than the hop itself.
//!
//! After a round that made no progress, in a launch and a state where the checks below cover
//! everything such a round reads that others write ([`Aicpu::may_rest`]), the AICPU is
//! **quiet**. Its next round first asks [`Aicpu::still_quiet`]: if none of those inputs moved,
//! the full round would find what the last one found and change nothing (its announcements
//! and idle publications are already what they would write again), so it returns at once,
//! counting what the full round would have counted. Anything that moved, and every round
//! after progress, takes the full round.

use super::*;

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// Whether a round that made no progress leaves the AICPU in a state whose next rounds
    /// [`Aicpu::still_quiet`] can settle. Everything a round reads that another AICPU, a core
    /// or the clock may change must be among its checks, so the launch and the state must
    /// keep out what they do not check:
    ///
    /// - stealing (other AICPUs' deques, its inbox, completions thieves pass back, the end of
    ///   the run), issue timing other than `immediate` (held tasks, the rate's clock), the
    ///   naive scheduler (no watermark wait);
    /// - a task parked for workspace or a core limit (it waits for units others give back), a
    ///   task waiting for a core, a deferred task (its predecessors' lists), a barrier (the
    ///   other AICPUs' arrivals), and the end of its run. (Completions not yet released are
    ///   not among them: a round that does nothing else releases them.)
    pub(super) fn may_rest(&self, cfg: &Config) -> bool {
        !cfg.work_steal
            && !cfg.naive
            && matches!(cfg.timing, IssueTiming::Immediate)
            && self.parked == [None, None]
            && self.limit_parked == [false, false]
            && !self.waiting_limit
            && self.waiting_core == [false, false]
            && self.deferred.is_none()
            && self.barrier.is_none()
            && self.held.is_empty()
            && self.rate_wait_since.is_none()
            && !self.finished
    }

    /// For a quiet AICPU: whether nothing a round reads has moved since its last round, so
    /// this round would do nothing. Its last round did nothing, and its own state has not
    /// changed since (only its rounds change it), so what may have moved is what others write:
    ///
    /// - a core it handed a task to finished (only a thief passes back completions, and a
    ///   launch that steals is never quiet);
    /// - a task of its was released into one of its ready queues (under shared cores an
    ///   empty queue is also what keeps its idle publication what it last wrote: its home
    ///   cores' use is its own state);
    /// - the watermarks its staged task waits for, or, past them, the join it waits to free.
    ///
    /// Generation is otherwise blocked on its own state: a full window or no free slot (only
    /// completions, above, change that), or its end.
    pub(super) fn still_quiet<C: AsRef<[Cell]>, L>(&mut self, sh: &Shared<'_, C, L>) -> bool {
        let me = self.me as usize;
        if self
            .busy
            .as_slice()
            .iter()
            .any(|b| sh.cores[b.core as usize].idle())
            || !sh.ready[2 * me].is_empty()
            || !sh.ready[2 * me + 1].is_empty()
        {
            return false;
        }
        if self.pending.is_none() {
            // Staged at a full window or with no free slot, or generation ended: a round that
            // did nothing did not generate, so one of these held (no barrier: `may_rest`).
            return true;
        }
        let others = self.others_min(sh);
        if others < self.need {
            // As the full round's re-check would: its announcement of `need` stands.
            self.others_min = others;
            return true;
        }
        // Past the watermarks, it waits for a join to free (its announcement was withdrawn when
        // it got past them, before it tried to record).
        self.join_wait && self.joins.free(sh, self.me).is_none()
    }
}
