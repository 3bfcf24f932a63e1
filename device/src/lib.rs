//! # ptovm-device
//!
//! ptovm on the AICPU: the interpreter and the per-AICPU scheduler of `ptovm-vm`, behind a
//! stable C ABI, over memory the caller provides. Built for `aarch64-unknown-none` as a static
//! library (no heap, no std, `panic = abort` with a handler that reports instead of unwinding),
//! linked into an AICPU kernel, and for `aarch64-unknown-linux-gnu` as the AICPU kernel itself,
//! `libptovm_aicpu.so` (crate `ptovm-aicpu`, entry points in [`kernel`](crate::ptovm_aicpu_exec));
//! on the host the same code is an ordinary Rust library, which the tests drive through the same
//! functions.
//!
//! A launch has one **shared region** (window slots, waiter nodes, ready queues, the cores'
//! handshake slots and the global TensorMap: spec/runtime.md §3) and one **instance region** per
//! AICPU (its interpreter, scheduler state and buffers). [`ptovm_layout`] says how large each
//! must be; [`ptovm_shared_init`] lays out the shared region (once, before the AICPU threads
//! start); every AICPU thread then calls [`ptovm_instance_init`] and [`ptovm_run`] (or
//! [`ptovm_step`] from its own loop). AICores (or threads playing them) poll their handshake slot
//! with [`ptovm_core_take`] and report with [`ptovm_core_finish`]. `include/ptovm.h` is the C
//! description of this ABI; a test keeps the two in step.
//!
//! Every function checks its pointers and sizes and returns an error code (negative) with a
//! message the caller can read, never panics on bad input, and never allocates. The bytecode is
//! verified again on the device before anything runs.
// `no_std` on every AArch64 build — the static library (`aarch64-unknown-none`) and the AICPU
// shared object (`aarch64-unknown-linux-gnu`, crate `ptovm-aicpu`) — and on bare metal; the
// host's tests (x86-64) use std for a clock only.
#![cfg_attr(any(target_os = "none", target_arch = "aarch64"), no_std)]
#![deny(missing_docs)]
// The C ABI takes raw pointers; every function says what it requires of them.
#![allow(clippy::missing_safety_doc)]
// Errors carry their message in a fixed buffer: there is no heap to box it into.
#![allow(clippy::result_large_err)]

use core::ffi::c_void;
use core::fmt::Write as _;
use core::mem::{align_of, size_of};
use core::ptr;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use ptovm_vm::deque::Deque;
use ptovm_vm::desc::{self, Binding, Descriptor, TensorArg};
use ptovm_vm::handshake::{self, CoreSlot};
use ptovm_vm::ring::{Cell, Ring};
use ptovm_vm::sched::{
    cores as core_bits, Aicpu, Busy, Config, CoreAlloc, Env, Local, MapLock, Node, Padded, Pred,
    SchedError, Shared, Slot, Workspace, CORE_WAITER_WORDS, NODES,
};
use ptovm_vm::share::Sharing;
use ptovm_vm::spin::SpinLock;
use ptovm_vm::tmap::{Entry, MapLayout, MatchMode, Slices, TensorMap};
use ptovm_vm::{verify, Interpreter, Io, LaunchError, RuntimeParams, Value, Verified, WindowMode};

mod kernel;
pub use kernel::{
    ptovm_aicpu_exec, ptovm_aicpu_init, ptovm_core_fail, ptovm_launch_error, PtovmKernelArgs,
    PTOVM_MESSAGE_BYTES,
};

/// Version of this ABI; [`ptovm_abi_version`] returns it and `PTOVM_ABI_VERSION` in the header
/// must equal it.
pub const PTOVM_ABI_VERSION: u32 = 5;

/// Success ([`ptovm_step`]: nothing to do right now).
pub const PTOVM_OK: i32 = 0;
/// [`ptovm_step`]: the step did something.
pub const PTOVM_PROGRESS: i32 = 1;
/// [`ptovm_step`]: every task of this AICPU has completed.
pub const PTOVM_FINISHED: i32 = 2;
/// A core reported that its task's kernel failed ([`ptovm_core_fail`]).
pub const PTOVM_E_KERNEL: i32 = -10;
/// A null pointer, a zero count, or a launch value out of range.
pub const PTOVM_E_ARGUMENT: i32 = -1;
/// The bytecode failed verification.
pub const PTOVM_E_VERIFY: i32 = -2;
/// The runtime parameters do not fit the program.
pub const PTOVM_E_PARAMS: i32 = -3;
/// Memory too small or not aligned to 128 bytes.
pub const PTOVM_E_MEMORY: i32 = -4;
/// The program failed at run time (arithmetic, bounds: spec/bytecode.md §5.6).
pub const PTOVM_E_RUN: i32 = -5;
/// A task window overflowed in `abort` mode.
pub const PTOVM_E_WINDOW: i32 = -6;
/// Memory that ptovm did not initialise, or shared state found inconsistent.
pub const PTOVM_E_STATE: i32 = -7;
/// The instance failed before; it does nothing more.
pub const PTOVM_E_FAILED: i32 = -8;
/// A tensor binding was refused: wrong count, type, alignment, strides or size
/// (spec/runtime.md §3.8); the message names the tensor.
pub const PTOVM_E_BIND: i32 = -9;

/// Alignment the caller's regions must have.
pub const PTOVM_ALIGN: usize = 128;

const SHARED_MAGIC: u64 = 0x5054_4F57_5348_5244; // "PTOWSHRD"
const INSTANCE_MAGIC: u64 = 0x5054_4F57_494E_5354; // "PTOWINST"
const MSG: usize = 192;

/// Launch settings (C: `ptovm_launch`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PtovmLaunch {
    /// AICPUs (0: the program's `aicpus`).
    pub aicpus: u32,
    /// Window slots per AICPU (0: the program's `window`).
    pub window: u32,
    /// Cube cores in all (at least one; under a core partition at least one per AICPU).
    pub cube_cores: u32,
    /// Vector cores in all (likewise).
    pub vector_cores: u32,
    /// -1: the program's window mode; 0 stall, 1 abort, 2 benchmark.
    pub window_mode: i32,
    /// 0: overlap matching (every dependency); 1: exact matching (pto-isa's).
    pub exact_deps: u32,
    /// Bytes of each AICPU's workspace arena (spec/runtime.md §4.4); 0: the program's
    /// `workspace`, or room for its largest workspace on each core an AICPU drives (at most
    /// its window). A descriptor's `workspace_offset` counts from the start of the launch's
    /// workspace memory, `aicpus × workspace_arena` bytes (below 4 GiB).
    pub workspace_arena: u32,
    /// 0: the program's choice (shared cores for every program today); 1: shared cores (an
    /// AICPU hands tasks to its home share of each pool and to idle AICPUs' cores); 2: a fixed
    /// partition (core `c` of a pool to AICPU `c mod aicpus`). spec/runtime.md §4.6.
    pub core_alloc: u32,
    /// Address of the launch's workspace memory, which descriptors add to their offsets
    /// (`workspace_addr`); 0: none given (offsets only).
    pub workspace_base: u64,
}

/// Memory a launch needs (C: `ptovm_sizes`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtovmSizes {
    /// Bytes of the shared region.
    pub shared_bytes: u64,
    /// Bytes of each AICPU's instance region.
    pub instance_bytes: u64,
    /// AICPUs of the launch.
    pub aicpus: u32,
    /// Window slots per AICPU (as placed: benchmark mode has four times the window).
    pub slots: u32,
    /// Cores (cube first).
    pub cores: u32,
    /// Runtime parameters the program takes.
    pub params: u32,
}

/// One runtime parameter (C: `ptovm_param`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PtovmParam {
    /// 0: scalar (`value`); 1: array (`data`, `len`); 2: the program's default for this
    /// slot (`value`, `data` and `len` unused).
    pub kind: u32,
    /// A scalar's value.
    pub value: u32,
    /// An array's values.
    pub data: *const u32,
    /// Its length.
    pub len: u32,
}

/// Counters of one AICPU (C: `ptovm_counters`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtovmCounters {
    /// Its tasks that completed.
    pub tasks: u64,
    /// Of those, cube tasks.
    pub cube_tasks: u64,
    /// Registrations on running predecessors.
    pub edges: u64,
    /// Of those, on another AICPU's tasks.
    pub cross_edges: u64,
    /// Times generation found the window full.
    pub window_stalls: u64,
    /// Tasks placed beyond the window (benchmark mode).
    pub overflows: u64,
    /// Other AICPUs' tasks run on its cores.
    pub stolen: u64,
    /// Successor releases.
    pub dep_batches: u64,
    /// Bytecode instructions its interpreter executed.
    pub instructions: u64,
    /// Tasks its interpreter emitted.
    pub emitted: u64,
}

/// An upper bound on a program's work with given runtime parameters (C: `ptovm_work`): what a
/// kernel compares with its budget before it launches anything (spec/bytecode.md §5.7).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtovmWork {
    /// Loop iterations all AICPUs together can start (saturating at `UINT64_MAX`).
    pub iterations: u64,
    /// Tasks the program can emit (saturating at `UINT64_MAX`).
    pub tasks: u64,
    /// Expression nodes the launch's planned values took to compute (`@plan`; at most
    /// 2^26, spec/bytecode.md §3.6.2): planning's cost on each AICPU.
    pub planning: u64,
}

/// A task as a core sees it (C: `ptovm_task`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtovmTask {
    /// Program-order id.
    pub id: u64,
    /// The AICPU that owns it.
    pub aicpu: u32,
    /// Its window slot.
    pub slot: u32,
    /// Kernel index.
    pub kernel: u32,
    /// 0 cube, 1 vector.
    pub pool: u32,
}

/// The global TensorMap behind the spin lock (the device spins while it waits).
struct DevMap(SpinLock<TensorMap<Slices<'static>>>);

impl MapLock for DevMap {
    type Mem = Slices<'static>;
    fn with_map<R>(&self, f: impl FnOnce(&mut TensorMap<Slices<'static>>) -> R) -> R {
        f(&mut self.0.lock())
    }
}

type DevShared = Shared<'static, &'static [Cell], DevMap>;

/// The start of the shared region.
#[repr(C, align(128))]
struct SharedHeader {
    magic: AtomicU64,
    /// The error code of the first AICPU that failed (0: none): the others stop too, since
    /// they may be waiting for it.
    failed: AtomicI32,
    /// A core's report that its kernel failed ([`ptovm_core_fail`]): the first report's
    /// message, written once by the core that claims it.
    kernel_failure: kernel::KernelFailure,
    /// Per AICPU: 1 once an instance was built for it (two would corrupt the protocol).
    claimed: &'static [AtomicI32],
    code: *const u8,
    code_len: usize,
    cube: u32,
    cores: u32,
    cfg: Config,
    /// The launch's `exact_deps`: every map of the launch matches regions the same way.
    exact_deps: u32,
    sched: DevShared,
}

/// The start of an instance region.
#[repr(C, align(128))]
struct InstanceHeader {
    magic: u64,
    shared: *const SharedHeader,
    aicpu: *mut Aicpu<'static, 'static, 'static>,
    failed: AtomicI32,
    msg_len: AtomicUsize,
    msg: [u8; MSG],
}

/// A failure: code and message.
struct Fail(i32, Msg);

/// A message in a fixed buffer (truncated if long).
struct Msg {
    buf: [u8; MSG],
    len: usize,
}

impl Msg {
    fn new() -> Msg {
        Msg {
            buf: [0; MSG],
            len: 0,
        }
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl core::fmt::Write for Msg {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = MSG - 1 - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

fn fail(code: i32, args: core::fmt::Arguments<'_>) -> Fail {
    let mut m = Msg::new();
    let _ = m.write_fmt(args);
    Fail(code, m)
}

macro_rules! fail {
    ($code:expr, $($arg:tt)*) => { fail($code, format_args!($($arg)*)) };
}

/// Copies `f`'s message into the caller's buffer (NUL-terminated, truncated) and gives the code.
unsafe fn report(f: Fail, err: *mut u8, err_len: usize) -> i32 {
    if !err.is_null() && err_len > 0 {
        let n = f.1.len.min(err_len - 1);
        // SAFETY: the caller gives `err_len` writable bytes at `err`.
        unsafe {
            ptr::copy_nonoverlapping(f.1.buf.as_ptr(), err, n);
            *err.add(n) = 0;
        }
    }
    f.0
}

/// Places typed arrays in a region (or measures them, with a null base).
struct Carve {
    base: usize,
    size: usize,
    off: usize,
}

impl Carve {
    fn new(base: *mut c_void, size: usize) -> Result<Carve, Fail> {
        if !(base as usize).is_multiple_of(PTOVM_ALIGN) {
            return Err(fail!(
                PTOVM_E_MEMORY,
                "memory at {:p} is not aligned to {PTOVM_ALIGN} bytes",
                base
            ));
        }
        Ok(Carve {
            base: base as usize,
            size,
            off: 0,
        })
    }
    fn measure() -> Carve {
        Carve {
            base: 0,
            size: usize::MAX,
            off: 0,
        }
    }
    /// `n` values of `T`, aligned (one copy of the arithmetic for every `T`).
    #[inline]
    fn take<T>(&mut self, n: usize, what: &str) -> Result<*mut T, Fail> {
        self.take_bytes(n, size_of::<T>(), align_of::<T>(), what)
            .map(|p| p as *mut T)
    }

    fn take_bytes(
        &mut self,
        n: usize,
        size: usize,
        align: usize,
        what: &str,
    ) -> Result<usize, Fail> {
        let a = align.max(1);
        let start = self
            .off
            .checked_add(a - 1)
            .map(|x| x & !(a - 1))
            .and_then(|s| n.checked_mul(size).map(|b| (s, b)))
            .and_then(|(s, b)| s.checked_add(b).map(|e| (s, e)));
        let Some((start, end)) = start else {
            return Err(fail!(
                PTOVM_E_MEMORY,
                "the {what} overflow the address space"
            ));
        };
        if end > self.size {
            return Err(fail!(
                PTOVM_E_MEMORY,
                "the region is {} bytes; the {what} need it to be at least {end}",
                self.size
            ));
        }
        self.off = end;
        Ok(self.base + start)
    }
}

/// Writes `n` values made by `f` at `p` and gives the slice.
///
/// # Safety
/// `p` is valid for `n` writes of `T`, aligned, and lives (untouched by others) for `'static`.
unsafe fn fill<T>(p: *mut T, n: usize, mut f: impl FnMut(usize) -> T) -> &'static mut [T] {
    for i in 0..n {
        // SAFETY: the caller's contract.
        unsafe { p.add(i).write(f(i)) };
    }
    // SAFETY: all `n` values were written just now.
    unsafe { core::slice::from_raw_parts_mut(p, n) }
}

/// A verified program from the caller's bytes.
unsafe fn program(code: *const u8, len: usize) -> Result<Verified<'static>, Fail> {
    if code.is_null() || len == 0 {
        return Err(fail!(PTOVM_E_ARGUMENT, "no bytecode"));
    }
    // SAFETY: the caller keeps `len` bytes at `code` alive and unchanged for the launch.
    let bytes: &'static [u8] = unsafe { core::slice::from_raw_parts(code, len) };
    verify(bytes).map_err(|e| fail!(PTOVM_E_VERIFY, "bytecode rejected: {e}"))
}

/// The launch after defaults and checks.
struct Plan {
    n: u32,
    cap: u32,
    cube: u32,
    vector: u32,
    cfg: Config,
    mode: MatchMode,
    layout: MapLayout,
    /// Each AICPU's own map (§3.5 of spec/runtime.md): handles are its slots.
    local: MapLayout,
    params: u32,
    tensors: usize,
    /// Kernels of the program (a core-limit counter each).
    kernels: usize,
    /// Words of a window slot's descriptor (`desc::slot_words`).
    desc_words: usize,
    /// The launch's workspace memory.
    workspace: Workspace,
}

fn plan(v: &Verified<'_>, l: &PtovmLaunch) -> Result<Plan, Fail> {
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
struct MapMem {
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
unsafe fn shared_layout(
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
    let nodes: *mut Node = c.take(n * cap * NODES, "waiter nodes")?;
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
        let nodes = fill(nodes, n * cap * NODES, |_| Node::default());
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
fn own_cores(p: &Plan, a: u32) -> impl Iterator<Item = u32> + '_ {
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
unsafe fn instance_layout(
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
    let preds: *mut Pred = c.take(n * cap, "predecessor scratch")?;
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
            preds: fill(preds, n * cap, |_| Pred::default()),
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

/// The ABI version ([`PTOVM_ABI_VERSION`]).
#[no_mangle]
pub extern "C" fn ptovm_abi_version() -> u32 {
    PTOVM_ABI_VERSION
}

/// Verifies the bytecode and says how much memory a launch needs: `out` gets the shared and
/// per-instance region sizes. Returns 0 or an error code, with a message in `err` (`err_len`
/// bytes, NUL-terminated; may be null).
///
/// # Safety
/// `code` points to `len` readable bytes; `launch` and `out` are valid (`out` writable); `err`
/// is null or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ptovm_layout(
    code: *const u8,
    len: usize,
    launch: *const PtovmLaunch,
    out: *mut PtovmSizes,
    err: *mut u8,
    err_len: usize,
) -> i32 {
    // SAFETY: the caller's contract.
    match unsafe { layout(code, len, launch) } {
        Ok(s) => {
            if out.is_null() {
                // SAFETY: as above.
                return unsafe { report(fail!(PTOVM_E_ARGUMENT, "no output"), err, err_len) };
            }
            // SAFETY: `out` is valid and writable.
            unsafe { out.write(s) };
            PTOVM_OK
        }
        // SAFETY: as above.
        Err(f) => unsafe { report(f, err, err_len) },
    }
}

unsafe fn layout(
    code: *const u8,
    len: usize,
    launch: *const PtovmLaunch,
) -> Result<PtovmSizes, Fail> {
    // SAFETY: the caller's contract.
    let v = unsafe { program(code, len)? };
    if launch.is_null() {
        return Err(fail!(PTOVM_E_ARGUMENT, "no launch settings"));
    }
    // SAFETY: `launch` is valid.
    let p = plan(&v, unsafe { &*launch })?;
    let mut s = Carve::measure();
    // SAFETY: a measuring carve writes nothing.
    unsafe { shared_layout(&mut s, code, len, &p)? };
    let mut inst = 0;
    for a in 0..p.n {
        let mut c = Carve::measure();
        // SAFETY: as above.
        unsafe {
            instance_layout(
                &mut c,
                &p,
                a,
                v,
                ptr::null(),
                (ptr::null(), 0),
                (ptr::null(), 0),
            )?
        };
        inst = inst.max(c.off);
    }
    Ok(PtovmSizes {
        shared_bytes: s.off as u64,
        instance_bytes: inst as u64,
        aicpus: p.n,
        slots: p.cap,
        cores: p.cube + p.vector,
        params: p.params,
    })
}

/// Verifies the bytecode, checks the runtime parameters against it and gives, in `out`, an
/// upper bound on the work of a launch: the loop iterations all AICPUs together can start and
/// the tasks the program can emit, every loop at the largest extent its axis can have and every
/// `cond` branch taken (one pass over the code: nothing is run or counted). Verified bytecode
/// always ends; this is how a kernel refuses, before launching, a program that would run longer
/// than its budget. Returns 0 or an error code ([`PTOVM_E_VERIFY`], [`PTOVM_E_PARAMS`],
/// [`PTOVM_E_RUN`] when evaluating the program's launch-time selector fails,
/// [`PTOVM_E_ARGUMENT`]), with a message in `err`.
///
/// # Safety
/// `code` points to `len` readable bytes; `params` points to `nparams` entries (as for
/// [`ptovm_instance_init`]; may be null when `nparams` is 0); `out` is valid and writable;
/// `err` is null or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ptovm_work_bound(
    code: *const u8,
    len: usize,
    params: *const PtovmParam,
    nparams: u32,
    out: *mut PtovmWork,
    err: *mut u8,
    err_len: usize,
) -> i32 {
    // SAFETY: the caller's contract.
    let r = unsafe { work_bound(code, len, params, nparams) }.and_then(|w| {
        if out.is_null() {
            return Err(fail!(PTOVM_E_ARGUMENT, "no output"));
        }
        // SAFETY: `out` is valid and writable.
        unsafe { out.write(w) };
        Ok(())
    });
    match r {
        Ok(()) => PTOVM_OK,
        // SAFETY: as above.
        Err(f) => unsafe { report(f, err, err_len) },
    }
}

/// An interpreter that could not start: its parameters, or its launch-time evaluation.
fn launch_fail(e: LaunchError) -> Fail {
    match e {
        LaunchError::Params(e) => fail!(PTOVM_E_PARAMS, "launch: {e}"),
        LaunchError::Run(e) => fail!(PTOVM_E_RUN, "launch: {e}"),
    }
}

/// Runtime parameter `i` as a value.
///
/// # Safety
/// An array's `data` points to `len` readable values that live for `'a`.
unsafe fn value_of<'a>(v: &Verified<'a>, q: PtovmParam, i: usize) -> Result<Value<'a>, Fail> {
    if q.kind == 2 {
        let Some(d) = v.param_default(i) else {
            return Err(fail!(
                PTOVM_E_PARAMS,
                "runtime parameter {i}: kind 2 asks for the program's default, but the slot has none"
            ));
        };
        return d.as_value().ok_or_else(|| {
            fail!(
                PTOVM_E_PARAMS,
                "runtime parameter {i}: its default cannot be read in place (the bytecode is not 4-byte aligned); pass the value"
            )
        });
    }
    match (q.kind, q.data.is_null() && q.len > 0) {
        (0, _) => Ok(Value::Scalar(q.value)),
        (1, false) if q.len == 0 => Ok(Value::Array(&[])),
        // SAFETY: the caller's contract.
        (1, false) => Ok(Value::Array(unsafe {
            core::slice::from_raw_parts(q.data, q.len as usize)
        })),
        _ => Err(fail!(
            PTOVM_E_PARAMS,
            "runtime parameter {i}: kind must be 0 (scalar), 1 (array with data) or 2 (the default)"
        )),
    }
}

unsafe fn work_bound(
    code: *const u8,
    len: usize,
    params: *const PtovmParam,
    nparams: u32,
) -> Result<PtovmWork, Fail> {
    // SAFETY: the caller's contract.
    let v = unsafe { program(code, len)? };
    let want = v.params().len();
    if nparams as usize != want || (nparams > 0 && params.is_null()) {
        return Err(fail!(
            PTOVM_E_PARAMS,
            "the program takes {want} runtime parameters; {nparams} were given"
        ));
    }
    // The values on the stack: at most `MAX_PARAMS` of them (the verifier's limit).
    let mut values = [Value::Scalar(0); ptovm_vm::limits::MAX_PARAMS as usize];
    let values = values
        .get_mut(..want)
        .ok_or_else(|| fail!(PTOVM_E_PARAMS, "{want} runtime parameters"))?;
    for (i, slot) in values.iter_mut().enumerate() {
        // SAFETY: `params` holds `nparams` entries whose arrays are readable until this
        // function returns.
        *slot = unsafe { value_of(&v, *params.add(i), i)? };
    }
    let rp = RuntimeParams::new(&v, values)
        .map_err(|e| fail!(PTOVM_E_PARAMS, "runtime parameters: {e}"))?;
    let it = Interpreter::new(v, rp, 0, 1).map_err(launch_fail)?;
    let b = it.work_bound();
    Ok(PtovmWork {
        iterations: b.iterations,
        tasks: b.tasks,
        planning: b.planning,
    })
}

/// Lays out the shared region of a launch in `mem` (`size` bytes, aligned to 128): call once,
/// before any AICPU calls [`ptovm_instance_init`]. The bytecode is verified here; it must stay
/// in place, unchanged, for the launch.
///
/// # Safety
/// As [`ptovm_layout`]; `mem` points to `size` writable bytes that nothing else uses during the
/// launch.
#[no_mangle]
pub unsafe extern "C" fn ptovm_shared_init(
    mem: *mut c_void,
    size: usize,
    code: *const u8,
    len: usize,
    launch: *const PtovmLaunch,
    err: *mut u8,
    err_len: usize,
) -> i32 {
    let r = (|| {
        if mem.is_null() || launch.is_null() {
            return Err(fail!(PTOVM_E_ARGUMENT, "no memory or no launch settings"));
        }
        // SAFETY: the caller's contract.
        let v = unsafe { program(code, len)? };
        // SAFETY: `launch` is valid.
        let p = plan(&v, unsafe { &*launch })?;
        let mut c = Carve::new(mem, size)?;
        // Size first, so that a short region fails before anything is written.
        let mut m = Carve::measure();
        // SAFETY: a measuring carve writes nothing.
        unsafe { shared_layout(&mut m, code, len, &p)? };
        if m.off > size {
            return Err(fail!(
                PTOVM_E_MEMORY,
                "the shared region is {size} bytes; it needs {}",
                m.off
            ));
        }
        // SAFETY: the caller's contract on `mem`.
        unsafe { shared_layout(&mut c, code, len, &p)? };
        Ok(())
    })();
    match r {
        Ok(()) => PTOVM_OK,
        // SAFETY: the caller's contract on `err`.
        Err(f) => unsafe { report(f, err, err_len) },
    }
}

unsafe fn shared_header(shared: *const c_void) -> Result<&'static SharedHeader, Fail> {
    if shared.is_null() || !(shared as usize).is_multiple_of(PTOVM_ALIGN) {
        return Err(fail!(PTOVM_E_ARGUMENT, "no shared region"));
    }
    // SAFETY: the caller gives a region of at least a header's size; the magic says whether
    // ptovm laid it out.
    let h = unsafe { &*(shared as *const SharedHeader) };
    if h.magic.load(Ordering::Acquire) != SHARED_MAGIC {
        return Err(fail!(
            PTOVM_E_STATE,
            "the shared region was not laid out by ptovm_shared_init"
        ));
    }
    Ok(h)
}

/// Builds AICPU `aicpu`'s instance in `mem` (`size` bytes, aligned to 128) over the shared
/// region `shared`, with the program's runtime parameters (`params`, `nparams` of them; their
/// arrays stay in place for the launch) and the tensors' bindings to memory (`tensors`: one
/// `ptovm_tensor` per tensor of the program, the same on every AICPU, copied; or `ntensors =
/// 0`: none bound, and descriptors give element offsets only). The bytecode is verified again
/// here. One instance per AICPU and shared region: a second one for the same AICPU is refused.
/// Returns 0 or an error code with a message in `err` ([`PTOVM_E_BIND`] for a binding the
/// declarations refuse).
///
/// # Safety
/// `shared` was laid out by [`ptovm_shared_init`]; `mem` points to `size` writable bytes used by
/// nothing else during the launch; `params` points to `nparams` entries and `tensors` to
/// `ntensors`; `err` as in [`ptovm_layout`]. One thread uses an instance at a time.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ptovm_instance_init(
    mem: *mut c_void,
    size: usize,
    shared: *const c_void,
    params: *const PtovmParam,
    nparams: u32,
    tensors: *const TensorArg,
    ntensors: u32,
    aicpu: u32,
    err: *mut u8,
    err_len: usize,
) -> i32 {
    let r = (|| {
        // SAFETY: the caller's contract.
        let h = unsafe { shared_header(shared)? };
        if mem.is_null() {
            return Err(fail!(PTOVM_E_ARGUMENT, "no instance memory"));
        }
        // SAFETY: the shared region keeps the bytecode's pointer from its own init.
        let v = unsafe { program(h.code, h.code_len)? };
        let launch = PtovmLaunch {
            aicpus: h.sched.n,
            window: h.cfg.window,
            cube_cores: h.cube,
            vector_cores: h.cores - h.cube,
            window_mode: h.cfg.mode as i32,
            exact_deps: h.exact_deps,
            workspace_arena: h.sched.workspace.arena,
            core_alloc: 0,
            workspace_base: h.sched.workspace.base,
        };
        let mut p = plan(&v, &launch)?;
        p.cfg = h.cfg;
        if aicpu >= p.n {
            return Err(fail!(
                PTOVM_E_ARGUMENT,
                "AICPU {aicpu} of a launch of {}",
                p.n
            ));
        }
        let mut m = Carve::measure();
        // SAFETY: a measuring carve writes nothing.
        unsafe {
            instance_layout(
                &mut m,
                &p,
                aicpu,
                v,
                ptr::null(),
                (ptr::null(), 0),
                (ptr::null(), 0),
            )?
        };
        if m.off > size {
            return Err(fail!(
                PTOVM_E_MEMORY,
                "the instance region is {size} bytes; it needs {}",
                m.off
            ));
        }
        let mut c = Carve::new(mem, size)?;
        if h.claimed[aicpu as usize]
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Err(fail!(
                PTOVM_E_STATE,
                "AICPU {aicpu} already has an instance on this shared region"
            ));
        }
        // SAFETY: the caller's contract.
        let built = unsafe {
            instance_layout(
                &mut c,
                &p,
                aicpu,
                v,
                h,
                (params, nparams),
                (tensors, ntensors),
            )
        };
        if built.is_err() {
            // Nothing of this AICPU runs yet: another attempt (with good parameters) may claim it.
            h.claimed[aicpu as usize].store(0, Ordering::Release);
        }
        built?;
        Ok(())
    })();
    match r {
        Ok(()) => PTOVM_OK,
        // SAFETY: the caller's contract on `err`.
        Err(f) => unsafe { report(f, err, err_len) },
    }
}

/// The environment of a device AICPU: its own thread, always running, so nothing to wake;
/// cores poll their handshake slots, so nothing to ring; the clock of `rate_limit` timing is
/// the processor's.
struct Device;
impl Env for Device {
    fn wake(&mut self, _: u32) {}
    fn ring(&mut self, _: u32) {}
    fn now_ns(&mut self) -> u64 {
        now_ns()
    }
    /// Reads a bound tensor's 32-bit elements (row-major, through its strides) after every
    /// task before the READBACK has completed: the cores' writes were acquired through their
    /// handshakes and the barrier (spec/runtime.md §4.5); on AArch64 each line is cleaned and
    /// invalidated first (`dc civac`, then `dsb sy`), for data a DMA engine wrote past the
    /// caches. An unbound tensor keeps the launch's values.
    fn read_back(&mut self, _: u32, _: u16, b: &Binding, into: &mut [u32]) -> bool {
        if b.base == 0 || b.elem_bytes != 4 || b.rank == 0 {
            return false;
        }
        let rank = (b.rank as usize).min(b.dims.len());
        for (k, x) in into.iter_mut().enumerate() {
            // Row-major index k → element offset through the binding's strides.
            let (mut rest, mut offset) = (k as u64, 0u64);
            for d in (0..rank).rev() {
                let dim = u64::from(b.dims[d].max(1));
                offset += (rest % dim) * b.strides[d] as u64;
                rest /= dim;
            }
            let addr = b.base + offset * 4;
            invalidate(addr);
            // SAFETY: `Binding::bind` checked that the launcher's memory from `base` holds
            // every element the shape reaches with these strides, 4-byte aligned; the memory
            // lives for the launch (the launcher's contract) and no task writes it now.
            *x = unsafe { core::ptr::read_volatile(addr as *const u32) };
        }
        sync_reads();
        true
    }
}

/// Cleans and invalidates the cache line holding `addr` (AArch64 `dc civac`).
#[inline]
fn invalidate(addr: u64) {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: cache maintenance on a mapped address of the tensor; no other effect.
    unsafe {
        core::arch::asm!("dc civac, {a}", a = in(reg) addr, options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "aarch64"))]
    let _ = addr;
}

/// Orders the reads after the cache maintenance (AArch64 `dsb sy`).
#[inline]
fn sync_reads() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory is accessed.
    unsafe {
        core::arch::asm!("dsb sy", options(nostack, preserves_flags));
    }
}

/// Nanoseconds of the AArch64 generic timer: `CNTVCT_EL0` ticks at `CNTFRQ_EL0` Hz (both
/// readable at EL0, where AICPU kernels run). A timer whose frequency firmware left at 0 counts
/// as 1 GHz rather than dividing by zero.
#[cfg(target_arch = "aarch64")]
fn now_ns() -> u64 {
    let (ticks, freq): (u64, u64);
    // SAFETY: reads two system registers; no memory, no side effects (the ISB orders the read
    // after the instructions before it).
    unsafe {
        core::arch::asm!(
            "isb",
            "mrs {t}, cntvct_el0",
            "mrs {f}, cntfrq_el0",
            t = out(reg) ticks,
            f = out(reg) freq,
            options(nomem, nostack, preserves_flags),
        );
    }
    if freq == 0 {
        return ticks;
    }
    (ticks as u128 * 1_000_000_000 / freq as u128) as u64
}

/// Elsewhere (the host's tests): the operating system's monotonic clock, from the first reading.
#[cfg(not(target_arch = "aarch64"))]
fn now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

unsafe fn instance(inst: *mut c_void) -> Result<&'static mut InstanceHeader, i32> {
    if inst.is_null() || !(inst as usize).is_multiple_of(PTOVM_ALIGN) {
        return Err(PTOVM_E_ARGUMENT);
    }
    // SAFETY: the caller gives an instance region; the magic says whether ptovm built it.
    let h = unsafe { &mut *(inst as *mut InstanceHeader) };
    if h.magic != INSTANCE_MAGIC {
        return Err(PTOVM_E_STATE);
    }
    Ok(h)
}

fn code_of(e: &SchedError) -> i32 {
    match e {
        SchedError::Run(_) => PTOVM_E_RUN,
        SchedError::WindowAbort { .. } => PTOVM_E_WINDOW,
        SchedError::Bind(_) => PTOVM_E_BIND,
        SchedError::Workspace { .. } => PTOVM_E_ARGUMENT,
        _ => PTOVM_E_STATE,
    }
}

/// One round of AICPU `inst`'s scheduler loop (spec/runtime.md §4.3): returns
/// [`PTOVM_PROGRESS`], [`PTOVM_OK`] (nothing to do right now), [`PTOVM_FINISHED`] or an error
/// code (then [`ptovm_error`] says what happened, and every later call returns
/// [`PTOVM_E_FAILED`]). Once one AICPU of the launch has failed, the others' next steps return
/// [`PTOVM_E_FAILED`] too ("another AICPU failed"): they may be waiting for it.
///
/// # Safety
/// `inst` was built by [`ptovm_instance_init`] and is used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn ptovm_step(inst: *mut c_void) -> i32 {
    // SAFETY: the caller's contract.
    let h = match unsafe { instance(inst) } {
        Ok(h) => h,
        Err(code) => return code,
    };
    if h.failed.load(Ordering::Relaxed) != 0 {
        return PTOVM_E_FAILED;
    }
    // SAFETY: the instance's scheduler and its shared region were built by the inits, and this
    // thread alone uses the instance.
    let (aicpu, shared) = unsafe { (&mut *h.aicpu, &*h.shared) };
    let other = shared.failed.load(Ordering::Acquire);
    if other != 0 {
        let mut m = Msg::new();
        let _ = write!(
            m,
            "AICPU {}: stopped: another AICPU failed ({other})",
            aicpu.index()
        );
        h.msg[..m.len].copy_from_slice(&m.buf[..m.len]);
        h.msg_len.store(m.len, Ordering::Relaxed);
        h.failed.store(PTOVM_E_FAILED, Ordering::Release);
        return PTOVM_E_FAILED;
    }
    match aicpu.step(&shared.sched, &shared.cfg, &mut Device) {
        Ok(_) if aicpu.finished() => PTOVM_FINISHED,
        Ok(true) => PTOVM_PROGRESS,
        Ok(false) => PTOVM_OK,
        Err(e) => {
            let code = code_of(&e);
            let mut m = Msg::new();
            let _ = write!(m, "AICPU {}: {e}", aicpu.index());
            h.msg[..m.len].copy_from_slice(&m.buf[..m.len]);
            h.msg_len.store(m.len, Ordering::Relaxed);
            h.failed.store(code, Ordering::Release);
            let _ = shared
                .failed
                .compare_exchange(0, code, Ordering::AcqRel, Ordering::Relaxed);
            code
        }
    }
}

/// Runs AICPU `inst` until all its tasks have completed ([`PTOVM_FINISHED`]) or it fails (an
/// error code). While it has nothing to do it spins with the processor's pause hint.
///
/// # Safety
/// As [`ptovm_step`].
#[no_mangle]
pub unsafe extern "C" fn ptovm_run(inst: *mut c_void) -> i32 {
    let mut idle = 0u32;
    loop {
        // SAFETY: the caller's contract.
        match unsafe { ptovm_step(inst) } {
            PTOVM_PROGRESS => idle = 0,
            PTOVM_OK => {
                idle = (idle + 1).min(10);
                for _ in 0..(1u32 << idle) {
                    core::hint::spin_loop();
                }
            }
            other => return other,
        }
    }
}

/// Copies the message of the instance's failure (empty if none) into `buf` (`len` bytes,
/// NUL-terminated, truncated); returns the message's length.
///
/// # Safety
/// `inst` as in [`ptovm_step`]; `buf` is null or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ptovm_error(inst: *mut c_void, buf: *mut u8, len: usize) -> usize {
    // SAFETY: the caller's contract.
    let Ok(h) = (unsafe { instance(inst) }) else {
        return 0;
    };
    let n = h.msg_len.load(Ordering::Relaxed).min(MSG);
    if !buf.is_null() && len > 0 {
        let k = n.min(len - 1);
        // SAFETY: `buf` has `len` writable bytes.
        unsafe {
            ptr::copy_nonoverlapping(h.msg.as_ptr(), buf, k);
            *buf.add(k) = 0;
        }
    }
    n
}

/// The instance's counters.
///
/// # Safety
/// `inst` as in [`ptovm_step`]; `out` valid and writable.
#[no_mangle]
pub unsafe extern "C" fn ptovm_read_counters(inst: *mut c_void, out: *mut PtovmCounters) -> i32 {
    // SAFETY: the caller's contract.
    let h = match unsafe { instance(inst) } {
        Ok(h) => h,
        Err(code) => return code,
    };
    if out.is_null() {
        return PTOVM_E_ARGUMENT;
    }
    // SAFETY: built by the init; read by the thread that runs it.
    let a = unsafe { &*h.aicpu };
    let k = a.counts();
    let st = a.interpreter().stats();
    // SAFETY: `out` is valid.
    unsafe {
        out.write(PtovmCounters {
            tasks: k.tasks,
            cube_tasks: k.cube,
            edges: k.edges,
            cross_edges: k.cross,
            window_stalls: k.stalls,
            overflows: k.overflows,
            stolen: k.stolen,
            dep_batches: k.batches,
            instructions: st.instructions,
            emitted: st.emitted,
        })
    };
    PTOVM_OK
}

unsafe fn core_slot(
    shared: *const c_void,
    core: u32,
) -> Result<(&'static SharedHeader, &'static CoreSlot), i32> {
    // SAFETY: the caller's contract.
    let h = unsafe { shared_header(shared) }.map_err(|f| f.0)?;
    let s = h.sched.cores.get(core as usize).ok_or(PTOVM_E_ARGUMENT)?;
    Ok((h, s))
}

/// The window slot of the task a core holds, from its handshake word (owner AICPU in the high
/// half, slot in the low): the AICPU, the slot and its record; `None` for a word outside the
/// windows.
fn held_slot(h: &SharedHeader, word: u64) -> Option<(u32, u32, &Slot)> {
    let (aicpu, slot) = ((word >> 32) as u32, word as u32);
    let ts = h
        .sched
        .slots
        .get(aicpu as usize * h.sched.cap as usize + slot as usize)?;
    Some((aicpu, slot, ts))
}

/// AICore side: if core `core` has been handed a task, fills `task` and returns 1; 0 if not;
/// an error code for a bad core or region.
///
/// # Safety
/// `shared` was laid out by [`ptovm_shared_init`]; `task` valid and writable.
#[no_mangle]
pub unsafe extern "C" fn ptovm_core_take(
    shared: *const c_void,
    core: u32,
    task: *mut PtovmTask,
) -> i32 {
    // SAFETY: the caller's contract.
    let (h, s) = match unsafe { core_slot(shared, core) } {
        Ok(x) => x,
        Err(code) => return code,
    };
    if task.is_null() {
        return PTOVM_E_ARGUMENT;
    }
    let Some(word) = s.take() else { return 0 };
    let Some((aicpu, slot, ts)) = held_slot(h, word) else {
        return PTOVM_E_STATE;
    };
    // SAFETY: `task` is valid.
    unsafe {
        task.write(PtovmTask {
            id: ts.task.load(Ordering::Acquire),
            aicpu,
            slot,
            kernel: ts.kernel.load(Ordering::Relaxed),
            pool: ts.pool.load(Ordering::Relaxed),
        })
    };
    1
}

/// AICore side: if core `core` holds a task (taken and not yet finished), copies its
/// descriptor (spec/runtime.md §3.8: parameters, regions resolved against the tensors) into
/// `desc` and returns 1; 0 if it holds none; an error code for a bad core or region.
///
/// # Safety
/// `shared` was laid out by [`ptovm_shared_init`]; `desc` valid and writable.
#[no_mangle]
pub unsafe extern "C" fn ptovm_core_descriptor(
    shared: *const c_void,
    core: u32,
    desc: *mut Descriptor,
) -> i32 {
    // SAFETY: the caller's contract.
    let (h, s) = match unsafe { core_slot(shared, core) } {
        Ok(x) => x,
        Err(code) => return code,
    };
    if desc.is_null() {
        return PTOVM_E_ARGUMENT;
    }
    let Some(word) = s.take() else { return 0 };
    let (aicpu, slot) = ((word >> 32) as u32, word as u32);
    let words = h.sched.desc(aicpu, slot);
    if words.is_empty() {
        return PTOVM_E_STATE;
    }
    // SAFETY: `desc` is valid.
    unsafe { desc.write(desc::read(words)) };
    1
}

/// AICore side: core `core`'s task is done (its results written before this call).
///
/// # Safety
/// As [`ptovm_core_take`].
#[no_mangle]
pub unsafe extern "C" fn ptovm_core_finish(shared: *const c_void, core: u32) -> i32 {
    // SAFETY: the caller's contract.
    match unsafe { core_slot(shared, core) } {
        Ok((_, s)) => {
            s.finish();
            PTOVM_OK
        }
        Err(code) => code,
    }
}

/// Tells every core to leave its loop (`control = SHUTDOWN`).
///
/// # Safety
/// As [`ptovm_core_take`].
#[no_mangle]
pub unsafe extern "C" fn ptovm_shutdown(shared: *const c_void) -> i32 {
    // SAFETY: the caller's contract.
    match unsafe { shared_header(shared) } {
        Ok(h) => {
            h.sched.cores.iter().for_each(CoreSlot::shut_down);
            PTOVM_OK
        }
        Err(f) => f.0,
    }
}

/// AICore side: 1 if core `core` should leave its loop, 0 if not, or an error code.
///
/// # Safety
/// As [`ptovm_core_take`].
#[no_mangle]
pub unsafe extern "C" fn ptovm_core_stopping(shared: *const c_void, core: u32) -> i32 {
    // SAFETY: the caller's contract.
    match unsafe { core_slot(shared, core) } {
        Ok((_, s)) => i32::from(s.shutting_down()),
        Err(code) => code,
    }
}

/// Set by the panic handler (a bug in ptovm: inputs never panic).
static PANICKED: AtomicI32 = AtomicI32::new(0);
/// A function the AICPU kernel registers to learn of a panic (`extern "C" fn(i32)`), or 0.
static PANIC_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Registers `hook`, called with [`PTOVM_E_STATE`] if ptovm ever panics (which would be a bug;
/// the panicking thread then spins forever instead of unwinding). Null removes it.
#[no_mangle]
pub extern "C" fn ptovm_set_panic_hook(hook: Option<extern "C" fn(i32)>) {
    PANIC_HOOK.store(hook.map_or(0, |f| f as usize), Ordering::Release);
}

/// Whether ptovm has panicked (1) or not (0).
#[no_mangle]
pub extern "C" fn ptovm_panicked() -> i32 {
    PANICKED.load(Ordering::Acquire)
}

/// The panic handler of every `no_std` build (the static library, the AICPU shared object): a
/// panic would be a bug; it is recorded ([`ptovm_panicked`]), the hook of
/// [`ptovm_set_panic_hook`] is called, and the thread spins forever instead of unwinding.
#[cfg(any(target_os = "none", target_arch = "aarch64"))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    PANICKED.store(1, Ordering::Release);
    let hook = PANIC_HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: only `ptovm_set_panic_hook` stores here, from an `extern "C" fn(i32)`.
        let f: extern "C" fn(i32) = unsafe { core::mem::transmute(hook) };
        f(PTOVM_E_STATE);
    }
    loop {
        core::hint::spin_loop();
    }
}
