//! Completion (spec/runtime.md §4.2): releasing a completed task's successors, retiring its
//! accesses from the TensorMaps, freeing its slot.

use super::*;

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// The task in `slot` completed: its successors are released now or with the next batch.
    pub(super) fn completed<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        env: &mut impl Env,
        slot: u32,
    ) -> Result<(), SchedError> {
        self.unreleased.push(slot)?;
        if self.unreleased.len >= cfg.batch_deps.max(1) as usize {
            self.release(sh, env)?;
        }
        Ok(())
    }

    /// §4.2 steps 1–2 for the completed tasks of `unreleased`, as one batch: closes their
    /// successor lists and releases the successors; their slots go to `retiring`.
    pub(super) fn release<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
    ) -> Result<(), SchedError> {
        let me = self.me as usize;
        self.counts.batches += 1;
        while let Some(slot) = self.unreleased.pop() {
            let s = &sh.slots[me * sh.cap as usize + slot as usize];
            let id = s.task.load(Ordering::Relaxed);
            if s.pool.load(Ordering::Relaxed) == 0 {
                self.counts.cube += 1;
            }
            // Close the successor list and release the successors (tasks and joins).
            let first = waitlist::close(&s.waiters, tag_of(id));
            successors(sh, first, |sa, ss| release_hold(sh, self.me, sa, ss, env))?;
            // Its accesses leave its own map now; those in the global map, and the slot,
            // at the next flush (batched under the lock this AICPU takes to record anyway).
            self.map.retire(slot)?;
            if s.global.load(Ordering::Relaxed) != 0 {
                self.retiring.push(slot)?;
            } else {
                s.task.store(EMPTY, Ordering::Release);
                self.free.push(slot)?;
            }
            self.in_window -= 1;
            self.counts.tasks += 1;
            env.completed();
        }
        Ok(())
    }

    /// §4.2 step 3 for the slots of `retiring`: their accesses leave the global map and the
    /// slots become free. Called with the map locked.
    pub(super) fn flush<C, L, M: Storage>(
        me: u32,
        retiring: &mut Stack<'m, u32>,
        free: &mut Stack<'m, u32>,
        sh: &Shared<'_, C, L>,
        map: &mut TensorMap<M>,
    ) -> Result<(), SchedError> {
        let base = me * sh.cap;
        while let Some(slot) = retiring.pop() {
            let mut below_zero = false;
            map.retire_with(base + slot, |tensor, writes| {
                if writes {
                    if let Some(w) = sh.writers.get(tensor as usize) {
                        // Every write recorded here was counted when it was recorded.
                        below_zero |= w.fetch_sub(1, Ordering::Release) == 0;
                    }
                }
            })?;
            if below_zero {
                return Err(SchedError::Corrupted(
                    "a tensor's live-writer count went below zero",
                ));
            }
            let s = &sh.slots[(base + slot) as usize];
            s.global.store(0, Ordering::Relaxed);
            s.task.store(EMPTY, Ordering::Release);
            free.push(slot)?;
        }
        Ok(())
    }
}

/// §4.2 step 2 (and §4.1 step 7): drops one hold on a task's fanin; the last one makes it
/// ready, and wakes its owner if that is not `me`, the AICPU releasing it. A slot past the
/// window (`cap + j`) is join `j` of `aicpu` (§4.7): the last hold on it completes the join,
/// and its successors are released at once.
pub(super) fn release_hold<C: AsRef<[Cell]>, L>(
    sh: &Shared<'_, C, L>,
    me: u32,
    aicpu: u32,
    slot: u32,
    env: &mut impl Env,
) -> Result<(), SchedError> {
    if slot >= sh.cap {
        return release_join(sh, me, aicpu, slot, env);
    }
    release_task(sh, me, aicpu, slot, env)
}

/// [`release_hold`] for join `slot − cap` of `aicpu`: the last hold closes its list (with the
/// tag it was opened with: only its AICPU reopens it, and only once it is closed) and releases
/// what registered on it: tasks, and the relays of a row's join (§4.7), whose own tasks are
/// released in turn.
#[inline(never)]
pub(super) fn release_join<C: AsRef<[Cell]>, L>(
    sh: &Shared<'_, C, L>,
    me: u32,
    aicpu: u32,
    slot: u32,
    env: &mut impl Env,
) -> Result<(), SchedError> {
    release_waitable::<true, C, L>(sh, me, aicpu, slot, env)
}

/// [`release_join`], or with `RELAYS` false for a relay (§4.7): a join registered on another
/// AICPU's join, on which only tasks register (a join on its list would be a relay of a relay,
/// which no AICPU opens).
fn release_waitable<const RELAYS: bool, C: AsRef<[Cell]>, L>(
    sh: &Shared<'_, C, L>,
    me: u32,
    aicpu: u32,
    slot: u32,
    env: &mut impl Env,
) -> Result<(), SchedError> {
    let j = sh.waitable(aicpu, slot)?;
    if !waitlist::release(&j.fanin) {
        return Ok(());
    }
    complete_waitable::<RELAYS, C, L>(sh, me, aicpu, slot, env)
}

/// A join (or with `RELAYS` false a relay) of `aicpu` whose last hold is gone: closes its list
/// and releases what registered on it.
pub(super) fn complete_waitable<const RELAYS: bool, C: AsRef<[Cell]>, L>(
    sh: &Shared<'_, C, L>,
    me: u32,
    aicpu: u32,
    slot: u32,
    env: &mut impl Env,
) -> Result<(), SchedError> {
    let j = sh.waitable(aicpu, slot)?;
    let first = waitlist::close_open(&j.waiters);
    successors(sh, first, |sa, ss| {
        if ss < sh.cap {
            release_task(sh, me, sa, ss, env)
        } else if RELAYS {
            release_waitable::<false, C, L>(sh, me, sa, ss, env)
        } else {
            Err(SchedError::Corrupted("a relay's successor is a join"))
        }
    })?;
    // Its AICPU may wait for a join to reuse (`record`).
    if aicpu != me {
        env.wake(aicpu);
    }
    Ok(())
}

/// Hands each successor on the list from node `first` to `release` as `(aicpu, slot)`, in
/// list order (node numbers are global: `k × n × cap + a × cap + s` for a slot's, then the
/// joins'). A node's fields are read before its successor is released: the release may let the
/// node be reused.
#[inline(always)]
fn successors<C, L>(
    sh: &Shared<'_, C, L>,
    first: u32,
    mut release: impl FnMut(u32, u32) -> Result<(), SchedError>,
) -> Result<(), SchedError> {
    let mut cur = first;
    while cur != NIL {
        let nd = sh
            .nodes
            .get(cur as usize)
            .ok_or(SchedError::Corrupted("a waiter node index"))?;
        let sa = nd.succ_aicpu.load(Ordering::Acquire);
        let ss = nd.succ_slot.load(Ordering::Acquire);
        let next = nd.next.load(Ordering::Acquire);
        release(sa, ss)?;
        cur = next;
    }
    Ok(())
}

/// [`release_hold`] for the task in `slot` of `aicpu` (a window slot, not a join).
#[inline]
pub(super) fn release_task<C: AsRef<[Cell]>, L>(
    sh: &Shared<'_, C, L>,
    me: u32,
    aicpu: u32,
    slot: u32,
    env: &mut impl Env,
) -> Result<(), SchedError> {
    let s = sh
        .slots
        .get((aicpu * sh.cap + slot) as usize)
        .ok_or(SchedError::Corrupted("a successor's slot"))?;
    if waitlist::release(&s.fanin) {
        ready_task(sh, me, aicpu, s, slot, env)?;
    }
    Ok(())
}

/// The task in `slot` of `aicpu`, whose slot is `s`, is ready: it goes to its ready queue.
#[inline(always)]
pub(super) fn ready_task<C: AsRef<[Cell]>, L>(
    sh: &Shared<'_, C, L>,
    me: u32,
    aicpu: u32,
    s: &Slot,
    slot: u32,
    env: &mut impl Env,
) -> Result<(), SchedError> {
    let pl = s.pool.load(Ordering::Acquire) as usize & 1;
    let q = aicpu as usize * 2 + pl;
    let pushed = match sh.stealable.get(q) {
        // Under stealing its own task goes on its deque (only the owner pushes there);
        // another AICPU's to that AICPU's inbox, which it drains into its deque.
        Some(deque) if aicpu == me => deque.push(slot),
        _ => sh.ready[q].push(slot),
    };
    pushed.map_err(|_| SchedError::Corrupted("a ready queue filled"))?;
    if aicpu != me {
        env.wake(aicpu);
    }
    Ok(())
}
