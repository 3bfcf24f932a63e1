#!/usr/bin/env bash
# The README's table of the bundled examples at their defaults (issue 20): per example, its
# tasks, its bytecode, the same tasks as expanded records, and the dependency edges that cross
# AICPUs, from `ptovm expand --json --summary`.
#
#   scripts/examples-table.sh
#
# Expanded records are counted two ways. The descriptor a core reads (`ptovm_desc`, 2,080 bytes:
# id, kernel, pool, 16 parameters, 16 resolved regions; spec/runtime.md §3.8) is what a runtime
# that expands on the host and ships the task list to the device hands over per task, like the
# ~2 KB task records of seed 001 §7. The packed form is the smallest such a record can be for
# the program: its largest task site's descriptor as a window slot holds it (`descriptor_words`
# × 8 bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
# A top-level number of the pretty-printed JSON (`--summary` lists no tasks or edges).
field() { grep -m1 "^  \"$1\": " | sed 's/.*: \([0-9]*\).*/\1/'; }
echo "| example | tasks | bytecode bytes | as 2,080-byte descriptors | as packed descriptors | cross-AICPU edges |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for f in examples/*.pto; do
  json=$(target/release/ptovm expand "$f" --json --summary)
  tasks=$(field tasks_total <<< "$json")
  bytes=$(field bytecode_bytes <<< "$json")
  words=$(field descriptor_words <<< "$json")
  cross=$(field cross_aicpu_edges <<< "$json")
  echo "| \`$(basename "$f")\` | $tasks | $bytes | $((tasks * 2080)) | $((tasks * words * 8)) | $cross |"
done
