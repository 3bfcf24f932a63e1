#!/usr/bin/env bash
# Runs every check of the project: formatting, lints, all tests, and the no_std builds of the vm
# and device crates for the bare-metal aarch64 target. Installs the rustup pieces it needs
# (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed | grep -qx aarch64-unknown-none; then
  rustup target add aarch64-unknown-none
fi
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
echo "== vm and device build no_std for aarch64-unknown-none"
cargo build -p ptovm-vm -p ptovm-device --target aarch64-unknown-none --release
echo "== the AICPU image: size, no undefined or allocator symbols"
scripts/device-size.sh
echo "== the C harnesses for aarch64 Linux (run under qemu-aarch64 by tests/tests/qemu.rs): the"
echo "   static library's, and libptovm_aicpu.so (no_std, no heap) with its dlopen launcher"
if command -v aarch64-linux-gnu-gcc >/dev/null; then
  scripts/harness.sh
  scripts/aicpu-so.sh
else
  echo "aarch64-linux-gnu-gcc not installed: the qemu cross-checks will be skipped (.ci/run installs it)"
fi
echo "== loom models of the runtime's lock-free pieces (host-sim/tests/loom.rs)"
RUSTFLAGS="--cfg loom" cargo test -q -p ptovm-host-sim --test loom --release --target-dir target/loom
echo "== the benchmarks (each once, divan's test mode) and the profiling examples, at small sizes"
cargo test -q --release -p ptovm-host-sim -p ptovm-assembler --benches
for ex in "gen_llama 8 2 1" "deps_llama 8 64 1 classes" "sim_llama 8 2 64 1" \
          "deps examples/taskbench/stencil_1d.pto 64 1" "deps examples/taskbench/stencil_1d.pto 0 1"; do
  set -- $ex
  name=$1
  shift
  cargo run -q --release -p ptovm-host-sim --example "$name" -- "$@"
done
echo "== cargo test --workspace"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
# One closing line for the whole run: the sum over every test binary and doc-test run.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
