//! Recording a task (spec/runtime.md §4.1 steps 5–7): its lookups and insertions in the
//! AICPU's own TensorMap and the global one, and its registration on its predecessors.

use super::retire::release_guard;
use super::*;

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// §4.1 steps 5–7 for the placed task in slot `k`: looks it up and records it in its own
    /// map (local tensors, §3.5) and, if it touches shared tensors, under the global map's
    /// lock — which also retires what completed — in the global one; then registers it on its
    /// predecessors and releases its guard (or keeps it while it waits for predecessors
    /// beyond its nodes).
    pub(super) fn record<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        k: u32,
        env: &mut impl Env,
    ) -> Result<(), SchedError> {
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
            ..
        } = self;
        let t = interp.current_task();
        let u = uses.of(interp.program(), shares, t);
        let (uses, chain, global) = (u.regions, u.chain, u.global);
        // Local tensors first: only this AICPU's own tasks can be found there. A task that
        // only looks up tensors with no live entry there has nothing to do in it.
        let needed = u.local_needed(map);
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
        // The producers of its chained and carried tensors (§3.6–3.7): its own tasks, named
        // by their distance.
        let mut m = chain;
        while m != 0 {
            let d = m.trailing_zeros() as u64;
            m &= m - 1;
            let id = t.id.wrapping_sub(d);
            let (at, slot) = recent[(id % share::CHAIN_SPAN as u64) as usize];
            if at != id || d > t.id {
                return Err(SchedError::Corrupted(
                    "a structural producer is not among this AICPU's last tasks",
                ));
            }
            let q = Pred {
                aicpu: me,
                slot,
                id,
            };
            // A producer that completed imposes nothing (the scratch holds only tasks still
            // in the window); one that completes from now on is skipped at registration.
            let head = &sh.slots[(base + slot) as usize].waiters;
            if waitlist::completed(head, tag_of(id)) || preds[..found].contains(&q) {
                continue;
            }
            match preds.get_mut(found) {
                Some(p) => {
                    *p = q;
                    found += 1;
                }
                None => overflow = true,
            }
        }
        // Shared tensors under the lock — unless all this task does there is read tensors
        // whose writes are all recorded (the watermark says so) and have all retired.
        let needs_map = global
            && t.ios().iter().zip(uses).any(|(io, u)| match *u {
                (Use::Lookup, true) => sh
                    .writers
                    .get(io.tensor as usize)
                    .is_none_or(|w| w.load(Ordering::Acquire) != 0),
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
        env.recorded(self.me, self.interp.current_task());
        let s = &sh.slots[handle as usize];
        let mut used = 0usize;
        let mut rest = 0usize;
        for i in 0..found {
            let p = self.preds[i];
            if used >= NODES {
                self.preds[rest] = p;
                rest += 1;
                continue;
            }
            let target = &sh.slots[(p.aicpu * cap + p.slot) as usize];
            let node = used * (sh.n * cap) as usize + handle as usize;
            let nd = &sh.nodes[node];
            nd.succ_aicpu.store(self.me, Ordering::Relaxed);
            nd.succ_slot.store(k, Ordering::Relaxed);
            if waitlist::register(
                &target.waiters,
                tag_of(p.id),
                node as u32,
                &s.fanin,
                |first| nd.next.store(first, Ordering::Relaxed),
            ) {
                used += 1;
                self.counts.edges += 1;
                if p.aicpu != self.me {
                    self.counts.cross += 1;
                }
            }
        }
        if rest == 0 {
            release_guard(sh, self.me, self.me, k, env)?;
        } else {
            self.deferred = Some((k, rest));
        }
        Ok(())
    }
}
