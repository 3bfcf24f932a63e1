//! The interpreter (spec/bytecode.md §5): expands a verified program on one AICPU, emitting only
//! the tasks its dispatch policy gives that AICPU, in program order, into a caller-supplied
//! [`Sink`]. No heap, no recursion: fixed stacks sized by the format's limits. It can stop after
//! any task and resume, so generation can be pipelined with execution.
//!
//! Subtrees owned by other AICPUs are skipped without being walked whenever the policy decides
//! ownership at an outer loop: the task ids they would have used are counted (`count_range`),
//! by multiplication where a loop's body does not depend on its variable.
//!
//! The rooms: `task` (what the interpreter emits and its errors), `plan` (task sites decoded
//! once, and the records `leaf_loop` keeps), `expr` (expression evaluation), `fold` (the
//! expressions a kept record recomputes, folded for its loop), `count` (task
//! counts of skipped subtrees and the work bound), `walk` (the walk itself: loops, blocks,
//! ownership decisions), `leaf` (the fast path of innermost loops of tasks). This file holds
//! the interpreter's state, its ownership rules and the facts it reads from the code.

mod count;
mod expr;
mod fold;
mod leaf;
mod plan;
mod task;
mod walk;

pub use task::{Io, LaunchError, RunError, Sink, Stats, Status, Task};

use expr::*;
pub(crate) use expr::{
    binary, divide, eval_expr, eval_leaf, eval_postfix, eval_postfix_with, loops_read, unary,
};
use plan::*;

use crate::format::{limits, PolicySpec, Record, COND_HAS_ELSE, NONE16, TENSOR_IMPLICIT};
use crate::opcodes::{Dir, ExprKind, ExprOp, OpClass, Opcode};
use crate::params::{ParamError, RuntimeParams};
use crate::{Policy, Pool, Verified};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Own {
    Undecided,
    Mine,
    NotMine,
}

const UNKNOWN: u8 = 2;
/// `Frame::body_count` before the body is counted.
const NO_COUNT: u64 = u64::MAX;

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
    /// it does not depend on the variable (`NO_COUNT` until counted; a count of `NO_COUNT`
    /// is counted again each time: frames are kept small, `interpreter_size_is_bounded`).
    depends: u8,
    filter: u8,
    body_count: u64,
    /// Whether a body whose count depends on the variable is one COND on an interval of it
    /// with branches of fixed counts (0/1/UNKNOWN; `Interpreter::count_by_interval`), and
    /// those counts (then, else).
    interval: u8,
    branch_counts: (u16, u16),
    /// Whether the loop decides ownership per iteration (then each iteration goes through
    /// `next_iteration`).
    deciding: bool,
    /// The number of tasks an iteration runs when they are the TASK statements
    /// `leaf.0 .. leaf.1` (`Interpreter::leaf_body`), or NOT_SIMPLE, or UNKNOWN_SIMPLE before
    /// the body is looked at (once per run of the loop).
    simple: u32,
    leaf: (u32, u32),
    /// Whether the leaf body is a `cond` chain whose conditions read the loop's variable
    /// (`Interpreter::varying_body`): each iteration evaluates it for its branch, and
    /// `simple` is the count every branch holds, or `VARIES`.
    varying: bool,
    /// The end of the branch the current iteration of a varying leaf loop runs.
    branch_end: u32,
    /// The positions of a leaf loop this AICPU owns from the current one on: every `step`-th
    /// before `stop` (`Interpreter::leaf_stride`).
    step: u64,
    stop: u64,
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
/// `Frame::simple` of a varying leaf loop whose branches hold different counts (the
/// positions it steps over are counted by `Interpreter::count_varying`).
const VARIES: u32 = u32::MAX - 2;

impl Frame {
    /// [`Task::iter`] of the tasks of a leaf loop's iteration `pos` (`Interpreter::leaf_body`):
    /// its iteration's flags for a body of TASK statements, 0 for a branch of a cond chain (the
    /// TASK's own statement block is the cond's, not the loop's). Not for a varying loop, whose
    /// tasks are all in a chain's branches (0).
    #[inline(always)]
    fn leaf_iter(&self, pos: u64) -> u8 {
        if self.leaf.0 == self.at + 1 {
            iter_flags(pos, self.ext)
        } else {
            0
        }
    }

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
            body_count: NO_COUNT,
            interval: UNKNOWN,
            branch_counts: (0, 0),
            deciding: false,
            simple: UNKNOWN_SIMPLE,
            leaf: (0, 0),
            varying: false,
            branch_end: 0,
            step: 1,
            stop: 0,
        }
    }
}

/// SplitMix64's increment, ⌊2⁶⁴ / φ⌋: the step of its state, and the multiplier of the
/// TensorMap's Fibonacci hashing.
pub const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 finalizer used by the `hash` policy.
#[inline]
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// An upper bound on a program's walk ([`Interpreter::work_bound`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkBound {
    /// Loop iterations all instances together can start.
    pub iterations: u64,
    /// Tasks the program can emit.
    pub tasks: u64,
    /// Expression nodes the launch's planning evaluated (`crate::planning`: done when the
    /// runtime parameters were bound, at most `limits::MAX_PLAN_WORK`).
    pub planning: u64,
}

/// Where the current iteration of a loop outside every other loop started
/// ([`Interpreter::outer_start`]): the loop's frame (0: none) and instruction, its position,
/// and the id of the iteration's first task.
#[derive(Clone, Copy, Debug, Default)]
struct Outer {
    frame: u32,
    at: u32,
    pos: u64,
    start: u64,
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
    /// Where the current iteration of a loop outside every other loop started: that loop's
    /// frame and instruction, its position then, and the id of the iteration's first task
    /// ([`Interpreter::outer_start`]).
    outer: Outer,
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
    /// The conditions of the current run of a varying leaf loop's chain, decided once each
    /// (`Interpreter::leaf_branch`): `(pc, lo, hi)`, the COND at `pc` holds for the loop's
    /// values `lo .. hi`; `lo > hi` for one that is evaluated at every iteration.
    conds: [(u32, i64, i64); COND_MEMO],
    nconds: u8,
    /// The branch of a varying leaf loop's chain `leaf_branch` found last, for the values of
    /// the loop's variable it holds for; of the current run of the loop (emptied, as `conds`,
    /// when a loop is entered).
    branch: Branch,
    /// The leaf body `varying_body` last looked at and what it found (`(u32::MAX, u32::MAX,
    /// None)` before it looked at any).
    varying_kept: (u32, u32, Option<u32>),
    /// The `READBACK` the walk last stopped at ([`Status::Readback`]), and how many it has
    /// passed.
    readback: Option<crate::readback::Readback>,
    readbacks: u32,
    stats: Stats,
}

/// The conditions of a varying chain whose intervals an interpreter keeps for a run.
const COND_MEMO: usize = 8;

/// The branch `(first, end)` a varying leaf loop's chain `start .. end` takes for the loop's
/// values `lo .. hi` (`Interpreter::leaf_branch`).
#[derive(Clone, Copy, Debug)]
struct Branch {
    start: u32,
    end: u32,
    lo: i64,
    hi: i64,
    found: (u32, u32),
}

/// No branch: no chain starts at `u32::MAX`, and no value is in `0 .. 0`.
const NO_BRANCH: Branch = Branch {
    start: u32::MAX,
    end: u32::MAX,
    lo: 0,
    hi: 0,
    found: (0, 0),
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
            outer: Outer::default(),
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
            conds: [(0, 0, 0); COND_MEMO],
            nconds: 0,
            branch: NO_BRANCH,
            varying_kept: (u32::MAX, u32::MAX, None),
            readback: None,
            readbacks: 0,
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

    /// The program it runs (a reference: a `Verified` is some 500 bytes, and the scheduler
    /// reads it for every task it records).
    pub fn program(&self) -> &Verified<'a> {
        &self.v
    }

    /// The runtime parameters of the launch (after a `READBACK`, with the values read back).
    pub fn params(&self) -> &RuntimeParams<'p> {
        &self.p
    }

    /// The `READBACK` the walk last stopped at ([`Status::Readback`]; `None` before the first).
    pub fn readback(&self) -> Option<crate::readback::Readback> {
        self.readback
    }

    /// The id of the first task of the current iteration of the loop outside every other
    /// loop that the walk is in — every task below it belongs to an earlier iteration, or to
    /// a statement before the loop — or `None` when the walk is in no such loop or does not
    /// know (the loop moved on by a path that does not keep it: a loop of tasks only, walked
    /// by its fast path). The scheduler's watermark for a stepped tensor's reads
    /// (spec/runtime.md §3.5).
    ///
    /// The frame still holds that iteration when it is live (at most the walk's depth) and
    /// holds the same instruction at the same position: a loop outside every other loop is
    /// entered once, so no other frame has its instruction.
    #[inline]
    pub fn outer_start(&self) -> Option<u64> {
        let o = self.outer;
        let f = self.frames.get(o.frame as usize)?;
        (o.frame > 0 && o.frame as usize <= self.sp && f.at == o.at && f.pos == o.pos)
            .then_some(o.start)
    }

    /// Continues after a `READBACK` with `p`: the launch's parameters with the values read
    /// back in its runtime array (`RuntimeParams::rebind`, which checked them as the launch
    /// checks arrays). The caller checks the values' range (`readback::check_values`) first.
    pub fn rebind(&mut self, p: RuntimeParams<'p>) {
        self.p = p;
    }

    /// The AICPU count of the launch.
    pub fn aicpus(&self) -> u32 {
        self.n as u32
    }

    /// The dispatch policy in force at the top level (a threshold policy's selected level).
    pub fn module_policy(&self) -> PolicySpec {
        self.frames[0].policy
    }

    /// Loops a policy needs bound before it can name an owner.
    fn need(&self, p: &PolicySpec) -> u32 {
        match Policy::from_u8(p.kind) {
            Some(Policy::Affinity) | Some(Policy::Hash) => {
                loops_read(self.v.exprs(), p.key.get() as u32)
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
    /// COND predicate or a ragged/sparse axis's `outer` or `row` reads it. A COND whose
    /// statements hold the same number of tasks whatever it and the CONDs inside it decide
    /// (`fixed_count`) does not count as reading it: Task Bench's `cond i == 0 { … } else
    /// { … }`, one task a branch.
    fn count_depends(&self, start: u32, end: u32, depth: u8) -> bool {
        let d = depth as u16;
        let mut pc = start;
        while pc < end {
            let r = self.rec(pc);
            let reads = match Opcode::from_u8(r.opcode) {
                Some(Opcode::COND) if self.expr_reads(r.op1() as u32, d) => {
                    let after = self.cond_end(r);
                    if self.fixed_count(pc, after).is_some() {
                        pc = after;
                        continue;
                    }
                    true
                }
                Some(Opcode::PARALLEL_FOR | Opcode::FOR_EACH | Opcode::SELECT) => {
                    let a = self.axis_rec(r.op1());
                    Opcode::loop_exprs(self.v.axes(), &a)
                        .into_iter()
                        .flatten()
                        .any(|e| self.expr_reads(e, d))
                }
                _ => false,
            };
            if reads {
                return true;
            }
            pc += 1;
        }
        false
    }

    /// Where the statement of the COND `r` ends: past its else block (the SEQUENTIAL at the
    /// end of its then block) when it has one, else at the end of its then block.
    #[inline]
    fn cond_end(&self, r: Record) -> u32 {
        if r.flags & COND_HAS_ELSE != 0 {
            self.rec(r.op2()).op2()
        } else {
            r.op2()
        }
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
        // The `outer` count of a flattened axis over an array of `len` entries: 0 ..= `max`
        // (a ragged axis sums `lengths[..outer]`, a sparse one reads `indptr[outer]`).
        let count = |e: u32, slot: u16, len: usize, max: usize| -> R<usize> {
            let x = self.eval(e, pc)?;
            usize::try_from(x)
                .ok()
                .filter(|&n| n <= max)
                .ok_or(RunError::Index {
                    pc,
                    slot,
                    index: x,
                    len,
                })
        };
        match Opcode::from_u8(a.opcode) {
            Some(Opcode::AXIS_DENSE) => Ok((a.op2() as u64, 0, NONE16)),
            Some(Opcode::AXIS_DENSE_DYN) => Ok((self.p.scalar(a.op1() as usize) as u64, 0, NONE16)),
            Some(Opcode::AXIS_RAGGED) => {
                let lens = self.p.array(a.op1() as usize);
                let outer = count(a.op2(), a.op1(), lens.len(), lens.len())?;
                let ext = lens[..outer]
                    .iter()
                    .fold(0u64, |s, &l| s.saturating_add(l as u64));
                Ok((ext, 0, NONE16))
            }
            Some(Opcode::AXIS_SPARSE) => {
                let ptr = self.p.array(a.op1() as usize);
                let last = ptr.len().saturating_sub(1);
                let outer = count(a.op2() & 0xFFFF, a.op1(), ptr.len(), last)?;
                Ok((ptr[outer] as u64, 0, (a.op2() >> 16) as u16))
            }
            Some(Opcode::AXIS_RAGGED_ROW) => {
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
            Some(Opcode::AXIS_TILE) => {
                // The base (verified: an earlier dense, dynamic or ragged-row axis), then the
                // tile size: ceil(extent / size) tiles, the last one partial.
                let (ext, _, _) = self.axis(a.op1(), pc)?;
                let size = self.eval(a.op2(), pc)?;
                if size < 1 {
                    return Err(RunError::TileSize { pc, size });
                }
                Ok((ext.div_ceil(size as u64), 0, NONE16))
            }
            Some(Opcode::AXIS_SPARSE_ROW) => {
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
    #[inline(always)]
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interpreter lives in memory its caller provides (on the AICPU: the kernel's); keep
    /// its size known and bounded. Most of it is task records: the one it emits and the
    /// `TEMPLATES` that `leaf_loop` keeps (about 2.3 KiB each), and the plans; the runtime
    /// parameters hold the launch's planned values (64 bytes). Each kept record's template
    /// holds its folded expressions (`fold`, 1 KiB: 64 nodes, room for several bounds that
    /// read a runtime array, as random_nearest's did with four regions: 34 nodes).
    #[test]
    fn interpreter_size_is_bounded() {
        let size = core::mem::size_of::<Interpreter<'static, 'static>>();
        assert!(
            size <= 37 * 1024,
            "Interpreter is {size} bytes, a frame {}",
            core::mem::size_of::<Frame>()
        );
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
