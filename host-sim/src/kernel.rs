//! Kernels of the simulated AICores, looked up by name.
//!
//! A program names its kernels (`@kernel matmul_q(t): cube(...)`); the simulator resolves each
//! name once, before the run, in a [`Registry`], and a core that is handed a task calls the
//! kernel of that task's kernel index. A name the registry does not hold gets the default
//! kernel, [`Record`], which does nothing: the simulator itself records every task's run
//! (its core, its pool, and — with `check` — its start and end for the reference check). A
//! computing run (`compute`) refuses such a name instead: its registry must hold every kernel
//! of the program ([`Registry::missing`]).
//!
//! A kernel reads its task's [`Descriptor`] and, in a computing run, views of its regions over
//! the tensors' memory ([`Call::views`]); it returns a [`KernelError`] to fail the run.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use ptovm_host_sim::kernel::{Call, KernelError, Registry};
//! static MATMULS: AtomicU64 = AtomicU64::new(0);
//! let mut kernels = Registry::new();
//! kernels.register("matmul_q", |_: &Call<'_>| -> Result<(), KernelError> {
//!     MATMULS.fetch_add(1, Ordering::Relaxed);
//!     Ok(())
//! });
//! assert!(kernels.get("matmul_q").is_some());
//! assert!(kernels.get("rmsnorm").is_none()); // runs the default kernel
//! ```

use std::collections::HashMap;

use ptovm_vm::desc::{self, Descriptor};
use ptovm_vm::sync::AtomicU64;
use ptovm_vm::{Pool, Verified};

use crate::compute::{Memory, View};

/// What a core knows of the task it runs (the device's `ptovm_task`, plus where it runs).
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// Program-order task id.
    pub task: u64,
    /// Kernel index in the program's kernel table.
    pub kernel: u16,
    /// The kernel's name.
    pub name: &'a str,
    /// The pool of the core (cube or vector).
    pub pool: Pool,
    /// The AICPU that generated the task.
    pub aicpu: u32,
    /// The core running it (cube cores first, then vector cores).
    pub core: u32,
    /// Its window slot's descriptor words, read by [`Call::descriptor`].
    pub(crate) slot: &'a [AtomicU64],
    /// The tensors' memory in a computing run.
    pub(crate) memory: Option<&'a Memory>,
}

impl<'a> Call<'a> {
    /// The task's descriptor (spec/runtime.md §3.8): its parameters and its regions resolved
    /// against the tensors' bindings. Read from the window slot on each call (a kernel that
    /// does not need it does not pay for the copy).
    pub fn descriptor(&self) -> Descriptor {
        desc::read(self.slot)
    }

    /// Views of the `N` regions of the task `d` describes (its descriptor) over the tensors'
    /// memory: an error when the task has another number of regions, a region's tensor has no
    /// memory, or the run is not computing (no memory).
    pub fn views<const N: usize>(&self, d: &Descriptor) -> Result<[View<'a>; N], KernelError> {
        let memory = self.memory.ok_or_else(|| {
            KernelError::new(
                "the run has no tensor memory: kernels that read regions need a computing run",
            )
        })?;
        let regions = d.regions();
        if regions.len() != N {
            return Err(KernelError::new(format!(
                "the kernel takes {N} regions, the task gives {}",
                regions.len()
            )));
        }
        let mut views = Vec::with_capacity(N);
        for (i, r) in regions.iter().enumerate() {
            views.push(View::new(memory, r, i)?);
        }
        views
            .try_into()
            .map_err(|_| KernelError::new("region count"))
    }
}

/// Why a kernel failed; the simulator adds the task and the kernel's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KernelError(pub String);

impl KernelError {
    /// A failure described by `message`.
    pub fn new(message: impl Into<String>) -> KernelError {
        KernelError(message.into())
    }
}

/// A kernel: runs on a core's driver thread, between the task's start and its end. It must
/// return: a kernel that blocks holds up every AICPU and core of its driver thread. An error
/// stops the run (every AICPU) and is reported with the task.
pub trait Kernel: Send + Sync {
    /// Runs one task.
    fn run(&self, call: &Call<'_>) -> Result<(), KernelError>;
}

impl<F: Fn(&Call<'_>) -> Result<(), KernelError> + Send + Sync> Kernel for F {
    fn run(&self, call: &Call<'_>) -> Result<(), KernelError> {
        self(call)
    }
}

/// The default kernel: does nothing (the simulator records the run).
#[derive(Clone, Copy, Debug, Default)]
pub struct Record;

impl Kernel for Record {
    #[inline]
    fn run(&self, _: &Call<'_>) -> Result<(), KernelError> {
        Ok(())
    }
}

/// Kernels by name.
#[derive(Default)]
pub struct Registry {
    kernels: HashMap<String, Box<dyn Kernel>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("kernels", &self.names())
            .finish()
    }
}

impl Registry {
    /// An empty registry: every kernel is the default.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers `kernel` under `name`; gives back the kernel it replaces, if any.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        kernel: impl Kernel + 'static,
    ) -> Option<Box<dyn Kernel>> {
        self.kernels.insert(name.into(), Box::new(kernel))
    }

    /// The kernel registered under `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Kernel> {
        self.kernels.get(name).map(|k| &**k)
    }

    /// Whether it holds no kernel (every kernel is the default).
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// The names registered, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.kernels.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// The names of `program`'s kernels this registry does not hold, in kernel-table order.
    pub fn missing<'v>(&self, program: &Verified<'v>) -> Vec<&'v str> {
        program
            .kernel_names()
            .filter(|name| self.get(name).is_none())
            .collect()
    }

    /// The kernel of each of `program`'s kernel indices, with its name: the registered one, or
    /// [`Record`].
    pub fn resolve<'s, 'v>(&'s self, program: &Verified<'v>) -> Vec<(&'v str, &'s dyn Kernel)> {
        self.registered(program)
            .into_iter()
            .map(|(name, k)| (name, k.unwrap_or(&Record)))
            .collect()
    }

    /// The registered kernel of each of `program`'s kernel indices, with its name; `None` where
    /// the default, [`Record`], which does nothing, runs (a caller may skip calling it).
    pub fn registered<'s, 'v>(
        &'s self,
        program: &Verified<'v>,
    ) -> Vec<(&'v str, Option<&'s dyn Kernel>)> {
        program
            .kernel_names()
            .map(|name| (name, self.get(name)))
            .collect()
    }
}
