//! The launch's entry points: the ABI version, sizing a launch (`ptovm_layout`), its work
//! bound (`ptovm_work_bound`), and building the shared region and each AICPU's instance.

use super::*;

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

pub(crate) unsafe fn layout(
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
pub(crate) fn launch_fail(e: LaunchError) -> Fail {
    match e {
        LaunchError::Params(e) => fail!(PTOVM_E_PARAMS, "launch: {e}"),
        LaunchError::Run(e) => fail!(PTOVM_E_RUN, "launch: {e}"),
    }
}

/// Runtime parameter `i` as a value.
///
/// # Safety
/// An array's `data` points to `len` readable values that live for `'a`.
pub(crate) unsafe fn value_of<'a>(
    v: &Verified<'a>,
    q: PtovmParam,
    i: usize,
) -> Result<Value<'a>, Fail> {
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

pub(crate) unsafe fn work_bound(
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

pub(crate) unsafe fn shared_header(shared: *const c_void) -> Result<&'static SharedHeader, Fail> {
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
