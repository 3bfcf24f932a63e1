//! Tier sets (`@tiers`, spec/pto.md §4.5; PTO-WSP's `PTO_TIER_DEF`): the first tier whose
//! condition holds picks the kernel, else the default; boundaries at, just below and just above
//! each threshold; the tier reaches the descriptor; every AICPU count agrees with the
//! reference; errors and warnings at assembly.

use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{expand_aicpu, reference_expand};
use ptovm_tests::{assemble_text as asm, named_values as values};
use ptovm_vm::desc::{self, Binding};
use ptovm_vm::sync::AtomicU64;
use ptovm_vm::{verify, RuntimeParams};

const DECODE: &str = "
@param B = 1
@param len = [1]
@param big = 65536
@tensor out: f32[B]
@kernel d2k(b, n): vector(out o)
@kernel d8k(b, n): vector(out o)
@kernel d64k(b, n): cube(out o)
@kernel dbig(b, n): cube(out o)
@tiers decode(n) {
  n <= 2048: d2k
  n <= 8192: d8k
  n <= big: d64k
  default: dbig
}
@workload w(%r: dense_dyn(B)) {
  parallel_for b in %r { task @decode[len[b]](b, len[b]) resources(out[b]) }
}
@schedule s for w { dispatch = affinity(b) }
";

/// `(kernel name, tier)` of each task for the lengths `lens`, on `n` AICPUs, checked against
/// the reference.
fn chosen(src: &str, lens: &[u32], n: u32) -> Vec<(String, u8)> {
    let (bytes, m) = asm(src);
    let v = verify(&bytes).unwrap();
    let given = [("B", vec![lens.len() as u32]), ("len", lens.to_vec())];
    let vals = values(&m, &given);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let reference = reference_expand(&v, &p, n, 1 << 12).unwrap();
    let mut all = vec![];
    for aicpu in 0..n {
        all.extend(expand_aicpu(v, p, aicpu, n, 1 << 12, 64).unwrap().tasks);
    }
    all.sort_by_key(|t| t.id);
    assert_eq!(all, reference);
    reference
        .iter()
        .map(|t| (m.kernels[t.kernel as usize].name.clone(), t.tier))
        .collect()
}

#[test]
fn the_first_matching_tier_wins_at_every_boundary() {
    let lens = [
        0,
        2047,
        2048,
        2049,
        8191,
        8192,
        8193,
        65535,
        65536,
        65537,
        1 << 31,
    ];
    let want = [
        ("d2k", 0),
        ("d2k", 0),
        ("d2k", 0),
        ("d8k", 1),
        ("d8k", 1),
        ("d8k", 1),
        ("d64k", 2),
        ("d64k", 2),
        ("d64k", 2),
        ("dbig", 3),
        ("dbig", 3),
    ];
    for n in [1, 2, 6] {
        let got = chosen(DECODE, &lens, n);
        let got: Vec<(&str, u8)> = got.iter().map(|(k, t)| (k.as_str(), *t)).collect();
        assert_eq!(got, want, "{n} AICPUs");
    }
}

#[test]
fn the_tier_reaches_the_descriptor() {
    let (bytes, m) = asm(DECODE);
    let v = verify(&bytes).unwrap();
    let given = [("B", vec![3]), ("len", vec![10, 5000, 100000])];
    let vals = values(&m, &given);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let bindings: Vec<Binding> = v
        .tensors()
        .iter()
        .map(|t| Binding::declared(t, &p))
        .collect();
    let mut it = ptovm_vm::Interpreter::new(v, p, 0, 1).unwrap();
    let words: Vec<AtomicU64> = (0..desc::DESC_WORDS).map(|_| AtomicU64::new(0)).collect();
    let mut seen = vec![];
    let mut sink = |t: &ptovm_vm::Task| {
        assert!(desc::write(&words, t, &bindings));
        let d = desc::read(&words);
        seen.push((d.kernel, d.tier, d.pool, d.params[1]));
        true
    };
    it.run_to_end(&mut SinkFn(&mut sink)).unwrap();
    // d2k (kernel 0, vector), d8k (kernel 1, vector), dbig (kernel 3, cube).
    assert_eq!(seen, [(0, 0, 1, 10), (1, 1, 1, 5000), (3, 3, 0, 100000)]);
}

struct SinkFn<'a, F: FnMut(&ptovm_vm::Task) -> bool>(&'a mut F);
impl<F: FnMut(&ptovm_vm::Task) -> bool> ptovm_vm::Sink for SinkFn<'_, F> {
    fn task(&mut self, t: &ptovm_vm::Task) -> bool {
        (self.0)(t)
    }
}

#[test]
fn conditions_read_runtime_parameters_and_any_selector() {
    // The third threshold is a runtime parameter; the selector an expression of two loops.
    let src = DECODE.replace(
        "task @decode[len[b]](b, len[b])",
        "task @decode[len[b] * 1000 + b](b, len[b])",
    );
    let got = chosen(&src, &[2, 8, 60], 2);
    let got: Vec<(&str, u8)> = got.iter().map(|(k, t)| (k.as_str(), *t)).collect();
    assert_eq!(got, [("d2k", 0), ("d8k", 1), ("d64k", 2)]);
    let (bytes, m) = asm(DECODE);
    let v = verify(&bytes).unwrap();
    let given = [("B", vec![1]), ("len", vec![70000]), ("big", vec![100000])];
    let vals = values(&m, &given);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let t = &reference_expand(&v, &p, 1, 16).unwrap()[0];
    assert_eq!((t.kernel, t.tier), (2, 2), "70000 <= big");
}

fn diagnostics(src: &str) -> Result<Vec<String>, String> {
    match assemble("t.pto", src, &Options::default()) {
        Ok(out) => Ok(out.warnings.iter().map(|d| d.message.clone()).collect()),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn assembly_refuses_incomplete_or_mismatched_tier_sets() {
    let with = |tiers: &str, task: &str| {
        format!(
            "@tensor T: f32[4]\n@kernel a(x): vector(in t)\n@kernel b(x): cube(in t)\n@kernel c(x, y): vector(in t)\n@kernel d(x): vector(out t)\n{tiers}\n@workload w(%r: dense[2]) {{ parallel_for i in %r {{ {task} }} }}"
        )
    };
    let set = "@tiers s(v) { v < 10: a\n default: b }";
    for (src, says) in [
        (
            with("@tiers s(v) { v < 10: a }", "task @s[i](i) resources(T)"),
            "tier set `s` has no default",
        ),
        (
            with("@tiers s(v) { v < 10: a\n default: c }", "task @s[i](i) resources(T)"),
            "kernel `c` takes 2 parameter(s)",
        ),
        (
            with("@tiers s(v) { v < 10: a\n default: d }", "task @s[i](i) resources(T)"),
            "resources (out)",
        ),
        (
            with("@tiers s(v) { v < 10: a\n default: zz }", "task @s[i](i) resources(T)"),
            "kernel `zz` of tier set `s` is not declared",
        ),
        (
            with("@tiers a(v) { default: b }", "task @b(i) resources(T)"),
            "`a` is already a kernel or a tier set",
        ),
        (with(set, "task @s(i) resources(T)"), "`s` is a tier set: give the value"),
        (with(set, "task @a[i](i) resources(T)"), "`a` is a kernel, not a tier set"),
        (with(set, "task @q[i](i) resources(T)"), "unknown tier set `q`"),
        (
            with("@tiers s(v) { v < i: a\n default: b }", "task @s[i](i) resources(T)"),
            "`i` is a loop variable; a tier's condition reads only",
        ),
        (
            with(
                "@tiers s(v) { v < 1: a\n v < 2: a\n v < 3: a\n v < 4: a\n v < 5: a\n v < 6: a\n v < 7: a\n v < 8: a\n default: b }",
                "task @s[i](i) resources(T)",
            ),
            "more than 8 tiers",
        ),
        (
            with(set, "task @s[sum(j in 0 .. 2: j)](i) resources(T)"),
            "may only compute a `@plan` value",
        ),
        (with("@tiers s(v) { default: b\n v < 1: a }", ""), "the default is the last tier"),
    ] {
        let e = diagnostics(&src).expect_err(&src);
        assert!(e.contains(says), "{src}\n→ {e}");
    }
    // Unreachable tiers and defaults are warned of; overlapping first-match tiers are not.
    let warns = |tiers: &str| diagnostics(&with(tiers, "task @s[i](i) resources(T)")).unwrap();
    assert_eq!(
        warns("@tiers s(v) { v <= 2048: a\n v <= 8192: a\n default: b }"),
        Vec::<String>::new()
    );
    let w = warns("@tiers s(v) { v <= 100: a\n 50 >= v: a\n default: b }");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("tier 1 of `s` (a) is unreachable"), "{w:?}");
    let w = warns("@tiers s(v) { v < 10: a\n v >= 10: b\n default: b }");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("the default of `s` (b) is unreachable"),
        "{w:?}"
    );
    // A condition that is not a plain comparison is not judged.
    assert!(warns("@tiers s(v) { v % 2 == 0: a\n v % 2 == 1: b\n default: b }").is_empty());
}

#[test]
fn tier_sets_survive_the_listing_round_trip() {
    let (bytes, _) = asm(DECODE);
    let listing = ptovm_assembler::disassemble(&bytes).unwrap();
    assert!(listing.contains("tier=3"), "{listing}");
    let again = assemble("t.ptol", &listing, &Options::default()).unwrap();
    assert_eq!(again.bytes, bytes);
}
