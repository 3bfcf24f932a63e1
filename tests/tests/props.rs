//! Property tests: generated modules assemble to bytes that verify and round-trip exactly; no
//! byte string, mutation or text can make the verifier or the assembler panic.

use proptest::prelude::*;
use ptovm_assembler::{assemble, disassemble, Module, Options};
use ptovm_tests::Gen;
use ptovm_vm::verify;

fn assemble_ok(src: &str) -> ptovm_assembler::Output {
    assemble("gen.pto", src, &Options::default())
        .unwrap_or_else(|e| panic!("{e}\n--- source ---\n{src}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Generated modules lower to bytes that verify; decode(encode(m)) == m;
    /// asm(disasm(b)) == b; assembly is deterministic.
    #[test]
    fn generated_modules_round_trip(seed in any::<u64>()) {
        let src = Gen::new(seed).module();
        let out = assemble_ok(&src);
        let v = verify(&out.bytes).unwrap_or_else(|e| panic!("{e}\n{src}"));
        prop_assert_eq!(&Module::decode(&v), &out.module);
        prop_assert_eq!(out.module.encode(), out.bytes.clone());
        let text = disassemble(&out.bytes).unwrap();
        let again = assemble("listing", &text, &Options::default()).unwrap();
        prop_assert_eq!(&again.bytes, &out.bytes);
        prop_assert_eq!(assemble_ok(&src).bytes, out.bytes);
    }

    /// Arbitrary bytes never panic the verifier.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = verify(&bytes);
    }

    /// Arbitrary bytes behind a well-formed header (right magic, version, length and
    /// checksum) reach the section checks and never panic; whatever verifies round-trips.
    #[test]
    fn arbitrary_sections_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600), counts in proptest::array::uniform8(0u32..12)) {
        let mut b = vec![0u8; 64];
        b[0..4].copy_from_slice(&ptovm_vm::MAGIC.to_le_bytes());
        b[4] = 1;
        for (i, c) in counts.iter().enumerate() {
            let off = [8, 12, 16, 20, 32, 36, 40, 44][i];
            b[off..off + 4].copy_from_slice(&c.to_le_bytes());
        }
        b.extend_from_slice(&body);
        ptovm_vm::format::seal(&mut b);
        roundtrips_if_valid(&b);
    }

    /// Mutated valid programs (checksum repaired, so the mutation reaches the deep checks)
    /// never panic the verifier, and any mutant that verifies still round-trips exactly.
    #[test]
    fn mutated_programs_never_panic(seed in any::<u64>(), edits in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..6)) {
        let src = Gen::new(seed).module();
        let mut b = assemble_ok(&src).bytes;
        for (pos, val) in edits {
            let i = 32 + pos as usize % (b.len() - 32); // keep magic/version/len/checksum
            b[i] = val;
        }
        let sum = ptovm_vm::format::checksum(&b);
        b[28..32].copy_from_slice(&sum.to_le_bytes());
        roundtrips_if_valid(&b);
    }

    /// Arbitrary text never panics the assembler; every error has a location inside the text.
    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,200}") {
        check_text(&src);
    }

    /// Text made of the language's own tokens, shuffled, never panics either.
    #[test]
    fn token_soup_never_panics(toks in proptest::collection::vec(prop::sample::select(vec![
        "@workload", "@schedule", "@tensor", "@kernel", "w", "(", ")", "{", "}", "[", "]", ",", ":", ";", "=",
        "%", "parallel_for", "for_each", "select", "cond", "else", "combine", "sequential", "dispatch", "task",
        "@", "k", "resources", "in", "dense", "dense_dyn", "ragged", "sparse", "1", "99999999999", "+", "-",
        "*", "&&", "<=", "x", "for", "affinity", "threshold", "round_robin", "cube", "vector", "out", "f16",
        ".ptow", ".code", "\n", "HALT", "0",
    ]), 0..80)) {
        check_text(&toks.join(" "));
    }

    /// Mutations of a valid module (characters deleted, inserted, swapped) never panic.
    #[test]
    fn mutated_text_never_panics(seed in any::<u64>(), edits in proptest::collection::vec((any::<u16>(), any::<char>(), 0u8..3), 1..8)) {
        let mut chars: Vec<char> = Gen::new(seed).module().chars().collect();
        for (pos, c, kind) in edits {
            let i = pos as usize % (chars.len() + 1);
            match kind {
                0 if i < chars.len() => { chars.remove(i); }
                1 => chars.insert(i, c),
                _ if i < chars.len() => chars[i] = c,
                _ => {}
            }
        }
        check_text(&chars.into_iter().collect::<String>());
    }
}

/// Whatever the verifier accepts disassembles to a listing that assembles back to the same bytes.
fn roundtrips_if_valid(b: &[u8]) {
    if verify(b).is_ok() {
        let text = disassemble(b).unwrap();
        let again = assemble("listing", &text, &Options::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(again.bytes, b);
    }
}

fn check_text(src: &str) {
    match assemble("fuzz.pto", src, &Options::default()) {
        Ok(out) => {
            verify(&out.bytes).expect("assembled output verifies");
        }
        Err(e) => {
            let d = e.diag();
            let lines = src.split('\n').count();
            assert!(
                d.line >= 1 && d.line <= lines,
                "line {} of {lines}: {d}",
                d.line
            );
            assert!(
                d.col >= 1 && d.col <= d.source_line.chars().count() + 1,
                "{d}"
            );
            assert!(d.width >= 1);
            assert!(!d.message.is_empty());
        }
    }
}

#[test]
fn generator_covers_the_language() {
    // The generator reaches every statement kind and axis kind within a few hundred seeds.
    let mut seen = std::collections::HashSet::new();
    let mut plans = 0;
    for seed in 0..300 {
        let out = assemble_ok(&Gen::new(seed).module());
        for r in out.module.code.iter().chain(out.module.axes.iter()) {
            seen.insert(r.opcode);
        }
        plans += !out.module.plans.is_empty() as u32;
    }
    // Values planned at launch (a sum and a search).
    assert!(plans > 30, "{plans} modules with planned values");
    for op in ptovm_vm::Opcode::ALL {
        if *op != ptovm_vm::Opcode::NOP {
            assert!(
                seen.contains(&(*op as u8)),
                "generator never produced {op:?}"
            );
        }
    }
}

#[test]
fn generator_covers_calls_streams_and_timing() {
    // The differential and scheduling tests see `call`, `stream_by` and every timing.
    let mut seen = std::collections::HashSet::new();
    for seed in 0..300 {
        let src = Gen::runnable(seed).module();
        assemble_ok(&src);
        for what in [
            "call @g(",
            "stream_by",
            "batched(",
            "interleaved(",
            "rate_limit(",
        ] {
            if src.contains(what) {
                seen.insert(what);
            }
        }
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
}
