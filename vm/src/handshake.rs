//! The AICPU ↔ AICore handshake (seed 003 §4.1, spec/runtime.md §3.4): one 64-byte slot per
//! core in memory both sides see, through which an AICPU hands a task to an idle core and learns
//! that it finished. Atomics only; the simulator's cores and the device's AICores use the same
//! slot and the same orderings.
//!
//! | field | written by | meaning |
//! | --- | --- | --- |
//! | `aicpu_ready` | AICPU | 1 once the scheduler driving this core is up |
//! | `core_type` | AICPU (at set-up) | [`CUBE`] or [`VECTOR`]: which pool's tasks the core takes |
//! | `task` | AICPU | the task word of the assigned task (meaningful while `task_status` is [`ASSIGNED`]) |
//! | `task_status` | both | [`IDLE`] → [`ASSIGNED`] by the AICPU (Release, after `task`); → [`IDLE`] by the core when the task is done (Release, after its results) |
//! | `aicore_done` | core | tasks this core has completed (a counter, for diagnostics) |
//! | `control` | AICPU | [`RUN`], or [`SHUTDOWN`]: the core leaves its loop |
//!
//! ```
//! use ptovm_vm::handshake::{CoreSlot, VECTOR};
//! let slot = CoreSlot::default();
//! slot.set_up(VECTOR);
//! assert!(slot.assign(42).is_ok()); // AICPU
//! assert_eq!(slot.take(), Some(42)); // core: runs task 42, then
//! slot.finish(); // says so
//! assert!(slot.idle()); // AICPU: the core is free, task 42 completed
//! ```

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// `task_status`: no task (never assigned, or the last one finished).
pub const IDLE: u32 = 0;
/// `task_status`: a task is assigned and not finished.
pub const ASSIGNED: u32 = 1;
/// `core_type` of a cube (AIC) core.
pub const CUBE: u32 = 0;
/// `core_type` of a vector (AIV) core.
pub const VECTOR: u32 = 1;
/// `control`: keep polling.
pub const RUN: u32 = 0;
/// `control`: leave the loop.
pub const SHUTDOWN: u32 = 1;

/// One core's handshake slot, alone on its cache line.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct CoreSlot {
    /// 1 once the AICPU driving this core is up.
    pub aicpu_ready: AtomicU32,
    /// [`CUBE`] or [`VECTOR`].
    pub core_type: AtomicU32,
    /// The assigned task's word.
    pub task: AtomicU64,
    /// [`IDLE`] or [`ASSIGNED`].
    pub task_status: AtomicU32,
    /// Tasks completed by this core.
    pub aicore_done: AtomicU32,
    /// [`RUN`] or [`SHUTDOWN`].
    pub control: AtomicU32,
}

/// The slot already holds a task that has not finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the core is busy")]
pub struct Busy;

impl CoreSlot {
    /// AICPU, at set-up: the core's pool, no task, running; then `aicpu_ready` (Release).
    pub fn set_up(&self, core_type: u32) {
        self.core_type.store(core_type, Ordering::Relaxed);
        self.task_status.store(IDLE, Ordering::Relaxed);
        self.control.store(RUN, Ordering::Relaxed);
        self.aicpu_ready.store(1, Ordering::Release);
    }

    /// AICPU: hands `task` to the core; `Busy` if its last task has not finished.
    pub fn assign(&self, task: u64) -> Result<(), Busy> {
        if self.task_status.load(Ordering::Acquire) != IDLE {
            return Err(Busy);
        }
        self.task.store(task, Ordering::Relaxed);
        // Release: the task word (and the task's record before it) are visible to the core
        // that sees ASSIGNED.
        self.task_status.store(ASSIGNED, Ordering::Release);
        Ok(())
    }

    /// AICPU: whether the core is idle (its last task, if any, finished; Acquire: the task's
    /// results are visible).
    pub fn idle(&self) -> bool {
        self.task_status.load(Ordering::Acquire) == IDLE
    }

    /// Core: the assigned task's word, if one is assigned.
    pub fn take(&self) -> Option<u64> {
        (self.task_status.load(Ordering::Acquire) == ASSIGNED)
            .then(|| self.task.load(Ordering::Relaxed))
    }

    /// Core: the assigned task is done (Release: its results before it).
    pub fn finish(&self) {
        self.aicore_done.fetch_add(1, Ordering::Relaxed);
        self.task_status.store(IDLE, Ordering::Release);
    }

    /// AICPU: tells the core to leave its loop.
    pub fn shut_down(&self) {
        self.control.store(SHUTDOWN, Ordering::Release);
    }

    /// Core: whether it should leave its loop.
    pub fn shutting_down(&self) -> bool {
        self.control.load(Ordering::Acquire) == SHUTDOWN
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_task_at_a_time() {
        let s = CoreSlot::default();
        s.set_up(CUBE);
        assert_eq!(s.aicpu_ready.load(Ordering::Relaxed), 1);
        assert_eq!(s.take(), None);
        assert!(s.idle());
        s.assign(7).unwrap();
        assert_eq!(s.assign(8), Err(Busy));
        assert!(!s.idle());
        assert_eq!(s.take(), Some(7));
        s.finish();
        assert!(s.idle() && s.take().is_none());
        s.assign(9).unwrap();
        assert_eq!(s.take(), Some(9));
        s.finish();
        assert_eq!(s.aicore_done.load(Ordering::Relaxed), 2);
        assert!(!s.shutting_down());
        s.shut_down();
        assert!(s.shutting_down());
        assert_eq!(core::mem::size_of::<CoreSlot>(), 64);
    }
}
