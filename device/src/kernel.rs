//! The AICPU kernel's entry points: what a CANN launch calls in `libptovm_aicpu.so`.
//!
//! An AICPU kernel is a shared object whose exported functions take one `void *` and return
//! 0 on success (the official PTO runtime's `simpler_aicpu_init` / `simpler_aicpu_exec`, which
//! the host resolves by name in the loaded `.so` and launches on the AICPU's threads). ptovm's
//! are [`ptovm_aicpu_init`], launched once before a run, and [`ptovm_aicpu_exec`], launched on
//! every AICPU thread of the run; both take a [`PtovmKernelArgs`] the host placed in device
//! memory. Every exec thread claims the next AICPU index, builds its instance and runs it to
//! the end; a thread beyond the launch's AICPU count returns at once (a launch may start more
//! threads than it uses). The AICores are driven as for the static library: each polls its
//! handshake slot ([`crate::ptovm_core_take`]), reads the task's descriptor, runs the kernel and
//! reports ([`crate::ptovm_core_finish`]); the host calls [`crate::ptovm_shutdown`] once every
//! exec has returned.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};

use ptovm_vm::desc::TensorArg;

use crate::{
    core_slot, held_slot, program, ptovm_error, ptovm_instance_init, ptovm_layout, ptovm_run,
    ptovm_shared_init, shared_header, Msg, PtovmLaunch, PtovmParam, PtovmSizes, MSG, PTOVM_ALIGN,
    PTOVM_E_ARGUMENT, PTOVM_E_FAILED, PTOVM_E_KERNEL, PTOVM_E_MEMORY, PTOVM_E_STATE,
    PTOVM_FINISHED, PTOVM_OK,
};

/// The first kernel failure a core reported, in the shared region.
pub(crate) struct KernelFailure {
    /// 1 once a core has claimed the message (the first report).
    claimed: AtomicU32,
    /// The message's length, stored (Release) once it is written.
    len: AtomicUsize,
    /// The message, written by the claiming core only, before `len`.
    msg: UnsafeCell<[u8; MSG]>,
}

impl KernelFailure {
    pub(crate) const fn new() -> KernelFailure {
        KernelFailure {
            claimed: AtomicU32::new(0),
            len: AtomicUsize::new(0),
            msg: UnsafeCell::new([0; MSG]),
        }
    }

    /// The message, once written (empty before).
    fn message(&self) -> &[u8] {
        let n = self.len.load(Ordering::Acquire);
        // SAFETY: the writer stored `len` (Release) after the bytes and writes them once.
        let msg: &[u8; MSG] = unsafe { &*self.msg.get() };
        &msg[..n.min(MSG)]
    }
}

/// Bytes of [`PtovmKernelArgs::message`].
pub const PTOVM_MESSAGE_BYTES: usize = 256;

/// What a kernel launch passes to [`ptovm_aicpu_init`] and [`ptovm_aicpu_exec`] (C:
/// `ptovm_kernel_args`), in memory every AICPU thread sees. The host fills the inputs; ptovm
/// writes the outputs.
#[repr(C)]
#[derive(Debug)]
pub struct PtovmKernelArgs {
    /// The PTOW bytecode (4-byte aligned; it stays in place for the launch).
    pub code: *const u8,
    /// Its length in bytes.
    pub code_len: usize,
    /// The runtime parameters, `nparams` of them, as for `ptovm_instance_init`.
    pub params: *const PtovmParam,
    /// Runtime parameters given.
    pub nparams: u32,
    /// Tensor bindings given: one per tensor of the program, or 0 (none bound).
    pub ntensors: u32,
    /// The tensors' bindings to device memory (`ptovm_tensor`), `ntensors` of them.
    pub tensors: *const TensorArg,
    /// The launch's settings, as for `ptovm_layout`.
    pub launch: PtovmLaunch,
    /// The shared region: `shared_bytes` bytes, aligned to 128.
    pub shared: *mut c_void,
    /// Its size (at least `ptovm_layout`'s `shared_bytes`).
    pub shared_bytes: usize,
    /// The instance regions, one per AICPU, `instance_bytes` apart, aligned to 128.
    pub instances: *mut c_void,
    /// Bytes of each instance region: at least `ptovm_layout`'s `instance_bytes`, a multiple
    /// of 128.
    pub instance_bytes: usize,
    /// Output: AICPU indices claimed by exec threads so far (set to 0 by init).
    pub claimed: u32,
    /// Output: 0, or the code of the launch's first failure (set to 0 by init).
    pub status: i32,
    /// Output: the message of that failure, NUL-terminated.
    pub message: [u8; PTOVM_MESSAGE_BYTES],
}

/// Records `code` and `message` as the launch's failure unless one is recorded already.
///
/// # Safety
/// `a` is a valid launch's arguments.
unsafe fn record(a: *mut PtovmKernelArgs, code: i32, message: &[u8]) {
    // SAFETY: the caller's contract; `status` is only accessed atomically during a launch.
    let status = unsafe { AtomicI32::from_ptr(core::ptr::addr_of_mut!((*a).status)) };
    if status
        .compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        let n = message.len().min(PTOVM_MESSAGE_BYTES - 1);
        // SAFETY: the thread that set `status` alone writes the message; the host reads it
        // once every exec has returned.
        let m = unsafe { &mut *core::ptr::addr_of_mut!((*a).message) };
        m[..n].copy_from_slice(&message[..n]);
        m[n] = 0;
    }
}

/// The message of a NUL-terminated buffer.
fn text(buf: &[u8]) -> &[u8] {
    &buf[..buf.iter().position(|&b| b == 0).unwrap_or(buf.len())]
}

/// Prepares a launch (once, before any [`ptovm_aicpu_exec`]): checks the regions against the
/// program's layout, lays out the shared region (`ptovm_shared_init`) and clears the outputs.
/// Returns 0, or an error code with the message in `message`.
///
/// # Safety
/// `arg` points to a [`PtovmKernelArgs`] whose pointers and sizes say the truth; no exec of
/// the launch runs yet.
#[no_mangle]
pub unsafe extern "C" fn ptovm_aicpu_init(arg: *mut c_void) -> i32 {
    let a = arg as *mut PtovmKernelArgs;
    if a.is_null() || !(a as usize).is_multiple_of(core::mem::align_of::<PtovmKernelArgs>()) {
        return PTOVM_E_ARGUMENT;
    }
    // SAFETY: the caller's contract: the host placed the arguments; no exec runs yet.
    let args = unsafe { &mut *a };
    args.claimed = 0;
    args.status = 0;
    args.message[0] = 0;
    let mut sizes = PtovmSizes::default();
    let mut err = [0u8; PTOVM_MESSAGE_BYTES];
    // SAFETY: the caller's contract on the bytecode and the launch settings.
    let rc = unsafe {
        ptovm_layout(
            args.code,
            args.code_len,
            &args.launch,
            &mut sizes,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != PTOVM_OK {
        // SAFETY: `a` is valid.
        unsafe { record(a, rc, text(&err)) };
        return rc;
    }
    let need = sizes.instance_bytes as usize;
    if args.instances.is_null()
        || !(args.instances as usize).is_multiple_of(PTOVM_ALIGN)
        || args.instance_bytes < need
        || !args.instance_bytes.is_multiple_of(PTOVM_ALIGN)
    {
        let mut m = Msg::new();
        let _ = write!(
            m,
            "the instance regions must be aligned to {PTOVM_ALIGN} bytes and {need} bytes or more each, a multiple of {PTOVM_ALIGN}; they are {} bytes at {:p}",
            args.instance_bytes, args.instances
        );
        // SAFETY: `a` is valid.
        unsafe { record(a, PTOVM_E_MEMORY, m.as_bytes()) };
        return PTOVM_E_MEMORY;
    }
    // SAFETY: the caller's contract on the shared region and the bytecode.
    let rc = unsafe {
        ptovm_shared_init(
            args.shared,
            args.shared_bytes,
            args.code,
            args.code_len,
            &args.launch,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != PTOVM_OK {
        // SAFETY: `a` is valid.
        unsafe { record(a, rc, text(&err)) };
    }
    rc
}

/// Runs one AICPU of the launch prepared by [`ptovm_aicpu_init`]: claims the next AICPU index,
/// builds its instance in its region and runs it until all its tasks have completed. Returns 0
/// when they have, or when the launch has no AICPU left for this thread; otherwise the error
/// code, the first failure's code and message recorded in the arguments, and every other AICPU
/// of the launch stops ([`PTOVM_E_FAILED`]) instead of waiting for this one.
///
/// # Safety
/// `arg` is the [`PtovmKernelArgs`] given to [`ptovm_aicpu_init`], which returned 0; every
/// thread of the launch passes the same one.
#[no_mangle]
pub unsafe extern "C" fn ptovm_aicpu_exec(arg: *mut c_void) -> i32 {
    let a = arg as *mut PtovmKernelArgs;
    if a.is_null() || !(a as usize).is_multiple_of(core::mem::align_of::<PtovmKernelArgs>()) {
        return PTOVM_E_ARGUMENT;
    }
    // SAFETY: the caller's contract: the inputs are not written during the launch.
    let (shared, instances, instance_bytes) =
        unsafe { ((*a).shared, (*a).instances, (*a).instance_bytes) };
    // SAFETY: the caller's contract (init laid it out, or the magic says it did not).
    let h = match unsafe { shared_header(shared) } {
        Ok(h) => h,
        Err(f) => {
            // SAFETY: `a` is valid.
            unsafe { record(a, f.0, f.1.as_bytes()) };
            return f.0;
        }
    };
    // SAFETY: `claimed` is only accessed atomically during a launch.
    let claimed = unsafe { AtomicU32::from_ptr(core::ptr::addr_of_mut!((*a).claimed)) };
    let aicpu = claimed.fetch_add(1, Ordering::AcqRel);
    if aicpu >= h.sched.n {
        return PTOVM_OK;
    }
    let inst = (instances as usize + aicpu as usize * instance_bytes) as *mut c_void;
    let mut err = [0u8; PTOVM_MESSAGE_BYTES];
    // SAFETY: init checked the instance regions' size and alignment; this thread alone
    // claimed index `aicpu`; the inputs are the caller's.
    let rc = unsafe {
        ptovm_instance_init(
            inst,
            instance_bytes,
            shared,
            (*a).params,
            (*a).nparams,
            (*a).tensors,
            (*a).ntensors,
            aicpu,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != PTOVM_OK {
        // SAFETY: `a` is valid.
        unsafe { record(a, rc, text(&err)) };
        // The others may wait for this AICPU's tasks: stop them.
        let _ = h
            .failed
            .compare_exchange(0, rc, Ordering::AcqRel, Ordering::Relaxed);
        return rc;
    }
    // SAFETY: the instance was built above and this thread alone uses it.
    let rc = unsafe { ptovm_run(inst) };
    if rc == PTOVM_FINISHED {
        return PTOVM_OK;
    }
    if rc == PTOVM_E_FAILED && h.failed.load(Ordering::Acquire) == PTOVM_E_KERNEL {
        // Stopped by a core's kernel failure: that is the cause.
        // SAFETY: `a` is valid.
        unsafe { record(a, PTOVM_E_KERNEL, h.kernel_failure.message()) };
        return PTOVM_E_KERNEL;
    }
    // A stop because another AICPU failed is not the cause: that AICPU records its own.
    if rc != PTOVM_E_FAILED {
        // SAFETY: as above; `err` is ours.
        let n = unsafe { ptovm_error(inst, err.as_mut_ptr(), err.len()) };
        // SAFETY: `a` is valid.
        unsafe { record(a, rc, &err[..n.min(err.len())]) };
    }
    rc
}

/// AICore side: core `core`'s kernel failed on the task the core holds (taken, not finished),
/// with the kernel's own nonzero `code`. The launch fails ([`PTOVM_E_KERNEL`]): every AICPU
/// stops at its next step instead of waiting for the task, the task is not completed, and the
/// first report's message — "task ID (kernel NAME) failed on core C: kernel code X" — is what
/// [`ptovm_launch_error`] and the kernel entry points give. The core should then wait for
/// `ptovm_shutdown` as usual. Returns 0, or an error code for a bad core or one that holds no
/// task.
///
/// # Safety
/// `shared` was laid out by [`crate::ptovm_shared_init`].
#[no_mangle]
pub unsafe extern "C" fn ptovm_core_fail(shared: *const c_void, core: u32, code: i32) -> i32 {
    // SAFETY: the caller's contract.
    let (h, s) = match unsafe { core_slot(shared, core) } {
        Ok(x) => x,
        Err(code) => return code,
    };
    let Some((_, _, ts)) = s.take().and_then(|word| held_slot(h, word)) else {
        return PTOVM_E_STATE;
    };
    let (id, kernel) = (
        ts.task.load(Ordering::Acquire),
        ts.kernel.load(Ordering::Relaxed),
    );
    let f = &h.kernel_failure;
    if f.claimed
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        let mut m = Msg::new();
        // SAFETY: the shared region keeps the bytecode its init verified.
        let name = unsafe { program(h.code, h.code_len) }
            .ok()
            .and_then(|v| v.kernel_names().nth(kernel as usize));
        let _ = match name {
            Some(name) => write!(m, "task {id} (kernel {name})"),
            None => write!(m, "task {id} (kernel {kernel})"),
        };
        let _ = write!(m, " failed on core {core}: kernel code {code}");
        // SAFETY: this core alone claimed the message; readers wait for `len`.
        let msg: &mut [u8; MSG] = unsafe { &mut *f.msg.get() };
        msg[..m.len].copy_from_slice(m.as_bytes());
        f.len.store(m.len, Ordering::Release);
        // Only the claiming core sets the launch's failure, after its message: whoever sees
        // `PTOVM_E_KERNEL` finds the message written.
        let _ = h
            .failed
            .compare_exchange(0, PTOVM_E_KERNEL, Ordering::AcqRel, Ordering::Relaxed);
    }
    PTOVM_OK
}

/// The launch's failure, as the shared region knows it: the code of the first AICPU or core
/// that failed (0: none) and, for a kernel's failure ([`ptovm_core_fail`]), its message copied
/// into `buf` (`len` bytes, NUL-terminated, truncated; empty for the others, whose instances'
/// [`crate::ptovm_error`] says what happened).
///
/// # Safety
/// `shared` was laid out by [`crate::ptovm_shared_init`]; `buf` is null or points to `len`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ptovm_launch_error(
    shared: *const c_void,
    buf: *mut u8,
    len: usize,
) -> i32 {
    // SAFETY: the caller's contract.
    let h = match unsafe { shared_header(shared) } {
        Ok(h) => h,
        Err(f) => return f.0,
    };
    let code = h.failed.load(Ordering::Acquire);
    if !buf.is_null() && len > 0 {
        let m: &[u8] = if code == PTOVM_E_KERNEL {
            h.kernel_failure.message()
        } else {
            &[]
        };
        let n = m.len().min(len - 1);
        // SAFETY: the caller gives `len` writable bytes at `buf`.
        unsafe {
            core::ptr::copy_nonoverlapping(m.as_ptr(), buf, n);
            *buf.add(n) = 0;
        }
    }
    code
}
