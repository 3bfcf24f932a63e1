//! The interpreter (spec/bytecode.md §5): expands a verified program on one AICPU, emitting only
//! the tasks its dispatch policy gives that AICPU, in program order, into a caller-supplied
//! [`Sink`]. No heap, no recursion: fixed stacks sized by the format's limits. It can stop after
//! any task and resume, so generation can be pipelined with execution.
//!
//! Subtrees owned by other AICPUs are skipped without being walked whenever the policy decides
//! ownership at an outer loop: the task ids they would have used are counted (`count_range`),
//! by multiplication where a loop's body does not depend on its variable.

use crate::format::{
    limits, PolicySpec, Record, COND_HAS_ELSE, DIM_IS_SLOT, NONE16, TENSOR_IMPLICIT,
};
use crate::opcodes::{Dir, ExprKind, ExprOp, OpClass, Opcode};
use crate::params::{ParamError, RuntimeParams};
use crate::{Policy, Pool, Verified};

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
    /// More tasks than a 64-bit counter holds.
    #[error("the program generates more than 2^64 - 1 tasks")]
    TooManyTasks,
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
    /// intersects; dimensions one side does not name are whole.
    pub fn overlaps(&self, o: &Io) -> bool {
        if self.tensor != o.tensor {
            return false;
        }
        let n = self.ndims.min(o.ndims) as usize;
        (0..n).all(|i| {
            let (a, b) = (self.ranges[i], o.ranges[i]);
            a.0 < b.1 && b.0 < a.1
        })
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

/// A generated task. The interpreter reuses one record; a sink copies what it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// Program-order task id (spec/bytecode.md §5.4).
    pub id: u64,
    /// Kernel index.
    pub kernel: u16,
    /// Pool code ([`Pool`] as u8).
    pub pool: u8,
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

impl Default for Task {
    fn default() -> Task {
        Task {
            id: 0,
            kernel: 0,
            pool: 0,
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Own {
    Undecided,
    Mine,
    NotMine,
}

const UNKNOWN: u8 = 2;

#[derive(Clone, Copy, Debug)]
struct Frame {
    /// Opcode byte of the header (HALT for the top level).
    op: u8,
    /// Header instruction index.
    at: u32,
    /// End of the body.
    end: u32,
    /// Where to continue after the body (differs from `end` for a COND with an else block).
    after: u32,
    /// Ownership of the tasks in this frame (for the current iteration of a loop).
    own: Own,
    /// Dispatch policy in force and the loops it needs bound to decide.
    policy: PolicySpec,
    need: u32,
    /// Loop state: depth, position, extent, sparse base and indices slot (0xFFFF: not sparse).
    depth: u8,
    pos: u64,
    ext: u64,
    base: u32,
    indices: u16,
    /// Cached facts about a loop body: does its task count depend on the loop variable
    /// (0/1/UNKNOWN), does it contain a DISPATCH_FILTER (0/1/UNKNOWN), and its task count when
    /// it does not depend on the variable.
    depends: u8,
    filter: u8,
    body_count: Option<u64>,
    /// Whether the loop decides ownership per iteration (then each iteration goes through
    /// `next_iteration`).
    deciding: bool,
    /// The number of tasks of a body made only of TASK statements, or NOT_SIMPLE, or
    /// UNKNOWN_SIMPLE before it is looked at.
    simple: u32,
}

/// What the leaf-loop fast path did.
enum Leaf {
    /// The loop does not qualify; run the general loop.
    NotApplicable,
    /// The loop ran to its end.
    Ran,
    /// Emission paused inside the loop.
    Paused,
    /// The rest of an iteration that had paused ran; the loop goes on as usual.
    Rest,
}

/// [`Task::iter`]: the task's iteration is its loop's first.
pub const ITER_FIRST: u8 = 1;
/// [`Task::iter`]: the task's iteration is its loop's last.
pub const ITER_LAST: u8 = 2;

/// [`Task::iter`] of iteration `pos` of a loop of `ext` iterations.
#[inline(always)]
fn iter_flags(pos: u64, ext: u64) -> u8 {
    ((pos == 0) as u8 * ITER_FIRST) | ((pos + 1 == ext) as u8 * ITER_LAST)
}

const UNKNOWN_SIMPLE: u32 = u32::MAX;
const NOT_SIMPLE: u32 = u32::MAX - 1;

impl Frame {
    fn top(end: u32, policy: PolicySpec, need: u32) -> Frame {
        Frame {
            op: Opcode::HALT as u8,
            at: 0,
            end,
            after: end,
            own: Own::Undecided,
            policy,
            need,
            depth: 0,
            pos: 0,
            ext: 0,
            base: 0,
            indices: NONE16,
            depends: UNKNOWN,
            filter: UNKNOWN,
            body_count: None,
            deciding: false,
            simple: UNKNOWN_SIMPLE,
        }
    }
}

/// The SplitMix64 finalizer used by the `hash` policy.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// How a task operand or region bound is computed, decoded once per task site.
#[derive(Clone, Copy, Debug, Default)]
struct Operand {
    /// OPERAND_CONST (value in `c`), OPERAND_VAR (depth in `a`), OPERAND_EXPR (start in `a`)
    /// or OPERAND_NEXT (the start plus one: a single index).
    kind: u8,
    a: u32,
    c: i64,
}

const OPERAND_CONST: u8 = 0;
const OPERAND_VAR: u8 = 1;
const OPERAND_EXPR: u8 = 2;
const OPERAND_NEXT: u8 = 3;
/// The start of a single-index dimension named by the variable at depth `a` of a loop over a
/// dense or dynamic axis no longer than the dimension: its values `0 .. extent` are always in
/// bounds, so the range `(v, v + 1)` needs no check.
const OPERAND_INDEX: u8 = 4;

/// One named region dimension of a task site: its bounds and the extent it is checked against
/// (`i64::MAX` for an implicit tensor).
#[derive(Clone, Copy, Debug, Default)]
struct PlanDim {
    start: Operand,
    end: Operand,
    extent: i64,
    /// Its region's position among the site's, and its own among the region's dimensions.
    io: u8,
    dim: u8,
}

/// One IO region of a task site.
#[derive(Clone, Copy, Debug, Default)]
struct PlanIo {
    tensor: u16,
    dir: u8,
    ndims: u8,
}

/// Task sites whose decoded form is cached: a site's plan is looked for first in the slot its
/// instruction index maps to, then in the others; a new one takes its own slot if that is
/// empty, else the next slot of a round robin over all of them (so the sites a loop uses, up
/// to this many, end up cached together whatever their indices: a plan the round robin placed
/// stays until it has come round again, after as many misses as there are slots).
const PLAN_SITES: usize = 16;
/// Region dimensions a cached site may have in all; a larger site is decoded at every task.
const PLAN_DIMS: usize = 12;

/// A task site decoded for emission. Runtime parameters do not change during a run, so `PARAM`
/// operands and tensor extents are resolved when the plan is made.
#[derive(Clone, Copy, Debug)]
struct Plan {
    site: u32,
    kernel: u16,
    pool: u8,
    nparams: u8,
    nio: u8,
    /// Named dimensions of all its regions (`dims[..ndims]`).
    ndims: u8,
    params: [Operand; limits::MAX_TASK_PARAMS],
    ios: [PlanIo; limits::MAX_TASK_IO],
    dims: [PlanDim; PLAN_DIMS],
    /// Whether every parameter is a loop variable, and then their depths: the parameters
    /// are copied without dispatching on their kind.
    vars_only: bool,
    param_depths: [u8; limits::MAX_TASK_PARAMS],
    /// Whether every named dimension is an [`OPERAND_INDEX`] one, and then `(region, dim,
    /// depth)` of each: the ranges are written without dispatching or checking.
    index_only: bool,
    index_dims: [[u8; 3]; PLAN_DIMS],
}

const EMPTY_OPERAND: Operand = Operand {
    kind: 0,
    a: 0,
    c: 0,
};
const EMPTY_PLAN: Plan = Plan {
    site: u32::MAX,
    kernel: 0,
    pool: 0,
    nparams: 0,
    nio: 0,
    ndims: 0,
    params: [EMPTY_OPERAND; limits::MAX_TASK_PARAMS],
    ios: [PlanIo {
        tensor: 0,
        dir: 0,
        ndims: 0,
    }; limits::MAX_TASK_IO],
    dims: [PlanDim {
        start: EMPTY_OPERAND,
        end: EMPTY_OPERAND,
        extent: 0,
        io: 0,
        dim: 0,
    }; PLAN_DIMS],
    vars_only: false,
    param_depths: [0; limits::MAX_TASK_PARAMS],
    index_only: false,
    index_dims: [[0; 3]; PLAN_DIMS],
};

#[inline(always)]
fn operand(
    o: &Operand,
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    pc: u32,
) -> R<i64> {
    match o.kind {
        OPERAND_CONST => Ok(o.c),
        OPERAND_VAR => Ok(vars[o.a as usize % limits::MAX_LOOP_DEPTH]),
        _ => eval_postfix(exprs, p, vars, o.a, pc),
    }
}

/// An upper bound on a program's walk ([`Interpreter::work_bound`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkBound {
    /// Loop iterations all instances together can start.
    pub iterations: u64,
    /// Tasks the program can emit.
    pub tasks: u64,
}

/// One AICPU's interpreter over a verified program.
#[derive(Clone, Debug)]
pub struct Interpreter<'a, 'p> {
    v: Verified<'a>,
    p: RuntimeParams<'p>,
    me: u64,
    n: u64,
    pc: u32,
    sp: usize,
    frames: [Frame; limits::MAX_NESTING + 1],
    loops: u32,
    vars: [i64; limits::MAX_LOOP_DEPTH],
    pos: [u64; limits::MAX_LOOP_DEPTH],
    ext: [u64; limits::MAX_LOOP_DEPTH],
    next_id: u64,
    done: bool,
    task: Task,
    plans: [Plan; PLAN_SITES],
    /// The plan slot a new plan takes when its own is taken (a round robin).
    plan_next: u8,
    /// Task records of the sites of the innermost loop `leaf_loop` runs (its `k`-th site's in
    /// `templates[k]`): filled in full the first time the site emits in a run of the loop,
    /// then only the fields that depend on the loop's variable change ([`Template`]).
    templates: [Task; TEMPLATES],
    template_of: [Template; TEMPLATES],
    /// Which record the last task was emitted in: 0 for `task`, `k + 1` for `templates[k]`.
    current: u8,
    /// Bit `k`: `templates[k]` holds the `k`-th site's record of the loop at `kept_loop`,
    /// from its current run (any loop's entry clears it; the scheduler's pauses after each
    /// task do not).
    kept: u32,
    kept_loop: u32,
    /// Where `leaf_loop` last paused inside an iteration of the loop at `kept_loop`: the
    /// next site's instruction index and its position in the body.
    resume: (u32, u32),
    stats: Stats,
}

/// Body sites of an innermost loop whose task records `leaf_loop` keeps from one iteration
/// to the next.
const TEMPLATES: usize = 4;

/// What changes from one iteration to the next in a site's record kept by `leaf_loop`: the
/// parameters and the index dimensions named by the loop's own variable (the site's plan has
/// only constant and loop-variable parameters and index dimensions, and the variables of the
/// loops around it keep their values for the whole run of the loop).
#[derive(Clone, Copy, Debug)]
struct Template {
    /// The loop's depth: its variable is the value every field below takes.
    depth: u8,
    /// Bit `i`: parameter `i` is the loop's variable.
    params: u16,
    ndims: u8,
    /// `(region, dimension)` of the index dimensions named by the loop's variable.
    dims: [[u8; 2]; PLAN_DIMS],
    /// The instruction after the site (the next site of the loop's body, or its end).
    next: u32,
}

const EMPTY_TEMPLATE: Template = Template {
    depth: 0,
    params: 0,
    ndims: 0,
    dims: [[0; 2]; PLAN_DIMS],
    next: 0,
};

type R<T> = Result<T, RunError>;

impl<'a, 'p> Interpreter<'a, 'p> {
    /// Prepares AICPU `aicpu` of `aicpus` to run `v` with runtime parameters `p` (already
    /// validated against `v`). A threshold policy selects its level here.
    pub fn new(
        v: Verified<'a>,
        p: RuntimeParams<'p>,
        aicpu: u32,
        aicpus: u32,
    ) -> Result<Self, LaunchError> {
        if aicpus == 0 || aicpus > limits::MAX_AICPUS as u32 || aicpu >= aicpus {
            return Err(LaunchError::Params(ParamError::Aicpu {
                aicpu,
                count: aicpus,
            }));
        }
        let last = v.code().len() as u32 - 1;
        let mut me = Interpreter {
            v,
            p,
            me: aicpu as u64,
            n: aicpus as u64,
            pc: 0,
            sp: 0,
            frames: [Frame::top(last, PolicySpec::default(), 0); limits::MAX_NESTING + 1],
            loops: 0,
            vars: [0; limits::MAX_LOOP_DEPTH],
            pos: [0; limits::MAX_LOOP_DEPTH],
            ext: [0; limits::MAX_LOOP_DEPTH],
            next_id: 0,
            done: false,
            task: Task::default(),
            plans: [EMPTY_PLAN; PLAN_SITES],
            plan_next: 0,
            templates: core::array::from_fn(|_| Task::default()),
            template_of: [EMPTY_TEMPLATE; TEMPLATES],
            current: 0,
            kept: 0,
            kept_loop: u32::MAX,
            resume: (u32::MAX, 0),
            stats: Stats::default(),
        };
        let c = v.config();
        let mut policy = c.policy;
        if policy.kind == Policy::Threshold as u8 {
            let sel = me
                .eval(c.selector.get() as u32, 0)
                .map_err(LaunchError::Run)?;
            let levels = c.num_levels as usize;
            let i = (0..levels)
                .find(|&i| sel <= c.thresholds[i].get() as i64)
                .unwrap_or(levels.saturating_sub(1));
            policy = c.levels[i];
        }
        let need = me.need(&policy);
        me.frames[0] = Frame::top(last, policy, need);
        me.frames[0].own = me
            .decide_scope(&policy, need, 0)
            .map_err(LaunchError::Run)?;
        Ok(me)
    }

    /// Work counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The id the next task will get (after the run: the program's task count).
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The record of the task emitted last (valid until the next `run`): lets a caller that
    /// paused right after a task use it without copying.
    pub fn current_task(&self) -> &Task {
        match self.current {
            0 => &self.task,
            k => &self.templates[(k as usize - 1) % TEMPLATES],
        }
    }

    /// Whether the program has ended.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The program it runs.
    pub fn program(&self) -> Verified<'a> {
        self.v
    }

    /// The AICPU count of the launch.
    pub fn aicpus(&self) -> u32 {
        self.n as u32
    }

    /// The dispatch policy in force at the top level (a threshold policy's selected level).
    pub fn module_policy(&self) -> PolicySpec {
        self.frames[0].policy
    }

    // ---------------------------------------------------------------- expressions

    #[inline]
    fn expr_at(&self, i: u32) -> Record {
        self.v.exprs().get(i as usize).copied().unwrap_or_default()
    }

    /// Evaluates the expression at node `start`; `pc` locates errors.
    #[inline(always)]
    fn eval(&self, start: u32, pc: u32) -> R<i64> {
        // Fast path: a single leaf, the common case of indices and keys.
        let exprs = self.v.exprs();
        if let (Some(first), Some(next)) =
            (exprs.get(start as usize), exprs.get(start as usize + 1))
        {
            if next.opcode == ExprOp::END as u8 {
                match first.opcode {
                    x if x == ExprOp::VAR as u8 => {
                        return Ok(self.vars[first.op1() as usize % limits::MAX_LOOP_DEPTH])
                    }
                    x if x == ExprOp::CONST as u8 => return Ok(first.op2() as i32 as i64),
                    x if x == ExprOp::PARAM as u8 => {
                        return Ok(self.p.scalar(first.op1() as usize) as i64)
                    }
                    _ => {}
                }
            }
        }
        self.eval_stack(start, pc)
    }

    /// The general evaluator.
    #[inline(never)]
    fn eval_stack(&self, start: u32, pc: u32) -> R<i64> {
        eval_postfix(self.v.exprs(), &self.p, &self.vars, start, pc)
    }

    /// Whether the expression at `start` reads the loop variable at `depth`.
    fn expr_reads(&self, start: u32, depth: u16) -> bool {
        for i in start..start + limits::MAX_EXPR_LEN as u32 {
            let r = self.expr_at(i);
            if r.opcode == ExprOp::END as u8 {
                return false;
            }
            if r.opcode == ExprOp::VAR as u8 && r.op1() == depth {
                return true;
            }
        }
        false
    }

    /// Loops a policy needs bound before it can name an owner.
    fn need(&self, p: &PolicySpec) -> u32 {
        match Policy::from_u8(p.kind) {
            Some(Policy::Affinity) | Some(Policy::Hash) => {
                let mut need = 0;
                for i in p.key.get() as u32..p.key.get() as u32 + limits::MAX_EXPR_LEN as u32 {
                    let r = self.expr_at(i);
                    if r.opcode == ExprOp::END as u8 {
                        break;
                    }
                    if r.opcode == ExprOp::VAR as u8 {
                        need = need.max(r.op1() as u32 + 1);
                    }
                }
                need
            }
            Some(Policy::StaticPartition) => p.depth as u32 + 1,
            _ => 0,
        }
    }

    /// The owner of the current position under a per-subtree policy.
    fn owner(&self, p: &PolicySpec, pc: u32) -> R<u64> {
        Ok(match Policy::from_u8(p.kind) {
            Some(Policy::Affinity) => {
                self.eval(p.key.get() as u32, pc)?.rem_euclid(self.n as i64) as u64
            }
            Some(Policy::Hash) => mix64(self.eval(p.key.get() as u32, pc)? as u64) % self.n,
            Some(Policy::StaticPartition) => {
                let d = p.depth as usize % limits::MAX_LOOP_DEPTH;
                let ext = self.ext[d].max(1);
                ((self.pos[d] as u128 * self.n as u128) / ext as u128) as u64
            }
            _ => 0,
        })
    }

    /// Ownership at the start of a policy scope with `loops` loops bound.
    fn decide_scope(&self, p: &PolicySpec, need: u32, pc: u32) -> R<Own> {
        let per_subtree = p.kind != Policy::RoundRobin as u8;
        if !per_subtree || need > self.loops {
            return Ok(Own::Undecided);
        }
        Ok(if self.owner(p, pc)? == self.me {
            Own::Mine
        } else {
            Own::NotMine
        })
    }

    // ---------------------------------------------------------------- structure facts

    #[inline]
    fn rec(&self, pc: u32) -> Record {
        self.v.code().get(pc as usize).copied().unwrap_or_default()
    }

    /// Whether the task count of `[start, end)` depends on the loop variable at `depth`: a
    /// COND predicate or a ragged/sparse row reads it.
    fn count_depends(&self, start: u32, end: u32, depth: u8) -> bool {
        let d = depth as u16;
        (start..end).any(|pc| {
            let r = self.rec(pc);
            match Opcode::from_u8(r.opcode) {
                Some(Opcode::COND) => self.expr_reads(r.op1() as u32, d),
                Some(Opcode::PARALLEL_FOR | Opcode::FOR_EACH | Opcode::SELECT) => {
                    let a = self.axis_rec(r.op1());
                    match Opcode::from_u8(a.opcode) {
                        Some(Opcode::AXIS_RAGGED) => self.expr_reads(a.op2(), d),
                        Some(Opcode::AXIS_SPARSE) => self.expr_reads(a.op2() & 0xFFFF, d),
                        _ => false,
                    }
                }
                _ => false,
            }
        })
    }

    fn has_filter(&self, start: u32, end: u32) -> bool {
        (start..end).any(|pc| self.rec(pc).opcode == Opcode::DISPATCH_FILTER as u8)
    }

    /// Axis record `axis` (verified to exist).
    fn axis_rec(&self, axis: u16) -> Record {
        self.v
            .axes()
            .get(axis as usize)
            .copied()
            .unwrap_or_default()
    }

    /// Evaluates a loop's axis: (extent, sparse base, indices slot or NONE16).
    fn axis(&self, axis: u16, pc: u32) -> R<(u64, u32, u16)> {
        let a = self.axis_rec(axis);
        match Opcode::from_u8(a.opcode) {
            Some(Opcode::AXIS_DENSE) => Ok((a.op2() as u64, 0, NONE16)),
            Some(Opcode::AXIS_DENSE_DYN) => Ok((self.p.scalar(a.op1() as usize) as u64, 0, NONE16)),
            Some(Opcode::AXIS_RAGGED) => {
                let row = self.eval(a.op2(), pc)?;
                let lens = self.p.array(a.op1() as usize);
                match usize::try_from(row).ok().and_then(|i| lens.get(i)) {
                    Some(l) => Ok((*l as u64, 0, NONE16)),
                    None => Err(RunError::Index {
                        pc,
                        slot: a.op1(),
                        index: row,
                        len: lens.len(),
                    }),
                }
            }
            Some(Opcode::AXIS_SPARSE) => {
                let row = self.eval(a.op2() & 0xFFFF, pc)?;
                let ptr = self.p.array(a.op1() as usize);
                let i = usize::try_from(row).ok().filter(|i| i + 1 < ptr.len());
                match i {
                    Some(i) => Ok(((ptr[i + 1] - ptr[i]) as u64, ptr[i], (a.op2() >> 16) as u16)),
                    None => Err(RunError::Index {
                        pc,
                        slot: a.op1(),
                        index: row.saturating_add(1),
                        len: ptr.len(),
                    }),
                }
            }
            _ => Ok((0, 0, NONE16)),
        }
    }

    /// Binds the loop variable at `depth` to position `pos` of a loop.
    #[inline]
    fn bind(&mut self, depth: u8, pos: u64, ext: u64, base: u32, indices: u16) {
        let d = depth as usize % limits::MAX_LOOP_DEPTH;
        self.pos[d] = pos;
        self.ext[d] = ext;
        self.vars[d] = if indices == NONE16 {
            pos as i64
        } else {
            self.p
                .array(indices as usize)
                .get(base as usize + pos as usize)
                .copied()
                .unwrap_or(0) as i64
        };
    }

    // ---------------------------------------------------------------- counting

    /// The number of tasks the statements `[start, end)` generate with the current loop
    /// variables (`self.loops` of them bound). Walks only what the count depends on: a loop
    /// whose body's count does not depend on its variable is counted once and multiplied.
    pub fn count_range(&mut self, start: u32, end: u32) -> R<u64> {
        #[derive(Clone, Copy)]
        struct C {
            end: u32,
            after: u32,
            sum: u64,
            mult: u64,
            is_loop: bool,
            at: u32,
            depth: u8,
            pos: u64,
            ext: u64,
            base: u32,
            indices: u16,
            dependent: bool,
        }
        let base_frame = C {
            end,
            after: end,
            sum: 0,
            mult: 1,
            is_loop: false,
            at: start,
            depth: 0,
            pos: 0,
            ext: 0,
            base: 0,
            indices: NONE16,
            dependent: false,
        };
        let mut st = [base_frame; limits::MAX_NESTING + 1];
        let mut sp = 0usize;
        let mut depth = self.loops as u8;
        let mut pc = start;
        loop {
            if pc >= st[sp].end {
                let f = st[sp];
                if sp == 0 {
                    return Ok(f.sum);
                }
                if f.is_loop && f.dependent && f.pos + 1 < f.ext {
                    let p = f.pos + 1;
                    st[sp].pos = p;
                    self.bind(f.depth, p, f.ext, f.base, f.indices);
                    self.stats.count_visits += 1;
                    pc = f.at + 1;
                    continue;
                }
                let add = f.sum.checked_mul(f.mult).ok_or(RunError::TooManyTasks)?;
                sp -= 1;
                st[sp].sum = st[sp].sum.checked_add(add).ok_or(RunError::TooManyTasks)?;
                if f.is_loop {
                    depth -= 1;
                }
                pc = f.after;
                continue;
            }
            let r = self.rec(pc);
            match Opcode::from_u8(r.opcode).map(|o| o.class()) {
                Some(OpClass::Task) => {
                    st[sp].sum = st[sp].sum.checked_add(1).ok_or(RunError::TooManyTasks)?;
                    pc += 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
                }
                Some(OpClass::Loop) => {
                    let (ext, base, indices) = self.axis(r.op1(), pc)?;
                    if ext == 0 || sp + 1 >= st.len() {
                        pc = r.op2();
                        continue;
                    }
                    let dependent = self.count_depends(pc + 1, r.op2(), depth);
                    self.bind(depth, 0, ext, base, indices);
                    self.stats.count_visits += 1;
                    sp += 1;
                    st[sp] = C {
                        end: r.op2(),
                        after: r.op2(),
                        sum: 0,
                        mult: if dependent { 1 } else { ext },
                        is_loop: true,
                        at: pc,
                        depth,
                        pos: 0,
                        ext,
                        base,
                        indices,
                        dependent,
                    };
                    depth += 1;
                    pc += 1;
                }
                Some(OpClass::Block) => {
                    let mut after = r.op2();
                    if r.opcode == Opcode::COND as u8 {
                        let has_else = r.flags & COND_HAS_ELSE != 0;
                        if self.eval(r.op1() as u32, pc)? == 0 {
                            pc = r.op2(); // the else block, if any, runs as a SEQUENTIAL
                            continue;
                        }
                        if has_else {
                            after = self.rec(r.op2()).op2();
                        }
                    }
                    if sp + 1 >= st.len() {
                        pc = after;
                        continue;
                    }
                    sp += 1;
                    st[sp] = C {
                        end: r.op2(),
                        after,
                        sum: 0,
                        mult: 1,
                        is_loop: false,
                        at: pc,
                        ..base_frame
                    };
                    pc += 1;
                }
                _ => pc += 1,
            }
        }
    }

    /// An upper bound on the walk, from the code and the runtime parameters alone, in one pass
    /// over the code (no loop is entered): the loop iterations a walk of the whole program can
    /// start (an instance, which skips what it does not own, starts no more, counting included),
    /// and the tasks it can emit, with every loop at the largest extent its axis can
    /// have (a ragged axis its longest row, a sparse axis its longest row of the indptr) and
    /// every COND branch taken. Saturates at `u64::MAX`. A host or device can refuse a program
    /// whose bound is over its budget before running or counting anything
    /// (`count_tasks` walks the loops whose task count depends on their variable, so its own
    /// cost is up to `iterations`).
    pub fn work_bound(&self) -> WorkBound {
        let code = self.v.code();
        let last = code.len().saturating_sub(1) as u32;
        // The enclosing loops: their ends and the iterations each of their bodies runs.
        let mut stack = [(0u32, 1u64); limits::MAX_NESTING + 1];
        let mut sp = 0usize;
        let mut b = WorkBound::default();
        let mut pc = 0u32;
        while pc < last {
            while sp > 0 && stack[sp].0 <= pc {
                sp -= 1;
            }
            let mult = stack[sp].1;
            let r = self.rec(pc);
            match Opcode::from_u8(r.opcode).map(|o| o.class()) {
                Some(OpClass::Loop) => {
                    let runs = mult.saturating_mul(self.max_extent(r.op1()));
                    b.iterations = b.iterations.saturating_add(runs);
                    if sp + 1 < stack.len() {
                        sp += 1;
                        stack[sp] = (r.op2(), runs);
                    }
                    pc += 1;
                }
                Some(OpClass::Task) => {
                    b.tasks = b.tasks.saturating_add(mult);
                    pc += 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
                }
                _ => pc += 1,
            }
        }
        b
    }

    /// The largest extent axis `axis` can have with these runtime parameters.
    fn max_extent(&self, axis: u16) -> u64 {
        let a = self.axis_rec(axis);
        match Opcode::from_u8(a.opcode) {
            Some(Opcode::AXIS_DENSE) => a.op2() as u64,
            Some(Opcode::AXIS_DENSE_DYN) => self.p.scalar(a.op1() as usize) as u64,
            Some(Opcode::AXIS_RAGGED) => self
                .p
                .array(a.op1() as usize)
                .iter()
                .max()
                .map_or(0, |&l| l as u64),
            Some(Opcode::AXIS_SPARSE) => self
                .p
                .array(a.op1() as usize)
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]) as u64)
                .max()
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// The number of tasks the whole program generates with these runtime parameters: the
    /// bound on work that is known before running.
    pub fn count_tasks(&mut self) -> R<u64> {
        self.count_top(0, self.v.code().len() as u32 - 1)
    }

    /// The number of tasks the top-level statements `[start, end)` generate.
    pub fn count_top(&mut self, start: u32, end: u32) -> R<u64> {
        let saved = self.loops;
        self.loops = 0;
        let n = self.count_range(start, end);
        self.loops = saved;
        n
    }

    // ---------------------------------------------------------------- the walk

    /// Skips positions `[from, to)` of the loop in frame `sp` (none of them owned here):
    /// advances the task id by their tasks.
    fn skip_positions(&mut self, from: u64, to: u64) -> R<()> {
        if from >= to {
            return Ok(());
        }
        let f = self.frames[self.sp];
        let (start, end) = (f.at + 1, f.end);
        if f.depends == UNKNOWN {
            self.frames[self.sp].depends = self.count_depends(start, end, f.depth) as u8;
        }
        let saved = self.loops;
        self.loops = f.depth as u32 + 1;
        let res = if self.frames[self.sp].depends == 0 {
            let c = match f.body_count {
                Some(c) => c,
                None => {
                    self.bind(f.depth, from, f.ext, f.base, f.indices);
                    let c = self.count_range(start, end);
                    self.frames[self.sp].body_count = c.ok();
                    c?
                }
            };
            c.checked_mul(to - from).ok_or(RunError::TooManyTasks)
        } else {
            let mut total = 0u64;
            let mut p = from;
            let mut res = Ok(0);
            while p < to {
                self.bind(f.depth, p, f.ext, f.base, f.indices);
                match self.count_range(start, end) {
                    Ok(c) => match total.checked_add(c) {
                        Some(t) => total = t,
                        None => {
                            res = Err(RunError::TooManyTasks);
                            break;
                        }
                    },
                    Err(e) => {
                        res = Err(e);
                        break;
                    }
                }
                p += 1;
            }
            res.map(|_: u64| total)
        };
        self.loops = saved;
        let n = res?;
        self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
        self.stats.skipped += n;
        Ok(())
    }

    /// Starts the next iteration of the loop in frame `sp` at position `from` or later, binding
    /// its variable and deciding ownership; skips positions owned elsewhere. Returns false when
    /// the loop has no more iterations.
    fn next_iteration(&mut self, mut p: u64) -> R<bool> {
        let f = self.frames[self.sp];
        let parent_own = self.frames[self.sp - 1].own;
        let deciding = parent_own == Own::Undecided
            && f.policy.kind != Policy::RoundRobin as u8
            && f.need == f.depth as u32 + 1;
        if !deciding {
            if p >= f.ext {
                return Ok(false);
            }
            self.bind(f.depth, p, f.ext, f.base, f.indices);
            self.frames[self.sp].own = parent_own;
            self.frames[self.sp].pos = p;
            self.stats.visits += 1;
            return Ok(true);
        }
        let kind = Policy::from_u8(f.policy.kind);
        if f.filter == UNKNOWN {
            self.frames[self.sp].filter = self.has_filter(f.at + 1, f.end) as u8;
        }
        // A dispatch block in the body may give some of its tasks to this AICPU even in
        // iterations it does not own: then no iteration is skipped.
        let skippable = self.frames[self.sp].filter == 0;
        loop {
            if p >= f.ext {
                return Ok(false);
            }
            // Fast paths: the owned positions are known without evaluating each one.
            if skippable && kind == Some(Policy::StaticPartition) && f.policy.depth == f.depth {
                let lo = (self.me as u128 * f.ext as u128).div_ceil(self.n as u128) as u64;
                let hi = ((self.me + 1) as u128 * f.ext as u128).div_ceil(self.n as u128) as u64;
                if p < lo {
                    self.skip_positions(p, lo)?;
                    p = lo;
                }
                if p >= hi {
                    self.skip_positions(p, f.ext)?;
                    return Ok(false);
                }
                break;
            }
            let pure_var = skippable
                && f.indices == NONE16
                && kind == Some(Policy::Affinity)
                && self.expr_at(f.policy.key.get() as u32).opcode == ExprOp::VAR as u8
                && self.expr_at(f.policy.key.get() as u32).op1() == f.depth as u16
                && self.expr_at(f.policy.key.get() as u32 + 1).opcode == ExprOp::END as u8;
            if pure_var {
                let q = p + (self.me + self.n - p % self.n) % self.n;
                let q = q.min(f.ext);
                self.skip_positions(p, q)?;
                p = q;
                if p >= f.ext {
                    return Ok(false);
                }
                break;
            }
            self.bind(f.depth, p, f.ext, f.base, f.indices);
            if self.owner(&f.policy, f.at)? == self.me {
                break;
            }
            if !skippable {
                // A dispatch block inside may give some of its tasks to this AICPU: walk it.
                self.frames[self.sp].own = Own::NotMine;
                self.frames[self.sp].pos = p;
                self.stats.visits += 1;
                return Ok(true);
            }
            self.skip_positions(p, p + 1)?;
            p += 1;
        }
        self.bind(f.depth, p, f.ext, f.base, f.indices);
        self.frames[self.sp].own = Own::Mine;
        self.frames[self.sp].pos = p;
        self.stats.visits += 1;
        Ok(true)
    }

    /// Emits this instance's next task and pauses after it (the task is then
    /// [`Interpreter::current_task`]): what `run` does with a budget of one task, for a
    /// caller that takes tasks one at a time, as the scheduler stages them. In a loop whose
    /// body is only tasks, when the next site (in this iteration, or the first of the next
    /// one) is this instance's and its record is kept, it refills that record directly: what
    /// `run` would do, without its way back into the loop.
    pub fn next_task(&mut self) -> R<Status> {
        struct Pause;
        impl Sink for Pause {
            fn task(&mut self, _: &Task) -> bool {
                false
            }
        }
        if let Some((k, advance)) = self.kept_next() {
            if advance {
                // What `close` and `next_iteration` do at the end of an iteration of a loop
                // that does not decide ownership per iteration.
                let f = self.frames[self.sp];
                let p = f.pos + 1;
                self.bind(f.depth, p, f.ext, f.base, f.indices);
                self.frames[self.sp].pos = p;
                self.stats.visits += 1;
            }
            let f = &self.frames[self.sp];
            let iter = iter_flags(f.pos, f.ext);
            let id = self.next_id;
            self.next_id = id.checked_add(1).ok_or(RunError::TooManyTasks)?;
            self.stats.instructions += 1;
            let next = self.refill(k, id);
            self.current = k as u8 + 1;
            self.templates[k % TEMPLATES].iter = iter;
            self.stats.emitted += 1;
            self.resume = (next, k as u32 + 1);
            self.pc = next;
            return Ok(Status::Paused);
        }
        self.run(&mut Pause, 1)
    }

    /// The kept record of the next site when `run` would go on in a loop whose body is only
    /// tasks (`leaf_loop` has run it): inside an iteration where `leaf_loop` paused
    /// (`leaf_rest`), or at the end of one with another to go (then `true`: the loop advances
    /// first, as `close` would advance it; only for a loop that does not decide ownership per
    /// iteration, whose next iteration has the same owner). Only a site this instance owns
    /// (in a loop it owns, or by round robin) whose record is kept.
    #[inline]
    fn kept_next(&self) -> Option<(usize, bool)> {
        if self.done || self.sp == 0 {
            return None;
        }
        let f = &self.frames[self.sp];
        // (Only `leaf_loop` sets `kept_loop`, to a loop's header: a frame there is that loop,
        // and `enter_loop` empties `kept` when it starts a run of it.)
        if f.deciding || self.kept_loop != f.at {
            return None;
        }
        let (k, advance) = if self.pc == f.end {
            (0, true)
        } else {
            (self.resume.1 as usize, false)
        };
        let at = if advance {
            f.pos + 1 < f.ext
        } else {
            self.pc < f.end && self.pc != f.at + 1 && self.resume.0 == self.pc
        };
        let mine = match f.own {
            Own::Mine => true,
            Own::Undecided if f.policy.kind == Policy::RoundRobin as u8 => {
                self.next_id % self.n == self.me
            }
            _ => false,
        };
        (at && mine && k < TEMPLATES && self.kept & 1 << k != 0).then_some((k, advance))
    }

    /// Runs until the program ends, `budget` tasks were emitted, or the sink asks to pause.
    pub fn run<S: Sink + ?Sized>(&mut self, sink: &mut S, budget: u64) -> R<Status> {
        let mut emitted = 0u64;
        if self.done {
            return Ok(Status::Done);
        }
        loop {
            if self.pc >= self.frames[self.sp].end {
                if self.sp == 0 {
                    self.done = true;
                    return Ok(Status::Done);
                }
                self.close()?;
                continue;
            }
            if emitted >= budget {
                return Ok(Status::Paused);
            }
            match self.leaf_loop(sink, budget, &mut emitted)? {
                Leaf::NotApplicable => {}
                Leaf::Ran | Leaf::Rest => continue,
                Leaf::Paused => return Ok(Status::Paused),
            }
            let pc = self.pc;
            let r = self.rec(pc);
            self.stats.instructions += 1;
            match Opcode::from_u8(r.opcode).map(|o| o.class()) {
                Some(OpClass::Task) => {
                    let np = r.op2() & 0xFFFF;
                    let nio = r.op2() >> 16;
                    self.pc = pc + 1 + np + nio;
                    let id = self.next_id;
                    self.next_id = id.checked_add(1).ok_or(RunError::TooManyTasks)?;
                    let f = &self.frames[self.sp];
                    let mine = match f.own {
                        Own::Mine => true,
                        Own::NotMine => false,
                        Own::Undecided => match Policy::from_u8(f.policy.kind) {
                            Some(Policy::RoundRobin) | None => id % self.n == self.me,
                            _ => self.owner(&f.policy.clone(), pc)? == self.me,
                        },
                    };
                    if !mine {
                        self.stats.skipped += 1;
                        continue;
                    }
                    self.fill_task(pc, r, id)?;
                    self.current = 0;
                    let f = &self.frames[self.sp];
                    self.task.iter =
                        if Opcode::from_u8(f.op).map(|o| o.class()) == Some(OpClass::Loop) {
                            iter_flags(f.pos, f.ext)
                        } else {
                            0
                        };
                    self.stats.emitted += 1;
                    emitted += 1;
                    if !sink.task(&self.task) {
                        return Ok(Status::Paused);
                    }
                }
                Some(OpClass::Loop) => self.enter_loop(pc, r)?,
                Some(OpClass::Block) => self.enter_block(pc, r)?,
                _ => self.pc = pc + 1,
            }
        }
    }

    /// The fast path for an innermost loop whose body is only TASK statements and whose
    /// ownership does not change per iteration: runs its iterations without dispatching
    /// instructions one by one. Applies at the start of an iteration.
    #[inline]
    fn leaf_loop<S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
    ) -> R<Leaf> {
        if self.sp == 0 {
            return Ok(Leaf::NotApplicable);
        }
        let f = &self.frames[self.sp];
        if f.deciding || Opcode::from_u8(f.op).map(|o| o.class()) != Some(OpClass::Loop) {
            return Ok(Leaf::NotApplicable);
        }
        if self.pc != f.at + 1 {
            // Inside an iteration: where this path paused (the scheduler stages one task at
            // a time), it runs the rest of the iteration.
            if self.kept_loop == f.at && self.resume.0 == self.pc && f.own != Own::NotMine {
                return self.leaf_rest(sink, budget, emitted);
            }
            return Ok(Leaf::NotApplicable);
        }
        if f.simple == UNKNOWN_SIMPLE {
            let (start, end) = (f.at + 1, f.end);
            let mut q = start;
            let mut n = 0u32;
            while q < end {
                let r = self.rec(q);
                if r.opcode != Opcode::TASK as u8 {
                    n = NOT_SIMPLE;
                    break;
                }
                n += 1;
                q += 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
            }
            self.frames[self.sp].simple = n;
        }
        let f = self.frames[self.sp];
        if f.simple == NOT_SIMPLE {
            return Ok(Leaf::NotApplicable);
        }
        if f.own == Own::NotMine {
            // Not ours: the remaining iterations' tasks are counted, not generated.
            let n = (f.simple as u64)
                .checked_mul(f.ext - f.pos)
                .ok_or(RunError::TooManyTasks)?;
            self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
            self.stats.skipped += n;
        } else {
            let mut pos = f.pos;
            // Bit `k`: `templates[k]` holds the `k`-th site's record from this run of the
            // loop (kept across pauses: only entering a loop clears it).
            let mut kept = if self.kept_loop == f.at { self.kept } else { 0 };
            self.kept_loop = f.at;
            loop {
                let mut q = f.at + 1;
                let mut k = 0usize;
                let iter = iter_flags(pos, f.ext);
                while q < f.end {
                    let (next, paused) =
                        self.leaf_site(sink, budget, emitted, &f, (q, k, pos, iter), &mut kept)?;
                    if paused {
                        return Ok(Leaf::Paused);
                    }
                    q = next;
                    k += 1;
                }
                pos += 1;
                if pos >= f.ext {
                    break;
                }
                self.bind(f.depth, pos, f.ext, f.base, f.indices);
                self.stats.visits += 1;
            }
        }
        self.kept = 0;
        self.sp -= 1;
        self.loops -= 1;
        self.pc = f.after;
        Ok(Leaf::Ran)
    }

    /// `leaf_loop` from inside an iteration where it paused: the rest of the iteration's
    /// sites, then back to the loop's usual end-of-body step.
    #[inline(never)]
    fn leaf_rest<S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
    ) -> R<Leaf> {
        let f = self.frames[self.sp];
        let (mut q, mut k) = (self.pc, self.resume.1 as usize);
        let mut kept = self.kept;
        let iter = iter_flags(f.pos, f.ext);
        while q < f.end {
            let (next, paused) =
                self.leaf_site(sink, budget, emitted, &f, (q, k, f.pos, iter), &mut kept)?;
            if paused {
                return Ok(Leaf::Paused);
            }
            q = next;
            k += 1;
        }
        self.kept = kept;
        self.pc = f.end;
        Ok(Leaf::Rest)
    }

    /// One task site of a `leaf_loop` body, the `k`-th, at `q`, in iteration `pos` of the
    /// loop `f` (its flags `iter`): emits its task if this instance owns it, in the record
    /// kept for the site where it can. Gives the next site's index and whether emission
    /// paused (then the interpreter's state is saved to resume at the next site).
    #[inline(always)]
    fn leaf_site<S: Sink + ?Sized>(
        &mut self,
        sink: &mut S,
        budget: u64,
        emitted: &mut u64,
        f: &Frame,
        (q, k, pos, iter): (u32, usize, u64, u8),
        kept: &mut u32,
    ) -> R<(u32, bool)> {
        let id = self.next_id;
        self.next_id = id.checked_add(1).ok_or(RunError::TooManyTasks)?;
        self.stats.instructions += 1;
        let mine = match f.own {
            Own::Mine => true,
            Own::Undecided if f.policy.kind == Policy::RoundRobin as u8 => id % self.n == self.me,
            _ => self.owner(&f.policy, q)? == self.me,
        };
        let (next, t) = if mine && k < TEMPLATES && *kept & 1 << k != 0 {
            (self.refill(k, id), k + 1)
        } else {
            let r = self.rec(q);
            let next = q + 1 + (r.op2() & 0xFFFF) + (r.op2() >> 16);
            if !mine {
                self.stats.skipped += 1;
                return Ok((next, false));
            }
            self.fill_task(q, r, id)?;
            if f.simple as usize <= TEMPLATES && self.keep_template(q, next, k, f.depth) {
                *kept |= 1 << k;
                (next, k + 1)
            } else {
                (next, 0)
            }
        };
        self.current = t as u8;
        let task = match t {
            0 => &mut self.task,
            t => &mut self.templates[(t - 1) % TEMPLATES],
        };
        task.iter = iter;
        self.stats.emitted += 1;
        *emitted += 1;
        if !sink.task(task) || *emitted >= budget {
            self.kept = *kept;
            self.resume = (next, k as u32 + 1);
            self.frames[self.sp].pos = pos;
            self.pc = next;
            return Ok((next, true));
        }
        Ok((next, false))
    }

    fn push(&mut self, mut f: Frame) {
        // The verifier bounds nesting to MAX_NESTING; the check keeps a malformed state from
        // indexing out of bounds.
        if self.sp + 1 < self.frames.len() {
            let parent = self.frames[self.sp];
            if f.op != Opcode::DISPATCH_FILTER as u8 {
                f.policy = parent.policy;
                f.need = parent.need;
                f.own = parent.own;
            }
            self.sp += 1;
            self.frames[self.sp] = f;
        }
    }

    fn enter_loop(&mut self, pc: u32, r: Record) -> R<()> {
        // The variables of the loops around this one may have changed since its last run:
        // no record kept for an innermost loop stays valid.
        self.kept = 0;
        let (ext, base, indices) = self.axis(r.op1(), pc)?;
        let end = r.op2();
        if ext == 0 {
            self.pc = end;
            return Ok(());
        }
        let parent = self.frames[self.sp];
        if parent.own == Own::NotMine && (parent.filter == 0 || !self.has_filter(pc + 1, end)) {
            // Not ours and no dispatch block inside: count instead of walking.
            let n = self.count_range(pc, end)?;
            self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
            self.stats.skipped += n;
            self.pc = end;
            return Ok(());
        }
        let depth = self.loops as u8;
        self.push(Frame {
            op: r.opcode,
            at: pc,
            end,
            after: end,
            depth,
            pos: 0,
            ext,
            base,
            indices,
            ..Frame::top(end, parent.policy, parent.need)
        });
        self.loops += 1;
        let parent_own = self.frames[self.sp - 1].own;
        let f = &mut self.frames[self.sp];
        f.deciding = parent_own == Own::Undecided
            && f.policy.kind != Policy::RoundRobin as u8
            && f.need == f.depth as u32 + 1;
        if self.next_iteration(0)? {
            self.pc = pc + 1;
        } else {
            self.sp -= 1;
            self.loops -= 1;
            self.pc = end;
        }
        Ok(())
    }

    fn enter_block(&mut self, pc: u32, r: Record) -> R<()> {
        let end = r.op2();
        let mut after = end;
        if r.opcode == Opcode::COND as u8 {
            if self.eval(r.op1() as u32, pc)? == 0 {
                self.pc = end; // runs the else block (a SEQUENTIAL) if there is one
                return Ok(());
            }
            if r.flags & COND_HAS_ELSE != 0 {
                after = self.rec(end).op2();
            }
        }
        let mut f = Frame {
            op: r.opcode,
            at: pc,
            after,
            ..Frame::top(end, PolicySpec::default(), 0)
        };
        if r.opcode == Opcode::DISPATCH_FILTER as u8 {
            let policy = match Policy::from_u8(r.flags) {
                Some(Policy::StaticPartition) => PolicySpec {
                    kind: r.flags,
                    depth: r.op1() as u8,
                    key: NONE16.into(),
                },
                Some(Policy::Affinity) | Some(Policy::Hash) => PolicySpec {
                    kind: r.flags,
                    depth: 0,
                    key: r.operand1,
                },
                _ => PolicySpec {
                    kind: Policy::RoundRobin as u8,
                    depth: 0,
                    key: NONE16.into(),
                },
            };
            f.policy = policy;
            f.need = self.need(&policy);
            f.own = self.decide_scope(&policy, f.need, pc)?;
        } else if self.frames[self.sp].own == Own::NotMine && !self.has_filter(pc + 1, end) {
            let n = self.count_range(pc, after.max(end))?;
            self.next_id = self.next_id.checked_add(n).ok_or(RunError::TooManyTasks)?;
            self.stats.skipped += n;
            self.pc = after;
            return Ok(());
        }
        self.push(f);
        self.pc = pc + 1;
        Ok(())
    }

    fn close(&mut self) -> R<()> {
        let f = self.frames[self.sp];
        if Opcode::from_u8(f.op).map(|o| o.class()) == Some(OpClass::Loop) {
            if self.next_iteration(f.pos + 1)? {
                self.pc = f.at + 1;
                return Ok(());
            }
            self.loops -= 1;
        }
        self.sp -= 1;
        self.pc = f.after;
        Ok(())
    }

    fn dim_extent(&self, t: &crate::format::TensorEntry, d: usize) -> i64 {
        let x = t.dims[d].get();
        if x & DIM_IS_SLOT != 0 {
            self.p.scalar((x & 0xFFFF) as usize) as i64
        } else {
            x as i64
        }
    }

    /// Decodes an expression into an operand (a constant or a loop variable when it is one).
    fn operand_of(&self, start: u32) -> Operand {
        let first = self.expr_at(start);
        if self.expr_at(start + 1).opcode == ExprOp::END as u8 {
            match ExprOp::from_u8(first.opcode) {
                Some(ExprOp::CONST) => {
                    return Operand {
                        kind: OPERAND_CONST,
                        a: 0,
                        c: first.op2() as i32 as i64,
                    }
                }
                Some(ExprOp::VAR) => {
                    return Operand {
                        kind: OPERAND_VAR,
                        a: first.op1() as u32,
                        c: 0,
                    }
                }
                Some(ExprOp::PARAM) => {
                    return Operand {
                        kind: OPERAND_CONST,
                        a: 0,
                        c: self.p.scalar(first.op1() as usize) as i64,
                    }
                }
                _ => {}
            }
        }
        Operand {
            kind: OPERAND_EXPR,
            a: start,
            c: 0,
        }
    }

    /// Decodes the task site at `pc` into a plan; `None` if it has too many region dimensions.
    fn make_plan(&self, pc: u32, r: Record) -> Option<Plan> {
        let np = ((r.op2() & 0xFFFF) as usize).min(limits::MAX_TASK_PARAMS);
        let nio = ((r.op2() >> 16) as usize).min(limits::MAX_TASK_IO);
        let mut plan = EMPTY_PLAN;
        plan.site = pc;
        plan.kernel = r.op1();
        plan.pool = self.v.kernels().get(r.op1() as usize).map_or(0, |k| k.pool);
        plan.nparams = np as u8;
        plan.nio = nio as u8;
        for i in 0..np {
            let o = self.rec(pc + 1 + i as u32);
            plan.params[i] = match Opcode::from_u8(o.opcode) {
                Some(Opcode::PARAM_CONST) => Operand {
                    kind: OPERAND_CONST,
                    a: 0,
                    c: o.op2() as i32 as i64,
                },
                Some(Opcode::PARAM_LOOPVAR) => Operand {
                    kind: OPERAND_VAR,
                    a: o.op1() as u32,
                    c: 0,
                },
                _ => self.operand_of(o.op2()),
            };
        }
        let mut k = 0usize;
        for j in 0..nio {
            let o = self.rec(pc + 1 + (np + j) as u32);
            let t = self.v.tensors().get(o.op1() as usize)?;
            let declared = t.flags.get() & TENSOR_IMPLICIT == 0;
            let ndims = (o.flags as usize).min(limits::MAX_RANK);
            if k + ndims > PLAN_DIMS {
                return None;
            }
            // IO_INPUT, IO_OUTPUT, IO_INOUT are 0x23..0x25 and `Dir` is 1..3.
            let dir = o
                .opcode
                .wrapping_sub(Opcode::IO_INPUT as u8 - Dir::In as u8)
                & 3;
            plan.ios[j] = PlanIo {
                tensor: o.op1(),
                dir,
                ndims: ndims as u8,
            };
            for d in 0..ndims {
                let rd = self
                    .v
                    .regions()
                    .get(o.op2() as usize + d)
                    .copied()
                    .unwrap_or_default();
                let start = self.operand_of(rd.start.get() as u32);
                let end = if rd.end.get() == NONE16 {
                    Operand {
                        kind: OPERAND_NEXT,
                        a: 0,
                        c: 0,
                    }
                } else {
                    self.operand_of(rd.end.get() as u32)
                };
                let extent = if declared {
                    self.dim_extent(t, d)
                } else {
                    i64::MAX
                };
                let start = if start.kind == OPERAND_VAR
                    && end.kind == OPERAND_NEXT
                    && self.index_within(start.a, extent)
                {
                    Operand {
                        kind: OPERAND_INDEX,
                        ..start
                    }
                } else {
                    start
                };
                plan.dims[k] = PlanDim {
                    start,
                    end,
                    extent,
                    io: j as u8,
                    dim: d as u8,
                };
                k += 1;
            }
        }
        plan.ndims = k as u8;
        plan.vars_only = plan.params[..np].iter().all(|o| o.kind == OPERAND_VAR);
        for (d, o) in plan.param_depths.iter_mut().zip(&plan.params[..np]) {
            *d = o.a as u8;
        }
        plan.index_only = plan.dims[..k].iter().all(|d| d.start.kind == OPERAND_INDEX);
        for (x, d) in plan.index_dims.iter_mut().zip(&plan.dims[..k]) {
            *x = [d.io, d.dim, d.start.a as u8];
        }
        Some(plan)
    }

    /// Whether the variable at `depth` is that of an enclosing loop over a dense or dynamic
    /// axis (values `0 .. ext`, the same extent at every execution of the loop in this run)
    /// with `ext <= extent`.
    fn index_within(&self, depth: u32, extent: i64) -> bool {
        self.frames[..=self.sp].iter().any(|f| {
            Opcode::from_u8(f.op).is_some_and(|o| o.class() == OpClass::Loop)
                && f.depth as u32 == depth
                && f.indices == NONE16
                && f.ext <= extent.max(0) as u64
                && self
                    .v
                    .axes()
                    .get(self.rec(f.at).op1() as usize)
                    .is_some_and(|a| {
                        a.opcode == Opcode::AXIS_DENSE as u8
                            || a.opcode == Opcode::AXIS_DENSE_DYN as u8
                    })
        })
    }

    /// After `fill_task` for the site at `pc` (followed by the instruction at `next`), the
    /// `k`-th of the innermost loop at `depth`: if its plan has only constant and
    /// loop-variable parameters and index dimensions, copies the record to `templates[k]` and
    /// notes the fields that depend on the loop's variable.
    fn keep_template(&mut self, pc: u32, next: u32, k: usize, depth: u8) -> bool {
        let Some(slot) = self.plan_slot(pc) else {
            return false;
        };
        let plan = &self.plans[slot];
        let params = &plan.params[..plan.nparams as usize];
        if k >= TEMPLATES
            || plan.site != pc
            || !plan.index_only
            || params
                .iter()
                .any(|o| o.kind != OPERAND_CONST && o.kind != OPERAND_VAR)
        {
            return false;
        }
        let mut t = EMPTY_TEMPLATE;
        t.depth = depth;
        for (i, o) in params.iter().enumerate() {
            if o.kind == OPERAND_VAR && o.a == depth as u32 {
                t.params |= 1 << i;
            }
        }
        for &[io, dim, d] in &plan.index_dims[..plan.ndims as usize] {
            if d == depth {
                t.dims[t.ndims as usize] = [io, dim];
                t.ndims += 1;
            }
        }
        t.next = next;
        self.template_of[k] = t;
        self.templates[k] = self.task.clone();
        true
    }

    /// Task `id` of the site whose record `templates[k]` keeps: only the fields that depend
    /// on the loop's variable change. Gives the instruction after the site.
    #[inline(always)]
    fn refill(&mut self, k: usize, id: u64) -> u32 {
        let k = k % TEMPLATES;
        let (task, t) = (&mut self.templates[k], &self.template_of[k]);
        let v = self.vars[t.depth as usize % limits::MAX_LOOP_DEPTH];
        task.id = id;
        let mut m = t.params;
        while m != 0 {
            task.params[m.trailing_zeros() as usize % limits::MAX_TASK_PARAMS] = v;
            m &= m - 1;
        }
        for &[io, dim] in t.dims.iter().take(t.ndims as usize) {
            task.io[io as usize % limits::MAX_TASK_IO].ranges[dim as usize % limits::MAX_RANK] =
                (v, v + 1);
        }
        t.next
    }

    /// The plan slot holding the site at `pc`, if one does: its own slot first.
    #[inline]
    fn plan_slot(&self, pc: u32) -> Option<usize> {
        let own = pc as usize % PLAN_SITES;
        if self.plans[own].site == pc {
            return Some(own);
        }
        self.plans.iter().position(|p| p.site == pc)
    }

    /// A new plan's slot: the site's own if it is empty, else the round robin's next.
    fn plan_victim(&mut self, pc: u32) -> usize {
        let own = pc as usize % PLAN_SITES;
        if self.plans[own].site == EMPTY_PLAN.site {
            return own;
        }
        let slot = self.plan_next as usize % PLAN_SITES;
        self.plan_next = ((slot + 1) % PLAN_SITES) as u8;
        slot
    }

    fn fill_task(&mut self, pc: u32, r: Record, id: u64) -> R<()> {
        let slot = match self.plan_slot(pc) {
            Some(slot) => slot,
            None => match self.make_plan(pc, r) {
                Some(plan) => {
                    let slot = self.plan_victim(pc);
                    self.plans[slot] = plan;
                    slot
                }
                None => return self.fill_task_decoding(pc, r, id),
            },
        };
        let Interpreter {
            v,
            p,
            vars,
            task,
            plans,
            ..
        } = self;
        let plan = &plans[slot];
        let exprs = v.exprs();
        task.id = id;
        task.kernel = plan.kernel;
        task.pool = plan.pool;
        task.site = pc;
        task.nparams = plan.nparams;
        task.nio = plan.nio;
        let np = plan.nparams as usize;
        if plan.vars_only {
            for (dst, &d) in task.params.iter_mut().zip(&plan.param_depths[..np]) {
                *dst = vars[d as usize % limits::MAX_LOOP_DEPTH];
            }
        } else {
            for (i, (dst, o)) in task.params.iter_mut().zip(&plan.params[..np]).enumerate() {
                *dst = operand(o, exprs, p, vars, pc + 1 + i as u32)?;
            }
        }
        for (io, pio) in task.io.iter_mut().zip(&plan.ios[..plan.nio as usize]) {
            io.tensor = pio.tensor;
            io.dir = pio.dir;
            io.ndims = pio.ndims;
        }
        if plan.index_only {
            for &[io, dim, depth] in &plan.index_dims[..plan.ndims as usize] {
                let v = vars[depth as usize % limits::MAX_LOOP_DEPTH];
                task.io[io as usize % limits::MAX_TASK_IO].ranges
                    [dim as usize % limits::MAX_RANK] = (v, v + 1);
            }
            return Ok(());
        }
        // The named dimensions of all regions, in one pass (each knows its region and place).
        for pd in &plan.dims[..plan.ndims as usize] {
            let range = &mut task.io[pd.io as usize % limits::MAX_TASK_IO].ranges
                [pd.dim as usize % limits::MAX_RANK];
            if pd.start.kind == OPERAND_INDEX {
                let v = vars[pd.start.a as usize % limits::MAX_LOOP_DEPTH];
                *range = (v, v + 1);
                continue;
            }
            let opc = pc + 1 + np as u32 + pd.io as u32;
            let start = operand(&pd.start, exprs, p, vars, opc)?;
            let end = if pd.end.kind == OPERAND_NEXT {
                start.checked_add(1).ok_or(RunError::Overflow { pc: opc })?
            } else {
                operand(&pd.end, exprs, p, vars, opc)?
            };
            if start < 0 || end < start || end > pd.extent {
                let tensor = task.io[pd.io as usize % limits::MAX_TASK_IO].tensor;
                return Err(region_error(opc, tensor, pd.dim, start, end, pd.extent));
            }
            *range = (start, end);
        }
        Ok(())
    }

    /// Emission for a task site too large for a plan: decodes its records at every task.
    fn fill_task_decoding(&mut self, pc: u32, r: Record, id: u64) -> R<()> {
        let np = (r.op2() & 0xFFFF) as usize;
        let nio = (r.op2() >> 16) as usize;
        let k = self
            .v
            .kernels()
            .get(r.op1() as usize)
            .copied()
            .unwrap_or_default();
        self.task.id = id;
        self.task.kernel = r.op1();
        self.task.pool = k.pool;
        self.task.site = pc;
        self.task.nparams = np as u8;
        self.task.nio = nio as u8;
        for i in 0..np.min(limits::MAX_TASK_PARAMS) {
            let opc = pc + 1 + i as u32;
            let o = self.rec(opc);
            self.task.params[i] = match Opcode::from_u8(o.opcode) {
                Some(Opcode::PARAM_CONST) => o.op2() as i32 as i64,
                Some(Opcode::PARAM_LOOPVAR) => self.vars[o.op1() as usize % limits::MAX_LOOP_DEPTH],
                _ => self.eval(o.op2(), opc)?,
            };
        }
        let regions = self.v.regions();
        for j in 0..nio.min(limits::MAX_TASK_IO) {
            let opc = pc + 1 + (np + j) as u32;
            let o = self.rec(opc);
            let tensor = o.op1();
            let Some(t) = self.v.tensors().get(tensor as usize) else {
                continue;
            };
            let declared = t.flags.get() & TENSOR_IMPLICIT == 0;
            // Only the dimensions the task names are materialised; the others are whole.
            let ndims = (o.flags as usize).min(limits::MAX_RANK);
            // IO_INPUT, IO_OUTPUT, IO_INOUT are 0x23..0x25 and `Dir` is 1..3.
            let dir = o
                .opcode
                .wrapping_sub(Opcode::IO_INPUT as u8 - Dir::In as u8)
                & 3;
            {
                let io = &mut self.task.io[j];
                io.tensor = tensor;
                io.dir = dir;
                io.ndims = ndims as u8;
            }
            let first = o.op2() as usize;
            for d in 0..ndims {
                let rd = regions.get(first + d).copied().unwrap_or_default();
                let start = self.eval(rd.start.get() as u32, opc)?;
                let end = if rd.end.get() == NONE16 {
                    start.checked_add(1).ok_or(RunError::Overflow { pc: opc })?
                } else {
                    self.eval(rd.end.get() as u32, opc)?
                };
                if start < 0 || end < start {
                    return Err(RunError::BadRegion {
                        pc: opc,
                        tensor,
                        dim: d as u8,
                        start,
                        end,
                    });
                }
                if declared {
                    let extent = self.dim_extent(t, d);
                    if end > extent {
                        return Err(RunError::RegionBounds {
                            pc: opc,
                            tensor,
                            dim: d as u8,
                            start,
                            end,
                            extent,
                        });
                    }
                }
                self.task.io[j].ranges[d] = (start, end);
            }
        }
        Ok(())
    }
}

/// Evaluates the postfix expression at node `start` of `exprs` with a fixed stack; `pc` locates
/// errors.
#[inline(never)]
fn eval_postfix(
    exprs: &[Record],
    p: &RuntimeParams<'_>,
    vars: &[i64; limits::MAX_LOOP_DEPTH],
    start: u32,
    pc: u32,
) -> R<i64> {
    let mut st = [0i64; limits::MAX_EXPR_STACK];
    let mut sp = 0usize;
    let ovf = RunError::Overflow { pc };
    for i in start..start + limits::MAX_EXPR_LEN as u32 {
        let r = exprs.get(i as usize).copied().unwrap_or_default();
        let Some(op) = ExprOp::from_u8(r.opcode) else {
            break;
        };
        match op.kind() {
            ExprKind::End => return Ok(if sp > 0 { st[sp - 1] } else { 0 }),
            ExprKind::Leaf => {
                let x = match op {
                    ExprOp::CONST => r.op2() as i32 as i64,
                    ExprOp::VAR => vars[r.op1() as usize % limits::MAX_LOOP_DEPTH],
                    _ => p.scalar(r.op1() as usize) as i64,
                };
                if sp < st.len() {
                    st[sp] = x;
                    sp += 1;
                }
            }
            ExprKind::Unary => {
                if sp == 0 {
                    break;
                }
                let a = st[sp - 1];
                st[sp - 1] = match op {
                    ExprOp::NEG => a.checked_neg().ok_or(ovf)?,
                    ExprOp::NOT => (a == 0) as i64,
                    _ => {
                        let slot = r.op1();
                        let arr = p.array(slot as usize);
                        match usize::try_from(a).ok().and_then(|i| arr.get(i)) {
                            Some(x) => *x as i64,
                            None => {
                                return Err(RunError::Index {
                                    pc,
                                    slot,
                                    index: a,
                                    len: arr.len(),
                                })
                            }
                        }
                    }
                };
            }
            ExprKind::Binary => {
                if sp < 2 {
                    break;
                }
                let (a, b) = (st[sp - 2], st[sp - 1]);
                sp -= 1;
                st[sp - 1] = match op {
                    ExprOp::ADD => a.checked_add(b).ok_or(ovf)?,
                    ExprOp::SUB => a.checked_sub(b).ok_or(ovf)?,
                    ExprOp::MUL => a.checked_mul(b).ok_or(ovf)?,
                    ExprOp::DIV | ExprOp::MOD | ExprOp::CEILDIV => {
                        if b == 0 {
                            return Err(RunError::DivByZero { pc });
                        }
                        let q = a.checked_div(b).ok_or(ovf)?;
                        let m = a.checked_rem(b).ok_or(ovf)?;
                        match op {
                            ExprOp::DIV => q,
                            ExprOp::MOD => m,
                            _ if m != 0 && ((m > 0) == (b > 0)) => q + 1,
                            _ => q,
                        }
                    }
                    ExprOp::MIN => a.min(b),
                    ExprOp::MAX => a.max(b),
                    ExprOp::EQ => (a == b) as i64,
                    ExprOp::NE => (a != b) as i64,
                    ExprOp::LT => (a < b) as i64,
                    ExprOp::LE => (a <= b) as i64,
                    ExprOp::GT => (a > b) as i64,
                    ExprOp::GE => (a >= b) as i64,
                    ExprOp::AND => (a != 0 && b != 0) as i64,
                    _ => (a != 0 || b != 0) as i64,
                };
            }
        }
    }
    // Unreachable for verified expressions.
    Ok(if sp > 0 { st[sp - 1] } else { 0 })
}

/// The error of a region dimension that failed its checks (kept off the hot path).
#[cold]
fn region_error(pc: u32, tensor: u16, dim: u8, start: i64, end: i64, extent: i64) -> RunError {
    if start < 0 || end < start {
        RunError::BadRegion {
            pc,
            tensor,
            dim,
            start,
            end,
        }
    } else {
        RunError::RegionBounds {
            pc,
            tensor,
            dim,
            start,
            end,
            extent,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An interpreter lives in memory its caller provides (on the AICPU: the kernel's); keep
    /// its size known and bounded. Most of it is task records: the one it emits and the
    /// `TEMPLATES` that `leaf_loop` keeps (about 2.3 KiB each), and the plans.
    #[test]
    fn interpreter_size_is_bounded() {
        let size = core::mem::size_of::<Interpreter<'static, 'static>>();
        assert!(size <= 32 * 1024, "Interpreter is {size} bytes");
        assert!(core::mem::size_of::<Plan>() <= 1024);
        assert!(core::mem::size_of::<Task>() * (1 + TEMPLATES) <= 12 * 1024);
    }

    #[test]
    fn mix64_is_splitmix_finalizer() {
        // SplitMix64's output for state 0x9E3779B97F4A7C15 is its finalizer of that value.
        assert_eq!(mix64(0x9E37_79B9_7F4A_7C15), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix64(0), 0);
    }
}
