//! Task descriptors (spec/runtime.md §3.8): every task of every bundled example reaches its
//! kernel, in threaded runs over several schedules, with a descriptor equal to one computed
//! here independently from the reference expansion and the tensor declarations — kernel,
//! pool, parameters, and each region's offset, extents and row-major strides.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::kernel::{Call, Registry};
use ptovm_host_sim::sim::{self, SimError};
use ptovm_tests::desc::{expected, expected_bound, text};
use ptovm_tests::values;
use ptovm_vm::desc::{BindError, Descriptor, TensorArg, DESC_BYTES};
use ptovm_vm::{verify, ParamDefault, ParamKind, RuntimeParams, Verified};

use ptovm_tests::Params;

fn example(name: &str) -> Vec<u8> {
    ptovm_tests::example_code(name)
}

/// The module's defaults, with the scalars named in `overrides` replaced.
fn defaults(v: &Verified<'_>, overrides: &[(&str, u32)]) -> Params {
    (0..v.params().len())
        .map(|slot| {
            let p = &v.params()[slot];
            let name = v.name(p.name_off.get(), p.name_len.get() as u32);
            match v.param_default(slot).expect("every example has defaults") {
                ParamDefault::Scalar(x) => {
                    let x = overrides
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map_or(x, |&(_, x)| x);
                    (ParamKind::Scalar, x, vec![])
                }
                ParamDefault::Array(a) => {
                    (ParamKind::Array, 0, a.iter().map(|x| x.get()).collect())
                }
            }
        })
        .collect()
}

/// Runs `code` threaded with a kernel for every name that keeps each task's descriptor.
fn run(code: &[u8], params: &Params, o: sim::Options) -> Vec<Descriptor> {
    run_bound(code, params, &[], o).unwrap()
}

/// [`run`] with the tensors bound as `tensors` says.
fn run_bound(
    code: &[u8],
    params: &Params,
    tensors: &[TensorArg],
    o: sim::Options,
) -> Result<Vec<Descriptor>, SimError> {
    let v = verify(code).unwrap();
    let seen: Arc<Mutex<BTreeMap<u64, Descriptor>>> = Arc::default();
    let mut kernels = Registry::new();
    for k in v.kernels() {
        let seen = seen.clone();
        kernels.register(
            v.name(k.name_off.get(), k.name_len.get() as u32),
            move |c: &Call<'_>| {
                let d = c.descriptor();
                assert_eq!(d.id, c.task);
                assert_eq!(d.kernel, c.kernel);
                let old = seen.lock().unwrap().insert(d.id, d);
                assert!(old.is_none(), "task {} ran twice", c.task);
                Ok(())
            },
        );
    }
    let vals = values(params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let r = sim::run_bound(v, p, o, None, &kernels, tensors)?;
    assert!(r.checked);
    let seen = seen.lock().unwrap();
    Ok(seen.values().copied().collect())
}

fn opts(aicpus: u32, window: usize) -> sim::Options {
    sim::Options {
        aicpus,
        cube: 2 * aicpus,
        vector: 2 * aicpus,
        window,
        check: true,
        jitter: Some(aicpus as u64),
        work_steal: aicpus == 2,
        cores: [sim::CoreAlloc::Shared, sim::CoreAlloc::Partition][aicpus as usize % 2],
        ..sim::Options::default()
    }
}

#[test]
fn every_example_task_reaches_its_kernel_with_its_descriptor() {
    for (name, overrides) in [
        ("attention.pto", &[][..]),
        ("control.pto", &[][..]),
        ("flash_decode.pto", &[][..]),
        ("decode_planned.pto", &[][..]),
        ("moe.pto", &[][..]),
        ("moe_routed.pto", &[][..]),
        ("deepseek_indexer.pto", &[("S", 8)][..]),
        ("llama_layer.pto", &[("N", 4)][..]),
    ] {
        let code = example(name);
        let v = verify(&code).unwrap();
        let params = defaults(&v, overrides);
        let want = expected(&code, &params);
        assert!(!want.is_empty(), "{name}");
        for (aicpus, window) in [(1, 1), (2, 4), (6, 1024)] {
            let got = run(&code, &params, opts(aicpus, window));
            assert_eq!(
                got.len(),
                want.len(),
                "{name}: {aicpus} AICPUs, window {window}"
            );
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(text(g), text(w), "{name}: {aicpus} AICPUs, window {window}");
                // The scratch's place is the run's (tests/tests/workspace.rs checks it): whole
                // lines, no address without workspace memory.
                let mut g = *g;
                assert!(g.workspace_offset % 64 == 0 && g.workspace_addr == 0);
                g.workspace_offset = 0;
                assert_eq!(&g, w, "{name}: {aicpus} AICPUs, window {window}");
            }
        }
    }
}

/// A region of a tensor shaped by a runtime parameter, a whole dimension left unnamed, and a
/// parameter of the task: the descriptor by hand.
#[test]
fn a_descriptor_by_hand() {
    let code = assemble(
        "d.pto",
        "@param R = 5
@tensor X: f32[3, R, 4]
@tensor Y: bf16[R]
@kernel k(i, j): vector(in x, out y)
@workload w() { parallel_for i in dense[3] { task @k(i, 7) resources(X[i, 1:4], Y[i]) } }",
        &Options::default(),
    )
    .unwrap()
    .bytes;
    let v = verify(&code).unwrap();
    let params = defaults(&v, &[]);
    let got = run(&code, &params, opts(1, 2));
    assert_eq!(got.len(), 3);
    let d = &got[2];
    assert_eq!((d.id, d.pool, d.params()), (2, 1, &[2i64, 7][..]));
    let x = &d.regions()[0];
    // X[2, 1:4, :] of f32[3, 5, 4]: strides 20, 4, 1.
    assert_eq!(
        (x.tensor, x.dir, x.rank, x.dtype),
        (0, 1, 3, ptovm_vm::DType::F32 as u8)
    );
    assert_eq!(
        (x.offset, x.extents(), x.strides()),
        (2 * 20 + 4, &[1, 3, 4][..], &[20, 4, 1][..])
    );
    assert_eq!((x.len(), x.addr), (12, 0));
    let y = &d.regions()[1];
    assert_eq!(
        (y.tensor, y.dir, y.offset, y.extents(), y.strides()),
        (1, 2, 2, &[1][..], &[1][..])
    );
    assert_eq!(d.regions().len(), 2);
    assert_eq!(std::mem::size_of::<Descriptor>(), DESC_BYTES);
    assert_eq!(DESC_BYTES, 2080);
    assert_eq!(
        (d.workspace_offset, d.workspace_bytes, d.workspace_addr),
        (0, 0, 0)
    );
}

/// `X: f32[3, R, 4]` and `Y: bf16[R]` with `R = 5`; tasks read `X[i, 1:4]` and write `Y[i]`.
const BOUND: &str = "@param R = 5
@tensor X: f32[3, R, 4]
@tensor Y: bf16[R]
@kernel k(i, j): vector(in x, out y)
@workload w() { parallel_for i in dense[3] { task @k(i, 7) resources(X[i, 1:4], Y[i]) } }";

fn bound_code() -> Vec<u8> {
    assemble("b.pto", BOUND, &Options::default()).unwrap().bytes
}

fn tensor(base: u64, bytes: u64, dtype: ptovm_vm::DType) -> TensorArg {
    TensorArg {
        base,
        bytes,
        dtype: dtype as u8,
        ..TensorArg::default()
    }
}

/// Bound tensors: each region's address is its base plus its offset in bytes, row-major or
/// with the binding's own strides (column-major here), over several schedules.
#[test]
fn bound_tensors_give_each_region_its_address() {
    use ptovm_vm::DType::{Bf16, F32};
    let code = bound_code();
    let v = verify(&code).unwrap();
    let params = defaults(&v, &[]);
    let row_major = [tensor(0x10_0000, 240, F32), tensor(0x20_0000, 10, Bf16)];
    let mut column_major = row_major;
    column_major[0].rank = 3;
    column_major[0].strides[..3].copy_from_slice(&[1, 3, 15]);
    for tensors in [row_major, column_major] {
        let want = expected_bound(&code, &params, &tensors).unwrap();
        for (aicpus, window) in [(1, 1), (2, 2), (3, 8)] {
            let got = run_bound(&code, &params, &tensors, opts(aicpus, window)).unwrap();
            assert_eq!(got, want);
        }
    }
    // By hand: task 2 reads X[2, 1:4, :].
    let got = run_bound(&code, &params, &row_major, opts(1, 1)).unwrap();
    let x = &got[2].regions()[0];
    assert_eq!((x.offset, x.addr), (2 * 20 + 4, 0x10_0000 + 4 * 44));
    let got = run_bound(&code, &params, &column_major, opts(1, 1)).unwrap();
    let x = &got[2].regions()[0];
    assert_eq!((x.offset, x.strides()), (2 + 3, &[1, 3, 15][..]));
    assert_eq!(x.addr, 0x10_0000 + 4 * 5);
    assert_eq!(got[2].regions()[1].addr, 0x20_0000 + 2 * 2);
}

/// Every binding the declarations refuse, refused before anything runs, naming the tensor.
#[test]
fn bad_bindings_are_refused() {
    use ptovm_vm::DType::{Bf16, F16, F32};
    let code = bound_code();
    let v = verify(&code).unwrap();
    let params = defaults(&v, &[]);
    let good = [tensor(0x10_0000, 240, F32), tensor(0x20_0000, 10, Bf16)];
    let with = |f: &dyn Fn(&mut [TensorArg; 2])| {
        let mut t = good;
        f(&mut t);
        t
    };
    let cases: Vec<([TensorArg; 2], BindError)> = vec![
        (
            with(&|t| t[0].dtype = F16 as u8),
            BindError::DType {
                tensor: 0,
                declared: "f32",
                given: "f16",
            },
        ),
        (
            with(&|t| t[0].base += 2),
            BindError::Misaligned {
                tensor: 0,
                base: 0x10_0002,
                align: 4,
            },
        ),
        (
            with(&|t| t[0].bytes = 239),
            BindError::TooSmall {
                tensor: 0,
                need: 240,
                given: 239,
            },
        ),
        (
            with(&|t| t[1].base = u64::MAX - 1),
            BindError::TooSmall {
                tensor: 1,
                need: 10,
                given: 10,
            },
        ),
        (
            with(&|t| {
                t[0].rank = 2;
            }),
            BindError::Rank {
                tensor: 0,
                declared: 3,
                given: 2,
            },
        ),
    ];
    for (tensors, want) in cases {
        match run_bound(&code, &params, &tensors, opts(2, 4)) {
            Err(SimError::Bind(e)) => assert_eq!(e, want),
            other => panic!("{want:?}: {other:?}"),
        }
    }
    // Strides that put two elements at one address, or a stride below 1.
    for strides in [[1, 1, 1], [20, 4, 0], [20, 4, -1], [1, 2, 10], [5, 1, 4]] {
        let t = with(&|t| {
            t[0].rank = 3;
            t[0].strides[..3].copy_from_slice(&strides);
        });
        let e = run_bound(&code, &params, &t, opts(1, 4)).unwrap_err();
        assert!(
            matches!(e, SimError::Bind(BindError::Strides { tensor: 0, .. })),
            "{strides:?}: {e:?}"
        );
    }
    // Strides that keep elements apart but reach further than the memory: element (2, 4, 3)
    // is 2·40 + 4·8 + 3 = 115, so 116 elements of 4 bytes.
    let t = with(&|t| {
        t[0].rank = 3;
        t[0].strides[..3].copy_from_slice(&[40, 8, 1]);
    });
    let e = run_bound(&code, &params, &t, opts(1, 4)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tensor binding: tensor 0 needs 464 bytes from its base but is bound to 240"
    );
    // One binding for two tensors.
    let e = run_bound(&code, &params, &good[..1], opts(1, 4)).unwrap_err();
    assert!(
        matches!(
            e,
            SimError::Bind(BindError::Count {
                expected: 2,
                given: 1
            })
        ),
        "{e:?}"
    );
    // A tensor used without a declaration has no shape to bind.
    let implicit = assemble(
        "i.pto",
        "@kernel k(i): vector(out y)\n@workload w() { parallel_for i in dense[2] { task @k(i) resources(Z[i]) } }",
        &Options::default(),
    )
    .unwrap()
    .bytes;
    let e = run_bound(
        &implicit,
        &vec![],
        &[tensor(0x1000, 64, ptovm_vm::DType::Unknown)],
        opts(1, 2),
    )
    .unwrap_err();
    assert!(
        matches!(e, SimError::Bind(BindError::NoShape { tensor: 0 })),
        "{e:?}"
    );
    // Unbound tensors (base 0) are fine: offsets only.
    let t = with(&|t| t[1].base = 0);
    let got = run_bound(&code, &params, &t, opts(1, 2)).unwrap();
    assert_eq!(got[1].regions()[1].addr, 0);
}
