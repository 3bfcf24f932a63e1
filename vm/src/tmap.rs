//! The fixed-capacity TensorMap of a scheduler (spec/runtime.md §3.3): the live accesses of the
//! tasks in a window, looked up by region to find each new task's RAW, WAW and WAR
//! predecessors, with no heap and no growth.
//!
//! Every access is an [`Entry`] in a caller-sized array, at a place fixed by its task's
//! **handle** (a window slot, or `aicpu × window + slot` for a map shared by several windows) and
//! its position in the task, so [`TensorMap::retire`] drops them all when the task completes; a write that covers an entry's
//! whole region unlinks it at once (it can no longer be anyone's nearest predecessor). So the map
//! holds at most `handles × max_task_io` entries, whatever the program's length.
//!
//! Lookups follow the bucketing of the reference TensorMap (host-sim's `DepBuilder`): an entry one
//! element wide in dimensions 0 and 1 (a 2-D tile) is found through `(tensor, i, j)`, one element
//! wide in dimension 0 only through `(tensor, i)`, and every other one through its tensor, each
//! list split into writes and reads so that a read scans only writes. Lists are intrusive,
//! doubly linked through the entries, with heads in fixed hash tables; a lookup only considers
//! the entries whose key it asked for, so hash collisions cost time, never change the answer.
//!
//! ```
//! use ptovm_vm::tmap::{Entry, MapLayout, MatchMode, Slices, TensorMap};
//! use ptovm_vm::{Dir, Io};
//! let tile = |dir: Dir, i| {
//!     let mut io = Io { tensor: 0, dir: dir as u8, ndims: 1, ..Io::default() };
//!     io.ranges[0] = (i, i + 1);
//!     io
//! };
//! let layout = MapLayout::new(4, 1, 1).unwrap();
//! let (mut entries, mut ios, mut words, mut marks) = (
//!     vec![Entry::default(); layout.entries as usize],
//!     vec![Io::default(); layout.regions as usize],
//!     vec![0; layout.words()],
//!     vec![0; layout.handles as usize],
//! );
//! let mem = Slices { entries: &mut entries, ios: &mut ios, words: &mut words, marks: &mut marks };
//! let mut map = TensorMap::new(layout, MatchMode::Overlap, mem).unwrap();
//! let mut preds = Vec::new();
//! map.add(0, 0, &[tile(Dir::Out, 3)], &mut |p| preds.push(p.id)).unwrap(); // writes A[3]
//! map.add(1, 1, &[tile(Dir::In, 3)], &mut |p| preds.push(p.id)).unwrap(); // reads it: RAW
//! assert_eq!(preds, [0]);
//! map.retire(0).unwrap(); // task 0 completed: nothing depends on it any more
//! preds.clear();
//! map.add(2, 0, &[tile(Dir::Out, 3)], &mut |p| preds.push(p.id)).unwrap(); // WAR on task 1
//! assert_eq!(preds, [1]);
//! ```

use crate::interp::Io;

/// "No entry" in a link or a list head.
pub const NIL: u32 = u32::MAX;

/// Lists an entry can be on: its home list, the list of its dimension-0 index, its tensor's.
const LEVELS: usize = 3;
const HOME: usize = 0;
const ROW: usize = 1;
const TENSOR: usize = 2;

/// How regions match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchMode {
    /// Only equal regions (same tensor, same named dimensions) depend on each other: the
    /// pto-isa TensorMap; misses edges between different but overlapping regions.
    Exact,
    /// Regions depend on each other when they share an element: the ground truth.
    Overlap,
}

/// Kind of a dependency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DepKind {
    /// The new task reads what the earlier one wrote.
    Raw,
    /// Both write.
    Waw,
    /// The new task writes what the earlier one read.
    War,
}

/// A predecessor found by [`TensorMap::add`]: reported once per earlier task, with the kind
/// of the first access pair found between the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pred {
    /// The earlier task's id.
    pub id: u64,
    /// Its handle.
    pub handle: u32,
    /// The kind of dependency.
    pub kind: DepKind,
}

/// Why a map cannot be built or a task added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// A size is zero or too large for 32-bit indices.
    #[error("TensorMap size out of range: {what} = {value}")]
    Size {
        /// Which size.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// The memory given does not have the layout's sizes.
    #[error("TensorMap memory holds {got} {what}, the layout needs {need}")]
    Memory {
        /// Which array.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The layout's.
        need: usize,
    },
    /// The handle still holds a task that has not retired.
    #[error("handle {handle} still holds an unretired task")]
    Busy {
        /// The handle.
        handle: u32,
    },
    /// A task with more regions than the layout was sized for.
    #[error("a task with {regions} regions; the map was sized for {max}")]
    Regions {
        /// The task's regions.
        regions: usize,
        /// The layout's `max_task_io`.
        max: u32,
    },
    /// A task with more regions to store than the layout was sized for (it was made for
    /// another program).
    #[error("a task with {regions} regions to store; the map was sized for {max}")]
    Stored {
        /// The task's regions that its keys do not describe.
        regions: usize,
        /// The layout's `max_stored_io`.
        max: u32,
    },
    /// A region with more dimensions than a tensor can have.
    #[error(
        "a region with {ndims} dimensions (at most {} are allowed)",
        crate::limits::MAX_RANK
    )]
    Rank {
        /// Its dimension count.
        ndims: u8,
    },
    /// A handle past the layout's.
    #[error("handle {handle} out of range (the map has {handles})")]
    Handle {
        /// The handle.
        handle: u32,
        /// Handles in the layout.
        handles: u32,
    },
    /// A tensor index past the layout's.
    #[error("tensor {tensor} out of range (the map has {tensors})")]
    Tensor {
        /// The tensor.
        tensor: u16,
        /// Tensors in the layout.
        tensors: u32,
    },
}

/// The entry of one access: its key, its task and its list links, in one 64-byte line (the
/// region itself is in a parallel array, read only when the key matches).
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    id: u64,
    p0: i64,
    p1: i64,
    handle: u32,
    tensor: u16,
    /// `LIVE`, `WRITE`, `HAS_P0`, `HAS_P1`, `ON_TENSOR`, `KEYED`.
    flags: u8,
    /// The region's named dimension count.
    ndims: u8,
    /// The home list's head (word index).
    head_home: u32,
    /// The row list's head (word index), `NIL` when not on that level.
    head_row: u32,
    prev: [u32; LEVELS],
    next: [u32; LEVELS],
}

const LIVE: u8 = 1;
const WRITE: u8 = 2;
const HAS_P0: u8 = 4;
const HAS_P1: u8 = 8;
const ON_TENSOR: u8 = 16;
/// The key is the whole region (every named dimension is a point of the key): the region is
/// not stored, and two such entries with equal keys have equal regions.
const KEYED: u8 = 32;

/// Words per tensor after the list heads: `ROW_ON`/`TENSOR_ON`, then its live entries wide in
/// dimension 0, those one element wide in dimension 0 only, those one element wide in both.
const TENSOR_WORDS: usize = 4;

/// A tensor's row lists are kept (it has had a lookup one element wide in dimension 0 only).
const ROW_ON: u32 = 1;
/// A tensor's tensor lists are kept (it has had a lookup wide in dimension 0).
const TENSOR_ON: u32 = 2;

impl Default for Entry {
    fn default() -> Entry {
        Entry {
            id: 0,
            p0: 0,
            p1: 0,
            handle: NIL,
            tensor: 0,
            flags: 0,
            ndims: 0,
            head_home: NIL,
            head_row: NIL,
            prev: [NIL; LEVELS],
            next: [NIL; LEVELS],
        }
    }
}

impl Entry {
    fn key(&self) -> Key {
        Key {
            p0: (self.flags & HAS_P0 != 0).then_some(self.p0),
            p1: (self.flags & HAS_P1 != 0).then_some(self.p1),
        }
    }
}

/// What [`TensorMap::add_some`] does with a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Look it up and record it.
    Record,
    /// Look it up only (a read no later write needs to find); a write is recorded anyway.
    Lookup,
    /// Record it without looking it up (no earlier access can meet it).
    Insert,
    /// Look it up without recording it, whatever its direction: a write still unlinks the
    /// entries it covers (spec/runtime.md §3.7: the first iteration of a carried tensor's
    /// loop finds what came before the loop; its later accesses are named by the program).
    Find,
    /// Ignore it.
    Skip,
}

/// The sizes of a map: everything it will ever hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapLayout {
    /// Access entries: `handles × max_task_io` (entry `h × max_task_io + k` is region `k` of
    /// the task held by handle `h`).
    pub entries: u32,
    /// Regions per task at most.
    pub max_task_io: u32,
    /// Buckets of the home table (a power of two).
    pub home_buckets: u32,
    /// Buckets of the dimension-0 table (a power of two).
    pub row_buckets: u32,
    /// Tensors of the program.
    pub tensors: u32,
    /// Task handles (window slots).
    pub handles: u32,
    /// Stored regions per task at most: the regions a key does not wholly describe
    /// (`Verified::max_stored_io`); `max_task_io` unless the program says fewer.
    pub max_stored_io: u32,
    /// Region records: `handles × max_stored_io` (record `h × max_stored_io + j` is the `j`-th
    /// stored region of the task held by handle `h`).
    pub regions: u32,
}

impl MapLayout {
    /// The layout for `handles` tasks of at most `max_task_io` regions each over `tensors`
    /// tensors. Tables have at least twice as many buckets as entries.
    pub fn new(handles: u32, max_task_io: u32, tensors: u32) -> Result<MapLayout, MapError> {
        let size = |what, value: u32, max: u32| {
            if value == 0 || value > max {
                Err(MapError::Size {
                    what,
                    value: value as u64,
                })
            } else {
                Ok(value)
            }
        };
        let handles = size("handles", handles, 1 << 24)?;
        let io = size(
            "max_task_io",
            max_task_io,
            crate::limits::MAX_TASK_IO as u32,
        )?;
        let tensors = size("tensors", tensors, crate::limits::MAX_TENSORS)?;
        // At most 2^28 entries: every word index below fits in a u32.
        let entries = handles * io;
        let buckets = (2 * entries).next_power_of_two();
        Ok(MapLayout {
            entries,
            max_task_io: io,
            home_buckets: buckets,
            row_buckets: buckets,
            tensors,
            handles,
            max_stored_io: io,
            regions: entries,
        })
    }

    /// The layout for a verified program: its tensors, its largest task's region count (at
    /// least 1), and region records only for the regions its keys do not describe (none for a
    /// program whose every region is a tile or a row, like the LLaMA layer's).
    pub fn for_program(program: &crate::Verified<'_>, handles: u32) -> Result<MapLayout, MapError> {
        let mut l = MapLayout::new(
            handles,
            program.max_task_io().max(1),
            (program.tensors().len() as u32).max(1),
        )?;
        l.max_stored_io = program.max_stored_io().min(l.max_task_io);
        l.regions = l.handles * l.max_stored_io;
        Ok(l)
    }

    fn row_base(&self) -> usize {
        2 * self.home_buckets as usize
    }
    fn tensor_base(&self) -> usize {
        self.row_base() + 2 * self.row_buckets as usize
    }
    /// Per tensor, `TENSOR_WORDS` words: which of its row and tensor lists are kept (`ROW_ON`,
    /// `TENSOR_ON`), its live entries wide in dimension 0, its live entries one element wide in
    /// dimension 0 only, and those one element wide in dimensions 0 and 1 (lookups skip the
    /// lists of shapes a tensor has none of).
    fn level_base(&self) -> usize {
        self.tensor_base() + 2 * self.tensors as usize
    }
    fn handle_base(&self) -> usize {
        self.level_base() + TENSOR_WORDS * self.tensors as usize
    }

    /// Length of the `u32` array: list heads (a write and a read list per bucket and per
    /// tensor), which lists each tensor keeps and how many wide and row entries it has, and each
    /// handle's region count.
    pub fn words(&self) -> usize {
        self.handle_base() + self.handles as usize
    }

    /// Bytes of memory the map needs: entries, their regions, words and one `u64` mark per
    /// handle.
    pub fn bytes(&self) -> usize {
        self.entries as usize * core::mem::size_of::<Entry>()
            + self.regions as usize * core::mem::size_of::<Io>()
            + self.words() * 4
            + self.handles as usize * 8
    }
}

/// The memory of a map, owned or borrowed by the caller, at the sizes [`MapLayout`] gives:
/// `entries` entries and as many regions, `words()` words, `handles` marks.
pub trait Storage {
    /// The four arrays.
    fn parts(&mut self) -> (&mut [Entry], &mut [Io], &mut [u32], &mut [u64]);
}

/// Borrowed memory (the device: carved from the caller's region).
pub struct Slices<'m> {
    /// Entries.
    pub entries: &'m mut [Entry],
    /// The entries' regions.
    pub ios: &'m mut [Io],
    /// Words.
    pub words: &'m mut [u32],
    /// Marks.
    pub marks: &'m mut [u64],
}

impl Storage for Slices<'_> {
    fn parts(&mut self) -> (&mut [Entry], &mut [Io], &mut [u32], &mut [u64]) {
        (self.entries, self.ios, self.words, self.marks)
    }
}

/// Where a region is found: its home key and whether it is narrow in dimension 0.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key {
    /// The point in dimension 0, if the region is one element wide there.
    p0: Option<i64>,
    /// The point in dimension 1, if one element wide there too (only with `p0`).
    p1: Option<i64>,
}

fn point(io: &Io, d: usize) -> Option<i64> {
    let (a, b) = io.ranges[d];
    (io.ndims as usize > d && b.wrapping_sub(a) == 1).then_some(a)
}

impl Key {
    fn of(io: &Io) -> Key {
        let p0 = point(io, 0);
        Key {
            p0,
            p1: p0.and(point(io, 1)),
        }
    }

    /// Whether the key is the whole of `io`'s region.
    fn is_whole(&self, io: &Io) -> bool {
        match (self.p0, self.p1) {
            (Some(_), Some(_)) => io.ndims == 2,
            (Some(_), None) => io.ndims == 1,
            _ => io.ndims == 0,
        }
    }
}

/// `io`'s named dimension count if it is a point whose key is its whole region (a row point
/// `T[i]` or a tile `T[i, j]`: one or two named dimensions, each one element wide), else 0.
#[inline]
fn point_dims(io: &Io) -> u8 {
    let one = |d: usize| io.ranges[d].1.wrapping_sub(io.ranges[d].0) == 1;
    match io.ndims {
        1 if one(0) => 1,
        2 if one(0) && one(1) => 2,
        _ => 0,
    }
}

/// Whether `io`'s key is its whole region (`Key::of(io).is_whole(io)`, without building the
/// key): no named dimension, or one or two each one element wide.
#[inline]
fn keyed(io: &Io) -> bool {
    io.ndims == 0 || point_dims(io) != 0
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
    r.ranges[0] = (x.p0, x.p0 + 1);
    r.ranges[1] = (x.p1, x.p1 + 1);
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

/// Whether entry `e`'s stored or rebuilt region and `io` depend on each other, and whether
/// `io` (if it writes) covers it: equal keys in exact mode, a shared element in overlap mode.
#[inline(never)]
fn meet(
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

/// A lookup by task `id` (its mark `mark`) on a list of `kind`.
struct Visit {
    id: u64,
    mark: u64,
    kind: DepKind,
}

impl Visit {
    /// Entry `e` met the lookup: `(hit, covered)` from [`meet`] or its shortcut. A hit on
    /// another task is reported once per task (`marks`); a covered entry is unlinked. Returns
    /// whether it was.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn met(
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

const WIDE: u64 = 0x9E37_79B9_7F4A_7C15;

/// Multiplicative (Fibonacci) hashing of the tensor and `p0`: the top `bits` bits of a
/// product spread consecutive indices evenly over the buckets; `p1` is added to that, so the
/// tiles of one row (`(i, j)`, `(i, j + 1)`, …), which programs tend to touch in order, have
/// neighbouring buckets and share cache lines.
#[inline]
fn hash_home(tensor: u16, k: Key, bits: u32) -> u32 {
    let a = k.p0.map_or(WIDE, |x| x as u64) ^ ((tensor as u64) << 48);
    let b = k.p1.map_or(WIDE, |x| x as u64);
    let h = a.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let h = (h.wrapping_add(h >> 29) >> (64 - bits)).wrapping_add(b);
    (h & ((1u64 << bits) - 1)) as u32
}

#[inline]
fn hash_row(tensor: u16, i: i64, bits: u32) -> u32 {
    let h = ((i as u64) ^ ((tensor as u64) << 48)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - bits)) as u32
}

/// Whether two regions are the same in exact mode: tensor, named dimension count and ranges
/// (the pto-isa key; `X[t]` and `X[t, 0:4096]` differ).
fn same_key(a: &Io, b: &Io) -> bool {
    a.tensor == b.tensor && a.ndims == b.ndims && a.dims() == b.dims()
}

/// The map. Work counter: [`TensorMap::visits`] (entries examined by lookups).
pub struct TensorMap<S> {
    mem: S,
    layout: MapLayout,
    bases: Bases,
    mode: MatchMode,
    used: u32,
    live: u32,
    visits: u64,
    inserted: u64,
}

impl<S: Storage> TensorMap<S> {
    /// A map over `mem`, which must have the layout's sizes; its contents are overwritten.
    pub fn new(layout: MapLayout, mode: MatchMode, mut mem: S) -> Result<TensorMap<S>, MapError> {
        // The fields a caller may set by hand must agree with each other.
        let consistent = layout.max_stored_io <= layout.max_task_io
            && layout.handles.checked_mul(layout.max_task_io) == Some(layout.entries)
            && layout.handles.checked_mul(layout.max_stored_io) == Some(layout.regions);
        if !consistent {
            return Err(MapError::Size {
                what: "layout (entries, regions and their per-task counts disagree)",
                value: layout.regions as u64,
            });
        }
        let (e, ios, w, m) = mem.parts();
        for (what, got, need) in [
            ("entries", e.len(), layout.entries as usize),
            ("regions", ios.len(), layout.regions as usize),
            ("words", w.len(), layout.words()),
            ("marks", m.len(), layout.handles as usize),
        ] {
            if got != need {
                return Err(MapError::Memory { what, got, need });
            }
        }
        let mut map = TensorMap {
            mem,
            layout,
            bases: Bases::of(&layout),
            mode,
            used: 0,
            live: 0,
            visits: 0,
            inserted: 0,
        };
        map.reset();
        Ok(map)
    }

    /// Empties the map.
    pub fn reset(&mut self) {
        let base = self.layout.level_base();
        let (e, _, w, m) = self.mem.parts();
        w[..base].fill(NIL);
        w[base..].fill(0);
        m.fill(0);
        e.fill(Entry::default());
        self.used = 0;
        self.live = 0;
    }

    /// The layout.
    pub fn layout(&self) -> MapLayout {
        self.layout
    }

    /// The match mode.
    pub fn mode(&self) -> MatchMode {
        self.mode
    }

    /// Live accesses (entries a lookup can still find).
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Entries in use: live ones plus covered ones whose task has not retired.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Entries examined by lookups so far.
    pub fn visits(&self) -> u64 {
        self.visits
    }

    /// Entries inserted so far (it never goes down, not even at [`TensorMap::reset`]). Only
    /// an insertion gives a tensor a live entry, so a tensor [`TensorMap::quiet`] found quiet
    /// stays quiet while this count is the same.
    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// Whether `tensor` has no live entry, so that a lookup of it finds nothing (and a lookup
    /// that records nothing changes nothing): what [`TensorMap::add_some`] checks first for
    /// such a region, for a caller that can then skip the call. False for a tensor past the
    /// layout's (`add_some` reports it).
    #[inline]
    pub fn quiet(&mut self, tensor: u16) -> bool {
        let at = self.bases.level as usize + TENSOR_WORDS * tensor as usize;
        (tensor as u32) < self.layout.tensors
            && self.mem.parts().2[at + 1..at + TENSOR_WORDS]
                .iter()
                .all(|&w| w == 0)
    }

    /// Adds task `id`, held by `handle`, with its regions `ios`: reports each earlier task it
    /// depends on once to `pred` (RAW, WAW or WAR, by the reference graph's rules), records the
    /// regions, and unlinks the entries its writes cover. Accesses that conflict (overlap, one
    /// of them a write) are added in increasing id order; others may come in any order. On
    /// error nothing has changed.
    pub fn add(
        &mut self,
        id: u64,
        handle: u32,
        ios: &[Io],
        pred: &mut impl FnMut(Pred),
    ) -> Result<(), MapError> {
        self.add_some(id, handle, ios, |_, _| Use::Record, pred)
            .map(|_| ())
    }

    /// [`TensorMap::add`] for the regions `how` (given each region's position and the region)
    /// chooses: [`Use::Record`] ones are looked up and recorded, [`Use::Lookup`] reads only
    /// looked up (no later write will need them: a write is always recorded), [`Use::Insert`]
    /// ones only recorded (the caller knows that no earlier access can meet them, so a lookup
    /// would find nothing and cover nothing), [`Use::Find`] ones looked up only (a write
    /// still unlinks what it covers), [`Use::Skip`] ones ignored (and not checked). Returns
    /// how many were recorded; with none, the handle stays free (nothing to retire).
    pub fn add_some(
        &mut self,
        id: u64,
        handle: u32,
        ios: &[Io],
        how: impl Fn(usize, &Io) -> Use,
        pred: &mut impl FnMut(Pred),
    ) -> Result<u32, MapError> {
        if handle >= self.layout.handles {
            return Err(MapError::Handle {
                handle,
                handles: self.layout.handles,
            });
        }
        let count = self.bases.handle as usize + handle as usize;
        let held = self.mem.parts().2[count];
        if held != 0 {
            return Err(MapError::Busy { handle });
        }
        if ios.len() > self.layout.max_task_io as usize {
            return Err(MapError::Regions {
                regions: ios.len(),
                max: self.layout.max_task_io,
            });
        }
        // What `how` does with each region, asked once. Only the regions it uses are
        // checked, and those to store (their key does not describe them, and they are
        // recorded) must fit.
        let mut uses = [Use::Skip; crate::limits::MAX_TASK_IO];
        let max_stored = self.layout.max_stored_io as usize;
        let mut stored = 0;
        let mut any = false;
        for (k, io) in ios.iter().enumerate() {
            let u = how(k, io);
            let Some(slot) = uses.get_mut(k) else {
                return Err(MapError::Regions {
                    regions: ios.len(),
                    max: crate::limits::MAX_TASK_IO as u32,
                });
            };
            *slot = u;
            if u == Use::Skip {
                continue;
            }
            if io.tensor as u32 >= self.layout.tensors {
                return Err(MapError::Tensor {
                    tensor: io.tensor,
                    tensors: self.layout.tensors,
                });
            }
            if io.ndims as usize > crate::limits::MAX_RANK {
                return Err(MapError::Rank { ndims: io.ndims });
            }
            any = true;
            let records = match u {
                Use::Lookup => io.writes(),
                Use::Find | Use::Skip => false,
                Use::Record | Use::Insert => true,
            };
            stored += (records && !keyed(io)) as usize;
        }
        if stored > max_stored {
            return Err(MapError::Stored {
                regions: stored,
                max: self.layout.max_stored_io,
            });
        }
        if !any {
            return Ok(0);
        }
        let mark = id.wrapping_add(1);
        let first = handle * self.layout.max_task_io;
        let first_region = handle * self.layout.max_stored_io;
        let mut recorded = 0u32;
        let mut kept = 0u32;
        for (io, &how) in ios.iter().zip(&uses) {
            let (lookup, record) = match how {
                Use::Skip => continue,
                Use::Lookup if !io.writes() => (true, false),
                Use::Find => (true, false),
                Use::Insert => (false, true),
                _ => (true, true),
            };
            let at = self.bases.level as usize + TENSOR_WORDS * io.tensor as usize;
            let (wides, rows) = {
                let w = &self.mem.parts().2[at..at + TENSOR_WORDS];
                if !record && w[1] | w[2] | w[3] == 0 {
                    // The tensor has no live entry to meet, and this is a lookup only (a read
                    // of a tensor whose writers have all retired, as most reads are).
                    continue;
                }
                // A point meets only entries of its own key when the tensor keeps no row or
                // tensor lists and has no live entry wide where the point is narrow, nor (for
                // a row point) one narrow where it is wide.
                let alone = match point_dims(io) {
                    1 => w[0] | w[1] | w[3] == 0,
                    2 => w[0] | w[1] | w[2] == 0,
                    _ => false,
                };
                if alone {
                    let e = record.then_some(first + recorded);
                    self.add_point(io, id, handle, mark, lookup, e, pred);
                    recorded += record as u32;
                    continue;
                }
                (w[1], w[2])
            };
            let key = Key::of(io);
            let home = self.home_head(io.tensor, key);
            let wide = Key { p0: None, p1: None };
            match (self.mode, key.p0) {
                _ if !lookup => {}
                (MatchMode::Exact, _) => self.scan::<HOME>(home, io, id, mark, &[key], pred),
                (MatchMode::Overlap, Some(i)) => {
                    if key.p1.is_some() {
                        // A tile: its own list, its row's wide list, the tensor's wide list —
                        // those of the shapes the tensor has live entries of.
                        let row = Key {
                            p0: key.p0,
                            p1: None,
                        };
                        let mut keys = [key; 3];
                        let mut n = 1;
                        if rows > 0 {
                            keys[n] = row;
                            n += 1;
                        }
                        if wides > 0 {
                            keys[n] = wide;
                            n += 1;
                        }
                        if n == 1 {
                            // Only its own list (the common case): its bucket is known.
                            self.scan::<HOME>(home, io, id, mark, &[key], pred);
                        } else {
                            self.scan_home(&keys[..n], io, id, mark, pred);
                        }
                    } else {
                        self.keep(io.tensor, ROW_ON);
                        let row = self.row_head(io.tensor, i);
                        self.scan::<ROW>(row, io, id, mark, &[key], pred);
                        if wides > 0 {
                            self.scan_home(&[wide], io, id, mark, pred);
                        }
                    }
                }
                (MatchMode::Overlap, None) => {
                    self.keep(io.tensor, TENSOR_ON);
                    let t = self.tensor_head(io.tensor);
                    self.scan::<TENSOR>(t, io, id, mark, &[key], pred);
                }
            }
            if record {
                let whole = key.is_whole(io);
                self.insert(
                    first + recorded,
                    first_region + kept,
                    id,
                    handle,
                    io,
                    key,
                    home,
                );
                recorded += 1;
                kept += !whole as u32;
            }
        }
        self.mem.parts().2[count] = recorded;
        self.used += recorded;
        Ok(recorded)
    }

    /// [`TensorMap::add_some`]'s steps for one region that is a point (`point_dims`: a row
    /// point or a tile) of a tensor that keeps no row or tensor lists and has no live entry
    /// wider than the point where it is narrow, nor a tile when it is a row point (the common
    /// case: every access of the LLaMA layer). Only entries of the point's own key, all on
    /// its home list, can meet it; it is looked up there (if `lookup`) and recorded (as entry
    /// `record`, if given) on that list alone, its key its whole region. The general path
    /// does the same with the steps other shapes need.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn add_point(
        &mut self,
        io: &Io,
        id: u64,
        handle: u32,
        mark: u64,
        lookup: bool,
        record: Option<u32>,
        pred: &mut impl FnMut(Pred),
    ) {
        let tile = io.ndims == 2;
        let p0 = io.ranges[0].0;
        let p1 = if tile { io.ranges[1].0 } else { 0 };
        let key = Key {
            p0: Some(p0),
            p1: tile.then_some(p1),
        };
        // The flags and points of the entries of this key.
        let has = if tile { HAS_P0 | HAS_P1 } else { HAS_P0 };
        let head = self.home_head(io.tensor, key);
        let writes = io.writes();
        let exact = self.mode == MatchMode::Exact;
        let bases = self.bases;
        let layout = self.layout;
        let (ents, regions, words, marks) = self.mem.parts();
        let mut visits = 0;
        let mut unlinked = 0;
        for list in 0..(1 + writes as u32) * lookup as u32 {
            let kind = match (list, io.reads()) {
                (0, true) => DepKind::Raw,
                (0, false) => DepKind::Waw,
                _ => DepKind::War,
            };
            let mut e = words[(head + list) as usize];
            while e != NIL {
                let x = &ents[e as usize];
                let next = x.next[HOME];
                visits += 1;
                if x.tensor == io.tensor
                    && x.flags & (HAS_P0 | HAS_P1) == has
                    && x.p0 == p0
                    && (!tile || x.p1 == p1)
                {
                    let met = if x.flags & KEYED != 0 && x.ndims == io.ndims {
                        // Both regions are their keys, and the keys are equal.
                        (true, writes)
                    } else {
                        meet(ents, regions, e, &layout, io, exact)
                    };
                    let at = Visit { id, mark, kind };
                    unlinked += at.met(ents, words, marks, e, met, bases, pred) as u32;
                }
                e = next;
            }
        }
        self.visits += visits;
        self.live -= unlinked;
        if let Some(e) = record {
            let kind = !writes as u32;
            let at = bases.level as usize + TENSOR_WORDS * io.tensor as usize;
            words[at + if tile { 3 } else { 2 }] += 1;
            self.inserted += 1;
            ents[e as usize] = Entry {
                id,
                p0,
                p1,
                handle,
                tensor: io.tensor,
                flags: LIVE | has | KEYED | if writes { WRITE } else { 0 },
                ndims: io.ndims,
                head_home: head + kind,
                head_row: NIL,
                prev: [NIL; LEVELS],
                next: [NIL; LEVELS],
            };
            link(ents, words, e, HOME, head + kind);
            self.live += 1;
        }
    }

    /// Whether `handle` holds no entries (retiring it would do nothing; `false` for a
    /// handle out of range).
    #[inline]
    pub fn idle(&mut self, handle: u32) -> bool {
        let count = self.bases.handle as usize + handle as usize;
        handle < self.layout.handles && self.mem.parts().2.get(count) == Some(&0)
    }

    /// Retires the task held by `handle` (it completed): its entries are dropped and the handle
    /// is free for another task. Retiring a free handle does nothing.
    pub fn retire(&mut self, handle: u32) -> Result<(), MapError> {
        self.retire_with(handle, |_, _| {})
    }

    /// [`TensorMap::retire`], telling `each` the tensor of every region the task had recorded
    /// (covered ones too) and whether it was a write.
    pub fn retire_with(
        &mut self,
        handle: u32,
        each: impl FnMut(u16, bool),
    ) -> Result<(), MapError> {
        if handle >= self.layout.handles {
            return Err(MapError::Handle {
                handle,
                handles: self.layout.handles,
            });
        }
        let count = self.bases.handle as usize + handle as usize;
        if self.mem.parts().2[count] == 0 {
            return Ok(());
        }
        self.retire_entries(handle, count, each);
        Ok(())
    }

    /// [`TensorMap::retire_with`] for a handle that holds entries.
    #[inline(never)]
    fn retire_entries(&mut self, handle: u32, count: usize, mut each: impl FnMut(u16, bool)) {
        let bases = self.bases;
        let first = handle * self.layout.max_task_io;
        let (ents, _, words, _) = self.mem.parts();
        let n = core::mem::replace(&mut words[count], 0);
        let mut unlinked = 0;
        for e in first..first + n {
            let x = &ents[e as usize];
            each(x.tensor, x.flags & WRITE != 0);
            if ents[e as usize].flags & LIVE != 0 {
                unlink(ents, words, e, bases);
                unlinked += 1;
            }
        }
        self.used -= n;
        self.live -= unlinked;
    }

    #[inline]
    fn home_head(&self, tensor: u16, key: Key) -> u32 {
        self.bases.home_head(tensor, key)
    }

    #[inline]
    fn row_head(&self, tensor: u16, i: i64) -> u32 {
        self.bases.row_head(tensor, i)
    }

    fn tensor_head(&self, tensor: u16) -> u32 {
        self.bases.tensor + 2 * tensor as u32
    }

    /// Scans the home lists of `keys`, each bucket once (keys may share a bucket).
    #[inline]
    fn scan_home(
        &mut self,
        keys: &[Key],
        io: &Io,
        id: u64,
        mark: u64,
        pred: &mut impl FnMut(Pred),
    ) {
        let mut heads = [NIL; 3];
        for (n, k) in keys.iter().enumerate() {
            heads[n] = self.home_head(io.tensor, *k);
        }
        for n in 0..keys.len() {
            if heads[..n].contains(&heads[n]) {
                continue;
            }
            if keys[n + 1..]
                .iter()
                .zip(&heads[n + 1..])
                .all(|(_, h)| *h != heads[n])
            {
                self.scan::<HOME>(heads[n], io, id, mark, &keys[n..n + 1], pred);
                continue;
            }
            // This bucket's keys: `n` and the later ones that share it.
            let mut ks = [keys[n]; 3];
            let mut m = 0;
            for (k, h) in keys.iter().zip(heads).skip(n) {
                if h == heads[n] {
                    ks[m] = *k;
                    m += 1;
                }
            }
            self.scan::<HOME>(heads[n], io, id, mark, &ks[..m], pred);
        }
    }

    /// Scans the write list at word `head` (and, when `io` writes, the read list after it) on
    /// level `L`, considering only entries of `io`'s tensor whose key on that level is one of
    /// `keys` (on the row level, the dimension-0 point of `keys[0]`; on the tensor level, all).
    #[inline]
    fn scan<const L: usize>(
        &mut self,
        head: u32,
        io: &Io,
        id: u64,
        mark: u64,
        keys: &[Key],
        pred: &mut impl FnMut(Pred),
    ) {
        let writes = io.writes();
        let exact = self.mode == MatchMode::Exact;
        let io_key = Key::of(io);
        let io_whole = io_key.is_whole(io);
        let bases = self.bases;
        let layout = self.layout;
        let (ents, regions, words, marks) = self.mem.parts();
        let (w, r) = (words[head as usize], words[head as usize + 1]);
        if w == NIL && (!writes || r == NIL) {
            return;
        }
        let mut visits = 0;
        let mut unlinked = 0;
        for (list, first) in [(0, w), (1, r)] {
            if list == 1 && !writes {
                break;
            }
            let kind = match (list, io.reads()) {
                (0, true) => DepKind::Raw,
                (0, false) => DepKind::Waw,
                _ => DepKind::War,
            };
            let mut e = first;
            while e != NIL {
                let x = &ents[e as usize];
                let next = x.next[L];
                visits += 1;
                let ours = x.tensor == io.tensor
                    && match L {
                        HOME => keys.contains(&x.key()),
                        ROW => Some(x.p0) == keys[0].p0,
                        _ => true,
                    };
                if ours {
                    let met = if io_whole
                        && x.flags & KEYED != 0
                        && x.ndims == io.ndims
                        && x.key() == io_key
                    {
                        // Both regions are their keys, and the keys are equal.
                        (true, writes)
                    } else {
                        meet(ents, regions, e, &layout, io, exact)
                    };
                    let at = Visit { id, mark, kind };
                    unlinked += at.met(ents, words, marks, e, met, bases, pred) as u32;
                }
                e = next;
            }
        }
        self.visits += visits;
        self.live -= unlinked;
    }

    /// Records `io` as entry `e`, its region (if the key does not describe it) as record
    /// `region`.
    #[allow(clippy::too_many_arguments)]
    fn insert(&mut self, e: u32, region: u32, id: u64, handle: u32, io: &Io, key: Key, home: u32) {
        let kind = if io.writes() { 0 } else { 1 };
        let mut heads = [home + kind, NIL, NIL];
        let mut flags = LIVE | if io.writes() { WRITE } else { 0 };
        flags |= if key.p0.is_some() { HAS_P0 } else { 0 };
        flags |= if key.p1.is_some() { HAS_P1 } else { 0 };
        let at = self.bases.level as usize + TENSOR_WORDS * io.tensor as usize;
        let on = self.mem.parts().2[at];
        if let (Some(i), true) = (key.p0, on & ROW_ON != 0) {
            heads[ROW] = self.row_head(io.tensor, i) + kind;
        }
        if on & TENSOR_ON != 0 {
            heads[TENSOR] = self.tensor_head(io.tensor) + kind;
            flags |= ON_TENSOR;
        }
        self.inserted += 1;
        let (ents, regions, words, _) = self.mem.parts();
        match (key.p0, key.p1) {
            (None, _) => words[at + 1] += 1,
            (Some(_), None) => words[at + 2] += 1,
            (Some(_), Some(_)) => words[at + 3] += 1,
        }
        // The named dimensions only: the others are never read (`Io::dims`, `Io::range`); none
        // when the key is the whole region.
        if key.is_whole(io) {
            flags |= KEYED;
        } else if let Some(r) = regions.get_mut(region as usize) {
            (r.tensor, r.dir, r.ndims) = (io.tensor, io.dir, io.ndims);
            for (d, x) in r.ranges.iter_mut().zip(io.dims()) {
                *d = *x;
            }
        }
        ents[e as usize] = Entry {
            id,
            p0: key.p0.unwrap_or(0),
            p1: key.p1.unwrap_or(0),
            handle,
            tensor: io.tensor,
            flags,
            ndims: io.ndims,
            head_home: heads[HOME],
            head_row: heads[ROW],
            prev: [NIL; LEVELS],
            next: [NIL; LEVELS],
        };
        for (l, &h) in heads.iter().enumerate() {
            if h != NIL {
                link(ents, words, e, l, h);
            }
        }
        self.live += 1;
    }

    /// Starts keeping `tensor`'s row lists (`ROW_ON`) or tensor lists (`TENSOR_ON`) if it does
    /// not yet: the first lookup that needs them links the tensor's live entries in, once (a
    /// pass over the entries), and every later insert links itself. Tensors that no lookup
    /// needs them for (most: tiles are found through their home lists) never pay for them.
    #[inline]
    fn keep(&mut self, tensor: u16, level: u32) {
        let at = self.bases.level as usize + TENSOR_WORDS * tensor as usize;
        if self.mem.parts().2[at] & level == 0 {
            self.start_keeping(tensor, level);
        }
    }

    #[cold]
    fn start_keeping(&mut self, tensor: u16, level: u32) {
        let at = self.bases.level as usize + TENSOR_WORDS * tensor as usize;
        let (bases, tensors) = (self.bases, self.tensor_head(tensor));
        let (ents, _, words, _) = self.mem.parts();
        words[at] |= level;
        for e in 0..ents.len() as u32 {
            let x = &ents[e as usize];
            if x.flags & LIVE == 0 || x.tensor != tensor {
                continue;
            }
            let kind = if x.flags & WRITE != 0 { 0 } else { 1 };
            if level == ROW_ON {
                if x.flags & HAS_P0 == 0 {
                    continue;
                }
                let h = bases.row_head(tensor, x.p0) + kind;
                ents[e as usize].head_row = h;
                link(ents, words, e, ROW, h);
            } else {
                ents[e as usize].flags |= ON_TENSOR;
                link(ents, words, e, TENSOR, tensors + kind);
            }
        }
    }
}

/// Puts entry `e` at the front of the list at word `head` on `level`.
fn link(ents: &mut [Entry], words: &mut [u32], e: u32, level: usize, head: u32) {
    let first = core::mem::replace(&mut words[head as usize], e);
    let x = &mut ents[e as usize];
    x.prev[level] = NIL;
    x.next[level] = first;
    if first != NIL {
        ents[first as usize].prev[level] = e;
    }
}

/// Where the parts of the word array start, and the buckets' bit counts: worked out from the
/// layout once, at creation.
#[derive(Clone, Copy)]
struct Bases {
    /// The row lists' heads.
    row: u32,
    /// The tensor lists' heads.
    tensor: u32,
    /// Per tensor, its flags and counts.
    level: u32,
    /// Per handle, its region count.
    handle: u32,
    /// log2 of the home and row bucket counts.
    home_bits: u32,
    row_bits: u32,
}

impl Bases {
    /// The write list of `key`'s home bucket (its read list is the next word).
    #[inline]
    fn home_head(&self, tensor: u16, key: Key) -> u32 {
        2 * hash_home(tensor, key, self.home_bits)
    }

    /// The write list of row `i`'s bucket (its read list is the next word).
    #[inline]
    fn row_head(&self, tensor: u16, i: i64) -> u32 {
        self.row + 2 * hash_row(tensor, i, self.row_bits)
    }

    fn of(l: &MapLayout) -> Bases {
        Bases {
            row: l.row_base() as u32,
            tensor: l.tensor_base() as u32,
            level: l.level_base() as u32,
            handle: l.handle_base() as u32,
            home_bits: l.home_buckets.trailing_zeros(),
            row_bits: l.row_buckets.trailing_zeros(),
        }
    }
}

/// Takes entry `e` off every list it is on, and out of its tensor's counts.
#[inline(always)]
fn unlink(ents: &mut [Entry], words: &mut [u32], e: u32, b: Bases) {
    let x = &ents[e as usize];
    let at = b.level as usize + TENSOR_WORDS * x.tensor as usize;
    // Wide, row and tile entries are counted in words 1, 2 and 3.
    let shape = match (x.flags & HAS_P0 != 0, x.flags & HAS_P1 != 0) {
        (false, _) => 1,
        (true, false) => 2,
        (true, true) => 3,
    };
    words[at + shape] -= 1;
    let (prev, next, home, row) = (x.prev, x.next, x.head_home, x.head_row);
    let tensor = (x.flags & ON_TENSOR != 0)
        .then(|| b.tensor + 2 * x.tensor as u32 + (x.flags & WRITE == 0) as u32);
    // Every entry is on its home list; the others only when their tensor keeps them.
    off(ents, words, HOME, home, prev[HOME], next[HOME]);
    if row != NIL {
        off(ents, words, ROW, row, prev[ROW], next[ROW]);
    }
    if let Some(t) = tensor {
        off(ents, words, TENSOR, t, prev[TENSOR], next[TENSOR]);
    }
    ents[e as usize].flags &= !LIVE;
}

/// Takes the entry between `p` and `n` off the list at word `head` on `level`.
#[inline]
fn off(ents: &mut [Entry], words: &mut [u32], level: usize, head: u32, p: u32, n: u32) {
    if p == NIL {
        words[head as usize] = n;
    } else {
        ents[p as usize].next[level] = n;
    }
    if n != NIL {
        ents[n as usize].prev[level] = p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `keyed` (the count of regions to store) and `Key::is_whole` (the `KEYED` flag) agree on
    /// every shape: 0–3 named dimensions, each zero, one or two elements wide.
    #[test]
    fn keyed_agrees_with_the_key() {
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
                assert_eq!(keyed(&io), Key::of(&io).is_whole(&io), "{io:?}");
            }
        }
    }
}
