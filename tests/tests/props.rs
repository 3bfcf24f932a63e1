//! Property tests: generated modules assemble to bytes that verify and round-trip exactly; no
//! byte string, mutation or text can make the verifier or the assembler panic.

use proptest::prelude::*;
use ptovm_assembler::{assemble, disassemble, Module, Options};
use ptovm_vm::verify;

/// A small deterministic generator (SplitMix64), so a failing case prints as its seed.
struct Gen {
    s: u64,
    vars: Vec<String>,
    next_var: usize,
    depth: usize,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            s: seed,
            vars: vec![],
            next_var: 0,
            depth: 0,
        }
    }
    fn next(&mut self) -> u64 {
        self.s = self.s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }

    fn expr(&mut self, d: u32) -> String {
        let leaf = d == 0 || self.below(3) == 0;
        if leaf {
            return match self.below(4) {
                0 if !self.vars.is_empty() => {
                    let i = self.below(self.vars.len() as u64) as usize;
                    self.vars[i].clone()
                }
                1 => self.pick(&["p0", "p1", "p2"]).to_string(),
                2 if !self.vars.is_empty() => {
                    let i = self.below(self.vars.len() as u64) as usize;
                    format!("a0[{}]", self.vars[i])
                }
                _ => self.below(1 << 31).to_string(),
            };
        }
        match self.below(5) {
            0 => format!("-{}", self.expr(d - 1)),
            1 => format!(
                "{}({}, {})",
                self.pick(&["min", "max", "ceil_div"]),
                self.expr(d - 1),
                self.expr(d - 1)
            ),
            2 => format!("!({})", self.expr(d - 1)),
            _ => {
                let op = self.pick(&[
                    "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||",
                ]);
                format!("({} {op} {})", self.expr(d - 1), self.expr(d - 1))
            }
        }
    }

    fn resource(&mut self) -> String {
        let t = self.pick(&["T0", "T1", "T2", "U0", "U1"]);
        let rank = match t {
            "T0" => 1,
            "T1" => 2,
            "T2" => 3,
            _ => 1 + self.below(3) as usize,
        };
        let n = self.below(rank as u64 + 1) as usize;
        if n == 0 {
            return t.to_string();
        }
        let dims: Vec<String> = (0..n)
            .map(|_| {
                if self.below(3) == 0 {
                    format!("{} : {}", self.expr(1), self.expr(1))
                } else {
                    self.expr(1)
                }
            })
            .collect();
        format!("{t}[{}]", dims.join(", "))
    }

    fn task(&mut self) -> String {
        // k0(a): vector(in x); k1(a, b): cube(in x, out y); k2: undeclared.
        match self.below(3) {
            0 => format!("task @k0({}) resources({})", self.expr(2), self.resource()),
            1 => format!(
                "task @k1({}, {}) resources({}, {})",
                self.expr(1),
                self.expr(2),
                self.resource(),
                self.resource()
            ),
            _ => {
                let args: Vec<String> = (0..self.below(4)).map(|_| self.expr(2)).collect();
                let res: Vec<String> = (0..self.below(4)).map(|_| self.resource()).collect();
                format!(
                    "task @k2({}) resources({})",
                    args.join(", "),
                    res.join(", ")
                )
            }
        }
    }

    fn block(&mut self, n: u64) -> String {
        let k = 1 + self.below(n);
        (0..k).map(|_| self.stmt()).collect::<Vec<_>>().join("\n")
    }

    fn stmt(&mut self) -> String {
        if self.depth >= 5 {
            return self.task();
        }
        self.depth += 1;
        let s = match self.below(9) {
            0..=2 => {
                let v = format!("v{}", self.next_var);
                self.next_var += 1;
                let axis = match self.below(4) {
                    0 => format!("dense[{}]", self.below(9)),
                    1 => "dense_dyn(p1)".to_string(),
                    2 if !self.vars.is_empty() => {
                        format!("ragged({}, a1)", self.vars[self.vars.len() - 1])
                    }
                    _ => "%outer".to_string(),
                };
                let kw = self.pick(&["parallel_for", "for_each"]);
                let sparse = !self.vars.is_empty() && self.below(4) == 0;
                let head = if sparse {
                    format!("select {v} in sparse({}, a2, a3)", self.vars[0])
                } else {
                    format!("{kw} {v} in {axis}")
                };
                self.vars.push(v);
                let body = self.block(3);
                self.vars.pop();
                format!("{head} {{\n{body}\n}}")
            }
            3 => {
                let c = self.expr(3);
                let t = self.block(2);
                match self.below(3) {
                    0 => format!("cond {c} {{\n{t}\n}}"),
                    1 => format!("cond {c} {{\n{t}\n}} else {{\n{}\n}}", self.block(2)),
                    _ => {
                        let c2 = self.expr(2);
                        format!(
                            "cond {c} {{\n{t}\n}} else cond {c2} {{\n{}\n}}",
                            self.block(2)
                        )
                    }
                }
            }
            4 => format!("combine {{\n{}\n}}", self.block(3)),
            5 => format!("sequential {{\n{}\n}}", self.block(3)),
            6 if !self.vars.is_empty() => {
                let i = self.below(self.vars.len() as u64) as usize;
                let v = self.vars[i].clone();
                let p = match self.below(4) {
                    0 => format!("affinity({v})"),
                    1 => format!("hash({v} * 7 + 1)"),
                    2 => format!("static({v})"),
                    _ => "round_robin".to_string(),
                };
                format!("dispatch {p} {{\n{}\n}}", self.block(2))
            }
            7 => "".to_string(),
            _ => self.task(),
        };
        self.depth -= 1;
        s
    }

    /// A whole module. Every task sits inside the loop `top`, so the schedule may read it.
    fn module(&mut self) -> String {
        let mut m = String::from(
            "@tensor T0: f16[p0]\n@tensor T1: f32[8, p1]\n@tensor T2: bf16[2, 3, 4]\n@kernel k0(a): vector(in x)\n@kernel k1(a, b): cube(in x, out y)\n",
        );
        m += "@workload w(%outer: dense[3], %dyn: dense_dyn(p2)) {\n  parallel_for top in %dyn {\n";
        self.vars.push("top".into());
        let body = self.block(4);
        self.vars.clear();
        m += &body;
        m += "\n  }\n}\n";
        let dispatch = match self.below(6) {
            0 => "round_robin(3)".to_string(),
            1 => "affinity(top)".to_string(),
            2 => "hash(top + 1)".to_string(),
            3 => "static(top)".to_string(),
            4 => "work_steal".to_string(),
            _ => "threshold(p2 * 2, 4: static(top), 100: affinity(top), hash(top))".to_string(),
        };
        m += &format!(
            "@schedule s for w {{\n  dispatch = {dispatch}\n  streams = {}\n",
            1 + self.below(4)
        );
        if self.below(2) == 0 {
            m += &format!(
                "  timing = {}\n",
                self.pick(&["immediate", "batched(4)", "interleaved(2)", "rate_limit(9)"])
            );
        }
        if self.below(2) == 0 {
            m += &format!(
                "  window = {}\n  window_mode = {}\n",
                1 + self.below(2048),
                self.pick(&["stall", "abort", "benchmark"])
            );
        }
        if self.below(2) == 0 {
            m += &format!(
                "  start = {}\n",
                self.pick(&["immediate", "after_orchestration", "threshold(16)"])
            );
        }
        m += "}\n";
        m
    }
}

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
        let n = b.len() as u32;
        b[24..28].copy_from_slice(&n.to_le_bytes());
        let sum = ptovm_vm::format::checksum(&b);
        b[28..32].copy_from_slice(&sum.to_le_bytes());
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
    for seed in 0..300 {
        let out = assemble_ok(&Gen::new(seed).module());
        for r in out.module.code.iter().chain(out.module.axes.iter()) {
            seen.insert(r.opcode);
        }
    }
    for op in ptovm_vm::Opcode::ALL {
        if *op != ptovm_vm::Opcode::NOP {
            assert!(
                seen.contains(&(*op as u8)),
                "generator never produced {op:?}"
            );
        }
    }
}
