//! The shared and instance regions (spec/runtime.md §3): the launch's plan after defaults and
//! checks, and the layout of both regions over the caller's memory — measured with a null base
//! (`ptovm_layout`), built with a real one (`ptovm_shared_init`, `ptovm_instance_init`).

use super::*;

/// Writes `n` values made by `f` at `p` and gives the slice.
///
/// # Safety
/// `p` is valid for `n` writes of `T`, aligned, and lives (untouched by others) for `'static`.
pub(crate) unsafe fn fill<T>(
    p: *mut T,
    n: usize,
    mut f: impl FnMut(usize) -> T,
) -> &'static mut [T] {
    for i in 0..n {
        // SAFETY: the caller's contract.
        unsafe { p.add(i).write(f(i)) };
    }
    // SAFETY: all `n` values were written just now.
    unsafe { core::slice::from_raw_parts_mut(p, n) }
}

/// A verified program from the caller's bytes.
pub(crate) unsafe fn program(code: *const u8, len: usize) -> Result<Verified<'static>, Fail> {
    if code.is_null() || len == 0 {
        return Err(fail!(PTOVM_E_ARGUMENT, "no bytecode"));
    }
    // SAFETY: the caller keeps `len` bytes at `code` alive and unchanged for the launch.
    let bytes: &'static [u8] = unsafe { core::slice::from_raw_parts(code, len) };
    verify(bytes).map_err(|e| fail!(PTOVM_E_VERIFY, "bytecode rejected: {e}"))
}

/// The launch after defaults and checks.
pub(crate) struct Plan {
    pub(crate) n: u32,
    pub(crate) cap: u32,
    pub(crate) cube: u32,
    pub(crate) vector: u32,
    pub(crate) cfg: Config,
    pub(crate) mode: MatchMode,
    pub(crate) layout: MapLayout,
    /// Each AICPU's own map (§3.5 of spec/runtime.md): handles are its slots.
    pub(crate) local: MapLayout,
    pub(crate) params: u32,
    pub(crate) tensors: usize,
    /// Kernels of the program (a core-limit counter each).
    pub(crate) kernels: usize,
    /// Words of a window slot's descriptor (`desc::slot_words`).
    pub(crate) desc_words: usize,
    /// The launch's workspace memory.
    pub(crate) workspace: Workspace,
}

pub(crate) fn plan(v: &Verified<'_>, l: &PtovmLaunch) -> Result<Plan, Fail> {
    let mut cfg = Config::of_program(v);
    let n = if l.aicpus == 0 {
        v.config().num_aicpus.get() as u32
    } else {
        l.aicpus
    };
    if n == 0 || n > ptovm_vm::limits::MAX_AICPUS as u32 {
        return Err(fail!(
            PTOVM_E_ARGUMENT,
            "the AICPU count {n} is outside 1..=64"
        ));
    }
    if l.window != 0 {
        cfg.window = l.window;
    }
    if cfg.window == 0 || cfg.window > 65_536 {
        return Err(fail!(
            PTOVM_E_ARGUMENT,
            "the task window must be in 1..=65536 slots, not {}",
            cfg.window
        ));
    }
    cfg.mode = match l.window_mode {
        -1 => cfg.mode,
        m => u8::try_from(m)
            .ok()
            .and_then(WindowMode::from_u8)
            .ok_or_else(|| fail!(PTOVM_E_ARGUMENT, "window mode {m} is not -1, 0, 1 or 2"))?,
    };
    cfg.cores = match l.core_alloc {
        0 => cfg.cores,
        1 => CoreAlloc::Shared,
        2 => CoreAlloc::Partition,
        x => {
            return Err(fail!(
                PTOVM_E_ARGUMENT,
                "core_alloc {x} is not 0 (the program's), 1 (shared) or 2 (partition)"
            ))
        }
    };
    let least = match cfg.cores {
        CoreAlloc::Shared => 1,
        CoreAlloc::Partition => n,
    };
    if l.cube_cores < least
        || l.vector_cores < least
        || l.cube_cores > 4096
        || l.vector_cores > 4096
    {
        return Err(fail!(
            PTOVM_E_ARGUMENT,
            "{} cube and {} vector cores for {n} AICPUs under {} cores: a launch needs at least one of each (at most 4096), a partition one of each per AICPU",
            l.cube_cores,
            l.vector_cores,
            cfg.cores
        ));
    }
    let mode = match l.exact_deps {
        0 => MatchMode::Overlap,
        1 => MatchMode::Exact,
        x => return Err(fail!(PTOVM_E_ARGUMENT, "exact_deps {x} is not 0 or 1")),
    };
    // Benchmark mode lets the window grow to four times its size while counting overflows.
    let cap = cfg.window
        * if cfg.mode == WindowMode::Benchmark {
            4
        } else {
            1
        };
    let layout = MapLayout::for_program(v, n * cap)
        .map_err(|e| fail!(PTOVM_E_ARGUMENT, "TensorMap: {e}"))?;
    let local =
        MapLayout::for_program(v, cap).map_err(|e| fail!(PTOVM_E_ARGUMENT, "TensorMap: {e}"))?;
    // Each AICPU drives every core under shared cores, at most ⌈cores / n⌉ of each pool
    // under a partition.
    let most = match cfg.cores {
        CoreAlloc::Shared => l.cube_cores + l.vector_cores,
        CoreAlloc::Partition => l.cube_cores.div_ceil(n) + l.vector_cores.div_ceil(n),
    };
    let arena = match l.workspace_arena {
        0 => Workspace::arena_for(v, cfg.window, most),
        given => given,
    };
    let largest = Workspace::largest(v);
    if largest > arena || (largest > 0 && u64::from(arena) * u64::from(n) > u64::from(u32::MAX)) {
        return Err(fail!(
            PTOVM_E_ARGUMENT,
            "a kernel's workspace of {largest} bytes does not fit a workspace arena of {arena} bytes for each of {n} AICPUs (all arenas together below 4 GiB)"
        ));
    }
    Ok(Plan {
        n,
        cap,
        cube: l.cube_cores,
        vector: l.vector_cores,
        cfg,
        mode,
        layout,
        local,
        params: v.params().len() as u32,
        tensors: v.tensors().len(),
        kernels: v.kernels().len(),
        desc_words: desc::slot_words(v),
        workspace: Workspace {
            arena,
            base: l.workspace_base,
        },
    })
}

/// The memory of a TensorMap, carved.
pub(crate) struct MapMem {
    entries: *mut Entry,
    ios: *mut Io,
    words: *mut u32,
    marks: *mut u64,
}

impl MapMem {
    fn carve(c: &mut Carve, l: &MapLayout) -> Result<MapMem, Fail> {
        Ok(MapMem {
            entries: c.take(l.entries as usize, "TensorMap entries")?,
            ios: c.take(l.regions as usize, "TensorMap regions")?,
            words: c.take(l.words(), "TensorMap words")?,
            marks: c.take(l.handles as usize, "TensorMap marks")?,
        })
    }

    /// The map over this memory.
    ///
    /// # Safety
    /// The memory was carved from a real region with layout `l`, and lives for the launch.
    unsafe fn build(
        self,
        l: &MapLayout,
        mode: MatchMode,
    ) -> Result<TensorMap<Slices<'static>>, Fail> {
        // SAFETY: the caller's contract.
        let mem = unsafe {
            Slices {
                entries: fill(self.entries, l.entries as usize, |_| Entry::default()),
                ios: fill(self.ios, l.regions as usize, |_| Io::default()),
                words: fill(self.words, l.words(), |_| 0),
                marks: fill(self.marks, l.handles as usize, |_| 0),
            }
        };
        TensorMap::new(*l, mode, mem).map_err(|e| fail!(PTOVM_E_STATE, "TensorMap: {e}"))
    }
}

/// Lays out (or, with a measuring carve, sizes) the shared region.
///
/// # Safety
/// With a real carve: the region is writable, not used by anyone else, and lives for the launch.
pub(crate) unsafe fn shared_layout(
    c: &mut Carve,
    code: *const u8,
    len: usize,
    p: &Plan,
) -> Result<*mut SharedHeader, Fail> {
    let (n, cap) = (p.n as usize, p.cap as usize);
    let cores = (p.cube + p.vector) as usize;
    let header: *mut SharedHeader = c.take(1, "header")?;
    let published: *mut Padded = c.take(n, "watermarks")?;
    let waiting: *mut Padded = c.take(n, "watermarks")?;
    let claimed: *mut AtomicI32 = c.take(n, "instance claims")?;
    let slots: *mut Slot = c.take(n * cap, "window slots")?;
    let nodes: *mut Node = c.take(nodes_len(n, cap), "waiter nodes")?;
    let joins: *mut Slot = c.take(joins_len(n), "joins")?;
    let rings: *mut Ring<&'static [Cell]> = c.take(3 * n, "ready queues")?;
    let per = ptovm_vm::ring::cells_for(p.cap as usize);
    let cells: *mut Cell = c.take(3 * n * per, "ready queue cells")?;
    // Stealing's deques, exactly when the launch steals (spec/runtime.md §4.3).
    let ndeques = if p.cfg.work_steal { 2 * n } else { 0 };
    let deques: *mut Deque<&'static [Cell]> = c.take(ndeques, "stealable deques")?;
    let deque_cells: *mut Cell = c.take(ndeques * per, "stealable deque cells")?;
    let core_slots: *mut CoreSlot = c.take(cores, "handshake slots")?;
    let core_aicpu: *mut u32 = c.take(cores, "core owners")?;
    let shared_cores = p.cfg.cores == CoreAlloc::Shared;
    let bitmap_words = if shared_cores {
        core_bits::words_for(cores)
    } else {
        0
    };
    let free_cores: *mut AtomicU64 = c.take(bitmap_words, "free-core bitmap")?;
    let core_waiters: *mut Padded = c.take(CORE_WAITER_WORDS, "core waiter words")?;
    let kernel_running: *mut AtomicU32 = c.take(p.kernels, "kernel running counts")?;
    let map: *mut DevMap = c.take(1, "TensorMap")?;
    let writers: *mut AtomicU32 = c.take(p.tensors, "live-writer counts")?;
    let once: *mut AtomicU64 = c.take(once_len(n, cap), "written-once tables")?;
    let next_issue: *mut Padded = c.take(1, "the rate_limit turn")?;
    let own_done: *mut Padded = c.take(1, "the count of AICPUs done")?;
    let barriers: *mut Padded = c.take(ptovm_vm::limits::MAX_READBACKS, "read-back barriers")?;
    let descs: *mut AtomicU64 = c.take(n * cap * p.desc_words, "task descriptors")?;
    let mem = MapMem::carve(c, &p.layout)?;
    if c.base == 0 {
        return Ok(header);
    }
    // SAFETY (all below): every pointer was carved from the caller's region, aligned, disjoint,
    // and the region lives for the launch (the caller's contract).
    unsafe {
        let published = fill(published, n, |_| Padded::new(0));
        let waiting = fill(waiting, n, |_| Padded::new(u64::MAX));
        let claimed = fill(claimed, n, |_| AtomicI32::new(0));
        let slots = fill(slots, n * cap, |_| Slot::default());
        let nodes = fill(nodes, nodes_len(n, cap), |_| Node::default());
        let joins = fill(joins, joins_len(n), |_| Slot::default());
        let cells = fill(cells, 3 * n * per, |_| Cell::default());
        let mut rest: &'static [Cell] = cells;
        let rings = fill(rings, 3 * n, |_| {
            let (mine, others) = rest.split_at(per);
            rest = others;
            Ring::new(mine).expect("a power of two of at least 2 cells")
        });
        let (ready, passed) = rings.split_at(2 * n);
        let mut rest: &'static [Cell] = fill(deque_cells, ndeques * per, |_| Cell::default());
        let stealable = fill(deques, ndeques, |_| {
            let (mine, others) = rest.split_at(per);
            rest = others;
            Deque::new(mine).expect("a power of two of at least 2 cells")
        });
        let cube = p.cube as usize;
        let core_slots = fill(core_slots, cores, |c| {
            let s = CoreSlot::default();
            s.set_up(if c < cube {
                handshake::CUBE
            } else {
                handshake::VECTOR
            });
            s
        });
        // Under a partition, core c of a pool goes to AICPU c mod n (cube cores first, then
        // vector cores); under shared cores the bitmap starts with every core free.
        let core_aicpu = fill(core_aicpu, cores, |c| {
            ((if c < cube { c } else { c - cube }) % n) as u32
        });
        let free_cores = fill(free_cores, bitmap_words, |_| AtomicU64::new(0));
        core_bits::free_all(free_cores, cores);
        let core_waiters = fill(core_waiters, CORE_WAITER_WORDS, |i| {
            Padded::new(core_bits::waiter_word_at_launch(i, n as u32))
        });
        let kernel_running = fill(kernel_running, p.kernels, |_| AtomicU32::new(0));
        let writers = fill(writers, p.tensors, |_| AtomicU32::new(0));
        let once = fill(once, once_len(n, cap), |_| AtomicU64::new(0));
        let next_issue = &fill(next_issue, 1, |_| Padded::new(0))[0];
        let own_done = &fill(own_done, 1, |_| Padded::new(0))[0];
        let barriers = fill(barriers, ptovm_vm::limits::MAX_READBACKS, |_| {
            Padded::new(0)
        });
        let descs = fill(descs, n * cap * p.desc_words, |_| AtomicU64::new(0));
        map.write(DevMap(SpinLock::new(mem.build(&p.layout, p.mode)?)));
        header.write(SharedHeader {
            magic: AtomicU64::new(0),
            failed: AtomicI32::new(0),
            kernel_failure: kernel::KernelFailure::new(),
            claimed,
            code,
            code_len: len,
            cube: p.cube,
            cores: cores as u32,
            cfg: p.cfg,
            exact_deps: u32::from(p.mode == MatchMode::Exact),
            sched: Shared {
                n: p.n,
                cap: p.cap,
                published,
                waiting_for: waiting,
                slots,
                nodes,
                joins,
                ready,
                stealable,
                passed,
                cores: core_slots,
                core_aicpu,
                free_cores,
                core_waiters,
                kernel_running,
                map: &*map,
                writers,
                once,
                next_issue,
                own_done,
                descs,
                desc_words: p.desc_words as u32,
                workspace: p.workspace,
                barriers,
            },
        });
        (*header).magic.store(SHARED_MAGIC, Ordering::Release);
    }
    Ok(header)
}

/// Cores AICPU `a` drives under a partition (none under shared cores: it claims them).
pub(crate) fn own_cores(p: &Plan, a: u32) -> impl Iterator<Item = u32> + '_ {
    let partition = p.cfg.cores == CoreAlloc::Partition;
    let own = move |k: u32| partition && k % p.n == a;
    (0..p.cube)
        .filter(move |&c| own(c))
        .chain((0..p.vector).filter(move |&c| own(c)).map(|c| p.cube + c))
}

/// Lays out (or sizes) an instance region for AICPU `a`; with a real carve, builds it.
///
/// # Safety
/// With a real carve: the region is writable, used by no one else, and lives for the launch;
/// `shared` was laid out by [`ptovm_shared_init`] for the same bytecode.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn instance_layout(
    c: &mut Carve,
    p: &Plan,
    a: u32,
    v: Verified<'static>,
    shared: *const SharedHeader,
    (params, nparams): (*const PtovmParam, u32),
    (given, ngiven): (*const TensorArg, u32),
) -> Result<*mut InstanceHeader, Fail> {
    let (n, cap) = (p.n as usize, p.cap as usize);
    let own = own_cores(p, a).count();
    // Busy entries: as many as it may drive at once.
    let drives = match p.cfg.cores {
        CoreAlloc::Shared => (p.cube + p.vector) as usize,
        CoreAlloc::Partition => own,
    };
    let header: *mut InstanceHeader = c.take(1, "instance header")?;
    let values: *mut Value<'static> = c.take(p.params as usize, "runtime parameters")?;
    let free: *mut u32 = c.take(cap, "free slots")?;
    let retiring: *mut u32 = c.take(cap, "retiring slots")?;
    let unreleased: *mut u32 = c.take(cap, "unreleased slots")?;
    let held: *mut u32 = c.take(cap, "held ready tasks")?;
    let cores: *mut u32 = c.take(own, "cores")?;
    let busy: *mut Busy = c.take(drives, "busy cores")?;
    let preds: *mut Pred = c.take(preds_len(n, cap), "predecessor scratch")?;
    let shares: *mut Sharing = c.take(p.tensors, "tensor classes")?;
    let tensors: *mut Binding = c.take(p.tensors, "tensor bindings")?;
    let bound: *mut TensorArg = c.take(p.tensors, "the launcher's tensor bindings")?;
    let map = MapMem::carve(c, &p.local)?;
    // The values its READBACKs read (spec/runtime.md §4.5): the most a read-back may hold,
    // since the instance is sized before the parameters shape the tensors.
    let nreadbacks = v.readbacks().len();
    let rb_words = nreadbacks * ptovm_vm::limits::MAX_READBACK_ELEMS;
    let rb_values: *mut u32 = c.take(rb_words, "read-back values")?;
    let rb_slots: *mut Value<'static> = c.take(
        ptovm_vm::sched::readback_blocks(&v),
        "read-back parameter blocks",
    )?;
    let aicpu: *mut Aicpu<'static, 'static, 'static> = c.take(1, "scheduler")?;
    if c.base == 0 {
        return Ok(header);
    }
    if ngiven != 0 && (ngiven as usize != p.tensors || given.is_null()) {
        return Err(fail!(
            PTOVM_E_BIND,
            "tensor binding: {ngiven} tensor bindings for a program of {} tensors",
            p.tensors
        ));
    }
    if nparams != p.params || (nparams > 0 && params.is_null()) {
        return Err(fail!(
            PTOVM_E_PARAMS,
            "the program takes {} runtime parameters; {nparams} were given",
            p.params
        ));
    }
    // SAFETY (all below): the pointers were carved from the caller's region (aligned,
    // disjoint, alive for the launch); `params` holds `nparams` entries whose arrays live for
    // the launch; `shared` was initialised (its magic checked by the caller).
    unsafe {
        let mut bad = None;
        let values = fill(values, nparams as usize, |i| {
            value_of(&v, *params.add(i), i).unwrap_or_else(|f| {
                bad = Some(f);
                Value::Scalar(0)
            })
        });
        if let Some(f) = bad {
            return Err(f);
        }
        let values: &'static [Value<'static>] = values;
        let rp = RuntimeParams::new(&v, values)
            .map_err(|e| fail!(PTOVM_E_PARAMS, "runtime parameters: {e}"))?;
        let interp = Interpreter::new(v, rp, a, p.n).map_err(launch_fail)?;
        let mut own_list = own_cores(p, a);
        let local = Local {
            free: fill(free, cap, |_| 0),
            retiring: fill(retiring, cap, |_| 0),
            unreleased: fill(unreleased, cap, |_| 0),
            held: fill(held, cap, |_| 0),
            cores: fill(cores, own, |_| own_list.next().unwrap_or(0)),
            busy: fill(busy, drives, |_| Busy::default()),
            preds: fill(preds, preds_len(n, cap), |_| Pred::default()),
            shares: fill(shares, p.tensors, |_| Sharing::default()),
            tensors: fill(tensors, p.tensors, |_| Binding::default()),
            bound: &fill(bound, p.tensors, |i| {
                if ngiven == 0 {
                    TensorArg::default()
                } else {
                    *given.add(i)
                }
            })[..ngiven as usize],
            map: map.build(&p.local, p.mode)?,
        };
        let sched = Aicpu::new(a, interp, local, &(*shared).sched)
            .map_err(|e| fail!(code_of(&e), "scheduler: {e}"))?
            .with_readback(
                fill(rb_values, rb_words, |_| 0),
                fill(rb_slots, ptovm_vm::sched::readback_blocks(&v), |_| {
                    Value::Scalar(0)
                }),
            );
        aicpu.write(sched);
        header.write(InstanceHeader {
            magic: INSTANCE_MAGIC,
            shared,
            aicpu,
            failed: AtomicI32::new(0),
            msg_len: AtomicUsize::new(0),
            msg: [0; MSG],
        });
    }
    Ok(header)
}
