//! The quick path of [`TensorMap::add_some`] for a task whose every region is a point of a
//! dense table read or written the way a stepped tensor's are (spec/runtime.md §3.3, §3.5):
//! Task Bench's tasks, which read points (or a few columns) of an earlier row of their tensor
//! and write one point of the current row.
//!
//! Such a task needs none of the general path's machinery — the plan of each region, its
//! key, the quiet test, the lists — only, per read, the loads of the cells it spans, and per
//! write its entry and one cell's store. The path takes a task only when each region it uses
//! is one of:
//!
//! - a **read only looked up** ([`Use::Lookup`] or [`Use::Find`] of a region that does not
//!   write) of one row `r ≥ 0` of a tensor with a table (not keeping its rows' lists), naming
//!   the table's rank: a point, or for a table of rank 2 at most `FEW_COLUMNS` columns of the
//!   row, none negative; and the map's lists hold nothing of the tensor that can reach row `r`;
//! - a **write only inserted** ([`Use::Insert`]) of a point, at coordinates that are not
//!   negative, of a tensor with such a table.
//!
//! It then does what the general path does, reads before writes rather than region by
//! region: every read's lookup (in the cells, as the general path's table lookup does), then
//! every write's filing (its entries in region order, as there). The reads come first because
//! the checks above were made before any filing, and a write's filing may move a cell's older
//! entry to the lists, where a later read would have to look. The general path's answer is
//! the same in either order: a task's own entries are no predecessor of its reads, and an entry
//! moved to the lists is found there. Any other task takes the general path, having changed
//! nothing here.

use super::dense::{file_in_cell, head, Table, FEW_COLUMNS};
use super::key::{kind, Entry, WRITE};
use super::lists::{Bases, DENSE_LIVE, LISTED_END, TENSOR_HEAD};
use super::lookup::Visit;
use super::{Io, Pred, Storage, TensorMap, Use, NIL};
use crate::limits::MAX_TASK_IO;

impl<S: Storage> TensorMap<S> {
    /// [`TensorMap::add_some`] for a task the quick path takes (above), for the free handle
    /// `handle` whose region count is word `count`: `None` when it does not take it (nothing
    /// changed), else how many regions it recorded.
    #[inline]
    pub(super) fn add_points(
        &mut self,
        id: u64,
        handle: u32,
        count: usize,
        ios: &[Io],
        how: &impl Fn(usize, &Io) -> Use,
        pred: &mut impl FnMut(Pred),
    ) -> Option<u32> {
        let (b, tensors) = (self.bases, self.layout.tensors);
        let first = handle * self.layout.max_task_io;
        // The arrays once, for the whole task (each `parts()` reloads them).
        let (ents, _, words, marks) = self.mem.parts();
        // The regions to look up and to file, by position (`ios` has at most `MAX_TASK_IO`,
        // 16, checked by the caller). Only masks are kept: each step is worked out again when
        // it is taken, which costs less than keeping it.
        const _: () = assert!(MAX_TASK_IO <= 16);
        let (mut reads, mut writes) = (0u16, 0u16);
        for (k, io) in ios.iter().enumerate() {
            match how(k, io) {
                Use::Skip => {}
                Use::Lookup | Use::Find if !io.writes() => {
                    if read_step(words, b, tensors, io)?.is_some() {
                        reads |= 1 << k;
                    }
                }
                Use::Insert => {
                    write_step(words, b, tensors, io)?;
                    writes |= 1 << k;
                }
                _ => return None,
            }
        }
        let mark = id.wrapping_add(1);
        let (mut probes, mut visits) = (0, 0);
        let mut m = reads;
        while m != 0 {
            let io = &ios[m.trailing_zeros() as usize];
            m &= m - 1;
            if let Some(Some(span)) = read_step(words, b, tensors, io) {
                let at = Visit {
                    id,
                    mark,
                    kind: kind(0, io),
                };
                probes += 1;
                visits += read_cells(ents, words, marks, b, span, &at, pred);
            }
        }
        let mut recorded = 0;
        let mut m = writes;
        while m != 0 {
            let io = &ios[m.trailing_zeros() as usize];
            m &= m - 1;
            if let Some((table, cell)) = write_step(words, b, tensors, io) {
                file_in_cell(
                    ents,
                    words,
                    b,
                    table,
                    cell,
                    first + recorded,
                    id,
                    handle,
                    io,
                );
                recorded += 1;
            }
        }
        if recorded != 0 {
            words[count] = recorded;
        }
        self.probes += probes;
        self.visits += visits;
        self.used += recorded;
        self.inserted += recorded as u64;
        self.live += recorded;
        Some(recorded)
    }
}

/// What a read looks up in its table: the table, the row, and the columns `from..to` (`0..1`
/// for a table of rank 1).
#[derive(Clone, Copy)]
struct Span {
    table: Table,
    row: i64,
    from: i64,
    to: i64,
}

/// The lookup of a read only looked up, if the quick path can take it; `Some(None)` when there
/// is nothing to look up (the table holds nothing, or no column of `io` can be in it).
#[inline(always)]
fn read_step(words: &[u32], b: Bases, tensors: u32, io: &Io) -> Option<Option<Span>> {
    let (table, head) = table_of(words, b, tensors, io)?;
    let (r, end) = io.ranges[0];
    if r < 0 || end.wrapping_sub(r) != 1 {
        return None;
    }
    // What the tensor has on the lists must lie in rows before `r` (`TensorMap::note_listed`).
    let live = head[0];
    if live & !DENSE_LIVE != 0 {
        let listed_end = head[LISTED_END];
        if listed_end == u32::MAX || r < listed_end as i64 {
            return None;
        }
    }
    let (from, to) = if table.rank() == 2 {
        // Columns from a negative one are left to the general path: it counts the work of
        // such a lookup as a scan's, and one column of it would be a point's here.
        let (a, b) = io.ranges[1];
        if a < 0 {
            return None;
        }
        if b <= a {
            // No column the table can hold: nothing to look up there.
            return Some(None);
        }
        if b - a > FEW_COLUMNS.min(table.columns() as i64) {
            return None;
        }
        (a, b)
    } else {
        (0, 1)
    };
    Some((live & DENSE_LIVE != 0).then_some(Span {
        table,
        row: r,
        from,
        to,
    }))
}

/// The table and cell of a write only inserted, if the quick path can take it.
#[inline(always)]
fn write_step(words: &[u32], b: Bases, tensors: u32, io: &Io) -> Option<(Table, u32)> {
    let (table, _) = table_of(words, b, tensors, io)?;
    Some((table, table.cell(io)?))
}

/// The table of `io`'s tensor, if it has one that keeps no rows' lists and `io` names its
/// rank, and the tensor's head words.
#[inline(always)]
fn table_of(words: &[u32], b: Bases, tensors: u32, io: &Io) -> Option<(Table, [u32; TENSOR_HEAD])> {
    if io.tensor as u32 >= tensors {
        return None;
    }
    let head = head(words, b, io.tensor)?;
    let table = Table::in_head(&head)?;
    (!table.keeps_lists() && io.ndims == table.rank()).then_some((table, head))
}

/// The lookup of a read in the cells of `span`: each cell's entry that is a write of a point
/// the read names is a predecessor, reported through `at`. Returns the entries examined, as
/// `TensorMap::meet_cell` (a point) and `TensorMap::scan_table` (columns) count them for the
/// same lookup.
#[inline(always)]
fn read_cells(
    ents: &mut [Entry],
    words: &mut [u32],
    marks: &mut [u64],
    b: Bases,
    span: Span,
    at: &Visit,
    pred: &mut impl FnMut(Pred),
) -> u64 {
    let Span {
        table,
        row,
        from,
        to,
    } = span;
    let mut visits = 0;
    for c in from..to {
        let e = words[table.word(row, c) as usize];
        if e == NIL {
            continue;
        }
        let x = &ents[e as usize];
        let hit = x.c0 == row && (table.rank() == 1 || (from <= x.c1 && x.c1 < to));
        // A read meets writes only; a point lookup counts only the entry of its point
        // (`meet_cell`), a wider one every write it meets (`meet_entry`).
        if x.flags & WRITE == 0 || (to - from == 1 && !hit) {
            continue;
        }
        visits += 1;
        at.met(ents, words, marks, e, (hit, false), b, pred);
    }
    visits
}
