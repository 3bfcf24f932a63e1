//! Dense tables: the points of a tensor filed by their coordinates, without hashing or lists
//! (spec/runtime.md §3.3).
//!
//! A tensor given a table ([`TensorMap::set_dense`]) of `rows × cols` words files a point
//! access — `T[r]` of a table of rank 1 (`cols = 1`), `T[r, c]` of rank 2 — in the word of cell
//! `(r mod rows, c)` when that word is free: the word holds the entry's index, the entry is on no
//! list. Everything else of the tensor (other shapes, coordinates outside the table, a point
//! whose cell holds another live entry) goes to the lists as before, so the table is a cache in
//! front of them that never changes an answer: a lookup visits the cells of the table its
//! region can meet (an entry there is checked against the region as on a list: its row may be
//! another one of the same residue), then the lists, when the tensor has any entry on them.
//!
//! Task Bench's patterns (a stepped tensor, spec/runtime.md §3.5: row `t` written point by
//! point, rows `t − c` read) keep every entry in the table once its rows cover the window's
//! rows in flight: a write is one store, a read of `G[t − 1, i − 1 : i + 2]` three loads.

use super::key::{meet, meet_point, point_dims, Entry, Key, DENSE, KEYED, LIVE, WRITE};
use super::lists::{
    Bases, DENSE_BASE, DENSE_COLS, DENSE_COUNT, DENSE_LIVE, DENSE_RANK, DENSE_ROWS,
};
use super::lookup::Visit;
use super::{DepKind, Io, MatchMode, Pred, Storage, TensorMap, NIL};

/// Rows a table has at most: enough for a pattern's rows in flight in a window.
pub const MAX_ROWS: u32 = 64;

/// A tensor's table, read from its head words.
#[derive(Clone, Copy)]
pub(super) struct Table {
    base: u32,
    cols: u32,
    rows_mask: u32,
    rank: u8,
}

impl Table {
    /// `tensor`'s table, if it has one.
    #[inline(always)]
    pub fn of(words: &[u32], b: Bases, tensor: u16) -> Option<Table> {
        let at = b.tensor_at(tensor);
        let cols = words[at + DENSE_COLS];
        (cols != 0).then(|| Table {
            base: words[at + DENSE_BASE],
            cols,
            rows_mask: words[at + DENSE_ROWS],
            rank: words[at + DENSE_RANK] as u8,
        })
    }

    /// The word of cell `(r, c)`: row `r` and column `c` modulo the table's.
    #[inline(always)]
    fn word(&self, r: i64, c: i64) -> u32 {
        let row = (r as u64 & self.rows_mask as u64) as u32;
        let col = (c as u64 & (self.cols - 1) as u64) as u32;
        self.base + row * self.cols + col
    }

    /// The word of the cell of point `io` (a point of the table's rank, at coordinates that
    /// are not negative).
    #[inline(always)]
    fn cell(&self, io: &Io) -> Option<u32> {
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
    /// left of the layout's `dense` words, a power of two from 2 to [`MAX_ROWS`]. A point
    /// `T[r, c]` takes cell `(r mod rows, c mod cols)`: `cols` need only cover the columns one
    /// row has in flight at a time, and `rows` the rows. Returns whether the tensor has such a
    /// table now (a table given before, of the same rank and columns, counts). A table is
    /// kept for the map's life, [`TensorMap::reset`] included; it is a cache that changes no
    /// answer, so any tensor may have one, but only one whose accesses are mostly points of
    /// one row at a time is faster for it. None in exact mode (an equal region is found
    /// on one home list already), for a tensor that has live entries, or past the layout's.
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
            return words[at + DENSE_COLS] == cols && words[at + DENSE_RANK] == rank as u32;
        }
        if words[at] != 0 {
            return false;
        }
        let left = self.layout.dense - self.dense_used;
        let fit = left / cols;
        if fit < 2 {
            return false;
        }
        let rows = (1u32 << (31 - fit.leading_zeros())).min(MAX_ROWS);
        let base = self.layout.dense_base() as u32 + self.dense_used;
        words[at + DENSE_BASE] = base;
        words[at + DENSE_COLS] = cols;
        words[at + DENSE_ROWS] = rows - 1;
        words[at + DENSE_RANK] = rank as u32;
        self.dense_used += rows * cols;
        true
    }

    /// [`TensorMap::add_some`]'s lookup of `io` for a tensor with table `t`: the table's
    /// cells `io` can meet, then (when the tensor has entries there) the lists.
    pub(super) fn lookup_dense(
        &mut self,
        t: Table,
        io: &Io,
        id: u64,
        mark: u64,
        pred: &mut impl FnMut(Pred),
    ) {
        let b = self.bases;
        let at = b.tensor_at(io.tensor);
        let head = self.mem.parts().2[at];
        if head & DENSE_LIVE != 0 {
            match t.cell(io) {
                Some(cell) => self.meet_cell(cell, io, id, mark, pred),
                None => self.scan_table(t, io, id, mark, pred),
            }
        }
        if self.mem.parts().2[at] & !DENSE_LIVE != 0 {
            self.lookup(io, Key::of(io), id, mark, pred);
        }
    }

    /// The lookup of point `io` in table `t`, whose cell is `cell`: the entry there, if it has
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
        let kind = match (write, io.reads()) {
            (true, true) => DepKind::Raw,
            (true, false) => DepKind::Waw,
            (false, _) => DepKind::War,
        };
        let at = Visit { id, mark, kind };
        let covered = at.met(ents, words, marks, e, (true, io.writes()), bases, pred);
        self.live -= covered as u32;
    }

    /// Visits the cells of table `t` that can hold a point sharing an element with `io`: the
    /// rows and columns `io` names (each of the table's once, when it names more of them).
    /// An entry found there may be of another row or column of the same residues: it is
    /// checked against `io` as on a list.
    fn scan_table(&mut self, t: Table, io: &Io, id: u64, mark: u64, pred: &mut impl FnMut(Pred)) {
        let bases = self.bases;
        let writes = io.writes();
        let rows = t.rows_mask as i64 + 1;
        // Rows: those `io` names, at most one pass over the table's (then every entry is checked
        // against `io`, as on a list).
        let (r0, r1) = match io.ndims {
            0 => (0, rows),
            _ => {
                let (a, b) = io.ranges[0];
                (a.max(0), b)
            }
        };
        let (first, rows_visited) = if r1 <= r0 {
            (0, 0)
        } else if r1 - r0 >= rows {
            (0, rows)
        } else {
            (r0, r1 - r0)
        };
        // Columns the same way: those `io` names (all of the table's when it names more), or
        // all when it names none.
        let cols = t.cols as i64;
        let (c0, c1) = match (t.rank, io.ndims) {
            (2, 2..) => {
                let (a, b) = io.ranges[1];
                let a = a.max(0);
                if b <= a {
                    (0, 0)
                } else if b - a >= cols {
                    (0, cols)
                } else {
                    (a, b)
                }
            }
            _ => (0, cols),
        };
        if c1 <= c0 || rows_visited == 0 {
            return;
        }
        let exact = false;
        let layout = self.layout;
        self.probes += 1;
        let (ents, regions, words, marks) = self.mem.parts();
        let mut visits = 0u64;
        let mut unlinked = 0u32;
        for r in first..first + rows_visited {
            for c in c0..c1 {
                let e = words[t.word(r, c) as usize];
                if e == NIL {
                    continue;
                }
                let x = &ents[e as usize];
                let write = x.flags & WRITE != 0;
                if !write && !writes {
                    // A read meets writes only.
                    continue;
                }
                visits += 1;
                let met = match meet_point(x, io, exact) {
                    Some(m) => m,
                    None => meet(ents, regions, e, &layout, io, exact),
                };
                let kind = match (write, io.reads()) {
                    (true, true) => DepKind::Raw,
                    (true, false) => DepKind::Waw,
                    (false, _) => DepKind::War,
                };
                let at = Visit { id, mark, kind };
                unlinked += at.met(ents, words, marks, e, met, bases, pred) as u32;
            }
        }
        self.visits += visits;
        self.live -= unlinked;
    }

    /// Files point `io` of task `id` (held by `handle`) as entry `e` in table `t` if its cell
    /// is free; returns false, having done nothing, if not (the lists take it).
    #[inline]
    pub(super) fn insert_dense(&mut self, t: Table, e: u32, id: u64, handle: u32, io: &Io) -> bool {
        let Some(cell) = t.cell(io) else {
            return false;
        };
        let at = self.bases.tensor_at(io.tensor);
        let (ents, _, words, _) = self.mem.parts();
        if words[cell as usize] != NIL {
            return false;
        }
        let flags = LIVE | KEYED | DENSE | if io.writes() { WRITE } else { 0 };
        let mut x = Entry::new(id, handle, io, Key::of(io), flags, 0);
        x.head_home = cell;
        ents[e as usize] = x;
        words[cell as usize] = e;
        words[at + DENSE_COUNT] += 1;
        words[at] |= DENSE_LIVE;
        self.inserted += 1;
        self.live += 1;
        true
    }
}

/// Takes entry `e` of a dense table out of its cell and the table's count.
#[inline]
pub(super) fn unlink(ents: &mut [Entry], words: &mut [u32], e: u32, b: Bases) {
    let x = &mut ents[e as usize];
    x.flags &= !LIVE;
    let (cell, at) = (x.head_home as usize, b.tensor_at(x.tensor));
    if words[cell] == e {
        words[cell] = NIL;
    }
    words[at + DENSE_COUNT] -= 1;
    if words[at + DENSE_COUNT] == 0 {
        words[at] &= !DENSE_LIVE;
    }
}
