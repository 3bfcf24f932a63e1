//! A region's lookup (which lists it visits, spec/runtime.md §3.3) and its insertion.

use super::key::{
    cells, count, keyed, kind, meet, meet_point, Entry, Key, ALL, DENSE, HOME, KEYED, LIVE, ROW,
    SHAPE, WRITE,
};
use super::lists::{
    link_all, link_row, link_shape, row_group, slot_for, unlink, Bases, LISTS_KEPT, MIXED,
    ROWS_KEPT, ROW_GROUPS, SHAPE_BITS, SLOT_LISTS, SLOT_LIVE, SLOT_MASK, SLOT_ROWS, SLOT_WRITES,
};
use super::{DepKind, Io, MatchMode, Pred, Storage, TensorMap, NIL};

/// A lookup of at most this many cells of a slot probes them without weighing the other ways.
const FEW_CELLS: u128 = 8;
/// A lookup weighs a slot's row lists only when it spans at most this many rows, and at most a
/// quarter of the slot's entries.
const MAX_ROWS: u128 = 64;

/// Which entries of a list a scan considers (a list may hold others: a bucket's other keys, a
/// row bucket's other rows).
#[derive(Clone, Copy)]
enum Want {
    /// Those of this key (a home list).
    Key(Key),
    /// Those of this slot and cell in dimension 0 (a row list).
    Row(u8, i64),
    /// All (a slot's list).
    All,
}

impl<S: Storage> TensorMap<S> {
    /// [`TensorMap::add_some`]'s steps for a region that is a point (`point_dims`: a tile or
    /// a row point) of a tensor whose live entries, if any, all have its shape (the common
    /// case: every access of the LLaMA layer, and the tiles of Task Bench's patterns): only
    /// entries of its own cell can meet it, so it is looked up (if `lookup`) on its home list
    /// alone, and recorded (as entry `record`, if given) with its key as its whole region.
    /// Returns false, having done nothing, for a point of a tensor with entries of other
    /// shapes ([`TensorMap::lookup`] and [`TensorMap::insert`] then do the same steps the
    /// general way).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_point(
        &mut self,
        io: &Io,
        id: u64,
        handle: u32,
        mark: u64,
        lookup: bool,
        record: Option<u32>,
        pred: &mut impl FnMut(Pred),
    ) -> bool {
        let tile = io.ndims == 2;
        let key = Key {
            s0: 0,
            s1: if tile { 0 } else { ALL },
            c0: io.ranges[0].0,
            c1: if tile { io.ranges[1].0 } else { 0 },
        };
        let b = self.bases;
        let exact = self.mode == MatchMode::Exact;
        let layout = self.layout;
        let (ents, regions, words, marks) = self.mem.parts();
        // (A tensor with a dense table never comes here: `TensorMap::add_some`.)
        let used = words[b.tensor_at(io.tensor)];
        let slot = used.trailing_zeros() as u8;
        let alone = used == 0
            || (used.is_power_of_two()
                && words[b.slot_at(io.tensor, slot)] & (SHAPE_BITS | MIXED) == key.shape());
        if !alone {
            return false;
        }
        let head = b.home_head(io.tensor, key);
        let writes = io.writes();
        if lookup && used != 0 {
            let (mut visits, mut unlinked) = (0, 0);
            for list in 0..1 + writes as usize {
                let at = Visit {
                    id,
                    mark,
                    kind: kind(list, io),
                };
                let mut e = words[head as usize + list];
                while e != NIL {
                    let x = &ents[e as usize];
                    let next = x.next[HOME];
                    visits += 1;
                    if x.tensor == io.tensor && x.key() == key {
                        let met = if x.flags & KEYED != 0 && x.ndims == io.ndims {
                            // Both regions are their keys, and the keys are equal.
                            (true, writes)
                        } else {
                            meet(ents, regions, e, &layout, io, exact)
                        };
                        unlinked += at.met(ents, words, marks, e, met, b, pred) as u32;
                    }
                    e = next;
                }
            }
            self.probes += 1;
            self.visits += visits;
            self.live -= unlinked;
        }
        if let Some(e) = record {
            // The tensor's slot, unless the lookup emptied it (then it or another is taken).
            let slot = if used != 0 && words[b.tensor_at(io.tensor)] & (1 << slot) != 0 {
                slot
            } else {
                slot_for(words, b, io.tensor, key.shape())
            };
            let flags = LIVE | KEYED | if writes { WRITE } else { 0 };
            ents[e as usize] = Entry::new(id, handle, io, key, flags, slot);
            link_all(ents, words, e, head, b);
            self.inserted += 1;
            self.live += 1;
        }
        true
    }

    /// Looks `io` (key `key`, of a tensor with live entries) up for task `id` (its mark
    /// `mark`): reports its predecessors and unlinks the entries it covers.
    ///
    /// In exact mode only an equal region can match, and it has `io`'s key: one home list. In
    /// overlap mode, per shape slot of the tensor whose lists `io` must look at (writes; reads
    /// too when it writes), the cheapest of three ways, counting a list looked at or an entry
    /// examined as one: the home lists of the cells that can hold an entry sharing an element
    /// with `io` (as many as the cells); the row lists of its cells in dimension 0 (the rows
    /// plus their lengths: weighed only for a lookup of many cells in few rows, and kept from
    /// the first such lookup on); the slot's list (its entries). (A point of a tensor whose
    /// live entries all have its shape does not come here: [`TensorMap::add_point`].)
    pub(super) fn lookup(
        &mut self,
        io: &Io,
        key: Key,
        id: u64,
        mark: u64,
        pred: &mut impl FnMut(Pred),
    ) {
        let b = self.bases;
        if self.mode == MatchMode::Exact {
            let home = b.home_head(io.tensor, key);
            self.scan::<HOME>(home, io, key, Want::Key(key), id, mark, pred);
            return;
        }
        let writes = io.writes();
        let mut used = self.mem.parts().2[b.tensor_at(io.tensor)] & SLOT_MASK;
        while used != 0 {
            let k = used.trailing_zeros() as u8;
            used &= used - 1;
            let at = b.slot_at(io.tensor, k);
            let [shape, live, live_writes] = {
                let words = self.mem.parts().2;
                [words[at], words[at + SLOT_LIVE], words[at + SLOT_WRITES]]
            };
            if live_writes == 0 && !writes {
                // A read meets writes only.
                continue;
            }
            if shape & MIXED != 0 {
                self.scan_slot(io, key, k, id, mark, pred);
                continue;
            }
            let (s0, s1) = (shape as u8, (shape >> 8) as u8);
            let (d0, d1) = (cells(io, 0, s0), cells(io, 1, s1));
            let (n0, n1) = (count(d0), count(d1));
            if n0 == 0 || n1 == 0 {
                // `io` is empty in a dimension: it shares no element with anything.
                continue;
            }
            if let Some((lo0, hi0)) = d0.filter(|_| n0 <= ROW_GROUPS as u128) {
                // No live entry of the slot in the rows the lookup would visit (a write of
                // row `t` and reads of row `t - 1`): nothing to probe.
                let words = self.mem.parts().2;
                if (lo0..=hi0).all(|c0| words[at + SLOT_ROWS + row_group(c0)] == 0) {
                    continue;
                }
            }
            let probes = n0.saturating_mul(n1);
            let scan = live as u128 + 1;
            match (d0, d1) {
                (Some((lo0, hi0)), _)
                    if probes > FEW_CELLS
                        && n0 <= MAX_ROWS
                        && 4 * n0 <= live as u128
                        && self.row_cost(io.tensor, k, lo0, hi0, writes) < probes.min(scan) =>
                {
                    for c0 in lo0..=hi0 {
                        let row = b.row_head(io.tensor, k, c0);
                        self.scan::<ROW>(row, io, key, Want::Row(k, c0), id, mark, pred);
                    }
                }
                (Some((lo0, hi0)), Some((lo1, hi1))) if probes <= scan => {
                    for c0 in lo0..=hi0 {
                        for c1 in lo1..=hi1 {
                            let cell = Key { s0, s1, c0, c1 };
                            let home = b.home_head(io.tensor, cell);
                            self.scan::<HOME>(home, io, key, Want::Key(cell), id, mark, pred);
                        }
                    }
                }
                _ => self.scan_slot(io, key, k, id, mark, pred),
            }
        }
    }

    /// Scans the lists of `io`'s tensor's slot `slot` (keeping them from now on if it did not).
    fn scan_slot(
        &mut self,
        io: &Io,
        key: Key,
        slot: u8,
        id: u64,
        mark: u64,
        pred: &mut impl FnMut(Pred),
    ) {
        let at = self.bases.slot_at(io.tensor, slot);
        if self.mem.parts().2[at] & LISTS_KEPT == 0 {
            self.start_keeping(io.tensor, slot, LISTS_KEPT);
        }
        let list = (at + SLOT_LISTS) as u32;
        self.scan::<SHAPE>(list, io, key, Want::All, id, mark, pred);
    }

    /// What scanning the row lists of cells `lo..=hi` of `tensor`'s slot `slot` costs: the
    /// rows, plus the lengths of their write lists (and read lists, for a lookup that
    /// `writes`). Starts keeping the slot's rows if it does not yet.
    fn row_cost(&mut self, tensor: u16, slot: u8, lo: i64, hi: i64, writes: bool) -> u128 {
        self.keep_rows(tensor, slot);
        let b = self.bases;
        let words = self.mem.parts().2;
        let mut cost = 0;
        for c0 in lo..=hi {
            let row = b.row_head(tensor, slot, c0) as usize;
            cost += 1 + words[row + 2] as u128 + if writes { words[row + 3] as u128 } else { 0 };
        }
        self.probes += (hi - lo + 1) as u64;
        cost
    }

    /// Scans the write list at word `head` (and, when `io` writes, the read list after it) on
    /// level `L`, considering only the entries `want` names.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn scan<const L: usize>(
        &mut self,
        head: u32,
        io: &Io,
        io_key: Key,
        want: Want,
        id: u64,
        mark: u64,
        pred: &mut impl FnMut(Pred),
    ) {
        let writes = io.writes();
        let exact = self.mode == MatchMode::Exact;
        let io_keyed = keyed(io);
        let bases = self.bases;
        let layout = self.layout;
        self.probes += 1;
        let (ents, regions, words, marks) = self.mem.parts();
        let (w, r) = (words[head as usize], words[head as usize + 1]);
        if w == NIL && (!writes || r == NIL) {
            return;
        }
        let mut visits = 0;
        let mut unlinked = 0;
        // The write list, then (for a write) the read list: a read meets writes only.
        let mut list = 0;
        let mut e = w;
        loop {
            while e != NIL {
                let x = &ents[e as usize];
                let next = x.next[L];
                visits += 1;
                let ours = x.tensor == io.tensor
                    && match want {
                        Want::Key(k) => x.key() == k,
                        Want::Row(slot, c0) => x.slot == slot && x.c0 == c0,
                        Want::All => true,
                    };
                if ours {
                    let met = if io_keyed
                        && x.flags & KEYED != 0
                        && x.ndims == io.ndims
                        && x.key() == io_key
                    {
                        // Both regions are their keys, and the keys are equal.
                        (true, writes)
                    } else if let Some(met) = meet_point(x, io, exact) {
                        met
                    } else {
                        meet(ents, regions, e, &layout, io, exact)
                    };
                    let at = Visit {
                        id,
                        mark,
                        kind: kind(list, io),
                    };
                    unlinked += at.met(ents, words, marks, e, met, bases, pred) as u32;
                }
                e = next;
            }
            if list == 1 || !writes {
                break;
            }
            (list, e) = (1, r);
        }
        self.visits += visits;
        self.live -= unlinked;
    }

    /// Records `io` (key `key`) as entry `e`, its region (if the key does not describe it) as
    /// record `region`, in the slot of its tensor for its shape.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert(&mut self, e: u32, region: u32, id: u64, handle: u32, io: &Io, key: Key) {
        let bases = self.bases;
        let (ents, regions, words, _) = self.mem.parts();
        let slot = slot_for(words, bases, io.tensor, key.shape());
        let mut flags = LIVE | if io.writes() { WRITE } else { 0 };
        if keyed(io) {
            flags |= KEYED;
        } else if let Some(r) = regions.get_mut(region as usize) {
            // The named dimensions only: the others are never read (`Io::dims`, `Io::range`).
            (r.tensor, r.dir, r.ndims) = (io.tensor, io.dir, io.ndims);
            for (d, x) in r.ranges.iter_mut().zip(io.dims()) {
                *d = *x;
            }
        }
        ents[e as usize] = Entry::new(id, handle, io, key, flags, slot);
        link_all(ents, words, e, bases.home_head(io.tensor, key), bases);
        self.inserted += 1;
        self.live += 1;
    }

    /// Starts keeping the row lists of `tensor`'s slot `slot` if it does not yet.
    #[inline]
    fn keep_rows(&mut self, tensor: u16, slot: u8) {
        let at = self.bases.slot_at(tensor, slot);
        if self.mem.parts().2[at] & ROWS_KEPT == 0 {
            self.start_keeping(tensor, slot, ROWS_KEPT);
        }
    }

    /// Starts keeping the lists (`LISTS_KEPT`) or the row lists (`ROWS_KEPT`) of `tensor`'s
    /// slot `slot`: the first lookup that needs them links the slot's live entries in (one
    /// pass over the entries), and every later insert into the slot links itself, until the
    /// slot empties. Slots no lookup scans (most: a lookup narrow in every dimension visits
    /// cells) never pay for them.
    #[cold]
    fn start_keeping(&mut self, tensor: u16, slot: u8, lists: u32) {
        let b = self.bases;
        let at = b.slot_at(tensor, slot);
        let (ents, _, words, _) = self.mem.parts();
        words[at] |= lists;
        for e in 0..ents.len() as u32 {
            let x = &ents[e as usize];
            if x.flags & (LIVE | DENSE) != LIVE || x.tensor != tensor || x.slot != slot {
                continue;
            }
            let kind = (x.flags & WRITE == 0) as u32;
            if lists == ROWS_KEPT {
                link_row(ents, words, e, b.row_head(tensor, slot, x.c0), kind);
            } else {
                link_shape(ents, words, e, at as u32, kind);
            }
        }
    }
}

/// A lookup by task `id` (its mark `mark`) on a list of `kind`.
pub(super) struct Visit {
    pub id: u64,
    pub mark: u64,
    pub kind: DepKind,
}

impl Visit {
    /// Entry `e` met the lookup: `(hit, covered)` from [`meet`] or its shortcut. A hit on
    /// another task is reported once per task (`marks`); a covered entry is unlinked. Returns
    /// whether it was.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn met(
        &self,
        ents: &mut [Entry],
        words: &mut [u32],
        marks: &mut [u64],
        e: u32,
        (hit, covered): (bool, bool),
        bases: Bases,
        pred: &mut impl FnMut(Pred),
    ) -> bool {
        let x = &ents[e as usize];
        if hit && x.id != self.id && marks[x.handle as usize] != self.mark {
            marks[x.handle as usize] = self.mark;
            pred(Pred {
                id: x.id,
                handle: x.handle,
                kind: self.kind,
            });
        }
        if covered {
            unlink(ents, words, e, bases);
        }
        covered
    }
}
