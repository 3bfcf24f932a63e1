//! Assembler, verifier and disassembler speed on the bundled examples and on a large generated
//! module. Run: `cargo bench -p ptovm-assembler --bench asm`.

use ptovm_assembler::{assemble, disassemble, Options};

fn example(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

/// A module with `n` task statements in nested loops: about 10 KB of text per 100 tasks.
fn large(n: usize) -> String {
    let mut s = String::from("@tensor A: f16[N, 64, 64]\n@kernel k(i, j): cube(in a, out b)\n@workload big(%n: dense_dyn(N)) {\n");
    for t in 0..n {
        s += &format!(
            "  parallel_for i{t} in %n {{ for_each j in dense[64] {{ task @k(i{t} * 64 + j, {t}) resources(A[i{t}, j, 0 : 8], A[(i{t} + 1) % N, j]) }} }}\n"
        );
    }
    s += "}\n@schedule s for big { dispatch = affinity(j) }\n";
    s
}

#[divan::bench(args = ["attention.pto", "llama_layer.pto", "flash_decode.pto", "moe.pto", "control.pto"])]
fn asm_example(b: divan::Bencher, name: &str) {
    let src = example(name);
    b.bench(|| {
        assemble(name, divan::black_box(&src), &Options::default())
            .unwrap()
            .bytes
            .len()
    });
}

#[divan::bench(args = [100, 1000])]
fn asm_large(b: divan::Bencher, n: usize) {
    let src = large(n);
    b.counter(divan::counter::BytesCount::new(src.len()))
        .bench(|| {
            assemble("big.pto", divan::black_box(&src), &Options::default())
                .unwrap()
                .bytes
                .len()
        });
}

#[divan::bench(args = ["llama_layer.pto", "large-1000"])]
fn verify(b: divan::Bencher, name: &str) {
    let src = if name == "large-1000" {
        large(1000)
    } else {
        example(name)
    };
    let bytes = assemble(name, &src, &Options::default()).unwrap().bytes;
    b.counter(divan::counter::BytesCount::new(bytes.len()))
        .bench(|| ptovm_vm::verify(divan::black_box(&bytes)).is_ok());
}

#[divan::bench]
fn disasm_llama(b: divan::Bencher) {
    let bytes = assemble("l", &example("llama_layer.pto"), &Options::default())
        .unwrap()
        .bytes;
    b.bench(|| disassemble(divan::black_box(&bytes)).unwrap().len());
}

fn main() {
    divan::main();
}
