//! Written-once tables (spec/runtime.md §4.8): the writers of a tensor written once, filed by
//! their cells in shared memory, so that its writes and reads skip the maps — for a shared
//! tensor, the global map and its lock.
//!
//! A tensor **written once** (§3.5) is stepped by an outermost loop: step `t` writes points of
//! row `t`, each element by one task at most, and reads rows `t − c`, `1 ≤ c ≤ reach`. Its
//! writes are only inserted and its reads only looked up, so a read needs, of each element it
//! names, just the one task that wrote it. A table of `rows × cols` cells, `rows` a power of
//! two above `reach`, holds in cell `(r mod rows, col)` the row and the writer (id and handle)
//! of the element written last there. A write is two stores, a read a load pair a cell,
//! whichever AICPU made them; none takes a lock, and no entry is left to retire.
//!
//! A local tensor's cells are each touched by one AICPU, in id order: the only one with the
//! tensor (one AICPU), or its column's owner (a tensor keyed in dimension 1). A shared tensor's
//! cells need no lock either: the needs order every access of a cell (§4.1 step 4). A read of row
//! `r` is recorded after every task before its step at least (its need, §3.5) — after the
//! writers of row `r`, which are in step `r`. A write of row `r + rows` is recorded after every
//! task before its step, and so after every reader of row `r` (their steps are at most
//! `r + reach < r + rows`). The watermark that publishes those records (Release, Acquire)
//! orders the cells' plain (Relaxed) stores and loads. A cell whose row is not the one read
//! holds no writer of it.
//!
//! Each table also has two **join words** a row (§4.7): the join an AICPU opened for the
//! writers of a whole row, published for the other AICPUs' readers of the row.
//!
//! A write the table cannot take — coordinates outside it, an id of 2⁴⁰ or more, or a cell
//! whose element may still be read — **spills**: it goes to the tensor's map as before, and the
//! table's spill word, set before the write's record is published, sends every later read of
//! the tensor to the map too.

use super::*;
use crate::limits::MAX_TASK_IO;
use crate::share::{OnceShape, USE_SITES};
use crate::Io;

/// Tables a launch has at most (tensors past the first [`ONCE_TENSORS`] have none).
pub const ONCE_TABLES: usize = 8;
// A site's plan names the tables its reads use in one byte ([`SitePlan`]).
const _: () = assert!(ONCE_TABLES <= 8);
/// Tensors that may have a table: those below it (an entry each in [`OnceTables`]' index).
pub const ONCE_TENSORS: usize = 64;
/// Bits of a cell's second word below the writer's id: its handle (`aicpu × cap + slot`).
const HANDLE_BITS: u32 = 24;

/// Cells of [`Shared::once`] a window slot brings: a table holds at least two rows, and a
/// row of a step as wide as the window then still fits.
pub const ONCE_CELLS_PER_SLOT: usize = 2;

/// Rows of join words (two words a row) each table may have beyond its cells' words: a table
/// of up to this many rows, whose cells take all the cells' words, still fits.
pub const ONCE_JOIN_ROWS: usize = 4;

/// Cells [`Shared::once`] has at least, whatever the windows: a step's row is as wide as the
/// program makes it, not the window, and small windows keep tables for rows of up to 4,096
/// elements (128 KiB).
pub const ONCE_MIN_CELLS: usize = 8192;

/// Words of [`Shared::once`] for `n` AICPUs of `cap` slots: a spill word per table, then for
/// each table two words a row (its row join) and two words a cell: room for
/// [`ONCE_JOIN_ROWS`] rows of join words a table, and [`ONCE_CELLS_PER_SLOT`] cells a slot of
/// the windows, at least [`ONCE_MIN_CELLS`]. A table that does not fit in what the tables
/// before it left is not made: its tensor goes to its map.
pub fn once_len(n: usize, cap: usize) -> usize {
    let cells = (ONCE_CELLS_PER_SLOT * n * cap).max(ONCE_MIN_CELLS);
    ONCE_TABLES * (1 + 2 * ONCE_JOIN_ROWS) + 2 * cells
}

/// A cell's two words: the row of the element it holds (+ 1; 0: none), and its writer (id
/// above [`HANDLE_BITS`], handle below).
type CellWords = [AtomicU64; 2];

/// The cell whose first word is `words[at]`, if `words` holds it (one bounds check for both
/// words).
#[inline(always)]
fn cell_at(words: &[AtomicU64], at: usize) -> Option<&CellWords> {
    words.get(at..)?.first_chunk()
}

/// One tensor's table: cells `rows × cols` from word `base` of [`Shared::once`], its spill
/// word at `spill`.
#[derive(Clone, Copy, Debug, Default)]
struct Table {
    rank: u8,
    rows_mask: u32,
    cols: u32,
    base: u32,
    spill: u32,
    /// The first word of its row joins: two a row, `base` follows them.
    joins: u32,
}

/// An AICPU's description of the launch's tables: every AICPU lays them out alike from the
/// same program, bindings and sizes ([`OnceTables::lay_out`]).
#[derive(Clone, Copy, Debug)]
pub struct OnceTables {
    tables: [Table; ONCE_TABLES],
    len: u8,
    /// Whether row joins are published and looked up ([`OnceTables::row_join`]).
    row_joins: bool,
    /// `index[x]`: 1 + the table of tensor `x`, 0 if it has none.
    index: [u8; ONCE_TENSORS],
}

impl Default for OnceTables {
    fn default() -> OnceTables {
        OnceTables {
            tables: [Table::default(); ONCE_TABLES],
            len: 0,
            row_joins: true,
            index: [0; ONCE_TENSORS],
        }
    }
}

/// A join published as its row's ([`OnceTables::row_join`]): join `join` of AICPU `aicpu`,
/// opened with tag `tag`. Its writers are the row's; a task registers on it as on its own
/// AICPU's joins (a list that was closed, or reopened with another tag, takes nothing: the
/// writers completed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowJoin {
    /// The AICPU that opened it.
    pub aicpu: u32,
    /// Its index among that AICPU's joins (below [`super::JOINS`]).
    pub join: u32,
    /// The tag it was opened with.
    pub tag: u32,
}

impl RowJoin {
    /// The join word: the join's index in the top byte, its AICPU in the 24 bits below, its
    /// tag in the low 32 (the row it stands for is in the word before it).
    fn pack(self) -> u64 {
        (self.join as u64) << 56 | (self.aicpu as u64 & ((1 << 24) - 1)) << 32 | self.tag as u64
    }

    /// The join a join word names ([`RowJoin::pack`]).
    fn unpack(word: u64) -> RowJoin {
        RowJoin {
            aicpu: (word >> 32) as u32 & ((1 << 24) - 1),
            join: (word >> 56) as u32,
            tag: word as u32,
        }
    }
}

/// What a row's join word says of a read ([`OnceTables::row_word`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowWord {
    /// The read is not a whole row of a rank-2 table, or the launch has no row joins.
    NoWord,
    /// A whole row whose join is not published (yet): no join stands for it. (Every join
    /// opened for a row is published at once, and the word of a row is not taken by a later
    /// row while a read of it records, §4.7.)
    Unpublished,
    /// The row's join.
    Named(RowJoin),
}

/// The writer a cell holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Writer {
    /// Its id.
    pub id: u64,
    /// Its handle: `aicpu × cap + slot`.
    pub handle: u32,
}

impl Writer {
    /// The writer a cell's second word names: its id above [`HANDLE_BITS`], its handle below.
    #[inline(always)]
    fn unpack(word: u64) -> Writer {
        Writer {
            id: word >> HANDLE_BITS,
            handle: (word & ((1 << HANDLE_BITS) - 1)) as u32,
        }
    }
}

impl OnceTables {
    /// Lays the tables out in `words` words: for each tensor below [`ONCE_TENSORS`] in order
    /// with a [`crate::share::once_shape`], `rows` the power of two above its reach (at least
    /// 2), while they fit. Handles must fit the cells' 24 bits (`handles`: `n × cap`).
    pub fn lay_out(
        shapes: impl Iterator<Item = (u16, OnceShape)>,
        words: usize,
        handles: usize,
    ) -> OnceTables {
        let mut t = OnceTables::default();
        if handles > 1 << HANDLE_BITS || words < ONCE_TABLES {
            return t;
        }
        let mut next = ONCE_TABLES;
        for (x, s) in shapes {
            if x as usize >= ONCE_TENSORS || t.len as usize == ONCE_TABLES {
                break;
            }
            let Some(rows) = (s.reach as u64 + 1).max(2).checked_next_power_of_two() else {
                continue;
            };
            // Two words a row for its row join, then two a cell.
            let cells = rows.saturating_mul(s.cols as u64);
            let len = cells.saturating_add(rows).saturating_mul(2);
            if len > (words - next) as u64 {
                continue;
            }
            t.tables[t.len as usize] = Table {
                rank: s.rank,
                rows_mask: (rows - 1) as u32,
                cols: s.cols,
                base: (next + 2 * rows as usize) as u32,
                spill: t.len as u32,
                joins: next as u32,
            };
            t.len += 1;
            t.index[x as usize] = t.len;
            next += len as usize;
        }
        t
    }

    /// Whether any tensor has a table.
    #[inline(always)]
    pub fn any(&self) -> bool {
        self.len != 0
    }

    /// Whether `tensor` has a table.
    #[inline(always)]
    pub fn has(&self, tensor: u16) -> bool {
        self.index.get(tensor as usize).is_some_and(|&i| i != 0)
    }

    #[inline(always)]
    fn of(&self, tensor: u16) -> Option<&Table> {
        let i = *self.index.get(tensor as usize)? as usize;
        self.tables.get(i.checked_sub(1)?)
    }

    /// Whether a write of `tensor` has spilled to its map: its reads look there too.
    #[inline(always)]
    pub fn spilled(&self, words: &[AtomicU64], tensor: u16) -> bool {
        self.of(tensor)
            .is_some_and(|t| words[t.spill as usize].load(Ordering::Relaxed) != 0)
    }

    /// Sends the reads of `tensor` to its map too, from the record being made on
    /// (whose publication orders this store before every read that needs it).
    pub fn spill(&self, words: &[AtomicU64], tensor: u16) {
        if let Some(t) = self.of(tensor) {
            words[t.spill as usize].store(1, Ordering::Relaxed);
        }
    }

    /// Files the write `io` of task `id` (handle `handle`) in its tensor's table. Returns
    /// false, having set the table's spill word, when the table cannot take it: the write
    /// then goes to the tensor's map.
    pub fn write(&self, words: &[AtomicU64], io: &Io, id: u64, handle: u32) -> bool {
        let Some(t) = self.of(io.tensor) else {
            return false;
        };
        let fits = id < 1 << (64 - HANDLE_BITS);
        if let Some((r, cell)) = t.free_cell(words, io).filter(|_| fits) {
            Table::fill(cell, r, id, handle);
            return true;
        }
        words[t.spill as usize].store(1, Ordering::Relaxed);
        false
    }

    /// Calls `f` with the writer of each element of the read `io` its tensor's table holds
    /// (one call a cell, columns in order). Elements outside the table have no writer there.
    /// Returns false, having called nothing, for a read that names other than one row, which
    /// no read of a tensor written once does (§3.5): the table cannot answer it.
    pub fn read<E>(
        &self,
        words: &[AtomicU64],
        io: &Io,
        f: impl FnMut(Writer) -> Result<(), E>,
    ) -> Result<bool, E> {
        match self.of(io.tensor) {
            Some(t) => t.read(words, io, f),
            None => Ok(true),
        }
    }

    /// The join another task opened for the writers of the read `io` (§4.7), when `io` is a
    /// whole row of a rank-2 table and the row's join word names that row: every whole-row
    /// read of the row has the same writers, whichever AICPU makes it. Returns the join's
    /// AICPU, its index among that AICPU's joins, and the tag it was opened with.
    #[inline]
    pub fn row_join(&self, words: &[AtomicU64], io: &Io) -> Option<RowJoin> {
        match self.row_word(words, io) {
            RowWord::Named(j) => Some(j),
            RowWord::Unpublished | RowWord::NoWord => None,
        }
    }

    /// What the row's join word says of the read `io` ([`OnceTables::row_join`]): a join
    /// named, none published yet for its row, or no word (`io` is not a whole row of a
    /// rank-2 table, or the launch has no row joins).
    #[inline]
    pub fn row_word(&self, words: &[AtomicU64], io: &Io) -> RowWord {
        let Some((t, r)) = self.whole_row(io) else {
            return RowWord::NoWord;
        };
        let at = t.row_join_words(r);
        // The row (Acquire), then the join its publisher stored before it: a later row's
        // join cannot be published in between (its step records after this one's).
        if words[at].load(Ordering::Acquire) != r as u64 + 1 {
            return RowWord::Unpublished;
        }
        RowWord::Named(RowJoin::unpack(words[at + 1].load(Ordering::Relaxed)))
    }

    /// Publishes `j`, a join opened for the writers of the read `io`, as its row's join, when
    /// `io` is a whole row of a rank-2 table (else does nothing).
    #[inline]
    pub fn publish_join(&self, words: &[AtomicU64], io: &Io, j: RowJoin) {
        let Some((t, r)) = self.whole_row(io) else {
            return;
        };
        let at = t.row_join_words(r);
        words[at + 1].store(j.pack(), Ordering::Relaxed);
        words[at].store(r as u64 + 1, Ordering::Release);
    }

    /// The table and the row of the read `io` when it names one whole row of a rank-2 table
    /// (its columns unnamed, or all of them and more), and the launch has row joins.
    #[inline]
    fn whole_row(&self, io: &Io) -> Option<(&Table, i64)> {
        if !self.row_joins {
            return None;
        }
        let t = self.of(io.tensor)?;
        let (r, end) = io.ranges[0];
        let whole = t.rank == 2
            && r >= 0
            && end == r.wrapping_add(1)
            && (io.ndims == 1
                || io.ndims == 2 && io.ranges[1].0 <= 0 && io.ranges[1].1 >= t.cols as i64);
        whole.then_some((t, r))
    }

    /// What the tables do for the regions `ios` of a site's tasks, which go to the maps as
    /// `regions` says: for a caller that remembers it by site and then adds each task with
    /// [`OnceTables::add_planned`].
    pub fn plan(&self, ios: &[Io], regions: &[(Use, bool)]) -> SitePlan {
        let mut p = SitePlan {
            all: true,
            ..SitePlan::default()
        };
        let (mut reads, mut writes) = ([(0u8, 0u8); MAX_TASK_IO], [(0u8, 0u8); MAX_TASK_IO]);
        let (mut nr, mut nw) = (0, 0);
        for (k, (io, &(u, _))) in ios.iter().zip(regions).enumerate() {
            let table = self.index.get(io.tensor as usize).map_or(0, |&i| i);
            match u {
                Use::Skip => {}
                Use::Lookup if table != 0 && !io.writes() => {
                    reads[nr] = (k as u8, table - 1);
                    p.read_tables |= 1 << (table - 1);
                    nr += 1;
                }
                Use::Insert if table != 0 && io.writes() => {
                    writes[nw] = (k as u8, table - 1);
                    nw += 1;
                }
                _ => {
                    p.all = false;
                    p.any |= table != 0;
                }
            }
        }
        p.any |= nr + nw != 0;
        p.all &= nw <= PLANNED_WRITES;
        p.ops[..nr].copy_from_slice(&reads[..nr]);
        p.ops[nr..nr + nw].copy_from_slice(&writes[..nw]);
        p.reads = nr as u8;
        p.len = (nr + nw) as u8;
        p
    }

    /// Adds task `id` (handle `handle`), whose regions are `ios`, by its site's `plan`, one
    /// whose regions all go to tables ([`SitePlan::all`]): calls `f` with the writer of each
    /// element each read finds there, then files the writes. Returns false, having filed
    /// nothing (`f` may have been called), when the tables cannot take the task alone: a
    /// read's table has spilled (its map has writers too), a read names other than one row,
    /// or a write's cell does not take it (the task's caller then goes the long way, which
    /// spills it). An error of `f` ends it there, with nothing filed.
    #[inline]
    pub fn add_planned<E>(
        &self,
        words: &[AtomicU64],
        plan: &SitePlan,
        ios: &[Io],
        (id, handle): (u64, u32),
        mut f: impl FnMut(Writer) -> Result<(), E>,
    ) -> Result<bool, E> {
        // Each table the reads name, its spill word once (a site's reads are mostly of one).
        let mut spills = plan.read_tables;
        while spills != 0 {
            let t = &self.tables[spills.trailing_zeros() as usize % ONCE_TABLES];
            spills &= spills - 1;
            if words[t.spill as usize].load(Ordering::Relaxed) != 0 {
                return Ok(false);
            }
        }
        let ops = &plan.ops[..(plan.len as usize).min(MAX_TASK_IO)];
        let (reads, writes) = ops.split_at((plan.reads as usize).min(ops.len()));
        // The reads first (they file nothing): a task the writes then refuse has only had
        // `f` called.
        for &(k, x) in reads {
            let t = &self.tables[x as usize % ONCE_TABLES];
            let Some(io) = ios.get(k as usize) else {
                return Ok(false);
            };
            // A point (the patterns' most reads): its one cell; else the read's row.
            if let Some((r, cell)) = t.cell_of_point(io) {
                if let Some(w) = cell_at(words, cell).and_then(|c| Table::writer(c, r)) {
                    f(w)?;
                }
            } else if !t.read(words, io, &mut f)? {
                return Ok(false);
            }
        }
        if writes.is_empty() {
            return Ok(true);
        }
        // An id a cell cannot hold: no write takes it.
        if id >= 1 << (64 - HANDLE_BITS) {
            return Ok(false);
        }
        // One write (the patterns' every task): its cell checked, then filed.
        if let [(k, x)] = *writes {
            let t = &self.tables[x as usize % ONCE_TABLES];
            let Some((r, cell)) = ios.get(k as usize).and_then(|io| t.free_cell(words, io)) else {
                return Ok(false);
            };
            Table::fill(cell, r, id, handle);
            return Ok(true);
        }
        // More: every write's cell first, so that nothing is filed unless all take them.
        let mut cells = [None; PLANNED_WRITES];
        for (c, &(k, x)) in cells.iter_mut().zip(writes) {
            let t = &self.tables[x as usize % ONCE_TABLES];
            match ios.get(k as usize).and_then(|io| t.free_cell(words, io)) {
                Some(rc) => *c = Some(rc),
                None => return Ok(false),
            }
        }
        for &(r, cell) in cells.iter().flatten() {
            Table::fill(cell, r, id, handle);
        }
        Ok(true)
    }
}

/// The [`SitePlan`]s of the sites an AICPU recorded tasks of lately, by site (at
/// `site % USE_SITES`, as [`crate::share::SiteUses`] remembers their uses): a plan depends
/// only on its site's regions and the launch's tables, so it stays right until the tables are
/// laid out again ([`SitePlans::clear`]).
#[derive(Clone, Copy, Debug)]
pub struct SitePlans {
    /// The site each entry plans (`u32::MAX`: none).
    site: [u32; USE_SITES],
    plans: [SitePlan; USE_SITES],
}

impl Default for SitePlans {
    fn default() -> SitePlans {
        SitePlans {
            site: [u32::MAX; USE_SITES],
            plans: [SitePlan::default(); USE_SITES],
        }
    }
}

impl SitePlans {
    /// The plan of `site`, if it is known.
    #[inline(always)]
    pub fn get(&self, site: u32) -> Option<&SitePlan> {
        let k = site as usize % USE_SITES;
        (self.site[k] == site).then(|| &self.plans[k])
    }

    /// Remembers `plan` as `site`'s (in place of the site that shared its entry).
    pub fn note(&mut self, site: u32, plan: SitePlan) {
        let k = site as usize % USE_SITES;
        (self.site[k], self.plans[k]) = (site, plan);
    }

    /// Forgets every plan (the tables were laid out again).
    pub fn clear(&mut self) {
        *self = SitePlans::default();
    }
}

/// The most writes a [`SitePlan`] may answer and still have all its regions go to tables.
const PLANNED_WRITES: usize = 4;

/// What the written-once tables do for the regions of one site's tasks
/// ([`OnceTables::plan`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct SitePlan {
    /// The regions the tables answer and their tables: the reads, then the writes.
    ops: [(u8, u8); MAX_TASK_IO],
    reads: u8,
    len: u8,
    /// The tables the reads name, a bit each: their spill words are checked once a task.
    read_tables: u8,
    /// Whether every region not skipped goes to a table (a read looked up, a write
    /// inserted): its tasks need no map while their tables take them.
    pub all: bool,
    /// Whether some region goes to a table.
    pub any: bool,
    /// The region (+ 1; 0: none) of the site's one read a join may stand for (§4.7), which
    /// the plan leaves to the AICPU's joins: its tasks take the quick way when the join found
    /// or opened last stands for it.
    join: u8,
}

impl SitePlan {
    /// How many reads the tables answer for each task of the site.
    #[inline(always)]
    pub fn reads(&self) -> usize {
        self.reads as usize
    }

    /// How many writes the tables file for each task of the site.
    #[inline(always)]
    pub fn writes(&self) -> u64 {
        self.len.saturating_sub(self.reads) as u64
    }

    /// The plan with region `r` left to the joins (a plan made with `r` skipped); a region
    /// past a task's leaves none, and the plan does not answer all then.
    pub fn with_join(self, r: usize) -> SitePlan {
        let region = r < MAX_TASK_IO;
        SitePlan {
            join: if region { r as u8 + 1 } else { 0 },
            all: self.all && region,
            ..self
        }
    }

    /// The region left to the joins, if any ([`SitePlan::with_join`]).
    #[inline(always)]
    pub fn join_read(&self) -> Option<usize> {
        (self.join as usize).checked_sub(1)
    }
}

impl Table {
    /// Calls `f` with the writer of each element of the read `io` the table holds, for
    /// [`OnceTables::read`].
    #[inline]
    fn read<E>(
        &self,
        words: &[AtomicU64],
        io: &Io,
        mut f: impl FnMut(Writer) -> Result<(), E>,
    ) -> Result<bool, E> {
        let t = self;
        let (r, end) = io.ranges[0];
        if io.ndims == 0 || end != r.wrapping_add(1) {
            return Ok(false);
        }
        if r < 0 {
            return Ok(true);
        }
        let (lo, hi) = if t.rank == 2 && io.ndims >= 2 {
            let (lo, hi) = io.ranges[1];
            (lo.max(0), hi.min(t.cols as i64))
        } else {
            (0, t.cols as i64)
        };
        if lo >= hi {
            return Ok(true);
        }
        // The read's cells in one slice (one bounds check, not two a cell); a layout that
        // did not hold them could not answer it.
        let row = t.row_base(r);
        let Some(cells) = words.get(row + 2 * lo as usize..row + 2 * hi as usize) else {
            return Ok(false);
        };
        let key = r as u64 + 1;
        // Two words a cell, taken off the front (no remainder to work out).
        let mut rest = cells;
        while let [k, w, more @ ..] = rest {
            if k.load(Ordering::Relaxed) == key {
                f(Writer::unpack(w.load(Ordering::Relaxed)))?;
            }
            rest = more;
        }
        Ok(true)
    }

    /// The writer of row `r`'s element that `cell` holds, if it holds one of row `r`.
    #[inline(always)]
    fn writer([key, w]: &CellWords, r: i64) -> Option<Writer> {
        (key.load(Ordering::Relaxed) == r as u64 + 1)
            .then(|| Writer::unpack(w.load(Ordering::Relaxed)))
    }

    /// Stores in `cell` (of row `r`) the writer `id`, `handle`.
    #[inline(always)]
    fn fill([key, w]: &CellWords, r: i64, id: u64, handle: u32) {
        key.store(r as u64 + 1, Ordering::Relaxed);
        w.store(id << HANDLE_BITS | handle as u64, Ordering::Relaxed);
    }

    /// The first of row `r`'s two join words: the row, then the join published for it.
    #[inline(always)]
    fn row_join_words(&self, r: i64) -> usize {
        self.joins as usize + 2 * (r as u64 & self.rows_mask as u64) as usize
    }

    /// The first word of row `r`'s cells.
    #[inline(always)]
    fn row_base(&self, r: i64) -> usize {
        self.base as usize + 2 * (r as u64 & self.rows_mask as u64) as usize * self.cols as usize
    }

    /// The row and the cell of the write `io`, when the cell may take it: `io` is a point
    /// inside the table, and the cell is empty or its element may be dropped — every read of
    /// it is recorded, its row being `rows` or more below. (The writer's id must also fit the
    /// cell: its callers check.)
    #[inline(always)]
    fn free_cell<'w>(&self, words: &'w [AtomicU64], io: &Io) -> Option<(i64, &'w CellWords)> {
        let (r, at) = self.cell_of_point(io)?;
        let cell = cell_at(words, at)?;
        let old = cell[0].load(Ordering::Relaxed);
        let free = old == 0 || (old - 1).wrapping_add(self.rows_mask as u64) < r as u64;
        free.then_some((r, cell))
    }

    /// The row and the cell's first word of point `io`, when it is a point of the table's
    /// rank inside it (row not negative, column in `0..cols`).
    #[inline(always)]
    fn cell_of_point(&self, io: &Io) -> Option<(i64, usize)> {
        if io.ndims != self.rank {
            return None;
        }
        let (r, r_end) = io.ranges[0];
        let (c, c_end) = if self.rank == 2 { io.ranges[1] } else { (0, 1) };
        // A range of columns (a stencil's read) fails the first test.
        let inside = c_end == c.wrapping_add(1)
            && r_end == r.wrapping_add(1)
            && r >= 0
            && (c as u64) < self.cols as u64;
        inside.then(|| (r, self.row_base(r) + 2 * c as usize))
    }
}

/// The launch's tables for program `v`, its tensors' analysis `shares` and bindings
/// `tensors`, in `sh`'s words: the same on every AICPU.
pub(super) fn once_tables<C, L>(
    v: &crate::Verified<'_>,
    shares: &[Sharing],
    tensors: &[Binding],
    sh: &Shared<'_, C, L>,
) -> OnceTables {
    let shapes = shares
        .iter()
        .zip(tensors)
        .take(v.tensors().len())
        .enumerate()
        .filter_map(|(x, (s, b))| Some((x as u16, share::once_shape(v, s, x as u16, b, sh.n)?)));
    let mut t = OnceTables::lay_out(shapes, sh.once.len(), sh.n as usize * sh.cap as usize);
    // A `READBACK` lays the tables out again over words that may hold another layout's
    // values: a join word there could name a row it does not stand for. Row joins are for
    // programs without one.
    t.row_joins = v.readbacks().is_empty();
    t
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use crate::Dir;
    use std::vec::Vec;

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    fn io(tensor: u16, dir: Dir, dims: &[(i64, i64)]) -> Io {
        let mut io = Io {
            tensor,
            dir: dir as u8,
            ndims: dims.len() as u8,
            ..Io::default()
        };
        io.ranges[..dims.len()].copy_from_slice(dims);
        io
    }

    fn shape(rank: u8, cols: u32, reach: u32) -> OnceShape {
        OnceShape { rank, cols, reach }
    }

    /// Writes the four columns of row `row` of `tensor`, column `c` by task `first + c`
    /// (handle `c`).
    fn fill_row(t: &OnceTables, w: &[AtomicU64], (tensor, row): (u16, i64), first: u64) {
        for c in 0..4 {
            let point = io(tensor, Dir::Out, &[(row, row + 1), (c, c + 1)]);
            assert!(t.write(w, &point, first + c as u64, c as u32));
        }
    }

    fn writers(t: &OnceTables, w: &[AtomicU64], read: &Io) -> Vec<(u64, u32)> {
        let mut found = Vec::new();
        let answered = t.read(w, read, |x| {
            found.push((x.id, x.handle));
            Ok::<(), ()>(())
        });
        assert_eq!(answered, Ok(true));
        found
    }

    /// Tables are laid out in tensor order while they fit, `rows` the power of two above the
    /// reach (at least 2); a tensor whose table does not fit in what is left is passed over.
    #[test]
    fn tables_are_laid_out_while_they_fit() {
        // Each table: two words a row (its row join), then two a cell.
        let shapes = [
            (0, shape(2, 10, 1)),  // 2 rows × 10: 4 + 40 words
            (1, shape(2, 100, 3)), // 4 rows × 100: too large
            (2, shape(1, 1, 4)),   // 8 rows × 1: 16 + 16 words
        ];
        let t = OnceTables::lay_out(shapes.into_iter(), ONCE_TABLES + 76, 12);
        assert!(t.has(0) && !t.has(1) && t.has(2) && !t.has(3));
        assert_eq!(t.tables[0].rows_mask, 1);
        assert_eq!(t.tables[0].joins as usize, ONCE_TABLES);
        assert_eq!(t.tables[0].base as usize, ONCE_TABLES + 4);
        assert_eq!(t.tables[1].rows_mask, 7);
        assert_eq!(t.tables[1].joins as usize, ONCE_TABLES + 44);
        assert_eq!(t.tables[1].base as usize, ONCE_TABLES + 60);
        // One word fewer and the second does not fit.
        let t = OnceTables::lay_out(shapes.into_iter(), ONCE_TABLES + 75, 12);
        assert!(t.has(0) && !t.has(2));
        // Handles past 24 bits, or no words: no tables.
        assert!(!OnceTables::lay_out(shapes.into_iter(), 1 << 20, (1 << 24) + 1).any());
        assert!(!OnceTables::lay_out(shapes.into_iter(), 0, 12).any());
    }

    /// A read finds, of each element it names, the task that wrote it, and nothing of an
    /// element not written (another row in the same cell, a row below zero, columns past the
    /// table's, an empty range of columns).
    #[test]
    fn reads_find_the_writers_of_their_elements() {
        let t = OnceTables::lay_out([(3, shape(2, 4, 1))].into_iter(), 64, 8);
        let w = words(64);
        fill_row(&t, &w, (3, 5), 100);
        let row5 = |lo, hi| io(3, Dir::In, &[(5, 6), (lo, hi)]);
        assert_eq!(writers(&t, &w, &row5(1, 3)), [(101, 1), (102, 2)]);
        assert_eq!(writers(&t, &w, &row5(-2, 9)).len(), 4);
        // Columns all past the table's, or none: answered, no writer.
        assert!(writers(&t, &w, &row5(4, 9)).is_empty());
        assert!(writers(&t, &w, &row5(-3, 0)).is_empty());
        assert!(writers(&t, &w, &row5(2, 2)).is_empty());
        assert!(writers(&t, &w, &row5(3, 1)).is_empty());
        // The whole row, dimension 1 unnamed.
        assert_eq!(writers(&t, &w, &io(3, Dir::In, &[(5, 6)])).len(), 4);
        // Row 7 shares row 5's cells (2 rows), row -1 is nothing's.
        assert!(writers(&t, &w, &io(3, Dir::In, &[(7, 8)])).is_empty());
        assert!(writers(&t, &w, &io(3, Dir::In, &[(-1, 0)])).is_empty());
        // A tensor without a table has no writers there.
        assert!(writers(&t, &w, &io(2, Dir::In, &[(5, 6)])).is_empty());
        // A read of two rows is not one a stepped tensor makes.
        assert_eq!(
            t.read(&w, &io(3, Dir::In, &[(4, 6)]), |_| Ok::<(), ()>(())),
            Ok(false)
        );
        assert!(!t.spilled(&w, 3));
    }

    /// A write spills — the table keeps what it held and its spill word is set — when its
    /// cell holds an element of a row fewer than `rows` below (a read of it may be to come),
    /// when its id does not fit the cell, or when it is not a point inside the table.
    #[test]
    fn writes_the_table_cannot_take_spill() {
        let t = OnceTables::lay_out([(0, shape(2, 2, 1))].into_iter(), 64, 8);
        let w = words(64);
        let at = |r, c| io(0, Dir::Out, &[(r, r + 1), (c, c + 1)]);
        assert!(t.write(&w, &at(4, 0), 1, 1));
        // Row 5 is another cell; row 6 may drop row 4's element (2 rows below).
        assert!(t.write(&w, &at(5, 0), 2, 2));
        assert!(!t.spilled(&w, 0));
        assert!(t.write(&w, &at(6, 0), 3, 3));
        // A second write of row 6's point may not drop the first (fewer than 2 rows below).
        assert!(!t.write(&w, &at(6, 0), 4, 4));
        assert!(t.spilled(&w, 0));
        assert_eq!(
            writers(&t, &w, &io(0, Dir::In, &[(6, 7), (0, 1)])),
            [(3, 3)]
        );
        let w = words(64);
        assert!(!t.write(&w, &at(1, 0), 1 << 40, 0));
        assert!(t.spilled(&w, 0));
        for bad in [at(1, 2), at(-1, 0), io(0, Dir::Out, &[(1, 2)])] {
            let w = words(64);
            assert!(!t.write(&w, &bad, 1, 0));
            assert!(t.spilled(&w, 0));
        }
    }

    /// A site's plan lists the reads and writes the tables answer; a task of a plan whose
    /// regions all go to tables is added by it while no read's table has spilled, every
    /// read names one row and every write's cell takes it, its reads and writes doing what
    /// `read` and `write` do; otherwise nothing is filed.
    #[test]
    fn a_sites_plan_reads_and_writes_as_the_tables_do() {
        let t = OnceTables::lay_out([(1, shape(2, 4, 1))].into_iter(), 64, 8);
        let w = words(64);
        let write = io(1, Dir::Out, &[(3, 4), (2, 3)]);
        let read = io(1, Dir::In, &[(2, 3), (1, 4)]);
        let other = io(0, Dir::In, &[(0, 1)]);
        let ios = [read, other, write];
        // Regions of another tensor go to the map, unless skipped.
        let p = t.plan(
            &ios,
            &[
                (Use::Lookup, true),
                (Use::Lookup, true),
                (Use::Insert, true),
            ],
        );
        assert!(p.any && !p.all);
        let uses = [(Use::Lookup, true), (Use::Skip, false), (Use::Insert, true)];
        let p = t.plan(&ios, &uses);
        assert!(p.any && p.all);
        // A write of a table's tensor that is also looked up goes to the map too.
        let q = t.plan(
            &ios,
            &[(Use::Lookup, true), (Use::Skip, false), (Use::Record, true)],
        );
        assert!(q.any && !q.all);
        assert!(!t.plan(&[other], &[(Use::Lookup, true)]).any);
        fill_row(&t, &w, (1, 2), 10);
        let add = |id: u64, ios: &[Io]| {
            let mut found = Vec::new();
            let added = t.add_planned(&w, &p, ios, (id, 5), |x| {
                found.push(x.id);
                Ok::<(), ()>(())
            });
            (added == Ok(true), found)
        };
        assert_eq!(add(20, &ios), (true, std::vec![11, 12, 13]));
        assert_eq!(writers(&t, &w, &io(1, Dir::In, &[(3, 4)])), [(20, 5)]);
        // The same write again: its cell no longer takes it, and the task is not added
        // (nothing filed, nothing spilled: the long way spills it).
        assert!(!add(21, &ios).0);
        assert_eq!(writers(&t, &w, &io(1, Dir::In, &[(3, 4)])), [(20, 5)]);
        assert!(!t.spilled(&w, 1));
        // A write elsewhere is taken while no read's table has spilled; after a spill, the
        // reads need the map, and nothing is filed.
        let other_column = [read, other, io(1, Dir::Out, &[(3, 4), (0, 1)])];
        t.spill(&w, 1);
        assert!(!add(22, &other_column).0);
        assert_eq!(writers(&t, &w, &io(1, Dir::In, &[(3, 4)])), [(20, 5)]);
        // A read of two rows is not the tables' to answer.
        let w = words(64);
        let two_rows = [io(1, Dir::In, &[(1, 3)]), other, write];
        assert!(!add(23, &two_rows).0);
        assert!(writers(&t, &w, &io(1, Dir::In, &[(3, 4)])).is_empty());
    }

    /// A plan's point reads find their one cell's writer, or nothing for a cell holding
    /// another row, a negative row or a column past the table's; after any of its tables
    /// spilled, a task calls nothing and files nothing. A rank-1 table's points are rows.
    #[test]
    fn a_plans_point_reads_find_their_cells_writer() {
        let shapes = [(0, shape(1, 1, 1)), (1, shape(2, 4, 1))];
        let t = OnceTables::lay_out(shapes.into_iter(), 128, 8);
        let w = words(128);
        fill_row(&t, &w, (1, 2), 10);
        assert!(t.write(&w, &io(0, Dir::Out, &[(5, 6)]), 7, 3));
        let point = |x, r, c| io(x, Dir::In, &[(r, r + 1), (c, c + 1)]);
        let ios = [
            point(1, 2, 1),
            point(1, 2, 3),
            point(1, 2, 7),
            point(1, 4, 1),
            point(1, -1, 0),
            io(0, Dir::In, &[(5, 6)]),
            io(1, Dir::Out, &[(3, 4), (0, 1)]),
        ];
        let mut uses = [(Use::Lookup, true); 7];
        uses[6].0 = Use::Insert;
        let p = t.plan(&ios, &uses);
        assert!(p.all && p.reads() == 6 && p.writes() == 1);
        let add = |id: u64, w: &[AtomicU64]| {
            let mut found = Vec::new();
            let added = t.add_planned(w, &p, &ios, (id, 2), |x| {
                found.push((x.id, x.handle));
                Ok::<(), ()>(())
            });
            (added == Ok(true), found)
        };
        assert_eq!(add(20, &w), (true, std::vec![(11, 1), (13, 3), (7, 3)]));
        assert_eq!(writers(&t, &w, &point(1, 3, 0)), [(20, 2)]);
        // Either table spilled: nothing called, nothing filed.
        for x in [0, 1] {
            let w = words(128);
            fill_row(&t, &w, (1, 2), 10);
            t.spill(&w, x);
            assert_eq!(add(21, &w), (false, std::vec![]));
            assert!(writers(&t, &w, &point(1, 3, 0)).is_empty());
        }
    }

    /// A plan with two writes files both or neither: a second write whose cell does not take
    /// it leaves the first's cell as it was; an id a cell cannot hold files nothing.
    #[test]
    fn a_plans_writes_are_filed_all_or_none() {
        let t = OnceTables::lay_out([(1, shape(2, 4, 1))].into_iter(), 64, 8);
        let w = words(64);
        let first = io(1, Dir::Out, &[(3, 4), (0, 1)]);
        let second = io(1, Dir::Out, &[(3, 4), (1, 2)]);
        let ios = [first, second];
        let p = t.plan(&ios, &[(Use::Insert, true), (Use::Insert, true)]);
        assert!(p.all && p.writes() == 2);
        let add = |id: u64, ios: &[Io]| t.add_planned(&w, &p, ios, (id, 7), |_| Ok::<(), ()>(()));
        // The second's cell already holds row 3: neither is filed.
        assert!(t.write(&w, &second, 9, 1));
        assert_eq!(add(10, &ios), Ok(false));
        assert!(writers(&t, &w, &io(1, Dir::In, &[(3, 4), (0, 1)])).is_empty());
        // Both cells free (another column for the second): both filed, by the same writer.
        let ios = [first, io(1, Dir::Out, &[(3, 4), (2, 3)])];
        assert_eq!(add(11, &ios), Ok(true));
        assert_eq!(
            writers(&t, &w, &io(1, Dir::In, &[(3, 4)])),
            [(11, 7), (9, 1), (11, 7)]
        );
        // An id of 2⁴⁰ or more fits no cell; a plan of reads alone answers it all the same.
        let w = words(64);
        let p1 = t.plan(&[first], &[(Use::Insert, true)]);
        let big = t.add_planned(&w, &p1, &[first], (1 << 40, 0), |_| Ok::<(), ()>(()));
        assert_eq!(big, Ok(false));
        assert!(writers(&t, &w, &io(1, Dir::In, &[(3, 4)])).is_empty());
        fill_row(&t, &w, (1, 2), 30);
        let row = io(1, Dir::In, &[(2, 3)]);
        let reads = t.plan(&[row], &[(Use::Lookup, true)]);
        let mut found = Vec::new();
        let big = t.add_planned(&w, &reads, &[row], (1 << 40, 0), |x| {
            found.push(x.id);
            Ok::<(), ()>(())
        });
        assert_eq!((big, found), (Ok(true), std::vec![30, 31, 32, 33]));
    }

    /// A whole-row read finds the join published for its row, and nothing for another row
    /// in the same words (its row unpublished), a part of the row, or a tensor without a
    /// table (no word).
    #[test]
    fn a_rows_join_is_found_by_whole_row_reads_of_that_row() {
        let t = OnceTables::lay_out([(0, shape(2, 4, 1))].into_iter(), 64, 8);
        let w = words(64);
        let row = |r: i64| io(0, Dir::In, &[(r, r + 1), (0, 4)]);
        assert_eq!(t.row_word(&w, &row(6)), RowWord::Unpublished);
        assert_eq!(t.row_join(&w, &row(6)), None);
        let j = RowJoin {
            aicpu: 5,
            join: 31,
            tag: 0xdead_beef,
        };
        t.publish_join(&w, &row(6), j);
        assert_eq!(t.row_word(&w, &row(6)), RowWord::Named(j));
        assert_eq!(t.row_join(&w, &row(6)), Some(j));
        // The row with its columns unnamed, or more of them than the table has.
        assert_eq!(t.row_join(&w, &io(0, Dir::In, &[(6, 7)])), Some(j));
        assert_eq!(t.row_join(&w, &io(0, Dir::In, &[(6, 7), (-1, 9)])), Some(j));
        // Row 8 shares row 6's words; part of the row; two rows; another tensor.
        assert_eq!(t.row_word(&w, &row(8)), RowWord::Unpublished);
        let no_word = [
            io(0, Dir::In, &[(6, 7), (1, 4)]),
            io(0, Dir::In, &[(5, 7)]),
            io(1, Dir::In, &[(6, 7)]),
        ];
        for x in &no_word {
            assert_eq!(t.row_word(&w, x), RowWord::NoWord, "{x:?}");
            assert_eq!(t.row_join(&w, x), None);
        }
        // Publishing a part of a row does nothing; a later row replaces the entry.
        t.publish_join(
            &w,
            &io(0, Dir::In, &[(8, 9), (0, 2)]),
            RowJoin { tag: 1, ..j },
        );
        assert_eq!(t.row_join(&w, &row(8)), None);
        t.publish_join(&w, &row(8), RowJoin { tag: 2, ..j });
        assert_eq!(t.row_join(&w, &row(8)), Some(RowJoin { tag: 2, ..j }));
        assert_eq!(t.row_word(&w, &row(6)), RowWord::Unpublished);
        // The cells are untouched.
        assert!(writers(&t, &w, &row(8)).is_empty());
    }

    /// A site's plan is kept at `site mod USE_SITES` until a site sharing the entry replaces
    /// it or the plans are cleared; site 0 is a site like any other.
    #[test]
    fn site_plans_are_kept_by_site() {
        let mut plans = SitePlans::default();
        assert!(plans.get(0).is_none() && plans.get(u32::MAX - 1).is_none());
        let all = SitePlan {
            all: true,
            any: true,
            reads: 1,
            len: 3,
            ..SitePlan::default()
        };
        plans.note(0, all);
        plans.note(5, SitePlan::default());
        assert!(plans.get(0).is_some_and(|p| p.all && p.writes() == 2));
        assert!(plans.get(5).is_some_and(|p| !p.all && p.writes() == 0));
        assert!(plans.get(USE_SITES as u32).is_none());
        plans.note(USE_SITES as u32, SitePlan::default());
        assert!(plans.get(0).is_none() && plans.get(5).is_some());
        plans.clear();
        assert!(plans.get(5).is_none() && plans.get(USE_SITES as u32).is_none());
        // One read left to the joins.
        assert_eq!(all.join_read(), None);
        let joined = all.with_join(3);
        assert!(joined.all && joined.join_read() == Some(3) && joined.writes() == 2);
        let past = all.with_join(MAX_TASK_IO);
        assert!(!past.all && past.join_read().is_none());
        assert!(!all.with_join(usize::MAX).all);
    }
}
