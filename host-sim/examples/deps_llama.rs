//! Generation plus dependency building in the scheduler's fixed-capacity TensorMap, a window
//! completing in order (for profiling and work counts):
//! `cargo run --release -p ptovm-host-sim --example deps_llama -- N WINDOW REPEAT [exact|classes]`
//! (`classes`: overlap mode, recording only what the scheduler records, spec/runtime.md §3.5).
use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{DepMode, InOrderWindow};
use ptovm_vm::tmap::MapLayout;
use ptovm_vm::{verify, Interpreter, RuntimeParams};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u32| a.get(i).map_or(d, |x| x.parse().unwrap());
    let (n, window, repeat) = (num(0, 256), num(1, 1024), num(2, 10));
    let mode = if a.get(3).map(String::as_str) == Some("exact") {
        DepMode::Exact
    } else {
        DepMode::Overlap
    };
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto");
    let src = std::fs::read_to_string(p).unwrap();
    let bytes = assemble("l", &src, &Options::default()).unwrap().bytes;
    let v = verify(&bytes).unwrap();
    let bound = ptovm_host_sim::Defaults::new(&v, &[("N", n)]).unwrap();
    let vals = bound.values();
    let rp = RuntimeParams::new(&v, &vals).unwrap();
    let layout = MapLayout::for_program(&v, window).unwrap();
    let mut d = InOrderWindow::new(layout, mode).unwrap();
    if a.get(3).map(String::as_str) == Some("classes") {
        d.classify(&Interpreter::new(v, rp, 0, 1).unwrap()).unwrap();
    }
    let (mut total, mut visits) = (0, 0);
    let t0 = std::time::Instant::now();
    for _ in 0..repeat {
        d.reset();
        let mut it = Interpreter::new(v, rp, 0, 1).unwrap();
        it.run_to_end(&mut d).unwrap();
        assert_eq!(d.error, None, "the map refused a task");
        total += it.stats().emitted;
        visits = d.map.visits();
    }
    let dt = t0.elapsed();
    let per = total as f64 / repeat as f64;
    println!(
        "{total} tasks in {dt:?}: {:.1} ns/task, {:.0} tasks/ms; per run: {} edges, {:.2} visits/task; map {} bytes, {} entries used at the end",
        dt.as_nanos() as f64 / total as f64,
        total as f64 / dt.as_secs_f64() / 1e3,
        d.edges,
        visits as f64 / per / repeat as f64,
        layout.bytes(),
        d.map.used(),
    );
}
