//! Task Bench's random draws (StanfordLegion/task-bench, `core/core_random.cc`): whether a
//! `random_nearest` point depends on a neighbour is a hash of the graph, the radix, the
//! dependence set and the two points, compared with the fraction of dependencies kept. The
//! `examples/taskbench/random_nearest.pto` module takes the draws as a runtime array (`keep`),
//! which [`random_nearest_keep`] computes (`cargo run -p ptovm-tests --example
//! random_nearest_keep -- W [P]` prints it for `--param keep=…`).

/// Task Bench's dependence patterns that have a module in `examples/taskbench/` (besides
/// `chain.pto`, one dependency chain).
pub const PATTERNS: [&str; 11] = [
    "trivial",
    "no_comm",
    "stencil_1d",
    "stencil_1d_periodic",
    "dom",
    "tree",
    "fft",
    "all_to_all",
    "nearest",
    "spread",
    "random_nearest",
];

/// Task Bench's `random_uniform` of five `long`s: MurmurHash3 x64-128 of their 40
/// little-endian bytes with seed 1234567, the first 64-bit word of the hash over 2⁶⁴.
pub fn random_uniform(values: [i64; 5]) -> f64 {
    let mut bytes = Vec::with_capacity(40);
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    let hash = murmur3::murmur3_x64_128(&mut bytes.as_slice(), 1_234_567)
        .expect("hashing a byte slice cannot fail");
    (hash as u64) as f64 * 2f64.powi(-64)
}

/// Task Bench's default fraction of `random_nearest` dependencies kept (`-fraction`).
pub const FRACTION: f64 = 0.25;

/// Whether point `point` of dependence set `dset` depends on point `i` of the previous
/// timestep in Task Bench's `random_nearest` of graph 0 with radix `radix` and fraction
/// `fraction` (`TaskGraph::dependencies`): always on itself, on another point of its
/// neighbourhood when the draw is below the fraction.
pub fn random_nearest_includes(radix: i64, fraction: f64, dset: i64, i: i64, point: i64) -> bool {
    random_uniform([0, radix, dset, i, point]) < fraction || (radix > 0 && i == point)
}

/// `random_nearest.pto`'s `keep` array for width `w` and period `period` (radix 3, the
/// default fraction): `keep[(dset · w + point) · 2]` is 1 when `point` depends on `point − 1`,
/// `keep[… + 1]` when on `point + 1` (0 for a neighbour outside `0..w`).
pub fn random_nearest_keep(w: u32, period: u32) -> Vec<u32> {
    let (w, period) = (i64::from(w), i64::from(period));
    let mut keep = Vec::with_capacity((2 * w * period) as usize);
    for dset in 0..period {
        for point in 0..w {
            for i in [point - 1, point + 1] {
                let inside = (0..w).contains(&i);
                keep.push(u32::from(
                    inside && random_nearest_includes(3, FRACTION, dset, i, point),
                ));
            }
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from a second implementation of MurmurHash3 x64-128 (Python's `mmh3`,
    /// `hash64(bytes, 1234567, x64arch=True)`), so the crate and the byte layout are checked.
    #[test]
    fn the_draw_is_task_benchs_hash() {
        assert_eq!(
            random_uniform([0, 3, 0, 1, 0]),
            6133023968286902424u64 as f64 * 2f64.powi(-64)
        );
        assert!((random_uniform([0, 3, 0, 1, 0]) - 0.332_471_895_516_116_44).abs() < 1e-15);
    }

    #[test]
    fn about_a_quarter_of_the_neighbours_are_kept() {
        let keep = random_nearest_keep(1000, 3);
        let kept = keep.iter().filter(|&&k| k == 1).count() as f64;
        let share = kept / (2.0 * 1000.0 * 3.0 - 6.0);
        assert!((0.22..0.28).contains(&share), "{share}");
    }
}
