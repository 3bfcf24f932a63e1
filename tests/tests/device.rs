//! The device library's C ABI (`ptovm-device`), driven from Rust on the host exactly as an AICPU
//! kernel drives it: size the regions, lay out the shared one, one thread per AICPU building
//! its instance and running it, threads playing the AICores through their handshake slots. Every
//! run is checked against the reference expander: each task ran exactly once, on a core of its
//! pool, and after all its predecessors ended. Bad arguments get error codes and messages.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use proptest::prelude::*;
use ptovm_assembler::{assemble, Options};
use ptovm_device::*;
use ptovm_tests::device::{
    c_params, instance_init, prepare, region, text, work_bound, work_bound_c,
};
use ptovm_tests::{gen_params, Gen, Params, Ran};
use ptovm_vm::ParamKind;

/// Launches `code` with `launch` on threads; gives what ran, or the first error message.
fn launch(code: &[u8], params: &Params, launch: PtovmLaunch) -> Result<(Ran, u32), String> {
    let mut prep = prepare(code, params, &[], &launch, u64::MAX)
        .map_err(|f| format!("{} {}: {}", f.call, f.code, f.message))?
        .ok_or("no memory limit was set")?;
    let (sizes, sh) = (prep.sizes, prep.shared_ptr());
    let instances = &mut prep.instances;
    let seq = AtomicU64::new(1);
    let ran: Mutex<Ran> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let shared_addr = sh as usize;
    // Reported errors come from the AICPU that failed, not from those it stopped.
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        // Two threads play the AICores: each polls its half of the handshake slots.
        for half in 0..2u32 {
            let (seq, ran, done) = (&seq, &ran, &done);
            s.spawn(move || {
                let sh = shared_addr as *const std::ffi::c_void;
                while !done.load(Ordering::Acquire) {
                    let mut any = false;
                    for core in (half..sizes.cores).step_by(2) {
                        let mut t = PtovmTask::default();
                        if unsafe { ptovm_core_take(sh, core, &mut t) } == 1 {
                            any = true;
                            let t0 = seq.fetch_add(1, Ordering::SeqCst);
                            let t1 = seq.fetch_add(1, Ordering::SeqCst);
                            ptovm_tests::device::record_run(ran, &t, t0, t1);
                            assert_eq!(unsafe { ptovm_core_finish(sh, core) }, PTOVM_OK);
                        }
                    }
                    if !any {
                        std::thread::yield_now();
                    }
                }
            });
        }
        let handles: Vec<_> = instances
            .iter_mut()
            .map(|m| {
                let addr = m.as_mut_ptr() as usize;
                s.spawn(move || {
                    let inst = addr as *mut std::ffi::c_void;
                    // The library spins when idle; on a 2-core host, step and yield instead.
                    loop {
                        match unsafe { ptovm_step(inst) } {
                            PTOVM_FINISHED => return Ok(()),
                            PTOVM_PROGRESS => {}
                            PTOVM_OK => std::thread::yield_now(),
                            rc => {
                                let mut buf = [0u8; 256];
                                unsafe { ptovm_error(inst, buf.as_mut_ptr(), buf.len()) };
                                return Err(format!("step {rc}: {}", text(&buf)));
                            }
                        }
                    }
                })
            })
            .collect();
        let r = handles.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, Ordering::Release);
        r
    });
    let mut errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    errors.sort_by_key(|e| e.contains("another AICPU failed"));
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    assert_eq!(unsafe { ptovm_shutdown(sh) }, PTOVM_OK);
    assert_eq!(unsafe { ptovm_core_stopping(sh, 0) }, 1);
    let mut total = PtovmCounters::default();
    for m in instances.iter_mut() {
        let mut k = PtovmCounters::default();
        assert_eq!(
            unsafe { ptovm_read_counters(m.as_mut_ptr() as *mut _, &mut k) },
            PTOVM_OK
        );
        total.tasks += k.tasks;
        total.emitted += k.emitted;
    }
    assert_eq!(total.tasks, total.emitted, "every generated task completed");
    drop(prep);
    Ok((ran.into_inner().unwrap(), sizes.aicpus))
}

fn check(code: &[u8], params: &Params, n: u32, ran: &Ran) {
    ptovm_tests::check_run(code, params, n, ran).unwrap_or_else(|e| panic!("{e}"));
}

/// The LLaMA layer's parameters: `n` tiles at LLaMA-7B's sizes (D = 4096, F = 11008).
fn llama(n: u32) -> Params {
    vec![
        (ParamKind::Scalar, n, vec![]),
        (ParamKind::Scalar, 4096, vec![]),
        (ParamKind::Scalar, 11008, vec![]),
    ]
}

fn example(name: &str) -> Vec<u8> {
    ptovm_tests::example_code(name)
}

fn settings(aicpus: u32, window: u32) -> PtovmLaunch {
    PtovmLaunch {
        aicpus,
        window,
        cube_cores: 2 * aicpus,
        vector_cores: 3 * aicpus,
        window_mode: -1,
        exact_deps: 0,
        ..Default::default()
    }
}

#[test]
fn the_llama_layer_runs_through_the_c_abi() {
    let code = example("llama_layer.pto");
    let params: Params = llama(8);
    for (n, window) in [(1, 16), (6, 1024), (3, 2), (6, 1)] {
        let (ran, aicpus) = launch(&code, &params, settings(n, window)).unwrap();
        assert_eq!(aicpus, n);
        assert_eq!(ran.len(), 3 * 64 + 16 * 8);
        check(&code, &params, n, &ran);
    }
}

#[test]
fn exact_matching_is_one_mode_for_every_map_of_a_launch() {
    // `exact_deps = 1` reached the shared region's map but each instance built its own map in
    // overlap mode, and the scheduler refused the mix (found by the `device` fuzz target).
    // The LLaMA layer's regions are tiles and rows: exact matching finds every edge there.
    let code = example("llama_layer.pto");
    let params: Params = llama(8);
    for n in [1, 3] {
        let mut l = settings(n, 8);
        l.exact_deps = 1;
        let (ran, _) = launch(&code, &params, l).unwrap();
        check(&code, &params, n, &ran);
        let single = ptovm_tests::device::run_single(&code, &params, l, 1 << 30, 1_000_000)
            .unwrap()
            .unwrap();
        check(&code, &params, n, &single.0);
    }
}

#[test]
fn every_example_runs_through_the_c_abi() {
    for (name, code, params) in ptovm_tests::examples() {
        for n in [1, 2, 4] {
            let (ran, _) = launch(&code, &params, settings(n, 0))
                .unwrap_or_else(|e| panic!("{name}, {n} AICPUs: {e}"));
            check(&code, &params, n, &ran);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_run_through_the_c_abi(seed in any::<u64>(), n in 1u32..=4, window in 1u32..6) {
        let src = Gen::runnable(seed).module();
        let out = assemble("gen.pto", &src, &Options::default()).unwrap();
        let params = gen_params(&out.module, seed);
        match launch(&out.bytes, &params, settings(n, window)) {
            Ok((ran, _)) => check(&out.bytes, &params, n, &ran),
            // Programs that fail at launch or run time are the interpreter's tests; here they
            // must fail cleanly, with a message.
            Err(e) => prop_assert!(e.contains(": ") && e.len() > 20, "{e}"),
        }
    }
}

#[test]
fn the_work_bound_is_known_before_a_launch() {
    // The LLaMA layer's loops are all dense: the bound is its task count, 3N² + 16N.
    let code = example("llama_layer.pto");
    let w = work_bound(&code, &llama(256)).unwrap();
    assert_eq!(w.tasks, 3 * 256 * 256 + 16 * 256);
    assert!(w.iterations >= 256 * 256);
    // Every example: the same as the library's, and at least the tasks a launch runs.
    for (name, code, params) in ptovm_tests::examples() {
        let w = work_bound(&code, &params).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let v = ptovm_vm::verify(&code).unwrap();
        let vals = ptovm_tests::values(&params);
        let rp = ptovm_vm::RuntimeParams::new(&v, &vals).unwrap();
        let b = ptovm_vm::Interpreter::new(v, rp, 0, 1)
            .unwrap()
            .work_bound();
        assert_eq!((w.iterations, w.tasks), (b.iterations, b.tasks), "{name}");
        let (ran, _) = launch(&code, &params, settings(2, 0)).unwrap();
        assert!(ran.len() as u64 <= w.tasks, "{name}");
    }
    // Three loops of 2^32 - 1: the bound saturates, nothing is walked.
    let src = "@tensor A: f16[64]
@kernel k(i): vector(out a)
@workload w(%n: dense_dyn(n)) { parallel_for a in %n { parallel_for b in %n { parallel_for c in %n { task @k(a) resources(A[0]) } } } }";
    let huge = assemble("h", src, &Options::default()).unwrap().bytes;
    let w = work_bound(&huge, &vec![(ParamKind::Scalar, u32::MAX, vec![])]).unwrap();
    assert_eq!((w.iterations, w.tasks), (u64::MAX, u64::MAX));
    // Errors: bytecode, parameters (count, kind), no output.
    let (rc, e) = work_bound(&code[..code.len() - 1], &vec![]).unwrap_err();
    assert_eq!(rc, PTOVM_E_VERIFY, "{e}");
    let (rc, e) = work_bound(&code, &vec![]).unwrap_err();
    assert_eq!(rc, PTOVM_E_PARAMS);
    assert!(
        e.contains("takes 3 runtime parameters; 0 were given"),
        "{e}"
    );
    let bad = vec![(ParamKind::Array, 0, vec![1, 2])];
    let (rc, e) = work_bound(&code, &bad).unwrap_err();
    assert_eq!(rc, PTOVM_E_PARAMS, "{e}");
    let ps = c_params(&llama(4));
    let rc = unsafe {
        ptovm_work_bound(
            code.as_ptr(),
            code.len(),
            ps.as_ptr(),
            ps.len() as u32,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(rc, PTOVM_E_ARGUMENT);
}

#[test]
fn bad_arguments_are_codes_with_messages() {
    let code = example("llama_layer.pto");
    let mut err = [0u8; 256];
    let mut sizes = PtovmSizes::default();
    let call = |code: &[u8], l: PtovmLaunch, sizes: &mut PtovmSizes, err: &mut [u8; 256]| unsafe {
        ptovm_layout(
            code.as_ptr(),
            code.len(),
            &l,
            sizes,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(
        call(&code, settings(6, 1024), &mut sizes, &mut err),
        PTOVM_OK
    );
    assert!(sizes.shared_bytes > 0 && sizes.instance_bytes > 0);
    assert_eq!(
        call(&code[..100], settings(6, 1024), &mut sizes, &mut err),
        PTOVM_E_VERIFY
    );
    assert!(
        text(&err).starts_with("bytecode rejected"),
        "{}",
        text(&err)
    );
    assert_eq!(
        call(&code, settings(65, 1024), &mut sizes, &mut err),
        PTOVM_E_ARGUMENT
    );
    assert!(text(&err).contains("AICPU count 65"), "{}", text(&err));
    // Five cube cores for six AICPUs: enough when they share the cores, not for a partition
    // (spec/runtime.md §4.6); none at all is never enough.
    let mut l = settings(6, 1024);
    l.cube_cores = 5;
    assert_eq!(call(&code, l, &mut sizes, &mut err), PTOVM_OK);
    l.core_alloc = 2;
    assert_eq!(call(&code, l, &mut sizes, &mut err), PTOVM_E_ARGUMENT);
    assert!(text(&err).contains("partition"), "{}", text(&err));
    l.core_alloc = 1;
    l.cube_cores = 0;
    assert_eq!(call(&code, l, &mut sizes, &mut err), PTOVM_E_ARGUMENT);
    l = settings(6, 1024);
    l.window_mode = 7;
    assert_eq!(call(&code, l, &mut sizes, &mut err), PTOVM_E_ARGUMENT);
    assert_eq!(
        call(&code, settings(2, 70_000), &mut sizes, &mut err),
        PTOVM_E_ARGUMENT
    );
    l = settings(6, 1024);
    l.core_alloc = 3;
    assert_eq!(call(&code, l, &mut sizes, &mut err), PTOVM_E_ARGUMENT);
    assert!(text(&err).contains("core_alloc 3"), "{}", text(&err));
    // `core_alloc = 0` takes the program's `cores = partition`; 1 overrides it.
    let partitioned = ptovm_tests::assemble_text(
        "@kernel k(i): vector(out a)
@workload w(%n: dense[4]) { parallel_for i in %n { task @k(i) resources(A[i]) } }
@schedule s for w { cores = partition }",
    )
    .0;
    l = settings(6, 1024);
    l.cube_cores = 5;
    assert_eq!(
        call(&partitioned, l, &mut sizes, &mut err),
        PTOVM_E_ARGUMENT
    );
    assert!(text(&err).contains("partition"), "{}", text(&err));
    l.core_alloc = 1;
    assert_eq!(call(&partitioned, l, &mut sizes, &mut err), PTOVM_OK);
    // A workspace arena smaller than a kernel's workspace (spec/runtime.md §4.4).
    let ws = ptovm_tests::assemble_text(
        "@kernel k(i): vector(out a) workspace(4096)
@workload w(%n: dense[4]) { parallel_for i in %n { task @k(i) resources(A[i]) } }",
    )
    .0;
    l = settings(2, 16);
    assert_eq!(call(&ws, l, &mut sizes, &mut err), PTOVM_OK);
    l.workspace_arena = 4032;
    assert_eq!(call(&ws, l, &mut sizes, &mut err), PTOVM_E_ARGUMENT);
    assert!(
        text(&err).contains("workspace of 4096 bytes"),
        "{}",
        text(&err)
    );
    l.workspace_arena = u32::MAX / 2 + 1;
    assert_eq!(call(&ws, l, &mut sizes, &mut err), PTOVM_E_ARGUMENT);

    // A region too small, or misaligned, is refused before anything is written.
    let l = settings(2, 16);
    assert_eq!(call(&code, l, &mut sizes, &mut err), PTOVM_OK);
    let mut small = region(sizes.shared_bytes - 128);
    let rc = unsafe {
        ptovm_shared_init(
            small.as_mut_ptr() as *mut _,
            (sizes.shared_bytes - 128) as usize,
            code.as_ptr(),
            code.len(),
            &l,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, PTOVM_E_MEMORY, "{}", text(&err));
    assert!(small.iter().all(|b| b.0 == [0; 128]), "nothing written");
    let mut shared = region(sizes.shared_bytes + 128);
    let misaligned = unsafe { (shared.as_mut_ptr() as *mut u8).add(8) } as *mut std::ffi::c_void;
    let rc = unsafe {
        ptovm_shared_init(
            misaligned,
            sizes.shared_bytes as usize,
            code.as_ptr(),
            code.len(),
            &l,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, PTOVM_E_MEMORY);
    // An instance over memory that is not a shared region.
    let mut inst = region(sizes.instance_bytes);
    // SAFETY (the calls below): the regions are this test's, the parameters outlive them.
    let r = unsafe {
        instance_init(
            &mut inst,
            sizes.instance_bytes,
            shared.as_mut_ptr() as *mut _,
            &[],
            &[],
            0,
        )
    };
    assert_eq!(r.unwrap_err().0, PTOVM_E_STATE);
    // Wrong runtime parameters, AICPU id out of range.
    let sh = shared.as_mut_ptr() as *mut std::ffi::c_void;
    assert_eq!(
        unsafe {
            ptovm_shared_init(
                sh,
                sizes.shared_bytes as usize,
                code.as_ptr(),
                code.len(),
                &l,
                err.as_mut_ptr(),
                err.len(),
            )
        },
        PTOVM_OK
    );
    let code_of = |r: Result<(), (i32, String)>| r.err().map_or(PTOVM_OK, |e| e.0);
    let r = unsafe { instance_init(&mut inst, sizes.instance_bytes, sh, &[], &[], 0) };
    assert_eq!(code_of(r), PTOVM_E_PARAMS);
    let p = c_params(&llama(8));
    let r = unsafe { instance_init(&mut inst, sizes.instance_bytes, sh, &p, &[], 2) };
    assert_eq!(code_of(r), PTOVM_E_ARGUMENT);
    let r = unsafe { instance_init(&mut inst, sizes.instance_bytes - 1, sh, &p, &[], 0) };
    assert_eq!(code_of(r), PTOVM_E_MEMORY);
    // The failed attempts claimed nothing: AICPU 0's instance builds now, and only once.
    unsafe { instance_init(&mut inst, sizes.instance_bytes, sh, &p, &[], 0) }.unwrap();
    let mut again = region(sizes.instance_bytes);
    let (rc, e) =
        unsafe { instance_init(&mut again, sizes.instance_bytes, sh, &p, &[], 0) }.unwrap_err();
    assert_eq!(rc, PTOVM_E_STATE);
    assert!(e.contains("already has an instance"), "{e}");
    // Steps on memory that is no instance, counters without output.
    let mut junk = region(1024);
    assert_eq!(
        unsafe { ptovm_step(junk.as_mut_ptr() as *mut _) },
        PTOVM_E_STATE
    );
    assert_eq!(
        unsafe { ptovm_step(std::ptr::null_mut()) },
        PTOVM_E_ARGUMENT
    );
    assert_eq!(
        unsafe { ptovm_core_take(sh, 10_000, &mut PtovmTask::default()) },
        PTOVM_E_ARGUMENT
    );
    assert_eq!(ptovm_abi_version(), PTOVM_ABI_VERSION);
    assert_eq!(ptovm_panicked(), 0);
}

#[test]
fn a_runtime_error_is_reported_by_the_instance() {
    // Dividing by a runtime parameter of 0 fails in the interpreter: the step reports it, the
    // instance keeps the message and refuses to go on.
    let src = "@tensor T: f16[64]
@kernel k(i): vector(out t)
@workload w(%d: dense_dyn(D)) { parallel_for i in dense[4] { task @k(i / D) resources(T[i]) } }";
    let code = assemble("e", src, &Options::default()).unwrap().bytes;
    let params: Params = vec![(ParamKind::Scalar, 0, vec![])];
    let e = launch(&code, &params, settings(1, 4)).unwrap_err();
    assert!(
        e.starts_with(&format!("step {PTOVM_E_RUN}: AICPU 0: ")),
        "{e}"
    );
}

#[test]
fn a_runtime_error_in_the_launch_analysis_is_a_run_error() {
    // moe.pto's indptr has one entry per expert plus one; with two entries the launch-time
    // tensor analysis, which counts each statement's tasks, reads past it. That is the
    // program's runtime error (the walk would meet it too), not a broken instance.
    let code = example("moe.pto");
    let params: Params = vec![
        (ParamKind::Scalar, 2, vec![]),
        (ParamKind::Scalar, 64, vec![]),
        (ParamKind::Scalar, 64, vec![]),
        (ParamKind::Array, 0, vec![0, 1]),
        (ParamKind::Array, 0, vec![1, 0]),
        (ParamKind::Array, 0, vec![1, 0, 0, 1]),
    ];
    let e = launch(&code, &params, settings(2, 8)).unwrap_err();
    assert!(
        e.starts_with(&format!("instance init {PTOVM_E_RUN}: ")),
        "{e}"
    );
    assert!(e.contains("is outside runtime array"), "{e}");
}

#[test]
fn a_window_abort_stops_every_aicpu() {
    // control.pto's schedule says `window_mode = abort`; with 2 slots its window overflows. The
    // AICPU that overflows reports it; the others stop instead of waiting for it forever.
    let code = example("control.pto");
    let params: Params = vec![(ParamKind::Scalar, 16, vec![])];
    for n in [1, 3] {
        let e = launch(&code, &params, settings(n, 2)).unwrap_err();
        assert!(e.starts_with(&format!("step {PTOVM_E_WINDOW}: ")), "{e}");
        assert!(e.contains("window (2 slots) is full"), "{e}");
    }
}

#[test]
fn a_parameter_of_kind_2_takes_the_programs_default() {
    // flash_decode's defaults: B = 4, max_chunks = 8, page = 16, kv_len = [40, 16, 120, 20],
    // kv_chunks = [3, 1, 8, 2] (arrays read in place from the bytecode).
    let code = example("flash_decode.pto");
    let default = PtovmParam {
        kind: 2,
        value: 0,
        data: std::ptr::null(),
        len: 0,
    };
    let by_default = work_bound_c(&code, &[default; 5]).unwrap();
    let (_, explicit) = ptovm_tests::example(
        "flash_decode.pto",
        &[
            ("B", 4, vec![]),
            ("max_chunks", 8, vec![]),
            ("page", 16, vec![]),
            ("kv_len", 0, vec![40, 16, 120, 20]),
            ("kv_chunks", 0, vec![3, 1, 8, 2]),
        ],
    );
    let given = work_bound_c(&code, &c_params(&explicit)).unwrap();
    assert_eq!(
        (by_default.iterations, by_default.tasks),
        (given.iterations, given.tasks)
    );
    // The bound takes every branch at the longest row: 32 heads × 4 requests × (8 decodes, a
    // merge and an unsplit decode).
    assert_eq!(by_default.tasks, 32 * 4 * (8 + 1 + 1));
    // Mixed: B given, the rest by default.
    let mut mixed = c_params(&explicit);
    mixed[1] = default;
    mixed[2] = default;
    assert_eq!(work_bound_c(&code, &mixed).unwrap().tasks, given.tasks);
    // A slot without a default.
    let att = example("llama_layer.pto");
    let no_default = assemble(
        "n.pto",
        "@tensor A: f16[n]\n@kernel k(i): vector(out a)\n@workload w(%n: dense_dyn(n)) { parallel_for i in %n { task @k(i) resources(A[i]) } }",
        &Options::default(),
    )
    .unwrap()
    .bytes;
    let (rc, e) = work_bound_c(&no_default, &[default]).unwrap_err();
    assert_eq!(rc, PTOVM_E_PARAMS);
    assert!(
        e.contains("kind 2 asks for the program's default, but the slot has none"),
        "{e}"
    );
    assert_eq!(
        work_bound_c(&att, &[default; 3]).unwrap().tasks,
        3 * 256 * 256 + 16 * 256
    );
    // Bytecode placed at an odd address: the array default cannot be read in place.
    let mut shifted = vec![0u8; code.len() + 1];
    let at = if (shifted.as_ptr() as usize).is_multiple_of(4) {
        1
    } else {
        0
    };
    shifted[at..at + code.len()].copy_from_slice(&code);
    let (rc, e) = work_bound_c(&shifted[at..at + code.len()], &[default; 5]).unwrap_err();
    assert_eq!(rc, PTOVM_E_PARAMS);
    assert!(e.contains("not 4-byte aligned"), "{e}");
}

/// Tensors bound through the C ABI: every descriptor (`ptovm_core_descriptor`) carries its
/// region's address (checked against the reference by `run_single_bound`); a binding the
/// declarations refuse fails `ptovm_instance_init` with `PTOVM_E_BIND` and a message naming
/// the tensor.
#[test]
fn tensors_bound_through_the_c_abi() {
    use ptovm_vm::desc::TensorArg;
    // The LLaMA layer at N = 4, D = 64, F = 176: its 19 tensors, each at its own aligned
    // address, row-major.
    let code = example("llama_layer.pto");
    let params: Params = vec![
        (ParamKind::Scalar, 4, vec![]),
        (ParamKind::Scalar, 64, vec![]),
        (ParamKind::Scalar, 176, vec![]),
    ];
    let v = ptovm_vm::verify(&code).unwrap();
    let mut tensors = Vec::new();
    let mut base = 0x1000_0000u64;
    for t in v.tensors() {
        let elems: u64 = (0..t.rank as usize)
            .map(|d| {
                let x = t.dims[d].get();
                if x & ptovm_vm::format::DIM_IS_SLOT != 0 {
                    u64::from(params[(x & 0xFFFF) as usize].1)
                } else {
                    x as u64
                }
            })
            .product();
        let bytes = elems * ptovm_vm::DType::from_u8(t.dtype).unwrap().size() as u64;
        tensors.push(TensorArg {
            base,
            bytes,
            dtype: t.dtype,
            ..TensorArg::default()
        });
        base += bytes.next_multiple_of(4096);
    }
    for n in [1, 3] {
        let (ran, _) = ptovm_tests::device::run_single_bound(
            &code,
            &params,
            &tensors,
            settings(n, 8),
            1 << 30,
            1_000_000,
        )
        .unwrap()
        .unwrap();
        check(&code, &params, n, &ran);
    }
    // Tensor 2 (`Wqkv`, f16) bound as f32; then one binding too few.
    let refused = |tensors: &[TensorArg], message: &str| {
        let e = ptovm_tests::device::run_single_bound(
            &code,
            &params,
            tensors,
            settings(2, 8),
            1 << 30,
            1_000_000,
        )
        .unwrap_err();
        assert_eq!((e.call, e.code), ("instance init", PTOVM_E_BIND));
        assert!(e.message.contains(message), "{}", e.message);
    };
    let mut bad = tensors.clone();
    bad[2].dtype = ptovm_vm::DType::F32 as u8;
    refused(&bad, "tensor 2 is declared f16 but bound as f32");
    refused(
        &tensors[1..],
        "18 tensor bindings for a program of 19 tensors",
    );
}

/// A `READBACK` through the C ABI (spec/runtime.md §4.5): the device reads the bound tensor's
/// memory itself (`Env::read_back`, through the binding's strides) once every task before it
/// has completed — here memory the test wrote, since these cores compute nothing — and the
/// tasks after it follow those values, not the launch's stand-ins: checked task by task,
/// descriptors included, against the reference that reads the same values.
#[test]
fn a_readback_reads_the_bound_tensor_through_the_c_abi() {
    use ptovm_vm::desc::TensorArg;
    let code = ptovm_tests::assemble_text(ptovm_tests::ROUTED).0;
    let params: Params = vec![
        (ParamKind::Scalar, 8, vec![]),
        (ParamKind::Scalar, 4, vec![]),
        (ParamKind::Array, 0, vec![2, 0, 3, 1]),
    ];
    // The router's counts, as its tasks would have written them: 4 + 0 + 1 + 5 experts' tasks.
    let memory: Vec<i32> = vec![4, 0, 1, 5];
    let bound = |base: u64, bytes: u64, dtype: ptovm_vm::DType| TensorArg {
        base,
        bytes,
        dtype: dtype as u8,
        ..TensorArg::default()
    };
    let tensors = [
        TensorArg::default(),
        bound(memory.as_ptr() as u64, 16, ptovm_vm::DType::I32),
        TensorArg::default(),
    ];
    let read = [(1u16, memory.iter().map(|&c| c as u32).collect::<Vec<u32>>())];
    for n in [1, 2, 3] {
        let (ran, _) = ptovm_tests::device::run_single_reading(
            &code,
            &params,
            &tensors,
            &read,
            settings(n, 4),
            (1 << 30, 1_000_000),
        )
        .unwrap()
        .unwrap();
        assert_eq!(ran.len(), 8 + 10, "{n} AICPUs");
        let v = ptovm_vm::verify(&code).unwrap();
        let vals = ptovm_tests::values(&params);
        let p = ptovm_vm::RuntimeParams::new(&v, &vals).unwrap();
        let mut with = |_: &ptovm_vm::readback::Readback, _: &[ptovm_host_sim::RefTask]| {
            Some(read[0].1.clone())
        };
        let reference =
            ptovm_host_sim::reference_expand_with(&v, &p, n, u64::MAX, &mut with).unwrap();
        ptovm_host_sim::check_run(&reference, &ran).unwrap();
    }
}
