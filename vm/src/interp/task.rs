//! What the interpreter emits (task records, their regions) and how it fails.

use super::*;

/// A runtime failure, at the instruction whose evaluation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// An expression overflowed 64-bit signed arithmetic.
    #[error("instruction {pc}: arithmetic overflow")]
    Overflow {
        /// Instruction index.
        pc: u32,
    },
    /// Division or remainder by zero.
    #[error("instruction {pc}: division by zero")]
    DivByZero {
        /// Instruction index.
        pc: u32,
    },
    /// An index outside a runtime array.
    #[error("instruction {pc}: index {index} is outside runtime array {slot} ({len} entries)")]
    Index {
        /// Instruction index.
        pc: u32,
        /// The array's slot.
        slot: u16,
        /// The index.
        index: i64,
        /// The array's length.
        len: usize,
    },
    /// A region dimension that starts below zero or ends before it starts.
    #[error("instruction {pc}: region dimension {dim} of tensor {tensor} is [{start}, {end})")]
    BadRegion {
        /// Instruction index of the IO record.
        pc: u32,
        /// Tensor index.
        tensor: u16,
        /// Dimension.
        dim: u8,
        /// Start.
        start: i64,
        /// End.
        end: i64,
    },
    /// A region dimension outside a declared tensor's extent.
    #[error("instruction {pc}: region dimension {dim} of tensor {tensor} is [{start}, {end}), outside its extent {extent}")]
    RegionBounds {
        /// Instruction index of the IO record.
        pc: u32,
        /// Tensor index.
        tensor: u16,
        /// Dimension.
        dim: u8,
        /// Start.
        start: i64,
        /// End.
        end: i64,
        /// The dimension's extent.
        extent: i64,
    },
    /// A tiled axis (`AXIS_TILE`) whose tile size is below 1 where its loop starts.
    #[error("instruction {pc}: tile size {size} (a tile holds at least one element)")]
    TileSize {
        /// Instruction index of the loop.
        pc: u32,
        /// The size.
        size: i64,
    },
    /// More tasks than a 64-bit counter holds.
    #[error("the program generates more than 2^64 - 1 tasks")]
    TooManyTasks,
    /// A tensor read back (`READBACK`) holds a value outside 0 ..= its bound.
    #[error("instruction {pc}: element {index} of the tensor read back into runtime array {slot} is {value}, outside 0 ..= {bound}")]
    ReadbackRange {
        /// Instruction index of the `READBACK`.
        pc: u32,
        /// The runtime array it fills.
        slot: u16,
        /// The element.
        index: u32,
        /// Its value (as a signed 32-bit integer).
        value: i64,
        /// The bound.
        bound: i64,
    },
    /// The values read back break a rule the launch checks for runtime arrays (a sparse
    /// axis' indptr that decreases or runs past its indices, a flattened axis' `outer` past
    /// its array).
    #[error("instruction {pc}: the values read back: {problem}")]
    ReadbackParams {
        /// Instruction index of the `READBACK`.
        pc: u32,
        /// What the launch's check says.
        problem: crate::params::ParamError,
    },
}

/// One IO region of a task. Equality compares the named dimensions only (the interpreter
/// reuses its record, so entries past `ndims` hold stale values).
#[derive(Clone, Copy, Debug, Default)]
pub struct Io {
    /// Tensor index.
    pub tensor: u16,
    /// Direction code ([`Dir`] as u8).
    pub dir: u8,
    /// Dimensions given in `ranges`: those the task named; the others are whole (a region
    /// with `ndims == 0` is the whole tensor).
    pub ndims: u8,
    /// `[start, end)` per dimension.
    pub ranges: [(i64, i64); limits::MAX_RANK],
}

impl PartialEq for Io {
    #[inline]
    fn eq(&self, o: &Io) -> bool {
        self.tensor == o.tensor && self.dir == o.dir && self.dims() == o.dims()
    }
}

impl Eq for Io {}

impl Io {
    /// The direction.
    pub fn direction(&self) -> Dir {
        Dir::from_u8(self.dir).unwrap_or(Dir::InOut)
    }
    /// The ranges given.
    pub fn dims(&self) -> &[(i64, i64)] {
        &self.ranges[..self.ndims as usize]
    }
    /// Whether the task reads the region.
    pub fn reads(&self) -> bool {
        self.dir & 1 != 0
    }
    /// Whether the task writes the region.
    pub fn writes(&self) -> bool {
        self.dir & 2 != 0
    }
    /// Whether two regions (of any tensors) share an element: same tensor and every dimension
    /// intersects; dimensions one side does not name are whole. A region empty in a
    /// dimension (`[p, p)`) shares no element with anything, not even a range around it.
    pub fn overlaps(&self, o: &Io) -> bool {
        if self.tensor != o.tensor {
            return false;
        }
        let n = self.ndims.min(o.ndims) as usize;
        // Where both name a dimension their ranges must intersect (so neither is empty
        // there); where only one does, its range must not be empty.
        let longer = if self.ndims > o.ndims { self } else { o };
        (0..n).all(|i| {
            let (a, b) = (self.ranges[i], o.ranges[i]);
            a.0.max(b.0) < a.1.min(b.1)
        }) && longer.dims()[n..].iter().all(|&(a, b)| a < b)
    }
    /// The range in dimension `i`: the one given, or the whole dimension if the task did not
    /// name it.
    pub fn range(&self, i: usize) -> (i64, i64) {
        if i < self.ndims as usize {
            self.ranges[i]
        } else {
            (0, i64::MAX)
        }
    }
    /// Whether two regions are the same (exact-match mode): same tensor, same ranges, with
    /// dimensions not named being whole.
    pub fn same_region(&self, o: &Io) -> bool {
        self.tensor == o.tensor
            && (0..self.ndims.max(o.ndims) as usize).all(|i| self.range(i) == o.range(i))
    }
    /// Whether this region contains region `o` (same tensor; dimensions not named are whole).
    pub fn covers(&self, o: &Io) -> bool {
        self.tensor == o.tensor
            && (0..self.ndims.max(o.ndims) as usize).all(|i| {
                let (a, b) = (self.range(i), o.range(i));
                a.0 <= b.0 && b.1 <= a.1
            })
    }
}

/// A generated task. The interpreter reuses one record; a sink copies what it keeps. Only the
/// first `nparams` parameters and `nio` regions are the task's: the rest of the arrays hold
/// whatever an earlier task left there, and equality ignores them.
#[derive(Clone, Debug)]
pub struct Task {
    /// Program-order task id (spec/bytecode.md §5.4).
    pub id: u64,
    /// Kernel index.
    pub kernel: u16,
    /// Pool code ([`Pool`] as u8).
    pub pool: u8,
    /// The tier that chose its kernel in a tier set (the `TASK`'s `tier`; 0 without one).
    pub tier: u8,
    /// Where its iteration sits in the loop whose body holds its `TASK` directly:
    /// [`ITER_FIRST`] and [`ITER_LAST`] (both for a loop of one iteration); 0 for a `TASK`
    /// directly in a block or outside every loop.
    pub iter: u8,
    /// Instruction index of the `TASK`.
    pub site: u32,
    /// Number of parameters.
    pub nparams: u8,
    /// Parameter values.
    pub params: [i64; limits::MAX_TASK_PARAMS],
    /// Number of IO regions.
    pub nio: u8,
    /// IO regions.
    pub io: [Io; limits::MAX_TASK_IO],
}

impl PartialEq for Task {
    fn eq(&self, o: &Task) -> bool {
        self.id == o.id
            && self.kernel == o.kernel
            && self.pool == o.pool
            && self.tier == o.tier
            && self.iter == o.iter
            && self.site == o.site
            && self.params() == o.params()
            && self.ios() == o.ios()
    }
}

impl Eq for Task {}

impl Default for Task {
    fn default() -> Task {
        Task {
            id: 0,
            kernel: 0,
            pool: 0,
            tier: 0,
            iter: 0,
            site: 0,
            nparams: 0,
            params: [0; limits::MAX_TASK_PARAMS],
            nio: 0,
            io: [Io::default(); limits::MAX_TASK_IO],
        }
    }
}

impl Task {
    /// The parameters.
    pub fn params(&self) -> &[i64] {
        &self.params[..self.nparams as usize]
    }
    /// Makes this record task `o`: its fields, parameters and regions, without copying the
    /// unused rest of the arrays (a record is ~2.3 KiB; most tasks use a few regions).
    pub fn copy_used(&mut self, o: &Task) {
        self.id = o.id;
        self.kernel = o.kernel;
        self.pool = o.pool;
        self.tier = o.tier;
        self.iter = o.iter;
        self.site = o.site;
        self.nparams = o.nparams;
        self.params[..o.params().len()].copy_from_slice(o.params());
        self.nio = o.nio;
        self.io[..o.ios().len()].copy_from_slice(o.ios());
    }
    /// The IO regions.
    pub fn ios(&self) -> &[Io] {
        &self.io[..self.nio as usize]
    }
    /// The pool.
    pub fn pool(&self) -> Pool {
        Pool::from_u8(self.pool).unwrap_or(Pool::Vector)
    }
}

/// Receives the tasks an interpreter generates.
pub trait Sink {
    /// Called once per owned task, in task-id order. Return `false` to make
    /// [`Interpreter::run`] return [`Status::Paused`] after this task.
    fn task(&mut self, task: &Task) -> bool;
}

/// Work counters (spec/bytecode.md §5.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Instruction records dispatched by the walk.
    pub instructions: u64,
    /// Loop iterations the walk started (loop-index visits).
    pub visits: u64,
    /// Loop iterations started while counting skipped subtrees.
    pub count_visits: u64,
    /// Tasks emitted to the sink.
    pub emitted: u64,
    /// Task ids passed over without emission (other AICPUs' tasks).
    pub skipped: u64,
}

/// Result of [`Interpreter::run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The program has ended.
    Done,
    /// The budget was used or the sink asked to pause; call `run` again to continue.
    Paused,
    /// The walk reached a `READBACK` ([`Interpreter::readback`] says which): the caller waits
    /// until every task before it has completed, gives the values read back
    /// ([`Interpreter::rebind`]; or keeps the launch's, with no memory to read), and calls
    /// `run` again to continue after it.
    Readback,
}

/// Why an interpreter could not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// Bad runtime parameters or AICPU id/count.
    #[error(transparent)]
    Params(#[from] ParamError),
    /// Evaluating the launch-time selector failed.
    #[error(transparent)]
    Run(#[from] RunError),
}
