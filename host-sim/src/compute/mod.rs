//! Computing runs (spec/runtime.md §3.9): tasks that compute on real data, and the two checks
//! of their answer.
//!
//! [`run`] gives every declared tensor host memory ([`Memory`]), fills the inputs from a seed,
//! and runs the workload twice with real kernels ([`kernels::library`] or the caller's):
//!
//! 1. **in program order**, one task at a time on one thread ([`run_in_order`]) — the answer
//!    the workload means;
//! 2. **through the threaded simulator** with the schedule asked for (AICPUs, window,
//!    dispatch, start policy, stealing, batching).
//!
//! The two answers must be **bit-identical**, tensor by tensor: a task computes the same bits
//! wherever it runs, so a difference can only come from a dependency the schedule did not
//! respect. No written float may be NaN (infinities are reported: −∞ is a legitimate value, the
//! running maximum before any score or the log-sum-exp of an empty chunk). And when the workload has a
//! [`models::Model`], its outputs must be within a stated tolerance of that independent
//! reference, which checks that the module describes the computation it claims to.
//!
//! ```
//! use ptovm_host_sim::compute::{self, kernels};
//! use ptovm_host_sim::sim::Options;
//! use ptovm_vm::{verify, RuntimeParams, Value};
//! let src = "@tensor X: f32[4, 8]\n@tensor Y: f32[4, 8]\n\
//!      @kernel rmsnorm(t): vector(in x, out y)\n\
//!      @workload norm(%t: dense[4]) { parallel_for t in %t { task @rmsnorm(t) resources(X[t], Y[t]) } }";
//! let m = ptovm_assembler::assemble("norm.pto", src, &Default::default()).unwrap();
//! let v = verify(&m.bytes).unwrap();
//! let p = RuntimeParams::new(&v, &[]).unwrap();
//! let o = Options { aicpus: 2, cube: 2, vector: 2, ..Options::default() };
//! let done = compute::run(v, p, o, None, &kernels::library(), 7).unwrap();
//! assert_eq!(done.report.tasks_total, 4);
//! assert!(done.memory.tensor("Y").unwrap().get(0) != 0.0);
//! ```

pub mod kernels;
mod memory;
pub mod models;
mod view;

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use ptovm_vm::desc::{self, Binding};
use ptovm_vm::{DType, Interpreter, RuntimeParams, Status, Verified};

pub use memory::{Memory, Tensor, MAX_BYTES};
pub use view::View;

use crate::kernel::{Call, Registry};
use crate::sim::{self, Report, SimError};

/// Why a computing run failed.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The program names a kernel the registry lacks.
    #[error("kernel {kernel} has no implementation in the simulator's kernel library (spec/kernels.md lists the kernels it has)")]
    MissingKernel {
        /// Its name.
        kernel: String,
    },
    /// A tensor's element type cannot be computed with.
    #[error("tensor {tensor} is {dtype}, which the simulator's kernels do not compute with")]
    DType {
        /// The tensor.
        tensor: String,
        /// Its type's name.
        dtype: &'static str,
    },
    /// The tensors need more memory than a computing run allocates.
    #[error("the tensors need {bytes} bytes of memory, more than the {limit} a computing run allocates; give smaller shapes with --param")]
    TooBig {
        /// Bytes needed (`u64::MAX`: more than an address holds).
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The run failed (a kernel's failure included: `SimError::Kernel`).
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The run's answer differs from the in-order run's.
    #[error("{at} is {run:#x} after the run but {in_order:#x} after the in-order run: a dependency was not respected")]
    Differs {
        /// The element, as `NAME[i, j]`.
        at: String,
        /// Its bits after the run.
        run: u64,
        /// Its bits after the in-order run.
        in_order: u64,
    },
    /// A written element is NaN.
    #[error("{at} is NaN after the run (tensor {tensor} is written by the workload)")]
    NaN {
        /// The tensor.
        tensor: String,
        /// The element, as `NAME[i, j]`.
        at: String,
    },
    /// The workload's model could not be computed (its tensors or parameters do not fit it).
    #[error("the reference model of workload {workload}: {message}")]
    Model {
        /// The workload.
        workload: String,
        /// Why.
        message: String,
    },
}

/// One output compared with the model's.
#[derive(Clone, Debug)]
pub struct Compared {
    /// The tensor.
    pub tensor: String,
    /// Its element type.
    pub dtype: DType,
    /// Largest `|run − expected|`.
    pub max_abs: f64,
    /// `max_abs / max |expected|`: the error relative to the output's scale.
    pub max_rel: f64,
    /// The element with the largest error, as `NAME[i, j]`.
    pub worst: String,
    /// The tolerance on `max_rel` ([`models::tolerance`]).
    pub tolerance: f64,
}

impl Compared {
    /// Whether the error is within the tolerance.
    pub fn ok(&self) -> bool {
        self.max_rel <= self.tolerance
    }
}

/// What a computing run gives back.
#[derive(Debug)]
pub struct Computed {
    /// The threaded run's report.
    pub report: Report,
    /// The tensors after the threaded run (bit-identical to the in-order run's).
    pub memory: Memory,
    /// The model the outputs were compared with, and the comparisons (`None`: the workload
    /// has no model; only the in-order comparison was made).
    pub model: Option<(&'static models::Model, Vec<Compared>)>,
    /// Nanoseconds the in-order run took.
    pub in_order_ns: u64,
    /// The written float tensors that hold infinities: each with how many and the first, as
    /// `NAME[i, j]`.
    pub infinities: Vec<(String, usize, String)>,
}

impl Computed {
    /// Whether every output is within its tolerance of the model (true without a model).
    pub fn ok(&self) -> bool {
        self.model
            .as_ref()
            .is_none_or(|(_, c)| c.iter().all(Compared::ok))
    }
}

/// Runs the workload with `kernels` on data drawn from `seed`, in program order and through
/// the threaded simulator with options `o`, and checks the answer: bit-identical to the
/// in-order run, free of NaN, and (with a model) close to the model. An error when a kernel is
/// missing or fails, a tensor cannot be computed with, or the answers differ; a model's
/// tolerance exceeded is reported in [`Computed::model`] (see [`Computed::ok`]).
pub fn run(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: sim::Options,
    progress: Option<&AtomicU64>,
    kernels: &Registry,
    seed: u64,
) -> Result<Computed, DataError> {
    if let Some(k) = kernels.missing(&v).first() {
        return Err(DataError::MissingKernel {
            kernel: k.to_string(),
        });
    }
    let in_order = Memory::new(&v, &p)?;
    in_order.fill(seed);
    let memory = Memory::new(&v, &p)?;
    memory.copy_from(&in_order);
    let t0 = Instant::now();
    run_in_order(v, p, kernels, &in_order)?;
    let in_order_ns = t0.elapsed().as_nanos() as u64;
    let report = sim::run_on_memory(v, p, o, progress, kernels, &memory)?;
    compare(&memory, &in_order)?;
    let infinities = non_finite(&memory)?;
    let model = match models::model(v.workload_name()) {
        None => None,
        Some(m) => {
            let expected =
                (m.outputs)(&models::Inputs::new(&memory, &v, &p)).map_err(|message| {
                    DataError::Model {
                        workload: m.workload.into(),
                        message,
                    }
                })?;
            let compared = expected
                .iter()
                .map(|e| against(&memory, m.workload, e))
                .collect::<Result<_, _>>()?;
            Some((m, compared))
        }
    };
    Ok(Computed {
        report,
        memory,
        model,
        in_order_ns,
        infinities,
    })
}

/// Runs every task of the program with `kernels` on `memory`, one at a time in program order
/// on this thread: the answer the workload means, which every schedule must reproduce.
/// Returns the number of tasks.
pub fn run_in_order(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    kernels: &Registry,
    memory: &Memory,
) -> Result<u64, DataError> {
    let mut bindings = Vec::with_capacity(v.tensors().len());
    for ((i, t), arg) in v.tensors().iter().enumerate().zip(memory.bindings()) {
        bindings.push(
            Binding::declared(t, &p)
                .bind(i as u16, &arg)
                .map_err(SimError::Bind)?,
        );
    }
    let words: Vec<ptovm_vm::sync::AtomicU64> = (0..desc::slot_words(&v))
        .map(|_| ptovm_vm::sync::AtomicU64::new(0))
        .collect();
    let resolved = kernels.resolve(&v);
    // A READBACK reads this memory, every task before it having run (`readback::read`).
    let mut rb_values = vec![0u32; ptovm_vm::sched::readback_words(&v, &p)];
    let mut rb_slots = vec![ptovm_vm::Value::Scalar(0); ptovm_vm::sched::readback_blocks(&v)];
    let (mut values, mut slots) = (&mut rb_values[..], &mut rb_slots[..]);
    let mut it = Interpreter::new(v, p, 0, 1).map_err(SimError::Launch)?;
    let mut tasks = 0u64;
    loop {
        let before = it.stats().emitted;
        let status = it
            .next_task()
            .map_err(|e| SimError::Launch(ptovm_vm::LaunchError::Run(e)))?;
        if it.stats().emitted > before {
            let t = it.current_task();
            desc::write(&words, t, &bindings);
            if let Some(&(name, k)) = resolved.get(t.kernel as usize) {
                k.run(&Call {
                    task: t.id,
                    kernel: t.kernel,
                    name,
                    pool: t.pool(),
                    aicpu: 0,
                    core: 0,
                    slot: &words,
                    memory: Some(memory),
                })
                .map_err(|e| SimError::Kernel {
                    task: t.id,
                    kernel: name.to_string(),
                    message: e.0,
                })?;
            }
            tasks += 1;
        }
        if status == Status::Readback {
            let rb = it.readback().ok_or_else(|| {
                DataError::Sim(SimError::Check("a READBACK stop without its point".into()))
            })?;
            let read = |into: &mut [u32]| {
                memory
                    .tensors()
                    .get(rb.tensor as usize)
                    .is_some_and(|t| t.read_words(into))
            };
            let old = *it.params();
            let p = ptovm_vm::readback::read(&v, &old, &rb, &mut values, &mut slots, read)
                .map_err(|e| match e {
                    ptovm_vm::readback::ReadError::Run(e) => {
                        SimError::Launch(ptovm_vm::LaunchError::Run(e))
                    }
                    ptovm_vm::readback::ReadError::Short => {
                        SimError::Check("read-back buffers too small".into())
                    }
                })?;
            it.rebind(p);
        }
        if status == Status::Done {
            return Ok(tasks);
        }
    }
}

/// The first element whose bits differ between the two memories.
fn compare(run: &Memory, in_order: &Memory) -> Result<(), DataError> {
    for (a, b) in run.tensors().iter().zip(in_order.tensors()) {
        for i in 0..a.len() {
            if a.bits(i) != b.bits(i) {
                return Err(DataError::Differs {
                    at: a.coords(i),
                    run: a.bits(i),
                    in_order: b.bits(i),
                });
            }
        }
    }
    Ok(())
}

/// An error at the first NaN in a written float tensor; else the tensors with infinities.
fn non_finite(m: &Memory) -> Result<Vec<(String, usize, String)>, DataError> {
    let mut infinities = Vec::new();
    for t in m.tensors().iter().filter(|t| t.written) {
        if !matches!(t.dtype, DType::F16 | DType::Bf16 | DType::F32 | DType::F64) {
            continue;
        }
        let mut inf = (0usize, None);
        for i in 0..t.len() {
            let x = t.get(i);
            if x.is_nan() {
                return Err(DataError::NaN {
                    tensor: t.name.clone(),
                    at: t.coords(i),
                });
            }
            if x.is_infinite() {
                inf.0 += 1;
                inf.1.get_or_insert(i);
            }
        }
        if let (n, Some(first)) = inf {
            infinities.push((t.name.clone(), n, t.coords(first)));
        }
    }
    Ok(infinities)
}

/// The run's tensor against the model's expected values.
fn against(m: &Memory, workload: &str, e: &models::Expected) -> Result<Compared, DataError> {
    let t = m
        .tensor(&e.tensor)
        .filter(|t| t.len() == e.values.len())
        .ok_or_else(|| DataError::Model {
            workload: workload.into(),
            message: format!(
                "the model gives {} values of {}, which the module does not have in that size",
                e.values.len(),
                e.tensor
            ),
        })?;
    let (mut max_abs, mut worst, mut scale) = (0f64, 0usize, 0f64);
    for (i, &x) in e.values.iter().enumerate() {
        let err = (f64::from(t.get(i)) - x).abs();
        if err > max_abs || err.is_nan() {
            max_abs = err;
            worst = i;
        }
        scale = scale.max(x.abs());
    }
    Ok(Compared {
        tensor: t.name.clone(),
        dtype: t.dtype,
        max_abs,
        max_rel: if scale > 0.0 {
            max_abs / scale
        } else {
            max_abs
        },
        worst: t.coords(worst),
        tolerance: models::tolerance(t.dtype),
    })
}
