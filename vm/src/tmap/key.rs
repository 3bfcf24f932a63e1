//! Where a region is filed: its **key** (a level and a cell in dimensions 0 and 1), the entry
//! that records it, and how a stored or rebuilt region meets a lookup's.
//!
//! A region's range `[a, b)` in a dimension is filed at **level** `s = ⌈log₂(b − a)⌉` (0 for a
//! range one element wide, or empty) in **cell** `a >> s`: a range is never wider than its
//! level's cells, so it starts in its cell and ends before the one after next. A lookup of
//! `[qa, qb)` therefore finds every range of level `s` it can share an element with in the cells
//! `(qa − 2ˢ + 1) >> s ..= (qb − 1) >> s`: `qb − qa` cells at level 0, `⌈(qb − qa) / 2ˢ⌉ + 2` at
//! most at another, however many
//! entries are live. A dimension the region does not name (it is whole), or a range of 2⁶¹
//! elements or more, is at level [`ALL`], in cell 0, which every lookup visits. Dimensions
//! after the first two are not keyed; [`meet`] compares them.

use crate::interp::Io;

use super::{DepKind, MapLayout};

/// The level of a dimension that is whole: one cell, 0.
pub(super) const ALL: u8 = 63;
/// The highest level of a range; wider ones are at [`ALL`] (their cells would not fit `i64`
/// arithmetic with room to spare).
const MAX_LEVEL: u32 = 61;

/// A region's key: its level and cell in dimensions 0 and 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Key {
    pub s0: u8,
    pub s1: u8,
    pub c0: i64,
    pub c1: i64,
}

impl Key {
    /// `io`'s key.
    #[inline]
    pub fn of(io: &Io) -> Key {
        let (s0, c0) = level_cell(io, 0);
        let (s1, c1) = level_cell(io, 1);
        Key { s0, s1, c0, c1 }
    }

    /// The levels, as one word (a tensor's shape slots hold it).
    #[inline]
    pub fn shape(&self) -> u32 {
        self.s0 as u32 | (self.s1 as u32) << 8
    }
}

/// The level and cell of `io`'s range in dimension `d`.
#[inline]
fn level_cell(io: &Io, d: usize) -> (u8, i64) {
    if d >= io.ndims as usize {
        return (ALL, 0);
    }
    let (a, b) = io.ranges[d];
    match b.checked_sub(a) {
        Some(width) if width <= 1 => (0, a),
        Some(width) if width <= 1 << MAX_LEVEL => {
            let s = 64 - (width - 1).leading_zeros();
            (s as u8, a >> s)
        }
        _ => (ALL, 0),
    }
}

/// The cells of level `s` in dimension `d` that hold every range of that level sharing an
/// element with `io`'s: `None` when there is no bound (`io` does not name the dimension and
/// the level is not [`ALL`]), else the first and last cell (last < first: none).
#[inline]
pub(super) fn cells(io: &Io, d: usize, s: u8) -> Option<(i64, i64)> {
    if s == ALL {
        return Some((0, 0));
    }
    if d >= io.ndims as usize {
        return None;
    }
    let (a, b) = io.ranges[d];
    if b <= a {
        // An empty range shares no element with anything (`Io::overlaps`).
        return Some((1, 0));
    }
    if s == 0 {
        return Some((a, b - 1));
    }
    let lo = (a as i128 - (1i128 << s) + 1) >> s;
    let hi = (b as i128 - 1) >> s;
    Some((lo as i64, hi as i64))
}

/// How many cells `cells` gave (`u128::MAX` for no bound).
#[inline]
pub(super) fn count(c: Option<(i64, i64)>) -> u128 {
    match c {
        None => u128::MAX,
        Some((lo, hi)) if hi < lo => 0,
        Some((lo, hi)) => hi.abs_diff(lo) as u128 + 1,
    }
}

/// `io`'s named dimension count if it is a point whose key is its whole region (a row point
/// `T[i]` or a tile `T[i, j]`: one or two named dimensions, each one element wide), else 0.
#[inline]
pub(super) fn point_dims(io: &Io) -> u8 {
    let one = |d: usize| io.ranges[d].1.wrapping_sub(io.ranges[d].0) == 1;
    match io.ndims {
        1 if one(0) => 1,
        2 if one(0) && one(1) => 2,
        _ => 0,
    }
}

/// Whether `io`'s key is its whole region, so the map rebuilds it rather than storing it: no
/// named dimension, or one or two, each one element wide (then every named dimension is at
/// level 0 and its cell is its point).
#[inline]
pub(super) fn keyed(io: &Io) -> bool {
    io.ndims == 0 || point_dims(io) != 0
}

/// The entry of one access: its key, its task and its list links, in one 64-byte line (the
/// region itself is in a parallel array, read only when the key matches).
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub(super) id: u64,
    pub(super) c0: i64,
    pub(super) c1: i64,
    pub(super) handle: u32,
    pub(super) tensor: u16,
    /// `LIVE`, `WRITE`, `KEYED`, `ON_ROW`, `ON_SHAPE`, `DENSE`.
    pub(super) flags: u8,
    /// The region's named dimension count.
    pub(super) ndims: u8,
    pub(super) s0: u8,
    pub(super) s1: u8,
    /// The tensor's shape slot the entry counts in (and whose shape list it is on).
    pub(super) slot: u8,
    /// The home list's head (word index); for an entry of a dense table, its cell's word.
    pub(super) head_home: u32,
    pub(super) prev: [u32; LEVELS],
    pub(super) next: [u32; LEVELS],
}

/// Lists an entry can be on: its home list, its slot's row list, its slot's shape list.
pub(super) const LEVELS: usize = 3;
pub(super) const HOME: usize = 0;
pub(super) const ROW: usize = 1;
pub(super) const SHAPE: usize = 2;

pub(super) const LIVE: u8 = 1;
pub(super) const WRITE: u8 = 2;
/// The key is the whole region ([`keyed`]): the region is not stored, and two such entries
/// with equal keys and dimension counts have equal regions.
pub(super) const KEYED: u8 = 4;
/// On a row list (its slot keeps them); for a `DENSE` entry, on its table row's list.
pub(super) const ON_ROW: u8 = 8;
/// On its slot's list (the slot keeps it).
pub(super) const ON_SHAPE: u8 = 16;
/// In its tensor's dense table (`dense.rs`): `head_home` is its cell's word, and the entry is on
/// no list but, with `ON_ROW`, its table row's (through the `SHAPE` links).
pub(super) const DENSE: u8 = 32;

impl Default for Entry {
    fn default() -> Entry {
        Entry {
            id: 0,
            c0: 0,
            c1: 0,
            handle: super::NIL,
            tensor: 0,
            flags: 0,
            ndims: 0,
            s0: 0,
            s1: 0,
            slot: 0,
            head_home: super::NIL,
            prev: [super::NIL; LEVELS],
            next: [super::NIL; LEVELS],
        }
    }
}

impl Entry {
    /// The entry of task `id`'s access `io` (key `key`, flags `flags`) held by `handle`, in
    /// its tensor's slot `slot`, on no list yet.
    #[inline(always)]
    pub(super) fn new(id: u64, handle: u32, io: &Io, key: Key, flags: u8, slot: u8) -> Entry {
        Entry {
            id,
            c0: key.c0,
            c1: key.c1,
            handle,
            tensor: io.tensor,
            flags,
            ndims: io.ndims,
            s0: key.s0,
            s1: key.s1,
            slot,
            head_home: super::NIL,
            prev: [super::NIL; LEVELS],
            next: [super::NIL; LEVELS],
        }
    }

    #[inline]
    pub(super) fn key(&self) -> Key {
        Key {
            s0: self.s0,
            s1: self.s1,
            c0: self.c0,
            c1: self.c1,
        }
    }
}

/// The region of entry `e`: stored, or rebuilt from a whole key. A task's stored regions are
/// its handle's records, in the order of its entries that are not `KEYED`.
#[inline]
fn region_of(ents: &[Entry], regions: &[Io], e: u32, layout: &MapLayout) -> Io {
    let x = &ents[e as usize];
    if x.flags & KEYED == 0 {
        return stored_region(ents, regions, e, layout);
    }
    let mut r = Io {
        tensor: x.tensor,
        dir: if x.flags & WRITE != 0 { 2 } else { 1 },
        ndims: x.ndims,
        ranges: [(0, 0); crate::limits::MAX_RANK],
    };
    r.ranges[0] = (x.c0, x.c0 + 1);
    r.ranges[1] = (x.c1, x.c1 + 1);
    r
}

/// The stored region of entry `e` (not `KEYED`): its handle's record numbered by the entries
/// before it that are not keyed either. Out of line: a program of tiles and rows never comes
/// here, and the count need not be copied into every lookup.
#[inline(never)]
fn stored_region(ents: &[Entry], regions: &[Io], e: u32, layout: &MapLayout) -> Io {
    let handle = ents[e as usize].handle;
    let mut j = 0;
    for y in &ents[(handle * layout.max_task_io) as usize..e as usize] {
        j += (y.flags & KEYED == 0) as u32;
    }
    regions
        .get((handle * layout.max_stored_io + j) as usize)
        .copied()
        .unwrap_or_default()
}

/// [`meet`] for entry `x` when it is a point (`T[c0]` or `T[c0, c1]`: `KEYED`, each named
/// dimension one element wide) and `io` names the same dimensions, in overlap mode: the two share
/// an element exactly when every range of `io` holds the point's coordinate, and then `io` also
/// covers the point. What `overlaps` and `covers` give for the rebuilt point, without building
/// it (a stencil's read of three cells meets its neighbours' point writes this way). `None` for
/// any other pair.
#[inline(always)]
pub(super) fn meet_point(x: &Entry, io: &Io, exact: bool) -> Option<(bool, bool)> {
    if exact || x.flags & KEYED == 0 || x.ndims != io.ndims || x.ndims == 0 {
        return None;
    }
    let inside = |d: usize, c: i64| io.ranges[d].0 <= c && c < io.ranges[d].1;
    let met = inside(0, x.c0) && (x.ndims == 1 || inside(1, x.c1));
    Some((met, met && io.writes()))
}

/// Whether entry `e`'s stored or rebuilt region and `io` depend on each other, and whether
/// `io` (if it writes) covers it: equal regions in exact mode, a shared element in overlap
/// mode.
#[inline]
pub(super) fn meet(
    ents: &[Entry],
    regions: &[Io],
    e: u32,
    layout: &MapLayout,
    io: &Io,
    exact: bool,
) -> (bool, bool) {
    let r = region_of(ents, regions, e, layout);
    if exact {
        let s = same_key(&r, io);
        (s, s && io.writes())
    } else {
        (r.overlaps(io), io.writes() && io.covers(&r))
    }
}

/// Whether two regions are the same in exact mode: tensor, named dimension count and ranges
/// (the pto-isa key; `X[t]` and `X[t, 0:4096]` differ).
fn same_key(a: &Io, b: &Io) -> bool {
    a.tensor == b.tensor && a.ndims == b.ndims && a.dims() == b.dims()
}

/// The kind of dependency a lookup of `io` finds on a write list (`list` 0) or a read list.
#[inline]
pub(super) fn kind(list: usize, io: &Io) -> DepKind {
    match (list, io.reads()) {
        (0, true) => DepKind::Raw,
        (0, false) => DepKind::Waw,
        _ => DepKind::War,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(ranges: &[(i64, i64)]) -> Io {
        let mut io = Io {
            ndims: ranges.len() as u8,
            ..Io::default()
        };
        io.ranges[..ranges.len()].copy_from_slice(ranges);
        io
    }

    /// Every range of every level lies within the cells a lookup of any range it shares an
    /// element with (`Io::overlaps`) visits, and a lookup visits no more cells than its width
    /// spans (none for an empty or inverted range).
    #[test]
    fn a_lookup_visits_every_cell_that_can_hold_an_overlapping_range() {
        // Fewer ranges under Miri (`scripts/miri.sh`), which runs this a thousand times slower.
        let (starts, widths) = if cfg!(miri) {
            (-3i64..3, 8)
        } else {
            (-20i64..20, 40)
        };
        for a in starts {
            for w in -3..widths {
                let e = range(&[(a, a + w)]);
                let k = Key::of(&e);
                let queries = if cfg!(miri) { -5i64..5 } else { -25i64..25 };
                for qa in queries {
                    for qw in -3..12i64 {
                        let q = range(&[(qa, qa + qw)]);
                        let (lo, hi) = cells(&q, 0, k.s0).unwrap();
                        let visited = lo <= k.c0 && k.c0 <= hi;
                        if e.overlaps(&q) {
                            assert!(visited, "{e:?} at {k:?} missed by {q:?}: {lo}..={hi}");
                        }
                        // Never more than the cells the query's width spans, plus one.
                        let n = count(Some((lo, hi)));
                        let qw = qw.max(0);
                        let cell = 1i64 << k.s0;
                        let span = if k.s0 == 0 {
                            qw
                        } else {
                            (qw + cell - 1) / cell + 2
                        };
                        assert!(n <= span as u128, "{q:?} at level {}: {n}", k.s0);
                    }
                }
            }
        }
    }

    #[test]
    fn levels_and_whole_dimensions() {
        let k = Key::of(&range(&[(5, 6), (0, 3)]));
        assert_eq!((k.s0, k.c0, k.s1, k.c1), (0, 5, 2, 0));
        let k = Key::of(&range(&[(-7, -3)]));
        assert_eq!((k.s0, k.c0, k.s1, k.c1), (2, -2, ALL, 0));
        let k = Key::of(&range(&[(i64::MIN, i64::MAX)]));
        assert_eq!((k.s0, k.c0), (ALL, 0));
        // An unnamed dimension has no bound at any level but ALL.
        let row = range(&[(1, 2)]);
        assert_eq!(cells(&row, 1, 0), None);
        assert_eq!(cells(&row, 1, ALL), Some((0, 0)));
        assert_eq!(count(cells(&row, 1, 3)), u128::MAX);
        // Extreme coordinates do not overflow.
        let far = range(&[(i64::MAX - 1, i64::MAX)]);
        assert_eq!(count(cells(&far, 0, MAX_LEVEL as u8)), 2);
        let low = range(&[(i64::MIN, i64::MIN + 1)]);
        assert_eq!(count(cells(&low, 0, MAX_LEVEL as u8)), 2);
        assert_eq!(count(cells(&range(&[(i64::MIN, i64::MIN)]), 0, 0)), 0);
    }

    /// `keyed` (the count of regions to store) agrees with the levels: a keyed region's named
    /// dimensions are all at level 0 and it names at most two.
    #[test]
    fn keyed_regions_are_their_keys() {
        for ndims in 0..=3u8 {
            for widths in 0..27u32 {
                let mut io = Io {
                    ndims,
                    ..Io::default()
                };
                for d in 0..ndims as usize {
                    let w = (widths / 3u32.pow(d as u32) % 3) as i64;
                    io.ranges[d] = (5, 5 + w);
                }
                let whole = io.ndims <= 2 && io.dims().iter().all(|&(a, b)| b - a == 1);
                assert_eq!(keyed(&io), whole, "{io:?}");
            }
        }
    }
}
