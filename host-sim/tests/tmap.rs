//! The scheduler's fixed-capacity TensorMap (`ptovm_vm::tmap`) against the reference map
//! (`DepBuilder`): with every task kept it finds exactly the reference edges; with a window of
//! `w` tasks retired in order it finds exactly the reference edges whose source is still in the
//! window; and its memory never grows.

use std::collections::BTreeSet;

use proptest::prelude::*;
use ptovm_host_sim::{heap_map, DepBuilder, DepMode, Edge};
use ptovm_vm::tmap::{DepKind, MapError, MapLayout, MatchMode, Use};
use ptovm_vm::{Dir, Io};

fn io(tensor: u16, dir: u8, r: &[(i64, i64)]) -> Io {
    let mut x = Io {
        tensor,
        dir,
        ndims: r.len() as u8,
        ..Io::default()
    };
    x.ranges[..r.len()].copy_from_slice(r);
    x
}

/// Reference edges as (from, to) pairs.
fn reference(tasks: &[Vec<Io>], mode: DepMode) -> BTreeSet<(u64, u64)> {
    let mut b = DepBuilder::new(mode);
    let mut out: Vec<Edge> = Vec::new();
    for (id, ios) in tasks.iter().enumerate() {
        b.add(id as u64, ios, &mut out);
    }
    out.iter().map(|e| (e.from, e.to)).collect()
}

/// Whether a map rebuilds `io`'s region from its key (no named dimension, or one or two named
/// dimensions each one element wide), so stores no region record for it.
fn keyed(io: &Io) -> bool {
    io.ndims == 0 || (io.ndims <= 2 && io.dims().iter().all(|&(a, b)| b - a == 1))
}

/// Edges found by the fixed map with a window of `w` handles: task `t` takes handle `t % w`,
/// retiring task `t - w` first (in-order completion). `compact`: the layout has region records
/// only for the regions that need them (as `MapLayout::for_program` sizes it), not one per
/// entry.
fn windowed(
    tasks: &[Vec<Io>],
    mode: DepMode,
    w: u32,
    tensors: u32,
    compact: bool,
) -> BTreeSet<(u64, u64)> {
    windowed_as(tasks, mode, w, tensors, compact, Uses::All)
}

/// Which regions [`windowed_as`] looks up and records.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Uses {
    /// Every one, both.
    All,
    /// As the scheduler's tensor classes do (spec/runtime.md §3.5): a tensor no task writes
    /// not at all, a read that no later write of its tensor follows only looked up
    /// (`Use::Lookup`), everything else both.
    Classes,
    /// Exactly as much as the two facts the private-tensor rule of §3.5 relies on allow: a
    /// region no earlier access conflicts with (overlaps it, one of them a write) is not
    /// looked up (`Use::Insert`, or `Use::Skip` for a read), a read no later write overlaps
    /// is not recorded (`Use::Lookup`).
    Facts,
}

/// [`windowed`], with the regions looked up and recorded as `uses` says.
fn windowed_as(
    tasks: &[Vec<Io>],
    mode: DepMode,
    w: u32,
    tensors: u32,
    compact: bool,
    uses: Uses,
) -> BTreeSet<(u64, u64)> {
    windowed_dense(tasks, mode, w, tensors, compact, uses, None)
}

/// [`windowed_as`] with dense tables (`TensorMap::set_dense`) from `dense` words: tensor 0
/// points of rank 2 in 4 columns, tensor 1 of rank 1, tensor 2 of rank 2 in 3 columns, as
/// many of them as the words hold, each with as many rows as it can take.
fn windowed_dense(
    tasks: &[Vec<Io>],
    mode: DepMode,
    w: u32,
    tensors: u32,
    compact: bool,
    uses: Uses,
    dense: Option<u32>,
) -> BTreeSet<(u64, u64)> {
    // Per tensor, one past the last task that writes it (0: none does).
    let mut writes_end = vec![0u64; tensors as usize];
    for (id, ios) in tasks.iter().enumerate() {
        for x in ios.iter().filter(|x| x.writes()) {
            writes_end[x.tensor as usize] = id as u64 + 1;
        }
    }
    let conflict =
        |x: &Io, y: &Io| x.tensor == y.tensor && x.overlaps(y) && (x.writes() || y.writes());
    let how = |id: u64, x: &Io| match (uses, writes_end[x.tensor as usize]) {
        (Uses::All, _) => Use::Record,
        (Uses::Classes, 0) => Use::Skip,
        (Uses::Classes, end) if !x.writes() && id >= end => Use::Lookup,
        (Uses::Classes, _) => Use::Record,
        (Uses::Facts, _) => {
            let earlier = tasks[..id as usize]
                .iter()
                .flatten()
                .any(|y| conflict(x, y));
            let later = tasks[id as usize + 1..]
                .iter()
                .flatten()
                .any(|y| conflict(x, y));
            match (earlier, x.writes() || later) {
                (true, true) => Use::Record,
                (true, false) => Use::Lookup,
                (false, true) => Use::Insert,
                (false, false) => Use::Skip,
            }
        }
    };
    let max_io = tasks.iter().map(Vec::len).max().unwrap_or(1).max(1) as u32;
    let mut layout = MapLayout::new(w, max_io, tensors).unwrap();
    if compact {
        let stored = tasks
            .iter()
            .map(|t| t.iter().filter(|io| !keyed(io)).count())
            .max()
            .unwrap_or(0) as u32;
        layout.max_stored_io = stored;
        layout.regions = w * stored;
    }
    if let Some(words) = dense {
        layout.dense = words;
    }
    let mut map = heap_map(layout, mode).unwrap();
    if dense.is_some() {
        for (tensor, rank, cols) in [(0, 2, 4), (1, 1, 1), (2, 2, 3)] {
            if tensor < tensors as u16 {
                map.set_dense(tensor, rank, cols);
            }
        }
    }
    let mut got = BTreeSet::new();
    for (id, ios) in tasks.iter().enumerate() {
        let id = id as u64;
        let h = (id % w as u64) as u32;
        if id >= w as u64 {
            map.retire(h).unwrap();
        }
        map.add_some(id, h, ios, |_, x| how(id, x), &mut |p| {
            assert!(got.insert((p.id, id)), "{} reported twice for {id}", p.id);
            assert_eq!(p.handle as u64, p.id % w as u64);
        })
        .unwrap();
        assert!(map.used() <= layout.entries);
        assert!(map.live() <= map.used());
    }
    got
}

fn arb_tasks() -> impl Strategy<Value = Vec<Vec<Io>>> {
    // Up to 3 tensors, 0–3 named dimensions, points and ranges in a 6 x 6 x 6 box, all
    // three directions.
    let region = (
        0u16..3,
        1u8..4,
        0usize..4,
        proptest::collection::vec((0i64..6, 1i64..4), 3),
    )
        .prop_map(|(t, dir, nd, dims)| {
            let r: Vec<(i64, i64)> = dims.iter().map(|&(a, l)| (a, (a + l).min(6))).collect();
            io(t, dir, &r[..nd])
        });
    proptest::collection::vec(proptest::collection::vec(region, 0..4), 1..60)
}

/// Regions of every level: starts in -40..40, widths -2..70 (empty and inverted ranges
/// included: `Io::overlaps` treats a range inside another as sharing an element), so that
/// a tensor's live entries have many shapes (more than its slots: the overflow slot) and
/// lookups visit cells, rows and whole slots.
fn arb_wide_tasks() -> impl Strategy<Value = Vec<Vec<Io>>> {
    let dim = prop_oneof![
        3 => (-40i64..40).prop_map(|a| (a, a + 1)),
        3 => (-40i64..40, 0i64..8).prop_map(|(a, w)| (a, a + w)),
        2 => (-40i64..40, -2i64..70).prop_map(|(a, w)| (a, a + w)),
    ];
    let region = (
        0u16..2,
        1u8..4,
        0usize..4,
        proptest::collection::vec(dim, 3),
    )
        .prop_map(|(t, dir, nd, dims)| io(t, dir, &dims[..nd]));
    proptest::collection::vec(proptest::collection::vec(region, 0..4), 1..120)
}

/// Mostly points (`T[r, c]` of tensor 0 in 10 rows by 6 columns, `T[r]` of tensor 1), some
/// rows and ranges, so that dense tables fill, share cells between rows of the same residues,
/// and hold points read or written again.
fn arb_point_tasks() -> impl Strategy<Value = Vec<Vec<Io>>> {
    let region = prop_oneof![
        6 => (1u8..4, 0i64..10, 0i64..6).prop_map(|(dir, r, c)| io(0, dir, &[(r, r + 1), (c, c + 1)])),
        2 => (1u8..4, 0i64..10).prop_map(|(dir, r)| io(1, dir, &[(r, r + 1)])),
        1 => (1u8..4, 0i64..10, 0i64..6, 1i64..8)
            .prop_map(|(dir, r, c, w)| io(0, dir, &[(r, r + 1), (c, c + w)])),
        1 => (1u8..4, 0i64..10, 1i64..4).prop_map(|(dir, r, h)| io(0, dir, &[(r, r + h)])),
        1 => (1u8..4, 0i64..10, 1i64..4).prop_map(|(dir, r, h)| io(1, dir, &[(r, r + h)])),
    ];
    proptest::collection::vec(proptest::collection::vec(region, 0..3), 1..80)
}

/// Task Bench's shape: task `k` is point `(t, i) = (k / p, k mod p)` of a grid `p` wide. It
/// writes its point of tensor 0 (a write, or a read and write) and reads up to `w` columns
/// from `c` (which may be negative) of row `t − back` of it, and, some of them, point `k` of
/// tensor 1 and point `k − back1` of it, in either order. Each element is written once,
/// before every read of an earlier row (a stepped tensor written once, spec/runtime.md §3.5):
/// looked up and recorded by the facts (`Uses::Facts`), most tasks are points of dense tables
/// only looked up or only inserted, which the map takes on its quick path. A read of the
/// task's own row (`back` 0) that a later write meets (recorded), one from a negative column
/// or one wider than its table's columns sends its task to the general path.
fn arb_stepped_tasks() -> impl Strategy<Value = Vec<Vec<Io>>> {
    let task = (
        (0i64..3, -2i64..7, 1i64..5),
        (any::<bool>(), 1i64..4, any::<bool>(), any::<bool>()),
    );
    (1i64..7, proptest::collection::vec(task, 1..80)).prop_map(|(p, specs)| {
        specs
            .into_iter()
            .enumerate()
            .map(|(k, ((back, c, w), (one, back1, inout, first)))| {
                let (k, t, i) = (k as i64, k as i64 / p, k as i64 % p);
                let dir = if inout { 3 } else { 2 };
                let mut ios = vec![io(0, dir, &[(t, t + 1), (i, i + 1)])];
                if t >= back {
                    ios.push(io(0, 1, &[(t - back, t - back + 1), (c, c + w)]));
                }
                if one {
                    ios.push(io(1, 2, &[(k, k + 1)]));
                    if k >= back1 {
                        ios.push(io(1, 1, &[(k - back1, k - back1 + 1)]));
                    }
                }
                if first {
                    ios.reverse();
                }
                ios
            })
            .collect()
    })
}

/// With every task kept, the map finds exactly the reference edges, in both modes, with a
/// region record per entry and with only the records the tasks need.
fn keeps_every_edge(tasks: &[Vec<Io>]) -> Result<(), TestCaseError> {
    for mode in [DepMode::Overlap, DepMode::Exact] {
        let want = reference(tasks, mode);
        for compact in [false, true] {
            let got = windowed(tasks, mode, tasks.len() as u32, 3, compact);
            prop_assert_eq!(&got, &want, "{:?} compact {}", mode, compact);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn keeps_every_reference_edge(tasks in arb_tasks()) {
        keeps_every_edge(&tasks)?;
    }

    #[test]
    fn keeps_every_reference_edge_of_regions_of_every_width(tasks in arb_wide_tasks()) {
        keeps_every_edge(&tasks)?;
    }

    #[test]
    fn a_window_of_regions_of_every_width(tasks in arb_wide_tasks(), w in 1u32..40) {
        for mode in [DepMode::Overlap, DepMode::Exact] {
            let want: BTreeSet<(u64, u64)> = reference(&tasks, mode)
                .into_iter()
                .filter(|&(from, to)| from + w as u64 > to)
                .collect();
            let got = windowed_as(&tasks, mode, w, 3, true, Uses::Classes);
            prop_assert_eq!(&got, &want, "{:?} window {}", mode, w);
        }
    }

    /// Dense tables change no answer: points filed by their coordinates in as many rows as
    /// `words` allow (a row's cell shared by rows of the same residue, coordinates outside
    /// the columns, other shapes on the lists), every window.
    #[test]
    fn dense_tables_find_the_same_edges(
        tasks in arb_wide_tasks(),
        narrow in arb_tasks(),
        points in arb_point_tasks(),
        stepped in arb_stepped_tasks(),
        w in 1u32..40,
        words in 0u32..48,
    ) {
        for (tasks, tensors) in [(&tasks, 2), (&narrow, 3), (&points, 2), (&stepped, 2)] {
            for mode in [DepMode::Overlap, DepMode::Exact] {
                let want: BTreeSet<(u64, u64)> = reference(tasks, mode)
                    .into_iter()
                    .filter(|&(from, to)| from + w as u64 > to)
                    .collect();
                // (The facts are of overlapping regions: overlap mode's.)
                let facts = (mode == DepMode::Overlap).then_some(Uses::Facts);
                for uses in [Uses::All, Uses::Classes].into_iter().chain(facts) {
                    let got = windowed_dense(tasks, mode, w, tensors, true, uses, Some(words));
                    prop_assert_eq!(&got, &want, "{:?} window {} {:?}", mode, w, uses);
                }
            }
        }
    }

    #[test]
    fn a_window_finds_the_edges_whose_source_is_still_in_it(tasks in arb_tasks(), w in 1u32..8) {
        for mode in [DepMode::Overlap, DepMode::Exact] {
            let want: BTreeSet<(u64, u64)> = reference(&tasks, mode)
                .into_iter()
                .filter(|&(from, to)| from + w as u64 > to)
                .collect();
            for compact in [false, true] {
                let got = windowed(&tasks, mode, w, 3, compact);
                prop_assert_eq!(&got, &want, "{:?} window {} compact {}", mode, w, compact);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Recording only what the scheduler records (read-only tensors not at all, reads that no
    /// later write follows only looked up), or only what the facts behind private tensors
    /// allow (no lookup where no earlier access conflicts), loses no edge: every reference
    /// edge whose source is still in the window is found, with a window as long as the
    /// program or as short as 1.
    #[test]
    fn recording_by_class_keeps_every_edge(tasks in arb_tasks(), w in 1u32..8) {
        for mode in [DepMode::Overlap, DepMode::Exact] {
            let all = reference(&tasks, mode);
            for w in [w, tasks.len() as u32] {
                let want: BTreeSet<(u64, u64)> =
                    all.iter().copied().filter(|&(from, to)| from + w as u64 > to).collect();
                for uses in [Uses::Classes, Uses::Facts] {
                    let got = windowed_as(&tasks, mode, w, 3, true, uses);
                    prop_assert_eq!(&got, &want, "{:?} {:?} window {}", mode, uses, w);
                }
            }
        }
    }
}

#[test]
fn kinds_and_one_report_per_predecessor() {
    let layout = MapLayout::new(4, 2, 1).unwrap();
    let mut map = heap_map(layout, DepMode::Overlap).unwrap();
    let mut got = Vec::new();
    let add = |map: &mut ptovm_host_sim::HeapMap, id: u64, ios: &[Io], got: &mut Vec<_>| {
        got.clear();
        map.add(id, id as u32, ios, &mut |p| got.push((p.id, p.kind)))
            .unwrap();
    };
    add(&mut map, 0, &[io(0, Dir::Out as u8, &[(0, 2)])], &mut got);
    assert!(got.is_empty());
    add(&mut map, 1, &[io(0, Dir::In as u8, &[(1, 2)])], &mut got);
    assert_eq!(got, [(0, DepKind::Raw)]);
    // Writes A[0:1] (WAW on 0) and A[1:2] (WAW on 0 again, WAR on 1): 0 once, then 1.
    add(
        &mut map,
        2,
        &[
            io(0, Dir::Out as u8, &[(0, 1)]),
            io(0, Dir::Out as u8, &[(1, 2)]),
        ],
        &mut got,
    );
    assert_eq!(got, [(0, DepKind::Waw), (1, DepKind::War)]);
    // Task 2's writes covered all of task 1's read and half of task 0's write.
    assert_eq!(map.live(), 3);
}

/// `Use::Find` looks a region up without recording it, whatever its direction: a read finds
/// the writes; a write finds writes and reads and unlinks what it covers, but leaves no entry
/// of its own, so the handle stays free (spec/runtime.md §3.7).
#[test]
fn find_looks_up_and_covers_without_recording() {
    use ptovm_vm::tmap::Use;
    let layout = MapLayout::new(4, 2, 1).unwrap();
    let mut map = heap_map(layout, DepMode::Overlap).unwrap();
    let mut got = Vec::new();
    let mut add = |map: &mut ptovm_host_sim::HeapMap, id: u64, x: Io, how: Use| {
        got.clear();
        let n = map
            .add_some(id, id as u32, &[x], |_, _| how, &mut |p| {
                got.push((p.id, p.kind))
            })
            .unwrap();
        (n, got.clone())
    };
    let row = |dir: Dir| io(0, dir as u8, &[(3, 4)]);
    assert_eq!(add(&mut map, 0, row(Dir::Out), Use::Record), (1, vec![]));
    assert_eq!(
        add(&mut map, 1, row(Dir::In), Use::Record),
        (1, vec![(0, DepKind::Raw)])
    );
    // A read found: the write, nothing recorded.
    assert_eq!(
        add(&mut map, 2, row(Dir::In), Use::Find),
        (0, vec![(0, DepKind::Raw)])
    );
    assert_eq!(map.live(), 2);
    // A write found: the write and the read, which it covers; nothing recorded.
    assert_eq!(
        add(&mut map, 3, row(Dir::Out), Use::Find),
        (0, vec![(0, DepKind::Waw), (1, DepKind::War)])
    );
    assert_eq!(map.live(), 0);
    // So a later read finds nothing, and the handles of tasks 2 and 3 are free.
    assert_eq!(add(&mut map, 2, row(Dir::In), Use::Record), (1, vec![]));
    assert_eq!(add(&mut map, 3, row(Dir::In), Use::Lookup), (0, vec![]));
}

/// `quiet` is what `add_some` checks before a lookup: a tensor with no live entry of any
/// shape (a tile, a row, a whole-tensor region) has nothing to find.
#[test]
fn a_tensor_is_quiet_exactly_while_it_has_no_live_entry() {
    let layout = MapLayout::new(4, 2, 2).unwrap();
    let mut map = heap_map(layout, DepMode::Overlap).unwrap();
    assert!(map.quiet(0) && map.quiet(1));
    assert!(!map.quiet(2), "a tensor past the layout is not quiet");
    let shapes = [
        io(1, Dir::Out as u8, &[(3, 4), (5, 6)]),
        io(1, Dir::Out as u8, &[(3, 4)]),
        io(1, Dir::Out as u8, &[(0, 2), (0, 8)]),
        io(1, Dir::Out as u8, &[]),
    ];
    for (k, x) in shapes.into_iter().enumerate() {
        let id = k as u64;
        let h = id as u32 % 4;
        // Only an insertion can end a tensor's quiet (what `TaskUses::all_quiet` relies on):
        // each shape's write counts one, lookups and retirement none.
        let before = map.inserted();
        map.add(id, h, &[x], &mut |_| {}).unwrap();
        assert_eq!(map.inserted(), before + 1, "shape {k}: one insertion");
        assert!(!map.quiet(1), "shape {k}: a live write");
        assert!(map.quiet(0), "shape {k}: another tensor stays quiet");
        // A read that looks it up only leaves it as it was.
        map.add_some(
            id + 100,
            (h + 1) % 4,
            &[io(1, Dir::In as u8, &[(3, 4)])],
            |_, _| Use::Lookup,
            &mut |_| {},
        )
        .unwrap();
        map.retire(h).unwrap();
        assert!(map.quiet(1), "shape {k}: retired");
        assert_eq!(
            map.inserted(),
            before + 1,
            "shape {k}: nothing else inserted"
        );
    }
    let before = map.inserted();
    map.reset();
    assert_eq!(map.inserted(), before, "a reset keeps the count");
}

#[test]
fn memory_is_fixed_and_retirement_frees_it() {
    // 10,000 tasks each reading one tile of a 2-D tensor and writing another, through a
    // window of 16: the map never holds more than 16 tasks' entries.
    let layout = MapLayout::new(16, 2, 2).unwrap();
    let mut map = heap_map(layout, DepMode::Overlap).unwrap();
    for id in 0..10_000u64 {
        let h = (id % 16) as u32;
        if id >= 16 {
            map.retire(h).unwrap();
        }
        let (i, j) = ((id % 97) as i64, (id % 89) as i64);
        map.add(
            id,
            h,
            &[
                io(0, Dir::In as u8, &[(i, i + 1), (j, j + 1)]),
                io(1, Dir::Out as u8, &[(j, j + 1), (i, i + 1)]),
            ],
            &mut |_| {},
        )
        .unwrap();
        assert!(map.used() <= 32);
    }
    for h in 0..16 {
        map.retire(h).unwrap();
    }
    assert_eq!((map.used(), map.live()), (0, 0));
}

#[test]
fn bad_calls_are_errors_that_change_nothing() {
    let layout = MapLayout::new(2, 1, 2).unwrap();
    let mut map = heap_map(layout, DepMode::Overlap).unwrap();
    let a = io(0, Dir::Out as u8, &[(0, 1)]);
    assert_eq!(
        map.add(0, 2, &[a], &mut |_| {}),
        Err(MapError::Handle {
            handle: 2,
            handles: 2
        })
    );
    assert_eq!(
        map.add(0, 0, &[io(2, 1, &[])], &mut |_| {}),
        Err(MapError::Tensor {
            tensor: 2,
            tensors: 2
        })
    );
    let mut deep = a;
    deep.ndims = 9;
    assert_eq!(
        map.add(0, 0, &[deep], &mut |_| {}),
        Err(MapError::Rank { ndims: 9 })
    );
    assert_eq!(map.used(), 0);
    map.add(0, 0, &[a], &mut |_| {}).unwrap();
    map.add(1, 1, &[a], &mut |_| {}).unwrap();
    // Handle 0 has not retired its task; a task with two regions does not fit a layout for one.
    assert_eq!(
        map.add(2, 0, &[a], &mut |_| {}),
        Err(MapError::Busy { handle: 0 })
    );
    map.retire(0).unwrap();
    assert_eq!(
        map.add(2, 0, &[a, a], &mut |_| {}),
        Err(MapError::Regions { regions: 2, max: 1 })
    );
    assert_eq!((map.used(), map.live()), (1, 1));
    assert_eq!(
        map.retire(5),
        Err(MapError::Handle {
            handle: 5,
            handles: 2
        })
    );
    for (h, t, i) in [(0, 1, 1), ((1 << 24) + 1, 1, 1), (1, 0, 4), (1, 1, 17)] {
        assert!(matches!(
            MapLayout::new(h, i, t),
            Err(MapError::Size { .. })
        ));
    }
    let mem = ptovm_host_sim::HeapStorage::new(&MapLayout::new(3, 1, 2).unwrap()).unwrap();
    assert!(matches!(
        ptovm_vm::tmap::TensorMap::new(layout, MatchMode::Overlap, mem),
        Err(MapError::Memory {
            what: "entries",
            got: 3,
            need: 2
        })
    ));
}

#[test]
fn lookups_scan_only_their_keys() {
    // 500 live reads of one tile of S and 500 of other tiles: a read of S[0, 0] scans only
    // the writes of its tile (none), a write of S[0, 0] scans that tile's reads only.
    let layout = MapLayout::new(1001, 1, 1).unwrap();
    let mut map = heap_map(layout, DepMode::Overlap).unwrap();
    for id in 0..1000u64 {
        let (i, j) = if id % 2 == 0 {
            (0, 0)
        } else {
            (id as i64 % 13, 1 + id as i64 % 11)
        };
        map.add(
            id,
            id as u32,
            &[io(0, Dir::In as u8, &[(i, i + 1), (j, j + 1)])],
            &mut |_| {},
        )
        .unwrap();
    }
    let before = map.visits();
    let mut preds = 0;
    map.add(
        1000,
        1000,
        &[io(0, Dir::Out as u8, &[(0, 1), (0, 1)])],
        &mut |_| preds += 1,
    )
    .unwrap();
    assert_eq!(preds, 500);
    // The tile's 500 reads, plus whatever shares its buckets by hash: well under the 1000.
    let visits = map.visits() - before;
    assert!((500..600).contains(&visits), "{visits}");
}

#[test]
fn an_entry_is_one_cache_line() {
    // spec/runtime.md §3.3: the part of an entry a scan reads fits one 64-byte line.
    assert_eq!(std::mem::size_of::<ptovm_vm::tmap::Entry>(), 64);
    // Window 1024, 3 regions per task, 18 tensors (the LLaMA layer): 779 KB, of which 7,992
    // bytes are the tensors' heads and shape slots (111 words a tensor) and 12,800 the dense
    // tables' words (one an entry, and 128 rows' list heads).
    assert_eq!(MapLayout::new(1024, 3, 18).unwrap().bytes(), 778_552);
}

#[test]
fn only_regions_a_key_cannot_describe_are_stored() {
    // The LLaMA layer names every region by tile or row indices (or not at all): its maps
    // keep no region records.
    let src = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto"),
    )
    .unwrap();
    let opts = ptovm_assembler::Options::default();
    let llama = ptovm_assembler::assemble("l", &src, &opts).unwrap().bytes;
    let v = ptovm_vm::verify(&llama).unwrap();
    // At most 4 regions a task (`online_softmax`), 19 tensors.
    assert_eq!((v.max_task_io(), v.max_stored_io()), (4, 0));
    let l = MapLayout::for_program(&v, 1024).unwrap();
    assert_eq!((l.entries, l.regions), (4096, 0));
    assert_eq!(
        l.bytes(),
        MapLayout::new(1024, 4, 19).unwrap().bytes() - 4096 * std::mem::size_of::<Io>()
    );
    // A range, a 3-D tile and a whole tensor: the first two are stored, the third is not.
    let src = "@tensor A: f16[8, 8, 8]
@tensor B: f16[8]
@kernel k(i): vector(in a, in b, out c)
@workload w() { parallel_for i in dense[4] { task @k(i) resources(A[i, 0:2], A[i, i, i], B) } }";
    let code = ptovm_assembler::assemble("w", src, &opts).unwrap().bytes;
    let v = ptovm_vm::verify(&code).unwrap();
    assert_eq!((v.max_task_io(), v.max_stored_io()), (3, 2));
    let l = MapLayout::for_program(&v, 16).unwrap();
    assert_eq!((l.entries, l.max_stored_io, l.regions), (48, 2, 32));
    // A layout whose counts disagree is refused.
    let mut bad = l;
    bad.max_stored_io = 4;
    assert!(matches!(
        ptovm_vm::tmap::TensorMap::new(
            bad,
            MatchMode::Overlap,
            ptovm_host_sim::HeapStorage::new(&bad).unwrap()
        ),
        Err(MapError::Size { .. })
    ));
    // A task with more regions to store than the layout has room for is refused, unchanged.
    let mut map = heap_map(l, DepMode::Overlap).unwrap();
    let range = io(0, Dir::In as u8, &[(0, 2)]);
    assert_eq!(
        map.add(0, 0, &[range, range, range], &mut |_| {}),
        Err(MapError::Stored { regions: 3, max: 2 })
    );
    assert_eq!(map.used(), 0);
    map.add(
        0,
        0,
        &[range, io(1, Dir::Out as u8, &[]), range],
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(map.used(), 3);
}

/// Runs `tasks` through a map of `window` handles (in-order retirement, every region looked
/// up and recorded): the edges found, and the map's work (lists probed plus entries examined).
fn run_window(tasks: &[Vec<Io>], window: u32, tensors: u32) -> (BTreeSet<(u64, u64)>, u64) {
    let max_io = tasks.iter().map(Vec::len).max().unwrap_or(1).max(1) as u32;
    let mut map = heap_map(
        MapLayout::new(window, max_io, tensors).unwrap(),
        DepMode::Overlap,
    )
    .unwrap();
    let got = feed(&mut map, tasks);
    (got, map.visits() + map.probes())
}

/// Adds `tasks` to `map` in order, task `t` taking handle `t mod handles` after retiring the
/// task there: the edges found.
fn feed(map: &mut ptovm_host_sim::HeapMap, tasks: &[Vec<Io>]) -> BTreeSet<(u64, u64)> {
    let window = map.layout().handles;
    let mut got = BTreeSet::new();
    for (id, ios) in tasks.iter().enumerate() {
        let (id, h) = (id as u64, (id % window as usize) as u32);
        if id >= window as u64 {
            map.retire(h).unwrap();
        }
        map.add(id, h, ios, &mut |p| {
            got.insert((p.id, id));
        })
        .unwrap();
    }
    got
}

fn in_window(tasks: &[Vec<Io>], window: u32) -> BTreeSet<(u64, u64)> {
    reference(tasks, DepMode::Overlap)
        .into_iter()
        .filter(|&(from, to)| from + window as u64 > to)
        .collect()
}

/// Task Bench's 1-D stencil (`G[t - 1, i - 1 : i + 2]` read, `G[t, i]` written) over `points`
/// points and `steps` steps, one task a point and step.
fn stencil_tasks(points: i64, steps: i64) -> Vec<Vec<Io>> {
    let mut tasks = Vec::new();
    for t in 0..steps {
        for i in 0..points {
            let mut ios = vec![io(0, Dir::Out as u8, &[(t, t + 1), (i, i + 1)])];
            if t > 0 {
                let range = ((i - 1).max(0), (i + 2).min(points));
                ios.insert(0, io(0, Dir::In as u8, &[(t - 1, t), range]));
            }
            tasks.push(ios);
        }
    }
    tasks
}

/// The stencil, 1,000 points by 12 steps: whatever the window (64 to 4,096 tasks, so up to four timesteps live), a task's
/// lookups probe and examine the same handful of lists and entries — the cells of its range,
/// not the live entries of its row (the scan this map replaced examined up to 1,000) — and
/// find exactly the reference edges.
#[test]
fn lookups_do_not_grow_with_the_live_entries() {
    let tasks = stencil_tasks(1000, 12);
    let mut work = Vec::new();
    for window in [64, 1024, 4096] {
        let (got, w) = run_window(&tasks, window, 1);
        assert_eq!(got, in_window(&tasks, window), "window {window}");
        work.push(w as f64 / tasks.len() as f64);
    }
    // About 10 a task once the window holds a whole timestep (window 64 finds most lists
    // empty), and no more at 4,096 than at 1,024.
    assert!(work.iter().all(|&w| w < 12.0), "{work:?}");
    assert!(work[2] < work[1] * 1.05, "{work:?}");
}

/// The same stencil with a dense table for its tensor (`TensorMap::set_dense`, as the
/// scheduler gives a stepped tensor): a write's lookup is one cell, a read's the three cells of
/// its range, and the lists stay empty — fewer than 5 lists probed and entries examined a task
/// (about 10 on the lists), with exactly the reference edges.
#[test]
fn a_dense_table_answers_the_stencil_from_its_cells() {
    let points = 1000i64;
    let tasks = stencil_tasks(points, 12);
    for window in [1024, 4096] {
        let mut map = heap_map(MapLayout::new(window, 2, 1).unwrap(), DepMode::Overlap).unwrap();
        assert!(map.set_dense(0, 2, points as u32), "window {window}");
        let got = feed(&mut map, &tasks);
        assert_eq!(got, in_window(&tasks, window), "window {window}");
        let work = (map.visits() + map.probes()) as f64 / tasks.len() as f64;
        assert!(work < 5.0, "window {window}: {work}");
    }
    // Too few words for two rows of 1,000 columns: no table, and a rank-1 table needs 1 column.
    let mut map = heap_map(MapLayout::new(512, 2, 1).unwrap(), DepMode::Overlap).unwrap();
    assert!(!map.set_dense(0, 2, 1000));
    assert!(!map.set_dense(0, 1, 2));
    assert!(map.set_dense(0, 1, 1));
}

/// Rows past 2³²: a table's entry moved to the lists there leaves them unbounded (its row does
/// not fit the bound's word), so a later read of its row still finds it.
#[test]
fn a_dense_table_beyond_u32_rows() {
    let far = 5_000_000_000i64;
    let mut tasks = Vec::new();
    // Rows `far + k · 2048` share a cell of a 2,048-row table (window 1,024, 2 regions a task).
    for k in 0..4 {
        let r = far + k * 2048;
        tasks.push(vec![io(0, Dir::Out as u8, &[(r, r + 1)])]);
    }
    for k in 0..4 {
        let r = far + k * 2048;
        tasks.push(vec![io(0, Dir::In as u8, &[(r, r + 1)])]);
    }
    let mut map = heap_map(MapLayout::new(1024, 2, 1).unwrap(), DepMode::Overlap).unwrap();
    assert!(map.set_dense(0, 1, 1));
    assert_eq!(feed(&mut map, &tasks), in_window(&tasks, 1024));
}

/// A whole-row read (`Y[t]`) after the row's tiles (`Y[t, e]`, 16 of them) visits that row's
/// entries through the row lists, not every live tile of the tensor (the window holds 64
/// rows' worth); a read of all rows (`Y`) visits the tensor's slots whole.
#[test]
fn a_wide_lookup_visits_rows_or_slots() {
    let (rows, cols) = (256i64, 16i64);
    let mut tasks = Vec::new();
    for t in 0..rows {
        for e in 0..cols {
            tasks.push(vec![io(0, Dir::Out as u8, &[(t, t + 1), (e, e + 1)])]);
        }
        tasks.push(vec![io(0, Dir::In as u8, &[(t, t + 1)])]);
        if t % 64 == 63 {
            tasks.push(vec![io(0, Dir::In as u8, &[])]);
        }
    }
    let window = 64 * 17;
    let (got, work) = run_window(&tasks, window, 1);
    assert_eq!(got, in_window(&tasks, window));
    // Per row: 16 tile writes (a probe of their cell in each of the three slots, tiles, row
    // reads and whole reads, and what shares the buckets) and a read (one row list: the
    // row's 16 tiles); per 64 rows one whole-tensor read of up to 1,088 entries. Reading
    // every live tile for each row read would be over 1,000 a row.
    let per_row = work as f64 / rows as f64;
    assert!(
        per_row < 16.0 * 4.0 + 20.0 + 1100.0 / 64.0 + 4.0,
        "{per_row}"
    );
}

/// More shapes live at once than a tensor has slots (ranges of 1, 2, 3, 5, … 513 elements in
/// both dimensions): the overflow slot holds the rest, lookups scan it, and every edge is the
/// reference's.
#[test]
fn more_shapes_than_slots() {
    let widths = [1i64, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513];
    let mut tasks = Vec::new();
    for round in 0..6i64 {
        for (k, &w) in widths.iter().enumerate() {
            let a = (round * 37 + k as i64 * 11) % 600;
            let dir = if (round + k as i64) % 3 == 0 {
                Dir::Out
            } else {
                Dir::In
            };
            let b = (k as i64 * 5) % 40;
            tasks.push(vec![io(
                0,
                dir as u8,
                &[(a, a + w), (b, b + widths[10 - k])],
            )]);
            tasks.push(vec![io(0, Dir::InOut as u8, &[(a + w / 2, a + w / 2 + 1)])]);
        }
    }
    for window in [4, 16, tasks.len() as u32] {
        let (got, _) = run_window(&tasks, window, 1);
        assert_eq!(got, in_window(&tasks, window), "window {window}");
    }
}

/// A map reset after holding tiles, rows kept for wide lookups and the overflow slot finds
/// the same edges as a new one.
#[test]
fn a_reset_map_is_as_new() {
    let mut tasks = Vec::new();
    for t in 0..40i64 {
        for w in [1i64, 2, 3, 5, 9, 17, 33, 65, 129, 257] {
            tasks.push(vec![io(0, Dir::Out as u8, &[(t, t + 1), (w, 2 * w)])]);
        }
        tasks.push(vec![io(0, Dir::In as u8, &[(t, t + 1)])]);
    }
    let window = 64;
    let mut map = heap_map(MapLayout::new(window, 1, 1).unwrap(), DepMode::Overlap).unwrap();
    for round in 0..2 {
        let got = feed(&mut map, &tasks);
        assert_eq!(got, in_window(&tasks, window), "round {round}");
        map.reset();
        assert_eq!((map.live(), map.used()), (0, 0));
    }
}
