#!/usr/bin/env bash
# Runs the vm crate's tests under Miri (nightly), which reports undefined behaviour and data
# races in the code they reach — the spin lock, vm's one unsafe module, among it. Installs the
# nightly toolchain and its miri and rust-src components if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
rustup +nightly component add miri rust-src
cargo +nightly miri test -p ptovm-vm --target-dir target/miri
