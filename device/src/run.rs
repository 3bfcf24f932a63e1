//! Running an AICPU: its environment on the device (no wake-ups, no doorbells, the counter
//! clock), `ptovm_step` and `ptovm_run`, its error message and its counters.

use super::*;

/// The environment of a device AICPU: its own thread, always running, so nothing to wake;
/// cores poll their handshake slots, so nothing to ring; the clock of `rate_limit` timing is
/// the processor's.
pub(crate) struct Device;
impl Env for Device {
    fn wake(&mut self, _: u32) {}
    fn ring(&mut self, _: u32) {}
    fn now_ns(&mut self) -> u64 {
        now_ns()
    }
    /// The cores run on their own: one handed a short task may have finished it while the
    /// AICPU dispatched, so the round looks at its busy cores again before it generates.
    fn run_cores(&mut self) -> bool {
        true
    }
    /// Nothing watches its hand-outs: the scheduler does not assemble their reports.
    fn watches_issues(&self) -> bool {
        false
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
pub(crate) fn invalidate(addr: u64) {
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
pub(crate) fn sync_reads() {
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
pub(crate) fn now_ns() -> u64 {
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
pub(crate) fn now_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

pub(crate) unsafe fn instance(inst: *mut c_void) -> Result<&'static mut InstanceHeader, i32> {
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

pub(crate) fn code_of(e: &SchedError) -> i32 {
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
