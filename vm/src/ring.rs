//! A bounded multi-producer single-consumer queue of `u32` values (window slot indices) in
//! caller-given memory, with atomics only (no locks, no heap): the ready queues of
//! spec/runtime.md §3.1, shared by the simulator and the device library.
//!
//! The algorithm is Dmitry Vyukov's bounded queue: each cell carries a sequence number that says
//! whether it is free for the push at position `p` (`seq == p`) or holds the value for the pop
//! at `p` (`seq == p + 1`); producers claim positions with a compare-and-swap on the tail
//! counter, then publish the cell with a Release store of its sequence. Any AICPU pushes to a
//! ring (it releases a task of the ring's owner), but only the owner pops, so the consumer's
//! head needs no compare-and-swap (Vyukov's multi-consumer pop costs one per value: about 4 % of
//! the threaded LLaMA run, BENCHMARKS.md). Under `--cfg loom` it runs on loom's atomics
//! (`host-sim/tests/loom.rs` checks it).
//!
//! ```
//! use ptovm_vm::ring::{Cell, Ring};
//! let q = Ring::new((0..4).map(|_| Cell::default()).collect::<Vec<_>>()).unwrap();
//! assert!(q.push(7).is_ok() && q.push(8).is_ok());
//! assert_eq!((q.pop(), q.pop(), q.pop()), (Some(7), Some(8), None));
//! ```

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// One cell of a ring.
#[derive(Debug, Default)]
pub struct Cell {
    seq: AtomicU64,
    /// Also a [`crate::deque::Deque`]'s cell (its values only).
    pub(crate) value: AtomicU32,
}

/// A counter on a cache line of its own (producers and consumers write different ones).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

/// The queue, over cells `C` (a boxed slice on the host, a slice of shared memory on the device).
#[derive(Debug)]
pub struct Ring<C> {
    cells: C,
    mask: u64,
    /// Next position to push.
    tail: Padded,
    /// Next position to pop.
    head: Padded,
}

/// Cells of a ready ring, completion ring or stealable deque for a window of `window` slots:
/// the power of two of at least `max(window, 2)` (every slot fits; spec/runtime.md §3.1).
pub fn cells_for(window: usize) -> usize {
    window.max(2).next_power_of_two()
}

/// The cell count is not a power of two of at least 2 (with one cell, "full" and "free for the
/// next lap" would look the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a ring needs a power-of-two number of cells, at least 2, not {0}")]
pub struct RingSizeError(pub usize);

impl<C: AsRef<[Cell]>> Ring<C> {
    /// An empty ring over `cells` (their contents are reset).
    pub fn new(cells: C) -> Result<Ring<C>, RingSizeError> {
        let n = cells.as_ref().len();
        if n < 2 || !n.is_power_of_two() {
            return Err(RingSizeError(n));
        }
        for (i, c) in cells.as_ref().iter().enumerate() {
            c.seq.store(i as u64, Ordering::Relaxed);
        }
        Ok(Ring {
            cells,
            mask: n as u64 - 1,
            tail: Padded::default(),
            head: Padded::default(),
        })
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.mask as usize + 1
    }

    /// Appends `value`; gives it back if the ring is full.
    pub fn push(&self, value: u32) -> Result<(), u32> {
        let cells = self.cells.as_ref();
        let mut pos = self.tail.0.load(Ordering::Relaxed);
        loop {
            let cell = &cells[(pos & self.mask) as usize];
            let seq = cell.seq.load(Ordering::Acquire);
            if seq == pos {
                match self.tail.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        cell.value.store(value, Ordering::Relaxed);
                        cell.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                }
            } else if (seq.wrapping_sub(pos) as i64) < 0 {
                // The cell still holds the value pushed one lap ago: full.
                return Err(value);
            } else {
                pos = self.tail.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest value, if any. Only its consumer pops (one thread at a time; every
    /// ring of the runtime is popped by the AICPU that owns it): so the head is its own, and a
    /// pop claims a position with a plain store instead of a compare-and-swap.
    pub fn pop(&self) -> Option<u32> {
        let pos = self.head.0.load(Ordering::Relaxed);
        let cell = &self.cells.as_ref()[(pos & self.mask) as usize];
        // Acquire: the producer's write of the value happens before this read of it.
        if cell.seq.load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None; // not yet pushed: empty
        }
        let value = cell.value.load(Ordering::Relaxed);
        self.head.0.store(pos.wrapping_add(1), Ordering::Release);
        // Release: this read of the value happens before the next lap's push overwrites it.
        cell.seq
            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
        Some(value)
    }

    /// Whether the ring looked empty (a hint: others may push meanwhile).
    pub fn is_empty(&self) -> bool {
        self.head.0.load(Ordering::Acquire) == self.tail.0.load(Ordering::Acquire)
    }

    /// How many values it looked to hold (a hint, as [`Ring::is_empty`]).
    pub fn len(&self) -> usize {
        let head = self.head.0.load(Ordering::Acquire);
        let tail = self.tail.0.load(Ordering::Acquire);
        tail.saturating_sub(head) as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn ring(n: usize) -> Ring<Vec<Cell>> {
        Ring::new((0..n).map(|_| Cell::default()).collect()).unwrap()
    }

    #[test]
    fn fifo_full_and_empty_over_many_laps() {
        for n in [2, 4, 8] {
            let q = ring(n);
            let mut next = 0;
            for lap in 0..50u32 {
                for k in 0..n as u32 {
                    assert_eq!(q.push(lap * 100 + k), Ok(()));
                }
                assert_eq!(q.push(9), Err(9), "full at {n}");
                for k in 0..n as u32 {
                    assert_eq!(q.pop(), Some(lap * 100 + k));
                    next += 1;
                }
                assert_eq!(q.pop(), None);
                assert!(q.is_empty());
            }
            assert_eq!(next, 50 * n);
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(
            Ring::new((0..3).map(|_| Cell::default()).collect::<Vec<_>>()).unwrap_err(),
            RingSizeError(3)
        );
        assert!(Ring::new(Vec::<Cell>::new()).is_err());
        assert!(Ring::new(std::vec![Cell::default()]).is_err());
        assert_eq!(ring(16).capacity(), 16);
    }

    /// Two producer threads and the one consumer.
    #[test]
    fn threads_lose_and_duplicate_nothing() {
        let q = ring(8);
        let per = 20_000u32;
        let seen = std::sync::Mutex::new(std::vec![0u8; 4 * per as usize]);
        std::thread::scope(|s| {
            for p in 0..2u32 {
                let q = &q;
                s.spawn(move || {
                    for k in 0..per {
                        while q.push(p * per + k).is_err() {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            {
                let (q, seen) = (&q, &seen);
                s.spawn(move || {
                    let mut got = 0;
                    let mut last = [None::<u32>; 2];
                    while got < 2 * per {
                        match q.pop() {
                            Some(v) => {
                                // Per producer, values come out in push order.
                                let p = (v / per) as usize;
                                assert!(last[p].is_none_or(|l| l < v));
                                last[p] = Some(v);
                                seen.lock().unwrap()[v as usize] += 1;
                                got += 1;
                            }
                            None => std::thread::yield_now(),
                        }
                    }
                });
            }
        });
        let seen = seen.into_inner().unwrap();
        assert!(seen[..2 * per as usize].iter().all(|&c| c == 1));
    }
}
