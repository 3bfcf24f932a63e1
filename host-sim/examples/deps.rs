//! Generation plus dependency building in the scheduler's fixed-capacity TensorMap for any
//! module, a window completing in order, recording what the scheduler records (spec/runtime.md
//! §3.5); for profiling and work counts:
//! `cargo run --release -p ptovm-host-sim --example deps -- FILE.pto WINDOW REPEAT [NAME=VALUE…]`
//! (`NAME=V,V,…` gives an array; the parameters not given take the module's defaults). WINDOW 0
//! measures generation alone, with `ptovm bench`'s `generate`.
//! `deps_llama` is the same for the LLaMA layer with its tile count as the first argument.
use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{DepMode, InOrderWindow};
use ptovm_vm::tmap::MapLayout;
use ptovm_vm::{verify, Interpreter, RuntimeParams};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: deps FILE.pto WINDOW REPEAT [NAME=VALUE...]";
    let path = a.first().expect(usage);
    let num = |i: usize| -> u32 { a.get(i).expect(usage).parse().expect(usage) };
    let (window, repeat) = (num(1), num(2));
    let src = std::fs::read_to_string(path).expect("a readable file");
    let out = assemble("m", &src, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    // `NAME=VALUE` a scalar, `NAME=V,V,…` an array.
    let given: Vec<(&str, &str)> = a[3..]
        .iter()
        .map(|x| x.split_once('=').expect(usage))
        .collect();
    let number = |x: &str| -> u32 { x.parse().expect(usage) };
    let v = verify(&out.bytes).unwrap();
    let scalars: Vec<(&str, u32)> = given
        .iter()
        .filter(|(_, x)| !x.contains(','))
        .map(|&(n, x)| (n, number(x)))
        .collect();
    let mut bound = ptovm_host_sim::Defaults::new(&v, &scalars).unwrap_or_else(|e| panic!("{e}"));
    for &(n, x) in given.iter().filter(|(_, x)| x.contains(',')) {
        bound = bound
            .with_array(&v, n, x.split(',').map(number).collect())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let vals = bound.values();
    let rp = RuntimeParams::new(&v, &vals).unwrap();
    if window == 0 {
        return generate_only(v, rp, repeat);
    }
    let layout = MapLayout::for_program(&v, window).unwrap();
    let mut d = InOrderWindow::new(layout, DepMode::Overlap).unwrap();
    d.classify(&Interpreter::new(v, rp, 0, 1).unwrap()).unwrap();
    let (mut total, mut work) = (0, 0);
    let t0 = std::time::Instant::now();
    for _ in 0..repeat {
        d.reset();
        let (v0, p0) = (d.map.visits(), d.map.probes());
        let mut it = Interpreter::new(v, rp, 0, 1).unwrap();
        it.run_to_end(&mut d).unwrap();
        assert_eq!(d.error, None, "the map refused a task");
        total += it.stats().emitted;
        work = d.map.visits() - v0 + d.map.probes() - p0;
    }
    let dt = t0.elapsed();
    let per = total as f64 / repeat as f64;
    println!(
        "{total} tasks in {dt:?}: {:.1} ns/task, {:.0} tasks/ms; per run: {} edges ({} registrations), {:.2} lists probed and entries examined a task; map {} bytes",
        dt.as_nanos() as f64 / total as f64,
        total as f64 / dt.as_secs_f64() / 1e3,
        d.edges,
        d.registrations(),
        work as f64 / per,
        layout.bytes(),
    );
}

/// Generation alone, `repeat` times, as `ptovm bench` measures it (`measure::generate`: each
/// timed expansion after an untimed one).
fn generate_only(v: ptovm_vm::Verified<'_>, rp: RuntimeParams<'_>, repeat: u32) {
    let (mut total, mut dt) = (0, std::time::Duration::ZERO);
    for _ in 0..repeat {
        let m = ptovm_host_sim::measure::generate(v, rp).unwrap_or_else(|e| panic!("{e}"));
        total += m.tasks;
        dt += m.wall;
    }
    println!(
        "{total} tasks generated in {dt:?}: {:.1} ns/task",
        dt.as_nanos() as f64 / total as f64
    );
}
