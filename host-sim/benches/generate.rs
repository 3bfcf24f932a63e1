//! Task generation speed: the LLaMA-7B layer (N = 256 tiles, 200,704 tasks) expanded by one
//! interpreter instance, alone (1 AICPU) or as one of 6, with an empty sink and with a sink that
//! copies every task into a ring of compact records (the work a scheduler's window does).
//!
//! `with_deps` adds complete dependency building (the TensorMap of `DepBuilder`) to one
//! instance's generation. `plan_decode_chunks` times launch-time planning (`@plan`).
//!
//! Run: `cargo bench -p ptovm-host-sim --bench generate`. divan reports time per whole
//! expansion and owned tasks per second (the item counter).

use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{DepBuilder, DepMode, Edge};
use ptovm_vm::{verify, Interpreter, RuntimeParams, Sink, Task};

const N: u32 = 256;

fn llama(policy: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/llama_layer.pto");
    let src = std::fs::read_to_string(p)
        .unwrap()
        .replace("dispatch = affinity(t)", &format!("dispatch = {policy}"));
    assemble("llama.pto", &src, &Options::default())
        .unwrap()
        .bytes
}

struct Count(u64);
impl Sink for Count {
    #[inline]
    fn task(&mut self, t: &Task) -> bool {
        self.0 += t.id & 1;
        true
    }
}

/// A compact region: tensor, direction, two dimensions.
type SlotIo = (u16, u8, [(i64, i64); 2]);

/// A compact copy of a task, as a window slot would hold it.
#[derive(Clone, Copy, Default)]
struct Slot {
    id: u64,
    kernel: u16,
    nparams: u8,
    nio: u8,
    params: [i64; 4],
    io: [SlotIo; 4],
}

struct Ring(Vec<Slot>, usize);
impl Sink for Ring {
    #[inline]
    fn task(&mut self, t: &Task) -> bool {
        let s = &mut self.0[self.1 & 1023];
        s.id = t.id;
        s.kernel = t.kernel;
        s.nparams = t.nparams;
        s.nio = t.nio;
        for (d, p) in s.params.iter_mut().zip(t.params()) {
            *d = *p;
        }
        for (d, io) in s.io.iter_mut().zip(t.ios()) {
            d.0 = io.tensor;
            d.1 = io.dir;
            d.2[0] = io.ranges[0];
            d.2[1] = io.ranges[1];
        }
        self.1 += 1;
        true
    }
}

fn expand<S: Sink>(bytes: &[u8], aicpus: u32, sink: &mut S) -> u64 {
    let v = verify(bytes).unwrap();
    let bound = ptovm_host_sim::Defaults::new(&v, &[("N", N)]).unwrap();
    let vals = bound.values();
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let mut it = Interpreter::new(v, p, 0, aicpus).unwrap();
    it.run_to_end(sink).unwrap();
    it.stats().emitted
}

#[divan::bench(args = [("affinity(t)", 1), ("affinity(t)", 6), ("static(t)", 6), ("round_robin", 6), ("hash(t)", 6)])]
fn emit_only(b: divan::Bencher, (policy, aicpus): (&str, u32)) {
    let bytes = llama(policy);
    let owned = expand(&bytes, aicpus, &mut Count(0));
    b.counter(divan::counter::ItemsCount::new(owned))
        .bench(|| expand(divan::black_box(&bytes), aicpus, &mut Count(0)));
}

#[divan::bench(args = [1, 6])]
fn into_ring(b: divan::Bencher, aicpus: u32) {
    let bytes = llama("affinity(t)");
    let owned = expand(&bytes, aicpus, &mut Count(0));
    let mut ring = Ring(vec![Slot::default(); 1024], 0);
    b.counter(divan::counter::ItemsCount::new(owned))
        .bench_local(|| expand(divan::black_box(&bytes), aicpus, &mut ring));
}

/// Generation plus complete dependency building: every task goes through a TensorMap that
/// finds all its RAW/WAW/WAR predecessors (none dropped), as one AICPU's scheduler does.
struct Deps {
    map: DepBuilder,
    buf: Vec<Edge>,
    edges: u64,
}
impl Sink for Deps {
    #[inline]
    fn task(&mut self, t: &Task) -> bool {
        self.map.add(t.id, t.ios(), &mut self.buf);
        self.edges += self.buf.len() as u64;
        self.buf.clear();
        true
    }
}

#[divan::bench(args = ["overlap", "exact"])]
fn with_deps(b: divan::Bencher, mode: &str) {
    let bytes = llama("affinity(t)");
    let mode = if mode == "exact" {
        DepMode::Exact
    } else {
        DepMode::Overlap
    };
    let owned = expand(&bytes, 1, &mut Count(0));
    b.counter(divan::counter::ItemsCount::new(owned))
        .bench_local(|| {
            let mut d = Deps {
                map: DepBuilder::new(mode),
                buf: Vec::new(),
                edges: 0,
            };
            expand(divan::black_box(&bytes), 1, &mut d);
            d.edges
        });
}

/// Generation plus dependency building in the scheduler's fixed-capacity TensorMap
/// (`ptovm_vm::tmap`), a window of 1024 tasks completing in order (`InOrderWindow`): every
/// region recorded (`overlap`, `exact`), or as the scheduler records them (`classes`:
/// overlap mode, read-only tensors skipped, reads no write follows only looked up).
#[divan::bench(args = ["overlap", "exact", "classes"])]
fn with_window_deps(b: divan::Bencher, mode: &str) {
    let bytes = llama("affinity(t)");
    let classes = mode == "classes";
    let mode = if mode == "exact" {
        DepMode::Exact
    } else {
        DepMode::Overlap
    };
    let v = verify(&bytes).unwrap();
    let layout = ptovm_vm::tmap::MapLayout::for_program(&v, 1024).unwrap();
    let owned = expand(&bytes, 1, &mut Count(0));
    let mut d = ptovm_host_sim::InOrderWindow::new(layout, mode).unwrap();
    if classes {
        // What the scheduler records (spec/runtime.md §3.5): read-only tensors not at all,
        // reads that no later write follows only looked up. Every edge is still found.
        let bound = ptovm_host_sim::Defaults::new(&v, &[("N", N)]).unwrap();
        let vals = bound.values();
        let p = RuntimeParams::new(&v, &vals).unwrap();
        d.classify(&Interpreter::new(v, p, 0, 1).unwrap()).unwrap();
    }
    b.counter(divan::counter::ItemsCount::new(owned))
        .bench_local(|| {
            d.reset();
            expand(divan::black_box(&bytes), 1, &mut d);
            assert_eq!(d.error, None);
        });
}

#[divan::bench]
fn count_tasks(b: divan::Bencher) {
    let bytes = llama("affinity(t)");
    b.bench(|| {
        let v = verify(&bytes).unwrap();
        let bound = ptovm_host_sim::Defaults::new(&v, &[("N", N)]).unwrap();
        let vals = bound.values();
        let p = RuntimeParams::new(&v, &vals).unwrap();
        Interpreter::new(v, p, 0, 1).unwrap().count_tasks().unwrap()
    });
}

/// Launch-time planning (`@plan`): FlashInfer's split-KV chunk-size search over `B`
/// requests (a max, then a binary search whose every step sums over the batch), as every
/// AICPU computes it when its runtime parameters are bound. divan's item counter is the
/// expression nodes evaluated (`Planned::work`).
#[divan::bench(args = [4, 64, 512])]
fn plan_decode_chunks(b: divan::Bencher, batch: u32) {
    let src = "
@param B = 1
@param heads = 8
@param max_blocks = 1056
@param pages = [1]
@plan top = max(b in 0 .. B: pages[b])
@plan chunk = search(c in 1 ..= top:
    sum(b in 0 .. B: ceil_div(pages[b], c)) * heads <= max_blocks || c == top)
@kernel k(b): vector()
@workload w(%r: dense_dyn(B)) { parallel_for b in %r { task @k(chunk) } }
";
    let bytes = assemble("plan.pto", src, &Options::default())
        .unwrap()
        .bytes;
    let v = verify(&bytes).unwrap();
    let pages: Vec<u32> = (0..batch).map(|i| 1 + i * 37 % 200).collect();
    let vals: Vec<ptovm_vm::Value<'_>> = v
        .params()
        .iter()
        .map(
            |p| match v.name(p.name_off.get(), p.name_len.get() as u32) {
                "B" => ptovm_vm::Value::Scalar(batch),
                "heads" => ptovm_vm::Value::Scalar(8),
                "max_blocks" => ptovm_vm::Value::Scalar(1056),
                _ => ptovm_vm::Value::Array(&pages),
            },
        )
        .collect();
    let work = RuntimeParams::new(&v, &vals).unwrap().planned().work;
    b.counter(divan::counter::ItemsCount::new(work)).bench(|| {
        RuntimeParams::new(&v, divan::black_box(&vals))
            .unwrap()
            .planned()
            .values[1]
    });
}

fn main() {
    divan::main();
}
