//! Recording a task (spec/runtime.md §4.1 steps 5–7): its lookups and insertions in the
//! AICPU's own TensorMap and the global one, and its registration on its predecessors.

use super::join::Joins;
use super::once::{OnceTables, RowJoin, Writer};
use super::retire::ready_task;
use super::*;

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// §4.1 steps 5–7 for the placed task in slot `k`: looks it up and records it in its own
    /// map (local tensors, §3.5) and, if it touches shared tensors, under the global map's
    /// lock — which also retires what completed — in the global one; then registers it on its
    /// predecessors and takes back the holds it did not use (but for one while it waits for
    /// predecessors beyond its nodes). Returns false, having changed nothing, when the task
    /// needs a join and every join of this AICPU still waits for its writers (§4.7): it is
    /// recorded once one has completed.
    pub(super) fn record<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        k: u32,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        if env.plans() {
            // Which quick way may take it: with tables, its site's plan says (none before the
            // site's first task, which goes the long way and makes the plan). One call of each
            // way: a second call of `record_mapless`, inlined twice, cost LLaMA on one AICPU
            // 3 % more instructions.
            let site = self.interp.current_task().site;
            let plan = if self.once.any() {
                self.plans.get(site).map(|p| (p.any, p.all))
            } else {
                Some((false, true))
            };
            let quick = match plan {
                Some((false, _)) => self.record_mapless(sh, k, env)?,
                Some((true, true)) => self.record_planned(sh, k, env)?,
                _ => false,
            };
            if quick {
                return Ok(true);
            }
        }
        let cap = sh.cap;
        let me = self.me;
        let base = me * cap;
        let handle = base + k;
        let mut found = 0usize;
        let mut overflow = false;
        let Aicpu {
            interp,
            preds,
            retiring,
            free,
            shares,
            uses,
            recent,
            map,
            joins,
            once,
            counts,
            ..
        } = self;
        let t = interp.current_task();
        let site = t.site;
        let u = uses.of(interp.program(), shares, t);
        let (mut uses, chain, global) = (u.regions, u.chain, u.global);
        // Reads a join stands for (§4.7) are looked up in neither map below: they are
        // skipped in a copy of the uses.
        let joinable = u.joinable();
        let mut done = 0u32;
        // The common case first, out of `join_reads`' way: the task's one such read is the
        // one the join found or opened last stands for (a step's points come one after
        // another).
        let last = if joinable.is_power_of_two() {
            let r = joinable.trailing_zeros() as usize;
            joins.last_for(me, cap, &t.ios()[r]).map(|q| (r, q))
        } else {
            None
        };
        if let Some((r, q)) = last {
            done = 1 << r;
            counts.joined += 1;
            counts.joined_shared += u64::from(q.aicpu != me || joins.is_relay(cap, q));
            if !waitlist::completed(&sh.waitable(q.aicpu, q.slot)?.waiters, tag_of(q.id)) {
                *preds
                    .first_mut()
                    .ok_or(SchedError::Memory("predecessor scratch"))? = q;
                found = 1;
            }
        } else if joinable != 0 {
            let at = JoinAt {
                me,
                local: k,
                global: handle,
                regions: uses,
            };
            match join_reads(sh, at, t, joinable, map, joins, once, counts, preds, env)? {
                Some((joined, n)) => {
                    found = n;
                    done = joined;
                }
                None => return Ok(false),
            }
        }
        // Tensors written once with a table (§4.8): their writes filed and their reads
        // answered there, for a shared tensor without the lock; a write the table does not
        // take, and the reads of a tensor with such a write, also go to the tensor's map.
        if once.any() {
            for (r, io) in t.ios().iter().enumerate() {
                if done & 1 << r != 0 || !once.has(io.tensor) {
                    continue;
                }
                match uses[r] {
                    (Use::Skip, _) => {}
                    (Use::Lookup, _) if !io.writes() => {
                        // Each cell's writer is another task: one writes one point of a row.
                        let (n, over) = table_writers(sh, once, io, &mut preds[found..])?;
                        if over {
                            return Err(SchedError::Memory("predecessor scratch"));
                        }
                        found += n;
                        if !once.spilled(sh.once, io.tensor) {
                            done |= 1 << r;
                        }
                    }
                    (Use::Insert, _) if io.writes() => {
                        if once.write(sh.once, io, t.id, handle) {
                            done |= 1 << r;
                            counts.once_writes += 1;
                        } else {
                            counts.once_spills += 1;
                        }
                    }
                    _ => {
                        if io.writes() {
                            once.spill(sh.once, io.tensor);
                            counts.once_spills += 1;
                        }
                    }
                }
            }
        }
        if done != 0 {
            uses = joins.skip(uses, done);
        }
        // Local tensors first: only this AICPU's own tasks can be found there. A task that
        // only looks up tensors with no live entry there has nothing to do in it, nor one
        // whose local regions the tables took.
        let needed = if done == 0 {
            u.local_needed(map)
        } else {
            uses.iter().any(|&(u, g)| u != Use::Skip && !g) && u.local_needed(map)
        };
        if needed {
            map.add_some(
                t.id,
                k,
                t.ios(),
                |k, _| match uses[k] {
                    (how, false) => how,
                    _ => Use::Skip,
                },
                &mut |p| match preds.get_mut(found) {
                    Some(d) => {
                        *d = Pred {
                            aicpu: me,
                            slot: p.handle,
                            id: p.id,
                        };
                        found += 1;
                    }
                    None => overflow = true,
                },
            )?;
        }
        found = structural_preds(sh, me, recent, t.id, chain, preds, found)?;
        // Shared tensors under the lock — unless all this task does there is read tensors
        // whose writes are all recorded (the watermark says so) and have all retired.
        let needs_map = global
            && t.ios().iter().zip(uses).any(|(io, u)| match *u {
                (Use::Lookup, true) => !no_live_writer(sh, io.tensor),
                (_, g) => g,
            });
        if needs_map {
            let local = found;
            let recorded = sh.map.with_map(|gm| -> Result<u32, SchedError> {
                Self::flush(me, retiring, free, sh, gm)?;
                Ok(gm.add_some(
                    t.id,
                    handle,
                    t.ios(),
                    |k, _| match uses[k] {
                        (how, true) => how,
                        _ => Use::Skip,
                    },
                    &mut |p| {
                        let q = Pred {
                            aicpu: p.handle / cap,
                            slot: p.handle % cap,
                            id: p.id,
                        };
                        // A task of this AICPU may be found in both maps: register once.
                        if q.aicpu == me && preds[..local].contains(&q) {
                            return;
                        }
                        match preds.get_mut(found) {
                            Some(d) => {
                                *d = q;
                                found += 1;
                            }
                            None => overflow = true,
                        }
                    },
                )?)
            })?;
            if recorded > 0 {
                sh.slots[handle as usize].global.store(1, Ordering::Relaxed);
                for (io, u) in t.ios().iter().zip(uses) {
                    if io.writes() && matches!(u, (Use::Record | Use::Insert, true)) {
                        if let Some(w) = sh.writers.get(io.tensor as usize) {
                            w.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        if overflow {
            return Err(SchedError::Memory("predecessor scratch"));
        }
        // Its site's plan for the quick way (`record_planned`), if not known yet: from the
        // uses its site's tasks share (not those of a carried tensor's first or last
        // iteration).
        if self.once.any() && self.plans.get(site).is_none() {
            let t = self.interp.current_task();
            if let Some(r) = self.uses.remembered(t) {
                // One read a join may stand for is left to the joins; with more, the site's
                // tasks go the long way, where the joins are.
                let mut skipped = [(Use::Skip, false); crate::limits::MAX_TASK_IO];
                let regions = share::skipping(r.regions, joinable, &mut skipped);
                let mut plan = self.once.plan(t.ios(), regions);
                if joinable.is_power_of_two() {
                    plan = plan.with_join(joinable.trailing_zeros() as usize);
                } else {
                    plan.all &= joinable == 0;
                }
                self.plans.note(site, plan);
            }
        }
        self.register(sh, k, found, env)?;
        Ok(true)
    }

    /// [`Aicpu::record`] the quickest way, for a task whose site is remembered and needs
    /// neither map, nor a join ([`share::SiteUses::no_map_shared`]), nor a table (its caller
    /// checks that the site's plan answers no region when the launch has tables): every
    /// region is skipped, or only reads tensors quiet in this AICPU's map, or only looks up
    /// shared tensors whose `writers` count is 0. Its predecessors are then the producers
    /// the program names (§3.6–3.7) alone, which is all the long way would find for it: it
    /// registers on them. Returns false, having changed nothing, for any other task.
    #[inline]
    fn record_mapless<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        k: u32,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        let t = self.interp.current_task();
        // Shared tensors only looked up need no global map while none has a live writer
        // there: the long way's check (§4.1 step 5).
        let idle = |xs: &[u16]| xs.iter().all(|&x| no_live_writer(sh, x));
        let Some(chain) = self.uses.no_map_shared(t, self.map.inserted(), idle) else {
            return Ok(false);
        };
        let found = structural_preds(sh, self.me, &self.recent, t.id, chain, self.preds, 0)?;
        self.counts.mapless += 1;
        self.register(sh, k, found, env)?;
        Ok(true)
    }

    /// [`Aicpu::record`] the quick way, for a task of a site whose regions all go to the
    /// written-once tables (§4.8; its [`once::SitePlan`] is known, and says so) while they
    /// take it alone, but for one read a join may stand for: what the long way does for such
    /// a task — the join found or opened last when it stands for that read (§4.7), the
    /// writers of its other reads' cells (those still live), its chained producers, its
    /// writes filed — without asking which map each region goes to. Returns false, having
    /// changed nothing but the predecessor scratch, when it is not such a task, the last join
    /// does not stand for its read, or a table cannot take it (a write's cell, a read's
    /// spilled table): the long way then records it.
    #[inline]
    fn record_planned<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        k: u32,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        let t = self.interp.current_task();
        let Some(plan) = self.plans.get(t.site).filter(|p| p.all) else {
            return Ok(false);
        };
        // The uses its site's tasks share are its own (else it goes the long way).
        let Some(chain) = self.uses.remembered(t).map(|r| r.chain) else {
            return Ok(false);
        };
        let (me, cap) = (self.me, sh.cap);
        let handle = me * cap + k;
        let preds = &mut *self.preds;
        let mut found = 0usize;
        // Its read a join stands for: the join, first, as the long way puts it; or nothing,
        // for a region whose writers had all completed when it was last looked up.
        let (mut joined, mut finished) = (None, false);
        if let Some(r) = plan.join_read() {
            let Some(io) = t.ios().get(r) else {
                return Ok(false);
            };
            match self.joins.last_for(me, cap, io) {
                Some(q) => {
                    joined = Some(q);
                    if !waitlist::completed(&sh.waitable(q.aicpu, q.slot)?.waiters, tag_of(q.id)) {
                        *preds
                            .first_mut()
                            .ok_or(SchedError::Memory("predecessor scratch"))? = q;
                        found = 1;
                    }
                }
                None if self.joins.finished(io) => finished = true,
                None => return Ok(false),
            }
        }
        let added = self
            .once
            .add_planned(sh.once, plan, t.ios(), (t.id, handle), |w| {
                if let Some(q) = live_writer(sh, w)? {
                    *preds
                        .get_mut(found)
                        .ok_or(SchedError::Memory("predecessor scratch"))? = q;
                    found += 1;
                }
                Ok::<(), SchedError>(())
            })?;
        if !added {
            return Ok(false);
        }
        if let Some(q) = joined {
            self.counts.joined += 1;
            self.counts.joined_shared += u64::from(q.aicpu != me || self.joins.is_relay(cap, q));
        }
        self.counts.finished_reads += u64::from(finished);
        self.counts.once_writes += plan.writes();
        self.counts.planned += 1;
        found = structural_preds(sh, me, &self.recent, t.id, chain, preds, found)?;
        self.register(sh, k, found, env)?;
        Ok(true)
    }

    /// §4.1 steps 6–7 for the task in slot `k`, recorded, whose predecessors are the first
    /// `found` of the scratch: registers it on each (on the first [`NODES`]; it waits for the
    /// rest as [`Aicpu::deferred`]) and takes back the holds no predecessor took, which makes
    /// it ready when none did (or one hold once the rest complete).
    #[inline(always)]
    fn register<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        k: u32,
        found: usize,
        env: &mut impl Env,
    ) -> Result<(), SchedError> {
        let cap = sh.cap;
        let handle = self.me * cap + k;
        env.recorded(self.me, self.interp.current_task());
        let s = &sh.slots[handle as usize];
        // One hold for each predecessor it may register on; it takes back, after its last
        // registration, those of the predecessors it did not register on (completed, or
        // beyond its nodes), but for one that it keeps while it waits for the latter.
        waitlist::expect(&s.fanin, found as u32);
        let mut used = 0usize;
        let mut rest = 0usize;
        for i in 0..found {
            let p = self.preds[i];
            if used >= NODES {
                self.preds[rest] = p;
                rest += 1;
                continue;
            }
            let target = sh.waitable(p.aicpu, p.slot)?;
            let node = used * (sh.n * cap) as usize + handle as usize;
            let nd = &sh.nodes[node];
            nd.succ_aicpu.store(self.me, Ordering::Relaxed);
            nd.succ_slot.store(k, Ordering::Relaxed);
            if waitlist::register(&target.waiters, tag_of(p.id), node as u32, |first| {
                nd.next.store(first, Ordering::Relaxed)
            }) {
                used += 1;
                self.counts.edges += 1;
                if p.aicpu != self.me {
                    self.counts.cross += 1;
                }
            }
        }
        let unused = (found - used) as u32;
        if rest > 0 {
            // It keeps one hold until the rest have completed (`Aicpu::step`); the others
            // cannot be the last.
            if unused > 1 {
                waitlist::release_many(&s.fanin, unused - 1);
            }
            self.deferred = Some((k, rest));
        } else if waitlist::take_back(&s.fanin, unused, used as u32) {
            ready_task(sh, self.me, self.me, s, k, env)?;
        }
        Ok(())
    }
}

/// Whether shared tensor `x` has no live writer in the global map (its `writers` count is 0,
/// Acquire): a lookup of it there finds nothing (§4.1 step 5). A tensor past the counts may.
#[inline(always)]
fn no_live_writer<C, L>(sh: &Shared<'_, C, L>, x: u16) -> bool {
    sh.writers
        .get(x as usize)
        .is_some_and(|w| w.load(Ordering::Acquire) == 0)
}

/// The producers of a task's chained and carried tensors (§3.6–3.7), `chain` a bit for each
/// distance: tasks of its own AICPU `me` among its last ones (`recent`), put into `preds`
/// after the first `found` when live and not there yet. Returns how many `preds` holds then.
#[inline(always)]
fn structural_preds<C, L>(
    sh: &Shared<'_, C, L>,
    me: u32,
    recent: &[(u64, u32); share::CHAIN_SPAN as usize],
    id: u64,
    chain: u64,
    preds: &mut [Pred],
    mut found: usize,
) -> Result<usize, SchedError> {
    let mut m = chain;
    while m != 0 {
        let d = m.trailing_zeros() as u64;
        m &= m - 1;
        let p = id.wrapping_sub(d);
        let (at, slot) = recent[(p % share::CHAIN_SPAN as u64) as usize];
        if at != p || d > id {
            return Err(SchedError::Corrupted(
                "a structural producer is not among this AICPU's last tasks",
            ));
        }
        let q = Pred {
            aicpu: me,
            slot,
            id: p,
        };
        // A producer that completed imposes nothing (the scratch holds only tasks still in
        // the window); one that completes from now on is skipped at registration.
        let head = &sh.slots[(me * sh.cap + slot) as usize].waiters;
        if waitlist::completed(head, tag_of(p)) || preds[..found].contains(&q) {
            continue;
        }
        *preds
            .get_mut(found)
            .ok_or(SchedError::Memory("predecessor scratch"))? = q;
        found += 1;
    }
    Ok(found)
}

/// Where a task being recorded sits, for [`join_reads`]: its AICPU, its handles in the local
/// and the global map, and how its regions go to the maps.
struct JoinAt<'u> {
    me: u32,
    local: u32,
    global: u32,
    regions: &'u [(Use, bool)],
}

/// The reads of `t` a join stands for (§4.7), among the regions of `joinable` (reads of
/// stepped tensors only looked up, wide enough: `TaskUses::joinable`): those of a join
/// this AICPU holds or a row's join (through a relay it holds or opens now, when that join is
/// another AICPU's), and the first other one, whose writers it looks up alone (in its map:
/// the global one under the lock) to open a join for it, or to register on them one by one
/// when they are fewer than [`JOIN_MIN`]. Puts the predecessors (joins, or those few
/// writers) at the start of `preds`; returns the regions done, a bit each, and how many
/// predecessors it put. `None`, having changed nothing but the scratch, when a join is to be
/// opened and none is free.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn join_reads<C: AsRef<[Cell]>, L: MapLock, S: Storage>(
    sh: &Shared<'_, C, L>,
    at: JoinAt<'_>,
    t: &Task,
    joinable: u32,
    map: &mut TensorMap<S>,
    joins: &mut Joins,
    once: &OnceTables,
    counts: &mut Counts,
    preds: &mut [Pred],
    env: &mut impl Env,
) -> Result<Option<(u32, usize)>, SchedError> {
    let (me, cap) = (at.me, sh.cap);
    // The writers a join's lookup finds go to the scratch's tail.
    let (preds, spare) = preds.split_at_mut(sh.n as usize * cap as usize);
    let mut found = 0usize;
    let mut push = |q: Pred| -> Result<(), SchedError> {
        *preds
            .get_mut(found)
            .ok_or(SchedError::Memory("predecessor scratch"))? = q;
        found += 1;
        Ok(())
    };
    let (mut joined, mut hits, mut shared) = (0u32, 0, 0);
    let mut opening = None;
    let mut m = joinable;
    while m != 0 {
        let r = m.trailing_zeros() as usize;
        m &= m - 1;
        let io = &t.ios()[r];
        // The join it found or opened last, if it stands for the region; else what its
        // row's join word says (every join opened for a row is named there at once); else,
        // for a read with no word (not a whole row of a table), any of its own. A read with
        // a word never searches its joins: on the AICPUs that did not open the row's join,
        // the first task of a step misses the last one, and the search compares every join
        // held (all 32, once they have been used), some 1,000 instructions.
        let mut held = joins.last_for(me, cap, io);
        // A region whose writers had all completed when it was last looked up has none live.
        if held.is_none() && joins.finished(io) {
            joined |= 1 << r;
            counts.finished_reads += 1;
            continue;
        }
        if held.is_none() {
            held = match once.row_word(sh.once, io) {
                RowWord::Named(w) => {
                    let q = row_pred(sh, w)?;
                    if q.aicpu == me {
                        Some(q)
                    } else {
                        // Another AICPU's join: this AICPU's tasks that read the row register
                        // on a relay of it (§4.7), their own join: the one it opened already,
                        // or a new one when one is free.
                        match joins.relay_of(me, cap, q) {
                            Some(relay) => Some(relay),
                            None => match joins.free(sh, me).filter(|_| opening.is_none()) {
                                Some(j) => Some(joins.relay(sh, me, j, io, q, counts, env)?),
                                None => Some(q),
                            },
                        }
                    }
                }
                // No join stands for a whole row whose join is not published: the first
                // one opened for it is published at once.
                RowWord::Unpublished => None,
                RowWord::NoWord => joins.find(me, cap, io),
            };
        }
        if let Some(q) = held {
            joined |= 1 << r;
            hits += 1;
            shared += u64::from(q.aicpu != me || joins.is_relay(cap, q));
            if !waitlist::completed(&sh.waitable(q.aicpu, q.slot)?.waiters, tag_of(q.id)) {
                push(q)?;
            }
        } else if opening.is_none() {
            // Nothing to find while the tensor has no live entry (its map's counts, or for
            // the global map its live writers): the read is left to the maps, which skip it.
            // (A tensor with a written-once table may have writers there.)
            let live = once.has(io.tensor)
                || if at.regions[r].1 {
                    sh.writers
                        .get(io.tensor as usize)
                        .is_none_or(|w| w.load(Ordering::Acquire) != 0)
                } else {
                    !map.quiet(io.tensor)
                };
            if live {
                // Every join waits for writers that have not completed: the task waits for
                // one to, as for a window slot.
                let j = match joins.free(sh, me) {
                    Some(j) => j,
                    None => return Ok(None),
                };
                opening = Some((r, j));
            }
        }
    }
    counts.joined += hits;
    counts.joined_shared += shared;
    let Some((r, j)) = opening else {
        return Ok(Some((joined, found)));
    };
    // Its writers: in its tensor's written-once table, and in its map unless the tensor has a
    // table that took every write.
    let tensor = t.ios()[r].tensor;
    let (mut c, mut over) = (0, false);
    if once.has(tensor) {
        (c, over) = table_writers(sh, once, &t.ios()[r], spare)?;
    }
    if !over && (!once.has(tensor) || once.spilled(sh.once, tensor)) {
        let more = if at.regions[r].1 {
            sh.map.with_map(|gm| {
                lookup_alone(gm, t, at.global, r, &mut spare[c..], Handles::Global(cap))
            })?
        } else {
            lookup_alone(map, t, at.local, r, &mut spare[c..], Handles::Local(me))?
        };
        c += more.0;
        over = more.1;
    }
    if over {
        // More writers than a join has nodes: the region is left to the task's own lookup
        // (its table's, or its map's).
        return Ok(Some((joined, found)));
    }
    joined |= 1 << r;
    if c == 0 {
        // All its writers have completed, for good: the next reads of the region skip this.
        joins.note_finished(&t.ios()[r]);
    }
    if c < JOIN_MIN {
        for &q in &spare[..c] {
            push(q)?;
        }
    } else {
        let io = &t.ios()[r];
        // Another AICPU may have published the row's join while this one read the row's
        // writers (the AICPUs record a step's tasks together): that join stands for the same
        // writers, and registering on it spares opening a second one, whose registrations
        // meet the first one's on every writer's list.
        if let Some(mut q) = row_join_pred(sh, once, io)? {
            counts.joined += 1;
            if q.aicpu != me {
                counts.joined_shared += 1;
                q = joins.relay(sh, me, j, io, q, counts, env)?;
            }
            if !waitlist::completed(&sh.waitable(q.aicpu, q.slot)?.waiters, tag_of(q.id)) {
                push(q)?;
            }
            return Ok(Some((joined, found)));
        }
        // The other AICPUs' tasks reading the whole row use it too, as soon as its list is
        // open.
        let q = joins.open(sh, me, j, io, &spare[..c], counts, env, |q| {
            let row_join = RowJoin {
                aicpu: me,
                join: q.slot - cap,
                tag: tag_of(q.id),
            };
            once.publish_join(sh.once, io, row_join);
        })?;
        if !waitlist::completed(&sh.waitable(me, q.slot)?.waiters, tag_of(q.id)) {
            push(q)?;
        }
    }
    Ok(Some((joined, found)))
}

/// The join the row word of the read `io` names (§4.7, a row's join), as a predecessor, if
/// `io` reads a whole row of a table and the row's join is published.
#[inline]
fn row_join_pred<C, L>(
    sh: &Shared<'_, C, L>,
    once: &OnceTables,
    io: &crate::Io,
) -> Result<Option<Pred>, SchedError> {
    once.row_join(sh.once, io)
        .map(|j| row_pred(sh, j))
        .transpose()
}

/// The row's join `j` as a predecessor (slot `cap + j.join` of its AICPU, its tag as id).
#[inline]
fn row_pred<C, L>(sh: &Shared<'_, C, L>, j: RowJoin) -> Result<Pred, SchedError> {
    if j.aicpu >= sh.n || j.join as usize >= JOINS {
        return Err(SchedError::Corrupted("a row's join word"));
    }
    Ok(Pred {
        aicpu: j.aicpu,
        slot: sh.cap + j.join,
        id: j.tag as u64,
    })
}

/// Why a table read fails: no read of a tensor written once names several rows.
const UNANSWERED: &str = "a read of a tensor written once names other than one row";

/// What a map's handles are: `aicpu × cap + slot` in the global map (its `cap`), slots of one
/// AICPU in a local map (that AICPU).
#[derive(Clone, Copy)]
enum Handles {
    Global(u32),
    Local(u32),
}

/// Looks region `r` of `t` (whose handle in `map` is `handle`) up alone in `map` (a read, only
/// looked up: the map is not changed), its writers into `into` as predecessors (`handles`
/// says what a handle of `map` is). Returns how many it found and whether more did not
/// fit. Not inlined: its callers (a join's opening, rare) would each carry a copy of the
/// map's lookup.
#[inline(never)]
fn lookup_alone<M: Storage>(
    map: &mut TensorMap<M>,
    t: &Task,
    handle: u32,
    r: usize,
    into: &mut [Pred],
    handles: Handles,
) -> Result<(usize, bool), MapError> {
    let (mut c, mut over) = (0usize, false);
    map.add_some(
        t.id,
        handle,
        t.ios(),
        |k, _| if k == r { Use::Lookup } else { Use::Skip },
        &mut |p| match into.get_mut(c) {
            Some(d) => {
                let (aicpu, slot) = match handles {
                    Handles::Global(cap) => (p.handle / cap, p.handle % cap),
                    Handles::Local(me) => (me, p.handle),
                };
                *d = Pred {
                    aicpu,
                    slot,
                    id: p.id,
                };
                c += 1;
            }
            None => over = true,
        },
    )?;
    Ok((c, over))
}

/// The writers of the read `io` a written-once table holds that have not completed, into
/// `into` as predecessors. Returns how many it found and whether more did not fit.
fn table_writers<C, L>(
    sh: &Shared<'_, C, L>,
    once: &OnceTables,
    io: &crate::Io,
    into: &mut [Pred],
) -> Result<(usize, bool), SchedError> {
    let (mut c, mut over) = (0usize, false);
    once.read::<SchedError>(sh.once, io, |w| {
        let Some(q) = live_writer(sh, w)? else {
            return Ok(());
        };
        match into.get_mut(c) {
            Some(d) => {
                *d = q;
                c += 1;
            }
            None => over = true,
        }
        Ok(())
    })?
    .then_some(())
    .ok_or(SchedError::Corrupted(UNANSWERED))?;
    Ok((c, over))
}

/// The writer `w` a written-once table holds as a predecessor, unless it has completed (its
/// list is closed, or its slot holds another task).
#[inline(always)]
fn live_writer<C, L>(sh: &Shared<'_, C, L>, w: Writer) -> Result<Option<Pred>, SchedError> {
    let q = Pred {
        aicpu: w.handle / sh.cap,
        slot: w.handle % sh.cap,
        id: w.id,
    };
    let head = &sh.waitable(q.aicpu, q.slot)?.waiters;
    Ok((!waitlist::completed(head, tag_of(q.id))).then_some(q))
}
