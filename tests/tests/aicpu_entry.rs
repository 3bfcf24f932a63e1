//! The AICPU kernel's entry points (`ptovm_aicpu_init`, `ptovm_aicpu_exec`, spec/runtime.md
//! §3.10) on the host, on real threads: more exec threads than AICPUs (the surplus return at
//! once), every task run exactly once and checked against the reference, a core's kernel
//! failure (`ptovm_core_fail`) and a refused launch each reported with code and message while
//! every thread returns. `tests/tests/qemu.rs` runs the same entry points in
//! `libptovm_aicpu.so` on aarch64.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use ptovm_device::*;
use ptovm_tests::device::{c_params, record_run, region, text, Block};
use ptovm_tests::{check_run, examples, Params, Ran};

/// One launch's memory, and its arguments.
struct Launch {
    args: Box<PtovmKernelArgs>,
    _shared: Vec<Block>,
    _instances: Vec<Block>,
    _params: Vec<PtovmParam>,
    cores: u32,
}

fn prepare(code: &[u8], params: &Params, aicpus: u32, window: u32, instance_slack: i64) -> Launch {
    let launch = PtovmLaunch {
        aicpus,
        window,
        cube_cores: 2 * aicpus,
        vector_cores: 2 * aicpus,
        window_mode: -1,
        exact_deps: 0,
        ..Default::default()
    };
    let sizes = ptovm_tests::device::layout(code, &launch).unwrap();
    let mut shared = region(sizes.shared_bytes);
    let per =
        ((sizes.instance_bytes as i64 + instance_slack).max(0) as usize).next_multiple_of(128);
    let mut instances = region((per * sizes.aicpus as usize) as u64);
    let ps = c_params(params);
    let args = Box::new(PtovmKernelArgs {
        code: code.as_ptr(),
        code_len: code.len(),
        params: ps.as_ptr(),
        nparams: ps.len() as u32,
        ntensors: 0,
        tensors: std::ptr::null(),
        launch,
        shared: shared.as_mut_ptr() as *mut c_void,
        shared_bytes: sizes.shared_bytes as usize,
        instances: instances.as_mut_ptr() as *mut c_void,
        instance_bytes: per,
        claimed: 7,
        status: 3,
        message: [1; PTOVM_MESSAGE_BYTES],
    });
    Launch {
        args,
        _shared: shared,
        _instances: instances,
        _params: ps,
        cores: sizes.cores,
    }
}

#[derive(Clone, Copy)]
struct SendPtr(*mut PtovmKernelArgs);
// SAFETY: the arguments outlive the scoped threads, which use them through the entry points.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

/// Runs the launch: `threads` exec threads, a thread per core (the core of task `fail_task`
/// reports a kernel failure instead of finishing). Returns every exec's code and the run.
fn launch(l: &mut Launch, threads: u32, fail_task: Option<u64>) -> (Vec<i32>, Ran) {
    let a = SendPtr(&mut *l.args);
    // SAFETY: the arguments and regions are the launch's; no exec runs yet.
    let rc = unsafe { ptovm_aicpu_init(a.0 as *mut c_void) };
    assert_eq!(rc, PTOVM_OK, "{}", text(&l.args.message));
    assert_eq!(
        (l.args.claimed, l.args.status, l.args.message[0]),
        (0, 0, 0)
    );
    let shared = l.args.shared as usize;
    let ran = Mutex::new(Ran::new());
    let clock = std::sync::atomic::AtomicU64::new(1);
    let done = AtomicBool::new(false);
    let codes = std::thread::scope(|s| {
        for core in 0..l.cores {
            let (ran, clock, done) = (&ran, &clock, &done);
            s.spawn(move || {
                let sh = shared as *const c_void;
                let mut t = PtovmTask::default();
                loop {
                    // SAFETY: the shared region stays laid out until the scope ends.
                    match unsafe { ptovm_core_take(sh, core, &mut t) } {
                        1 if Some(t.id) == fail_task => {
                            assert_eq!(unsafe { ptovm_core_fail(sh, core, 42) }, PTOVM_OK);
                            while unsafe { ptovm_core_stopping(sh, core) } != 1 {
                                std::thread::yield_now();
                            }
                            return;
                        }
                        1 => {
                            let start = clock.fetch_add(1, Ordering::SeqCst);
                            std::thread::yield_now();
                            let end = clock.fetch_add(1, Ordering::SeqCst);
                            record_run(ran, &t, start, end);
                            unsafe { ptovm_core_finish(sh, core) };
                        }
                        0 if done.load(Ordering::Acquire)
                            && unsafe { ptovm_core_stopping(sh, core) } == 1 =>
                        {
                            return
                        }
                        0 => std::thread::yield_now(),
                        e => panic!("ptovm_core_take: {e}"),
                    }
                }
            });
        }
        let execs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let a = a;
                    // SAFETY: init returned 0; every thread passes the same arguments.
                    unsafe { ptovm_aicpu_exec(a.0 as *mut c_void) }
                })
            })
            .collect();
        let codes: Vec<i32> = execs.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Release);
        // SAFETY: every exec has returned.
        unsafe { ptovm_shutdown(shared as *const c_void) };
        codes
    });
    (codes, ran.into_inner().unwrap())
}

#[test]
fn every_example_runs_through_the_kernel_entry_points() {
    for (name, code, params) in examples() {
        // control.pto's schedule aborts on a full window: it keeps its own.
        let small = if name == "control.pto" { 0 } else { 8 };
        for (aicpus, window) in [(1, 0), (2, small), (3, 0)] {
            let mut l = prepare(&code, &params, aicpus, window, 0);
            let (codes, ran) = launch(&mut l, aicpus + 2, None);
            let n = l.args.launch.aicpus;
            assert!(
                codes.iter().all(|&c| c == PTOVM_OK),
                "{name}: {codes:?}: {}",
                text(&l.args.message)
            );
            assert_eq!(
                l.args.claimed,
                aicpus + 2,
                "{name}: every thread claimed an index"
            );
            assert_eq!(l.args.status, 0);
            check_run(&code, &params, n, &ran).unwrap_or_else(|e| panic!("{name} on {n}: {e}"));
        }
    }
}

#[test]
fn a_kernel_failure_stops_the_launch_with_the_task_and_kernel_named() {
    let (_, code, params) = examples()
        .into_iter()
        .find(|e| e.0 == "llama_layer.pto")
        .unwrap();
    for aicpus in [1, 3] {
        let mut l = prepare(&code, &params, aicpus, 16, 0);
        let (codes, _) = launch(&mut l, aicpus, Some(40));
        assert!(codes.contains(&PTOVM_E_KERNEL), "{codes:?}");
        assert!(
            codes
                .iter()
                .all(|&c| c == PTOVM_E_KERNEL || c == PTOVM_E_FAILED),
            "{codes:?}"
        );
        assert_eq!(l.args.status, PTOVM_E_KERNEL);
        let m = text(&l.args.message);
        assert!(m.starts_with("task 40 (kernel "), "{m}");
        assert!(m.ends_with("kernel code 42"), "{m}");
        let mut buf = [0u8; 256];
        // SAFETY: the shared region is still laid out.
        let rc = unsafe { ptovm_launch_error(l.args.shared, buf.as_mut_ptr(), buf.len()) };
        assert_eq!((rc, text(&buf)), (PTOVM_E_KERNEL, m));
    }
}

#[test]
fn a_refused_launch_says_why() {
    let (_, code, params) = examples().into_iter().find(|e| e.0 == "moe.pto").unwrap();
    // Instance regions too small: init refuses before anything runs.
    let mut l = prepare(&code, &params, 2, 8, -256);
    // SAFETY: as in `launch`.
    let rc = unsafe { ptovm_aicpu_init(&mut *l.args as *mut PtovmKernelArgs as *mut c_void) };
    assert_eq!(rc, PTOVM_E_MEMORY);
    assert_eq!(l.args.status, PTOVM_E_MEMORY);
    assert!(
        text(&l.args.message).contains("the instance regions must be"),
        "{}",
        text(&l.args.message)
    );
    // Exec without a successful init: the shared region is not laid out.
    let mut l = prepare(&code, &params, 2, 8, 0);
    (l.args.status, l.args.message[0]) = (0, 0);
    let rc = unsafe { ptovm_aicpu_exec(&mut *l.args as *mut PtovmKernelArgs as *mut c_void) };
    assert_eq!(rc, PTOVM_E_STATE);
    assert!(text(&l.args.message).contains("not laid out by ptovm_shared_init"));
    // Parameters the program refuses: every exec fails to build its instance, and returns.
    let mut l = prepare(&code, &params, 2, 8, 0);
    l._params.truncate(1);
    l.args.nparams = 1;
    let (codes, ran) = launch(&mut l, 3, None);
    assert!(ran.is_empty());
    assert!(
        codes.iter().filter(|&&c| c == PTOVM_E_PARAMS).count() == 2,
        "{codes:?}"
    );
    assert_eq!(l.args.status, PTOVM_E_PARAMS);
    assert!(
        text(&l.args.message).contains("runtime parameters"),
        "{}",
        text(&l.args.message)
    );
    // Null and misaligned arguments.
    assert_eq!(
        unsafe { ptovm_aicpu_init(std::ptr::null_mut()) },
        PTOVM_E_ARGUMENT
    );
    assert_eq!(
        unsafe { ptovm_aicpu_exec(std::ptr::null_mut()) },
        PTOVM_E_ARGUMENT
    );
}
