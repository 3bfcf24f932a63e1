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
//!
//! This file holds the C types, the region headers and the failure messages; the regions'
//! layout is in `region.rs`, the launch's entry points in `launch.rs`, running an AICPU in
//! `run.rs`, the AICore side of the handshake in `aicore.rs`, the panic handler in `panic.rs`
//! and the AICPU kernel's entry points in `kernel.rs`.
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
    cores as core_bits, joins_len, nodes_len, once_len, preds_len, Aicpu, Busy, Config, CoreAlloc,
    Env, Local, MapLock, Node, Padded, Pred, SchedError, Shared, Slot, Workspace,
    CORE_WAITER_WORDS,
};
use ptovm_vm::share::Sharing;
use ptovm_vm::spin::SpinLock;
use ptovm_vm::tmap::{Entry, MapLayout, MatchMode, Slices, TensorMap};
use ptovm_vm::{verify, Interpreter, Io, LaunchError, RuntimeParams, Value, Verified, WindowMode};

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

mod aicore;
mod launch;
mod panic;
// Last: cbindgen writes the header's functions in declaration order.
mod kernel;
mod region;
mod run;
use aicore::*;
pub use aicore::{
    ptovm_core_descriptor, ptovm_core_finish, ptovm_core_stopping, ptovm_core_take, ptovm_shutdown,
};
use launch::*;
pub use launch::{
    ptovm_abi_version, ptovm_instance_init, ptovm_layout, ptovm_shared_init, ptovm_work_bound,
};
pub use panic::{ptovm_panicked, ptovm_set_panic_hook};
use region::*;
use run::*;
pub use run::{ptovm_error, ptovm_read_counters, ptovm_run, ptovm_step};
