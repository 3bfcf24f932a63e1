#!/usr/bin/env bash
# Builds the C harness of the AICPU library for aarch64 Linux (static, so qemu-aarch64 runs it
# without a sysroot): device/harness/harness.c + libptovm_device.a (aarch64-unknown-none) →
# target/aarch64-unknown-none/release/ptovm_harness. Needs aarch64-linux-gnu-gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p ptovm-device --target aarch64-unknown-none --release
out=target/aarch64-unknown-none/release
aarch64-linux-gnu-gcc -O2 -std=c11 -Wall -Wextra -Werror -static -no-pie -I device/include \
  device/harness/harness.c "$out/libptovm_device.a" -lpthread -o "$out/ptovm_harness"
echo "built $out/ptovm_harness"
