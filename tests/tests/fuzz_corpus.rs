//! The fuzz targets' invariants (`ptovm_tests::fuzz`) on stable, without a fuzzer: over the
//! checked-in seed corpus (`fuzz/corpus/<target>/`), every saved regression input
//! (`fuzz/regressions/<target>/`: a crash the fuzzers found becomes a file there), and
//! deterministic mutations of them — truncations at every length for the bytecode and the text,
//! single-bit flips, and random inputs — so the checks themselves run in every test run.

use std::path::{Path, PathBuf};

use ptovm_tests::fuzz::{check, TARGETS};
use ptovm_tests::Gen;

fn inputs(dir: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(dir)
        .join(target);
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != ".keep"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    out.sort();
    out
}

fn run(target: &str, label: &str, data: &[u8]) {
    if let Err(e) = check(target, data) {
        panic!("fuzz target {target} on {label}: {e}");
    }
}

#[test]
fn the_seed_corpus_and_the_regressions_pass() {
    for t in TARGETS {
        let corpus = inputs("corpus", t);
        assert!(!corpus.is_empty(), "no seed corpus for {t}");
        for (p, b) in corpus.iter().chain(&inputs("regressions", t)) {
            run(t, &p.display().to_string(), b);
        }
    }
}

#[test]
fn truncated_and_flipped_corpus_inputs_pass() {
    let mut g = Gen::new(0xF022);
    for t in ["bytes", "text"] {
        for (p, b) in inputs("corpus", t) {
            let label = p.display().to_string();
            // Every truncation: each section boundary among them.
            for len in 0..b.len() {
                run(t, &format!("{label}[..{len}]"), &b[..len]);
            }
            for _ in 0..300 {
                let mut m = b.clone();
                let bit = g.below(8 * m.len() as u64) as usize;
                m[bit / 8] ^= 1 << (bit % 8);
                run(t, &format!("{label} with bit {bit} flipped"), &m);
            }
        }
    }
}

#[test]
fn random_inputs_pass() {
    let mut g = Gen::new(0xF023);
    for t in TARGETS {
        for k in 0..150 {
            let len = g.below(300) as usize;
            let data: Vec<u8> = (0..len).map(|_| g.below(256) as u8).collect();
            run(t, &format!("random input {k} ({len} bytes)"), &data);
        }
    }
}
