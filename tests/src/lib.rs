//! Test support shared by the cross-crate tests: a generator of random `.pto` modules and the
//! runtime parameters to run them, the bundled examples with named parameters, and the check of
//! a run (simulator, C ABI, qemu harness) against the reference expander.

use ptovm_assembler::Module;
use ptovm_vm::{ParamKind, Value};

pub mod desc;
pub mod device;
pub mod fuzz;
pub mod sched;
pub mod taskbench;

/// A small deterministic generator (SplitMix64), so a failing case prints as its seed — or,
/// for fuzzing, driven by the fuzzer's bytes ([`Gen::from_bytes`]), so that its mutations steer
/// the choices.
pub struct Gen {
    s: u64,
    /// Byte-driven mode: the input and the position in it.
    bytes: Option<(Vec<u8>, usize)>,
    vars: Vec<String>,
    next_var: usize,
    depth: usize,
    /// Runnable mode: small constants, no division by a variable expression, regions that stay
    /// inside the declared tensors, so most generated programs expand without runtime errors.
    runnable: bool,
    /// The module has the workload `g` that statements may `call`; whether `g`'s body is being
    /// generated (it calls nothing: a call cycle is an error).
    callee: bool,
    in_callee: bool,
    /// The loop variables in scope that a `tile(…)` loop binds (`tile_start`, `tile_end`).
    tiles: Vec<String>,
    /// The module plans `q0` and `q1` (`@plan`), which expressions may read.
    plans: bool,
    /// Past the module's `wait r0 <= 6`: expressions may read the runtime array `r0`.
    read_back: bool,
}

impl Gen {
    /// A generator of arbitrary valid modules.
    pub fn new(seed: u64) -> Gen {
        Gen {
            s: seed,
            bytes: None,
            vars: vec![],
            next_var: 0,
            depth: 0,
            runnable: false,
            callee: false,
            in_callee: false,
            tiles: vec![],
            plans: false,
            read_back: false,
        }
    }

    /// A generator of modules that usually run without runtime errors with the parameters of
    /// [`Gen::params`].
    pub fn runnable(seed: u64) -> Gen {
        Gen {
            runnable: true,
            ..Gen::new(seed)
        }
    }
    /// A generator whose every choice is the next byte of `data` (0 once it is used up, which
    /// picks the first alternative: the simplest, so generation always ends). `runnable` as in
    /// [`Gen::runnable`].
    pub fn from_bytes(data: &[u8], runnable: bool) -> Gen {
        Gen {
            bytes: Some((data.to_vec(), 0)),
            runnable,
            ..Gen::new(0)
        }
    }

    /// The next pseudo-random number.
    pub fn next_u64(&mut self) -> u64 {
        if let Some((data, at)) = &mut self.bytes {
            let b = data.get(*at).copied().unwrap_or(0);
            *at += 1;
            return b as u64;
        }
        self.s = self.s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }

    fn expr(&mut self, d: u32) -> String {
        let leaf = d == 0 || self.below(3) == 0;
        if leaf {
            // A tile bound copies its loop's size and extent into the expression (spec/pto.md
            // §4): only near the top of one, so it stays within the evaluation stack.
            if d >= 2 && !self.tiles.is_empty() && self.below(3) == 0 {
                let i = self.below(self.tiles.len() as u64) as usize;
                let t = self.tiles[i].clone();
                return format!("{}({t})", self.pick(&["tile_start", "tile_end"]));
            }
            if self.plans && self.below(6) == 0 {
                return self.pick(&["q0", "q1"]).to_string();
            }
            return match self.below(4) {
                0 if !self.vars.is_empty() => {
                    let i = self.below(self.vars.len() as u64) as usize;
                    self.vars[i].clone()
                }
                1 => self.pick(&["p0", "p1", "p2"]).to_string(),
                2 if !self.vars.is_empty() => {
                    let i = self.below(self.vars.len() as u64) as usize;
                    let array = if self.read_back && self.below(2) == 0 {
                        "r0"
                    } else {
                        "a0"
                    };
                    format!("{array}[{}]", self.vars[i])
                }
                _ if self.runnable => self.below(8).to_string(),
                _ => self.below(1 << 31).to_string(),
            };
        }
        if self.runnable {
            // Division only by positive constants: no division by zero.
            return match self.below(6) {
                0 => format!("-{}", self.expr(d - 1)),
                1 => format!(
                    "{}({}, {})",
                    self.pick(&["min", "max"]),
                    self.expr(d - 1),
                    self.expr(d - 1)
                ),
                2 => {
                    let (a, k) = (self.expr(d - 1), 1 + self.below(4));
                    match self.below(3) {
                        0 => format!("ceil_div({a}, {k})"),
                        1 => format!("({a} / {k})"),
                        _ => format!("({a} % {k})"),
                    }
                }
                3 => format!("!({})", self.expr(d - 1)),
                _ => {
                    let op =
                        self.pick(&["+", "-", "*", "==", "!=", "<", "<=", ">", ">=", "&&", "||"]);
                    format!("({} {op} {})", self.expr(d - 1), self.expr(d - 1))
                }
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

    /// A region index in runnable mode: a loop variable or a small constant (always in
    /// 0..64, inside the runnable tensors' 64-wide dimensions).
    fn index(&mut self) -> String {
        if !self.vars.is_empty() && self.below(3) != 0 {
            let i = self.below(self.vars.len() as u64) as usize;
            self.vars[i].clone()
        } else {
            self.below(8).to_string()
        }
    }

    fn resource(&mut self) -> String {
        if self.runnable {
            let t = self.pick(&["R0", "R1", "U0", "U1"]);
            let rank = if t == "R0" { 1 } else { 2 };
            let n = self.below(rank + 1) as usize;
            if n == 0 {
                return t.to_string();
            }
            let dims: Vec<String> = (0..n)
                .map(|_| {
                    let i = self.index();
                    if self.below(3) == 0 {
                        format!("{i} : {i} + {}", self.below(3))
                    } else {
                        i
                    }
                })
                .collect();
            return format!("{t}[{}]", dims.join(", "));
        }
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
        // k0(a): vector(in x); k1(a, b): cube(in x, out y); k2: undeclared; the tier set t0
        // of k0 and k3(a): cube(in x).
        match self.below(4) {
            0 => format!("task @k0({}) resources({})", self.expr(2), self.resource()),
            3 => format!(
                "task @t0[{}]({}) resources({})",
                self.expr(2),
                self.expr(1),
                self.resource()
            ),
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
        let s = match self.below(10) {
            0..=2 => {
                let v = format!("v{}", self.next_var);
                self.next_var += 1;
                let inner = self.vars.last().cloned();
                let kind = self.below(9);
                let tile = matches!((kind, &inner), (5, _) | (6, Some(_)));
                let axis = match (kind, inner) {
                    (0, _) => format!("dense[{}]", self.below(9)),
                    (1, _) => "dense_dyn(p1)".to_string(),
                    // One row of a ragged array (ptovm's per-row form).
                    (2, Some(w)) => format!("dense_dyn(a1[{w}])"),
                    // PTO-WSP's flattened ragged axis: the first `outer` rows.
                    (3, Some(w)) => format!("ragged(min({w}, 4), a1)"),
                    (3, None) => "ragged(p2, a1)".to_string(),
                    // PTO-WSP's flattened sparse axis, under a parallel_for.
                    (4, _) => "sparse(min(p0, 3), a2, a3)".to_string(),
                    // Tiles (PTO_TILE) of a dynamic axis and of a ragged row.
                    // (A leaf for the size: `tile_end` copies it into expressions that must
                    // stay within the evaluation stack.)
                    (5, _) => format!("tile(dense_dyn(p1), max(1, {}))", self.expr(0)),
                    (6, Some(w)) => format!("tile(dense_dyn(a1[{w}]), max(1, {w}))"),
                    _ if self.in_callee => "%ga".to_string(),
                    _ => "%outer".to_string(),
                };
                let kw = self.pick(&["parallel_for", "for_each"]);
                let sparse = !self.vars.is_empty() && self.below(4) == 0;
                let head = if sparse {
                    if self.below(2) == 0 {
                        format!("select {v} in sparse_row({}, a2, a3)", self.vars[0])
                    } else {
                        format!("select {v} in sparse({} % 5, a2, a3)", self.vars[0])
                    }
                } else {
                    format!("{kw} {v} in {axis}")
                };
                let tile = tile && !sparse;
                if tile {
                    self.tiles.push(v.clone());
                }
                self.vars.push(v);
                let body = self.block(3);
                self.vars.pop();
                if tile {
                    self.tiles.pop();
                }
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
            // `g`'s body inlined here, its value parameter bound to one of our loop variables
            // and its axis to our `%outer` (a call in a loop expands once per iteration).
            8 if self.callee && !self.in_callee && !self.vars.is_empty() => {
                let i = self.below(self.vars.len() as u64) as usize;
                format!("call @g({}, outer)", self.vars[i])
            }
            _ => self.task(),
        };
        self.depth -= 1;
        s
    }

    /// A whole module. Every task sits inside the loop `top`, so the schedule may read it.
    pub fn module(&mut self) -> String {
        let tensors = if self.runnable {
            "@tensor R0: f16[80]\n@tensor R1: f32[80, 80]\n"
        } else {
            "@tensor T0: f16[p0]\n@tensor T1: f32[8, p1]\n@tensor T2: bf16[2, 3, 4]\n"
        };
        // Sometimes scratch for a kernel's tasks (spec/runtime.md §4.4), in whole lines.
        let mut largest = 0;
        let mut workspace = |g: &mut Self| {
            if g.below(3) == 0 {
                let n = 64 * (1 + g.below(8));
                largest = largest.max(n);
                format!(" workspace({n})")
            } else {
                String::new()
            }
        };
        let (w0, w1, w3) = (workspace(self), workspace(self), workspace(self));
        let mut m = format!(
            "{tensors}@kernel k0(a): vector(in x){w0}\n@kernel k1(a, b): cube(in x, out y){w1}\n@kernel k3(a): cube(in x){w3}\n@tiers t0(v) {{ v < 3: k0\n v < 6: k3\n default: k0 }}\n"
        );
        // Sometimes values planned at launch: a sum over an array and a binary search.
        self.plans = self.below(3) == 0;
        if self.plans {
            m += "@plan q0 = sum(i in 0 .. p0: a0[i])\n@plan q1 = search(c in 1 ..= 8: c * c >= p1 || c == 8)\n";
        }
        // Sometimes a workload to `call`: it sees only its own parameters and loop variables.
        self.callee = self.below(3) == 0;
        if self.callee {
            self.in_callee = true;
            self.vars = vec!["u".into()];
            self.tiles.clear();
            let body = self.block(3);
            self.vars.clear();
            self.in_callee = false;
            // `gi` is a value (the caller's loop variable), not a loop of `g`: expressions may
            // read it, dispatch keys may not.
            m += &format!("@workload g(%gi: dense[1], %ga: dense[3]) {{\n  parallel_for u in %ga {{\n  cond gi < 2 {{\n{body}\n  }}\n  }}\n}}\n");
        }
        // Sometimes a tensor read back (`wait`), then a second loop that may read it.
        let read_back = self.below(3) == 0;
        if read_back {
            m += "@tensor r0: i32[80]\n";
        }
        m += "@workload w(%outer: dense[3], %dyn: dense_dyn(p2)) {\n  parallel_for top in %dyn {\n";
        self.vars.push("top".into());
        let body = self.block(4);
        self.vars.clear();
        m += &body;
        m += "\n  }\n";
        if read_back {
            m += "  wait r0 <= 6\n  parallel_for top in %dyn {\n";
            self.read_back = true;
            self.vars.push("top".into());
            self.tiles.clear();
            let body = self.block(3);
            self.vars.clear();
            self.read_back = false;
            m += &body;
            m += "\n  }\n";
        }
        m += "}\n";
        let dispatch = match self.below(6) {
            0 => "round_robin(3)".to_string(),
            1 => "affinity(top)".to_string(),
            2 => "hash(top + 1)".to_string(),
            3 => "static(top)".to_string(),
            4 => "work_steal".to_string(),
            _ => "threshold(p2 * 2, 4: static(top), 100: affinity(top), hash(top))".to_string(),
        };
        let streams = 1 + self.below(4);
        m += &format!("@schedule s for w {{\n  dispatch = {dispatch}\n  streams = {streams}\n");
        // Each stream's tasks in program order; `interleaved` rotates over the streams.
        let stream_by = self.below(3) == 0;
        if stream_by {
            m += &format!("  stream_by = {}\n", self.pick(&["top", "top * 3 + 1"]));
        }
        if self.below(2) == 0 {
            let interleaved = format!("interleaved({streams})");
            let timing = match self.below(4) {
                0 => "immediate",
                1 => "batched(4)",
                2 if stream_by => &interleaved,
                _ => "rate_limit(100000)",
            };
            m += &format!("  timing = {timing}\n");
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
        // Sometimes an arena of the largest scratch or a little more: tasks then wait for it.
        if largest > 0 && self.below(2) == 0 {
            m += &format!("  workspace = {}\n", largest + 64 * self.below(3));
        }
        // Drawn last, so the modules the bytes gave before stay as they were, and never when
        // the bytes run out (they then read 0): sometimes a fixed partition of the cores, and
        // core limits on kernels (spec/runtime.md §4.6).
        if self.below(4) == 1 {
            m += "  cores = partition\n";
        }
        m += "}\n";
        for k in [
            "k0(a): vector(in x)",
            "k1(a, b): cube(in x, out y)",
            "k3(a): cube(in x)",
        ] {
            if self.below(3) == 1 {
                let limit = 1 + self.below(3);
                let decl = format!("@kernel {k}");
                if let Some(at) = m.find(&decl) {
                    let end = at + m[at..].find('\n').unwrap_or(m.len() - at);
                    m.insert_str(end, &format!(" cores({limit})"));
                }
            }
        }
        m
    }
}

/// A module that reads a tensor back (`wait`, spec/pto.md §4.7): a router writes `counts`
/// (a count per expert, launch stand-ins `[2, 0, 3, 1]`) while reading its token; after the
/// `wait`, expert `e` runs `counts[e]` tasks, each reading a token and writing its own output.
/// Tensor 1 is `counts`, runtime slot 2 its array.
pub const ROUTED: &str = "
@param T = 8
@param E = 4
@param counts = [2, 0, 3, 1]
@tensor x: f32[T]
@tensor counts: i32[E]
@tensor y: f32[E, T]
@kernel route(t): vector(in x, inout counts)
@kernel expert(e, i): cube(in x, out y)
@workload w(%tok: dense_dyn(T), %ex: dense_dyn(E)) {
  parallel_for t in %tok { task @route(t) resources(x[t], counts) }
  wait counts <= T
  parallel_for e in %ex {
    for_each i in dense_dyn(counts[e]) { task @expert(e, i) resources(x[i], y[e, i]) }
  }
}
";

/// The reference expansion of module text `src` for `n` AICPUs (`given` overriding parameter
/// defaults by name), after checking that the AICPUs' own expansions partition it — ids,
/// owners, parameters and regions — and that the work bound bounds it.
pub fn expand_checked(
    src: &str,
    given: &[(&str, Vec<u32>)],
    n: u32,
) -> Vec<ptovm_host_sim::RefTask> {
    let (bytes, m) = assemble_text(src);
    let v = ptovm_vm::verify(&bytes).unwrap();
    let vals = named_values(&m, given);
    let p = ptovm_vm::RuntimeParams::new(&v, &vals).unwrap();
    let reference = ptovm_host_sim::reference_expand(&v, &p, n, 1 << 20).unwrap();
    let mut all = vec![];
    for aicpu in 0..n {
        let e = ptovm_host_sim::expand_aicpu(v, p, aicpu, n, 1 << 20, 64).unwrap();
        all.extend(e.tasks);
    }
    all.sort_by_key(|t| t.id);
    assert_eq!(all.len(), reference.len());
    for (a, r) in all.iter().zip(&reference) {
        assert_eq!(
            (a.id, a.owner, &a.params, &a.io),
            (r.id, r.owner, &r.params, &r.io)
        );
    }
    let bound = ptovm_vm::Interpreter::new(v, p, 0, n).unwrap().work_bound();
    assert!(bound.tasks >= reference.len() as u64);
    reference
}

/// Runtime parameters for a module made by [`Gen`]: scalars `p0..p2` in 0..6; arrays `a0`
/// (values 0..6), `a1` (ragged lengths 0..4), `a2` (a monotone indptr) and `a3` (indices
/// 0..11), each of 80 entries. Returns owned arrays; see [`values`].
pub fn gen_params(m: &Module, seed: u64) -> Vec<(ParamKind, u32, Vec<u32>)> {
    let mut g = Gen::new(seed ^ 0x5eed);
    m.params
        .iter()
        .map(|p| match (p.kind, p.name.as_str()) {
            (ParamKind::Scalar, _) => (p.kind, g.below(7) as u32, vec![]),
            (_, "a2") => {
                let mut acc = 0u32;
                let v: Vec<u32> = (0..80)
                    .map(|_| {
                        let x = acc;
                        acc += g.below(3) as u32;
                        x
                    })
                    .collect();
                (p.kind, 0, v)
            }
            (_, "a1") => (p.kind, 0, (0..80).map(|_| g.below(5) as u32).collect()),
            (_, "a3") => (p.kind, 0, (0..200).map(|_| g.below(11) as u32).collect()),
            _ => (p.kind, 0, (0..80).map(|_| g.below(7) as u32).collect()),
        })
        .collect()
}

/// The number of tasks `code` generates with `params`, or `None` when the parameters fail.
/// Random-program tests skip programs above a few thousand tasks: their checks compare with
/// the whole reference graph, whose edges can number tasks² (a write after every earlier read
/// of a whole tensor), and the big runs are the examples' tests.
pub fn task_count(code: &[u8], params: &[(ParamKind, u32, Vec<u32>)]) -> Option<u64> {
    let v = ptovm_vm::verify(code).ok()?;
    let vals = values(params);
    let p = ptovm_vm::RuntimeParams::new(&v, &vals).ok()?;
    ptovm_vm::Interpreter::new(v, p, 0, 1)
        .ok()?
        .count_tasks()
        .ok()
}

/// Assembles `src` (panicking with the diagnostic if it does not), with its bytes and module.
pub fn assemble_text(src: &str) -> (Vec<u8>, Module) {
    let out = ptovm_assembler::assemble("t.pto", src, &ptovm_assembler::Options::default())
        .unwrap_or_else(|e| panic!("{e}"));
    (out.bytes, out.module)
}

/// The value block of `m`'s runtime parameters in slot order: those in `given` by name (a
/// scalar's value is its first entry), the others at the module's defaults (`@param`).
pub fn named_values<'a>(m: &'a Module, given: &'a [(&str, Vec<u32>)]) -> Vec<Value<'a>> {
    m.params
        .iter()
        .map(|p| {
            let v = given
                .iter()
                .find(|(n, _)| *n == p.name)
                .map(|(_, v)| v)
                .or(p.default.as_ref())
                .unwrap_or_else(|| panic!("no value for runtime parameter {}", p.name));
            match p.kind {
                ParamKind::Scalar => Value::Scalar(v[0]),
                ParamKind::Array => Value::Array(v),
            }
        })
        .collect()
}

/// Borrows generated parameters as a value block.
pub fn values(p: &[(ParamKind, u32, Vec<u32>)]) -> Vec<Value<'_>> {
    p.iter()
        .map(|(k, s, a)| match k {
            ParamKind::Scalar => Value::Scalar(*s),
            ParamKind::Array => Value::Array(a),
        })
        .collect()
}

/// The cross-AICPU hazard of DESIGN.md §4 as a program: producers on AICPU 1 (odd `i`), each
/// followed by a consumer of the same tile on AICPU 0 (the next even `i`). Without the watermark
/// wait, AICPU 0 may look a region up before AICPU 1 has recorded its write and miss the edge.
pub const HAZARD: &str = "@tensor T: f16[%N%]
@kernel produce(i): vector(out t)
@kernel consume(i): vector(in t)
@workload w() {
  for_each i in dense[%N%] {
    cond i % 2 == 1 { task @produce(i) resources(T[i]) } else { task @consume(i) resources(T[i - 1 + (i == 0)]) }
  }
}
@schedule s for w { dispatch = affinity(i) }";

/// [`HAZARD`] with `n` tiles.
pub fn hazard(n: u32) -> String {
    HAZARD.replace("%N%", &n.to_string())
}

/// Random programs of loops `i` ⊃ `j` ⊃ `m` (and a sibling `j` loop) whose sites name
/// tensors mostly by exactly their loops' variables (`[i]`, `[i, j]`, `[i, j, m]`, whole
/// outside every loop) — the loop-indexed form — and sometimes by forms that must not pass
/// for it: the variables swapped, too few, an expression, a constant; sites under a `cond`;
/// other statements before or after that touch the same tensors.
pub fn indexed_program(seed: u64) -> String {
    let mut g = Gen::new(seed);
    let site = |g: &mut Gen, depth: usize| {
        let index = |g: &mut Gen| {
            let exact = ["", "i", "i, j", "i, j, m"][depth];
            let wrong = ["j, i", "i", "i + 0", "0, j", "i, 0"][g.below(5) as usize];
            let wrong = if depth < 2 && wrong.contains('j') {
                "0"
            } else {
                wrong
            };
            match (g.below(5), depth) {
                (0, 1..) => format!("[{wrong}]"),
                (_, 0) => String::new(),
                _ => format!("[{exact}]"),
            }
        };
        let (a, b) = (g.below(3), g.below(3));
        let (ia, ib) = (index(g), index(g));
        let kernel = ["r", "w", "rw"][g.below(3) as usize];
        let task = format!("task @{kernel}(0) resources(T{a}{ia}, T{b}{ib})");
        if g.below(5) == 0 {
            format!("cond {} {{ {task} }}", ["1", "i % 2", "j % 2", "m"][depth])
        } else {
            task
        }
    };
    let sites = |g: &mut Gen, depth: usize, most: u64| {
        (0..g.below(most + 1))
            .map(|_| site(g, depth) + "\n")
            .collect::<String>()
    };
    let inner = format!(
        "for_each j in dense[3] {{\n{}{}{}}}\n",
        sites(&mut g, 2, 3),
        if g.below(2) == 0 {
            format!("for_each m in dense[2] {{\n{}}}\n", sites(&mut g, 3, 2))
        } else {
            String::new()
        },
        sites(&mut g, 2, 2),
    );
    let sibling = if g.below(2) == 0 {
        format!("for_each j in dense[2] {{\n{}}}\n", sites(&mut g, 2, 2))
    } else {
        String::new()
    };
    let mut body = format!(
        "parallel_for i in dense[4] {{\n{}{inner}{}{sibling}}}\n",
        sites(&mut g, 1, 2),
        sites(&mut g, 1, 2),
    );
    let top = sites(&mut g, 0, 1);
    match g.below(3) {
        0 => body = top.clone() + &body,
        1 => body += &top,
        _ => {}
    }
    let policy = if top.is_empty() && g.below(2) == 0 {
        "affinity(i)"
    } else {
        "round_robin(3)"
    };
    format!(
        "@tensor T0: f16[8, 8, 4]\n@tensor T1: f16[8, 8, 4]\n@tensor T2: f16[8, 8, 4]\n\
         @kernel r(x): vector(in a, in b)\n@kernel w(x): vector(in a, out b)\n\
         @kernel rw(x): vector(inout a, inout b)\n\
         @workload k() {{\n{body}}}\n@schedule s for k {{ dispatch = {policy} }}"
    )
}

/// Random programs built around loop bodies made of `TASK` statements only, where tensors
/// may be chained (spec/runtime.md §3.6) or carried (§3.7: named by the outer loop only in
/// the inner body, and before and after the inner loop): one or two nests `i` ⊃ `j` whose innermost body
/// holds 1–9 tasks over four tensors, each site reading, writing or updating one or two of
/// them, named mostly by exactly the loops' variables — and sometimes by forms that must break
/// the chain: an index swapped or constant, the tensor also touched in another body (or
/// whole), a `cond` or a nested loop in the body, a body longer than a chain
/// may span, a dispatch that splits an iteration between AICPUs.
pub fn chained_program(seed: u64) -> String {
    let mut g = Gen::new(seed);
    let dirs = ["in", "out", "inout"];
    let mut kernels = String::new();
    for a in dirs {
        kernels += &format!("@kernel k_{a}(x): vector({a} a)\n");
        for b in dirs {
            kernels += &format!("@kernel k_{a}_{b}(x): vector({a} a, {b} b)\n");
        }
    }
    let site = |g: &mut Gen, vars: &str| {
        // T0 and T1 are named by all the loops' variables (chained in a body of tasks), T2
        // and T3 by the outer loop's alone (carried by the inner loop); now and then a near
        // miss.
        let index = |g: &mut Gen, t: u64| match g.below(12) {
            0 if vars.contains('j') => "[j, i]".to_string(),
            0 | 1 => "[i, 0]".to_string(),
            _ if t >= 2 => "[i]".to_string(),
            _ => format!("[{vars}]"),
        };
        let a = g.below(4);
        let da = dirs[g.below(3) as usize];
        let ia = index(g, a);
        if g.below(2) == 0 {
            format!("task @k_{da}(0) resources(T{a}{ia})\n")
        } else {
            let b = (a + 1 + g.below(3)) % 4;
            let db = dirs[g.below(3) as usize];
            let ib = index(g, b);
            format!("task @k_{da}_{db}(0) resources(T{a}{ia}, T{b}{ib})\n")
        }
    };
    let body = |g: &mut Gen| {
        let n = if g.below(20) == 0 {
            // Around the span: 64 tasks may chain, 65 may not.
            [63, 64, 65][g.below(3) as usize]
        } else {
            1 + g.below(9)
        };
        let mut b: String = (0..n).map(|_| site(g, "i, j")).collect();
        match g.below(10) {
            0 => b += &format!("cond j % 2 {{ {} }}\n", site(g, "i, j")),
            1 => b += "for_each m in dense[2] { task @k_in(0) resources(T3[i, j]) }\n",
            _ => {}
        }
        b
    };
    let extent = |g: &mut Gen| ["dense[3]", "dense_dyn(N)"][g.below(2) as usize];
    // Around the inner loop, sites named by the outer one (a carried tensor's accesses
    // before and after its loop).
    let around = |g: &mut Gen| (0..g.below(3)).map(|_| site(g, "i")).collect::<String>();
    let mut program = format!(
        "parallel_for i in dense[4] {{\n{}for_each j in {} {{\n{}}}\n{}}}\n",
        around(&mut g),
        extent(&mut g),
        body(&mut g),
        around(&mut g),
    );
    match g.below(5) {
        0 => {
            program += &format!(
                "parallel_for i in dense[4] {{\nfor_each j in dense[2] {{\n{}}}\n}}\n",
                body(&mut g)
            )
        }
        1 => program += &format!("parallel_for i in dense[4] {{\n{}}}\n", site(&mut g, "i")),
        2 => program += "parallel_for i in dense[1] { task @k_inout(0) resources(T2) }\n",
        // Wider than the element a carried tensor's loop names: not covered by its writes.
        3 => {
            let wide = format!(
                "dispatch round_robin {{ task @k_inout(0) resources(T{}) }}\n",
                2 + g.below(2)
            );
            program = if g.below(2) == 0 {
                wide + &program
            } else {
                program + &wide
            }
        }
        _ => {}
    }
    let policy = ["affinity(i)", "static(i)", "round_robin(3)", "affinity(i)"][g.below(4) as usize];
    format!(
        "@tensor T0: f16[8, 8]\n@tensor T1: f16[8, 8]\n@tensor T2: f16[8, 8]\n\
         @tensor T3: f16[8, 8]\n{kernels}\
         @workload k(%n: dense_dyn(N)) {{\n{program}}}\n@schedule s for k {{ dispatch = {policy} }}"
    )
}

/// Runtime parameters in slot order: `(kind, scalar value, array values)`.
pub type Params = Vec<(ParamKind, u32, Vec<u32>)>;

/// Runtime parameters by name: `(name, scalar value, array values)`.
pub type Named<'a> = Vec<(&'a str, u32, Vec<u32>)>;

/// A bundled example (`examples/NAME`) assembled, with `given` runtime parameters by name put
/// in the program's slot order.
pub fn example(name: &str, given: &[(&str, u32, Vec<u32>)]) -> (Vec<u8>, Params) {
    assemble_named(name, &example_source(name), given)
}

/// The bundled example `examples/NAME` assembled: its bytecode.
pub fn example_code(name: &str) -> Vec<u8> {
    ptovm_assembler::assemble(
        name,
        &example_source(name),
        &ptovm_assembler::Options::default(),
    )
    .expect("it assembles")
    .bytes
}

/// The text of the bundled example `examples/NAME`.
pub fn example_source(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    std::fs::read_to_string(p).expect("the example")
}

/// `src` (called `name`) assembled, with `given` runtime parameters by name put in the
/// program's slot order; a parameter not given takes the module's default (`@param`).
pub fn assemble_named(name: &str, src: &str, given: &[(&str, u32, Vec<u32>)]) -> (Vec<u8>, Params) {
    let out = ptovm_assembler::assemble(name, src, &ptovm_assembler::Options::default())
        .expect("it assembles");
    let params = out
        .module
        .params
        .iter()
        .map(
            |slot| match given.iter().find(|(n, _, _)| *n == slot.name) {
                Some((_, v, a)) => (slot.kind, *v, a.clone()),
                None => {
                    let d = slot
                        .default
                        .clone()
                        .unwrap_or_else(|| panic!("no value for {}", slot.name));
                    match slot.kind {
                        ParamKind::Scalar => (slot.kind, d[0], vec![]),
                        _ => (slot.kind, 0, d),
                    }
                }
            },
        )
        .collect();
    (out.bytes, params)
}

/// The bundled examples with small parameters (for runs that check every task).
pub fn examples() -> Vec<(&'static str, Vec<u8>, Params)> {
    example_params()
        .into_iter()
        .map(|(name, given)| {
            let (code, params) = example(name, &given);
            (name, code, params)
        })
        .collect()
}

/// The bundled examples' small parameters, by name: small enough that a computing run
/// (`compute::run`) takes milliseconds.
pub fn example_params() -> Vec<(&'static str, Named<'static>)> {
    let cases: [(&str, Named); 8] = [
        (
            "llama_layer.pto",
            vec![("N", 8, vec![]), ("D", 64, vec![]), ("F", 176, vec![])],
        ),
        (
            "attention.pto",
            vec![("batch", 4, vec![]), ("seq", 16, vec![])],
        ),
        ("control.pto", vec![("M", 16, vec![])]),
        (
            "moe.pto",
            vec![
                ("T", 3, vec![]),
                ("D", 32, vec![]),
                ("F", 48, vec![]),
                // Top-2: token 0 to experts 0 and 2, token 1 to 2 and 7, token 2 to 0 and 7.
                ("expert_ptr", 0, vec![0, 2, 2, 4, 4, 4, 4, 4, 6]),
                ("expert_tokens", 0, vec![0, 2, 0, 1, 1, 2]),
                ("token_experts", 0, vec![0, 2, 2, 7, 0, 7]),
            ],
        ),
        (
            "moe_routed.pto",
            vec![
                ("T", 4, vec![]),
                ("D", 32, vec![]),
                ("F", 48, vec![]),
                // Stand-ins (a run without data): token t to experts t and t + 1.
                ("expert_ptr", 0, vec![0, 1, 3, 5, 7, 8, 8, 8, 8]),
                ("expert_tokens", 0, vec![0, 0, 1, 1, 2, 2, 3, 3]),
                ("token_experts", 0, vec![0, 1, 1, 2, 2, 3, 3, 4]),
            ],
        ),
        (
            "deepseek_indexer.pto",
            // Fewer tokens than twice the top-k: the first queries have fewer keys than k.
            vec![("S", 12, vec![]), ("D", 32, vec![]), ("K", 6, vec![])],
        ),
        (
            "flash_decode.pto",
            vec![
                ("B", 3, vec![]),
                ("max_chunks", 4, vec![]),
                ("page", 16, vec![]),
                ("kv_len", 0, vec![10, 40, 20]),
                ("kv_chunks", 0, vec![1, 3, 2]),
            ],
        ),
        (
            "decode_planned.pto",
            vec![
                ("B", 4, vec![]),
                ("H", 2, vec![]),
                ("D", 16, vec![]),
                ("max_len", 40, vec![]),
                ("max_blocks", 10, vec![]),
                // Empty, one token, split into chunks of 14, 14 and 12 (the plan: 5 chunks of
                // 2 heads fit 10 blocks first at 14 tokens), unsplit.
                ("kv_len", 0, vec![0, 1, 40, 9]),
            ],
        ),
    ];
    cases.into_iter().collect()
}

/// What a run did, per task id: (start, end, pool, owner AICPU) on one clock; an end of 0: it
/// never ran.
pub type Ran = Vec<ptovm_host_sim::deps::Ran>;

/// Checks a run of `code` on `n` AICPUs against the reference expander
/// (`ptovm_host_sim::check_run`: every task ran, on a core of its pool, generated by its owner,
/// after every overlap-mode predecessor ended; the caller records twice-run tasks).
pub fn check_run(code: &[u8], params: &Params, n: u32, ran: &Ran) -> Result<(), String> {
    let v = ptovm_vm::verify(code).map_err(|e| e.to_string())?;
    let vals = values(params);
    let p = ptovm_vm::RuntimeParams::new(&v, &vals).map_err(|e| e.to_string())?;
    let reference =
        ptovm_host_sim::reference_expand(&v, &p, n, u64::MAX).map_err(|e| e.to_string())?;
    ptovm_host_sim::check_run(&reference, ran)?;
    ptovm_host_sim::check_core_limits(&reference, ran, &ptovm_host_sim::core_limits(&v))
}
