//! The two single-thread measurements of issue 4's performance section, as `ptovm bench`,
//! the `deps_llama` example and BENCHMARKS.md take them: **generation** alone (one interpreter
//! instance expanding every task into a sink that only counts) and **generation plus complete
//! dependency building** (the same expansion into the scheduler's fixed-capacity TensorMap,
//! sized for a window, as one AICPU records: spec/runtime.md §3.3 and §3.5). Only the expansion
//! is timed: allocating and clearing the map and the launch-time tensor analysis are not, and
//! each expansion runs once untimed first, so caches and branch predictors are warm (as in a
//! scheduler's steady state, and as in `cargo bench`'s repeated samples).

use std::time::{Duration, Instant};

use ptovm_vm::tmap::{MapError, MapLayout};
use ptovm_vm::{Interpreter, LaunchError, RunError, RuntimeParams, Sink, Task, Verified};

use crate::deps::{DepMode, InOrderWindow};

/// One timed expansion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measured {
    /// Tasks generated.
    pub tasks: u64,
    /// Dependency edges found (0 for generation alone).
    pub edges: u64,
    /// Time of the expansion alone.
    pub wall: Duration,
}

impl Measured {
    /// Tasks per millisecond (0 for a run too short to time).
    pub fn tasks_per_ms(&self) -> f64 {
        let ms = self.wall.as_secs_f64() * 1e3;
        if ms > 0.0 {
            self.tasks as f64 / ms
        } else {
            0.0
        }
    }
}

/// Why a measurement could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The program cannot start with these parameters.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The program failed while running.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The map could not be built or refused a task.
    #[error("TensorMap: {0}")]
    Map(#[from] MapError),
    /// The launch-time tensor analysis failed.
    #[error(transparent)]
    Share(ptovm_vm::share::ShareError),
    /// The host could not allocate the map.
    #[error("cannot allocate a TensorMap of {0} bytes")]
    Alloc(usize),
}

/// Counts tasks and does nothing else.
struct Count;
impl Sink for Count {
    #[inline]
    fn task(&mut self, _: &Task) -> bool {
        true
    }
}

/// Generation alone: every task of the program (one instance, as AICPU 0 of 1) into a sink
/// that only counts.
pub fn generate(v: Verified<'_>, p: RuntimeParams<'_>) -> Result<Measured, MeasureError> {
    Interpreter::new(v, p, 0, 1)?.run_to_end(&mut Count)?;
    let mut it = Interpreter::new(v, p, 0, 1)?;
    let t0 = Instant::now();
    it.run_to_end(&mut Count)?;
    let wall = t0.elapsed();
    Ok(Measured {
        tasks: it.stats().emitted,
        edges: 0,
        wall,
    })
}

/// Generation plus complete dependency building: every task of the program (one instance)
/// into an overlap-mode TensorMap of `window` handles, recording as the scheduler records
/// (read-only tensors not at all, reads no later write follows only looked up); task `t`
/// takes handle `t mod window` after task `t − window` retires (in-order completion). Every
/// edge whose source is still in the window is found; `edges` counts them.
pub fn generate_with_deps(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    window: u32,
) -> Result<Measured, MeasureError> {
    let layout = MapLayout::for_program(&v, window)?;
    let mut d =
        InOrderWindow::new(layout, DepMode::Overlap).ok_or(MeasureError::Alloc(layout.bytes()))?;
    d.classify(&Interpreter::new(v, p, 0, 1)?)
        .map_err(|e| match e {
            ptovm_vm::share::ShareError::Run(e) => MeasureError::Run(e),
            other => MeasureError::Share(other),
        })?;
    Interpreter::new(v, p, 0, 1)?.run_to_end(&mut d)?;
    if let Some(e) = d.error {
        return Err(e.into());
    }
    d.reset();
    let mut it = Interpreter::new(v, p, 0, 1)?;
    let t0 = Instant::now();
    it.run_to_end(&mut d)?;
    let wall = t0.elapsed();
    if let Some(e) = d.error {
        return Err(e.into());
    }
    Ok(Measured {
        tasks: it.stats().emitted,
        edges: d.edges,
        wall,
    })
}
