//! The AICore side of the handshake (spec/runtime.md §3.4), for cores or the threads playing
//! them: taking a task, its descriptor, reporting it done, and shutting down.

use super::*;

pub(crate) unsafe fn core_slot(
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
pub(crate) fn held_slot(h: &SharedHeader, word: u64) -> Option<(u32, u32, &Slot)> {
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
