#!/usr/bin/env bash
# Runs every fuzz target (fuzz/, cargo-fuzz with libFuzzer) for SECONDS each (default 60),
# starting from the checked-in seed corpus, and fails on the first crash, leak, timeout or
# invariant broken. Installs the nightly toolchain and cargo-fuzz if they are missing.
#
#   scripts/fuzz.sh 60        # what CI runs
#   scripts/fuzz.sh 3600      # a deeper local run
#
# A failing input is saved under fuzz/artifacts/<target>/; reproduce it with
#   (cd fuzz && cargo +nightly fuzz run -O <target> artifacts/<target>/<file>)
# and keep it as a regression test by copying it to fuzz/regressions/<target>/ (the stable
# test suite runs every file there: tests/tests/fuzz_corpus.rs).
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")/../fuzz"

rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2

cargo +nightly fuzz build -O
summary=""
for t in bytes text roundtrip partition schedule device; do
  work=$(mktemp -d)
  cp corpus/"$t"/* "$work"/
  log=$(mktemp)
  echo "== fuzz $t for ${secs}s"
  if ! cargo +nightly fuzz run -O "$t" "$work" -- -max_total_time="$secs" -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz target $t failed: the input is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  summary="$summary$t: ${runs:-?}s, $cov, corpus $(ls "$work" | wc -l) inputs"$'\n'
  rm -rf "$work" "$log"
done
echo "== fuzzing summary"
printf '%s' "$summary"
