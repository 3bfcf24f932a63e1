//! The threaded run: the AICPU loops are non-blocking steps of `vm::sched`, multiplexed over a
//! few OS threads (`Options::threads`) that also run the AICores' tasks. Concurrency is real
//! (several threads), but a waiting AICPU costs no context switch, and an idle thread parks
//! instead of spinning. The thread that hands a core a task runs it once the round's dispatch
//! is over (`Env::run_cores`), and anything rung later in the round after the round.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use ptovm_vm::desc::{Binding, TensorArg};
use ptovm_vm::handshake;
use ptovm_vm::sched::{Config, Counts, Env, Issued};
use ptovm_vm::{Pool, RuntimeParams, Task, Verified};

use super::launch::{self, Buffers, Layout, Region, Sched, Scheduler};
use super::{check, Event, EventKind, Options, Report, SimError, Trace};
use crate::compute::Memory;
use crate::kernel::{Call, Kernel, Registry};

/// What the driver threads share besides the AICPUs' region.
struct Drivers<'r> {
    n: u32,
    threads: usize,
    /// Driver threads and whether each is parked (or about to).
    handles: Vec<OnceLock<thread::Thread>>,
    sleeping: Vec<CachePadded<AtomicBool>>,
    finished: AtomicU32,
    failed: AtomicBool,
    seq: AtomicU64,
    check: bool,
    trace: Mutex<Trace>,
    tracing: bool,
    /// Whether cores time their tasks' runs (`Run` events): tracing, or measuring the
    /// dependency latency.
    timing_runs: bool,
    start: Instant,
    progress: Option<&'r AtomicU64>,
    /// Each kernel index's name and registered kernel (`kernel::Registry::registered`): none
    /// for the default one, which does nothing, so its tasks' runs skip the call.
    kernels: Vec<(&'r str, Option<&'r dyn Kernel>)>,
    /// The tensors' memory of a computing run.
    memory: Option<&'r Memory>,
    /// Nanoseconds spent in kernels (computing runs only).
    kernel_ns: AtomicU64,
    /// With `check`: each AICPU's arena's scratches in use, `(first byte, end, task)`, from
    /// issue to reclaim, and the first overlap seen — kept apart from the scheduler's own
    /// bookkeeping, so that two running tasks given shared bytes fail the run.
    workspace_live: Vec<Mutex<Vec<(u32, u32, u64)>>>,
    workspace_overlap: Mutex<Option<String>>,
    /// Each AICPU's values read back at its `READBACK`s, in order.
    read_back: Vec<Mutex<Vec<Vec<u32>>>>,
}

impl Drivers<'_> {
    /// Unparks driver `d` if it sleeps. Callers publish what it waits for first; the SeqCst
    /// fence pairs with the one in the driver's park (flag, fence, re-check, park), so the wake-up
    /// is not lost — and parking has a timeout besides.
    fn wake_driver(&self, d: usize) {
        fence(Ordering::SeqCst);
        if self.sleeping[d].load(Ordering::Relaxed) {
            if let Some(t) = self.handles[d].get() {
                t.unpark();
            }
        }
    }
    fn wake_all(&self) {
        for d in 0..self.threads {
            self.wake_driver(d);
        }
    }
    fn driver_of(&self, aicpu: u32) -> usize {
        aicpu as usize % self.threads
    }
    /// The simulator's clock: nanoseconds since the run began (traces and `rate_limit`).
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

/// What a scheduler step may do to the simulator (`vm::sched::Env`).
struct StepEnv<'x, 'r, 's> {
    dr: &'x Drivers<'r>,
    sh: &'x Sched<'s>,
    driver: usize,
    /// The AICPU being stepped.
    aicpu: u32,
    jitter: &'x mut Jitter,
    events: &'x mut Vec<Event>,
    staged_at: &'x mut u64,
    /// The cores this driver rang and has yet to run, with the AICPU that rang each (the one
    /// that sees it finish).
    doorbell: &'x mut Vec<(u32, u32)>,
    /// The driver's own trace of the cores' runs.
    runs: &'x mut Vec<Event>,
    /// What went wrong running a core inside a round (`run_cores`): the driver stops.
    failed: &'x mut Option<SimError>,
}

impl Env for StepEnv<'_, '_, '_> {
    fn wake(&mut self, aicpu: u32) {
        // A driver sees its own AICPUs on its next round: only another driver is woken.
        let d = self.dr.driver_of(aicpu);
        if d != self.driver {
            self.dr.wake_driver(d);
        }
    }
    fn ring(&mut self, core: u32) {
        // This driver runs the cores it rang: after the round's dispatch (`run_cores`), or
        // else after the round.
        self.doorbell.push((core, self.aicpu));
    }
    fn now_ns(&mut self) -> u64 {
        self.dr.now_ns()
    }
    fn run_cores(&mut self) -> bool {
        // The cores rung so far run now, before the round generates: a core starts when it
        // is rung, and the round takes its completion (spec/runtime.md §4.3).
        if self.doorbell.is_empty() || self.failed.is_some() {
            return false;
        }
        for rung in self.doorbell.drain(..) {
            if let Err(e) = execute(self.dr, self.sh, rung, self.runs, self.driver) {
                *self.failed = Some(e);
                return false;
            }
        }
        true
    }
    fn watches_issues(&self) -> bool {
        self.dr.check || self.dr.tracing
    }
    fn issued(&mut self, i: &Issued) {
        let (offset, bytes) = i.workspace;
        if self.dr.check && bytes > 0 {
            let (start, end) = (offset, offset + bytes);
            let mut live = self.dr.workspace_live[i.aicpu as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(&(s, e, other)) = live.iter().find(|&&(s, e, _)| s < end && start < e) {
                let mut first = self
                    .dr
                    .workspace_overlap
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                first.get_or_insert(format!(
                    "task {} was given workspace bytes {start}..{end} while task {other} runs in {s}..{e}",
                    i.task
                ));
            }
            live.push((start, end, i.task));
        }
        if self.dr.tracing {
            let at = i.at_ns.unwrap_or_else(|| self.dr.now_ns());
            self.events.push(Event::issue(i, at));
        }
    }
    fn jitter(&mut self) {
        self.jitter.maybe_yield();
    }
    fn staged(&mut self, _aicpu: u32, _id: u64) {
        if self.dr.tracing {
            *self.staged_at = self.dr.start.elapsed().as_nanos() as u64;
        }
    }
    fn recorded(&mut self, aicpu: u32, t: &Task) {
        if self.dr.tracing {
            self.events.push(Event {
                kind: EventKind::Record,
                aicpu,
                core: u32::MAX,
                task: t.id,
                kernel: t.kernel,
                start_ns: *self.staged_at,
                end_ns: self.dr.now_ns(),
                batch: 0,
                stream: 0,
                workspace: (0, 0),
            });
        }
    }
    fn read_back(&mut self, aicpu: u32, tensor: u16, _: &Binding, into: &mut [u32]) -> bool {
        // A computing run's tensors have memory: the values the tasks wrote. Without, the
        // runtime array keeps the launch's values.
        let read = self
            .dr
            .memory
            .and_then(|m| m.tensors().get(tensor as usize))
            .is_some_and(|t| t.read_words(into));
        if let Some(m) = self.dr.read_back.get(aicpu as usize) {
            m.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(into.to_vec());
        }
        read
    }
    fn reclaimed(&mut self, _core: u32, task: u64) {
        if self.dr.check {
            let mut live = self.dr.workspace_live[self.aicpu as usize]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            live.retain(|&(_, _, t)| t != task);
        }
    }
    fn completed(&mut self) {
        if let Some(p) = self.dr.progress {
            p.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Jitter(u64);
impl Jitter {
    fn maybe_yield(&mut self) {
        if self.0 != 0 {
            self.0 = self.0.wrapping_add(ptovm_vm::interp::GOLDEN_GAMMA);
            let r = ptovm_vm::interp::mix64(self.0);
            if r.is_multiple_of(4) {
                thread::yield_now();
            }
            if r.is_multiple_of(61) {
                thread::sleep(Duration::from_micros(r % 200));
            }
        }
    }
}

/// One simulated AICPU: the shared scheduler and what the simulator keeps beside it.
struct Cpu<'a, 'p, 'm> {
    sched: Scheduler<'a, 'p, 'm>,
    /// Counted in `Drivers::finished`.
    counted: bool,
    events: Vec<Event>,
    jitter: Jitter,
    /// When the staged task was emitted (ns since the start), for its `Record` trace span.
    staged_at: u64,
}

/// Core `core` runs the task in its handshake slot, handed it by AICPU `issuer`: records its
/// execution and says it is done.
fn execute(
    dr: &Drivers<'_>,
    sh: &Sched<'_>,
    (core, issuer): (u32, u32),
    events: &mut Vec<Event>,
    driver: usize,
) -> Result<(), SimError> {
    let hs = &sh.cores[core as usize];
    let word = hs
        .take()
        .ok_or_else(|| SimError::Check(format!("core {core} was rung without a task")))?;
    let (aicpu, slot) = ((word >> 32) as u32, word as u32);
    let task_slot = &sh.slots[(aicpu * sh.cap + slot) as usize];
    let id = task_slot.task.load(Ordering::Acquire);
    let start_ns = if dr.timing_runs {
        dr.start.elapsed().as_nanos() as u64
    } else {
        0
    };
    // Global sequence numbers order starts and ends for the check; without it they are not taken.
    let t0 = if dr.check {
        dr.seq.fetch_add(1, Ordering::SeqCst)
    } else {
        0
    };
    // The task's kernel, by the name its index has (the default one does nothing: the run is
    // recorded here).
    let kernel = task_slot.kernel.load(Ordering::Relaxed) as u16;
    let pool = if hs.core_type.load(Ordering::Relaxed) == handshake::CUBE {
        Pool::Cube
    } else {
        Pool::Vector
    };
    if let Some(&(name, Some(k))) = dr.kernels.get(kernel as usize) {
        // A computing run times its kernels (the simulator's overhead is the rest).
        let timer = dr.memory.map(|_| Instant::now());
        let result = k.run(&Call {
            task: id,
            kernel,
            name,
            pool,
            aicpu,
            core,
            slot: sh.desc(aicpu, slot),
            memory: dr.memory,
        });
        if let Some(t) = timer {
            dr.kernel_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        result.map_err(|e| SimError::Kernel {
            task: id,
            kernel: name.to_string(),
            message: e.0,
        })?;
    }
    let t1 = if dr.check {
        dr.seq.fetch_add(1, Ordering::SeqCst)
    } else {
        0
    };
    if dr.check {
        let mut tr = dr.trace.lock().unwrap_or_else(|e| e.into_inner());
        if tr.len() <= id as usize {
            tr.resize(id as usize + 1, (0, 0, Pool::Vector, u32::MAX));
        }
        if tr[id as usize].0 != 0 {
            dr.failed.store(true, Ordering::SeqCst);
        }
        tr[id as usize] = (t0, t1, pool, aicpu);
    }
    if dr.timing_runs {
        let end_ns = dr.start.elapsed().as_nanos() as u64;
        events.push(Event {
            kind: EventKind::Run,
            aicpu,
            core,
            task: id,
            kernel,
            start_ns,
            end_ns,
            batch: 0,
            stream: 0,
            workspace: (0, 0),
        });
    }
    hs.finish();
    let d = dr.driver_of(issuer);
    if d != driver {
        dr.wake_driver(d);
    }
    Ok(())
}

/// Runs the program on OS threads (see the module's documentation).
pub(super) fn launch(
    v: Verified<'_>,
    p: RuntimeParams<'_>,
    o: Options,
    progress: Option<&AtomicU64>,
    kernels: &Registry,
    tensors: &[TensorArg],
    memory: Option<&Memory>,
) -> Result<Report, SimError> {
    // No descriptor memory (0 words a slot) tells the scheduler not to write descriptors.
    let l = Layout::new(
        &v,
        &o,
        o.descriptors || !kernels.is_empty() || memory.is_some(),
    )?;
    let n = l.n;
    let threads = o.threads.clamp(1, n as usize);
    let region = Region::new(&v, &l, o.deps)?;
    let sh = region.shared(n, l.cap, l.workspace(&v, &o));
    let cfg = l.cfg;
    let mut buffers = Buffers::all(&v, &l)?;
    // Where each AICPU's values read back go (`READBACK`, spec/runtime.md §4.5).
    let mut rb = crate::readback_buffers(&v, &p, n);
    let scheds = launch::schedulers(v, p, &l, &sh, o.deps, &mut buffers, tensors, &mut rb)?;
    let cpus: Vec<Cpu> = scheds
        .into_iter()
        .map(|sched| Cpu {
            jitter: Jitter(o.jitter.map_or(0, |s| s ^ (sched.index() as u64 + 1))),
            sched,
            counted: false,
            events: Vec::new(),
            staged_at: 0,
        })
        .collect();
    let dr = Drivers {
        n,
        threads,
        handles: (0..threads).map(|_| OnceLock::new()).collect(),
        sleeping: (0..threads)
            .map(|_| CachePadded::new(AtomicBool::new(false)))
            .collect(),
        finished: AtomicU32::new(0),
        failed: AtomicBool::new(false),
        seq: AtomicU64::new(1),
        check: o.check,
        trace: Mutex::new(Vec::new()),
        tracing: o.trace,
        timing_runs: o.trace || o.latency,
        start: Instant::now(),
        progress,
        kernels: kernels.registered(&v),
        memory,
        kernel_ns: AtomicU64::new(0),
        workspace_live: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
        workspace_overlap: Mutex::new(None),
        read_back: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
    };
    // AICPU i runs on driver thread i mod threads (and on another one that helps: `drive`).
    let cpus: Vec<Mutex<Cpu>> = cpus.into_iter().map(Mutex::new).collect();
    let start = Instant::now();
    let results: Vec<DriverResult> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|d| {
                let (dr, sh, cfg, cpus) = (&dr, &sh, &cfg, &cpus);
                s.spawn(move || drive(dr, sh, cfg, d, cpus))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(SimError::Check("a simulator thread panicked".into())))
            })
            .collect()
    });
    let wall = start.elapsed();
    let mut rep = Report {
        wall,
        kernel_ns: dr.kernel_ns.load(Ordering::Relaxed),
        threads,
        ..Report::default()
    };
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(events) => rep.events.extend(events),
            Err(e) => errors.push(e),
        }
    }
    let mut k = Counts::default();
    let mut per_aicpu = vec![0; n as usize];
    for c in cpus {
        let c = c.into_inner().unwrap_or_else(|e| e.into_inner());
        rep.events.extend(c.events.iter().copied());
        per_aicpu[c.sched.index() as usize] = c.sched.counts().tasks;
        k += c.sched.counts();
        if o.check {
            if let Err(e) = launch::check_local_map(&c.sched) {
                errors.push(e);
            }
        }
    }
    rep.count(k, per_aicpu, sh.workspace.arena);
    // Report the cause, not the "stopped because another failed" of the other threads.
    if let Some(e) = errors
        .iter()
        .position(|e| !matches!(e, SimError::Check(m) if m.starts_with("stopped")))
    {
        return Err(errors.swap_remove(e));
    }
    if let Some(e) = errors.pop() {
        return Err(e);
    }
    // Every AICPU read the same values at each READBACK (they all read after the same barrier).
    let lists: Vec<Vec<Vec<u32>>> = dr
        .read_back
        .iter()
        .map(|m| std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner())))
        .collect();
    rep.read_back = super::same_reads(lists)?;
    if o.latency {
        rep.latency = Some(super::measure_latency(
            &v,
            &p,
            n,
            &rep.events,
            &rep.read_back,
        )?);
        if !o.trace {
            // The runs were timed for the latency only.
            rep.events = Vec::new();
        }
    }
    if o.check {
        if dr.failed.load(Ordering::SeqCst) {
            return Err(SimError::Check("a task ran twice".into()));
        }
        if let Some(m) = dr
            .workspace_overlap
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(SimError::Check(m));
        }
        // Every task retired, so every access left the map.
        region.check_map_empty()?;
        check(
            &v,
            &p,
            n,
            &dr.trace.lock().unwrap_or_else(|e| e.into_inner()),
            &rep.read_back,
        )?;
        rep.checked = true;
    }
    Ok(rep)
}

/// What a driver thread hands back: the core runs it traced.
type DriverResult = Result<Vec<Event>, SimError>;

/// A driver thread: steps its AICPUs (`i mod threads == d`) and runs the cores' tasks until
/// every AICPU has finished; once its own have, or after a round in which none of them moved,
/// it helps with the others' (whichever no other driver is stepping at the moment), so one
/// slow thread does not leave the other idle, spinning or parked, while there is work. (Without
/// the second case a driver whose AICPUs waited on the other driver's parked for up to half
/// of some runs.)
fn drive(
    dr: &Drivers<'_>,
    sh: &Sched<'_>,
    cfg: &Config,
    d: usize,
    cpus: &[Mutex<Cpu>],
) -> DriverResult {
    let _ = dr.handles[d].set(thread::current());
    let mut events = Vec::new();
    let mut doorbell = Vec::new();
    let mut core_failed = None;
    let idle = crossbeam_utils::Backoff::new();
    // Which AICPUs are its own, worked out once (else a division for each, every round).
    let mine: Vec<bool> = (0..cpus.len()).map(|i| i % dr.threads == d).collect();
    let own = |i: usize| mine[i];
    let mut helping = false;
    loop {
        if dr.failed.load(Ordering::Relaxed) {
            return Err(SimError::Check("stopped: another AICPU failed".into()));
        }
        let mut progress = false;
        let mut own_left = false;
        for (i, m) in cpus.iter().enumerate() {
            if !own(i) && !helping {
                continue;
            }
            let Ok(mut c) = m.try_lock() else {
                own_left |= own(i);
                continue;
            };
            if c.counted {
                continue;
            }
            own_left |= own(i);
            let c = &mut *c;
            let mut env = StepEnv {
                dr,
                sh,
                driver: d,
                aicpu: c.sched.index(),
                jitter: &mut c.jitter,
                events: &mut c.events,
                staged_at: &mut c.staged_at,
                doorbell: &mut doorbell,
                runs: &mut events,
                failed: &mut core_failed,
            };
            let stepped = c.sched.step(sh, cfg, &mut env);
            if let Some(e) = core_failed.take() {
                dr.failed.store(true, Ordering::SeqCst);
                dr.wake_all();
                return Err(e);
            }
            match stepped {
                Ok(p) => progress |= p,
                Err(e) => {
                    dr.failed.store(true, Ordering::SeqCst);
                    dr.wake_all();
                    return Err(e.into());
                }
            }
            if c.sched.finished() && !c.counted {
                c.counted = true;
                dr.finished.fetch_add(1, Ordering::AcqRel);
                dr.wake_all();
            }
        }
        helping = !own_left || !progress;
        // Run the cores handed a task after the rounds' dispatches (a held-back batch, a
        // deferred task released).
        for rung in doorbell.drain(..) {
            if let Err(e) = execute(dr, sh, rung, &mut events, d) {
                dr.failed.store(true, Ordering::SeqCst);
                dr.wake_all();
                return Err(e);
            }
            progress = true;
        }
        if dr.finished.load(Ordering::Acquire) == dr.n {
            return Ok(events);
        }
        if progress {
            idle.reset();
        } else if !idle.is_completed() {
            // Idle, but what this driver waits for (another driver's watermark, a release) is
            // often a few microseconds away: spin, then yield, a bounded number of rounds
            // before paying for a park and an unpark.
            idle.snooze();
        } else {
            dr.sleeping[d].store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            // A task waiting for `rate_limit` is due at its AICPU's `issue_at`: sleep no longer.
            let mut work =
                dr.failed.load(Ordering::Relaxed) || dr.finished.load(Ordering::Acquire) == dr.n;
            let mut due = u64::MAX;
            for (i, m) in cpus.iter().enumerate() {
                if !(own(i) || helping) || work {
                    continue;
                }
                if let Ok(c) = m.try_lock() {
                    if !c.counted {
                        work = c.sched.has_work(sh, cfg);
                        due = due.min(c.sched.issue_at().unwrap_or(u64::MAX));
                    }
                }
            }
            let nap = Duration::from_nanos(due.saturating_sub(dr.now_ns()))
                .min(Duration::from_micros(500));
            if !work && !nap.is_zero() {
                thread::park_timeout(nap);
            }
            dr.sleeping[d].store(false, Ordering::Relaxed);
        }
    }
}
