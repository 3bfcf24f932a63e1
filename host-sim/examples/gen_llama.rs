//! Expands the LLaMA layer once per AICPU (for profiling): `cargo run --release -p ptovm-host-sim --example gen_llama -- N AICPUS REPEAT`.
use ptovm_assembler::{assemble, Options};
use ptovm_vm::{verify, Interpreter, RuntimeParams, Sink, Task};

struct Count(u64);
impl Sink for Count {
    fn task(&mut self, t: &Task) -> bool {
        self.0 += t.id & 1;
        true
    }
}

fn main() {
    let a: Vec<u32> = std::env::args()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let (n, aicpus, repeat) = (
        a.first().copied().unwrap_or(256),
        a.get(1).copied().unwrap_or(1),
        a.get(2).copied().unwrap_or(10),
    );
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
    let mut total = 0;
    let t0 = std::time::Instant::now();
    for _ in 0..repeat {
        let mut it = Interpreter::new(v, rp, 0, aicpus).unwrap();
        let mut c = Count(0);
        it.run_to_end(&mut c).unwrap();
        total += it.stats().emitted;
    }
    let dt = t0.elapsed();
    println!(
        "{total} tasks in {dt:?}: {:.1} ns/task",
        dt.as_nanos() as f64 / total as f64
    );
}
