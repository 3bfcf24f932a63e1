//! Joins in the in-order window (spec/runtime.md §4.7), as one AICPU's scheduler keeps them
//! (`ptovm_vm::sched`'s `join`): the first task to read a wide region of a stepped tensor
//! looks up its writers alone and, for [`JOIN_MIN`] or more, opens a join registered on them;
//! the AICPU's later tasks that read the same region register on the join alone, skipping the
//! lookup. Task Bench's all_to_all reads a whole row in every task: without joins the window
//! would count, and pay for, a row's worth of edges a task where the AICPU registers once.
//!
//! The window counts two things. Its edges stay the predecessors the reference finds in the
//! window (a join stands for its writers still there), so that the tests can hold them to the
//! reference; its registrations are what the AICPU registers: a task on a join once, a join on
//! each of its writers once.

use ptovm_vm::sched::{JOINS, JOIN_MIN, JOIN_NODES};
use ptovm_vm::sync::AtomicU64;
use ptovm_vm::tmap::{self, Use};
use ptovm_vm::{Io, Task};

use super::HeapMap;

/// One join: the region it stands for and the ids of its writers, ascending.
#[derive(Clone, Debug)]
struct Join {
    key: Io,
    writers: Vec<u64>,
}

impl Join {
    /// How many of the writers are still in the window of task `id`: task `w` retires when
    /// task `w + window` arrives.
    #[inline]
    fn live(&self, id: u64, window: u64) -> usize {
        // Most often the oldest is still there, and so all are.
        if self.writers.first().is_none_or(|&w| id - w < window) {
            return self.writers.len();
        }
        let gone = self.writers.partition_point(|&w| id - w >= window);
        self.writers.len() - gone
    }

    /// What the join does for a read of task `id` it stands for: the edges to its writers
    /// still in the window — pushed to `found` when `others` (other lookups, or structural
    /// producers) may find them again, each once, else only counted — and the registrations
    /// the AICPU makes for them (one on the join, if any writer is live). Out of line: the
    /// quick way of the tasks without a join keeps its registers.
    #[inline(never)]
    fn stands_for(&self, id: u64, window: u64, others: bool, found: &mut Vec<u64>) -> (u64, u64) {
        let live = self.live(id, window);
        let edges = if others {
            // The join's writers are distinct: only what was found before may repeat them.
            let before = found.len();
            for &w in &self.writers[self.writers.len() - live..] {
                if !found[..before].contains(&w) {
                    found.push(w);
                }
            }
            (found.len() - before) as u64
        } else {
            live as u64
        };
        (edges, u64::from(live > 0))
    }
}

/// The joins of the window: at most [`JOINS`], reused in the order they were opened, as the
/// scheduler reuses its own ([`WindowJoins::free`]).
#[derive(Clone, Debug, Default)]
pub(super) struct WindowJoins {
    joins: Vec<Join>,
    /// The join reused next (once all are held): the one opened longest ago.
    next_victim: usize,
    /// The join found or opened last.
    last: usize,
    /// The writers of the join being opened: the vector of the join it replaces, emptied, so
    /// that opening allocates only while the joins are first filled (the scheduler has no
    /// heap, and the measurement should not time one).
    scratch: Vec<u64>,
}

/// What a task's joinable reads need from the window: its map and handle there, its tables
/// and their words, and the window's size.
pub(super) struct Lookup<'a> {
    pub map: &'a mut HeapMap,
    pub handle: u32,
    pub once: &'a ptovm_vm::sched::OnceTables,
    pub words: &'a [AtomicU64],
    pub window: u64,
}

/// What the joinable reads of a task found and registered.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Joined {
    /// The regions done: the rest of the task's lookups skip them.
    pub done: u32,
    /// Their predecessors in the window, each once (those also pushed to `found` when other
    /// lookups may meet them again).
    pub edges: u64,
    /// The registrations the AICPU makes for them.
    pub registrations: u64,
}

impl WindowJoins {
    /// Empties the joins, for another run.
    pub(super) fn reset(&mut self) {
        *self = WindowJoins::default();
    }

    /// The joinable reads of `t` (`joinable`, a bit a region, among `regions`), as the
    /// scheduler's `join_reads` does them: each read a join holds is done with it; the first
    /// other is looked up alone and opens a join for [`JOIN_MIN`] writers or more, or is
    /// registered writer by writer below that. A region with more writers than a join has
    /// nodes is left to the task's own lookup. `found` holds the predecessors found so far and gets
    /// these when `others` (other lookups, or structural producers) may find them again.
    pub(super) fn reads(
        &mut self,
        t: &Task,
        joinable: u32,
        mut at: Lookup<'_>,
        others: bool,
        found: &mut Vec<u64>,
    ) -> Result<Joined, tmap::MapError> {
        let mut j = Joined::default();
        let mut opened = false;
        let mut m = joinable;
        while m != 0 {
            let r = m.trailing_zeros() as usize;
            m &= m - 1;
            let io = &t.ios()[r];
            if let Some(k) = self.find(io) {
                j.done |= 1 << r;
                let (edges, registrations) =
                    self.joins[k].stands_for(t.id, at.window, others, found);
                j.edges += edges;
                j.registrations += registrations;
                continue;
            }
            if opened {
                continue;
            }
            opened = true;
            let mut writers = core::mem::take(&mut self.scratch);
            if !Self::writers(t, r, &mut at, &mut writers)? {
                self.scratch = writers;
                continue;
            }
            j.done |= 1 << r;
            writers.sort_unstable();
            let before = found.len();
            for &w in &writers {
                if !others || !found[..before].contains(&w) {
                    j.edges += 1;
                    if others {
                        found.push(w);
                    }
                }
            }
            j.registrations += writers.len() as u64;
            if writers.len() < JOIN_MIN {
                self.scratch = writers;
                continue;
            }
            let k = self.free();
            j.registrations += 1;
            let join = Join { key: *io, writers };
            if k == self.joins.len() {
                self.joins.push(join);
            } else {
                self.scratch = core::mem::replace(&mut self.joins[k], join).writers;
            }
            self.last = k;
        }
        Ok(j)
    }

    /// What the join found or opened last does for the read `io` of task `id`, when it
    /// stands for `io` (the scheduler's quick way, `Joins::last_for`): its writers still in
    /// the window pushed to `found` when `others` may find them again, else only counted.
    /// `None`, having changed nothing, when that join stands for another region.
    #[inline]
    pub(super) fn last_read(
        &self,
        io: &Io,
        (id, window): (u64, u64),
        others: bool,
        found: &mut Vec<u64>,
    ) -> Option<Joined> {
        let join = self.joins.get(self.last).filter(|j| j.key == *io)?;
        let (edges, registrations) = join.stands_for(id, window, others, found);
        Some(Joined {
            done: 0,
            edges,
            registrations,
        })
    }

    /// The join standing for region `io`, if one does.
    fn find(&mut self, io: &Io) -> Option<usize> {
        if self.joins.get(self.last).is_some_and(|j| j.key == *io) {
            return Some(self.last);
        }
        let k = self.joins.iter().position(|j| j.key == *io)?;
        self.last = k;
        Some(k)
    }

    /// The join task `id` opens: a new one while fewer than [`JOINS`] are held, else the one
    /// opened longest ago. The scheduler would leave the task pending until that one's
    /// writers completed (its generation then runs at most `JOINS` rows ahead of its
    /// execution); the window cannot wait, and reuses it at once: the rows are read in order,
    /// so the readers of the oldest join's row are behind, and a later one would find its
    /// writers itself.
    fn free(&mut self) -> usize {
        if self.joins.len() < JOINS {
            return self.joins.len();
        }
        let k = self.next_victim;
        self.next_victim = (k + 1) % JOINS;
        k
    }

    /// The writers of region `r` of `t` still in the window, into `writers` (emptied first):
    /// from its tensor's written-once table, and from the map unless the table took every
    /// write. False for more than a join has nodes.
    fn writers(
        t: &Task,
        r: usize,
        at: &mut Lookup<'_>,
        writers: &mut Vec<u64>,
    ) -> Result<bool, tmap::MapError> {
        let io = &t.ios()[r];
        writers.clear();
        if at.once.has(io.tensor) {
            let answered = at.once.read(at.words, io, |w| {
                if t.id.wrapping_sub(w.id) < at.window {
                    writers.push(w.id);
                }
                Ok::<(), ()>(())
            });
            if answered != Ok(true) {
                return Err(tmap::MapError::Unanswerable { tensor: io.tensor });
            }
        }
        if !at.once.has(io.tensor) || at.once.spilled(at.words, io.tensor) {
            let from_table = writers.len();
            at.map.add_some(
                t.id,
                at.handle,
                t.ios(),
                |k, _| if k == r { Use::Lookup } else { Use::Skip },
                &mut |p| {
                    if !writers[..from_table].contains(&p.id) {
                        writers.push(p.id);
                    }
                },
            )?;
        }
        Ok(writers.len() <= JOIN_NODES)
    }
}
