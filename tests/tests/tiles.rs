//! Tiled axes (`tile(axis, size)`, spec/pto.md §4 Axes, spec/bytecode.md `AXIS_TILE`): the
//! tiles of a dense, dynamic or ragged-row axis, the last one partial, with `tile_start` and
//! `tile_end` for regions and task parameters; sized by a planned value; partitioned across
//! AICPUs like any loop; errors at assembly, verification and launch.

use ptovm_assembler::{assemble, Options};
use ptovm_host_sim::{expand_aicpu, reference_expand};
use ptovm_vm::{verify, ErrorKind, Opcode, RunError, RuntimeParams};

use ptovm_tests::{assemble_text as asm, named_values as values};

/// A task as these tests compare it: its parameters and its first region's ranges.
type Seen = (Vec<i64>, Vec<(i64, i64)>);

/// Each AICPU's tasks for `n` AICPUs, checked against the reference expansion (ids, owners,
/// parameters and regions), in id order.
fn expand(src: &str, given: &[(&str, Vec<u32>)], n: u32) -> Vec<Seen> {
    let reference = ptovm_tests::expand_checked(src, given, n);
    reference
        .iter()
        .map(|t| {
            let io =
                t.io.first()
                    .map_or(vec![], |io| io.ranges[..io.ndims as usize].to_vec());
            (t.params.clone(), io)
        })
        .collect()
}

const SPLIT_KV: &str = "
@param B = 3
@param kv_len = [40, 16, 0]
@param chunk = 16
@tensor kv: f16[B, 64]
@kernel attend(b, c, start, end): vector(in kv)
@workload w(%reqs: dense_dyn(B)) {
  parallel_for b in %reqs {
    parallel_for c in tile(dense_dyn(kv_len[b]), chunk) {
      task @attend(b, c, tile_start(c), tile_end(c)) resources(kv[b, tile_start(c) : tile_end(c)])
    }
  }
}
@schedule s for w { dispatch = round_robin }
";

#[test]
fn tiles_cover_the_axis_and_the_last_is_partial() {
    let t = |b: i64, c: i64, s: i64, e: i64| (vec![b, c, s, e], vec![(b, b + 1), (s, e)]);
    assert_eq!(
        expand(SPLIT_KV, &[], 1),
        [
            t(0, 0, 0, 16),
            t(0, 1, 16, 32),
            t(0, 2, 32, 40),
            t(1, 0, 0, 16)
        ]
    );
    // Sizes 1, 40 (one tile), 64 (one partial tile), 7 (not a divisor).
    for (chunk, tiles) in [(1u32, 56usize), (40, 2), (64, 2), (7, 6 + 3)] {
        let got = expand(SPLIT_KV, &[("chunk", vec![chunk])], 3);
        assert_eq!(got.len(), tiles, "chunk {chunk}");
        // The tiles of each request cover exactly [0, kv_len) in order.
        for (b, len) in [(0i64, 40i64), (1, 16), (2, 0)] {
            let mine: Vec<(i64, i64)> = got
                .iter()
                .filter(|(p, _)| p[0] == b)
                .map(|(p, _)| (p[2], p[3]))
                .collect();
            let mut at = 0;
            for (s, e) in &mine {
                assert_eq!(*s, at);
                assert!(e > s && e - s <= chunk as i64);
                at = *e;
            }
            assert_eq!(at, len, "request {b}, chunk {chunk}");
        }
    }
}

#[test]
fn tiles_of_dense_axes_sized_by_a_plan_and_partitioned() {
    // A planned tile size (ceil(n / 4) elements: 4 tiles, the last partial) over a dynamic
    // axis, under every dispatch policy that reads the tile variable, on 1 to 6 AICPUs.
    let src = |policy: &str| {
        format!(
            "
@param n = 10
@plan size = max(1, ceil_div(n, 4))
@tensor x: f32[n]
@kernel k(t, s, e): vector(inout x)
@workload w() {{
  parallel_for t in tile(dense_dyn(n), size) {{
    task @k(t, tile_start(t), tile_end(t)) resources(x[tile_start(t) : tile_end(t)])
  }}
}}
@schedule s for w {{ dispatch = {policy} }}
"
        )
    };
    for policy in ["round_robin", "affinity(t)", "hash(t)", "static(t)"] {
        for n in [1, 2, 3, 6] {
            let got = expand(&src(policy), &[], n);
            let bounds: Vec<(i64, i64)> = got.iter().map(|(p, _)| (p[1], p[2])).collect();
            assert_eq!(
                bounds,
                [(0, 3), (3, 6), (6, 9), (9, 10)],
                "{policy} on {n} AICPUs"
            );
        }
    }
    // A dense axis's tiles; an empty dynamic axis has none.
    let dense = "
@tensor y: f32[12]
@kernel j(u, s, e): vector(inout y)
@workload w() {
  for_each u in tile(dense[12], 5) {
    task @j(u, tile_start(u), tile_end(u)) resources(y[tile_start(u) : tile_end(u)])
  }
}
";
    let got: Vec<Vec<i64>> = expand(dense, &[], 2).into_iter().map(|t| t.0).collect();
    assert_eq!(got, [vec![0, 0, 5], vec![1, 5, 10], vec![2, 10, 12]]);
    assert!(expand(&src("round_robin"), &[("n", vec![0])], 2).is_empty());
}

#[test]
fn a_tile_size_below_one_stops_the_run_where_the_loop_starts() {
    let (bytes, m) = asm(SPLIT_KV);
    let v = verify(&bytes).unwrap();
    let pc = v
        .code()
        .iter()
        .position(|r| {
            r.opcode == Opcode::PARALLEL_FOR as u8
                && v.axes()[r.op1() as usize].opcode == Opcode::AXIS_TILE as u8
        })
        .unwrap() as u32;
    let given = [("chunk", vec![0])];
    let vals = values(&m, &given);
    let p = RuntimeParams::new(&v, &vals).unwrap();
    let want = RunError::TileSize { pc, size: 0 };
    assert_eq!(
        reference_expand(&v, &p, 2, 1 << 10).unwrap_err(),
        want,
        "the reference"
    );
    for aicpu in 0..2 {
        let e = expand_aicpu(v, p, aicpu, 2, 16, 64)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e, ptovm_vm::LaunchError::Run(want));
    }
    assert_eq!(
        want.to_string(),
        format!("instruction {pc}: tile size 0 (a tile holds at least one element)")
    );
}

#[test]
fn assembly_refuses_tiles_of_other_axes_and_bounds_of_other_loops() {
    let fail = |body: &str| {
        let src = format!(
            "@param n = 4\n@param lens = [1]\n@param ptr = [0, 1]\n@param idx = [0]\n@kernel k(a, b): vector()\n@workload w() {{ {body} }}"
        );
        match assemble("t.pto", &src, &Options::default()) {
            Ok(_) => panic!("assembled: {body}"),
            Err(e) => e.to_string(),
        }
    };
    for (body, says) in [
        (
            "parallel_for t in tile(ragged(1, lens), 2) { task @k(t, 0) }",
            "tiles a `dense[N]`, `dense_dyn(n)` or `dense_dyn(lengths[row])` axis",
        ),
        (
            "parallel_for t in tile(sparse_row(0, ptr, idx), 2) { task @k(t, 0) }",
            "tiles a `dense[N]`",
        ),
        (
            "parallel_for t in tile(tile(dense[8], 2), 2) { task @k(t, 0) }",
            "tiles a `dense[N]`",
        ),
        (
            "parallel_for i in dense_dyn(n) { task @k(tile_start(i), 0) }",
            "`i` is not the variable of an enclosing `tile(…)` loop",
        ),
        (
            "parallel_for t in tile(dense[8], 2) { } parallel_for i in dense[2] { task @k(tile_end(n), 0) }",
            "`n` is not the variable of an enclosing `tile(…)` loop",
        ),
    ] {
        let e = fail(body);
        assert!(e.contains(says), "{body}\n→ {e}");
    }
}

/// The split-KV module re-encoded after `edit` to its tiled axis.
fn edited(edit: impl FnOnce(&mut ptovm_vm::Record)) -> Result<(), ErrorKind> {
    let (_, mut m) = asm(SPLIT_KV);
    let at = m
        .axes
        .iter()
        .position(|a| a.opcode == Opcode::AXIS_TILE as u8)
        .unwrap();
    edit(&mut m.axes[at]);
    verify(&m.encode()).map(|_| ()).map_err(|e| e.kind)
}

#[test]
fn the_verifier_takes_only_earlier_tileable_bases() {
    assert_eq!(edited(|_| {}), Ok(()));
    // Its own index (or later): a cycle.
    let r = edited(|a| *a = ptovm_vm::Record::new(a.opcode, 0, 2, a.op2()));
    assert!(matches!(r, Err(ErrorKind::OutOfRange { .. })), "{r:?}");
    // A size expression past the pool.
    let r = edited(|a| *a = ptovm_vm::Record::new(a.opcode, 0, a.op1(), 0xFFFF));
    assert!(matches!(r, Err(ErrorKind::OutOfRange { .. })), "{r:?}");
    let (_, mut m) = asm(SPLIT_KV);
    // A tiled axis over a tiled axis.
    let tile = *m.axes.last().unwrap();
    m.axes
        .push(ptovm_vm::Record::new(tile.opcode, 0, 2, tile.op2()));
    let r = verify(&m.encode()).map(|_| ()).map_err(|e| e.kind);
    assert!(
        matches!(r, Err(ErrorKind::BadCode { what, .. }) if what.starts_with("tiled axis kind")),
        "{r:?}"
    );
}

#[test]
fn tiles_survive_the_listing_round_trip_and_render() {
    let (bytes, m) = asm(SPLIT_KV);
    let listing = ptovm_assembler::disassemble(&bytes).unwrap();
    assert!(listing.contains("AXIS_TILE axis=1 size="), "{listing}");
    let again = assemble("t.ptol", &listing, &Options::default()).unwrap();
    assert_eq!(again.bytes, bytes);
    assert_eq!(
        ptovm_assembler::listing::render_axis(&m, 2),
        "tile(dense_dyn(kv_len[v0]), chunk)"
    );
}
