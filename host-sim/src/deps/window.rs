//! The single-instance measurement of generation plus dependency building
//! ([`InOrderWindow`]): one AICPU's scheduler, its window completing in order.

use ptovm_vm::sync::{AtomicU64, Ordering};
use ptovm_vm::tmap::{self, Use};

use super::{heap_map, DepMode, HeapMap};

mod joins;

/// The distance of a structural producer is below this ([`ptovm_vm::share::CHAIN_SPAN`]).
const SPAN: u64 = ptovm_vm::share::CHAIN_SPAN as u64;

/// Whether `id` is among the few predecessors `found` so far: a plain scan (a task has a
/// handful; `contains`' unrolled loop costs more to set up than it saves).
#[inline(always)]
fn seen(found: &[u64], id: u64) -> bool {
    let mut i = found.len();
    while i > 0 {
        i -= 1;
        if found[i] == id {
            return true;
        }
    }
    false
}

/// The number of bits set in `m`, one at a time: the structural producers' masks have one or
/// two, and a baseline x86-64 build has no `popcnt` (its software count is longer).
#[inline]
fn bits(mut m: u64) -> u64 {
    let mut n = 0;
    while m != 0 {
        n += 1;
        m &= m - 1;
    }
    n
}

/// Generation plus dependency building as one AICPU does it, with its window completing in
/// order (for benchmarks and profiling): task `t` takes handle `t mod window` after task
/// `t − window` retires, and every edge to a task still in the window is found (the others'
/// sources have completed). A [`ptovm_vm::Sink`]; the map is sized for the window.
pub struct InOrderWindow {
    /// The map.
    pub map: HeapMap,
    /// Window size (the map's handle count).
    pub window: u64,
    /// `window − 1` for a window that is a power of two of at least [`SPAN`], else 0.
    mask: u64,
    /// Edges found so far: the predecessors still in the window, each once (a join counts
    /// as its writers there).
    pub edges: u64,
    /// Of `edges`, those the joins stood for, and what was registered for them instead: a
    /// task on a join once, a join on each of its writers once ([`InOrderWindow::registrations`]).
    joined_edges: u64,
    join_registrations: u64,
    /// Why the map refused a task, if it did (generation then pauses there).
    pub error: Option<tmap::MapError>,
    /// The tensor classes (spec/runtime.md §3.5) the scheduler would use: read-only tensors
    /// are not recorded, reads no later write follows only looked up, chained tensors (§3.6)
    /// not at all, carried ones (§3.7) at their loop's ends only. Empty: every region is
    /// recorded. Set by [`InOrderWindow::classify`].
    pub shares: Vec<ptovm_vm::share::Sharing>,
    /// What the program's structure says about each site (`share::chain`), by instruction
    /// index.
    chains: Vec<ptovm_vm::share::Chain>,
    /// Each site's uses, as the scheduler remembers them.
    uses: ptovm_vm::share::SiteUses,
    /// The ids the joins, the tables and the map found for the task being added, where one
    /// may be found twice (to count each predecessor once).
    found: Vec<u64>,
    /// The written-once tables (spec/runtime.md §4.8) one AICPU's scheduler would give the
    /// program, and their words: the writers of tensors written once, outside the map.
    once: ptovm_vm::sched::OnceTables,
    once_words: Vec<AtomicU64>,
    /// What the tables do for each site's regions, by instruction index: worked out at the
    /// site's first task that goes the long way (`None` before).
    plans: Vec<Option<ptovm_vm::sched::SitePlan>>,
    /// The joins one AICPU's scheduler would keep (spec/runtime.md §4.7).
    joins: joins::WindowJoins,
}

impl InOrderWindow {
    /// An empty window of `layout.handles` tasks, or `None` if the host cannot allocate it.
    pub fn new(layout: tmap::MapLayout, mode: DepMode) -> Option<InOrderWindow> {
        Some(InOrderWindow {
            map: heap_map(layout, mode)?,
            window: layout.handles as u64,
            mask: if layout.handles.is_power_of_two() && layout.handles as u64 >= SPAN {
                layout.handles as u64 - 1
            } else {
                0
            },
            edges: 0,
            joined_edges: 0,
            join_registrations: 0,
            error: None,
            shares: Vec::new(),
            chains: Vec::new(),
            uses: Default::default(),
            found: Vec::new(),
            once: Default::default(),
            once_words: Vec::new(),
            plans: Vec::new(),
            joins: Default::default(),
        })
    }

    /// Empties the window for another run of the same program: the map, the tables, the
    /// joins, the counts and the error.
    pub fn reset(&mut self) {
        self.map.reset();
        for w in &self.once_words {
            w.store(0, Ordering::Relaxed);
        }
        self.joins.reset();
        self.edges = 0;
        self.joined_edges = 0;
        self.join_registrations = 0;
        self.error = None;
    }

    /// The registrations one AICPU makes for the edges found so far: one an edge, but for
    /// those joins stood for (spec/runtime.md §4.7), where a task registers on the join once
    /// and the join on each of its writers once.
    pub fn registrations(&self) -> u64 {
        self.edges - self.joined_edges + self.join_registrations
    }

    /// Records from now on as the scheduler of one AICPU records for `interp`'s program and
    /// parameters (spec/runtime.md §3.5–3.7): the tensor classes, and what the program's
    /// structure says about each site.
    pub fn classify(
        &mut self,
        interp: &ptovm_vm::Interpreter<'_, '_>,
    ) -> Result<(), ptovm_vm::share::ShareError> {
        let v = interp.program();
        self.shares = vec![Default::default(); v.tensors().len()];
        ptovm_vm::share::analyze(interp, &mut self.shares)?;
        let mut tables = Vec::new();
        for (x, (s, t)) in self.shares.iter().zip(v.tensors()).enumerate() {
            let b = ptovm_vm::desc::Binding::declared(t, interp.params());
            if let Some((rank, cols)) = ptovm_vm::share::dense_table(s, &b, interp.aicpus()) {
                self.map.set_dense(x as u16, rank, cols);
            }
            if let Some(o) = ptovm_vm::share::once_shape(v, s, x as u16, &b, interp.aicpus()) {
                tables.push((x as u16, o));
            }
        }
        // As one AICPU's scheduler lays them out (`sched::once_len` for one window).
        let words = ptovm_vm::sched::once_len(1, self.window as usize);
        self.once =
            ptovm_vm::sched::OnceTables::lay_out(tables.into_iter(), words, self.window as usize);
        self.once_words = (0..if self.once.any() { words } else { 0 })
            .map(|_| AtomicU64::new(0))
            .collect();
        self.uses = Default::default();
        self.plans = vec![None; v.code().len()];
        self.chains = (0..v.code().len() as u32)
            .map(|site| ptovm_vm::share::chain(v, &self.shares, site))
            .collect();
        Ok(())
    }
}

impl ptovm_vm::Sink for InOrderWindow {
    #[inline(always)]
    fn task(&mut self, t: &ptovm_vm::Task) -> bool {
        if self.quick(t) {
            return true;
        }
        self.task_slow(t)
    }
}

impl InOrderWindow {
    /// Adds `t` if it is the common case — its handle's previous task left no entries, its
    /// site's uses are remembered and it needs no map, it is past its window's first
    /// [`SPAN`] tasks — and says whether it did (nothing changed if not).
    #[inline]
    fn quick(&mut self, t: &ptovm_vm::Task) -> bool {
        let (id, mask) = (t.id, self.mask);
        // (`mask` is 0 for a window that is not a power of two, or below `SPAN`.)
        if id < SPAN || mask == 0 || !self.map.idle((id & mask) as u32) {
            return false;
        }
        if self.once.any() {
            return self.quick_with_tables(t);
        }
        self.no_map(t)
    }

    /// [`InOrderWindow::quick`]'s end: `t` if neither the map nor the tables have anything to
    /// do for it.
    #[inline(always)]
    fn no_map(&mut self, t: &ptovm_vm::Task) -> bool {
        let Some(chain) = self.uses.no_map(t, self.map.inserted()) else {
            return false;
        };
        // Every structural producer is still in the window (`d < SPAN <= window`, `d <= t`):
        // counting the mask's bits counts them.
        self.edges += bits(chain);
        true
    }

    /// [`InOrderWindow::quick`] in a program with written-once tables (out of line: the
    /// others' quick path stays short). A site whose regions the tables answer skips the map;
    /// one with some of them goes the long way: the map's quiet tensors say nothing of what
    /// the tables hold.
    #[inline(never)]
    fn quick_with_tables(&mut self, t: &ptovm_vm::Task) -> bool {
        match self.plans.get(t.site as usize) {
            // A site whose regions are all skipped has nothing for the tables either.
            Some(Some(p)) if !p.any => self.no_map(t),
            Some(Some(p)) if p.all => self.tables_only(t),
            _ => false,
        }
    }

    /// A task of a site whose every region is skipped or answered by a table (its plan) but
    /// for one read a join may stand for, whose handle's previous task left nothing to
    /// retire: as [`InOrderWindow::add`] adds it when the join found or opened last stands
    /// for that read and the tables take the rest alone
    /// ([`ptovm_vm::sched::OnceTables::add_planned`]). Says whether it added `t` (nothing
    /// changed if not).
    #[inline(always)]
    fn tables_only(&mut self, t: &ptovm_vm::Task) -> bool {
        // (Borrowed in place, not copied: the fields below are others.)
        let Some(Some(plan)) = self.plans.get(t.site as usize) else {
            return false;
        };
        let Some(chain) = self.uses.remembered(t).map(|r| r.chain) else {
            return false;
        };
        let (once, words, window) = (&self.once, &self.once_words[..], self.window);
        let found = &mut self.found;
        found.clear();
        // Its read a join stands for, as the scheduler's quick way does it
        // (`Aicpu::record_planned`): with the join found or opened last, when that one
        // stands for it; its writers first, as the long way puts them.
        let others = chain != 0 || plan.reads() != 0;
        let mut joined = None;
        if let Some(r) = plan.join_read() {
            let Some(j) = t
                .ios()
                .get(r)
                .and_then(|io| self.joins.last_read(io, (t.id, window), others, found))
            else {
                return false;
            };
            joined = Some(j);
        }
        // A writer found twice (by two reads, or by the join and a read) counts once.
        let h = (t.id & self.mask) as u32;
        let added = once.add_planned(words, plan, t.ios(), (t.id, h), |w| {
            if t.id.wrapping_sub(w.id) < window && !seen(found, w.id) {
                found.push(w.id);
            }
            Ok::<(), core::convert::Infallible>(())
        });
        if added != Ok(true) {
            // The long way spills, or reports, what the tables cannot take.
            return false;
        }
        // `found` holds each predecessor once, but for the join's writers when nothing else
        // could find them again (counted, not pushed).
        let mut edges = found.len() as u64 + Self::unfound(chain, t.id, found);
        if let Some(j) = joined {
            if !others {
                edges += j.edges;
            }
            self.joined_edges += j.edges;
            self.join_registrations += j.registrations;
        }
        self.edges += edges;
        true
    }

    /// [`InOrderWindow::add`], for the tasks [`InOrderWindow::quick`] leaves.
    #[inline(never)]
    fn task_slow(&mut self, t: &ptovm_vm::Task) -> bool {
        match self.add(t) {
            Ok(()) => {
                if self.once.any() {
                    self.note_site(t);
                }
                true
            }
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    /// Works out the plan of `t`'s site, if not yet, from its remembered uses.
    fn note_site(&mut self, t: &ptovm_vm::Task) {
        let Some(slot) = self.plans.get_mut(t.site as usize) else {
            return;
        };
        if slot.is_some() {
            return;
        }
        if let Some(r) = self.uses.remembered(t) {
            // As the scheduler plans a site (`Aicpu::record`): one read a join may stand for
            // is left to the joins; with more, the site's tasks go the long way, where the
            // joins are.
            let joinable = self.uses.joinable_at(t.site);
            let mut skipped = [(Use::Skip, false); ptovm_vm::limits::MAX_TASK_IO];
            let regions = ptovm_vm::share::skipping(r.regions, joinable, &mut skipped);
            let mut plan = self.once.plan(t.ios(), regions);
            if joinable.is_power_of_two() {
                plan = plan.with_join(joinable.trailing_zeros() as usize);
            } else {
                plan.all &= joinable == 0;
            }
            *slot = Some(plan);
        }
    }
}

impl InOrderWindow {
    /// Retires the task whose handle `t` takes and adds `t`.
    #[inline]
    fn add(&mut self, t: &ptovm_vm::Task) -> Result<(), tmap::MapError> {
        // `t mod window`, without a division for a window that is a power of two.
        let h = if self.mask != 0 {
            t.id & self.mask
        } else {
            t.id % self.window
        } as u32;
        if t.id >= self.window {
            self.map.retire(h)?;
        }
        let edges = &mut self.edges;
        if self.shares.is_empty() {
            return Self::add_all(&mut self.map, t, h, edges);
        }
        let chains = &self.chains;
        let u = self.uses.of_with(&self.shares, t, |site| {
            chains.get(site as usize).copied().unwrap_or_default()
        });
        // The structural producers still in the window: task `t − d` retires when task
        // `t − d + window` arrives, so those at distance `d < window` (and `d <= t`). The
        // mask names them (distances are below `SPAN`: past the first `SPAN` tasks of a
        // window of `SPAN` or more, all of them); counting its bits counts them.
        let mut chain = u.chain;
        if t.id < SPAN || self.window < SPAN {
            chain &= Self::in_window(t.id, self.window);
        }
        self.found.clear();
        // Reads a join stands for (§4.7) are done there, and skipped below.
        let mut regions = u.regions;
        let mut skipping;
        let joinable = u.joinable();
        if joinable != 0 {
            let lookups = regions
                .iter()
                .filter(|(u, _)| matches!(u, Use::Lookup | Use::Find | Use::Record))
                .count();
            let at = joins::Lookup {
                map: &mut self.map,
                handle: h,
                once: &self.once,
                words: &self.once_words,
                window: self.window,
            };
            let others = chain != 0 || lookups > 1;
            let j = self.joins.reads(t, joinable, at, others, &mut self.found)?;
            self.edges += j.edges;
            self.joined_edges += j.edges;
            self.join_registrations += j.registrations;
            if j.done != 0 {
                skipping = [(Use::Skip, false); ptovm_vm::limits::MAX_TASK_IO];
                regions = ptovm_vm::share::skipping(regions, j.done, &mut skipping);
            }
        }
        // One instance: every region is local (the flag says which map, not whether; a
        // tensor past the classes goes to the "global" one). As in the scheduler, a task that
        // only looks up tensors with no live entry skips the map.
        let map = &mut self.map;
        if self.once.any() {
            return Self::with_tables(
                map,
                (&self.once, &self.once_words, self.window),
                t,
                h,
                regions,
                chain,
                &mut self.edges,
                &mut self.found,
            );
        }
        if u.global || u.local_needed(map) {
            return Self::look_up(map, t, h, regions, chain, &mut self.edges, &mut self.found);
        }
        self.edges += bits(chain);
        Ok(())
    }

    /// [`InOrderWindow::look_up`] for a program with written-once tables (`once`, its words
    /// and the window): the regions of their tensors filed and answered there, as the
    /// scheduler does (spec/runtime.md §4.8), a writer counted while it is in the window; the
    /// rest, and the reads of a tensor whose table spilled, in the map. Each predecessor
    /// counts once.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn with_tables(
        map: &mut HeapMap,
        (once, words, window): (&ptovm_vm::sched::OnceTables, &[AtomicU64], u64),
        t: &ptovm_vm::Task,
        h: u32,
        regions: &[(tmap::Use, bool)],
        chain: u64,
        edges: &mut u64,
        found: &mut Vec<u64>,
    ) -> Result<(), tmap::MapError> {
        use tmap::Use;
        // Predecessors the joins found come first in `found`.
        let start = found.len();
        let mut uses = [(Use::Skip, false); ptovm_vm::limits::MAX_TASK_IO];
        uses[..regions.len()].copy_from_slice(regions);
        let mut rest = false;
        for (r, io) in t.ios().iter().enumerate() {
            if !once.has(io.tensor) {
                rest |= uses[r].0 != Use::Skip;
                continue;
            }
            match uses[r].0 {
                Use::Skip => {}
                Use::Lookup if !io.writes() => {
                    // A writer found twice (by two reads, or by a join and a read) counts
                    // once.
                    let answered = once.read(words, io, |w| {
                        if t.id.wrapping_sub(w.id) < window && !seen(found, w.id) {
                            found.push(w.id);
                        }
                        Ok::<(), ()>(())
                    });
                    if answered != Ok(true) {
                        return Err(tmap::MapError::Unanswerable { tensor: io.tensor });
                    }
                    if once.spilled(words, io.tensor) {
                        rest = true;
                    } else {
                        uses[r].0 = Use::Skip;
                    }
                }
                Use::Insert if io.writes() => {
                    if once.write(words, io, t.id, h) {
                        uses[r].0 = Use::Skip;
                    } else {
                        rest = true;
                    }
                }
                _ => {
                    if io.writes() {
                        once.spill(words, io.tensor);
                    }
                    rest = true;
                }
            }
        }
        *edges += (found.len() - start) as u64;
        if rest {
            let from_tables = found.len();
            map.add_some(t.id, h, t.ios(), |k, _| uses[k].0, &mut |p| {
                if !found[..from_tables].contains(&p.id) {
                    *edges += 1;
                    found.push(p.id);
                }
            })?;
        }
        *edges += Self::unfound(chain, t.id, found);
        Ok(())
    }

    /// How many of the structural producers `chain` (distances from task `id`) are not among
    /// the predecessors `found`: each counts once.
    #[inline]
    fn unfound(chain: u64, id: u64, found: &[u64]) -> u64 {
        let mut m = chain;
        let mut n = 0;
        while m != 0 {
            let d = m.trailing_zeros() as u64;
            m &= m - 1;
            n += u64::from(!found.contains(&(id - d)));
        }
        n
    }

    /// The distances `d` with `d < window` and `d <= id`, as a mask.
    #[inline]
    fn in_window(id: u64, window: u64) -> u64 {
        let n = window.min(id + 1);
        if n >= 64 {
            u64::MAX
        } else {
            (1 << n) - 1
        }
    }

    /// [`InOrderWindow::add`] without tensor classes: every region recorded.
    #[inline(never)]
    fn add_all(
        map: &mut HeapMap,
        t: &ptovm_vm::Task,
        h: u32,
        edges: &mut u64,
    ) -> Result<(), tmap::MapError> {
        map.add(t.id, h, t.ios(), &mut |_| *edges += 1)
    }

    /// The map's part of [`InOrderWindow::add`] (kept out of line: most tasks of a program
    /// with chained and carried tensors do not come here), and the structural producers
    /// `chain` that the map has not found.
    #[inline(never)]
    fn look_up(
        map: &mut HeapMap,
        t: &ptovm_vm::Task,
        h: u32,
        uses: &[(tmap::Use, bool)],
        chain: u64,
        edges: &mut u64,
        found: &mut Vec<u64>,
    ) -> Result<(), tmap::MapError> {
        // Predecessors the joins found come first in `found` (when other lookups may meet
        // them again).
        let from_joins = found.len();
        map.add_some(t.id, h, t.ios(), |k, _| uses[k].0, &mut |p| {
            if from_joins == 0 || !found[..from_joins].contains(&p.id) {
                *edges += 1;
                if chain != 0 {
                    found.push(p.id);
                }
            }
        })?;
        *edges += Self::unfound(chain, t.id, found);
        Ok(())
    }
}
