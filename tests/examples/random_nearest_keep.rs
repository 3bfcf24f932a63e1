//! Prints the `keep` array of `examples/taskbench/random_nearest.pto` for width W and period P
//! (default 3): Task Bench's random draws of graph 0, radix 3, fraction 0.25, for
//! `ptovm run examples/taskbench/random_nearest.pto --param W=W --param P=P --param keep=…`.
//! Usage: `cargo run -q -p ptovm-tests --example random_nearest_keep -- W [P]`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: Option<u32>| -> u32 {
        match args.get(i) {
            Some(a) => a.parse().unwrap_or_else(|_| {
                eprintln!(
                    "error: {a:?} is not a positive integer (usage: random_nearest_keep W [P])"
                );
                std::process::exit(2)
            }),
            None => default.unwrap_or_else(|| {
                eprintln!("usage: random_nearest_keep W [P]");
                std::process::exit(2)
            }),
        }
    };
    let (w, period) = (arg(0, None), arg(1, Some(3)));
    if w == 0 || period == 0 {
        eprintln!("error: W and P must be at least 1");
        std::process::exit(2);
    }
    let keep = ptovm_tests::taskbench::random_nearest_keep(w, period);
    let text: Vec<String> = keep.iter().map(u32::to_string).collect();
    println!("{}", text.join(","));
}
