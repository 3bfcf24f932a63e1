//! Joins (spec/runtime.md §4.7): one waitable object standing for the writers of a region that
//! many of an AICPU's tasks read, so that each of them registers once instead of once per
//! writer.
//!
//! Task Bench's all_to_all reads a whole row of the previous step in every task: `W` writers,
//! so `W²` registrations a step, each also a lookup under the global map's lock. A read of a
//! **stepped** tensor (§3.5) meets no later write, and when it is recorded every writer of its
//! row has been recorded (its need covers them, §4.1 step 4): the set of its live writers can
//! only shrink, as they complete. The first of an AICPU's tasks to read such a region therefore
//! opens a join: a slot of [`Shared::joins`] with a fanin and a successor list, like a window
//! slot's, registered on the writers its lookup found. The AICPU remembers the region; its
//! later tasks that read the same region skip the lookup and register on the join alone. The
//! join completes when its last writer does — that writer's completion releases the join's
//! successors at once (`retire::release_join`) — and the AICPU reuses it once its list is
//! closed.
//!
//! A join opened on writers waits only for tasks: an edge to a join is an edge to each of its
//! writers, in the same direction (§6). A region whose lookup finds more writers than a join
//! has nodes ([`JOIN_NODES`]) is registered task by task, as without joins. A region whose
//! lookup finds no live writer at all is remembered as finished ([`Joins::finished`]): its
//! later reads skip the lookup.
//!
//! A join published as its row's (a whole row of a tensor with a written-once table) stands
//! for the same writers on every AICPU. The others do not register their tasks on it, whose
//! list would then move between the AICPUs at every registration: each opens a **relay**
//! ([`Joins::relay`]), its own join registered on the row's join alone, and its tasks register
//! on the relay. A relay waits only for a row's join, and only tasks wait for a relay.

use super::*;
pub use crate::share::JOIN_MIN;
use crate::Io;

/// Joins an AICPU keeps (at most 32: a bit each in a word). A join stays open until its
/// writers complete, so an AICPU whose generation runs ahead of its tasks' execution holds a
/// join for each step in between.
pub const JOINS: usize = 32;
const _: () = assert!(JOINS <= 32);
/// Waiter nodes of a join: the most writers it waits for.
pub const JOIN_NODES: usize = 128;
/// Waiter nodes of the shared region: `NODES` per window slot, then [`JOIN_NODES`] per join
/// (node `n × cap × NODES + (a × JOINS + j) × JOIN_NODES + i` is registration `i` of join `j`
/// of AICPU `a`).
pub fn nodes_len(n: usize, cap: usize) -> usize {
    n * cap * NODES + n * JOINS * JOIN_NODES
}

/// Entries of an AICPU's predecessor scratch ([`Local::preds`]): every task of the windows,
/// then the writers a join's lookup finds.
pub fn preds_len(n: usize, cap: usize) -> usize {
    n * cap + JOIN_NODES
}

/// Slots of [`Shared::joins`].
pub fn joins_len(n: usize) -> usize {
    n * JOINS
}

/// An AICPU's own record of its joins: the region each stands for and the tag it was opened
/// with (only this AICPU opens, registers on and reuses its joins).
pub(super) struct Joins {
    /// The region join `j` stands for, while bit `j` of `held` is set.
    keys: [Io; JOINS],
    /// The id join `j` was last opened with (its list's tag is its low half).
    ids: [u64; JOINS],
    held: u32,
    /// The joins opened as relays of another AICPU's row's join ([`Joins::relay`]), a bit
    /// each.
    relay: u32,
    /// The row's join relay `j` is registered on, while bit `j` of `relay` is set.
    sources: [Pred; JOINS],
    /// The id the next join opens with: distinct from the last `2³²` joins' (a tag only
    /// tells apart the openings of one join).
    next_id: u64,
    /// The join after the one opened last: once all are held, the one opened longest ago,
    /// which is reused next.
    next_victim: usize,
    /// The join found or opened last.
    last: usize,
    /// The uses of the task being recorded with the reads its joins stand for skipped
    /// ([`Joins::skip`]).
    uses: [(Use, bool); crate::limits::MAX_TASK_IO],
    /// The region a read last looked up to open a join for and found no live writer of
    /// ([`Joins::finished`]).
    finished: Option<Io>,
}

impl Joins {
    pub(super) fn new() -> Joins {
        Joins {
            keys: [Io::default(); JOINS],
            ids: [0; JOINS],
            held: 0,
            relay: 0,
            sources: [Pred::default(); JOINS],
            next_id: 0,
            next_victim: 0,
            last: 0,
            uses: [(Use::Skip, false); crate::limits::MAX_TASK_IO],
            finished: None,
        }
    }

    /// Whether the writers of `io` had all completed when a read of it last looked them up
    /// (and no join was opened): they stay completed — no later task writes what a read of a
    /// stepped tensor reads, and every writer of it was recorded before that read (§4.7) —
    /// so a later read of the region has nothing to wait for and skips the lookup.
    #[inline]
    pub(super) fn finished(&self, io: &Io) -> bool {
        self.finished.as_ref() == Some(io)
    }

    /// Remembers `io` as a region whose writers have all completed ([`Joins::finished`]).
    pub(super) fn note_finished(&mut self, io: &Io) {
        self.finished = Some(*io);
    }

    /// Forgets the finished region (a `READBACK` classed the tensors again).
    pub(super) fn forget_finished(&mut self) {
        self.finished = None;
    }

    /// The join found or opened last, as a predecessor (slot `cap + j`), if it stands for
    /// `io`: the tasks that share a read come one after another (a step's points).
    #[inline]
    pub(super) fn last_for(&self, me: u32, cap: u32, io: &Io) -> Option<Pred> {
        (self.held & 1 << self.last != 0 && self.keys[self.last] == *io)
            .then(|| self.pred(me, cap, self.last))
    }

    /// Any join this AICPU holds for `io`, as a predecessor: a search of them all (up to
    /// [`JOINS`] regions compared), for a read its row's join word does not answer.
    pub(super) fn find(&mut self, me: u32, cap: u32, io: &Io) -> Option<Pred> {
        let j = self.search(io)?;
        Some(self.pred(me, cap, j))
    }

    /// This AICPU's relay of `row`, another AICPU's row's join (its tag in `id`), if it
    /// holds one: the relays' sources compared, not their regions.
    #[inline]
    pub(super) fn relay_of(&mut self, me: u32, cap: u32, row: Pred) -> Option<Pred> {
        let mut m = self.held & self.relay;
        while m != 0 {
            let j = m.trailing_zeros() as usize;
            m &= m - 1;
            if self.sources[j] == row {
                self.last = j;
                return Some(self.pred(me, cap, j));
            }
        }
        None
    }

    /// Whether `q`, one of this AICPU's joins (slot `cap + j`), is a relay.
    #[inline]
    pub(super) fn is_relay(&self, cap: u32, q: Pred) -> bool {
        let j = q.slot.wrapping_sub(cap);
        (j as usize) < JOINS && self.relay & 1 << j != 0
    }

    fn pred(&self, me: u32, cap: u32, j: usize) -> Pred {
        Pred {
            aicpu: me,
            slot: cap + j as u32,
            id: self.ids[j],
        }
    }

    #[inline(never)]
    fn search(&mut self, io: &Io) -> Option<usize> {
        let mut m = self.held;
        while m != 0 {
            let j = m.trailing_zeros() as usize;
            m &= m - 1;
            if self.keys[j] == *io {
                self.last = j;
                return Some(j);
            }
        }
        None
    }

    /// A join this AICPU may open now: one it holds for no region, else the one it opened
    /// longest ago, once its writers have all completed (its list is closed; no writer's
    /// completion still reads its nodes: each read its node before it released the join,
    /// and the last release closed it). Joins are reused in the order they were opened, as
    /// the steps they stand for complete: a task waiting for a join checks one list.
    #[inline]
    pub(super) fn free<C, L>(&self, sh: &Shared<'_, C, L>, me: u32) -> Option<usize> {
        if self.held != u32::MAX >> (32 - JOINS) {
            return Some((!self.held).trailing_zeros() as usize);
        }
        let j = self.next_victim;
        let s = &sh.joins[me as usize * JOINS + j];
        waitlist::completed(&s.waiters, tag_of(self.ids[j])).then_some(j)
    }

    /// `uses` with the regions of `joined` (a bit each) skipped, in neither map.
    pub(super) fn skip(&mut self, uses: &[(Use, bool)], joined: u32) -> &[(Use, bool)] {
        share::skipping(uses, joined, &mut self.uses)
    }

    /// Opens join `j` (from [`Joins::free`]) for `io` as a **relay** of `row`, another
    /// AICPU's join for the same region found as its row's join (§4.7): registered on `row`
    /// alone, it stands for the same writers, and this AICPU's later tasks that read the
    /// region register on it, on this AICPU's own list, not on the list every AICPU's tasks
    /// share. Returns it as a predecessor.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn relay<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        me: u32,
        j: usize,
        io: &Io,
        row: Pred,
        counts: &mut Counts,
        env: &mut impl Env,
    ) -> Result<Pred, SchedError> {
        counts.relays += 1;
        let q = self.open(sh, me, j, io, &[row], counts, env, |_| {})?;
        self.relay |= 1 << j;
        self.sources[j] = row;
        Ok(q)
    }

    /// Opens join `j` (from [`Joins::free`]) for `io`, registered on `writers`; returns it as
    /// a predecessor. Counts its registrations in `counts`. If every writer has completed
    /// already, it closes at once and imposes nothing. `publish` is told the join once its
    /// list is open and before it registers on its writers: other tasks may register on it
    /// from then on (its holds keep it from completing before its registrations are done).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn open<C: AsRef<[Cell]>, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        me: u32,
        j: usize,
        io: &Io,
        writers: &[Pred],
        counts: &mut Counts,
        env: &mut impl Env,
        publish: impl FnOnce(Pred),
    ) -> Result<Pred, SchedError> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.keys[j] = *io;
        self.ids[j] = id;
        // Opened in order, the free ones first: once all are held, `next_victim` is the
        // one opened longest ago.
        self.held |= 1 << j;
        self.relay &= !(1 << j);
        self.next_victim = (j + 1) % JOINS;
        self.last = j;
        counts.joins += 1;
        let (n, cap) = (sh.n as usize, sh.cap as usize);
        let at = me as usize * JOINS + j;
        let s = &sh.joins[at];
        // A hold for each writer, as a task's (§4.1 steps 6–7): no writer's completion can
        // close the join before all are registered. Published to the writers' threads by the
        // registrations' compare-and-swaps.
        s.task.store(id, Ordering::Relaxed);
        waitlist::expect(&s.fanin, writers.len() as u32);
        waitlist::open(&s.waiters, tag_of(id));
        let q = Pred {
            aicpu: me,
            slot: sh.cap + j as u32,
            id,
        };
        publish(q);
        let first_node = n * cap * NODES + at * JOIN_NODES;
        // Each AICPU starts at another place in the list: the AICPUs opening joins for one
        // row at once then meet on fewer writers' lists at a time.
        let start = writers.len() * me as usize / n;
        let mut registered = 0;
        for k in 0..writers.len() {
            let i = (start + k) % writers.len();
            let p = &writers[i];
            let target = sh.waitable(p.aicpu, p.slot)?;
            let node = first_node + i;
            let nd = sh
                .nodes
                .get(node)
                .ok_or(SchedError::Corrupted("a join's waiter node"))?;
            nd.succ_aicpu.store(me, Ordering::Relaxed);
            nd.succ_slot.store(sh.cap + j as u32, Ordering::Relaxed);
            if waitlist::register(&target.waiters, tag_of(p.id), node as u32, |f| {
                nd.next.store(f, Ordering::Relaxed)
            }) {
                registered += 1;
                counts.edges += 1;
                if p.aicpu != me {
                    counts.cross += 1;
                }
            }
        }
        // The holds of the writers that imposed nothing: without them the join may be
        // complete already.
        let unused = writers.len() as u32 - registered;
        if waitlist::take_back(&s.fanin, unused, registered) {
            retire::complete_waitable::<true, C, L>(sh, me, me, sh.cap + j as u32, env)?;
        }
        Ok(q)
    }
}
