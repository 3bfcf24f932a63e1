//! The work budget of `run`, `bench` and `expand`: verified bytecode always terminates, but a hostile or
//! mistaken program can still ask for 2^60 tasks. Before anything runs, the program's
//! [`work_bound`](ptovm_vm::Interpreter::work_bound) (one pass over the code) is held against
//! the budget; only when the bound is over it are the tasks counted exactly, and only when
//! counting itself is cheap enough.

use ptovm_vm::{Interpreter, RuntimeParams, Verified};

use crate::{Exit, Fail};

/// Loop iterations allowed per task of the budget: counting or running a program may start at
/// most `ITERATIONS_PER_TASK × max_tasks` loop iterations.
pub const ITERATIONS_PER_TASK: u64 = 8;

/// The runtime parameters of `vals` for the program, once it is within a budget of
/// `max_tasks` tasks set by `--max-tasks` (`run`, `bench`).
pub fn params<'v>(
    v: &Verified<'v>,
    vals: &'v [ptovm_vm::Value<'v>],
    max_tasks: u64,
) -> Result<RuntimeParams<'v>, Fail> {
    let p = RuntimeParams::new(v, vals)
        .map_err(|e| Fail(Exit::Params, format!("error: runtime parameters: {e}")))?;
    check(v, &p, max_tasks, &format!("--max-tasks {max_tasks}"))?;
    Ok(p)
}

/// Checks the program against a budget of `max_tasks` tasks (and
/// `ITERATIONS_PER_TASK × max_tasks` loop iterations). `limit` says what sets the budget, for
/// the message (`--max-tasks 100000000`). Once it passes, counting the tasks costs at most the
/// iteration budget.
pub fn check(
    v: &Verified<'_>,
    p: &RuntimeParams<'_>,
    max_tasks: u64,
    limit: &str,
) -> Result<(), Fail> {
    let it = Interpreter::new(*v, *p, 0, 1).map_err(crate::launch_err)?;
    let bound = it.work_bound();
    let max_iterations = max_tasks.saturating_mul(ITERATIONS_PER_TASK);
    if bound.iterations > max_iterations {
        let up_to = if bound.iterations == u64::MAX {
            "2^64 or more".to_string()
        } else {
            format!("up to {}", bound.iterations)
        };
        return Err(Fail(
            Exit::Failed,
            format!(
                "error: the program can start {up_to} loop iterations, more than the {max_iterations} allowed ({ITERATIONS_PER_TASK} per task of {limit})"
            ),
        ));
    }
    if bound.tasks <= max_tasks {
        return Ok(());
    }
    // The bound counts every COND branch and every row at the longest length; the exact count
    // costs at most `bound.iterations`, which is within the budget.
    let mut it = it;
    let n = it.count_tasks().map_err(crate::run_err)?;
    if n > max_tasks {
        return Err(Fail(
            Exit::Failed,
            format!("error: the program generates {n} tasks, more than {limit}"),
        ));
    }
    Ok(())
}
