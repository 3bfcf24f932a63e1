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
