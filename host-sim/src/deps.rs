//! Dependency edges of a task list in program order, found with a TensorMap over regions
//! (spec/bytecode.md §5.5): read-after-write, write-after-write and write-after-read.

use std::collections::HashMap;

use ptovm_vm::Io;

use crate::reference::RefTask;

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

#[derive(Default)]
struct Live {
    writes: Vec<(Io, u64)>,
    reads: Vec<(Io, u64)>,
}

/// Computes the edges of `tasks` (in id order). Each task depends on the last writer of what
/// it reads or writes, and a writer on the readers since that write. In overlap mode a record
/// is dropped once a later write covers its whole region, so every element's last writer and
/// readers stay live and no edge is missed.
pub fn edges(tasks: &[RefTask], mode: DepMode) -> Vec<Edge> {
    let mut out: Vec<Edge> = Vec::new();
    match mode {
        DepMode::Exact => {
            #[derive(Default)]
            struct Entry {
                writer: Option<u64>,
                readers: Vec<u64>,
            }
            let mut map: HashMap<(u16, Vec<(i64, i64)>), Entry> = HashMap::new();
            for t in tasks {
                let mut add = |from: u64, kind| {
                    if from != t.id {
                        out.push(Edge {
                            from,
                            to: t.id,
                            kind,
                        });
                    }
                };
                for io in &t.io {
                    let e = map.entry((io.tensor, io.dims().to_vec())).or_default();
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
                        e.writer = Some(t.id);
                    } else {
                        e.readers.push(t.id);
                    }
                }
            }
        }
        DepMode::Overlap => {
            let mut map: HashMap<u16, Live> = HashMap::new();
            for t in tasks {
                for io in &t.io {
                    let live = map.entry(io.tensor).or_default();
                    for (w, wid) in &live.writes {
                        if *wid != t.id && w.overlaps(io) {
                            let kind = if io.reads() {
                                EdgeKind::Raw
                            } else {
                                EdgeKind::Waw
                            };
                            out.push(Edge {
                                from: *wid,
                                to: t.id,
                                kind,
                            });
                        }
                    }
                    if io.writes() {
                        for (r, rid) in &live.reads {
                            if *rid != t.id && r.overlaps(io) {
                                out.push(Edge {
                                    from: *rid,
                                    to: t.id,
                                    kind: EdgeKind::War,
                                });
                            }
                        }
                        live.writes.retain(|(w, _)| !covers(io, w));
                        live.reads.retain(|(r, _)| !covers(io, r));
                        live.writes.push((*io, t.id));
                    } else {
                        live.reads.push((*io, t.id));
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.from == b.from && a.to == b.to);
    out
}

/// Whether region `a` contains region `b` (dimensions not named are whole).
fn covers(a: &Io, b: &Io) -> bool {
    if a.tensor != b.tensor {
        return false;
    }
    let n = a.ndims.max(b.ndims) as usize;
    (0..n).all(|i| {
        let ra = if i < a.ndims as usize {
            a.ranges[i]
        } else {
            (0, i64::MAX)
        };
        let rb = if i < b.ndims as usize {
            b.ranges[i]
        } else {
            (0, i64::MAX)
        };
        ra.0 <= rb.0 && rb.1 <= ra.1
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptovm_vm::Pool;

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

    fn t(id: u64, io: Vec<Io>) -> RefTask {
        RefTask {
            id,
            kernel: 0,
            pool: Pool::Vector,
            site: 0,
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
}
