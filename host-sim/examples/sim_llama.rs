//! Runs the LLaMA layer on the threaded simulator: `cargo run --release -p ptovm-host-sim --example sim_llama -- N AICPUS WINDOW CHECK`
//! (`THREADS=t` sets the driver threads, default 2).
use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::sim;
use ptovm_vm::{verify, RuntimeParams};

fn main() {
    let a: Vec<u32> = std::env::args()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let (n, aicpus, window, check) = (a[0], a[1], a[2] as usize, a[3] != 0);
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto");
    let bytes = assemble(
        "l",
        &std::fs::read_to_string(p).unwrap(),
        &Options::default(),
    )
    .unwrap()
    .bytes;
    let v = verify(&bytes).unwrap();
    let bound = ptovm_host_sim::Defaults::new(&v, &[("N", n)]).unwrap();
    let vals = bound.values();
    let rp = RuntimeParams::new(&v, &vals).unwrap();
    let threads = std::env::var("THREADS").map_or(2, |t| t.parse().unwrap());
    let o = sim::Options {
        aicpus,
        window,
        check,
        threads,
        ..sim::Options::default()
    };
    let r = sim::run(v, rp, o).unwrap();
    println!(
        "{} tasks in {:?}: {:.0} tasks/ms, {} edges ({} cross), stalls {}, checked {}",
        r.tasks_total,
        r.wall,
        r.tasks_total as f64 / r.wall.as_secs_f64() / 1000.0,
        r.edges,
        r.cross_aicpu_edges,
        r.window_stalls,
        r.checked
    );
}
