#!/usr/bin/env bash
# Issue 22's performance goals, measured together (BENCHMARKS.md, "Task Bench's patterns:
# today's table"):
#
#   scripts/patterns.sh [ROUNDS]      (default 5 rounds)
#
# Builds ptovm and the `deps` example in release, then runs ROUNDS rounds. A round takes every
# measurement once, in the same order, so that this machine's drift (up to 2× within an hour)
# hits all of them alike, and each ratio is taken within one round:
#
#   one instance  generation + dependency building, recording as the scheduler does
#                 (`cargo run --release -p ptovm-host-sim --example deps -- FILE WINDOW 3 …`):
#                 ns a task at window 1,024, and that over the LLaMA layer's (N = 256) in the
#                 same round (goal: at most 2); the same at windows 64 and 4,096, and the larger
#                 over the smaller (goal: below 1.5)
#   threaded      `ptovm run FILE --param … --json`, 6 AICPUs, empty kernels: tasks/ms, and
#                 no_comm's of the same width and steps, run just before it, over it (goal: at
#                 most 2); the LLaMA layer's tasks/ms (goal: at least 20,000)
#   chain         `ptovm run examples/taskbench/chain.pto --param T=200000 [--aicpus 1] --json`:
#                 wall time over the 200,000 hops (goals: 60 ns on one AICPU, 200 across six)
#
# Prints one Markdown table of the rounds' medians, then each round's chain over six AICPUs:
# this machine has a slow state (BENCHMARKS.md, "The last join's quick way in the one-instance
# measurement") in which that hop takes 800–1,100 ns instead of about 330, and the threaded
# figures of patterns whose AICPUs wait on each other fall by up to 4×; such a round's figures
# do not compare with a calm round's. random_nearest takes its `keep` array from
# `cargo run -p ptovm-tests --example random_nearest_keep -- 1000 3`.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
case $rounds in
  '' | *[!0-9]* | 0)
    echo "usage: scripts/patterns.sh [ROUNDS]  (ROUNDS a positive integer)" >&2
    exit 2
    ;;
esac
cargo build --release -q
cargo build --release -q -p ptovm-host-sim --example deps
keep=$(cargo run --release -q -p ptovm-tests --example random_nearest_keep -- 1000 3)
ptovm=target/release/ptovm
deps=target/release/examples/deps
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Each pattern: name, then its parameters as NAME=VALUE (Task Bench's shapes of the issue).
patterns=(
  "trivial W=1000 T=100"
  "no_comm W=1000 T=100"
  "stencil_1d W=1000 T=100"
  "stencil_1d_periodic W=1000 T=100"
  "tree W=1000 T=100"
  "nearest W=1000 T=100"
  "spread W=1000 T=100"
  "random_nearest W=1000 T=100 keep=$keep"
  "dom W=100 T=1000"
  "fft W=1024 T=100 S=10"
  "all_to_all W=100 T=1000"
)

# ns a task of `deps FILE WINDOW 3 PARAMS…` (its summary line's "… ns/task").
one_instance() {
  "$deps" "$@" | tail -1 | grep -o '[0-9.]* ns/task' | grep -o '^[0-9.]*'
}
# A JSON number field of `ptovm run … --json`.
run_field() {
  local field=$1
  shift
  "$ptovm" run "$@" --json | grep -o "\"$field\": *[0-9.e+-]*" | grep -o '[0-9.e+-]*$'
}
run_params() {
  local p
  for p in "$@"; do printf -- '--param %s ' "$p"; done
}
# no_comm's shape for a pattern's: the same W and T.
shape() {
  local p w=1000 t=100
  for p in "$@"; do
    case $p in W=*) w=${p#W=} ;; T=*) t=${p#T=} ;; esac
  done
  echo "W=$w T=$t"
}

for ((r = 1; r <= rounds; r++)); do
  echo "round $r of $rounds" >&2
  llama=$(one_instance examples/llama_layer.pto 1024 3 N=256)
  echo "$llama" >> "$out/llama.one"
  run_field tasks_per_ms examples/llama_layer.pto >> "$out/llama.run"
  for entry in "${patterns[@]}"; do
    read -r name params <<< "$entry"
    # shellcheck disable=SC2206
    ps=($params)
    file=examples/taskbench/$name.pto
    n1024=$(one_instance "$file" 1024 3 "${ps[@]}")
    n64=$(one_instance "$file" 64 3 "${ps[@]}")
    n4096=$(one_instance "$file" 4096 3 "${ps[@]}")
    echo "$n1024" >> "$out/$name.one"
    echo "$n1024 / $llama" | bc -l >> "$out/$name.ratio"
    echo "$n64" >> "$out/$name.w64"
    echo "$n4096" >> "$out/$name.w4096"
    awk -v a="$n64" -v b="$n4096" 'BEGIN { print (a > b ? a / b : b / a) }' >> "$out/$name.windows"
    # no_comm of the same shape right before it: the machine's drift within a round (tens of
    # seconds) stays out of the ratio.
    # shellcheck disable=SC2046,SC2086
    base=$(run_field tasks_per_ms examples/taskbench/no_comm.pto $(run_params $(shape "${ps[@]}")))
    # shellcheck disable=SC2046
    tpms=$(run_field tasks_per_ms "$file" $(run_params "${ps[@]}"))
    echo "$tpms" >> "$out/$name.run"
    echo "$base / $tpms" | bc -l >> "$out/$name.vs"
  done
  for aicpus in 1 6; do
    wall=$(run_field wall_ms examples/taskbench/chain.pto --param T=200000 --aicpus $aicpus)
    echo "$wall * 1000000 / 200000" | bc -l >> "$out/chain.$aicpus"
  done
done

median() {
  sort -g "$1" | awk '{ a[NR] = $1 } END { m = a[int((NR + 1) / 2)]; print m }'
}
fmt() { printf "%.${2:-1}f" "$(median "$1")"; }

echo "$rounds rounds, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD), medians"
echo
echo "| pattern | parameters | one instance, ns a task | ÷ LLaMA | windows 64 / 4,096, ns | larger ÷ smaller | threaded, tasks/ms | no_comm ÷ it |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
printf "| LLaMA layer | N = 256 | %s | 1 | | | %s | |\n" "$(fmt "$out/llama.one")" "$(fmt "$out/llama.run" 0)"
for entry in "${patterns[@]}"; do
  read -r name params <<< "$entry"
  shown=$params
  if [ "$name" = random_nearest ]; then shown="W=1000 T=100 (keep: random_nearest_keep 1000 3)"; fi
  printf "| %s | %s | %s | %s | %s / %s | %s | %s | %s |\n" "$name" "$shown" \
    "$(fmt "$out/$name.one")" "$(fmt "$out/$name.ratio" 2)" "$(fmt "$out/$name.w64")" \
    "$(fmt "$out/$name.w4096")" "$(fmt "$out/$name.windows" 2)" "$(fmt "$out/$name.run" 0)" \
    "$(fmt "$out/$name.vs" 2)"
done
echo
printf "chain, ns a hop: one AICPU %s, six AICPUs %s\n" "$(fmt "$out/chain.1")" "$(fmt "$out/chain.6")"
printf "the chain over six AICPUs, round by round (about 330: calm; 800 or more: the slow state):"
awk '{ printf " %.0f", $1 } END { print "" }' "$out/chain.6"
