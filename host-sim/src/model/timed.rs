//! The simulated-time driver (spec/runtime.md §9.2): one thread steps the launch's AICPUs and
//! cores in virtual-time order.
//!
//! Two kinds of event, in a heap ordered by (time, order of scheduling): an AICPU's **round**
//! (one `Aicpu::step`) and a core's **finish becoming visible** to its AICPU. A round reads and
//! writes the shared state at the instant it starts and lasts the modelled cost of what it did:
//! its issues and completions, as they happen (so a core it hands a task to starts when the
//! round's work up to that issue is done, plus the handshake), then its generation, from the
//! work counters the round advanced. Its next round follows when it did something; an AICPU
//! with nothing to do sleeps until a finish of one of its cores, another AICPU's wake, or the
//! rate its `timing` allows. Nothing here reads the host's clock.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use ptovm_vm::desc::{Binding, TensorArg};
use ptovm_vm::sched::{Blocked, CoreAlloc, Counts, Env, Issued, MapLock};
use ptovm_vm::{LaunchError, Pool, RunError, RuntimeParams, Task, Verified};

use super::costs::KernelCosts;
use super::machine::Machine;
use super::{AicpuTime, CoreTime, ModelReport, PoolTime, Timeline};
use crate::deps::{DepBuilder, DepMode};
use crate::sim::launch::{self, Buffers, Layout, Region, Sched, Scheduler};
use crate::sim::{Event, EventKind, Options, Report, SimError, Trace};

/// Marks a core's event in the heap's third field (else it is an AICPU's round).
const CORE: u32 = 1 << 31;

/// Rounds in a row that did nothing while no core ran, after which the model gives up: the
/// scheduler cannot stall (spec/runtime.md §6), so this is a fault of the model, not the
/// program's.
const STUCK_ROUNDS: u64 = 1 << 24;

/// Runs the program in simulated time on `machine` (its cores replace `o.cube` and
/// `o.vector`), kernels taking their `costs`.
pub fn simulate(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    mut o: Options,
    machine: &Machine,
    costs: &KernelCosts,
) -> Result<ModelReport, SimError> {
    machine.check().map_err(SimError::Options)?;
    if o.aicpus > machine.aicpus {
        return Err(SimError::Options(format!(
            "the schedule uses {} AICPUs and the machine has {}",
            o.aicpus, machine.aicpus
        )));
    }
    o.cube = machine.cube_cores;
    o.vector = machine.vector_cores;
    let l = Layout::new(&v, &o, o.descriptors)?;
    let region = Region::new(&v, &l, o.deps)?;
    let sh = region.shared(l.n, l.cap, l.workspace(&v, &o));
    let mut buffers = Buffers::all(&v, &l)?;
    let mut rb = crate::readback_buffers(&v, &p, l.n);
    let no_tensors: &[TensorArg] = &[];
    let shapes: Vec<Binding> = v
        .tensors()
        .iter()
        .map(|t| Binding::declared(t, &p))
        .collect();
    let scheds = launch::schedulers(v, p, &l, &sh, o.deps, &mut buffers, no_tensors, &mut rb)?;
    // The bounds walk the reference graph, which depends on the program and its parameters
    // alone when nothing is read back: on the host's other core while the model runs.
    let (result, early) = std::thread::scope(|s| {
        let early = v
            .readbacks()
            .is_empty()
            .then(|| s.spawn(|| bounds(&v, &p, &l, &[], costs, &shapes)));
        let mut m = Model::new(&l, &sh, machine, costs, &o, scheds, (v, p, &shapes));
        let result = m.run().and_then(|()| m.finish());
        let early = early.map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(SimError::Check("the bounds' thread panicked".into())))
        });
        (result, early)
    });
    let (mut rep, trace) = result?;
    rep.run.workspace_arena = sh.workspace.arena;
    if o.check {
        region.check_map_empty()?;
    }
    let (critical, work) = match early {
        Some(b) => b?,
        None => bounds(&v, &p, &l, &rep.run.read_back, costs, &shapes)?,
    };
    rep.critical_path_ns = critical;
    rep.work_bound_ns = work;
    if o.check {
        crate::sim::check(&v, &p, l.n, &trace, &rep.run.read_back)?;
        rep.run.checked = true;
    }
    Ok(rep)
}

/// A core of the model.
#[derive(Clone, Copy, Debug, Default)]
struct Core {
    /// Running a task (from its start to its finish becoming visible).
    running: bool,
    /// The running task's id, owner, kernel, start and end, and the AICPU that issued it (the
    /// one that sees it finish).
    task: u64,
    owner: u32,
    issuer: u32,
    kernel: u32,
    start: u64,
    end: u64,
    /// When its last task ended (0 before any), and from when its AICPU could know it is free.
    last_end: u64,
    avail: u64,
    /// The first round of its AICPU at or after `avail`.
    noticed: Option<u64>,
    time: CoreTime,
}

/// An AICPU of the model beside its scheduler.
struct Cpu<'a, 'p, 'm> {
    sched: Scheduler<'a, 'p, 'm>,
    /// Its round in the heap, if one is.
    next: Option<u64>,
    /// When its last round ended.
    free_at: u64,
    /// What held its generation up after that round.
    blocked: Blocked,
    finished: bool,
    /// The cores it handed a task and has not yet seen free again.
    cores: Vec<u32>,
    time: AicpuTime,
    /// Values it read back at each `READBACK`.
    read: Vec<Vec<u32>>,
}

struct Model<'l, 'x, 'a, 'p, 'm> {
    l: &'l Layout,
    sh: &'l Sched<'x>,
    machine: &'l Machine,
    costs: &'l KernelCosts,
    check: bool,
    tracing: bool,
    cpus: Vec<Cpu<'a, 'p, 'm>>,
    cores: Vec<Core>,
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    order: u64,
    /// The check's sequence numbers (starts and ends in the order the model makes them).
    seq: u64,
    trace: Trace,
    events: Vec<Event>,
    timeline: Buckets,
    makespan: u64,
    stuck: u64,
    running: u32,
    /// Each pool's idle time by cause, so far.
    pools: [PoolTime; 2],
    /// With declared costs: the durations of the tasks recorded and not yet started, by id.
    durations: std::collections::HashMap<u64, u64>,
    /// The program, its parameters and its tensors' shapes, for declared costs.
    program: (Verified<'a>, RuntimeParams<'p>, &'l [Binding]),
}

impl<'l, 'x, 'a, 'p, 'm> Model<'l, 'x, 'a, 'p, 'm> {
    fn new(
        l: &'l Layout,
        sh: &'l Sched<'x>,
        machine: &'l Machine,
        costs: &'l KernelCosts,
        o: &Options,
        scheds: Vec<Scheduler<'a, 'p, 'm>>,
        program: (Verified<'a>, RuntimeParams<'p>, &'l [Binding]),
    ) -> Self {
        let cpus = scheds
            .into_iter()
            .map(|sched| Cpu {
                cores: Vec::new(),
                sched,
                next: None,
                free_at: 0,
                blocked: Blocked::Not,
                finished: false,
                time: AicpuTime::default(),
                read: Vec::new(),
            })
            .collect();
        let cores = (0..l.cores as u32)
            .map(|c| Core {
                time: CoreTime {
                    pool: u8::from(c >= l.cube),
                    aicpu: (l.alloc == CoreAlloc::Partition).then(|| l.core_aicpu[c as usize]),
                    ..CoreTime::default()
                },
                ..Core::default()
            })
            .collect();
        Model {
            l,
            sh,
            machine,
            costs,
            check: o.check,
            tracing: o.trace,
            cpus,
            cores,
            heap: BinaryHeap::new(),
            order: 0,
            seq: 1,
            trace: Vec::new(),
            events: Vec::new(),
            timeline: Buckets::new(),
            makespan: 0,
            stuck: 0,
            running: 0,
            pools: [PoolTime::default(); 2],
            durations: Default::default(),
            program,
        }
    }

    fn push(&mut self, at: u64, what: u32) {
        self.order += 1;
        self.heap.push(Reverse((at, self.order, what)));
    }

    /// AICPU `a` has something to do from `at`: its next round is then, or when its current
    /// one ends, unless one is due sooner.
    fn wake(&mut self, a: u32, at: u64) {
        let c = &mut self.cpus[a as usize];
        if c.finished {
            return;
        }
        let at = at.max(c.free_at);
        if c.next.is_some_and(|t| t <= at) {
            return;
        }
        c.next = Some(at);
        self.push(at, a);
    }

    fn run(&mut self) -> Result<(), SimError> {
        for a in 0..self.l.n {
            self.wake(a, 0);
        }
        while let Some(Reverse((t, _, what))) = self.heap.pop() {
            if what & CORE != 0 {
                self.finish_visible((what & !CORE) as usize, t);
                self.stuck = 0;
                continue;
            }
            let a = what as usize;
            if self.cpus[a].next != Some(t) {
                continue; // superseded by an earlier round
            }
            self.cpus[a].next = None;
            self.round(a, t)?;
        }
        if let Some(c) = self.cpus.iter().find(|c| !c.finished) {
            return Err(SimError::Check(format!(
                "the model ran out of events with AICPU {} unfinished",
                c.sched.index()
            )));
        }
        Ok(())
    }

    /// Core `c`'s finish becomes visible to its AICPU at `t`.
    fn finish_visible(&mut self, c: usize, t: u64) {
        let core = &mut self.cores[c];
        core.running = false;
        core.last_end = core.end;
        core.avail = t;
        core.noticed = None;
        core.time.busy_ns += core.end - core.start;
        core.time.tasks += 1;
        let (pool, start, end) = (core.time.pool, core.start, core.end);
        let (task, owner, kernel) = (core.task, core.owner, core.kernel);
        self.running -= 1;
        self.timeline.add(pool as usize, start, end);
        if self.check {
            let r = &mut self.trace[task as usize];
            r.1 = self.seq;
            self.seq += 1;
        }
        if self.tracing {
            self.events.push(Event {
                kind: EventKind::Run,
                aicpu: owner,
                core: c as u32,
                task,
                kernel: kernel as u16,
                start_ns: start,
                end_ns: end,
                batch: 0,
                stream: 0,
                workspace: (0, 0),
            });
        }
        self.sh.cores[c].finish();
        let a = self.cores[c].issuer;
        self.wake(a, t);
    }

    /// One round of AICPU `a` at `t`.
    fn round(&mut self, a: usize, t: u64) -> Result<(), SimError> {
        let costs = self.machine.aicpu;
        let (sh, l) = (self.sh, self.l);
        let cpu = &mut self.cpus[a];
        // The time since its last round, by what held it up.
        let gap = t - cpu.free_at;
        let tm = &mut cpu.time;
        *match cpu.blocked {
            Blocked::Not => &mut tm.idle_ns,
            Blocked::Window => &mut tm.window_ns,
            Blocked::Watermarks => &mut tm.watermarks_ns,
            Blocked::Predecessors => &mut tm.predecessors_ns,
            Blocked::Readback => &mut tm.readback_ns,
            Blocked::Done => &mut tm.done_ns,
        } += gap;
        // The cores whose finish it sees now: free again from this round on.
        let cores = &mut self.cores;
        cpu.cores.retain(|&c| {
            let core = &mut cores[c as usize];
            let seen = !core.running && core.avail <= t;
            if seen {
                core.noticed = Some(t);
            }
            !seen
        });
        let before = Work::of(&cpu.sched, sh);
        let mut env = ModelEnv {
            me: a as u32,
            clock: t + costs.round_ns,
            costs: &costs,
            durations: self.costs.per_task().then_some(Durations {
                costs: self.costs,
                program: self.program,
                into: &mut self.durations,
                error: None,
            }),
            rings: Vec::new(),
            wakes: Vec::new(),
            read: &mut cpu.read,
            events: &mut self.events,
            tracing: self.tracing,
        };
        let progress = cpu.sched.step(sh, &l.cfg, &mut env)?;
        if let Some(e) = env.durations.and_then(|d| d.error) {
            return Err(e.into());
        }
        let (clock, rings, wakes) = (env.clock, env.rings, env.wakes);
        let end = clock + Work::of(&cpu.sched, sh).cost_since(&before, &costs);
        cpu.time.rounds += 1;
        cpu.time.busy_ns += end - t;
        cpu.free_at = end;
        cpu.blocked = cpu.sched.blocked();
        self.timeline.add_aicpu(t, end);
        if self.tracing {
            self.events.push(Event {
                kind: EventKind::Round,
                aicpu: a as u32,
                core: u32::MAX,
                task: 0,
                kernel: 0,
                start_ns: t,
                end_ns: end,
                batch: 0,
                stream: 0,
                workspace: (0, 0),
            });
        }
        for (core, at) in rings {
            self.start(core, at, t, a as u32)?;
        }
        for (b, at) in wakes {
            self.wake(b, at);
        }
        let cpu = &mut self.cpus[a];
        if cpu.sched.finished() {
            cpu.finished = true;
            self.makespan = self.makespan.max(end);
        } else if progress {
            self.stuck = 0;
            self.wake(a as u32, end);
        } else {
            let cpu = &self.cpus[a];
            if cpu.sched.has_work(sh, &l.cfg) {
                self.stuck += u64::from(self.running == 0);
                if self.stuck > STUCK_ROUNDS {
                    return Err(SimError::Check(format!(
                        "the model made no progress in {STUCK_ROUNDS} rounds with no core running (AICPU {a})"
                    )));
                }
                self.wake(a as u32, end + self.machine.idle_poll_ns);
            } else if let Some(due) = cpu.sched.issue_at() {
                self.wake(a as u32, due.max(end));
            }
        }
        // An idle AICPU that may take others' ready tasks looks at their queues as it polls.
        if l.cfg.work_steal {
            for b in 0..self.cpus.len() {
                let c = &self.cpus[b];
                if b != a && c.next.is_none() && !c.finished && c.sched.has_work(sh, &l.cfg) {
                    self.wake(b as u32, end + self.machine.idle_poll_ns);
                }
            }
        }
        Ok(())
    }

    /// Core `c` was handed a task at `at` by AICPU `issuer`, in a round that started at
    /// `round`.
    fn start(&mut self, c: u32, at: u64, round: u64, issuer: u32) -> Result<(), SimError> {
        let hs = &self.sh.cores[c as usize];
        let word = hs
            .take()
            .ok_or_else(|| SimError::Check(format!("core {c} was rung without a task")))?;
        let (owner, slot) = ((word >> 32) as u32, word as u32);
        let s = &self.sh.slots[(owner * self.sh.cap + slot) as usize];
        let task = s.task.load(std::sync::atomic::Ordering::Acquire);
        let kernel = s.kernel.load(std::sync::atomic::Ordering::Relaxed);
        let handshake = self.machine.handshake_ns;
        let start = at + handshake;
        let duration = match self.durations.remove(&task) {
            Some(ns) => ns,
            None => self.costs.task_ns(kernel),
        };
        let end = start + duration;
        let core = &mut self.cores[c as usize];
        // Its idle time since its last task, by cause (spec/runtime.md §9.3): its finish and
        // this task travelling, its AICPU busy elsewhere, and no task for it.
        let noticed = core.noticed.unwrap_or(round);
        let pt = &mut self.pools[core.time.pool as usize];
        pt.handshake_ns += (core.avail - core.last_end) + handshake;
        pt.aicpu_ns += (noticed - core.avail) + (at - round);
        pt.no_task_ns += round - noticed;
        core.running = true;
        core.task = task;
        core.owner = owner;
        core.issuer = issuer;
        core.kernel = kernel;
        core.start = start;
        core.end = end;
        self.running += 1;
        self.cpus[issuer as usize].cores.push(c);
        let core = &self.cores[c as usize];
        if self.check {
            let pool = if core.time.pool == 0 {
                Pool::Cube
            } else {
                Pool::Vector
            };
            if self.trace.len() <= task as usize {
                self.trace
                    .resize(task as usize + 1, (0, 0, Pool::Vector, u32::MAX));
            }
            if self.trace[task as usize].0 != 0 {
                return Err(SimError::Check(format!("task {task} ran twice")));
            }
            self.trace[task as usize] = (self.seq, 0, pool, owner);
            self.seq += 1;
        }
        self.push(end + self.machine.notice_ns, CORE | c);
        Ok(())
    }
}

impl Model<'_, '_, '_, '_, '_> {
    /// The report of a run that ended, and its trace for the check.
    fn finish(self) -> Result<(ModelReport, Trace), SimError> {
        let makespan = self.makespan;
        let mut k = Counts::default();
        let mut per_aicpu = Vec::new();
        let mut reads = Vec::new();
        let mut aicpus = Vec::new();
        for c in &self.cpus {
            if self.check {
                launch::check_local_map(&c.sched)?;
            }
            k += c.sched.counts();
            per_aicpu.push(c.sched.counts().tasks);
            reads.push(c.read.clone());
            let mut t = c.time;
            // After its last round, until the launch ended.
            t.done_ns += makespan - c.free_at;
            aicpus.push(t);
        }
        let mut run = Report {
            threads: 1,
            events: self.events,
            ..Report::default()
        };
        run.count(k, per_aicpu, 0);
        run.read_back = crate::sim::same_reads(reads)?;
        let mut pools = self.pools;
        let cores: Vec<CoreTime> = self.cores.iter().map(|c| c.time).collect();
        for c in &self.cores {
            let p = &mut pools[c.time.pool as usize];
            p.cores += 1;
            p.tasks += c.time.tasks;
            p.busy_ns += c.time.busy_ns;
            // After its last task, until the launch ended.
            p.no_task_ns += makespan - c.last_end;
        }
        let rep = ModelReport {
            run,
            machine: *self.machine,
            makespan_ns: makespan,
            critical_path_ns: 0,
            work_bound_ns: 0,
            pools,
            cores,
            aicpus,
            timeline: self.timeline.into_timeline(),
        };
        Ok((rep, self.trace))
    }
}

/// What a round may do to the model (`vm::sched::Env`): its issues and completions advance
/// its clock as they happen.
struct ModelEnv<'e, 'a, 'p> {
    me: u32,
    /// The round's virtual time so far.
    clock: u64,
    costs: &'e super::AicpuCosts,
    /// With declared costs: where each recorded task's duration goes.
    durations: Option<Durations<'e, 'a, 'p>>,
    /// Cores handed a task, and when.
    rings: Vec<(u32, u64)>,
    /// AICPUs woken, and when.
    wakes: Vec<(u32, u64)>,
    read: &'e mut Vec<Vec<u32>>,
    events: &'e mut Vec<Event>,
    tracing: bool,
}

/// Declared costs evaluated as tasks are recorded (a task's parameters and regions are at hand
/// then), kept until the task starts.
struct Durations<'e, 'a, 'p> {
    costs: &'e KernelCosts,
    program: (Verified<'a>, RuntimeParams<'p>, &'e [Binding]),
    into: &'e mut std::collections::HashMap<u64, u64>,
    /// The first cost that could not be taken.
    error: Option<super::CostError>,
}

impl Env for ModelEnv<'_, '_, '_> {
    fn wake(&mut self, aicpu: u32) {
        self.wakes.push((aicpu, self.clock));
    }
    fn ring(&mut self, core: u32) {
        self.rings.push((core, self.clock));
    }
    fn now_ns(&mut self) -> u64 {
        self.clock
    }
    fn issued(&mut self, i: &Issued) {
        self.clock += self.costs.dispatch_ns;
        if self.tracing {
            self.events.push(Event::issue(i, self.clock));
        }
    }
    fn completed(&mut self) {
        self.clock += self.costs.completion_ns;
    }
    fn recorded(&mut self, _aicpu: u32, t: &Task) {
        if let Some(d) = self
            .durations
            .as_mut()
            .filter(|d| d.costs.declared(t.kernel))
        {
            let (v, p, shapes) = &d.program;
            match d
                .costs
                .of_task(v, p, shapes, t.id, t.kernel, t.params(), t.ios())
            {
                Ok(ns) => {
                    d.into.insert(t.id, ns);
                }
                Err(e) => {
                    d.error.get_or_insert(e);
                }
            }
        }
    }
    fn read_back(&mut self, aicpu: u32, _: u16, _: &Binding, into: &mut [u32]) -> bool {
        // No memory: the runtime array keeps the launch's values, which are what was read.
        debug_assert_eq!(aicpu, self.me);
        self.read.push(into.to_vec());
        false
    }
}

/// The work counters a round advances (spec/runtime.md §9.2).
#[derive(Clone, Copy, Debug, Default)]
struct Work {
    instructions: u64,
    tasks: u64,
    probes: u64,
    visits: u64,
    inserted: u64,
    edges: u64,
    cross: u64,
}

impl Work {
    fn of(s: &Scheduler<'_, '_, '_>, sh: &Sched<'_>) -> Work {
        let stats = s.interpreter().stats();
        let local = s.local_map();
        let (gp, gv, gi) = sh.map.with_map(|m| (m.probes(), m.visits(), m.inserted()));
        let counts = s.counts();
        Work {
            instructions: stats.instructions,
            tasks: stats.emitted,
            probes: local.probes() + gp,
            visits: local.visits() + gv,
            inserted: local.inserted() + gi,
            edges: counts.edges,
            cross: counts.cross,
        }
    }

    /// The modelled cost of the work done since `b`. (The global map's counters are the
    /// launch's, but one thread steps the model: between two readings only this round used it.)
    fn cost_since(&self, b: &Work, c: &super::AicpuCosts) -> u64 {
        (self.instructions - b.instructions) * c.instruction_ns
            + (self.tasks - b.tasks) * c.task_ns
            + (self.probes - b.probes) * c.probe_ns
            + (self.visits - b.visits) * c.visit_ns
            + (self.inserted - b.inserted) * c.insert_ns
            + (self.edges - b.edges) * c.edge_ns
            + (self.cross - b.cross) * c.cross_edge_ns
    }
}

/// Busy time in fixed-width buckets from 0 whose width doubles (neighbours merged) whenever a
/// span reaches past the last: a timeline of at most [`Buckets::MAX`] buckets for any makespan,
/// the same for the same run.
struct Buckets {
    width: u64,
    series: [Vec<u64>; 3],
}

impl Buckets {
    const MAX: usize = 1024;

    fn new() -> Buckets {
        Buckets {
            width: 64,
            series: [vec![0; Self::MAX], vec![0; Self::MAX], vec![0; Self::MAX]],
        }
    }

    fn add(&mut self, series: usize, start: u64, end: u64) {
        while end > self.width * Self::MAX as u64 {
            for s in &mut self.series {
                for i in 0..Self::MAX / 2 {
                    s[i] = s[2 * i] + s[2 * i + 1];
                }
                s[Self::MAX / 2..].fill(0);
            }
            self.width *= 2;
        }
        let mut t = start;
        while t < end {
            let i = (t / self.width) as usize;
            let upto = ((i as u64 + 1) * self.width).min(end);
            self.series[series][i] += upto - t;
            t = upto;
        }
    }

    fn add_aicpu(&mut self, start: u64, end: u64) {
        self.add(2, start, end);
    }

    fn into_timeline(self) -> Timeline {
        // Up to the last bucket anything reached.
        let used = self
            .series
            .iter()
            .map(|s| s.iter().rposition(|&x| x > 0).map_or(0, |i| i + 1))
            .max()
            .unwrap_or(0);
        let [cube, vector, aicpu] = self.series;
        Timeline {
            width_ns: self.width,
            busy: [cube[..used].to_vec(), vector[..used].to_vec()],
            aicpu: aicpu[..used].to_vec(),
        }
    }
}

/// The launch's lower bounds, ns: the critical path (the longest chain of dependent tasks by
/// kernel durations, over the reference graph with the values the run read back) and the work
/// bound (the busiest pool's kernel time over its cores, or a kernel's with a core limit over
/// the cores it may run on at once, whichever is more).
fn bounds(
    v: &Verified<'_>,
    p: &RuntimeParams<'_>,
    l: &Layout,
    read: &[Vec<u32>],
    costs: &KernelCosts,
    shapes: &[Binding],
) -> Result<(u64, u64), SimError> {
    let mut b = Bounds {
        costs,
        program: (*v, *p, shapes),
        error: None,
        deps: DepBuilder::new(DepMode::Overlap),
        finish: Vec::new(),
        work: [0; 2],
        kernel_work: vec![0; v.kernels().len()],
        critical: 0,
    };
    if v.readbacks().is_empty() {
        // One interpreter walks every task (a single AICPU owns them all), without the
        // reference expander's copies.
        let mut it = ptovm_vm::Interpreter::new(*v, *p, 0, 1)?;
        it.run_to_end(&mut b)
            .map_err(|e| SimError::Launch(LaunchError::Run(e)))?;
    } else {
        let mut on_readback = |rb: &ptovm_vm::readback::Readback, _: &[crate::RefTask]| {
            read.get(rb.index as usize).cloned()
        };
        let tasks = crate::reference::expand_with(v, p, l.n, u64::MAX, &mut on_readback)
            .map_err(|e: RunError| SimError::Launch(LaunchError::Run(e)))?;
        for t in &tasks {
            b.add(t.id, t.kernel, t.pool, &t.params, &t.io);
        }
        if let Some(e) = b.error.take() {
            return Err(e.into());
        }
    }
    let per_core = |w: u64, cores: u32| w.div_ceil(u64::from(cores.max(1)));
    let pool_cores = [l.cube, l.cores as u32 - l.cube];
    let limited = v.kernels().iter().zip(&b.kernel_work).map(|(k, &w)| {
        let pool = usize::from(Pool::from_u8(k.pool) != Some(Pool::Cube));
        match u32::from(k.core_limit.get()) {
            0 => 0,
            limit => per_core(w, limit.min(pool_cores[pool])),
        }
    });
    let pools = per_core(b.work[0], pool_cores[0]).max(per_core(b.work[1], pool_cores[1]));
    Ok((b.critical, limited.fold(pools, u64::max)))
}

/// The bounds' walk over the tasks in program order.
struct Bounds<'c, 'a, 'p> {
    costs: &'c KernelCosts,
    program: (Verified<'a>, RuntimeParams<'p>, &'c [Binding]),
    /// The first cost that could not be taken.
    error: Option<super::CostError>,
    deps: DepBuilder,
    /// `finish[t]`: the earliest task `t` can end, given its predecessors.
    finish: Vec<u64>,
    /// Kernel time of each pool, and of each kernel.
    work: [u64; 2],
    kernel_work: Vec<u64>,
    critical: u64,
}

impl Bounds<'_, '_, '_> {
    fn add(&mut self, id: u64, kernel: u16, pool: Pool, params: &[i64], io: &[ptovm_vm::Io]) {
        let mut ready = 0;
        let finish = &self.finish;
        self.deps
            .visit(id, io, |from, _| ready = ready.max(finish[from as usize]));
        let (v, p, shapes) = &self.program;
        // A task whose cost fails counts 0 (and the walk's error is the first such).
        let d = self
            .costs
            .of_task(v, p, shapes, id, kernel, params, io)
            .unwrap_or_else(|e| {
                self.error.get_or_insert(e);
                0
            });
        self.finish.push(ready.saturating_add(d));
        self.critical = self.critical.max(ready.saturating_add(d));
        self.work[usize::from(pool != Pool::Cube)] =
            self.work[usize::from(pool != Pool::Cube)].saturating_add(d);
        if let Some(w) = self.kernel_work.get_mut(usize::from(kernel)) {
            *w = w.saturating_add(d);
        }
    }
}

impl ptovm_vm::Sink for Bounds<'_, '_, '_> {
    fn task(&mut self, t: &Task) -> bool {
        self.add(t.id, t.kernel, t.pool(), t.params(), t.ios());
        true
    }
}
