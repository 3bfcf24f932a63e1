//! Dense tables: the points of a tensor filed by their coordinates, without hashing
//! (spec/runtime.md §3.3).
//!
//! A tensor given a table ([`TensorMap::set_dense`]) of `rows × cols` cells files a point
//! access — `T[r]` of a table of rank 1 (`cols = 1`), `T[r, c]` of rank 2 — in the word of cell
//! `(r mod rows, c mod cols)`: the word holds the entry's index. An entry the cell held, still
//! live (of an older row or column of the same residues, or the same point not covered), moves
//! to the map's lists, as does everything else of the tensor (other shapes, negative
//! coordinates), so the table is a cache in front of them that never changes an answer: a
//! lookup visits the cells (or the rows' lists, for a wide one) of the table its region can meet
//! — an entry there is checked against the region as on a list, since its coordinates may be
//! others of the same residues — then the map's lists, unless nothing the tensor ever put there
//! reaches the region's rows (`LISTED_END`).
//!
//! Task Bench's patterns (a stepped tensor, spec/runtime.md §3.5: row `t` written point by
//! point, rows `t − c` read) read the table alone: a write is one store, a read of
//! `G[t − 1, i − 1 : i + 2]` three loads.

use super::key::{
    kind, meet, meet_point, point_dims, Entry, ALL, DENSE, KEYED, LEVELS, LIVE, ON_ROW, SHAPE,
    WRITE,
};
use super::lists::{
    link, link_all, off, slot_for, Bases, DENSE_BASE, DENSE_COLS, DENSE_COUNT, DENSE_LIVE,
    DENSE_RANK, DENSE_ROWS, LISTED_END, TENSOR_HEAD,
};
use super::lookup::Visit;
use super::{Io, MatchMode, Pred, Storage, TensorMap, NIL};

/// Words a layout gives dense tables beyond a cell per entry: the list heads of 128 rows, so
/// that a table as large as the entries still has its rows' heads.
pub const SPARE_WORDS: u32 = 128;

/// A lookup spanning at most this many columns of a row visits its cells; a wider one walks
/// the row's list (the row's live entries).
pub(super) const FEW_COLUMNS: i64 = 16;

/// In a tensor's `DENSE_RANK` word, above the rank: its table keeps its rows' lists.
const LISTS_KEPT: u32 = 1 << 8;

/// A tensor's table, read from its head words: `rows` list heads from `base`, then the cells,
/// row by row.
#[derive(Clone, Copy)]
pub(super) struct Table {
    base: u32,
    cols: u32,
    rows_mask: u32,
    rank: u8,
    /// Whether its entries are on their rows' lists: only once a wide lookup needs them (the
    /// first one links the live entries in), so that tables only ever read by cells pay no
    /// links.
    lists: bool,
}

/// The head words of `tensor` (`lists.rs`), read at once: one bounds check.
#[inline(always)]
pub(super) fn head(words: &[u32], b: Bases, tensor: u16) -> Option<[u32; TENSOR_HEAD]> {
    let at = b.tensor_at(tensor);
    words.get(at..at + TENSOR_HEAD)?.try_into().ok()
}

impl Table {
    /// `tensor`'s table, if it has one.
    #[inline(always)]
    pub fn of(words: &[u32], b: Bases, tensor: u16) -> Option<Table> {
        Table::in_head(&head(words, b, tensor)?)
    }

    /// The table a tensor's head words (`head`) describe, if they describe one.
    #[inline(always)]
    pub fn in_head(head: &[u32; TENSOR_HEAD]) -> Option<Table> {
        let cols = head[DENSE_COLS];
        (cols != 0).then(|| Table {
            base: head[DENSE_BASE],
            cols,
            rows_mask: head[DENSE_ROWS],
            rank: head[DENSE_RANK] as u8,
            lists: head[DENSE_RANK] & LISTS_KEPT != 0,
        })
    }

    /// Its rank: 1 or 2.
    #[inline(always)]
    pub fn rank(&self) -> u8 {
        self.rank
    }

    /// Its columns (a power of two).
    #[inline(always)]
    pub fn columns(&self) -> u32 {
        self.cols
    }

    /// Whether its entries are on their rows' lists.
    #[inline(always)]
    pub fn keeps_lists(&self) -> bool {
        self.lists
    }

    /// The table row of row `r`.
    #[inline(always)]
    fn row(&self, r: i64) -> u32 {
        (r as u64 & self.rows_mask as u64) as u32
    }

    /// The word of the list head of table row `row`.
    #[inline(always)]
    fn head(&self, row: u32) -> u32 {
        self.base + row
    }

    /// The list heads before the cells: one a row for a table of rank 2, none for one of rank
    /// 1 (whose rows are single cells: a lookup visits them).
    #[inline(always)]
    fn heads(&self) -> u32 {
        if self.rank == 2 {
            self.rows_mask + 1
        } else {
            0
        }
    }

    /// The word of cell `(r, c)`: row `r` and column `c` modulo the table's.
    #[inline(always)]
    pub fn word(&self, r: i64, c: i64) -> u32 {
        let col = (c as u64 & (self.cols - 1) as u64) as u32;
        self.base + self.heads() + self.row(r) * self.cols + col
    }

    /// The word of the cell of point `io` (a point of the table's rank, at coordinates that
    /// are not negative).
    #[inline(always)]
    pub fn cell(&self, io: &Io) -> Option<u32> {
        if point_dims(io) != self.rank {
            return None;
        }
        let (r, c) = (
            io.ranges[0].0,
            if self.rank == 2 { io.ranges[1].0 } else { 0 },
        );
        if r < 0 || c < 0 {
            return None;
        }
        Some(self.word(r, c))
    }
}

impl<S: Storage> TensorMap<S> {
    /// Gives `tensor` a dense table for its points of rank `rank` (1 or 2) with `cols`
    /// columns (1 for rank 1; rounded up to a power of two) and as many rows as fit what is
    /// left of the layout's `dense` words (a row takes `cols + 1`: its cells and its list's
    /// head; a row of rank 1 its one cell), a power of two of at least 2. A point `T[r, c]`
    /// takes cell `(r mod rows, c mod cols)`: `cols` need only cover the columns one row has in
    /// flight at a time, and `rows` the rows. Returns whether the tensor has such a table now (a table
    /// given before, of the same rank and columns, counts). A table is kept for the map's
    /// life, [`TensorMap::reset`] included; it is a cache that changes no answer, so any tensor
    /// may have one, but only one whose accesses are mostly points of one row at a time is
    /// faster for it. None in exact mode (an equal region is found on one home list already),
    /// for a tensor that has live entries, or past the layout's.
    pub fn set_dense(&mut self, tensor: u16, rank: u8, cols: u32) -> bool {
        if tensor as u32 >= self.layout.tensors
            || self.mode != MatchMode::Overlap
            || !(rank == 1 || rank == 2)
            || cols == 0
            || (rank == 1 && cols != 1)
        {
            return false;
        }
        let Some(cols) = cols.checked_next_power_of_two() else {
            return false;
        };
        let at = self.bases.tensor_at(tensor);
        let words = self.mem.parts().2;
        if words[at + DENSE_COLS] != 0 {
            return words[at + DENSE_COLS] == cols && words[at + DENSE_RANK] as u8 == rank;
        }
        if words[at] != 0 {
            return false;
        }
        let left = self.layout.dense - self.dense_used;
        let per_row = cols + (rank == 2) as u32;
        let fit = left / per_row;
        if fit < 2 {
            return false;
        }
        let rows = 1u32 << (31 - fit.leading_zeros());
        let base = self.layout.dense_base() as u32 + self.dense_used;
        words[at + DENSE_BASE] = base;
        words[at + DENSE_COLS] = cols;
        words[at + DENSE_ROWS] = rows - 1;
        words[at + DENSE_RANK] = rank as u32;
        self.dense_used += rows * per_row;
        true
    }

    /// [`TensorMap::add_some`]'s steps in table `t` for region `io` of its tensor: looks it up
    /// in the table (if `lookup`) and files it there (if `record` gives its entry and the table
    /// takes it). Returns whether the lists need a lookup too (`lookup`, the tensor has entries
    /// there, and they can reach `io`'s rows), and whether the table took the region; the
    /// caller does the rest on the lists.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_dense(
        &mut self,
        t: Table,
        io: &Io,
        id: u64,
        handle: u32,
        mark: u64,
        lookup: bool,
        record: Option<u32>,
        pred: &mut impl FnMut(Pred),
    ) -> (bool, bool) {
        let at = self.bases.tensor_at(io.tensor);
        let cell = t.cell(io);
        let mut lists = false;
        if lookup {
            if self.mem.parts().2[at] & DENSE_LIVE != 0 {
                match cell {
                    Some(cell) => self.meet_cell(cell, io, id, mark, pred),
                    None => self.scan_table(t, io, id, mark, pred),
                }
            }
            let words = self.mem.parts().2;
            // The lists hold nothing of the rows from `LISTED_END` on (a stepped tensor's read
            // of a recent row, whose older rows' entries the table has moved to the lists).
            lists = words[at] & !DENSE_LIVE != 0 && {
                let end = words[at + LISTED_END];
                io.ndims == 0 || end == u32::MAX || io.ranges[0].0 < end as i64
            };
        }
        let filed = match (record, cell) {
            (Some(e), Some(cell)) => {
                self.file(t, cell, e, id, handle, io);
                true
            }
            _ => false,
        };
        (lists, filed)
    }

    /// Notes that `io`, of a tensor with a table, goes on the lists: the bound of their rows
    /// takes its end in dimension 0 (no bound, `u32::MAX`, if it does not name it or ends
    /// there or beyond).
    #[inline]
    pub(super) fn note_listed(&mut self, io: &Io) {
        let at = self.bases.tensor_at(io.tensor) + LISTED_END;
        let end = match io.ndims {
            0 => u32::MAX,
            _ => io.ranges[0].1.clamp(0, u32::MAX as i64) as u32,
        };
        let words = self.mem.parts().2;
        words[at] = words[at].max(end);
    }

    /// The lookup of point `io` in the cell `cell` of its table: the entry there, if it has
    /// `io`'s coordinates (not only their residues), is the same point.
    #[inline(always)]
    fn meet_cell(&mut self, cell: u32, io: &Io, id: u64, mark: u64, pred: &mut impl FnMut(Pred)) {
        let bases = self.bases;
        self.probes += 1;
        let (ents, _, words, marks) = self.mem.parts();
        let e = words[cell as usize];
        if e == NIL {
            return;
        }
        let x = &ents[e as usize];
        let write = x.flags & WRITE != 0;
        let same = x.c0 == io.ranges[0].0 && (io.ndims == 1 || x.c1 == io.ranges[1].0);
        if !same || (!write && !io.writes()) {
            return;
        }
        self.visits += 1;
        let at = Visit {
            id,
            mark,
            // `key::kind` by the list the entry would be on: 0 writes, 1 reads.
            kind: kind(!write as usize, io),
        };
        let covered = at.met(ents, words, marks, e, (true, io.writes()), bases, pred);
        self.live -= covered as u32;
    }

    /// Visits the entries of table `t` that can share an element with `io`: in the rows `io`
    /// names (each of the table's once, when it names more), the cells of the columns it names
    /// when they are few, else the rows' lists (kept from the first such lookup on). Every
    /// entry met is checked against `io` as on a list: its coordinates may be others of the
    /// same residues.
    fn scan_table(&mut self, t: Table, io: &Io, id: u64, mark: u64, pred: &mut impl FnMut(Pred)) {
        let rows = t.rows_mask as i64 + 1;
        let (r0, r1) = match io.ndims {
            0 => (0, rows),
            _ => (io.ranges[0].0.max(0), io.ranges[0].1),
        };
        let (first, nrows) = if r1 <= r0 {
            return;
        } else if r1 - r0 >= rows {
            (0, rows)
        } else {
            (r0, r1 - r0)
        };
        let cols = match (t.rank, io.ndims) {
            (2, 2..) => {
                let (a, b) = (io.ranges[1].0.max(0), io.ranges[1].1);
                if b <= a {
                    return;
                }
                Some((a, b)).filter(|_| b - a <= FEW_COLUMNS.min(t.cols as i64))
            }
            (2, _) => None,
            _ => Some((0, 1)),
        };
        if cols.is_none() && !t.lists {
            self.keep_lists(t, io.tensor);
        }
        self.probes += nrows as u64;
        for r in first..first + nrows {
            match cols {
                Some((a, b)) => {
                    for c in a..b {
                        let e = self.mem.parts().2[t.word(r, c) as usize];
                        if e != NIL {
                            self.meet_entry(e, io, id, mark, pred);
                        }
                    }
                }
                None => {
                    let mut e = self.mem.parts().2[t.head(t.row(r)) as usize];
                    while e != NIL {
                        let next = self.mem.parts().0[e as usize].next[SHAPE];
                        self.meet_entry(e, io, id, mark, pred);
                        e = next;
                    }
                }
            }
        }
    }

    /// Checks table entry `e` against `io`: reports it, unlinks it if `io` covers it.
    #[inline(always)]
    fn meet_entry(&mut self, e: u32, io: &Io, id: u64, mark: u64, pred: &mut impl FnMut(Pred)) {
        let (bases, layout) = (self.bases, self.layout);
        let (ents, regions, words, marks) = self.mem.parts();
        let x = &ents[e as usize];
        let write = x.flags & WRITE != 0;
        if !write && !io.writes() {
            // A read meets writes only.
            return;
        }
        self.visits += 1;
        let met = match meet_point(x, io, false) {
            Some(m) => m,
            None => meet(ents, regions, e, &layout, io, false),
        };
        let at = Visit {
            id,
            mark,
            // `key::kind` by the list the entry would be on: 0 writes, 1 reads.
            kind: kind(!write as usize, io),
        };
        self.live -= at.met(ents, words, marks, e, met, bases, pred) as u32;
    }

    /// Files point `io` of task `id` (held by `handle`) as entry `e` in cell `cell` of table
    /// `t` ([`file_in_cell`]).
    #[inline(always)]
    pub(super) fn file(&mut self, t: Table, cell: u32, e: u32, id: u64, handle: u32, io: &Io) {
        let b = self.bases;
        let (ents, _, words, _) = self.mem.parts();
        file_in_cell(ents, words, b, t, cell, e, id, handle, io);
        self.inserted += 1;
        self.live += 1;
    }

    /// Starts keeping the rows' lists of `tensor`'s table `t`: links its live entries in (one
    /// pass over its cells); later inserts link themselves.
    #[cold]
    fn keep_lists(&mut self, t: Table, tensor: u16) {
        let at = self.bases.tensor_at(tensor);
        let (ents, _, words, _) = self.mem.parts();
        words[at + DENSE_RANK] |= LISTS_KEPT;
        for row in 0..=t.rows_mask {
            for col in 0..t.cols {
                let e = words[(t.base + t.heads() + row * t.cols + col) as usize];
                if e != NIL {
                    ents[e as usize].flags |= ON_ROW;
                    link(ents, words, e, SHAPE, t.head(row));
                }
            }
        }
    }
}

/// Files point `io` of task `id` (held by `handle`) as entry `e` in cell `cell` of table `t`
/// (`Table::cell`), moving the entry the cell holds, if any (of an older row or column of the
/// same residues, or the same point not covered), to the lists. The caller counts the entry
/// inserted and live.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn file_in_cell(
    ents: &mut [Entry],
    words: &mut [u32],
    b: Bases,
    t: Table,
    cell: u32,
    e: u32,
    id: u64,
    handle: u32,
    io: &Io,
) {
    let at = b.tensor_at(io.tensor);
    let held = words[cell as usize];
    if held != NIL {
        move_to_lists(ents, words, b, t, held);
    }
    let flags = LIVE | KEYED | DENSE | if io.writes() { WRITE } else { 0 };
    // The point's key (`Key::of`): level 0 in the dimensions it names, its coordinates the
    // cells; a dimension 1 it does not name (rank 1) is whole.
    let tile = t.rank == 2;
    ents[e as usize] = Entry {
        id,
        c0: io.ranges[0].0,
        c1: if tile { io.ranges[1].0 } else { 0 },
        handle,
        tensor: io.tensor,
        flags: if t.lists { flags | ON_ROW } else { flags },
        ndims: io.ndims,
        s0: 0,
        s1: if tile { 0 } else { ALL },
        slot: 0,
        head_home: cell,
        prev: [NIL; LEVELS],
        next: [NIL; LEVELS],
    };
    words[cell as usize] = e;
    if t.lists {
        link(ents, words, e, SHAPE, t.head(t.row(io.ranges[0].0)));
    }
    words[at + DENSE_COUNT] += 1;
    words[at] |= DENSE_LIVE;
}

/// Moves live entry `e` of table `t` out of its cell and onto the map's lists, as a keyed
/// point of its tensor's shape slot for points.
#[cold]
fn move_to_lists(ents: &mut [Entry], words: &mut [u32], b: Bases, t: Table, e: u32) {
    let x = ents[e as usize];
    if x.flags & ON_ROW != 0 {
        off(
            ents,
            words,
            SHAPE,
            t.head(t.row(x.c0)),
            x.prev[SHAPE],
            x.next[SHAPE],
        );
    }
    let at = b.tensor_at(x.tensor);
    words[x.head_home as usize] = NIL;
    words[at + DENSE_COUNT] -= 1;
    if words[at + DENSE_COUNT] == 0 {
        words[at] &= !DENSE_LIVE;
    }
    let key = x.key();
    let slot = slot_for(words, b, x.tensor, key.shape());
    let y = &mut ents[e as usize];
    y.flags &= !(DENSE | ON_ROW);
    y.slot = slot;
    y.prev = [NIL; LEVELS];
    y.next = [NIL; LEVELS];
    link_all(ents, words, e, b.home_head(x.tensor, key), b);
    let end = &mut words[at + LISTED_END];
    *end = (*end).max(x.c0.saturating_add(1).clamp(0, u32::MAX as i64) as u32);
}

/// Takes entry `e` of a dense table out of its cell, its row's list (if on it) and the
/// table's count.
#[inline(always)]
pub(super) fn unlink(ents: &mut [Entry], words: &mut [u32], e: u32, b: Bases) {
    let x = &mut ents[e as usize];
    let listed = x.flags & ON_ROW != 0;
    x.flags &= !(LIVE | ON_ROW);
    let (cell, at) = (x.head_home as usize, b.tensor_at(x.tensor));
    let (prev, next, r) = (x.prev[SHAPE], x.next[SHAPE], x.c0);
    if words[cell] == e {
        words[cell] = NIL;
    }
    if listed {
        // The head of the entry's table row (`Table::head`).
        let head = words[at + DENSE_BASE] + (r as u64 & words[at + DENSE_ROWS] as u64) as u32;
        off(ents, words, SHAPE, head, prev, next);
    }
    words[at + DENSE_COUNT] -= 1;
    if words[at + DENSE_COUNT] == 0 {
        words[at] &= !DENSE_LIVE;
    }
}
