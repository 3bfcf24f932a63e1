//! The simulated-time model's speed (spec/runtime.md §9): modelled tasks per second of host
//! time on the LLaMA-7B layer at N = 64 … 1024 tiles (13,312 … 3.2 M tasks; the cost per task
//! should not grow with N) and on Task Bench's 1-D stencil (W = 1,000 points, T = 100 steps),
//! each on the default 910B machine
//! with the program's own schedule. One iteration is a whole `simulate` call: the run and its
//! bounds (critical path and work bound over the reference graph).
//!
//! Run: `cargo bench -p ptovm-host-sim --bench model`. divan reports time per launch and tasks
//! per second (the item counter).

use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::model::{self, CostTable, KernelCosts, Machine};
use ptovm_host_sim::sim;
use ptovm_vm::{verify, RuntimeParams};

fn program(example: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(example);
    let src = std::fs::read_to_string(p).unwrap();
    assemble(example, &src, &Options::default()).unwrap().bytes
}

fn simulate(bytes: &[u8], params: &[(&str, u32)]) -> u64 {
    let v = verify(bytes).unwrap();
    let bound = ptovm_host_sim::Defaults::new(&v, params).unwrap();
    let vals = bound.values();
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let machine = Machine::default();
    let costs = KernelCosts::new(&v, &machine, &CostTable::default()).unwrap();
    let o = sim::Options::of_program(&v, 24, 48, ptovm_host_sim::DepMode::Overlap);
    model::simulate(v, p, o, &machine, &costs)
        .unwrap()
        .run
        .tasks_total
}

#[divan::bench(args = [64, 128, 256, 512, 1024], sample_count = 3, sample_size = 1)]
fn llama(bencher: divan::Bencher, n: u32) {
    let bytes = program("llama_layer.pto");
    let tasks = simulate(&bytes, &[("N", n)]);
    bencher
        .counter(divan::counter::ItemsCount::new(tasks))
        .bench(|| simulate(&bytes, &[("N", n)]));
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn stencil_1d(bencher: divan::Bencher) {
    let bytes = program("taskbench/stencil_1d.pto");
    let params = [("W", 1000), ("T", 100)];
    let tasks = simulate(&bytes, &params);
    bencher
        .counter(divan::counter::ItemsCount::new(tasks))
        .bench(|| simulate(&bytes, &params));
}

fn main() {
    divan::main();
}
