//! The AICPU library's C ABI (`ptovm-device`) driven on one thread, deterministically: every
//! AICPU's `ptovm_step` and every core's take and finish in turn, as the `device` fuzz target
//! and the tests need it. (`tests/tests/device.rs` also drives it on real threads.)

use ptovm_device::*;
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
    let fail = |call, code, err: &[u8]| Failure {
        call,
        code,
        message: text(err),
    };
    let mut err = [0u8; 256];
    let mut sizes = PtovmSizes::default();
    // SAFETY: the pointers are valid for the call.
    let rc = unsafe {
        ptovm_layout(
            code.as_ptr(),
            code.len(),
            &launch,
            &mut sizes,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != PTOVM_OK {
        return Err(fail("layout", rc, &err));
    }
    let total = sizes
        .instance_bytes
        .saturating_mul(sizes.aicpus as u64)
        .saturating_add(sizes.shared_bytes);
    if total > max_bytes {
        return Ok(None);
    }
    let mut shared = region(sizes.shared_bytes);
    let sh = shared.as_mut_ptr() as *mut std::ffi::c_void;
    // SAFETY: `shared` has `shared_bytes` bytes, aligned; the code outlives the launch.
    let rc = unsafe {
        ptovm_shared_init(
            sh,
            sizes.shared_bytes as usize,
            code.as_ptr(),
            code.len(),
            &launch,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != PTOVM_OK {
        return Err(fail("shared init", rc, &err));
    }
    let cp = c_params(params);
    let mut instances: Vec<Vec<Block>> = (0..sizes.aicpus)
        .map(|_| region(sizes.instance_bytes))
        .collect();
    for (a, m) in instances.iter_mut().enumerate() {
        // SAFETY: the instance region has `instance_bytes` bytes; the parameters' arrays live
        // for the launch.
        let rc = unsafe {
            ptovm_instance_init(
                m.as_mut_ptr() as *mut _,
                sizes.instance_bytes as usize,
                sh,
                if cp.is_empty() {
                    std::ptr::null()
                } else {
                    cp.as_ptr()
                },
                cp.len() as u32,
                a as u32,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc != PTOVM_OK {
            return Err(fail("instance init", rc, &err));
        }
    }
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
                    return Err(fail("step", rc, &buf));
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
                ran[t.id as usize] = (clock, clock + 1, pool, t.aicpu);
                clock += 2;
                // SAFETY: as above.
                let rc = unsafe { ptovm_core_finish(sh, core) };
                if rc != PTOVM_OK {
                    return Err(fail("core finish", rc, b"\0"));
                }
            }
        }
        if finished.iter().all(|f| *f) {
            // SAFETY: as above.
            unsafe { ptovm_shutdown(sh) };
            drop(shared);
            return Ok(Some((ran, sizes.aicpus)));
        }
    }
    Err(Failure {
        call: "step",
        code: 0,
        message: format!("not finished after {max_rounds} rounds"),
    })
}
