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
//! A lookup's cost does not grow with the live entries: every entry is filed by its **key**
//! (`key.rs`: a level and a cell in dimensions 0 and 1, the level the range's width rounded up
//! to a power of two) on the **home list** of that key, in a fixed hash table. A tensor keeps a
//! few **shape slots**, one per pair of levels its live entries have (tiles, ranges of three,
//! whole rows, …), each with a list of its entries. A lookup visits, for each slot of its
//! tensor, the home lists of the cells that can hold an entry it shares an element with
//! (the width at level 0, at most `⌈width / 2ˢ⌉ + 2` at level `s`, per
//! dimension) when those are fewer than the slot's entries, else scans
//! the slot's **row lists** (one per cell in dimension 0, kept once a lookup needs them) or the
//! slot's list: at most the smaller of the cells and the slot's entries. Every list is split
//! into writes and reads, so a read looks at writes only. Lists are intrusive, doubly linked
//! through the entries; a lookup only considers the entries whose key (or slot and row) it
//! asked for, so hash collisions cost time, never change the answer.
//!
//! A tensor may also have a **dense table** ([`TensorMap::set_dense`]): its points filed by
//! their coordinates, a row at a time, without hashing — Task Bench's rows of points.
//!
//! Files: this one (the interface and the layout), `key.rs` (keys, entries, regions),
//! `lists.rs` (the word array, hashing, linking), `lookup.rs` (lookups and insertion),
//! `dense.rs` (dense tables), `points.rs` (the quick path of a task of table points).
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

mod dense;
mod key;
mod lists;
mod lookup;
mod points;

use crate::interp::Io;
pub use key::Entry;
use key::{keyed, point_dims, Key, LIVE, WRITE};
use lists::{Bases, TENSOR_WORDS};

/// "No entry" in a link or a list head.
pub const NIL: u32 = u32::MAX;

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
    /// A read of a tensor written once that names more than one row, which its written-once
    /// table (spec/runtime.md §4.8, kept beside a map by its user) cannot answer; no program's
    /// read of such a tensor does (§3.5).
    #[error("a read of tensor {tensor} names more than one row of its written-once table")]
    Unanswerable {
        /// The tensor.
        tensor: u16,
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
    /// Buckets of the home table (a power of two, at least twice the entries).
    pub home_buckets: u32,
    /// Buckets of the row table (a power of two, at least the entries).
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
    /// Words for dense tables ([`TensorMap::set_dense`]): `entries + 128` unless set
    /// otherwise (a cell per entry, and the list heads of up to 128 rows).
    pub dense: u32,
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
        Ok(MapLayout {
            entries,
            max_task_io: io,
            home_buckets: (2 * entries).next_power_of_two(),
            row_buckets: entries.next_power_of_two(),
            tensors,
            handles,
            max_stored_io: io,
            regions: entries,
            // A word a cell for as many cells as entries, and rows' list heads besides.
            dense: entries + dense::SPARE_WORDS,
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
        self.row_base() + lists::ROW_WORDS * self.row_buckets as usize
    }
    fn handle_base(&self) -> usize {
        self.tensor_base() + TENSOR_WORDS * self.tensors as usize
    }

    fn dense_base(&self) -> usize {
        self.handle_base() + self.handles as usize
    }

    /// Length of the `u32` array: list heads (a write and a read list per home bucket; the same
    /// and their lengths per row bucket), per tensor its live entries, its dense table and its
    /// shape slots (each with its shape, its live entries and its write and read list heads),
    /// each handle's region count, and the dense tables' cells.
    pub fn words(&self) -> usize {
        self.dense_base() + self.dense as usize
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

/// The map. Work counters: [`TensorMap::visits`] (entries examined by lookups) and
/// [`TensorMap::probes`] (lists looked at).
pub struct TensorMap<S> {
    mem: S,
    layout: MapLayout,
    bases: Bases,
    mode: MatchMode,
    used: u32,
    live: u32,
    visits: u64,
    probes: u64,
    inserted: u64,
    /// Dense words given to tables so far.
    dense_used: u32,
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
            probes: 0,
            inserted: 0,
            dense_used: 0,
        };
        // No tables yet, whatever the memory held.
        map.mem.parts().2.fill(0);
        map.reset();
        Ok(map)
    }

    /// Empties the map. Dense tables stay (empty).
    pub fn reset(&mut self) {
        let l = self.layout;
        let (rows, tensors, handles) = (l.row_base(), l.tensor_base(), l.handle_base());
        let dense = l.dense_base();
        let (e, _, w, m) = self.mem.parts();
        w[..rows].fill(NIL);
        lists::reset_rows(&mut w[rows..tensors]);
        lists::reset_tensors(&mut w[tensors..handles]);
        w[handles..dense].fill(0);
        w[dense..].fill(NIL);
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

    /// Lists (a home bucket's, a row's or a shape slot's) looked at by lookups so far: with
    /// [`TensorMap::visits`], the work of the lookups.
    pub fn probes(&self) -> u64 {
        self.probes
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
        let at = self.bases.tensor_at(tensor);
        (tensor as u32) < self.layout.tensors && self.mem.parts().2[at] == 0
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
        // A task of table points read and written as a stepped tensor's are (Task Bench's),
        // in a map that has tables.
        if self.dense_used != 0 {
            if let Some(recorded) = self.add_points(id, handle, count, ios, &how, pred) {
                return Ok(recorded);
            }
        }
        // What `how` does with each region, asked once, as `(lookup, record)` (neither for a
        // region it skips). Only the regions it uses are checked, and those to store (their
        // key does not describe them, and they are recorded) must fit.
        let mut plan = [(false, false); crate::limits::MAX_TASK_IO];
        let max_stored = self.layout.max_stored_io as usize;
        let mut stored = 0;
        let mut any = false;
        for (k, io) in ios.iter().enumerate() {
            let (lookup, record) = match how(k, io) {
                Use::Skip => continue,
                Use::Lookup => (true, io.writes()),
                Use::Find => (true, false),
                Use::Insert => (false, true),
                Use::Record => (true, true),
            };
            let Some(slot) = plan.get_mut(k) else {
                return Err(MapError::Regions {
                    regions: ios.len(),
                    max: crate::limits::MAX_TASK_IO as u32,
                });
            };
            *slot = (lookup, record);
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
            stored += (record && !keyed(io)) as usize;
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
        for (io, &(lookup, record)) in ios.iter().zip(&plan) {
            if !lookup && !record {
                continue;
            }
            // A tensor with no live entry has nothing to find or cover (a read of a tensor
            // whose writers have all retired, as most reads are).
            let quiet = self.mem.parts().2[self.bases.tensor_at(io.tensor)] == 0;
            if quiet && !record {
                continue;
            }
            let (mut lookup, mut record) = (lookup && !quiet, record);
            let table = dense::Table::of(self.mem.parts().2, self.bases, io.tensor);
            if let Some(t) = table {
                // The table's part; what it leaves to the lists comes below, where the lists'
                // lookup and insertion are called from one place (and inlined there).
                let e = record.then_some(first + recorded);
                let (lists_lookup, filed) =
                    self.add_dense(t, io, id, handle, mark, lookup, e, pred);
                if filed {
                    recorded += 1;
                    record = false;
                }
                lookup = lists_lookup;
                if !lookup && !record {
                    continue;
                }
            } else if point_dims(io) != 0 {
                let e = record.then_some(first + recorded);
                if self.add_point(io, id, handle, mark, lookup, e, pred) {
                    recorded += record as u32;
                    continue;
                }
            }
            let key = Key::of(io);
            if lookup {
                self.lookup(io, key, id, mark, pred);
            }
            if record {
                self.insert(first + recorded, first_region + kept, id, handle, io, key);
                if table.is_some() {
                    self.note_listed(io);
                }
                recorded += 1;
                kept += !keyed(io) as u32;
            }
        }
        self.mem.parts().2[count] = recorded;
        self.used += recorded;
        Ok(recorded)
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
            if x.flags & LIVE != 0 {
                // A table's entry (a stepped tensor's point: most entries of Task Bench's
                // patterns) leaves its cell; the others their lists.
                if x.flags & key::DENSE != 0 {
                    dense::unlink(ents, words, e, bases);
                } else {
                    lists::unlink(ents, words, e, bases);
                }
                unlinked += 1;
            }
        }
        self.used -= n;
        self.live -= unlinked;
    }
}
