#!/usr/bin/env bash
# Where the threaded run's time goes: instructions per task by phase, from callgrind (issue 22).
#
#   scripts/phases.sh FILE.pto [ptovm run options…]
#   scripts/phases.sh examples/llama_layer.pto --param N=64
#
# Builds ptovm in release with line tables (target/phases), runs `ptovm run FILE OPTIONS` under
# callgrind (which runs the simulator's threads one at a time: instruction counts do not depend
# on this machine's load) with `--fair-sched=yes` (the threads take turns often, as on the
# machine: without it one thread ran long stretches alone, and the LLaMA layer's count moved
# by up to 16 % between runs; with it a count repeats within 0.1 %), and sums the instructions of
# every source line by the phase its file belongs to — inlined code counts where it was
# written, not where it was inlined:
#
#   generation       vm/src/interp/                  walking the program, filling task records
#   dependencies     vm/src/tmap/, vm/src/share.rs,  TensorMap lookups and inserts, tensor classes,
#                    vm/src/sched/once.rs            the written-once tables
#   registration     vm/src/sched/record.rs,         recording a task, joining its
#                    vm/src/sched/join.rs,           predecessors' successor lists (or a
#                    vm/src/waitlist.rs              join's, which stands for them)
#   dispatch         vm/src/sched/issue.rs, vm/src/handshake.rs, vm/src/desc.rs
#   completion       vm/src/sched/retire.rs, vm/src/ring.rs       releasing successors, retiring
#   protocol         vm/src/sched/{step,mod}.rs, vm/src/spin.rs   the scheduler loop: watermarks,
#                                                    waits, the global map's lock
#   simulator        host-sim/src/                   driver threads, core emulation, the check
#   set-up           vm/src/verify/, assembler/, src/, memset/memcpy (allocating and zeroing the
#                    windows and maps), and the standard library outside the phases above
#
# Lines of Rust's standard library (iterators, atomics, slices) inlined into a phase's function
# count for the phase its function's name says (`record` → registration, `issue` → dispatch, …),
# and so do those of the task record (vm/src/interp/task.rs), except its region tests
# (`Io::overlaps`, `Io::covers`), which count as dependencies: the maps call them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: scripts/phases.sh FILE.pto [ptovm run options…]" >&2
  exit 2
fi
command -v valgrind > /dev/null || { echo "error: valgrind is not installed" >&2; exit 1; }
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_TARGET_DIR=target/phases \
  cargo build --release -q
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --fair-sched=yes --callgrind-out-file="$out/cg" target/phases/release/ptovm run "$@" --json \
  > "$out/run.json" 2> "$out/valgrind.log" || {
  cat "$out/valgrind.log" >&2
  exit 1
}
tasks=$(grep -o '"tasks_total": *[0-9]*' "$out/run.json" | grep -o '[0-9]*$')
callgrind_annotate --auto=no --threshold=100 "$out/cg" 2> /dev/null |
  awk -v tasks="$tasks" -v file="$1" '
    function phase_of_file(f) {
      if (f ~ /(^|\/)vm\/src\/interp\//) return "generation"
      if (f ~ /(^|\/)vm\/src\/tmap\// || f ~ /(^|\/)vm\/src\/share\.rs/ || f ~ /(^|\/)vm\/src\/sched\/once\.rs/) return "dependencies"
      if (f ~ /(^|\/)vm\/src\/sched\/record\.rs/ || f ~ /(^|\/)vm\/src\/sched\/join\.rs/ || f ~ /(^|\/)vm\/src\/waitlist\.rs/) return "registration"
      if (f ~ /(^|\/)vm\/src\/sched\/issue\.rs/ || f ~ /(^|\/)vm\/src\/handshake\.rs/ || f ~ /(^|\/)vm\/src\/desc\.rs/) return "dispatch"
      if (f ~ /(^|\/)vm\/src\/sched\/retire\.rs/ || f ~ /(^|\/)vm\/src\/ring\.rs/) return "completion"
      if (f ~ /(^|\/)vm\/src\/sched\// || f ~ /(^|\/)vm\/src\/spin\.rs/) return "protocol"
      if (f ~ /(^|\/)host-sim\/src\//) return "simulator"
      return ""
    }
    function phase_of_function(fn) {
      if (fn ~ /interp::/) return "generation"
      if (fn ~ /tmap::|share::|sched::once::/) return "dependencies"
      if (fn ~ /sched::record::|sched::join::/) return "registration"
      if (fn ~ /sched::issue::/) return "dispatch"
      if (fn ~ /sched::retire::/) return "completion"
      if (fn ~ /sched::step::|sched::Aicpu/) return "protocol"
      if (fn ~ /host_sim::/) return "simulator"
      return "set-up"
    }
    /^ *[0-9,]+ +\([ 0-9.]+%\) +[^ ]+:/ {
      n = $1; gsub(",", "", n)
      if ($0 ~ /PROGRAM TOTALS/) next
      line = $0; sub(/^ *[0-9,]+ +\([ 0-9.]+%\) +/, "", line)
      split(line, parts, ":")
      f = parts[1]
      fn = substr(line, length(f) + 2)
      # The file of the task record serves every phase: its region tests (`Io::overlaps`,
      # `Io::covers`) belong to the maps; elsewhere its lines count for the function they run in.
      if (f ~ /(^|\/)vm\/src\/interp\/task\.rs/) {
        p = (fn ~ /Io::overlaps|Io::covers|tmap::/) ? "dependencies" : phase_of_function(fn)
      } else {
        p = phase_of_file(f)
        if (p == "") p = phase_of_function(fn)
      }
      sum[p] += n; total += n
    }
    END {
      printf "%s: %d tasks, %.0f instructions a task (callgrind, `ptovm run`)\n", file, tasks, total / tasks
      split("generation dependencies registration dispatch completion protocol simulator set-up", order, " ")
      printf "| phase | instructions a task | share |\n| --- | --- | --- |\n"
      for (i = 1; i <= 8; i++) {
        p = order[i]
        printf "| %s | %.0f | %.1f %% |\n", p, sum[p] / tasks, 100 * sum[p] / total
      }
    }'
