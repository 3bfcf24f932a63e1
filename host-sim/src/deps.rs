//! Dependency edges of a task list in program order, found with a TensorMap over regions
//! (spec/bytecode.md §5.5): read-after-write, write-after-write and write-after-read.

use std::collections::HashMap;

use crate::hash::FastHash;

use ptovm_vm::{tmap, Io};

use crate::reference::RefTask;

mod window;
pub use window::InOrderWindow;

/// How regions are matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepMode {
    /// Only equal regions depend on each other (the pto-isa TensorMap): fast, and misses edges
    /// between different but overlapping regions (a tile and its whole tensor).
    Exact,
    /// Regions depend on each other when they share an element (box intersection): the ground
    /// truth.
    Overlap,
}

/// Kind of a dependency edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeKind {
    /// The later task reads what the earlier one wrote.
    Raw,
    /// Both write.
    Waw,
    /// The later task writes what the earlier one read.
    War,
}

impl EdgeKind {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Raw => "RAW",
            EdgeKind::Waw => "WAW",
            EdgeKind::War => "WAR",
        }
    }
}

/// An edge `from → to` (task ids, `from < to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Edge {
    /// Earlier task.
    pub from: u64,
    /// Later task.
    pub to: u64,
    /// Kind (the first found between the pair, in RAW, WAW, WAR order of checking).
    pub kind: EdgeKind,
}

/// The live accesses of one tensor. Regions one element wide in dimension 0 (the common tile
/// access) are bucketed by that index, so a lookup scans only its bucket and the wide regions.
#[derive(Default)]
struct Live {
    buckets: HashMap<i64, Bucket<Lists>, FastHash>,
    wide: Lists,
}

/// A list of accesses that a [`Bucket`] holds.
pub(crate) trait AccessList: Default {
    fn is_empty(&self) -> bool;
}

impl<T> AccessList for Vec<T> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

/// The accesses of one dimension-0 index (shared by this map and the simulator's global one):
/// those one element wide in dimension 1 too by that index (a tile of a 2-D tensor), the others
/// in `wide`.
pub(crate) struct Bucket<L> {
    pub(crate) points: HashMap<i64, L, FastHash>,
    pub(crate) wide: L,
}

impl<L: AccessList> Default for Bucket<L> {
    fn default() -> Bucket<L> {
        Bucket {
            points: HashMap::default(),
            wide: L::default(),
        }
    }
}

impl<L: AccessList> Bucket<L> {
    /// Visits the lists that a region whose dimension-1 range is `r1` (`None`: the whole
    /// dimension) may overlap, dropping those that end up empty, so that a map holds only live
    /// accesses. A range narrower than the bucket's points is looked up point by point (a
    /// stencil's `G[t - 1, i - 1 : i + 2]` among a timestep's thousand points), a wider one
    /// scans them.
    pub(crate) fn visit(&mut self, r1: Option<(i64, i64)>, visit: &mut impl FnMut(&mut L)) {
        match r1 {
            Some((lo, hi)) if hi.saturating_sub(lo) as u64 <= self.points.len() as u64 => {
                for j in lo..hi {
                    if let Some(l) = self.points.get_mut(&j) {
                        visit(l);
                        if l.is_empty() {
                            self.points.remove(&j);
                        }
                    }
                }
            }
            _ => {
                self.points.values_mut().for_each(&mut *visit);
                self.points.retain(|_, l| !l.is_empty());
            }
        }
        visit(&mut self.wide);
    }

    /// The list a region with dimension-1 point `d1` is recorded in.
    pub(crate) fn list(&mut self, d1: Option<i64>) -> &mut L {
        match d1 {
            Some(j) => self.points.entry(j).or_default(),
            None => &mut self.wide,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.wide.is_empty() && self.points.values().all(L::is_empty)
    }
}

/// Accesses split by kind: a read conflicts only with writes, so it scans only `writes`
/// (a tile that many tasks read would otherwise make every read scan every earlier read).
#[derive(Default)]
struct Lists {
    /// Accesses that write (`out` and `inout`).
    writes: Vec<Rec>,
    /// Read-only accesses.
    reads: Vec<Rec>,
}

impl AccessList for Lists {
    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.reads.is_empty()
    }
}

impl Lists {
    fn push(&mut self, rec: Rec) {
        if rec.write {
            self.writes.push(rec)
        } else {
            self.reads.push(rec)
        }
    }
}

/// A live access: its task and region. The tensor is the list's; a region of up to two
/// dimensions (nearly all of them) is kept inline, so a record takes 64 bytes instead of an
/// [`Io`]'s 136 — the map's memory, and the time spent growing it, follow the live accesses.
struct Rec {
    id: u64,
    write: bool,
    ndims: u8,
    inline: [(i64, i64); 2],
    wide: Option<Box<[(i64, i64)]>>,
}

impl Rec {
    fn new(io: &Io, id: u64) -> Rec {
        let dims = io.dims();
        let mut inline = [(0, 0); 2];
        let wide = if dims.len() <= 2 {
            inline[..dims.len()].copy_from_slice(dims);
            None
        } else {
            Some(dims.into())
        };
        Rec {
            id,
            write: io.writes(),
            ndims: io.ndims,
            inline,
            wide,
        }
    }

    fn dims(&self) -> &[(i64, i64)] {
        match &self.wide {
            Some(d) => d,
            None => &self.inline[..self.ndims as usize],
        }
    }

    /// [`Io::overlaps`] between this access and `io` of the same tensor.
    fn overlaps(&self, io: &Io) -> bool {
        let (a, b) = (self.dims(), io.dims());
        let n = a.len().min(b.len());
        let longer = if a.len() > b.len() { a } else { b };
        a[..n]
            .iter()
            .zip(&b[..n])
            .all(|(x, y)| x.0.max(y.0) < x.1.min(y.1))
            && longer[n..].iter().all(|&(lo, hi)| lo < hi)
    }

    /// [`Io::covers`]: whether `io`, of the same tensor, covers this access.
    fn covered_by(&self, io: &Io) -> bool {
        let (a, b) = (io.dims(), self.dims());
        let range = |d: &[(i64, i64)], i: usize| d.get(i).copied().unwrap_or((0, i64::MAX));
        (0..a.len().max(b.len())).all(|i| {
            let (x, y) = (range(a, i), range(b, i));
            x.0 <= y.0 && y.1 <= x.1
        })
    }
}

/// The start of `io`'s range in dimension `d` when that range is one element wide.
pub(crate) fn point(io: &Io, d: usize) -> Option<i64> {
    let (a, b) = io.ranges[d];
    (io.ndims as usize > d && b - a == 1).then_some(a)
}

/// The last writer of an exact region and its readers since.
#[derive(Default)]
struct ExactEntry {
    writer: Option<u64>,
    readers: Vec<u64>,
}

/// An exact region: tensor, dimension count, ranges.
type ExactKey = (u16, u8, [(i64, i64); ptovm_vm::limits::MAX_RANK]);

/// A TensorMap that takes tasks one at a time, in id order, and gives each one's incoming
/// edges: generation plus dependency building as one AICPU does it (spec/bytecode.md §5.5).
///
/// Every RAW, WAW and WAR edge is kept; nothing is dropped under pressure. The map holds the
/// accesses that can still matter: in overlap mode an access is retired once a later write
/// covers its whole region, in exact mode when a later write of the same region replaces it.
pub struct DepBuilder {
    mode: DepMode,
    exact: HashMap<ExactKey, ExactEntry, FastHash>,
    overlap: HashMap<u16, Live, FastHash>,
}

impl DepBuilder {
    /// An empty map.
    pub fn new(mode: DepMode) -> DepBuilder {
        DepBuilder {
            mode,
            exact: HashMap::default(),
            overlap: HashMap::default(),
        }
    }

    /// Adds task `id` (larger than every id added before) with its accesses, and appends its
    /// incoming edges to `out`, one per predecessor (in the order of their ids), of the first
    /// kind in RAW, WAW, WAR order that holds between the two.
    pub fn add(&mut self, id: u64, ios: &[Io], out: &mut Vec<Edge>) {
        let start = out.len();
        self.visit(id, ios, |from, kind| out.push(Edge { from, to: id, kind }));
        // One edge per predecessor, of the first kind that holds (RAW, WAW, WAR): sorted by
        // source then kind, keep each source's first (a task that writes after thousands of
        // readers has thousands of predecessors: finding duplicates one by one was quadratic).
        let tail = &mut out[start..];
        tail.sort_unstable_by_key(|e| (e.from, e.kind));
        let mut kept = 0;
        for r in 0..tail.len() {
            if kept == 0 || tail[kept - 1].from != tail[r].from {
                tail[kept] = tail[r];
                kept += 1;
            }
        }
        out.truncate(start + kept);
    }

    /// Adds task `id` (larger than every id added before) with its accesses, calling `f` with
    /// each predecessor and the kind of edge — a predecessor once for each of its accesses
    /// that `id`'s overlap (what a caller that only folds over them, such as a critical
    /// path's maximum, needs; [`DepBuilder::add`] keeps one edge per predecessor).
    pub fn visit(&mut self, id: u64, ios: &[Io], mut f: impl FnMut(u64, EdgeKind)) {
        let mut add = |from: u64, kind| {
            if from != id {
                f(from, kind);
            }
        };
        match self.mode {
            DepMode::Exact => {
                for io in ios {
                    let mut ranges = io.ranges;
                    ranges[io.ndims as usize..].fill((0, 0));
                    let e = self.exact.entry((io.tensor, io.ndims, ranges)).or_default();
                    if let Some(w) = e.writer {
                        add(
                            w,
                            if io.reads() {
                                EdgeKind::Raw
                            } else {
                                EdgeKind::Waw
                            },
                        );
                    }
                    if io.writes() {
                        for r in e.readers.drain(..) {
                            add(r, EdgeKind::War);
                        }
                        e.writer = Some(id);
                    } else {
                        e.readers.push(id);
                    }
                }
            }
            DepMode::Overlap => {
                for io in ios {
                    let live = self.overlap.entry(io.tensor).or_default();
                    let mut visit = |lists: &mut Lists| {
                        for r in &lists.writes {
                            if r.id != id && r.overlaps(io) {
                                add(
                                    r.id,
                                    if io.reads() {
                                        EdgeKind::Raw
                                    } else {
                                        EdgeKind::Waw
                                    },
                                );
                            }
                        }
                        if io.writes() {
                            for r in &lists.reads {
                                if r.id != id && r.overlaps(io) {
                                    add(r.id, EdgeKind::War);
                                }
                            }
                            lists.writes.retain(|r| !r.covered_by(io));
                            lists.reads.retain(|r| !r.covered_by(io));
                        }
                    };
                    let (d0, d1) = (point(io, 0), point(io, 1));
                    let r1 = (io.ndims > 1).then_some(io.ranges[1]);
                    match d0 {
                        Some(i) => {
                            if let Some(b) = live.buckets.get_mut(&i) {
                                b.visit(r1, &mut visit);
                            }
                        }
                        None => {
                            live.buckets
                                .values_mut()
                                .for_each(|b| b.visit(r1, &mut visit));
                            live.buckets.retain(|_, b| !b.is_empty());
                        }
                    }
                    visit(&mut live.wide);
                    let rec = Rec::new(io, id);
                    match d0 {
                        Some(i) => live.buckets.entry(i).or_default().list(d1).push(rec),
                        None => live.wide.push(rec),
                    }
                }
            }
        }
    }

    /// The number of accesses the map holds (its memory follows this, not the task count).
    pub fn live_accesses(&self) -> usize {
        self.exact
            .values()
            .map(|e| e.readers.len() + e.writer.is_some() as usize)
            .sum::<usize>()
            + self
                .overlap
                .values()
                .flat_map(|l| {
                    std::iter::once(&l.wide).chain(
                        l.buckets
                            .values()
                            .flat_map(|b| std::iter::once(&b.wide).chain(b.points.values())),
                    )
                })
                .map(|x| x.writes.len() + x.reads.len())
                .sum::<usize>()
    }
}

/// Heap memory for the scheduler's fixed-capacity TensorMap ([`ptovm_vm::tmap`]): allocated
/// once, at the layout's sizes; the map never grows.
pub struct HeapStorage {
    entries: Vec<tmap::Entry>,
    ios: Vec<Io>,
    words: Vec<u32>,
    marks: Vec<u64>,
}

impl HeapStorage {
    /// Memory for `layout`, or `None` if the host cannot allocate it.
    pub fn new(layout: &tmap::MapLayout) -> Option<HeapStorage> {
        fn array<T: Clone>(n: usize, x: T) -> Option<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).ok()?;
            v.resize(n, x);
            Some(v)
        }
        Some(HeapStorage {
            entries: array(layout.entries as usize, tmap::Entry::default())?,
            ios: array(layout.regions as usize, Io::default())?,
            words: array(layout.words(), 0)?,
            marks: array(layout.handles as usize, 0)?,
        })
    }
}

impl tmap::Storage for HeapStorage {
    fn parts(&mut self) -> (&mut [tmap::Entry], &mut [Io], &mut [u32], &mut [u64]) {
        (
            &mut self.entries,
            &mut self.ios,
            &mut self.words,
            &mut self.marks,
        )
    }
}

/// The scheduler's TensorMap on heap memory.
pub type HeapMap = tmap::TensorMap<HeapStorage>;

/// A scheduler TensorMap for `layout` on heap memory, or `None` if the host cannot allocate
/// [`tmap::MapLayout::bytes`] bytes.
pub fn heap_map(layout: tmap::MapLayout, mode: DepMode) -> Option<HeapMap> {
    let mode = match mode {
        DepMode::Exact => tmap::MatchMode::Exact,
        DepMode::Overlap => tmap::MatchMode::Overlap,
    };
    tmap::TensorMap::new(layout, mode, HeapStorage::new(&layout)?).ok()
}

/// Computes the edges of `tasks` (in id order), sorted, one per (from, to) pair. Each task
/// depends on the last writer of what it reads or writes, and a writer on the readers since
/// that write. In overlap mode an access is retired once a later write covers its whole region,
/// so every element's last writer and its readers since stay live and no edge is missed; an
/// access that is only partly covered stays live and may add edges that the others already
/// imply (the transitive closure is exactly the element-level one, which the tests check).
pub fn edges(tasks: &[RefTask], mode: DepMode) -> Vec<Edge> {
    let mut out: Vec<Edge> = Vec::new();
    let mut map = DepBuilder::new(mode);
    for t in tasks {
        map.add(t.id, &t.io, &mut out);
    }
    out.sort();
    out
}

/// One task's run as the checks see it: start and end on one clock (an end of 0: it never ran),
/// its pool, and the AICPU that generated it.
pub type Ran = (u64, u64, ptovm_vm::Pool, u32);

/// Checks a run against the reference expansion (`ran[i]` is task `i`'s): every task ran, on
/// its pool and from its owner, and started after every overlap-mode predecessor ended. Gives
/// the first violation.
pub fn check_run(reference: &[RefTask], ran: &[Ran]) -> Result<(), String> {
    if ran.len() != reference.len() {
        return Err(format!(
            "{} tasks ran, the reference has {}",
            ran.len(),
            reference.len()
        ));
    }
    for (t, r) in reference.iter().zip(ran) {
        if r.1 == 0 {
            return Err(format!("task {} never ran", t.id));
        }
        if r.2 != t.pool {
            return Err(format!("task {} ran on a {} core", t.id, r.2.name()));
        }
        if r.3 != t.owner {
            return Err(format!(
                "task {} was generated by AICPU {} but belongs to {}",
                t.id, r.3, t.owner
            ));
        }
    }
    for e in edges(reference, DepMode::Overlap) {
        let (from, to) = (ran[e.from as usize], ran[e.to as usize]);
        if to.0 <= from.1 {
            return Err(format!(
                "task {} started at {} before its predecessor {} ended at {} ({})",
                e.to,
                to.0,
                e.from,
                from.1,
                e.kind.name()
            ));
        }
    }
    Ok(())
}

/// Checks a run against its kernels' core limits (`limits[k]` of kernel `k`, 0 for none;
/// spec/runtime.md §4.6): at no time did more tasks of a limited kernel run than its limit.
/// A task runs from its start to its end (`ran`, one clock); one that ends when another starts
/// does not overlap it. (A unit is held from issue to the issuer seeing the end, which covers
/// the task's run: a run within the limits passes.)
pub fn check_core_limits(reference: &[RefTask], ran: &[Ran], limits: &[u32]) -> Result<(), String> {
    for (kernel, &limit) in limits.iter().enumerate() {
        if limit == 0 {
            continue;
        }
        // (time, +1 at a start / -1 at an end); ends first at equal times.
        let mut edges: Vec<(u64, i64)> = reference
            .iter()
            .zip(ran)
            .filter(|(t, _)| usize::from(t.kernel) == kernel)
            .flat_map(|(_, r)| [(r.0, 1), (r.1, -1)])
            .collect();
        edges.sort_unstable();
        let mut running = 0i64;
        for (at, d) in edges {
            running += d;
            if running > i64::from(limit) {
                return Err(format!(
                    "{running} tasks of kernel {kernel} ran at once at {at}; its core limit is {limit}"
                ));
            }
        }
    }
    Ok(())
}

/// The core limit of each kernel of `v` (0 for none), for [`check_core_limits`].
pub fn core_limits(v: &ptovm_vm::Verified<'_>) -> Vec<u32> {
    v.kernels()
        .iter()
        .map(|k| u32::from(k.core_limit.get()))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ptovm_vm::Pool;

    /// A region of `tensor` with the ranges `r`, accessed in direction `dir` (`Dir` as u8).
    pub(crate) fn io(tensor: u16, dir: u8, r: &[(i64, i64)]) -> Io {
        let mut x = Io {
            tensor,
            dir,
            ndims: r.len() as u8,
            ..Io::default()
        };
        x.ranges[..r.len()].copy_from_slice(r);
        x
    }

    /// Task `id` of AICPU 0 accessing `io`.
    pub(crate) fn t(id: u64, io: Vec<Io>) -> RefTask {
        RefTask {
            id,
            kernel: 0,
            pool: Pool::Vector,
            tier: 0,
            site: 0,
            iter: 0,
            params: vec![],
            io,
            owner: 0,
        }
    }

    #[test]
    fn raw_waw_war_in_both_modes() {
        // 0 writes A[0], 1 reads A[0], 2 writes A[0], 3 writes A[0].
        let tasks = vec![
            t(0, vec![io(0, 2, &[(0, 1)])]),
            t(1, vec![io(0, 1, &[(0, 1)])]),
            t(2, vec![io(0, 2, &[(0, 1)])]),
            t(3, vec![io(0, 2, &[(0, 1)])]),
        ];
        for mode in [DepMode::Exact, DepMode::Overlap] {
            let e = edges(&tasks, mode);
            let want = vec![
                Edge {
                    from: 0,
                    to: 1,
                    kind: EdgeKind::Raw,
                },
                Edge {
                    from: 0,
                    to: 2,
                    kind: EdgeKind::Waw,
                },
                Edge {
                    from: 1,
                    to: 2,
                    kind: EdgeKind::War,
                },
                Edge {
                    from: 2,
                    to: 3,
                    kind: EdgeKind::Waw,
                },
            ];
            assert_eq!(e, want, "{mode:?}");
        }
    }

    #[test]
    fn overlap_finds_what_exact_misses() {
        // 0 writes tiles A[0:2], 1 reads the whole A (ndims 0 on an implicit tensor), 2 writes
        // A[1:4] which partly overlaps 0's write, 3 reads A[0:1].
        let tasks = vec![
            t(0, vec![io(0, 2, &[(0, 2)])]),
            t(1, vec![io(0, 1, &[])]),
            t(2, vec![io(0, 2, &[(1, 4)])]),
            t(3, vec![io(0, 1, &[(0, 1)])]),
        ];
        assert_eq!(edges(&tasks, DepMode::Exact), vec![]);
        let e: Vec<(u64, u64)> = edges(&tasks, DepMode::Overlap)
            .iter()
            .map(|e| (e.from, e.to))
            .collect();
        // 3 still depends on 0 (element 0 was last written by 0), not on 2.
        assert_eq!(e, vec![(0, 1), (0, 2), (0, 3), (1, 2)]);
    }

    /// The element-level truth: for every element, each access depends on the element's last
    /// writer, and a write on the element's readers since that write.
    fn element_edges(tasks: &[RefTask]) -> Vec<(u64, u64)> {
        use std::collections::{BTreeSet, HashMap};
        type Element = (u16, i64, i64, i64);
        type LastAccess = (Option<u64>, Vec<u64>);
        let mut last: HashMap<Element, LastAccess> = HashMap::new();
        let mut out = BTreeSet::new();
        for t in tasks {
            for io in &t.io {
                let r0 = if io.ndims >= 1 { io.ranges[0] } else { (0, 6) };
                let r1 = if io.ndims >= 2 { io.ranges[1] } else { (0, 6) };
                let r2 = if io.ndims >= 3 { io.ranges[2] } else { (0, 4) };
                let elements = (r0.0..r0.1).flat_map(|a| {
                    (r1.0..r1.1).flat_map(move |b| (r2.0..r2.1).map(move |c| (a, b, c)))
                });
                for (a, b, c) in elements {
                    {
                        let e = last.entry((io.tensor, a, b, c)).or_default();
                        if let Some(w) = e.0 {
                            if w != t.id {
                                out.insert((w, t.id));
                            }
                        }
                        if io.writes() {
                            for r in e.1.drain(..) {
                                if r != t.id {
                                    out.insert((r, t.id));
                                }
                            }
                            e.0 = Some(t.id);
                        } else {
                            e.1.push(t.id);
                        }
                    }
                }
            }
        }
        out.into_iter().collect()
    }

    fn closure(edges: &[(u64, u64)], n: usize) -> Vec<Vec<bool>> {
        let mut c = vec![vec![false; n]; n];
        for &(a, b) in edges {
            c[a as usize][b as usize] = true;
        }
        for k in 0..n {
            let via = c[k].clone();
            for row in c.iter_mut() {
                if row[k] {
                    for (x, v) in row.iter_mut().zip(&via) {
                        *x |= *v;
                    }
                }
            }
        }
        c
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 500, ..Default::default() })]
        /// Overlap mode finds exactly the element-level edges, on random boxes of a 6 x 6 x 4
        /// tensor (implicit tensors: missing dimensions are whole; empty ranges access
        /// nothing; three dimensions take the map's out-of-line records).
        #[test]
        fn overlap_mode_matches_element_level_truth(
            accesses in proptest::collection::vec(
                proptest::collection::vec((0u16..2, 1u8..4, 0usize..4, (0i64..6, 0i64..4), (0i64..6, 0i64..4), (0i64..4, 0i64..3)), 1..4),
                1..25,
            )
        ) {
            let tasks: Vec<RefTask> = accesses
                .iter()
                .enumerate()
                .map(|(id, ios)| {
                    let io = ios
                        .iter()
                        .map(|&(tensor, dir, nd, (a, la), (b, lb), (c, lc))| {
                            let dims = [(a, (a + la).min(6)), (b, (b + lb).min(6)), (c, (c + lc).min(4))];
                            io(tensor, dir, &dims[..nd])
                        })
                        .collect();
                    t(id as u64, io)
                })
                .collect();
            let got: Vec<(u64, u64)> = edges(&tasks, DepMode::Overlap).iter().map(|e| (e.from, e.to)).collect();
            let truth = element_edges(&tasks);
            for e in &truth {
                proptest::prop_assert!(got.contains(e), "missed {:?}", e);
            }
            // Extra edges are only ones the truth implies (same transitive closure).
            proptest::prop_assert_eq!(closure(&got, tasks.len()), closure(&truth, tasks.len()));
        }
    }

    #[test]
    fn covered_writes_are_retired() {
        // 0 writes A[0:1], 1 writes the whole A (covers it), 2 reads A[0:1]: only 1 -> 2.
        let tasks = vec![
            t(0, vec![io(0, 2, &[(0, 1)])]),
            t(1, vec![io(0, 2, &[])]),
            t(2, vec![io(0, 1, &[(0, 1)])]),
        ];
        let e: Vec<(u64, u64)> = edges(&tasks, DepMode::Overlap)
            .iter()
            .map(|e| (e.from, e.to))
            .collect();
        assert_eq!(e, vec![(0, 1), (1, 2)]);
    }

    #[test]
    fn builder_keeps_only_what_can_matter() {
        // Tiles S[i, j] of a 2-D tensor (bucketed by both indices), each written, read twice
        // and rewritten: the rewrite covers and retires the three older accesses.
        for mode in [DepMode::Exact, DepMode::Overlap] {
            let mut b = DepBuilder::new(mode);
            let mut out = Vec::new();
            let mut id = 0;
            for i in 0..4 {
                for j in 0..4 {
                    let tile = [(i, i + 1), (j, j + 1)];
                    for dir in [2, 1, 1, 2] {
                        b.add(id, &[io(3, dir, &tile)], &mut out);
                        id += 1;
                    }
                }
            }
            // Per tile: write→read, write→read, read→rewrite ×2, write→rewrite (one edge per
            // pair: the rewrite's WAW and its WARs are separate predecessors).
            assert_eq!(out.len(), 16 * 5, "{mode:?}");
            assert_eq!(
                b.live_accesses(),
                16,
                "{mode:?}: one writer per tile is left"
            );
        }
    }

    #[test]
    fn one_edge_per_predecessor_of_the_first_kind() {
        // Task 0 writes A[0:2]; task 1 writes A[0:1] (WAW, found first) and reads A[1:2] (RAW):
        // one edge, RAW.
        let mut b = DepBuilder::new(DepMode::Overlap);
        let mut out = Vec::new();
        b.add(0, &[io(0, 2, &[(0, 2)])], &mut out);
        b.add(1, &[io(0, 2, &[(0, 1)]), io(0, 1, &[(1, 2)])], &mut out);
        assert_eq!(
            out,
            vec![Edge {
                from: 0,
                to: 1,
                kind: EdgeKind::Raw
            }]
        );
    }
}
