//! Task Bench's **METG** (minimum effective task granularity) on the threaded simulator: how
//! small a task can be before the runtime's own work per task costs half of the machine.
//!
//! Task Bench's method (Slaughter et al., "Task Bench: A Parameterized Benchmark for
//! Evaluating Parallel Runtime Performance", SC 2020): every task runs a kernel that
//! busy-waits a given duration; a run's **efficiency** is the time the kernels took over the
//! time the machine had (`tasks × duration / (wall × cores)`), its **task granularity** the
//! machine's time per task (`wall × cores / tasks`). Shortening the kernel from a duration at
//! which the runtime's overhead is negligible, the efficiency falls; METG(50 %) is the task
//! granularity at which it crosses 50 %.
//!
//! Here the "cores" are the simulator's driver threads (`sim::Options::threads`): they run the
//! AICPUs' schedulers and, in turn, the AICores' kernels, so a kernel's duration is time that
//! thread does not schedule. At most `threads` kernels run at once, so the efficiency is at
//! most 1.

use std::time::{Duration, Instant};

use ptovm_vm::{RuntimeParams, Verified};

use crate::kernel::{Call, Kernel, KernelError, Registry};
use crate::sim::{self, SimError};

/// A kernel that busy-waits its duration (Task Bench's `busy_wait` kernel), on the thread
/// that runs it.
#[derive(Clone, Copy, Debug)]
pub struct BusyWait(pub Duration);

impl Kernel for BusyWait {
    fn run(&self, _: &Call<'_>) -> Result<(), KernelError> {
        let start = Instant::now();
        while start.elapsed() < self.0 {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

/// One run with busy-waiting kernels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Each kernel's duration.
    pub kernel: Duration,
    /// Tasks run.
    pub tasks: u64,
    /// The run's wall time.
    pub wall: Duration,
    /// Driver threads (the "cores" of the efficiency).
    pub threads: usize,
}

impl Point {
    /// The kernels' time over the threads' time: `tasks × kernel / (wall × threads)`.
    pub fn efficiency(&self) -> f64 {
        let have = self.wall.as_secs_f64() * self.threads.max(1) as f64;
        if have <= 0.0 {
            return 0.0;
        }
        self.tasks as f64 * self.kernel.as_secs_f64() / have
    }

    /// The threads' time per task, in nanoseconds: `wall × threads / tasks`.
    pub fn granularity_ns(&self) -> f64 {
        self.wall.as_nanos() as f64 * self.threads.max(1) as f64 / self.tasks.max(1) as f64
    }
}

/// Runs the program once with every kernel busy-waiting `kernel` (the options' check, trace
/// and the rest as given).
pub fn measure(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: sim::Options,
    kernel: Duration,
) -> Result<Point, SimError> {
    let mut registry = Registry::new();
    for name in v.kernel_names() {
        registry.register(name, BusyWait(kernel));
    }
    let r = sim::run_with_kernels(v, p, o, None, &registry)?;
    Ok(Point {
        kernel,
        tasks: r.tasks_total,
        wall: r.wall,
        threads: r.threads,
    })
}

/// Measures kernel durations from `longest` down, halving, until a run's efficiency falls
/// below a quarter or the duration below `shortest`: the points, longest kernel first.
pub fn sweep(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: sim::Options,
    longest: Duration,
    shortest: Duration,
) -> Result<Vec<Point>, SimError> {
    let mut points = Vec::new();
    let mut kernel = longest;
    while kernel >= shortest {
        let point = measure(v, p, o, kernel)?;
        points.push(point);
        if point.efficiency() < 0.25 || kernel.is_zero() {
            break;
        }
        kernel /= 2;
    }
    Ok(points)
}

/// What a sweep says of METG(`target`) (Task Bench's is `target` = 0.5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Metg {
    /// The granularity (ns) at which the efficiency crosses `target`: interpolated, on a log
    /// scale of granularity, between the last point at or above it and the first below.
    Crossed(f64),
    /// Every point kept the efficiency: METG is at most the smallest granularity measured.
    AtMost(f64),
    /// No point reached it.
    NotReached,
}

/// METG(`target`) from a sweep's points, longest kernel first.
pub fn metg(points: &[Point], target: f64) -> Metg {
    let Some(first_below) = points.iter().position(|p| p.efficiency() < target) else {
        return match points.last() {
            Some(p) => Metg::AtMost(p.granularity_ns()),
            None => Metg::NotReached,
        };
    };
    if first_below == 0 {
        return Metg::NotReached;
    }
    let (a, b) = (&points[first_below - 1], &points[first_below]);
    let (ea, eb) = (a.efficiency(), b.efficiency());
    let (ga, gb) = (a.granularity_ns().ln(), b.granularity_ns().ln());
    let f = if ea > eb {
        (ea - target) / (ea - eb)
    } else {
        0.0
    };
    Metg::Crossed((ga + f * (gb - ga)).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(kernel_ns: u64, wall_ns: u64) -> Point {
        Point {
            kernel: Duration::from_nanos(kernel_ns),
            tasks: 1000,
            wall: Duration::from_nanos(wall_ns),
            threads: 2,
        }
    }

    #[test]
    fn efficiency_and_granularity() {
        // 1,000 tasks of 2 µs on 2 threads in 1.25 ms: 80 % busy, 2.5 µs of thread a task.
        let p = point(2_000, 1_250_000);
        assert!((p.efficiency() - 0.8).abs() < 1e-12);
        assert!((p.granularity_ns() - 2_500.0).abs() < 1e-9);
    }

    #[test]
    fn metg_interpolates_where_the_efficiency_crosses() {
        // 80 % at a granularity of 2.5 µs, 20 % at 2.5 µs too would be degenerate; here 40 %
        // at 1.25 µs (kernel 500 ns): the crossing lies between, on a log scale.
        let points = [point(2_000, 1_250_000), point(500, 625_000)];
        assert!((points[1].efficiency() - 0.4).abs() < 1e-12);
        let Metg::Crossed(g) = metg(&points, 0.5) else {
            panic!("{:?}", metg(&points, 0.5))
        };
        assert!(1_250.0 < g && g < 2_500.0, "{g}");
        assert_eq!(metg(&points[..1], 0.5), Metg::AtMost(2_500.0));
        assert_eq!(metg(&points[1..], 0.5), Metg::NotReached);
        assert_eq!(metg(&[], 0.5), Metg::NotReached);
    }
}
