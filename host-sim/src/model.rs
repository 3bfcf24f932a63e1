//! A deterministic model of the runtime protocol (spec/runtime.md §4): `n` AICPUs, their windows,
//! ready queues and watermarks, a global TensorMap, and cube and vector cores, all stepped by one
//! thread in an order a seeded random generator chooses. It explores interleavings of the
//! protocol's logical steps (staging, placing, waiting for watermarks, recording, registering,
//! dispatching, completing) reproducibly, and checks every run against the reference expander.
//! The threaded simulator implements the same steps with real concurrency; this model is the
//! executable form of the design it follows.

use std::collections::VecDeque;

use ptovm_vm::{Interpreter, Io, LaunchError, Pool, RuntimeParams, Sink, Status, Task, Verified};

use crate::deps::check_run;
use crate::reference::{expand as reference_expand, RefTask};

/// What a full window does (spec/runtime.md §4.1 step 2): the bytecode's own enum.
pub use ptovm_vm::WindowMode;

/// Model settings.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    /// AICPUs.
    pub aicpus: u32,
    /// Cube cores.
    pub cube: u32,
    /// Vector cores.
    pub vector: u32,
    /// Window slots per AICPU.
    pub window: usize,
    /// Full-window behaviour.
    pub mode: WindowMode,
    /// Seed of the interleaving.
    pub seed: u64,
    /// Skip the watermark wait (the naïve protocol, for showing that the check catches it).
    pub naive: bool,
}

/// Outcome of a model run.
#[derive(Clone, Debug, Default)]
pub struct ModelReport {
    /// Tasks run.
    pub tasks: u64,
    /// Dependency edges registered (predecessors found incomplete at lookup).
    pub edges: u64,
    /// Of those, between tasks of different AICPUs.
    pub cross_edges: u64,
    /// Times a task could not be placed because the window was full.
    pub window_stalls: u64,
    /// Overflows counted in benchmark mode.
    pub overflows: u64,
    /// Model steps taken.
    pub steps: u64,
}

/// Why a model run failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The program or parameters could not run.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// A window overflowed in abort mode.
    #[error("AICPU {aicpu}'s task window ({window} slots) is full and the window mode is abort")]
    WindowAbort {
        /// The AICPU.
        aicpu: u32,
        /// Its window size.
        window: usize,
    },
    /// No step was possible before the end: a deadlock.
    #[error("deadlock after {steps} steps: {detail}")]
    Deadlock {
        /// Steps taken.
        steps: u64,
        /// State summary.
        detail: String,
    },
    /// The run broke a rule the check verifies.
    #[error("check failed: {0}")]
    Check(String),
}

struct Stage {
    task: Option<RefTask>,
}

impl Sink for Stage {
    fn task(&mut self, t: &Task) -> bool {
        self.task = Some(RefTask::from_task(t, 0));
        false
    }
}

#[derive(Clone, Debug)]
struct Slot {
    task: RefTask,
    fanin: u32,
    /// Successors registered on this task: (aicpu, slot).
    waiters: Vec<(u32, usize)>,
    placed: bool,
}

struct Aicpu<'a, 'p> {
    interp: Interpreter<'a, 'p>,
    staged: Option<RefTask>,
    done: bool,
    published: u64,
    slots: Vec<Option<Slot>>,
    /// Slot of the placed task whose dependencies are not built yet (waiting for watermarks).
    pending: Option<usize>,
    ready: [VecDeque<usize>; 2],
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    io: Io,
    id: u64,
    aicpu: u32,
    slot: usize,
}

/// A task on a core: (aicpu, slot, id).
type Running = (u32, usize, u64);

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        (ptovm_vm::interp::mix64(self.0) % n.max(1) as u64) as usize
    }
}

/// Runs the model and checks the run: every reference task ran exactly once, on its pool, after
/// all its overlap-mode predecessors ended.
pub fn run(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    cfg: ModelConfig,
) -> Result<ModelReport, ModelError> {
    let n = cfg.aicpus;
    let mut cpus: Vec<Aicpu> = Vec::new();
    for i in 0..n {
        cpus.push(Aicpu {
            interp: Interpreter::new(v, p, i, n)?,
            staged: None,
            done: false,
            published: 0,
            slots: vec![None; cfg.window.max(1)],
            pending: None,
            ready: [VecDeque::new(), VecDeque::new()],
        });
    }
    let mut map: Vec<Entry> = Vec::new();
    // Cores: (pool, running task, remaining steps).
    let mut cores: Vec<(Pool, Option<Running>, u32)> = Vec::new();
    for _ in 0..cfg.cube.max(1) {
        cores.push((Pool::Cube, None, 0));
    }
    for _ in 0..cfg.vector.max(1) {
        cores.push((Pool::Vector, None, 0));
    }
    let mut rng = Rng(cfg.seed);
    let mut rep = ModelReport::default();
    // Per task id: (start step, end step, pool it ran on).
    let mut ran: Vec<(u64, u64, Pool, u32)> = Vec::new();
    let mut clock = 0u64;
    let pool_index = |pl: Pool| if pl == Pool::Cube { 0 } else { 1 };
    loop {
        clock += 1;
        rep.steps += 1;
        // Collect the possible actions, then take a random one.
        #[derive(Clone, Copy)]
        enum Act {
            Stage(u32),
            Place(u32),
            Record(u32),
            Dispatch(u32, usize),
            Complete(usize),
        }
        let mut acts: Vec<Act> = Vec::new();
        for (i, c) in cpus.iter().enumerate() {
            let i = i as u32;
            // The next task is staged (and the watermark moved past this one) only once the
            // placed task is recorded (§4.1 step 7).
            if c.staged.is_none() && c.pending.is_none() && !c.done {
                acts.push(Act::Stage(i));
            }
            if c.staged.is_some() && c.pending.is_none() {
                if cfg.mode != WindowMode::Stall || c.slots.iter().any(|s| s.is_none()) {
                    acts.push(Act::Place(i));
                } else {
                    rep.window_stalls += 1;
                }
            }
            if let Some(_s) = c.pending {
                let t = c.slots[_s].as_ref().map_or(0, |s| s.task.id);
                let ok = cfg.naive
                    || cpus
                        .iter()
                        .enumerate()
                        .all(|(j, o)| j as u32 == i || o.published >= t);
                if ok {
                    acts.push(Act::Record(i));
                }
            }
            for pl in 0..2 {
                if !c.ready[pl].is_empty() {
                    if let Some(k) = cores
                        .iter()
                        .position(|(cp, run, _)| run.is_none() && pool_index(*cp) == pl)
                    {
                        acts.push(Act::Dispatch(i, k));
                    }
                }
            }
        }
        for (k, (_, run, _)) in cores.iter().enumerate() {
            if run.is_some() {
                acts.push(Act::Complete(k));
            }
        }
        if acts.is_empty() {
            let finished = cpus
                .iter()
                .all(|c| c.done && c.staged.is_none() && c.slots.iter().all(|s| s.is_none()));
            if finished {
                break;
            }
            let detail: Vec<String> = cpus
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    format!(
                        "AICPU {i}: published {}, staged {:?}, pending {:?}, {} in window, ready {}+{}",
                        c.published,
                        c.staged.as_ref().map(|t| t.id),
                        c.pending,
                        c.slots.iter().filter(|s| s.is_some()).count(),
                        c.ready[0].len(),
                        c.ready[1].len()
                    )
                })
                .collect();
            return Err(ModelError::Deadlock {
                steps: rep.steps,
                detail: detail.join("; "),
            });
        }
        match acts[rng.below(acts.len())] {
            Act::Stage(i) => {
                let c = &mut cpus[i as usize];
                let mut st = Stage { task: None };
                let status = c
                    .interp
                    .run(&mut st, 1)
                    .map_err(|e| ModelError::Launch(LaunchError::Run(e)))?;
                match st.task {
                    Some(mut t) => {
                        t.owner = i;
                        c.published = t.id;
                        c.staged = Some(t);
                    }
                    None => {
                        debug_assert_eq!(status, Status::Done);
                        c.done = true;
                        c.published = u64::MAX;
                    }
                }
            }
            Act::Place(i) => {
                let w = cfg.window.max(1);
                let c = &mut cpus[i as usize];
                let free = c.slots.iter().position(|s| s.is_none());
                let slot = match (free, cfg.mode) {
                    (Some(s), _) => s,
                    (None, WindowMode::Abort) => {
                        return Err(ModelError::WindowAbort {
                            aicpu: i,
                            window: w,
                        })
                    }
                    (None, WindowMode::Benchmark) => {
                        rep.overflows += 1;
                        c.slots.push(None);
                        c.slots.len() - 1
                    }
                    (None, WindowMode::Stall) => continue,
                };
                let t = c.staged.take().expect("staged");
                c.slots[slot] = Some(Slot {
                    task: t,
                    fanin: 1,
                    waiters: vec![],
                    placed: true,
                });
                c.pending = Some(slot);
            }
            Act::Record(i) => {
                let slot = cpus[i as usize].pending.take().expect("pending");
                let t = cpus[i as usize].slots[slot]
                    .as_ref()
                    .expect("placed")
                    .task
                    .clone();
                // Look up and record (§4.1 step 5), region by region.
                let mut preds: Vec<(u32, usize, u64)> = Vec::new();
                for io in &t.io {
                    // Drop entries of completed tasks (their slot no longer holds them).
                    map.retain(|e| {
                        cpus[e.aicpu as usize].slots[e.slot]
                            .as_ref()
                            .is_some_and(|s| s.task.id == e.id)
                    });
                    for e in &map {
                        if e.id >= t.id || !e.io.overlaps(io) {
                            continue;
                        }
                        let conflict = e.io.writes() || io.writes();
                        if conflict && !preds.iter().any(|p| p.2 == e.id) {
                            preds.push((e.aicpu, e.slot, e.id));
                        }
                    }
                    if io.writes() {
                        map.retain(|e| !io.covers(&e.io));
                    }
                    map.push(Entry {
                        io: *io,
                        id: t.id,
                        aicpu: i,
                        slot,
                    });
                }
                // Register (step 6) on predecessors still incomplete.
                let mut fanin = 0;
                for (pa, ps, pid) in preds {
                    if let Some(pslot) = cpus[pa as usize].slots[ps].as_mut() {
                        if pslot.task.id == pid && pslot.placed {
                            pslot.waiters.push((i, slot));
                            fanin += 1;
                            rep.edges += 1;
                            if pa != i {
                                rep.cross_edges += 1;
                            }
                        }
                    }
                }
                // Release the guard (step 7).
                let c = &mut cpus[i as usize];
                let s = c.slots[slot].as_mut().expect("placed");
                s.fanin = s.fanin - 1 + fanin;
                if s.fanin == 0 {
                    let pl = pool_index(s.task.pool);
                    c.ready[pl].push_back(slot);
                }
            }
            Act::Dispatch(i, k) => {
                let pl = pool_index(cores[k].0);
                let slot = cpus[i as usize].ready[pl].pop_front().expect("ready");
                let id = cpus[i as usize].slots[slot]
                    .as_ref()
                    .expect("ready task")
                    .task
                    .id;
                cores[k].1 = Some((i, slot, id));
                cores[k].2 = 1 + rng.below(3) as u32;
                if ran.len() <= id as usize {
                    ran.resize(id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
                }
                if ran[id as usize].0 != 0 {
                    return Err(ModelError::Check(format!("task {id} started twice")));
                }
                ran[id as usize] = (clock, 0, cores[k].0, i);
            }
            Act::Complete(k) => {
                if cores[k].2 > 1 {
                    cores[k].2 -= 1;
                    continue;
                }
                let (i, slot, id) = cores[k].1.take().expect("running");
                ran[id as usize].1 = clock;
                rep.tasks += 1;
                let done = cpus[i as usize].slots[slot].take().expect("running task");
                for (wa, ws) in done.waiters {
                    let c = &mut cpus[wa as usize];
                    let s = c.slots[ws].as_mut().expect("waiting successor");
                    s.fanin -= 1;
                    if s.fanin == 0 {
                        let pl = pool_index(s.task.pool);
                        c.ready[pl].push_back(ws);
                    }
                }
            }
        }
    }
    // The check.
    let reference = reference_expand(&v, &p, n, u64::MAX)
        .map_err(|e| ModelError::Launch(LaunchError::Run(e)))?;
    if ran.len() != reference.len() || rep.tasks != reference.len() as u64 {
        return Err(ModelError::Check(format!(
            "{} tasks ran, the reference has {}",
            rep.tasks,
            reference.len()
        )));
    }
    check_run(&reference, &ran).map_err(ModelError::Check)?;
    Ok(rep)
}
