//! The simulated-time machine model (spec/runtime.md §9; issue 21): exact makespans on graphs
//! whose answer is known — independent equal tasks, a chain, fork-join, a cube → vector
//! pipeline — with no overheads and with the modelled ones; the critical path and the work
//! bound; the same tasks and dependencies as the threaded run (both checked against the
//! reference); and the same report for the same inputs.

use ptovm_host_sim::model::{self, AicpuCosts, CostTable, Duration, KernelCosts, Machine};
use ptovm_host_sim::sim::{self, Options};
use ptovm_tests::{assemble_named, examples, values};
use ptovm_vm::{verify, RuntimeParams};

/// A machine on which only kernels take time.
fn free_machine(cube: u32, vector: u32) -> Machine {
    Machine {
        aicpus: 6,
        cube_cores: cube,
        vector_cores: vector,
        core_clock_mhz: 1000,
        handshake_ns: 0,
        notice_ns: 0,
        default_kernel_ns: 1,
        idle_poll_ns: 1,
        aicpu: AicpuCosts {
            round_ns: 0,
            instruction_ns: 0,
            task_ns: 0,
            probe_ns: 0,
            visit_ns: 0,
            insert_ns: 0,
            edge_ns: 0,
            cross_edge_ns: 0,
            dispatch_ns: 0,
            completion_ns: 0,
        },
    }
}

/// Models `src` with runtime parameters `given`, `aicpus` AICPUs and kernel durations `costs`
/// (by name, ns), checked against the reference.
fn model(
    src: &str,
    given: &[(&str, u32, Vec<u32>)],
    aicpus: u32,
    machine: &Machine,
    costs: &[(&str, u64)],
) -> model::ModelReport {
    model_with(
        src,
        given,
        checked(aicpus, sim::CoreAlloc::Shared),
        machine,
        costs,
    )
}

/// Checked runs of `aicpus` AICPUs, window 1,024, under the core allocation `alloc` (the
/// default is shared cores).
fn checked(aicpus: u32, alloc: sim::CoreAlloc) -> Options {
    Options {
        aicpus,
        window: 1024,
        check: true,
        cores: alloc,
        ..Options::default()
    }
}

/// [`model`] with the simulator options `o`.
fn model_with(
    src: &str,
    given: &[(&str, u32, Vec<u32>)],
    o: Options,
    machine: &Machine,
    costs: &[(&str, u64)],
) -> model::ModelReport {
    let (code, params) = assemble_named("m.pto", src, given);
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let table = CostTable {
        kernels: costs
            .iter()
            .map(|(k, ns)| (k.to_string(), Duration::Ns(*ns)))
            .collect(),
    };
    let costs = KernelCosts::new(&v, machine, &table).unwrap();
    let r = model::simulate(v, p, o, machine, &costs).unwrap();
    assert!(r.run.checked);
    r
}

const INDEPENDENT: &str = "
@tensor A: f32[N]
@kernel k(i) : vector (out A)
@workload w(%n: dense_dyn(N)) {
  parallel_for i in dense_dyn(N) { task @k(i) resources(A[i]) }
}
@schedule s for w { dispatch = round_robin }
";

#[test]
fn independent_equal_tasks_take_ceil_n_over_cores_times_d() {
    for (n, cores, aicpus) in [
        (1, 1, 1),
        (7, 3, 1),
        (12, 4, 1),
        (100, 8, 1),
        (24, 6, 2),
        (60, 12, 3),
    ] {
        let d = 1_000;
        let r = model(
            INDEPENDENT,
            &[("N", n, vec![])],
            aicpus,
            &free_machine(aicpus, cores),
            &[("k", d)],
        );
        // Each AICPU drives cores/aicpus cores and owns n/aicpus tasks (both divide evenly).
        let per = (n as u64 / aicpus as u64).div_ceil((cores / aicpus) as u64);
        assert_eq!(
            r.makespan_ns,
            per * d,
            "n {n}, cores {cores}, aicpus {aicpus}"
        );
        assert_eq!(r.critical_path_ns, d);
        assert_eq!(r.work_bound_ns, (n as u64 * d).div_ceil(cores as u64));
        assert_eq!(r.pools[1].busy_ns, n as u64 * d);
        assert_eq!(r.pools[1].tasks, n as u64);
        // Every core claimed from the shared bitmap once, then kept (claim.rs's hand).
        assert_eq!(r.run.core_claims, cores.min(n) as u64);
    }
}

#[test]
fn independent_tasks_pay_the_modelled_overheads_exactly() {
    // One AICPU, `cores` vector cores, issues and handshakes as spec/runtime.md §9.2 says:
    // round 0 generates all (r + n·g); the next round issues the first wave (r, then the
    // handshake h); each wave runs d, its finishes are seen q later by a round that completes
    // the wave (r + wave·c) and issues the next; the last such round ends the launch.
    let (r_ns, g, c, h, q, d) = (40, 60, 30, 500, 300, 2_000);
    let mut m = free_machine(1, 4);
    m.aicpu.round_ns = r_ns;
    m.aicpu.task_ns = g;
    m.aicpu.completion_ns = c;
    m.handshake_ns = h;
    m.notice_ns = q;
    for n in [1u64, 4, 5, 11] {
        let r = model(INDEPENDENT, &[("N", n as u32, vec![])], 1, &m, &[("k", d)]);
        let cores = 4;
        let waves = n.div_ceil(cores);
        let last = n - (waves - 1) * cores;
        let expect = (2 * r_ns + n * g)
            + waves * (h + d + q)
            + (waves - 1) * (r_ns + cores * c)
            + (r_ns + last * c);
        assert_eq!(r.makespan_ns, expect, "n = {n}");
        // Every core-nanosecond is busy or idle for a cause.
        let p = r.pools[1];
        assert_eq!(
            p.busy_ns + p.no_task_ns + p.aicpu_ns + p.handshake_ns,
            p.cores as u64 * r.makespan_ns
        );
    }
}

#[test]
fn a_chain_takes_the_sum_of_its_tasks() {
    let src = "
@tensor A: f32[1]
@kernel step(i) : cube (inout A)
@workload w(%n: dense_dyn(K)) {
  for_each i in dense_dyn(K) { task @step(i) resources(A) }
}
@schedule s for w { dispatch = round_robin }
";
    for (k, aicpus) in [(1, 1), (10, 1), (10, 2), (33, 3)] {
        let r = model(
            src,
            &[("K", k, vec![])],
            aicpus,
            &free_machine(aicpus, aicpus),
            &[("step", 700)],
        );
        assert_eq!(r.makespan_ns, k as u64 * 700, "k {k} on {aicpus} AICPUs");
        assert_eq!(r.critical_path_ns, k as u64 * 700);
        assert_eq!(r.efficiency(), 1.0);
    }
}

#[test]
fn fork_join_takes_source_waves_and_join() {
    let src = "
@tensor X: f32[1]
@tensor Y: f32[M]
@tensor Z: f32[1]
@kernel src() : cube (out X)
@kernel mid(i) : vector (in X, out Y)
@kernel join() : cube (in Y, out Z)
@workload w(%m: dense_dyn(M)) {
  task @src() resources(X)
  parallel_for i in dense_dyn(M) { task @mid(i) resources(X, Y[i]) }
  task @join() resources(Y, Z)
}
@schedule s for w { dispatch = round_robin(1) }
";
    for (m, vector) in [(1, 1), (8, 8), (9, 4), (20, 6)] {
        let r = model(
            src,
            &[("M", m, vec![])],
            1,
            &free_machine(1, vector),
            &[("src", 100), ("mid", 1_000), ("join", 50)],
        );
        let expect = 100 + (m as u64).div_ceil(vector as u64) * 1_000 + 50;
        assert_eq!(r.makespan_ns, expect, "m {m}, {vector} vector cores");
        assert_eq!(r.critical_path_ns, 1_150);
    }
}

#[test]
fn a_cube_to_vector_pipeline_overlaps_its_stages() {
    let src = "
@tensor A: f32[N]
@tensor B: f32[N]
@kernel mm(i) : cube (out A)
@kernel post(i) : vector (in A, out B)
@workload w(%n: dense_dyn(N)) {
  for_each i in dense_dyn(N) {
    task @mm(i) resources(A[i])
    task @post(i) resources(A[i], B[i])
  }
}
@schedule s for w { dispatch = round_robin(1) }
";
    // One cube and one vector core: the vector stage of item i runs beside the cube stage of
    // item i + 1, so n items take n cube stages and the last vector stage when the cube stage
    // is the longer, and the first cube stage and n vector stages otherwise.
    for (n, cube_ns, vec_ns) in [
        (1u64, 300u64, 200u64),
        (6, 300, 200),
        (6, 200, 300),
        (5, 250, 250),
    ] {
        let r = model(
            src,
            &[("N", n as u32, vec![])],
            1,
            &free_machine(1, 1),
            &[("mm", cube_ns), ("post", vec_ns)],
        );
        let expect = if cube_ns >= vec_ns {
            n * cube_ns + vec_ns
        } else {
            cube_ns + n * vec_ns
        };
        assert_eq!(r.makespan_ns, expect, "n {n}, {cube_ns}/{vec_ns}");
        assert_eq!(r.critical_path_ns, cube_ns + vec_ns);
        assert_eq!(r.work_bound_ns, n * cube_ns.max(vec_ns));
    }
}

/// Every task on AICPU 0 (spec/runtime.md §4.6): with shared cores it uses every core of the
/// launch, `⌈n / cores⌉ · d`; under a partition only its own, `⌈n / (cores / aicpus)⌉ · d`.
#[test]
fn shared_cores_serve_a_skewed_dispatch_with_every_core() {
    let skewed = INDEPENDENT.replace("round_robin", "affinity(0)");
    let d = 1_000;
    for (n, cores, aicpus) in [(24, 6, 2), (60, 12, 3), (7, 3, 3), (100, 48, 6)] {
        let machine = free_machine(aicpus, cores);
        let run = |alloc| {
            model_with(
                &skewed,
                &[("N", n, vec![])],
                checked(aicpus, alloc),
                &machine,
                &[("k", d)],
            )
        };
        let shared = run(sim::CoreAlloc::Shared);
        let partition = run(sim::CoreAlloc::Partition);
        let what = format!("n {n}, cores {cores}, aicpus {aicpus}");
        assert_eq!(shared.run.per_aicpu[0], n as u64, "{what}");
        assert_eq!(
            shared.makespan_ns,
            (n as u64).div_ceil(cores as u64) * d,
            "{what}"
        );
        assert_eq!(
            partition.makespan_ns,
            (n as u64).div_ceil((cores / aicpus) as u64) * d,
            "{what}"
        );
        assert!(shared.cores.iter().all(|c| c.aicpu.is_none()), "{what}");
        // Each core is claimed from the bitmap once: then the AICPU that sees its task
        // complete keeps it for its next one (its hand, spec/runtime.md §4.6), borrowed ones
        // too while their home AICPUs stay idle. Without the hand, n claims.
        assert_eq!(shared.run.core_claims, cores as u64, "{what}");
        assert_eq!(partition.run.core_claims, 0, "{what}");
        // Under the partition only AICPU 0's vector cores ran anything, each of them.
        for (i, c) in partition
            .cores
            .iter()
            .enumerate()
            .filter(|(_, c)| c.pool == 1)
        {
            assert_eq!(c.aicpu == Some(0), c.tasks > 0, "{what}: core {i}");
        }
    }
}

/// A busy AICPU borrows only for a backlog its own share will not soon start (spec/runtime.md
/// §4.6): with tasks of the pool running for it, only while more of its tasks are ready than
/// its share has cores. Two AICPUs, 4 vector cores (2 a share), every task on AICPU 0: 4 tasks
/// stay on its own 2 cores (the 2 that wait are no more than its share starts as its running
/// tasks finish: 2 d), 8 go over all 4 (2 d, not 4 d) — and a long backlog on 1 core a share
/// takes every core.
#[test]
fn a_busy_aicpu_borrows_only_for_a_backlog_beyond_its_share() {
    let skewed = INDEPENDENT.replace("round_robin", "affinity(0)");
    let d = 1_000;
    for (n, cube, vector, makespan, used) in [
        (4, 2, 4, 2 * d, 2),
        (8, 2, 4, 2 * d, 4),
        (5, 2, 4, 2 * d, 3),
        (12, 2, 2, 6 * d, 2),
    ] {
        let r = model_with(
            &skewed,
            &[("N", n, vec![])],
            checked(2, sim::CoreAlloc::Shared),
            &free_machine(cube, vector),
            &[("k", d)],
        );
        let what = format!("n {n}, {vector} vector cores");
        assert_eq!(r.run.per_aicpu[0], n as u64, "{what}");
        assert_eq!(r.makespan_ns, makespan, "{what}");
        let ran: Vec<usize> = (0..r.cores.len())
            .filter(|&c| r.cores[c].pool == 1 && r.cores[c].tasks > 0)
            .collect();
        assert_eq!(ran.len(), used, "{what}: {ran:?}");
        // Its home share, the first half of the pool, always.
        let first = cube as usize;
        assert!(ran.contains(&first), "{what}: {ran:?}");
    }
}

/// Fewer cores than AICPUs: most AICPUs have no home share and borrow the idle ones' cores
/// (spec/runtime.md §4.6), which must wake them when they turn idle. Under a start threshold
/// the AICPUs that hold the home shares (2 and 5) have no task and finish without ever
/// dispatching: they are idle from the launch on (a fuzzer found a launch that hung when they
/// were not).
#[test]
fn shared_cores_serve_aicpus_without_a_home_share() {
    let d = 1_000;
    for (dispatch, n, start) in [
        ("affinity(0)", 20, sim::Start::Immediate),
        ("round_robin", 24, sim::Start::Immediate),
        ("affinity(0)", 20, sim::Start::Threshold(32)),
    ] {
        let src = INDEPENDENT.replace("round_robin", dispatch);
        let o = Options {
            start,
            ..checked(6, sim::CoreAlloc::Shared)
        };
        let r = model_with(
            &src,
            &[("N", n, vec![])],
            o,
            &free_machine(6, 2),
            &[("k", d)],
        );
        assert_eq!(
            r.makespan_ns,
            (n as u64).div_ceil(2) * d,
            "{dispatch}, {start:?}"
        );
    }
}

/// The skewed flash_decode case of issue 21 in the threaded run: AICPU 1 owns 288 of the 384
/// tasks; under a partition they run on its own 6 cube cores and 12 vector cores at most, with
/// shared cores on others too.
#[test]
fn shared_cores_spread_a_skewed_dispatch_in_the_threaded_run() {
    let (code, params) = ptovm_tests::example(
        "flash_decode.pto",
        &[
            ("kv_chunks", 0, vec![1, 8, 1, 1]),
            ("kv_len", 0, vec![16, 2048, 16, 16]),
        ],
    );
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let cores_of_aicpu_1 = |alloc| {
        let o = Options {
            aicpus: 4,
            check: true,
            trace: true,
            cores: alloc,
            ..Options::default()
        };
        let r = sim::run(v, p, o).unwrap();
        assert!(r.checked);
        assert_eq!(r.per_aicpu[1], 288);
        let mut cores: Vec<u32> = r
            .events
            .iter()
            .filter(|e| e.kind == sim::EventKind::Run && e.aicpu == 1 && e.core < 24)
            .map(|e| e.core)
            .collect();
        cores.sort_unstable();
        cores.dedup();
        cores
    };
    let partition = cores_of_aicpu_1(sim::CoreAlloc::Partition);
    assert!(partition.iter().all(|c| c % 4 == 1), "{partition:?}");
    let shared = cores_of_aicpu_1(sim::CoreAlloc::Shared);
    assert!(shared.len() > 6, "{shared:?}");
}

#[test]
fn the_model_and_the_threaded_run_run_the_same_tasks_checked() {
    for (name, code, params) in examples() {
        let v = verify(&code).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        for aicpus in [1, 2, 3] {
            let o = Options {
                aicpus,
                window: 8,
                check: true,
                cores: [sim::CoreAlloc::Shared, sim::CoreAlloc::Partition][aicpus as usize % 2],
                ..Options::default()
            };
            let threaded = sim::run(v, p, o).unwrap();
            let machine = Machine::default();
            let costs = KernelCosts::new(&v, &machine, &CostTable::default()).unwrap();
            let modelled = model::simulate(v, p, o, &machine, &costs).unwrap();
            assert!(threaded.checked && modelled.run.checked, "{name}");
            assert_eq!(threaded.per_aicpu, modelled.run.per_aicpu, "{name}");
            assert_eq!(threaded.cube_tasks, modelled.run.cube_tasks, "{name}");
            assert_eq!(threaded.read_back, modelled.run.read_back, "{name}");
            assert!(modelled.makespan_ns >= modelled.lower_bound_ns(), "{name}");
        }
    }
}

#[test]
fn the_same_inputs_give_the_same_report() {
    let (code, params) = ptovm_tests::example("llama_layer.pto", &[("N", 24, vec![])]);
    let v = verify(&code).unwrap();
    let vals = values(&params);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let machine = Machine::default();
    let costs = KernelCosts::new(&v, &machine, &CostTable::default()).unwrap();
    let o = Options {
        trace: true,
        ..Options::default()
    };
    let a = model::simulate(v, p, o, &machine, &costs).unwrap();
    let b = model::simulate(v, p, o, &machine, &costs).unwrap();
    assert_eq!(format!("{:?}", a.run.events), format!("{:?}", b.run.events));
    assert_eq!(a.makespan_ns, b.makespan_ns);
    assert_eq!(a.cores, b.cores);
    assert_eq!(a.aicpus, b.aicpus);
    assert_eq!(a.timeline, b.timeline);
    assert!(!a.run.events.is_empty());
}

const DECLARED: &str = "
@param N = 6
@tensor A: f16[N, 64]
@tensor B: f16[N, 64]
@kernel load(i, len) : cube (out A) cost(100 + len * size(A) / 64)
@kernel post(i) : vector (in A, out B) cost(2 * extent(B, 1) + extent(B, 0), cycles)
@workload w(%n: dense_dyn(N)) {
  for_each i in dense_dyn(N) {
    task @load(i, i + 1) resources(A[i])
    task @post(i) resources(A[i], B[i])
  }
}
@schedule s for w { dispatch = round_robin(1) }
";

#[test]
fn declared_costs_are_evaluated_at_each_task() {
    // load(i) takes 100 + (i + 1) · 64 / 64 ns; post takes 2 · 64 + 1 cycles at 1,000 MHz.
    let m = free_machine(1, 1);
    let r = model(DECLARED, &[], 1, &m, &[]);
    let load: Vec<u64> = (0..6).map(|i| 100 + (i + 1)).collect();
    let post = 129;
    // One cube and one vector core, each post longer than a load: the posts run back to back
    // after the first load.
    assert_eq!(r.makespan_ns, load[0] + 6 * post);
    assert_eq!(r.critical_path_ns, load[5] + post);
    assert_eq!(r.pools[0].busy_ns, load.iter().sum::<u64>());
    assert_eq!(r.pools[1].busy_ns, 6 * post);
    // A cost table overrides what the module declares.
    let r = model(DECLARED, &[], 1, &m, &[("load", 50), ("post", 10)]);
    assert_eq!(r.makespan_ns, 6 * 50 + 10);
    // Cycles follow the machine's clock (2,000 MHz: half the ns).
    let mut fast = free_machine(1, 1);
    fast.core_clock_mhz = 2000;
    let r = model(DECLARED, &[], 1, &fast, &[("load", 1000)]);
    assert_eq!(r.pools[1].busy_ns, 6 * 129u64.div_ceil(2));
}

#[test]
fn a_cost_that_is_negative_or_overflows_stops_the_run() {
    for (cost, expect) in [
        ("cost(10 - len * 100)", "the cost is -90, below zero"),
        ("cost(len * 2147483647 * 2147483647 * 4)", "overflow"),
        ("cost(100 / (len - 1))", "division by zero"),
    ] {
        let src = format!(
            "@tensor A: f16[4]\n@kernel k(i, len) : vector (out A) {cost}\n@workload w() {{\n  parallel_for i in dense[4] {{ task @k(i, 1) resources(A[i]) }}\n}}\n"
        );
        let (code, params) = assemble_named("m.pto", &src, &[]);
        let v = verify(&code).unwrap();
        let vals = values(&params);
        let p = RuntimeParams::new(&v, &vals).unwrap();
        let machine = Machine::default();
        let costs = KernelCosts::new(&v, &machine, &CostTable::default()).unwrap();
        let e = model::simulate(v, p, Options::default(), &machine, &costs).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("the cost of kernel `k`"), "{text}");
        assert!(text.to_lowercase().contains(expect), "{cost}: {text}");
        assert!(text.starts_with("task 0:"), "{text}");
    }
}

#[test]
fn a_chain_pays_each_hop_exactly() {
    // One AICPU: round 0 generates the k tasks (r + k·g) and registers each on the one before
    // (k − 1 edges of e); the next round issues the first (r, x, then the handshake h). Each
    // task runs d, its finish is seen q later by a round that completes it (r + c), releases
    // its successor and issues it in the same round (x, h); the last round ends the launch.
    let src = "
@tensor A: f32[1]
@kernel step(i) : cube (inout A)
@workload w(%n: dense_dyn(K)) {
  for_each i in dense_dyn(K) { task @step(i) resources(A) }
}
@schedule s for w { dispatch = round_robin(1) }
";
    let (r_ns, g, e, x, c, h, q, d) = (40, 60, 30, 80, 50, 500, 300, 700);
    let mut m = free_machine(1, 1);
    m.aicpu.round_ns = r_ns;
    m.aicpu.task_ns = g;
    m.aicpu.edge_ns = e;
    m.aicpu.dispatch_ns = x;
    m.aicpu.completion_ns = c;
    m.handshake_ns = h;
    m.notice_ns = q;
    for k in [1u64, 2, 5, 17] {
        let r = model(src, &[("K", k as u32, vec![])], 1, &m, &[("step", d)]);
        let hop = q + r_ns + c + x + h + d;
        let expect = (2 * r_ns + k * g + (k - 1) * e) + x + h + d + (k - 1) * hop + q + r_ns + c;
        assert_eq!(r.makespan_ns, expect, "k = {k}");
        assert_eq!(r.run.edges, k - 1);
    }
}

/// A kernel's core limit (`@kernel … cores(L)`, spec/runtime.md §4.6): at most `L` of its
/// tasks run at once in the launch, whatever the AICPUs and cores, so independent equal tasks
/// take `⌈n / min(L, cores)⌉ · d`; the work bound counts it.
#[test]
fn a_core_limit_caps_the_kernels_running_tasks() {
    let d = 1_000;
    for (n, cores, aicpus, limit) in [(12, 8, 1, 3), (30, 48, 6, 3), (20, 4, 2, 8), (7, 6, 3, 1)] {
        let src = INDEPENDENT.replace("(out A)", &format!("(out A) cores({limit})"));
        for alloc in [sim::CoreAlloc::Shared, sim::CoreAlloc::Partition] {
            let o = checked(aicpus, alloc);
            let machine = free_machine(aicpus, cores);
            let r = model_with(&src, &[("N", n, vec![])], o, &machine, &[("k", d)]);
            let what = format!("n {n}, cores {cores}, aicpus {aicpus}, limit {limit}, {alloc}");
            let want = (n as u64).div_ceil(u64::from(limit.min(cores))) * d;
            assert_eq!(r.makespan_ns, want, "{what}");
            assert_eq!(r.work_bound_ns, want, "{what}");
        }
    }
}
