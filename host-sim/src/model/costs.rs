//! Kernel durations (spec/pto.md §4.8): what each task's kernel costs on the modelled machine.
//! A cost table's figure (measured on hardware) wins; else what the module declares (an
//! expression of the task's parameters and region sizes, evaluated at each task); else the
//! machine's default.

use ptovm_vm::desc::Binding;
use ptovm_vm::format::CostUnit;
use ptovm_vm::{Io, Pool, RuntimeParams, Verified};

use super::machine::{CostTable, Machine};

/// Where a kernel's duration comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The cost table.
    Table,
    /// The module's `cost(…)`, evaluated at each task.
    Declared,
    /// The machine's default (nothing else gives one).
    Default,
}

/// A kernel's duration that a launch cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// A task's declared cost could not be evaluated, or is negative.
    #[error("task {task}: the cost of kernel `{kernel}`: {reason}")]
    Task {
        /// The task.
        task: u64,
        /// Its kernel.
        kernel: String,
        /// What went wrong.
        reason: ptovm_vm::cost::CostError,
    },
    /// A pool that a kernel runs on has no cores on the machine.
    #[error("kernel `{kernel}` runs on {pool} cores and the machine has none")]
    NoCores {
        /// The kernel.
        kernel: String,
        /// Its pool.
        pool: &'static str,
    },
}

/// Every kernel's duration on one machine, by kernel index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCosts {
    /// A fixed duration (the table's or the default), ns; unused for a declared one.
    ns: Vec<u64>,
    sources: Vec<Source>,
    /// The core clock, for declared costs in cycles.
    machine: Machine,
}

impl KernelCosts {
    /// The durations of `program`'s kernels on `machine`, `table` overriding the rest.
    pub fn new(
        program: &Verified<'_>,
        machine: &Machine,
        table: &CostTable,
    ) -> Result<KernelCosts, CostError> {
        let mut ns = Vec::new();
        let mut sources = Vec::new();
        for (k, name) in program.kernels().iter().zip(program.kernel_names()) {
            let pool = if k.pool == 1 {
                Pool::Cube
            } else {
                Pool::Vector
            };
            if machine.cores(pool) == 0 {
                return Err(CostError::NoCores {
                    kernel: name.to_string(),
                    pool: pool.name(),
                });
            }
            match table.kernels.get(name) {
                Some(d) => {
                    ns.push(d.ns(machine));
                    sources.push(Source::Table);
                }
                None if k.cost().is_some() => {
                    ns.push(0);
                    sources.push(Source::Declared);
                }
                None => {
                    ns.push(machine.default_kernel_ns);
                    sources.push(Source::Default);
                }
            }
        }
        Ok(KernelCosts {
            ns,
            sources,
            machine: *machine,
        })
    }

    /// Whether kernel `kernel`'s duration is its declared cost, evaluated at each task.
    pub fn declared(&self, kernel: u16) -> bool {
        self.sources.get(kernel as usize) == Some(&Source::Declared)
    }

    /// Whether some kernel's duration depends on its task (a declared cost is used).
    pub fn per_task(&self) -> bool {
        self.sources.contains(&Source::Declared)
    }

    /// The duration of a task of kernel `kernel` whose duration is fixed, ns (0 for a declared
    /// one — see [`KernelCosts::of_task`] — and for an index the program does not have).
    pub fn task_ns(&self, kernel: u32) -> u64 {
        self.ns.get(kernel as usize).copied().unwrap_or(0)
    }

    /// The duration of task `id` of kernel `kernel` with parameters `params` and regions
    /// `ios`, ns: its kernel's fixed one, or its declared cost evaluated at the task
    /// (`tensors`: the program's tensors as the launch shapes them).
    #[allow(clippy::too_many_arguments)]
    pub fn of_task(
        &self,
        v: &Verified<'_>,
        p: &RuntimeParams<'_>,
        tensors: &[Binding],
        id: u64,
        kernel: u16,
        params: &[i64],
        ios: &[Io],
    ) -> Result<u64, CostError> {
        if !self.declared(kernel) {
            return Ok(self.task_ns(kernel as u32));
        }
        let fail = |reason| CostError::Task {
            task: id,
            kernel: v
                .kernel_names()
                .nth(kernel as usize)
                .unwrap_or("?")
                .to_string(),
            reason,
        };
        match ptovm_vm::cost::task_cost(v, p, tensors, kernel, params, ios).map_err(fail)? {
            Some((n, CostUnit::Ns)) => Ok(n),
            Some((c, CostUnit::Cycles)) => Ok(self.machine.cycles_ns(c)),
            None => Ok(self.task_ns(kernel as u32)),
        }
    }
}
