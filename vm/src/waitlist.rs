//! The lock-free pieces of the runtime protocol (spec/runtime.md §4.1 steps 6–7, §4.2): a task's
//! successor list — a Treiber stack tagged with the task's id and closed when the task completes —
//! and the fanin count. Atomics only, no heap: the simulator and the device library share them.
//! They are written against `crate::sync`, so under `--cfg loom` the same code runs in the loom
//! models of `host-sim/tests/loom.rs`.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The empty list.
pub const NIL: u32 = u32::MAX;
/// The list of a completed task: registering on it fails.
pub const CLOSED: u32 = u32::MAX - 1;

/// A list head: the owning task's tag in the high half, the first node (or NIL / CLOSED) in the
/// low half.
pub fn pack(tag: u32, node: u32) -> u64 {
    ((tag as u64) << 32) | node as u64
}

/// The tag of a task id (its low 32 bits): a slot reused by a later task gets another tag.
pub fn tag_of(id: u64) -> u32 {
    id as u32
}

/// Opens the list of a task newly placed in a slot (published by the slot's Release store).
pub fn open(head: &AtomicU64, tag: u32) {
    head.store(pack(tag, NIL), Ordering::Relaxed);
}

/// Registers `node` as a successor of the task tagged `tag` whose list is `head`.
/// `link(first)` stores the node's next pointer before it is published. Returns false if the
/// task has completed (its list is closed) or its slot has moved on to another task (the tag
/// differs): then it imposes nothing.
///
/// Registering leaves the successor's `fanin` alone: the successor stores there, before its
/// first registration, at least as many holds as it may register ([`expect`]), and takes back
/// those no predecessor will drop ([`release_many`]) after its last one.
pub fn register(head: &AtomicU64, tag: u32, node: u32, link: impl Fn(u32)) -> bool {
    let mut cur = head.load(Ordering::Acquire);
    loop {
        let (t, first) = ((cur >> 32) as u32, (cur & 0xFFFF_FFFF) as u32);
        if t != tag || first == CLOSED {
            return false;
        }
        link(first);
        match head.compare_exchange(cur, pack(tag, node), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(actual) => cur = actual,
        }
    }
}

/// Closes the list of the completed task tagged `tag`; returns its first node (NIL if none).
pub fn close(head: &AtomicU64, tag: u32) -> u32 {
    let first = (head.swap(pack(tag, CLOSED), Ordering::AcqRel) & 0xFFFF_FFFF) as u32;
    if first == CLOSED {
        NIL
    } else {
        first
    }
}

/// Closes a list whatever its tag, keeping the tag; returns its first node (NIL if none). For
/// a join (spec/runtime.md §4.7), whose releaser does not know the tag: only the join's AICPU
/// changes it, by reopening the join, and only after it saw the list closed.
pub fn close_open(head: &AtomicU64) -> u32 {
    let tag = (head.load(Ordering::Acquire) >> 32) as u32;
    close(head, tag)
}

/// Whether the task tagged `tag` whose list is `head` has completed (its list is closed, or its
/// slot has moved on to another task).
pub fn completed(head: &AtomicU64, tag: u32) -> bool {
    let cur = head.load(Ordering::Acquire);
    (cur >> 32) as u32 != tag || (cur & 0xFFFF_FFFF) as u32 == CLOSED
}

/// Drops one hold on a fanin (a predecessor's completion, or the one a task keeps while it
/// polls predecessors beyond its nodes); true when it was the last one: the task is ready.
pub fn release(fanin: &AtomicU32) -> bool {
    fanin.fetch_sub(1, Ordering::AcqRel) == 1
}

/// Stores `holds` holds on a successor's `fanin`, one for each predecessor it may register on,
/// before its first registration: that registration's compare-and-swap publishes them to the
/// predecessor's completion. `fanin` cannot reach 0 until the successor takes back, with
/// [`release_many`], the holds no registration gave to a predecessor.
pub fn expect(fanin: &AtomicU32, holds: u32) {
    fanin.store(holds, Ordering::Relaxed);
}

/// Drops `holds` holds on a fanin at once (the successor's own, after its registrations); true
/// when they were the last: the task is ready.
pub fn release_many(fanin: &AtomicU32, holds: u32) -> bool {
    fanin.fetch_sub(holds, Ordering::AcqRel) == holds
}

/// After its last registration, a successor that registered on `registered` predecessors takes
/// back the `unused` holds no predecessor took. True when it is ready: it registered on none
/// (nothing else holds its `fanin`, which it leaves as it is), or those were the last holds.
pub fn take_back(fanin: &AtomicU32, unused: u32, registered: u32) -> bool {
    registered == 0 || unused > 0 && release_many(fanin, unused)
}
