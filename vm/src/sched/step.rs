//! An AICPU's scheduler: building it over its buffers, and its loop (spec/runtime.md §4.3):
//! completions, dispatch, deferred registrations, generation.

use super::once::once_tables;
use super::retire::release_task;
use super::*;

/// At most this many times a round takes the completions of the cores its thread ran and
/// dispatches again ([`Env::run_cores`]) before it generates.
const HOPS_A_ROUND: u32 = 64;

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// The scheduler of AICPU `me` over `interp` (which generates this AICPU's tasks), its
    /// buffers `local`, for a shared region with `n` AICPUs of `cap` slots and the given cores.
    pub fn new<C: AsRef<[Cell]>, L: MapLock>(
        me: u32,
        interp: Interpreter<'a, 'p>,
        mut local: Local<'m, S>,
        sh: &Shared<'_, C, L>,
    ) -> Result<Aicpu<'a, 'p, 'm, S>, SchedError> {
        let (n, cap) = (sh.n as usize, sh.cap as usize);
        let need = |ok: bool, what| {
            if ok {
                Ok(())
            } else {
                Err(SchedError::Memory(what))
            }
        };
        need(me < sh.n, "AICPU index past the shared region's count")?;
        need(cap > 0, "no window slots")?;
        // Handles (`a * cap + s`) and waiter node numbers are u32, below the list markers.
        need(
            n.checked_mul(cap)
                .and_then(|h| h.checked_mul(NODES))
                .and_then(|x| x.checked_add(n * JOINS * JOIN_NODES))
                .is_some_and(|x| x < waitlist::CLOSED as usize),
            "too many slots for 32-bit node numbers",
        )?;
        need(sh.published.len() >= n, "watermarks")?;
        need(sh.waiting_for.len() >= n, "waiting_for")?;
        need(sh.slots.len() >= n * cap, "slots")?;
        // No descriptor memory (0 words a slot): descriptors are not kept.
        need(
            sh.desc_words == 0 || sh.desc_words as usize >= desc::slot_words(interp.program()),
            "descriptor words per slot",
        )?;
        need(
            sh.descs.len() >= n * cap * sh.desc_words as usize,
            "task descriptors",
        )?;
        need(sh.nodes.len() >= nodes_len(n, cap), "waiter nodes")?;
        need(sh.joins.len() >= joins_len(n), "joins")?;
        need(sh.ready.len() >= 2 * n, "ready queues")?;
        need(sh.passed.len() >= n, "passed completions")?;
        need(
            sh.ready
                .iter()
                .chain(sh.passed)
                .all(|r| r.capacity() >= cap),
            "queue capacity below the window",
        )?;
        need(sh.core_aicpu.len() >= sh.cores.len(), "core owners")?;
        need(
            sh.writers.len() >= interp.program().tensors().len(),
            "live-writer counts",
        )?;
        need(local.free.len() >= cap, "free slots")?;
        need(local.retiring.len() >= cap, "retiring slots")?;
        need(local.unreleased.len() >= cap, "unreleased slots")?;
        need(local.held.len() >= cap, "held ready tasks")?;
        need(
            local.tensors.len() >= interp.program().tensors().len(),
            "tensor bindings",
        )?;
        need(
            local.preds.len() >= preds_len(n, cap),
            "predecessor scratch",
        )?;
        need(
            sh.barriers.len() >= interp.program().readbacks().len(),
            "barrier words",
        )?;
        need(interp.aicpus() == sh.n, "the interpreter's AICPU count")?;
        let fits = |l: MapLayout, handles: usize| {
            let v = interp.program();
            l.handles as usize >= handles
                && l.max_task_io >= v.max_task_io()
                && l.max_stored_io >= v.max_stored_io()
                && l.tensors as usize >= v.tensors().len()
        };
        need(
            fits(local.map.layout(), cap),
            "the local TensorMap is smaller than the window and the program",
        )?;
        need(
            sh.map.with_map(|m| fits(m.layout(), n * cap)),
            "the global TensorMap is smaller than the windows and the program",
        )?;
        need(
            sh.map.with_map(|m| m.mode()) == local.map.mode(),
            "the local TensorMap's match mode differs from the global one's",
        )?;
        share::analyze(&interp, local.shares).map_err(|e| match e {
            // The analysis counts statements' tasks: an error there is the program's, the one
            // its walk would meet.
            ShareError::Run(e) => SchedError::Run(e),
            other => SchedError::Share(other),
        })?;
        let stepped_shared = need::stepped_shared(local.shares);
        let program = *interp.program();
        let ntensors = program.tensors().len();
        if !local.bound.is_empty() && local.bound.len() != ntensors {
            return Err(BindError::Count {
                expected: ntensors,
                given: local.bound.len(),
            }
            .into());
        }
        for (x, (b, t)) in local.tensors.iter_mut().zip(program.tensors()).enumerate() {
            *b = Binding::declared(t, interp.params());
            if let Some(arg) = local.bound.get(x) {
                *b = b.bind(x as u16, arg)?;
            }
        }
        // Stepped tensors' points in dense tables (§3.3), in the map of their class. Every
        // AICPU gives the global map's the same, before its first record: the first one to get
        // there makes them, the others find them made.
        for (x, (s, b)) in local
            .shares
            .iter()
            .zip(local.tensors.iter())
            .take(ntensors)
            .enumerate()
        {
            let Some((rank, cols)) = share::dense_table(s, b, sh.n) else {
                continue;
            };
            match s.class {
                share::Class::Local => {
                    local.map.set_dense(x as u16, rank, cols);
                }
                _ => {
                    sh.map.with_map(|m| m.set_dense(x as u16, rank, cols));
                }
            }
        }
        let once = once_tables(&program, local.shares, local.tensors, sh);
        need(
            local.cores.iter().all(|&c| (c as usize) < sh.cores.len()),
            "core index past the handshake slots",
        )?;
        let mut free = Stack::new(local.free);
        for s in (0..cap as u32).rev() {
            free.push(s)?;
        }
        // Shared cores: every core of the launch, cube cores first, then vector cores.
        let alloc = if sh.free_cores.is_empty() {
            CoreAlloc::Partition
        } else {
            CoreAlloc::Shared
        };
        let is_cube =
            |c: u32| sh.cores[c as usize].core_type.load(Ordering::Relaxed) == handshake::CUBE;
        let total = sh.cores.len() as u32;
        let launch_cube = (0..total).take_while(|&c| is_cube(c)).count() as u32;
        let pools = [(0, launch_cube), (launch_cube, total)];
        let pool_range = pools.map(|(lo, hi)| lo..hi);
        let home = pools.map(|(lo, hi)| cores::home(lo..hi, me, sh.n));
        let home_cores = home.clone().map(cores::Span::new);
        if alloc == CoreAlloc::Shared {
            need(
                sh.free_cores.len() >= cores::words_for(total as usize),
                "free-core bitmap",
            )?;
            need(
                sh.core_waiters.len() >= CORE_WAITER_WORDS,
                "core waiter words",
            )?;
            need(
                (launch_cube..total).all(|c| !is_cube(c)),
                "shared cores must number the cube cores first",
            )?;
            need(
                launch_cube > 0 && launch_cube < total,
                "the launch needs a cube core and a vector core",
            )?;
            need(local.busy.len() >= total as usize, "busy cores")?;
        } else {
            need(local.busy.len() >= local.cores.len(), "busy cores")?;
        }
        // Under a partition: cube cores first, then vector cores, each group a stack of the
        // free ones (a partition in place: no sort, whose code the device would carry).
        let cores = if alloc == CoreAlloc::Shared {
            &mut local.cores[..0]
        } else {
            local.cores
        };
        let mut ncube = 0;
        for i in 0..cores.len() {
            if is_cube(cores[i]) {
                cores.swap(i, ncube);
                ncube += 1;
            }
        }
        let free_vector = cores.len() - ncube;
        need(
            alloc == CoreAlloc::Shared || (ncube > 0 && free_vector > 0),
            "an AICPU needs a cube core and a vector core",
        )?;
        // Every kernel's scratch fits the arena (so a task waiting for workspace only waits
        // for running tasks), and every arena's offsets fit the descriptors' 32 bits.
        let arena = sh.workspace.arena;
        let all_fit = u64::from(arena) * u64::from(sh.n) <= u64::from(u32::MAX);
        for (k, entry) in program.kernels().iter().enumerate() {
            let bytes = u32::from(entry.workspace.get()) * crate::format::WORKSPACE_UNIT;
            if bytes > arena || (bytes > 0 && !all_fit) {
                return Err(SchedError::Workspace {
                    kernel: k as u32,
                    need: bytes,
                    arena,
                    aicpus: sh.n,
                });
            }
        }
        // Core limits (§4.6): a unit counter per kernel, and the waiter word.
        let limited = program.kernels().iter().any(|k| k.core_limit.get() != 0);
        let kernel_limits = if limited { program.kernels() } else { &[] };
        if limited {
            need(
                sh.kernel_running.len() >= kernel_limits.len(),
                "kernel running counts",
            )?;
            need(
                sh.core_waiters.len() >= CORE_WAITER_WORDS,
                "core waiter words",
            )?;
        }
        Ok(Aicpu {
            me,
            interp,
            staged: false,
            pending: None,
            done: false,
            own_done: false,
            finished: false,
            in_window: 0,
            free,
            retiring: Stack::new(local.retiring),
            unreleased: Stack::new(local.unreleased),
            busy: Stack::new(local.busy),
            alloc,
            pool_range,
            home_cores,
            home,
            home_running: [0; 2],
            waiting_core: [false; 2],
            hand: claim::Hand::EMPTY,
            idle: [true; 2],
            cores,
            ncube,
            free_cube: ncube,
            free_vector,
            preds: local.preds,
            shares: local.shares,
            tensors: local.tensors,
            uses: SiteUses::default(),
            recent: [(u64::MAX, 0); share::CHAIN_SPAN as usize],
            map: local.map,
            joins: join::Joins::new(),
            join_wait: false,
            once,
            plans: Default::default(),
            stepped_shared,
            needs: [need::NeedShape::NONE; need::NEED_SITES],
            need: 0,
            deferred: None,
            others_min: 0,
            scanned: 0,
            unscanned: 0,
            running: [0, 0],
            started: false,
            quiet: false,
            generated: 0,
            counts: Counts::default(),
            held: Stack::new(local.held),
            batch_left: 0,
            next_stream: 0,
            rate_due_ns: 0,
            rate_wait_since: None,
            victim_rng: u64::from(me).wrapping_mul(crate::interp::GOLDEN_GAMMA) | 1,
            parked: [None, None],
            kernel_ws: if Workspace::largest(&program) > 0 {
                program.kernels()
            } else {
                &[]
            },
            kernel_limits,
            limit_parked: [false; 2],
            waiting_limit: false,
            arena,
            arena_used: 0,
            barrier: None,
            arrived: false,
            readback_values: &mut [],
            readback_slots: &mut [],
        })
    }

    /// This AICPU's index.
    pub fn index(&self) -> u32 {
        self.me
    }

    /// Its counters.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Whether every task of this AICPU has completed (and it has nothing left to do).
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// What holds its generation up now (between two rounds: the simulated-time model's stall
    /// causes, spec/runtime.md §9.3).
    pub fn blocked(&self) -> Blocked {
        if self.done && !self.staged && self.pending.is_none() {
            Blocked::Done
        } else if self.barrier.is_some() {
            Blocked::Readback
        } else if self.deferred.is_some() || self.join_wait {
            Blocked::Predecessors
        } else if self.pending.is_some() {
            // A placed task is left unrecorded only while it waits for the watermarks.
            Blocked::Watermarks
        } else if self.staged {
            // A staged task is left unplaced only when the window has no room.
            Blocked::Window
        } else {
            Blocked::Not
        }
    }

    /// Its interpreter (for its work counters).
    pub fn interpreter(&self) -> &Interpreter<'a, 'p> {
        &self.interp
    }

    /// Its own TensorMap (the accesses of local tensors).
    pub fn local_map(&self) -> &TensorMap<S> {
        &self.map
    }

    /// The classes of the program's tensors.
    pub fn shares(&self) -> &[Sharing] {
        self.shares
    }

    /// Phase (1) of a round (§4.2, §4.3): the completions of its cores that went idle, and of
    /// its stolen tasks that finished on another AICPU's cores. Says whether there were any.
    fn take_completions<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        let me = self.me as usize;
        let mut progress = false;
        let mut i = 0;
        let mut returned = 0u32;
        let mut limits_freed = false;
        let mut give_back = cores::GiveBack::new(sh.free_cores);
        while i < self.busy.len {
            let b = self.busy.buf[i];
            if !sh.cores[b.core as usize].idle() {
                i += 1;
                continue;
            }
            self.busy.len -= 1;
            self.busy.buf[i] = self.busy.buf[self.busy.len];
            progress = true;
            env.jitter();
            // Its scratch is free again (the entry held it); the slot is still the task's.
            self.arena_used -= b.ws_len;
            if b.ws_len > 0 {
                let s = &sh.slots[b.owner as usize * sh.cap as usize + b.slot as usize];
                env.reclaimed(b.core, s.task.load(Ordering::Relaxed));
            }
            let pl = Self::pool_of_core(sh, b.core);
            self.running[pl] = self.running[pl].saturating_sub(1);
            self.count_home(b.core, pl, false);
            match self.alloc {
                // Its next task of the pool may take it this round (`claim.rs`).
                CoreAlloc::Shared => {
                    if !self.keep_in_hand(b.core, pl) {
                        give_back.add(b.core);
                        returned |= 1 << pl;
                    }
                }
                CoreAlloc::Partition => self.core_back(sh, b.core, pl),
            }
            limits_freed |= self.give_back_limit(sh, (b.owner, b.slot));
            if b.owner == self.me {
                self.completed(sh, cfg, env, b.slot)?;
            } else {
                sh.passed[b.owner as usize]
                    .push(b.slot)
                    .map_err(|_| SchedError::Corrupted("a passed-completion queue filled"))?;
                env.wake(b.owner);
            }
        }
        give_back.done();
        if returned != 0 {
            self.wake_core_waiters(sh, env, returned);
        }
        if limits_freed {
            self.wake_named(sh, limits::LIMIT_WAITERS, env);
        }
        while let Some(slot) = sh.passed[me].pop() {
            progress = true;
            self.completed(sh, cfg, env, slot)?;
        }
        Ok(progress)
    }

    /// One round of the scheduler loop (§4.3): completions, dispatch, deferred registrations,
    /// generation as far as it goes without waiting. Returns whether it did anything; the
    /// caller may back off or sleep when it did not (see [`Aicpu::has_work`]).
    pub fn step<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        let me = self.me as usize;
        // A quiet round (`quiet.rs`): its last round did nothing and nothing it waited on has
        // moved, so this one would do nothing either but count a stall at a full window.
        let mut settled_quiet = false;
        if self.quiet {
            if self.still_quiet(sh) {
                self.counts.quiet_rounds += 1;
                if !env.checks_quiet() {
                    if self.staged && self.pending.is_none() {
                        self.counts.stalls += 1;
                    }
                    return Ok(false);
                }
                settled_quiet = true;
            }
            self.quiet = false;
        }
        // (1) Completions (§4.2).
        let mut completions = self.take_completions(sh, cfg, env)?;
        let mut progress = false;
        // Its inbox into its deque under stealing, started or not: there the others may steal.
        if cfg.work_steal {
            self.drain_inbox(sh)?;
        } else if !sh.stealable.is_empty() {
            // Its own releases would go to a deque nobody pops.
            return Err(SchedError::Memory(
                "stealable deques in a launch that does not steal",
            ));
        }
        // (2) Dispatch, once the start policy allows it (a full window always does).
        if !self.started {
            let generated_all = self.done && !self.staged && self.pending.is_none();
            self.started = self.in_window >= cfg.window
                || match cfg.start {
                    Start::Immediate => true,
                    Start::AfterOrchestration => generated_all,
                    Start::Threshold(n) => self.generated >= n || generated_all,
                };
        }
        if self.started {
            let mut issued = self.issue(sh, cfg, env)?;
            progress |= issued;
            // The cores it just handed tasks may finish them while it dispatches (a device's
            // run on their own; a simulator's thread runs them now): their completions, and
            // the dispatch of what they release, come before generation (`Env::run_cores`).
            let mut hops = 0;
            while issued && hops < HOPS_A_ROUND && env.run_cores() {
                hops += 1;
                if !self.take_completions(sh, cfg, env)? {
                    break;
                }
                completions = true;
                self.counts.hops += 1;
                if cfg.work_steal {
                    self.drain_inbox(sh)?;
                }
                issued = self.issue(sh, cfg, env)?;
                progress |= issued;
            }
        }
        // Cores it kept and did not use go back (before dispatch starts, all of them).
        self.give_back_hand(sh, env);
        // A task waiting for predecessors beyond its waiter nodes keeps one hold on itself
        // until they complete.
        if let Some((slot, left)) = self.deferred {
            let mut k = 0;
            let mut left = left;
            while k < left {
                let p = self.preds[k];
                let s = sh.waitable(p.aicpu, p.slot)?;
                if waitlist::completed(&s.waiters, tag_of(p.id)) {
                    left -= 1;
                    self.preds[k] = self.preds[left];
                } else {
                    k += 1;
                }
            }
            if left == 0 {
                self.deferred = None;
                release_task(sh, self.me, self.me, slot, env)?;
                progress = true;
            } else {
                self.deferred = Some((slot, left));
            }
        }
        // A READBACK's barrier (§4.5): generation waits there.
        progress |= self.barrier_round(sh, env)?;
        // (3) Generation (§4.1), as far as it goes without waiting.
        loop {
            if !self.staged && self.pending.is_none() && !self.done && self.barrier.is_none() {
                env.jitter();
                let before = self.interp.stats().emitted;
                if self.interp.next_task()? == Status::Readback {
                    if let Some(rb) = self.interp.readback() {
                        self.stop_at(sh, env, rb);
                    }
                    progress = true;
                    break;
                }
                let mark = if self.interp.stats().emitted > before {
                    self.staged = true;
                    let id = self.interp.current_task().id;
                    self.need = self.need_of_staged();
                    env.staged(self.me, id);
                    id
                } else {
                    self.done = true;
                    u64::MAX
                };
                sh.published[me].0.store(mark, Ordering::Release);
                // The AICPUs waiting for it are woken every few watermarks, and at the latest
                // when this round's generation stops (below).
                self.unscanned += 1;
                if self.unscanned >= WAKE_EVERY || mark == u64::MAX {
                    self.wake_waiters(sh, env, mark);
                }
                progress = true;
            }
            if self.staged && self.pending.is_none() {
                if self.in_window >= cfg.window {
                    match cfg.mode {
                        WindowMode::Abort => {
                            return Err(SchedError::WindowAbort {
                                aicpu: self.me,
                                window: cfg.window,
                            })
                        }
                        WindowMode::Benchmark if !self.free.is_empty() => {
                            self.counts.overflows += 1
                        }
                        _ => {
                            self.counts.stalls += 1;
                            self.started = true;
                            break;
                        }
                    }
                }
                if self.free.is_empty() && !self.retiring.is_empty() {
                    sh.map.with_map(|map| {
                        Self::flush(self.me, &mut self.retiring, &mut self.free, sh, map)
                    })?;
                }
                let Some(k) = self.free.pop() else {
                    self.counts.stalls += 1;
                    self.started = true;
                    break;
                };
                let t = self.interp.current_task();
                let s = &sh.slots[me * sh.cap as usize + k as usize];
                s.pool.store(pool_index(t.pool()) as u32, Ordering::Relaxed);
                s.kernel.store(t.kernel as u32, Ordering::Relaxed);
                // Its stream is its last region's index in the stream-order tensor.
                let stream = match self.interp.program().stream_tensor() {
                    Some(_) => t.ios().last().map_or(0, |io| io.ranges[0].0 as u32),
                    None => 0,
                };
                s.stream.store(stream, Ordering::Relaxed);
                if sh.desc_words > 0 && !desc::write(sh.desc(self.me, k), t, self.tensors) {
                    return Err(SchedError::Memory(
                        "a task's descriptor is larger than its slot",
                    ));
                }
                waitlist::open(&s.waiters, tag_of(t.id));
                s.task.store(t.id, Ordering::Release);
                self.recent[(t.id % share::CHAIN_SPAN as u64) as usize] = (t.id, k);
                self.pending = Some(k);
                self.in_window += 1;
                progress = true;
            }
            let Some(k) = self.pending else { break };
            // One task at a time waits for extra predecessors (its scratch holds them).
            // Generation is blocked until they complete, so the start policy gives way: under
            // `after_orchestration` they would otherwise never be dispatched.
            if self.deferred.is_some() {
                self.started = true;
                break;
            }
            let need = self.need;
            if !cfg.naive && self.others_min < need {
                self.others_min = self.others_min(sh);
            }
            if !cfg.naive && self.others_min < need {
                sh.waiting_for[me].0.store(need, Ordering::SeqCst);
                // Re-check after announcing: a watermark published in between woke nobody.
                // The fence pairs with the publisher's (§4.3): either it sees this need, or
                // this re-check sees its watermark.
                fence(Ordering::SeqCst);
                self.others_min = self.others_min(sh);
                if self.others_min < need {
                    // Blocked on another AICPU: holding ready tasks back now could deadlock
                    // (that AICPU may wait for them), so the start policy gives way.
                    self.started = true;
                    break;
                }
            }
            // Only this AICPU writes its word: storing it only when it announced keeps the
            // line the others read at every publication clean (shared, not bounced).
            if sh.waiting_for[me].0.load(Ordering::Relaxed) != u64::MAX {
                sh.waiting_for[me].0.store(u64::MAX, Ordering::Relaxed);
            }
            if self.join_wait && self.joins.free(sh, self.me).is_none() {
                break;
            }
            env.jitter();
            self.join_wait = !self.record(sh, k, env)?;
            if self.join_wait {
                // Its joins wait for writers to complete: so does generation, and the start
                // policy gives way (those writers may be this AICPU's own ready tasks).
                self.started = true;
                break;
            }
            self.pending = None;
            self.staged = false;
            self.generated += 1;
            progress = true;
        }
        if self.unscanned > 0 {
            self.wake_waiters(sh, env, sh.published[me].0.load(Ordering::Relaxed));
        }
        // A held-back batch goes out as soon as nothing else moves: holding it longer could
        // keep every AICPU waiting.
        if !progress && !self.unreleased.is_empty() {
            self.release(sh, env)?;
            progress = true;
        }
        progress |= completions;
        if self.done
            && !self.staged
            && self.pending.is_none()
            && self.in_window == 0
            && self.deferred.is_none()
            && self.busy.is_empty()
            // A task it stole and parked (waiting for scratch or its kernel's core limit) is
            // another AICPU's, outside its window, and it must still issue it: under shared
            // cores it may hold one with no core free to it yet.
            && self.parked.iter().all(Option::is_none)
            && !self.own_done
        {
            if !self.retiring.is_empty() {
                sh.map.with_map(|map| {
                    Self::flush(self.me, &mut self.retiring, &mut self.free, sh, map)
                })?;
            }
            self.own_done = true;
            progress = true;
            // Under stealing it goes on as a thief; the last AICPU done wakes the others, so
            // they see that nothing is left.
            if cfg.work_steal && sh.own_done.0.fetch_add(1, Ordering::AcqRel) + 1 == u64::from(sh.n)
            {
                for a in (0..sh.n).filter(|&a| a != self.me) {
                    env.wake(a);
                }
            }
        }
        if self.own_done && !self.finished && (!cfg.work_steal || self.all_done(sh)) {
            self.finished = true;
            progress = true;
        }
        if settled_quiet && progress {
            return Err(SchedError::Corrupted(
                "a round settled as quiet had something to do",
            ));
        }
        self.quiet = !progress && self.may_rest(cfg);
        Ok(progress)
    }

    /// Under stealing: whether every AICPU's own tasks have completed (and so no task is left
    /// to steal or to complete).
    fn all_done<C, L>(&self, sh: &Shared<'_, C, L>) -> bool {
        sh.own_done.0.load(Ordering::Acquire) >= u64::from(sh.n)
            && self.busy.is_empty()
            && self.parked.iter().all(Option::is_none)
    }

    /// Whether a round could do something now (checked before sleeping).
    pub fn has_work<C: AsRef<[Cell]>, L: MapLock>(
        &self,
        sh: &Shared<'_, C, L>,
        cfg: &Config,
    ) -> bool {
        let me = self.me as usize;
        let watermarks = self.pending.is_some()
            && self.deferred.is_none()
            && (!self.join_wait || self.joins.free(sh, self.me).is_some())
            && (0..sh.n).all(|a| {
                a == self.me || sh.published[a as usize].0.load(Ordering::Acquire) >= self.need
            });
        // Under `rate_limit`, a task waiting for the rate is work at `issue_at`, not now.
        let ready = |pl: usize| self.rate_wait_since.is_none() && self.ready_for(sh, cfg, pl);
        !sh.passed[me].is_empty()
            || self
                .busy
                .as_slice()
                .iter()
                .any(|b| sh.cores[b.core as usize].idle())
            // A task waiting for workspace waits for a busy core (above), not a free one.
            || (self.core_free(sh, 0) && self.parked[0].is_none() && ready(0))
            || (self.core_free(sh, 1) && self.parked[1].is_none() && ready(1))
            // A task waiting for its kernel's core limit waits for a unit of it.
            || self.limit_free(sh, 0)
            || self.limit_free(sh, 1)
            || watermarks
            || (!self.staged && self.pending.is_none() && !self.done && self.barrier.is_none())
            || self.deferred.is_some()
            || self.barrier_ready(sh)
            // A thief whose own work is done finishes once every AICPU's is.
            || (cfg.work_steal && self.own_done && !self.finished && self.all_done(sh))
    }

    /// At a `READBACK`'s barrier: whether it can arrive now (its window empty), or every
    /// AICPU has arrived and it can read back.
    fn barrier_ready<C, L>(&self, sh: &Shared<'_, C, L>) -> bool {
        let Some(rb) = self.barrier else {
            return false;
        };
        if !self.arrived {
            return self.may_arrive();
        }
        sh.barriers
            .get(rb.index as usize)
            .is_some_and(|w| w.0.load(Ordering::Acquire) >= u64::from(sh.n))
    }

    /// Wakes the AICPUs that announced a need the watermark `mark` (published last) is the
    /// first one this AICPU scanned for to reach (§4.3): the fence pairs with theirs between
    /// announcing and re-reading the watermarks, so one whose need an earlier scanned
    /// watermark reached was woken then or saw that watermark itself, and one that misses
    /// `mark` is seen here.
    pub(super) fn wake_waiters<C, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
        mark: u64,
    ) {
        fence(Ordering::SeqCst);
        for a in 0..sh.n {
            let need = sh.waiting_for[a as usize].0.load(Ordering::Relaxed);
            if a != self.me && reaches_first(self.scanned, need, mark) {
                env.wake(a);
            }
        }
        self.scanned = mark;
        self.unscanned = 0;
    }

    pub(super) fn others_min<C, L>(&self, sh: &Shared<'_, C, L>) -> u64 {
        (0..sh.n)
            .filter(|&a| a != self.me)
            .map(|a| sh.published[a as usize].0.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }
}
