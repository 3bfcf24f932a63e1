//! PTO-WSP conformance: module texts written for PTO-WSP assemble unchanged in ptovm, and mean
//! what they mean there (task counts worked by hand under PTO-WSP's semantics).
//!
//! The module texts are those of PTO-WSP's C++ parser tests (`tests/test_ir.cpp` in
//! `uv-xiao/pto-wsp`: `parser_basic`, `ir_roundtrip_*`, `parser_*`), and the forms its printer
//! (`include/pto/wsp/ir/workload.hpp`, `module.hpp`) writes for them: the `// PTO Module:` header
//! comments, `,` between a `combine`'s statements and `;` after a `sequential`'s. Keyword case
//! follows PTO-WSP's lexer, which looks keywords up in lower case.

use ptovm_assembler::{assemble, Options};
use ptovm_vm::{verify, Interpreter, RuntimeParams, Value};

/// A parameter value by name.
enum P {
    S(u32),
    A(Vec<u32>),
}
use P::{A, S};

/// Assembles `src` (its first workload and schedule) and counts its tasks with `given`.
fn tasks(src: &str, given: &[(&str, P)]) -> u64 {
    let out = assemble("pto_wsp.pto", src, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&out.bytes).unwrap();
    let vals: Vec<Value> = out
        .module
        .params
        .iter()
        .map(|p| match given.iter().find(|(n, _)| *n == p.name) {
            Some((_, S(x))) => Value::Scalar(*x),
            Some((_, A(a))) => Value::Array(a),
            None => panic!("no value for runtime parameter {}", p.name),
        })
        .collect();
    let p = RuntimeParams::new(&v, &vals).unwrap_or_else(|e| panic!("{e}"));
    Interpreter::new(v, p, 0, 1).unwrap().count_tasks().unwrap()
}

#[test]
fn parser_test_modules() {
    // parser_basic, ir_roundtrip_equivalence: a loop of 8.
    let basic = "@workload simple(%N: dense[8]) {
  parallel_for i in dense[8] {
    task @kernel(i) resources(input, output)
  }
}";
    assert_eq!(tasks(basic, &[]), 8);
    // ir_roundtrip_nested: 8 heads of each of `batch` requests.
    let nested = "@workload attention(%batch: dense_dyn(batch), %heads: dense[8]) {
  parallel_for b in dense_dyn(batch) {
    parallel_for h in dense[8] {
      task @attn_kernel(b, h) resources(Q, K, V, O)
    }
  }
}";
    assert_eq!(tasks(nested, &[("batch", S(3))]), 24);
    // ir_roundtrip_with_schedule: a 1024 x 1024 grid under a full schedule.
    let matmul = "@workload matmul(%M: dense[1024], %N: dense[1024]) {
  parallel_for i in dense[1024] {
    parallel_for j in dense[1024] {
      task @gemm(i, j) resources(A, B, C)
    }
  }
}

@schedule matmul_sched for matmul {
  dispatch = round_robin(4)
  streams = 4
  timing = immediate
}";
    assert_eq!(tasks(matmul, &[]), 1024 * 1024);
    // ir_roundtrip_foreach.
    let foreach = "@workload sequential_work(%N: dense[4]) {
  for_each i in dense[4] {
    task @compute(i) resources(data)
  }
}";
    assert_eq!(tasks(foreach, &[]), 4);
    // parser_multiple_workloads: the first workload is lowered.
    let two = "
@workload workload1(%N: dense[4]) {
  parallel_for i in dense[4] {
    task @kernel1(i) resources(data)
  }
}

@workload workload2(%M: dense[8]) {
  parallel_for j in dense[8] {
    task @kernel2(j) resources(other)
  }
}";
    assert_eq!(tasks(two, &[]), 4);
    // parser_combine, parser_sequential: statements with no separator.
    let combine = "@workload combined(%N: dense[4]) {
  combine {
    task @kernel1() resources(a)
    task @kernel2() resources(b)
    task @kernel3() resources(c)
  }
}";
    assert_eq!(tasks(combine, &[]), 3);
    let sequential = "@workload sequenced(%N: dense[4]) {
  sequential {
    task @step1() resources(a)
    task @step2() resources(b)
  }
}";
    assert_eq!(tasks(sequential, &[]), 2);
    // parser_ragged_axis: a ragged parameter axis, unused by the body.
    let ragged = "@workload ragged_work(%tokens: ragged(batch, lengths)) {
  task @compute_token() resources(data)
}";
    assert_eq!(tasks(ragged, &[]), 1);
    // parser_sparse_axis: `parallel_for` over PTO-WSP's flattened sparse axis runs over
    // indices[0 .. indptr[experts]].
    let sparse = "@workload sparse_work(%routing: sparse(experts, indptr, indices)) {
  parallel_for e in sparse(experts, indptr, indices) {
    task @expert(e) resources(weights, activations)
  }
}";
    let routing = |experts| {
        [
            ("experts", S(experts)),
            ("indptr", A(vec![0, 2, 2, 5])),
            ("indices", A(vec![1, 4, 0, 2, 3])),
        ]
    };
    assert_eq!(tasks(sparse, &routing(3)), 5);
    assert_eq!(tasks(sparse, &routing(1)), 2);
    // parser_full_schedule: `affinity(batch)` names a runtime scalar, not a loop variable.
    let full = "@workload compute(%N: dense[1024]) {
  parallel_for i in dense[1024] {
    task @kernel(i) resources(data)
  }
}

@schedule compute_sched for compute {
  dispatch = affinity(batch)
  streams = 8
  timing = batched(32)
}";
    assert_eq!(tasks(full, &[("batch", S(5))]), 1024);
    // parser_cond: a runtime scalar predicate.
    let cond = "@workload conditional(%N: dense[4]) {
  cond expert_active {
    task @expert() resources(data)
  } else {
    task @fallback() resources(data)
  }
}";
    assert_eq!(tasks(cond, &[("expert_active", S(1))]), 1);
    assert_eq!(tasks(cond, &[("expert_active", S(0))]), 1);
    // parser_deeply_nested.
    let deep = "@workload deep(%batch: dense[4], %heads: dense[8], %seq: dense[512]) {
  parallel_for b in dense[4] {
    parallel_for h in dense[8] {
      parallel_for s in dense[512] {
        task @attention(b, h, s) resources(Q, K, V, O)
      }
    }
  }
}";
    assert_eq!(tasks(deep, &[]), 4 * 8 * 512);
}

/// What PTO-WSP's printer writes for the parser tests' modules: the header as comments, `,`
/// between the statements of a `combine` (and a body of several statements is printed as one),
/// `;` after each statement of a `sequential`.
#[test]
fn printer_outputs() {
    let printed_combine = "// PTO Module: 
// Version: 9.0
// Target: 

@workload combined(%N: dense[4]) {
  combine {
    task @kernel1() resources(a),
    task @kernel2() resources(b),
    task @kernel3() resources(c)
  }
}

";
    assert_eq!(tasks(printed_combine, &[]), 3);
    let printed_sequential = "@workload sequenced(%N: dense[4]) {
  sequential {
    task @step1() resources(a);
    task @step2() resources(b);
  }
}
";
    assert_eq!(tasks(printed_sequential, &[]), 2);
    let printed_cond = "@workload conditional(%N: dense[4]) {
  cond expert_active {
    task @expert() resources(data)
  } else {
    task @fallback() resources(data)
  }
}

@schedule compute_sched for conditional {
  dispatch = affinity(batch)
  streams = 8
  timing = batched(32)
}
";
    assert_eq!(
        tasks(printed_cond, &[("expert_active", S(0)), ("batch", S(2))]),
        1
    );
}

/// PTO-WSP's lexer looks keywords up in lower case: `Dense[8]` (its Python tests' spelling),
/// `PARALLEL_FOR`, `@Schedule` are keywords; names keep their case.
#[test]
fn keywords_in_any_case() {
    let src = "@Workload Mixed(%Heads: Dense[8], %Batch: DENSE_DYN(Batch)) {
  PARALLEL_FOR B In %Batch {
    Parallel_For H IN %Heads {
      Task @K(B, H) Resources(Q, O)
    }
  }
  COMBINE { TASK @Once() RESOURCES(Q), Task @Twice() resources(O) }
}
@SCHEDULE S FOR Mixed {
  DISPATCH = Round_Robin(4)
  Streams = 2
  TIMING = Batched(8)
}";
    // `Batch` and `batch` are different runtime parameters: names keep their case.
    assert_eq!(tasks(src, &[("Batch", S(3))]), 3 * 8 + 2);
    let out = assemble("case.pto", src, &Options::default()).unwrap();
    assert_eq!(out.module.workload, "Mixed");
    assert_eq!(out.module.config.num_aicpus.get(), 4);
}

/// The module texts of PTO-WSP's Python integration tests (`tests/test_pybind_integration.py`:
/// `test_parse_simple_workload`, `test_parse_with_schedule`, `test_module_round_trip`,
/// `test_find_workload`), which spell axes `Dense[N]`.
#[test]
fn pybind_integration_modules() {
    let simple = "@workload simple(%N: Dense[8]) {
  parallel_for i in Dense[8] {
    task @kernel(i) resources(input, output)
  }
}";
    assert_eq!(tasks(simple, &[]), 8);
    let with_schedule = "@workload compute(%N: Dense[4]) {
  parallel_for i in Dense[4] {
    task @kernel(i) resources(data)
  }
}
@schedule compute_sched for compute {
  dispatch = round_robin(4)
  streams = 2
  timing = immediate
}";
    assert_eq!(tasks(with_schedule, &[]), 4);
    let out = assemble("s.pto", with_schedule, &Options::default()).unwrap();
    assert_eq!(out.module.schedule, "compute_sched");
    // Two workloads, each a single task outside any loop; `--workload` picks one.
    let two = "@workload first(%N: Dense[4]) {
  task @k1() resources(a)
}
@workload second(%M: Dense[8]) {
  task @k2() resources(b)
}";
    assert_eq!(tasks(two, &[]), 1);
    let opts = Options {
        select: ptovm_assembler::Select {
            workload: Some("second".into()),
            schedule: None,
        },
        ..Options::default()
    };
    let out = assemble("two.pto", two, &opts).unwrap();
    assert_eq!(out.module.workload, "second");
    assert_eq!(out.module.kernels[0].name, "k2");
}

/// PTO-WSP's module header, levels, `layout`, and the knob forms its printer writes
/// (`task_window = N tasks`, `batch_deps = N range_compress`, `stream_by` on the line after
/// `streams`): all assemble, and the header, levels and layout reach the bytecode.
#[test]
fn header_levels_layout_and_printer_knobs() {
    let src = r#"module "attention_demo"
version "9.1"
target "cpu_sim" | "ascend_npu"
target "amd_aie"

@workload[npu] tile(%i: dense[1]) {
  task @tile_op(i) resources(T)
}
@workload[cpu] outer(%B: dense[4]) {
  parallel_for b in %B {
    call @tile(b)
  }
}
@schedule[npu] outer_sched for outer {
  dispatch = affinity(b)
  streams = 2
  stream_by = b
  task_window = 8192 tasks
  batch_deps = 64 range_compress
  layout T = (S(0), R)
}"#;
    let opts = Options {
        select: ptovm_assembler::Select {
            workload: Some("outer".into()),
            schedule: None,
        },
        ..Options::default()
    };
    let out = assemble("h.pto", src, &opts).unwrap_or_else(|e| panic!("{e}"));
    let v = verify(&out.bytes).unwrap();
    let texts: Vec<(&str, &str)> = v
        .module_info()
        .iter()
        .map(|e| {
            (
                ptovm_vm::InfoKind::from_u8(e.kind).unwrap().name(),
                v.info_text(e),
            )
        })
        .collect();
    assert_eq!(
        texts,
        [
            ("module", "attention_demo"),
            ("version", "9.1"),
            ("target", "cpu_sim"),
            ("target", "ascend_npu"),
            ("target", "amd_aie"),
        ]
    );
    assert_eq!(v.workload_level(), ptovm_vm::Level::Cpu);
    assert_eq!(v.schedule_level(), ptovm_vm::Level::Npu);
    let t = out.module.tensors.iter().find(|t| t.name == "T").unwrap();
    assert_eq!(
        ptovm_assembler::listing::layout_text(t.entry.layout.get()),
        "[S(0),R]"
    );
    assert_eq!(out.module.config.window.get(), 8192);
    assert_eq!(out.module.config.batch_deps.get(), 64);
    // `stream_by = b` took effect: a stream-order tensor of the two streams.
    let st = v
        .stream_tensor()
        .expect("stream_by lowers to a stream-order tensor");
    assert_eq!(v.tensors()[st as usize].dims[0].get(), 2);
    // The call expands once per iteration of `b`, the callee's `i` reading `b`.
    let p = RuntimeParams::new(&v, &[]).unwrap();
    assert_eq!(
        Interpreter::new(v, p, 0, 1).unwrap().count_tasks().unwrap(),
        4
    );
    // The header survives disassembly, and the listing assembles back to the same bytes.
    let text = ptovm_assembler::disassemble(&out.bytes).unwrap();
    assert!(text.contains(".module \"attention_demo\"\n"), "{text}");
    assert!(text.contains(".target \"amd_aie\"\n"), "{text}");
    assert!(text.contains("layout=[S(0),R]"), "{text}");
    let again = assemble("l", &text, &Options::default()).unwrap();
    assert_eq!(again.bytes, out.bytes);
}

/// `call @w(args)` is the callee's body written at the call, its parameters replaced by the
/// arguments: the bytecode equals the hand-inlined module's, byte for byte.
#[test]
fn a_call_is_its_callee_inlined() {
    let called = "@tensor X: f16[B, 8]
@kernel k(b, h): vector(inout x)
@kernel fin(b): cube(in x)
@workload heads(%req: dense[1], %hs: dense[8], %n: dense[1]) {
  parallel_for h in %hs {
    cond h < n { task @k(req, h) resources(X[req, h]) }
  }
  task @fin(req) resources(X[req])
}
@workload batch(%B: dense_dyn(B), %H: dense[8]) {
  parallel_for b in %B {
    call @heads(b, H, limit)
  }
}";
    let inlined = "@tensor X: f16[B, 8]
@kernel k(b, h): vector(inout x)
@kernel fin(b): cube(in x)
@workload batch(%B: dense_dyn(B), %H: dense[8]) {
  parallel_for b in %B {
    parallel_for h in %H {
      cond h < limit { task @k(b, h) resources(X[b, h]) }
    }
    task @fin(b) resources(X[b])
  }
}";
    let opts = Options {
        select: ptovm_assembler::Select {
            workload: Some("batch".into()),
            schedule: None,
        },
        ..Options::default()
    };
    let a = assemble("called.pto", called, &opts).unwrap_or_else(|e| panic!("{e}"));
    let b = assemble("inlined.pto", inlined, &Options::default()).unwrap();
    assert_eq!(a.bytes, b.bytes);
    // 3 requests, 5 heads each under `limit`, and a final task per request.
    assert_eq!(tasks(inlined, &[("B", S(3)), ("limit", S(5))]), 3 * (5 + 1));
}
