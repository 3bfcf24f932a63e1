//! The simulated-time model on the LLaMA layer, for profilers (`valgrind --tool=callgrind`):
//! `cargo run --release -p ptovm-host-sim --example model_llama -- N`.

use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::model::{self, CostTable, KernelCosts, Machine};
use ptovm_host_sim::sim;
use ptovm_vm::{verify, RuntimeParams};

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(128);
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto");
    let src = std::fs::read_to_string(p).unwrap();
    let bytes = assemble("llama.pto", &src, &Options::default())
        .unwrap()
        .bytes;
    let v = verify(&bytes).unwrap();
    let bound = ptovm_host_sim::Defaults::new(&v, &[("N", n)]).unwrap();
    let vals = bound.values();
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let machine = Machine::default();
    let costs = KernelCosts::new(&v, &machine, &CostTable::default()).unwrap();
    let o = sim::Options::of_program(&v, 24, 48, ptovm_host_sim::DepMode::Overlap);
    let t = std::time::Instant::now();
    let r = model::simulate(v, p, o, &machine, &costs).unwrap();
    eprintln!(
        "{} tasks, makespan {} ns, {:.0} tasks/s of host time",
        r.run.tasks_total,
        r.makespan_ns,
        r.run.tasks_total as f64 / t.elapsed().as_secs_f64()
    );
}
