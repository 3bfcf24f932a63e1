//! A Chase-Lev work-stealing deque of `u32` values (window slot indices) in caller-given memory,
//! of fixed capacity, with atomics only (no locks, no heap): the stealable ready queues of
//! `ready = work_steal` (seed 003 §3; spec/runtime.md §4.3).
//!
//! One **owner** pushes and pops at the bottom (last in, first out: the task it released last,
//! whose inputs are the most likely to be in cache); any number of **thieves** steal at the top
//! (the oldest task). The algorithm is Chase and Lev's ("Dynamic circular work-stealing deque",
//! SPAA 2005) without growth, with the memory orders of Lê, Pop, Cohen and Zappa Nardelli
//! ("Correct and efficient work-stealing for weak memory models", PPoPP 2013): the owner's pop
//! and a thief's steal each store or read one index, fence (SeqCst) and read the other, so when
//! one value is left the two race on a compare-and-swap of `top` and exactly one wins. Under
//! `--cfg loom` it runs on loom's atomics (`host-sim/tests/loom.rs` checks it).
//!
//! The capacity is the cells' count; a push beyond it fails (a window slot is in at most one
//! queue, so a deque of the window's size never fills).
//!
//! ```
//! use ptovm_vm::deque::Deque;
//! use ptovm_vm::ring::Cell;
//! let d = Deque::new((0..4).map(|_| Cell::default()).collect::<Vec<_>>()).unwrap();
//! assert!(d.push(7).is_ok() && d.push(8).is_ok() && d.push(9).is_ok());
//! assert_eq!(d.steal(), Some(7)); // the oldest, to a thief
//! assert_eq!(d.pop(), Some(9)); // the newest, to the owner
//! assert_eq!((d.pop(), d.pop()), (Some(8), None));
//! ```

use crate::ring::{Cell, RingSizeError};
use crate::sync::{fence, Ordering};

/// An index on a cache line of its own (the owner writes `bottom`, thieves `top`).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(crate::sync::AtomicU64);

/// The deque, over cells `C` (a boxed slice on the host, a slice of shared memory on the
/// device): only their values are used.
#[derive(Debug)]
pub struct Deque<C> {
    cells: C,
    mask: u64,
    /// Next position the owner pushes at; the owner alone writes it.
    bottom: Padded,
    /// The oldest value's position; thieves (and the owner taking the last value) advance it
    /// by compare-and-swap.
    top: Padded,
}

impl<C: AsRef<[Cell]>> Deque<C> {
    /// An empty deque over `cells`: a power-of-two count of at least 2, as a ring's.
    pub fn new(cells: C) -> Result<Deque<C>, RingSizeError> {
        let n = cells.as_ref().len();
        if n < 2 || !n.is_power_of_two() {
            return Err(RingSizeError(n));
        }
        Ok(Deque {
            cells,
            mask: n as u64 - 1,
            bottom: Padded::default(),
            top: Padded::default(),
        })
    }

    fn cell(&self, pos: u64) -> &crate::sync::AtomicU32 {
        &self.cells.as_ref()[(pos & self.mask) as usize].value
    }

    /// The owner: pushes `value` at the bottom; gives it back if the deque is full.
    pub fn push(&self, value: u32) -> Result<(), u32> {
        let b = self.bottom.0.load(Ordering::Relaxed);
        let t = self.top.0.load(Ordering::Acquire);
        if b.wrapping_sub(t) > self.mask {
            return Err(value);
        }
        self.cell(b).store(value, Ordering::Relaxed);
        // The value before the new bottom, to a thief that reads the bottom (Acquire).
        fence(Ordering::Release);
        self.bottom.0.store(b.wrapping_add(1), Ordering::Relaxed);
        Ok(())
    }

    /// The owner: pops the newest value.
    pub fn pop(&self) -> Option<u32> {
        let b = self.bottom.0.load(Ordering::Relaxed).wrapping_sub(1);
        self.bottom.0.store(b, Ordering::Relaxed);
        // Claims the bottom before reading the top: a thief reading the bottom after this sees
        // the claim, one that read it before has advanced the top, which this sees.
        fence(Ordering::SeqCst);
        let t = self.top.0.load(Ordering::Relaxed);
        // `t <= b` as positions that may wrap.
        if (b.wrapping_sub(t) as i64) < 0 {
            // Empty: the bottom goes back.
            self.bottom.0.store(b.wrapping_add(1), Ordering::Relaxed);
            return None;
        }
        let value = self.cell(b).load(Ordering::Relaxed);
        if t != b {
            return Some(value); // more than one left: no thief reaches this one
        }
        // The last value: the owner and the thieves race for it on the top.
        let won = self
            .top
            .0
            .compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed)
            .is_ok();
        self.bottom.0.store(b.wrapping_add(1), Ordering::Relaxed);
        won.then_some(value)
    }

    /// A thief (any thread): steals the oldest value. `None` when it found the deque empty or
    /// lost a race for the value (another thief or the owner took it).
    pub fn steal(&self) -> Option<u32> {
        let t = self.top.0.load(Ordering::Acquire);
        fence(Ordering::SeqCst);
        let b = self.bottom.0.load(Ordering::Acquire);
        if (b.wrapping_sub(t) as i64) <= 0 {
            return None;
        }
        let value = self.cell(t).load(Ordering::Relaxed);
        self.top
            .0
            .compare_exchange(t, t.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed)
            .ok()
            .map(|_| value)
    }

    /// Whether it looks empty (a hint: the owner or a thief may change it at once).
    pub fn is_empty(&self) -> bool {
        let t = self.top.0.load(Ordering::Acquire);
        let b = self.bottom.0.load(Ordering::Acquire);
        (b.wrapping_sub(t) as i64) <= 0
    }

    /// How many values it looks to hold (a hint, as [`Deque::is_empty`]).
    pub fn len(&self) -> usize {
        let t = self.top.0.load(Ordering::Acquire);
        let b = self.bottom.0.load(Ordering::Acquire);
        (b.wrapping_sub(t) as i64).max(0) as usize
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.mask as usize + 1
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn deque(n: usize) -> Deque<Vec<Cell>> {
        Deque::new((0..n).map(|_| Cell::default()).collect()).unwrap()
    }

    #[test]
    fn the_owner_pops_newest_first_and_thieves_steal_oldest_first() {
        let d = deque(4);
        for v in 1..=4 {
            d.push(v).unwrap();
        }
        assert_eq!(d.push(5), Err(5), "full at its capacity");
        assert_eq!(d.steal(), Some(1));
        assert_eq!(d.pop(), Some(4));
        d.push(6).unwrap();
        assert_eq!(d.steal(), Some(2));
        assert_eq!([d.pop(), d.pop(), d.pop()], [Some(6), Some(3), None]);
        assert_eq!(d.steal(), None);
        assert!(d.is_empty());
    }

    #[test]
    fn positions_wrap_around_the_cells_many_times() {
        let d = deque(2);
        for v in 0..1_000u32 {
            d.push(v).unwrap();
            d.push(v + 1).unwrap();
            assert_eq!(d.steal(), Some(v));
            assert_eq!(d.pop(), Some(v + 1));
            assert!(d.is_empty());
        }
    }

    #[test]
    fn a_bad_cell_count_is_refused() {
        assert!(Deque::new(Vec::<Cell>::new()).is_err());
        assert!(Deque::new((0..3).map(|_| Cell::default()).collect::<Vec<_>>()).is_err());
    }
}
