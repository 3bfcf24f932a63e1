//! The map's word array and its lists: where each part of the words starts, the hashing of
//! keys into buckets, each tensor's shape slots, and linking an entry onto its lists and off.
//!
//! Words, in order: the home table (a write and a read list head per bucket), the row table
//! (the same, and their lengths), per tensor [`TENSOR_WORDS`] words, per handle its region
//! count. A tensor's words are the mask of its slots in use, then per **shape slot** (a pair
//! of levels its live entries have: tiles, rows of three, whole rows, …) the shape word, the
//! slot's live entries and live writes, the heads of its write and read lists (kept once a
//! lookup scans the slot: an entry links itself onto its slot's list only then, so that a
//! program whose lookups only visit cells, like the LLaMA layer's, links each entry onto one
//! list), and its live entries by dimension-0 cell modulo 8. After the handles' counts come the
//! dense tables' row list heads and cells (`dense.rs`).

use super::key::{Entry, Key, DENSE, HOME, LIVE, ON_ROW, ON_SHAPE, ROW, SHAPE, WRITE};
use super::{MapLayout, NIL};
use crate::interp::GOLDEN_GAMMA as GOLDEN;

/// Words per row bucket: the write and the read list heads, their lengths.
pub(super) const ROW_WORDS: usize = 4;

/// Shape slots per tensor. A tensor whose live entries have more shapes than this files the
/// rest in its last slot, which lookups then scan (`MIXED`).
pub(super) const SLOTS: usize = 8;
/// Words per slot: shape word, live entries, live writes, write list head, read list head, and
/// the live entries by their dimension-0 cell modulo [`ROW_GROUPS`].
const SLOT_WORDS: usize = 5 + ROW_GROUPS;
/// In a slot: its live entries.
pub(super) const SLOT_LIVE: usize = 1;
/// In a slot: its live writes.
pub(super) const SLOT_WRITES: usize = 2;
/// In a slot: its write list head (its read list head is the next word).
pub(super) const SLOT_LISTS: usize = 3;
/// In a slot: its live entries whose dimension-0 cell is `g` modulo [`ROW_GROUPS`], for each
/// `g`: a lookup skips a slot that has none in the rows it would visit.
pub(super) const SLOT_ROWS: usize = 5;
/// Groups of dimension-0 cells a slot counts its entries in.
pub(super) const ROW_GROUPS: usize = 8;
/// Words before the slots: the mask of the slots in use (those with live entries, and
/// [`DENSE_LIVE`] while the tensor's dense table holds one), then the dense table's live
/// entries, the bound of the rows of the tensor's entries on lists, the table's first word, its
/// columns (0: the tensor has no table), its row mask and its rank (`dense.rs`).
pub(super) const TENSOR_HEAD: usize = 7;
/// In a tensor's head: its dense table's live entries.
pub(super) const DENSE_COUNT: usize = 1;
/// In a tensor with a dense table's head: every entry of the tensor put on the lists since the
/// last reset ends in dimension 0 at or before this row (`u32::MAX`: no bound), so a lookup
/// starting at it or after needs only the table.
pub(super) const LISTED_END: usize = 2;
/// In a tensor's head: its dense table's first word.
pub(super) const DENSE_BASE: usize = 3;
/// In a tensor's head: its dense table's columns, 0 when it has none.
pub(super) const DENSE_COLS: usize = 4;
/// In a tensor's head: its dense table's rows minus one (a power of two minus one).
pub(super) const DENSE_ROWS: usize = 5;
/// In a tensor's head: the rank of the points its dense table holds (1 or 2).
pub(super) const DENSE_RANK: usize = 6;
/// In the mask of a tensor's slots in use: its dense table holds a live entry. Outside the slot
/// bits, so a tensor with any live entry is not `quiet`; code that walks the slots masks it
/// off ([`SLOT_MASK`]).
pub(super) const DENSE_LIVE: u32 = 1 << 31;
/// The slot bits of a tensor's mask.
pub(super) const SLOT_MASK: u32 = (1 << SLOTS) - 1;
/// Words per tensor.
pub(super) const TENSOR_WORDS: usize = TENSOR_HEAD + SLOTS * SLOT_WORDS;

/// In a shape word: the slot keeps row lists.
pub(super) const ROWS_KEPT: u32 = 1 << 16;
/// In a shape word: the slot holds entries of several shapes (the overflow slot).
pub(super) const MIXED: u32 = 1 << 17;
/// In a shape word: the slot keeps its lists.
pub(super) const LISTS_KEPT: u32 = 1 << 18;
/// In a shape word: the levels.
pub(super) const SHAPE_BITS: u32 = 0xFFFF;

/// Where the parts of the word array start, and the buckets' bit counts: worked out from the
/// layout once, at creation.
#[derive(Clone, Copy)]
pub(super) struct Bases {
    /// The row lists' heads.
    row: u32,
    /// Per tensor, its words.
    pub tensor: u32,
    /// Per handle, its region count.
    pub handle: u32,
    /// log2 of the home and row bucket counts.
    home_bits: u32,
    row_bits: u32,
}

impl Bases {
    pub fn of(l: &MapLayout) -> Bases {
        Bases {
            row: l.row_base() as u32,
            tensor: l.tensor_base() as u32,
            handle: l.handle_base() as u32,
            home_bits: l.home_buckets.trailing_zeros(),
            row_bits: l.row_buckets.trailing_zeros(),
        }
    }

    /// The write list of `key`'s home bucket (its read list is the next word). Multiplicative
    /// (Fibonacci) hashing of the tensor, the levels and `c0`: the top bits of a product spread
    /// consecutive cells evenly; `c1` is added to that, so the tiles of one row (`(i, j)`,
    /// `(i, j + 1)`, …), which programs tend to touch in order, have neighbouring buckets and
    /// share cache lines.
    #[inline]
    pub fn home_head(&self, tensor: u16, key: Key) -> u32 {
        let a = (key.c0 as u64)
            ^ ((tensor as u64) << 48)
            ^ ((key.s0 as u64) << 42)
            ^ ((key.s1 as u64) << 36);
        let h = a.wrapping_mul(GOLDEN);
        let h = (h.wrapping_add(h >> 29) >> (64 - self.home_bits)).wrapping_add(key.c1 as u64);
        2 * (h & ((1u64 << self.home_bits) - 1)) as u32
    }

    /// The bucket of cell `c0` of `tensor`'s slot `slot` in the row table: its write list's
    /// head, then its read list's, then the lengths of the two.
    #[inline]
    pub fn row_head(&self, tensor: u16, slot: u8, c0: i64) -> u32 {
        let a = (c0 as u64) ^ ((tensor as u64) << 48) ^ ((slot as u64) << 40);
        let h = a.wrapping_mul(GOLDEN) >> (64 - self.row_bits);
        self.row + ROW_WORDS as u32 * h as u32
    }

    /// `tensor`'s first word: the mask of its slots in use (then its slots).
    #[inline]
    pub fn tensor_at(&self, tensor: u16) -> usize {
        self.tensor as usize + TENSOR_WORDS * tensor as usize
    }

    /// The first word of `tensor`'s slot `slot`: its shape word (then its live entries and
    /// writes, then its write and read list heads).
    #[inline]
    pub fn slot_at(&self, tensor: u16, slot: u8) -> usize {
        self.tensor_at(tensor) + TENSOR_HEAD + SLOT_WORDS * slot as usize
    }
}

/// Empties the row table `words`: empty lists, of length 0.
pub(super) fn reset_rows(words: &mut [u32]) {
    for r in words.chunks_exact_mut(ROW_WORDS) {
        r.copy_from_slice(&[NIL, NIL, 0, 0]);
    }
}

/// Empties the tensor words of `words` (from `tensor_base`, `tensors` of them): no live entry,
/// no slot in use, empty shape lists. A tensor's dense table stays where it is (empty).
pub(super) fn reset_tensors(words: &mut [u32]) {
    for t in words.chunks_exact_mut(TENSOR_WORDS) {
        t[..DENSE_BASE].fill(0);
        for s in t[TENSOR_HEAD..].chunks_exact_mut(SLOT_WORDS) {
            s.fill(0);
            s[SLOT_LISTS..SLOT_LISTS + 2].fill(NIL);
        }
    }
}

/// The slot of `tensor` for a new entry of `shape`: the slot in use with that shape, else a
/// free one (given the shape), else the last, marked `MIXED`.
#[inline]
pub(super) fn slot_for(words: &mut [u32], b: Bases, tensor: u16, shape: u32) -> u8 {
    let at = b.tensor_at(tensor);
    let used = words[at] & SLOT_MASK;
    let mut m = used;
    while m != 0 {
        let k = m.trailing_zeros() as u8;
        m &= m - 1;
        let w = words[b.slot_at(tensor, k)];
        if w & (SHAPE_BITS | MIXED) == shape {
            return k;
        }
    }
    let free = !used & ((1 << SLOTS) - 1);
    if free != 0 {
        let k = free.trailing_zeros() as u8;
        words[b.slot_at(tensor, k)] = shape;
        words[at] |= 1 << k;
        return k;
    }
    let last = (SLOTS - 1) as u8;
    words[b.slot_at(tensor, last)] |= MIXED;
    last
}

/// The group of dimension-0 cell `c0` in a slot's counts.
#[inline(always)]
pub(super) fn row_group(c0: i64) -> usize {
    (c0 as u64 % ROW_GROUPS as u64) as usize
}

/// Puts entry `e` at the front of the list at word `head` on `level`.
#[inline]
pub(super) fn link(ents: &mut [Entry], words: &mut [u32], e: u32, level: usize, head: u32) {
    let first = core::mem::replace(&mut words[head as usize], e);
    let x = &mut ents[e as usize];
    x.prev[level] = NIL;
    x.next[level] = first;
    if first != NIL {
        ents[first as usize].prev[level] = e;
    }
}

/// Links entry `e` (its key, tensor, flags and slot set; the slot's counts not yet) onto its
/// home list at `home`, and its slot's list and row list when the slot keeps them; counts it
/// in its slot (which the caller has marked in use).
#[inline(always)]
pub(super) fn link_all(ents: &mut [Entry], words: &mut [u32], e: u32, home: u32, b: Bases) {
    let x = &ents[e as usize];
    let (tensor, slot_no, c0) = (x.tensor, x.slot, x.c0);
    let kind = (x.flags & WRITE == 0) as u32;
    let slot = b.slot_at(tensor, slot_no);
    words[slot + SLOT_LIVE] += 1;
    words[slot + SLOT_WRITES] += 1 - kind;
    words[slot + SLOT_ROWS + row_group(c0)] += 1;
    ents[e as usize].head_home = home + kind;
    link(ents, words, e, HOME, home + kind);
    let kept = words[slot];
    if kept & LISTS_KEPT != 0 {
        link_shape(ents, words, e, slot as u32, kind);
    }
    if kept & ROWS_KEPT != 0 {
        link_row(ents, words, e, b.row_head(tensor, slot_no, c0), kind);
    }
}

/// Puts entry `e` on the list `kind` (0 writes, 1 reads) of the slot at word `slot`.
#[inline]
pub(super) fn link_shape(ents: &mut [Entry], words: &mut [u32], e: u32, slot: u32, kind: u32) {
    ents[e as usize].flags |= ON_SHAPE;
    link(ents, words, e, SHAPE, slot + SLOT_LISTS as u32 + kind);
}

/// Puts entry `e` on the list `kind` (0 writes, 1 reads) of the row bucket at word `row`.
#[inline]
pub(super) fn link_row(ents: &mut [Entry], words: &mut [u32], e: u32, row: u32, kind: u32) {
    ents[e as usize].flags |= ON_ROW;
    link(ents, words, e, ROW, row + kind);
    words[(row + 2 + kind) as usize] += 1;
}

/// Takes entry `e` off every list it is on, and out of its slot's counts (a slot left empty
/// is free); an entry of a dense table, out of its cell and the table's count.
#[inline(always)]
pub(super) fn unlink(ents: &mut [Entry], words: &mut [u32], e: u32, b: Bases) {
    let x = &ents[e as usize];
    let (flags, prev, next, home) = (x.flags, x.prev, x.next, x.head_home);
    let (tensor, slot_no, c0) = (x.tensor, x.slot, x.c0);
    if flags & DENSE != 0 {
        super::dense::unlink(ents, words, e, b);
        return;
    }
    let kind = (flags & WRITE == 0) as u32;
    let at = b.tensor_at(tensor);
    let slot = b.slot_at(tensor, slot_no);
    words[slot + SLOT_LIVE] -= 1;
    words[slot + SLOT_WRITES] -= 1 - kind;
    words[slot + SLOT_ROWS + row_group(c0)] -= 1;
    if words[slot + SLOT_LIVE] == 0 {
        words[at] &= !(1 << slot_no);
    }
    off(ents, words, HOME, home, prev[HOME], next[HOME]);
    if flags & ON_SHAPE != 0 {
        let list = (slot + SLOT_LISTS) as u32 + kind;
        off(ents, words, SHAPE, list, prev[SHAPE], next[SHAPE]);
    }
    if flags & ON_ROW != 0 {
        let row = b.row_head(tensor, slot_no, c0);
        off(ents, words, ROW, row + kind, prev[ROW], next[ROW]);
        words[(row + 2 + kind) as usize] -= 1;
    }
    ents[e as usize].flags &= !(LIVE | ON_ROW | ON_SHAPE);
}

/// Takes the entry between `p` and `n` off the list at word `head` on `level`.
#[inline]
pub(super) fn off(ents: &mut [Entry], words: &mut [u32], level: usize, head: u32, p: u32, n: u32) {
    if p == NIL {
        words[head as usize] = n;
    } else {
        ents[p as usize].next[level] = n;
    }
    if n != NIL {
        ents[n as usize].prev[level] = p;
    }
}
