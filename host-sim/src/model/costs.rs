//! Kernel durations (spec/pto.md §4.8): what each task's kernel costs on the modelled machine.
//! A cost table's figure (measured on hardware) wins; else what the module declares; else the
//! machine's default.

use ptovm_vm::{Pool, Verified};

use super::machine::{CostTable, Machine};

/// Where a kernel's duration comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The cost table.
    Table,
    /// The machine's default (nothing else gives one).
    Default,
}

/// A kernel's duration that a launch cannot use.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
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
    ns: Vec<u64>,
    sources: Vec<Source>,
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
                None => {
                    ns.push(machine.default_kernel_ns);
                    sources.push(Source::Default);
                }
            }
        }
        Ok(KernelCosts { ns, sources })
    }

    /// The duration of a task of kernel `kernel`, ns (0 for an index the program does not have).
    pub fn task_ns(&self, kernel: u32) -> u64 {
        self.ns.get(kernel as usize).copied().unwrap_or(0)
    }

    /// Where kernel `kernel`'s duration comes from.
    pub fn source(&self, kernel: u32) -> Option<Source> {
        self.sources.get(kernel as usize).copied()
    }
}
