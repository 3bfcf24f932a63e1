//! Memory a launch of a bundled example needs on the device:
//! `cargo run -p ptovm-device --example layout -- [EXAMPLE.pto] [AICPUS] [WINDOW]`
//! (defaults: llama_layer.pto, 6 AICPUs, the program's window; 24 cube + 48 vector cores).
use ptovm_assembler::{assemble, Options};
use ptovm_device::{ptovm_layout, PtovmLaunch, PtovmSizes, PTOVM_OK};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let name = a.first().map_or("llama_layer.pto", String::as_str);
    let num = |i: usize| a.get(i).map_or(0, |x| x.parse().expect("a number"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    let src = std::fs::read_to_string(&path).expect("the example");
    let code = assemble(name, &src, &Options::default())
        .expect("it assembles")
        .bytes;
    let launch = PtovmLaunch {
        aicpus: if a.len() > 1 { num(1) } else { 6 },
        window: num(2),
        cube_cores: 24,
        vector_cores: 48,
        window_mode: -1,
        exact_deps: 0,
        ..Default::default()
    };
    let mut sizes = PtovmSizes::default();
    let mut err = [0u8; 256];
    // SAFETY: every pointer is to a live local of the right size.
    let rc = unsafe {
        ptovm_layout(
            code.as_ptr(),
            code.len(),
            &launch,
            &mut sizes,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, PTOVM_OK, "{}", String::from_utf8_lossy(&err));
    let n = sizes.aicpus as u64;
    println!(
        "{name}: {} bytes of bytecode; {} AICPUs, {} slots each, {} cores: shared region {} bytes ({:.2} MiB), each instance {} bytes ({:.1} KiB), {:.2} MiB in all",
        code.len(),
        n,
        sizes.slots,
        sizes.cores,
        sizes.shared_bytes,
        sizes.shared_bytes as f64 / 1048576.0,
        sizes.instance_bytes,
        sizes.instance_bytes as f64 / 1024.0,
        (sizes.shared_bytes + n * sizes.instance_bytes) as f64 / 1048576.0
    );
}
