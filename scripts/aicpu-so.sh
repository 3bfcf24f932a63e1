#!/usr/bin/env bash
# Builds the AICPU shared object and its dlopen harness (issue 19, part 6):
#   target/aarch64-unknown-linux-gnu/aicpu/libptovm_aicpu.so  (ptovm-aicpu: no_std, no heap)
#   target/aarch64-unknown-linux-gnu/aicpu/ptovm_aicpu_harness (device/harness/aicpu_so.c)
# and checks the object: an aarch64 shared object that exports the C ABI and the kernel entry
# points, and imports from the C library only memcpy, memmove, memset and getauxval (no
# allocator, no other undefined symbol). tests/tests/qemu.rs runs the harness under qemu-aarch64.
# Needs the aarch64-unknown-linux-gnu rustup target (installed here if missing) and
# aarch64-linux-gnu-gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  rustup target add aarch64-unknown-linux-gnu
fi
cargo build -q -p ptovm-aicpu --target aarch64-unknown-linux-gnu --profile aicpu
out=target/aarch64-unknown-linux-gnu/aicpu
so=$out/libptovm_aicpu.so
nm=aarch64-linux-gnu-nm
command -v "$nm" >/dev/null || nm=nm
file_type=$(aarch64-linux-gnu-readelf -h "$so" | awk '/Type:/ {print $2} /Machine:/ {print $2}' | tr '\n' ' ')
[ "$file_type" = "DYN AArch64 " ] || { echo "$so is not an aarch64 shared object: $file_type" >&2; exit 1; }
exported=$("$nm" -D --defined-only "$so" | awk '{print $3}')
for f in ptovm_aicpu_init ptovm_aicpu_exec ptovm_layout ptovm_shared_init ptovm_instance_init \
         ptovm_run ptovm_step ptovm_core_take ptovm_core_descriptor ptovm_core_finish \
         ptovm_core_fail ptovm_launch_error ptovm_shutdown ptovm_work_bound ptovm_abi_version; do
  grep -qx "$f" <<<"$exported" || { echo "$so does not export $f" >&2; exit 1; }
done
undefined=$("$nm" -D --undefined-only "$so" | awk '$1 == "U" {print $2}' | sed 's/@.*//' | sort)
unexpected=$(grep -vxE 'memcpy|memmove|memset|getauxval' <<<"$undefined" || true)
if [ -n "$unexpected" ]; then
  echo "$so imports what it should not (an allocator, std, unwinding?):" >&2
  echo "$unexpected" >&2
  exit 1
fi
echo "$so: $(stat -c %s "$so") bytes; imports: $(tr '\n' ' ' <<<"$undefined")"
aarch64-linux-gnu-gcc -O2 -std=c11 -ffp-contract=off -Wall -Wextra -Werror -I device/include \
  device/harness/aicpu_so.c -ldl -lpthread -o "$out/ptovm_aicpu_harness"
echo "built $out/ptovm_aicpu_harness"
