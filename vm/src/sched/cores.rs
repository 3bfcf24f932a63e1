//! Which cores an AICPU may hand tasks to (spec/runtime.md §4.6): every core of the launch,
//! shared by all AICPUs (the default), or a fixed partition, core `c` of a pool to AICPU
//! `c mod n` (`cores = partition`).
//!
//! Shared cores live in a bitmap in the shared region, bit `c % 64` of word `c / 64` set while
//! core `c` is free. An AICPU claims a free core of the pool it issues to with a
//! compare-and-swap, and the AICPU that issued a task — the one that sees its core finish —
//! sets the bit again, unless its next task takes the core in the same round (its hand,
//! `claim.rs`). Each AICPU has a **home** share of each pool, which it claims from first;
//! beyond it, it claims only in the shares of AICPUs idle in the pool (no task of it ready, and
//! not all of its share running its own tasks), so a busy AICPU uses idle cores without
//! starving the others.
//!
//! An AICPU with a ready task that finds no core it may claim announces itself in its pool's
//! waiter word and looks again; its bit stays until it withdraws it (it got a core, or has no
//! task left for one). An AICPU that returns cores looks at the waiter word and wakes whom it
//! names. Each side stores to its word, fences (SeqCst) and loads the other's word; the two
//! fences are ordered one way or the other, so either the returner sees the announcement or
//! the waiter sees the returned core: no wake-up is lost (Dekker's argument;
//! `host-sim/tests/loom.rs` checks it, and fails with either fence removed).
//!
//! ```
//! use core::sync::atomic::AtomicU64;
//! use ptovm_vm::sched::cores;
//! let bits: Vec<AtomicU64> = (0..cores::words_for(70)).map(|_| AtomicU64::new(0)).collect();
//! cores::free_all(&bits, 70);
//! let vector = cores::Span::new(64..70);
//! assert_eq!(vector.claim(&bits), Some(64));
//! assert_eq!(vector.free(&bits), 5);
//! cores::give_back(&bits, 64);
//! assert_eq!(cores::Span::new(0..70).free(&bits), 70);
//! ```

use core::ops::Range;

use super::Padded;
use crate::sync::{fence, AtomicU64, Ordering};

/// How the launch's cores are divided among its AICPUs (the schedule's `cores` knob).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CoreAlloc {
    /// Any AICPU hands a task to a free core of its pool: of its home share, or of an AICPU
    /// with nothing of the pool ready.
    #[default]
    Shared,
    /// Core `c` of a pool belongs to AICPU `c mod n`, which alone hands it tasks.
    Partition,
}

impl CoreAlloc {
    /// Decodes the config's `cores` byte (spec/bytecode.md §3.1): 0 shared, 1 partition.
    pub fn from_u8(b: u8) -> Option<CoreAlloc> {
        match b {
            0 => Some(CoreAlloc::Shared),
            1 => Some(CoreAlloc::Partition),
            _ => None,
        }
    }

    /// The `.pto` spelling's value (`cores = shared | partition`).
    pub fn from_name(name: &str) -> Option<CoreAlloc> {
        match name {
            "shared" => Some(CoreAlloc::Shared),
            "partition" => Some(CoreAlloc::Partition),
            _ => None,
        }
    }

    /// Its config byte.
    pub fn code(self) -> u8 {
        match self {
            CoreAlloc::Shared => 0,
            CoreAlloc::Partition => 1,
        }
    }
}

impl core::fmt::Display for CoreAlloc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            CoreAlloc::Shared => "shared",
            CoreAlloc::Partition => "partition",
        })
    }
}

/// Words of a bitmap of `cores` cores.
pub fn words_for(cores: usize) -> usize {
    cores.div_ceil(64)
}

/// Marks cores `0..cores` free and any further bits of `bits` taken (at launch, before any
/// AICPU runs).
pub fn free_all(bits: &[AtomicU64], cores: usize) {
    let all = Span::new(0..cores as u32);
    for (w, word) in bits.iter().enumerate() {
        word.store(all.mask(w), Ordering::Relaxed);
    }
}

/// The value of `Shared::core_waiters[i]` at launch, of `aicpus` AICPUs: no AICPU waits for a
/// core (0 and 1) or for a kernel's core limit (4), and every AICPU is idle in both pools (2
/// and 3) — it has issued nothing, so its home cores may be lent until it publishes otherwise.
/// (An AICPU that is not dispatching yet, under a start policy, or never will, must not keep
/// its home cores from the others.)
pub fn waiter_word_at_launch(i: usize, aicpus: u32) -> u64 {
    match (i, aicpus) {
        (0 | 1 | 4.., _) => 0,
        (_, 64..) => u64::MAX,
        (_, n) => (1u64 << n) - 1,
    }
}

/// A range of cores as words of the bitmap and the bits of its first and last word: computed
/// once (a pool's cores, an AICPU's home share), so that looking for a free core is a load and
/// a mask per word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Words `first..end`.
    first: usize,
    end: usize,
    first_mask: u64,
    last_mask: u64,
}

impl Span {
    /// The cores `range`.
    pub fn new(range: Range<u32>) -> Span {
        if range.is_empty() {
            return Span::default();
        }
        let (lo, hi) = (range.start as usize, range.end as usize);
        let below = |bit: usize| {
            if bit == 64 {
                u64::MAX
            } else {
                (1u64 << bit) - 1
            }
        };
        Span {
            first: lo / 64,
            end: hi.div_ceil(64),
            first_mask: !below(lo % 64),
            last_mask: below(hi - (hi.div_ceil(64) - 1) * 64),
        }
    }

    /// Whether it holds no core.
    pub fn is_empty(&self) -> bool {
        self.first >= self.end
    }

    /// The bits of word `w` in the span.
    fn mask(&self, w: usize) -> u64 {
        if w < self.first || w >= self.end {
            return 0;
        }
        let mut m = u64::MAX;
        if w == self.first {
            m &= self.first_mask;
        }
        if w + 1 == self.end {
            m &= self.last_mask;
        }
        m
    }

    /// The words of `bits` it covers.
    fn words(&self, bits: &[AtomicU64]) -> Range<usize> {
        let end = self.end.min(bits.len());
        self.first.min(end)..end
    }

    /// Whether a core of the span is free now (a hint: another AICPU may claim it first).
    #[inline]
    pub fn any_free(&self, bits: &[AtomicU64]) -> bool {
        self.words(bits)
            .any(|w| bits[w].load(Ordering::Relaxed) & self.mask(w) != 0)
    }

    /// Free cores of the span now.
    pub fn free(&self, bits: &[AtomicU64]) -> u32 {
        self.words(bits)
            .map(|w| (bits[w].load(Ordering::Relaxed) & self.mask(w)).count_ones())
            .sum()
    }

    /// Claims its lowest free core, if any. Acquire: what the AICPU that gave it back did with
    /// it (its handshake slot seen idle) happens before the claimer hands it a task.
    pub fn claim(&self, bits: &[AtomicU64]) -> Option<u32> {
        for w in self.words(bits) {
            let m = self.mask(w);
            let mut cur = bits[w].load(Ordering::Relaxed);
            while cur & m != 0 {
                let bit = (cur & m).trailing_zeros();
                match bits[w].compare_exchange_weak(
                    cur,
                    cur & !(1u64 << bit),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(w as u32 * 64 + bit),
                    Err(seen) => cur = seen,
                }
            }
        }
        None
    }
}

/// AICPU `a`'s home share of the pool whose cores are `pool`, of `n` AICPUs:
/// `[a · len / n, (a + 1) · len / n)` from its start (empty when the pool has fewer cores
/// than AICPUs and `a` gets none).
pub fn home(pool: Range<u32>, a: u32, n: u32) -> Range<u32> {
    let len = u64::from(pool.end - pool.start);
    let at = |a: u32| pool.start + (len * u64::from(a) / u64::from(n.max(1))) as u32;
    at(a)..at(a + 1)
}

/// The AICPU whose home share of the pool whose cores are `pool`, of `n` AICPUs, holds core
/// `core` of it (the inverse of [`home`]: the largest `a` with `a · len / n ≤ core − start`).
pub fn home_of(pool: Range<u32>, core: u32, n: u32) -> u32 {
    let len = u64::from(pool.end - pool.start).max(1);
    let x = u64::from(core.saturating_sub(pool.start));
    (((x + 1) * u64::from(n.max(1)) - 1) / len) as u32
}

/// Gives core `core` back. Release: what this AICPU did with the core happens before its next
/// claimer's use. Whoever gives cores back then calls [`waiting`] and wakes whom it names.
pub fn give_back(bits: &[AtomicU64], core: u32) {
    if let Some(word) = bits.get(core as usize / 64) {
        word.fetch_or(1u64 << (core % 64), Ordering::Release);
    }
}

/// Cores given back together: one `fetch_or` per bitmap word instead of one per core (the
/// bitmap's line is the one every AICPU claims from). [`GiveBack::done`] gives back the rest.
pub struct GiveBack<'b> {
    bits: &'b [AtomicU64],
    word: usize,
    mask: u64,
}

impl<'b> GiveBack<'b> {
    /// Nothing given back yet.
    pub fn new(bits: &'b [AtomicU64]) -> GiveBack<'b> {
        GiveBack {
            bits,
            word: 0,
            mask: 0,
        }
    }

    /// Gives core `core` back (now, or with the next cores of its word).
    pub fn add(&mut self, core: u32) {
        let w = core as usize / 64;
        if w != self.word && self.mask != 0 {
            self.flush();
        }
        self.word = w;
        self.mask |= 1u64 << (core % 64);
    }

    fn flush(&mut self) {
        if let Some(word) = self.bits.get(self.word) {
            word.fetch_or(self.mask, Ordering::Release);
        }
        self.mask = 0;
    }

    /// Gives back what is left.
    pub fn done(&mut self) {
        if self.mask != 0 {
            self.flush();
        }
    }
}

/// AICPU `me` waits for a core of the pool whose waiter word is `waiters`: sets its bit and
/// fences. The caller then looks for a core again; if it finds none, whoever gives one back
/// after this wakes it. The bit stays until [`withdraw`].
pub fn announce(waiters: &Padded, me: u32) {
    waiters.0.fetch_or(1u64 << (me % 64), Ordering::Relaxed);
    fence(Ordering::SeqCst);
}

/// AICPU `me` no longer waits for a core (it got one, or has no task for one).
pub fn withdraw(waiters: &Padded, me: u32) {
    waiters.0.fetch_and(!(1u64 << (me % 64)), Ordering::Relaxed);
}

/// After giving cores of a pool back ([`give_back`]): fences, then reads which AICPUs other than
/// `me` wait for one (bit `a` for AICPU `a`) — the caller wakes each.
pub fn waiting(waiters: &Padded, me: u32) -> u64 {
    fence(Ordering::SeqCst);
    waiters.0.load(Ordering::Relaxed) & !(1u64 << (me % 64))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn spans_cover_exactly_their_cores() {
        let masks = |r: Range<u32>| [0, 1, 2].map(|w| Span::new(r.clone()).mask(w));
        assert_eq!(masks(0..64), [u64::MAX, 0, 0]);
        assert_eq!(masks(3..5), [0b11000, 0, 0]);
        assert_eq!(masks(3..70), [!0b111, 0b111111, 0]);
        assert_eq!(masks(64..128), [0, u64::MAX, 0]);
        assert_eq!(masks(60..130), [0xF << 60, u64::MAX, 0b11]);
        assert_eq!(masks(5..5), [0, 0, 0]);
    }

    #[test]
    fn claims_every_core_of_a_pool_once_then_none() {
        let bits: [AtomicU64; 2] = Default::default();
        free_all(&bits, 72);
        let vector = Span::new(24..72);
        let mut got = [false; 72];
        while let Some(c) = vector.claim(&bits) {
            assert!((24..72).contains(&c) && !got[c as usize]);
            got[c as usize] = true;
        }
        assert_eq!(got.iter().filter(|&&g| g).count(), 48);
        assert_eq!(Span::new(0..24).free(&bits), 24);
        assert!(!vector.any_free(&bits));
        give_back(&bits, 70);
        assert!(vector.any_free(&bits));
        assert_eq!(vector.claim(&bits), Some(70));
        // Bits past the last core are never free.
        assert_eq!(Span::new(72..128).claim(&bits), None);
    }

    #[test]
    fn waiters_stay_until_they_withdraw_and_never_include_the_caller() {
        let w = Padded::new(0);
        announce(&w, 1);
        announce(&w, 3);
        assert_eq!(waiting(&w, 3), 0b10);
        assert_eq!(waiting(&w, 0), 0b1010);
        withdraw(&w, 1);
        assert_eq!(waiting(&w, 0), 0b1000);
    }

    #[test]
    fn at_launch_every_aicpu_is_idle_and_none_waits() {
        for n in [1, 6, 64] {
            let idle = if n == 64 { u64::MAX } else { (1 << n) - 1 };
            let words: Vec<u64> = (0..5).map(|i| waiter_word_at_launch(i, n)).collect();
            // Not waiting for a core limit either: a set bit would be woken by every unit given
            // back, all run long.
            assert_eq!(words, [0, 0, idle, idle, 0], "{n} AICPUs");
        }
    }

    #[test]
    fn homes_split_a_pool_evenly_and_cover_it() {
        assert_eq!(home(24..72, 0, 6), 24..32);
        assert_eq!(home(24..72, 5, 6), 64..72);
        assert_eq!(home(0..1, 0, 6), 0..0);
        assert_eq!(home(0..1, 5, 6), 0..1);
        for (len, n) in [(24, 6), (5, 3), (1, 4), (70, 64)] {
            let covered: u32 = (0..n).map(|a| home(0..len, a, n).len() as u32).sum();
            assert_eq!(covered, len);
        }
    }

    #[test]
    fn home_of_names_the_share_that_holds_a_core() {
        for start in [0, 24] {
            for len in 1..=80 {
                for n in 1..=70 {
                    for a in 0..n {
                        for c in home(start..start + len, a, n) {
                            assert_eq!(home_of(start..start + len, c, n), a, "{len} {n} {c}");
                        }
                    }
                }
            }
        }
    }
}
