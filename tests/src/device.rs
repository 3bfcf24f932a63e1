//! The AICPU library's C ABI (`ptovm-device`) driven on one thread, deterministically: every
//! AICPU's `ptovm_step` and every core's take and finish in turn, as the `device` fuzz target
//! and the tests need it. (`tests/tests/device.rs` also drives it on real threads.)

use ptovm_device::*;
use ptovm_vm::desc::{Descriptor, TensorArg};
use ptovm_vm::Pool;

use crate::{Params, Ran};

/// 128-byte aligned memory for the library's regions.
#[derive(Clone, Copy)]
#[repr(C, align(128))]
pub struct Block(pub [u8; 128]);

/// `bytes` of aligned, zeroed memory.
pub fn region(bytes: u64) -> Vec<Block> {
    vec![Block([0; 128]); (bytes as usize).div_ceil(128)]
}

/// The NUL-terminated message in `buf`.
pub fn text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The parameters as the C ABI takes them (borrowing `p`'s arrays).
pub fn c_params(p: &Params) -> Vec<PtovmParam> {
    p.iter()
        .map(|(k, v, a)| PtovmParam {
            kind: u32::from(*k != ptovm_vm::ParamKind::Scalar),
            value: *v,
            data: a.as_ptr(),
            len: a.len() as u32,
        })
        .collect()
}

/// `ok` when a call returned `PTOVM_OK`, else its code and the message in `err`.
fn status<T>(rc: i32, ok: T, err: &[u8]) -> Result<T, (i32, String)> {
    if rc == PTOVM_OK {
        Ok(ok)
    } else {
        Err((rc, text(err)))
    }
}

/// `ptovm_layout`: the sizes, or the code and message.
pub fn layout(code: &[u8], launch: &PtovmLaunch) -> Result<PtovmSizes, (i32, String)> {
    let mut err = [0u8; 256];
    let mut sizes = PtovmSizes::default();
    // SAFETY: the pointers are valid for the call.
    let rc = unsafe {
        ptovm_layout(
            code.as_ptr(),
            code.len(),
            launch,
            &mut sizes,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    status(rc, sizes, &err)
}

/// `ptovm_shared_init` on `shared` (`size` bytes), or the code and message.
pub fn shared_init(
    shared: &mut [Block],
    size: u64,
    code: &[u8],
    launch: &PtovmLaunch,
) -> Result<(), (i32, String)> {
    let mut err = [0u8; 256];
    // SAFETY: `shared` has at least `size` bytes, aligned, used by this launch only; the
    // caller keeps `code` in place for the launch.
    let rc = unsafe {
        ptovm_shared_init(
            shared.as_mut_ptr() as *mut _,
            size as usize,
            code.as_ptr(),
            code.len(),
            launch,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    status(rc, (), &err)
}

/// `ptovm_instance_init` on `inst` (`size` bytes of it) for AICPU `aicpu`, or the code and
/// message.
///
/// # Safety
/// `shared` is null or a region of this process the library may read (a shared region laid
/// out by [`shared_init`], or memory it will recognise as not one); the arrays of `params`
/// live as long as the instance runs.
pub unsafe fn instance_init(
    inst: &mut [Block],
    size: u64,
    shared: *mut std::ffi::c_void,
    params: &[PtovmParam],
    tensors: &[TensorArg],
    aicpu: u32,
) -> Result<(), (i32, String)> {
    let mut err = [0u8; 256];
    // SAFETY: `inst` has at least `size` bytes, `params` and `err` are live for the call, and
    // `shared` is a region the caller owns; the parameters' arrays live for the launch.
    let rc = unsafe {
        ptovm_instance_init(
            inst.as_mut_ptr() as *mut _,
            size as usize,
            shared,
            if params.is_empty() {
                std::ptr::null()
            } else {
                params.as_ptr()
            },
            params.len() as u32,
            if tensors.is_empty() {
                std::ptr::null()
            } else {
                tensors.as_ptr()
            },
            tensors.len() as u32,
            aicpu,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    status(rc, (), &err)
}

/// `ptovm_work_bound` with `params`: the bound, or the code and message.
pub fn work_bound(code: &[u8], params: &Params) -> Result<PtovmWork, (i32, String)> {
    work_bound_c(code, &c_params(params))
}

/// `ptovm_work_bound` with the parameters as the C ABI takes them (any kind, 2 included).
pub fn work_bound_c(code: &[u8], ps: &[PtovmParam]) -> Result<PtovmWork, (i32, String)> {
    let mut out = PtovmWork::default();
    let mut err = [0u8; 256];
    // SAFETY: the pointers are valid for the call.
    let rc = unsafe {
        ptovm_work_bound(
            code.as_ptr(),
            code.len(),
            ps.as_ptr(),
            ps.len() as u32,
            &mut out,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    status(rc, out, &err)
}

/// A launch laid out and initialised: its regions, the AICPU instances built, nothing run.
pub struct Prepared {
    /// The sizes `ptovm_layout` gave.
    pub sizes: PtovmSizes,
    /// The shared region.
    pub shared: Vec<Block>,
    /// Each AICPU's instance region.
    pub instances: Vec<Vec<Block>>,
}

impl Prepared {
    /// The shared region, as the C ABI takes it.
    pub fn shared_ptr(&mut self) -> *mut std::ffi::c_void {
        self.shared.as_mut_ptr() as *mut _
    }
}

/// Lays out a launch of `code` and builds its shared region and every instance (`params`'
/// arrays must outlive the launch); `Ok(None)` when its regions need more than `max_bytes`.
pub fn prepare(
    code: &[u8],
    params: &Params,
    tensors: &[TensorArg],
    launch: &PtovmLaunch,
    max_bytes: u64,
) -> Result<Option<Prepared>, Failure> {
    let fail = |call, (code, message): (i32, String)| Failure {
        call,
        code,
        message,
    };
    let sizes = layout(code, launch).map_err(|e| fail("layout", e))?;
    let total = sizes
        .instance_bytes
        .saturating_mul(sizes.aicpus as u64)
        .saturating_add(sizes.shared_bytes);
    if total > max_bytes {
        return Ok(None);
    }
    let mut shared = region(sizes.shared_bytes);
    shared_init(&mut shared, sizes.shared_bytes, code, launch)
        .map_err(|e| fail("shared init", e))?;
    let sh = shared.as_mut_ptr() as *mut std::ffi::c_void;
    let cp = c_params(params);
    let mut instances: Vec<Vec<Block>> = (0..sizes.aicpus)
        .map(|_| region(sizes.instance_bytes))
        .collect();
    for (a, m) in instances.iter_mut().enumerate() {
        // SAFETY: `sh` was laid out above; `cp` borrows `params`, which outlive the launch.
        unsafe { instance_init(m, sizes.instance_bytes, sh, &cp, tensors, a as u32) }
            .map_err(|e| fail("instance init", e))?;
    }
    Ok(Some(Prepared {
        sizes,
        shared,
        instances,
    }))
}

/// Why a single-threaded launch stopped: the library's code and message, with the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Which call: `layout`, `shared init`, `instance init`, `step`.
    pub call: &'static str,
    /// Its return code.
    pub code: i32,
    /// Its message.
    pub message: String,
}

/// Launches `code` with `launch` and runs it on this thread: lays out the regions (refusing,
/// as `Ok(None)`, a launch whose memory is above `max_bytes`), initialises the shared region
/// and every instance, then steps every AICPU and serves every core in turn until all AICPUs
/// finish. Gives what ran (task by task: start and end on one clock, pool, owner) and the AICPU
/// count, or the failure. More than `max_rounds` rounds is an error (`code` 0): a launch that
/// makes no progress.
pub fn run_single(
    code: &[u8],
    params: &Params,
    launch: PtovmLaunch,
    max_bytes: u64,
    max_rounds: u64,
) -> Result<Option<(Ran, u32)>, Failure> {
    run_single_bound(code, params, &[], launch, max_bytes, max_rounds)
}

/// [`run_single`] with the tensors bound as `tensors` says (one per tensor of the program, or
/// none): each descriptor is checked against the reference's with the bindings applied.
pub fn run_single_bound(
    code: &[u8],
    params: &Params,
    tensors: &[TensorArg],
    launch: PtovmLaunch,
    max_bytes: u64,
    max_rounds: u64,
) -> Result<Option<(Ran, u32)>, Failure> {
    run_single_reading(code, params, tensors, &[], launch, (max_bytes, max_rounds))
}

/// [`run_single_bound`] whose descriptors are checked against a reference where a `READBACK`
/// of tensor `t` reads `memory`'s values for `t`: what the tensor's bound memory holds (the
/// cores here compute nothing).
pub fn run_single_reading(
    code: &[u8],
    params: &Params,
    tensors: &[TensorArg],
    memory: &[(u16, Vec<u32>)],
    launch: PtovmLaunch,
    (max_bytes, max_rounds): (u64, u64),
) -> Result<Option<(Ran, u32)>, Failure> {
    let fail = |call, (code, message): (i32, String)| Failure {
        call,
        code,
        message,
    };
    let Some(mut prep) = prepare(code, params, tensors, &launch, max_bytes)? else {
        return Ok(None);
    };
    let (sizes, sh) = (prep.sizes, prep.shared_ptr());
    let want = crate::desc::expected_reading(code, params, tensors, memory);
    let instances = &mut prep.instances;
    let mut ran: Ran = Vec::new();
    let mut clock = 1u64;
    let mut finished = vec![false; instances.len()];
    for _ in 0..max_rounds {
        for (a, m) in instances.iter_mut().enumerate() {
            if finished[a] {
                continue;
            }
            // SAFETY: an initialised instance, used by this thread only.
            match unsafe { ptovm_step(m.as_mut_ptr() as *mut _) } {
                PTOVM_FINISHED => finished[a] = true,
                PTOVM_OK | PTOVM_PROGRESS => {}
                rc => {
                    let mut buf = [0u8; 256];
                    // SAFETY: as above.
                    unsafe { ptovm_error(m.as_mut_ptr() as *mut _, buf.as_mut_ptr(), buf.len()) };
                    return Err(fail("step", (rc, text(&buf))));
                }
            }
        }
        for core in 0..sizes.cores {
            let mut t = PtovmTask::default();
            // SAFETY: the shared region is initialised.
            if unsafe { ptovm_core_take(sh, core, &mut t) } == 1 {
                if ran.len() <= t.id as usize {
                    ran.resize(t.id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
                }
                if ran[t.id as usize].0 != 0 {
                    return Err(Failure {
                        call: "core take",
                        code: 0,
                        message: format!("task {} ran twice", t.id),
                    });
                }
                let pool = if t.pool == 0 {
                    Pool::Cube
                } else {
                    Pool::Vector
                };
                // The descriptor the kernel would compute from: the reference's.
                let mut d = Descriptor::default();
                // SAFETY: as above.
                let rc = unsafe { ptovm_core_descriptor(sh, core, &mut d) };
                let want = want.as_ref().and_then(|w| w.get(t.id as usize));
                if rc != 1
                    || d.id != t.id
                    || want.is_some_and(|w| crate::desc::text(w) != crate::desc::text(&d))
                {
                    return Err(Failure {
                        call: "core descriptor",
                        code: rc,
                        message: format!(
                            "task {}'s descriptor is {} not {}",
                            t.id,
                            crate::desc::text(&d),
                            want.map_or("-".into(), crate::desc::text)
                        ),
                    });
                }
                ran[t.id as usize] = (clock, clock + 1, pool, t.aicpu);
                clock += 2;
                // SAFETY: as above.
                let rc = unsafe { ptovm_core_finish(sh, core) };
                if rc != PTOVM_OK {
                    return Err(fail("core finish", (rc, String::new())));
                }
            }
        }
        if finished.iter().all(|f| *f) {
            // SAFETY: as above.
            unsafe { ptovm_shutdown(sh) };
            return Ok(Some((ran, sizes.aicpus)));
        }
    }
    Err(Failure {
        call: "step",
        code: 0,
        message: format!("not finished after {max_rounds} rounds"),
    })
}

/// Records in `ran` that the task a core took (`t`) ran from `start` to `end` on its pool;
/// panics if it ran before.
pub fn record_run(ran: &std::sync::Mutex<Ran>, t: &PtovmTask, start: u64, end: u64) {
    let mut r = ran.lock().unwrap();
    if r.len() <= t.id as usize {
        r.resize(t.id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
    }
    assert_eq!(r[t.id as usize].1, 0, "task {} ran twice", t.id);
    let pool = if t.pool == 0 {
        Pool::Cube
    } else {
        Pool::Vector
    };
    r[t.id as usize] = (start, end, pool, t.aicpu);
}
