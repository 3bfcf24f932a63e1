//! Task descriptors (spec/runtime.md §3.8): every task of every bundled example reaches its
//! kernel, in threaded runs over several schedules, with a descriptor equal to one computed
//! here independently from the reference expansion and the tensor declarations — kernel,
//! pool, parameters, and each region's offset, extents and row-major strides.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::kernel::{Call, Registry};
use ptovm_host_sim::sim;
use ptovm_host_sim::DepMode;
use ptovm_tests::desc::{expected, text};
use ptovm_tests::values;
use ptovm_vm::desc::{Descriptor, DESC_BYTES};
use ptovm_vm::{verify, ParamDefault, ParamKind, RuntimeParams, Verified, WindowMode};

use ptovm_tests::Params;

fn example(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    assemble(
        name,
        &std::fs::read_to_string(path).unwrap(),
        &Options::default(),
    )
    .unwrap()
    .bytes
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
            },
        );
    }
    let vals = values(params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let r = sim::run_with_kernels(v, p, o, None, &kernels).unwrap();
    assert!(r.checked);
    let seen = seen.lock().unwrap();
    seen.values().copied().collect()
}

fn opts(aicpus: u32, window: usize) -> sim::Options {
    sim::Options {
        aicpus,
        cube: 2 * aicpus,
        vector: 2 * aicpus,
        window,
        mode: WindowMode::Stall,
        threads: 2,
        check: true,
        jitter: Some(aicpus as u64),
        naive: false,
        trace: false,
        start: sim::Start::Immediate,
        pipeline_depth: 0,
        work_steal: aicpus == 2,
        batch_deps: 0,
        timing: sim::IssueTiming::Immediate,
        deps: DepMode::Overlap,
        descriptors: false,
    }
}

#[test]
fn every_example_task_reaches_its_kernel_with_its_descriptor() {
    for (name, overrides) in [
        ("attention.pto", &[][..]),
        ("control.pto", &[][..]),
        ("flash_decode.pto", &[][..]),
        ("moe.pto", &[][..]),
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
                assert_eq!(g, w, "{name}: {aicpus} AICPUs, window {window}");
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
    assert_eq!(DESC_BYTES, 2064);
}
