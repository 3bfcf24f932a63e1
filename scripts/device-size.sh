#!/usr/bin/env bash
# The AICPU library as it would be linked: builds ptovm-device for aarch64-unknown-none, links
# every C ABI function (and what they reach, nothing else: --gc-sections) into one image with
# the toolchain's lld, prints its code size, and fails if it references any symbol it does not
# define (in particular an allocator: malloc, free, __rust_alloc).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
[ -x "$bin/llvm-nm" ] || rustup component add llvm-tools >/dev/null
cargo build -q -p ptovm-device --target aarch64-unknown-none --release
lib=target/aarch64-unknown-none/release/libptovm_device.a
image=target/aarch64-unknown-none/release/ptovm_aicpu.elf
# The static library's C ABI: every module of the crate but kernel.rs (the AICPU kernel's own
# entry points, which scripts/aicpu-so.sh links into libptovm_aicpu.so).
sources=$(ls device/src/*.rs | grep -v '/kernel\.rs$')
syms=$(grep -ho 'pub \(unsafe \)\?extern "C" fn ptovm_[a-z_]*' $sources | sed 's/.*fn //')
undef=()
for s in $syms; do undef+=(-u "$s"); done
"$bin/rust-lld" -flavor gnu --gc-sections -static --entry=ptovm_run "${undef[@]}" -o "$image" "$lib"
# The symbol list is read once: `llvm-nm | grep -q` under pipefail failed at random when grep
# quit early and nm, still writing a large list, died of SIGPIPE.
defined=$("$bin/llvm-nm" --defined-only "$image")
for s in $syms; do
  grep -q " T $s\$" <<<"$defined" || { echo "missing: $s"; exit 1; }
done
if "$bin/llvm-nm" --undefined-only "$image" | grep .; then
  echo "the AICPU image references symbols it does not define (above)"
  exit 1
fi
if "$bin/llvm-nm" "$image" | grep -E -i ' (malloc|calloc|realloc|free|__rust_alloc|__rg_alloc|__rust_dealloc)$'; then
  echo "the AICPU image contains allocator symbols (above)"
  exit 1
fi
"$bin/llvm-size" -A "$image" | awk -v n="$(echo "$syms" | wc -w)" \
  '$1 == ".text" { t = $2 } $1 == ".rodata" { r = $2 }
   END { printf "AICPU image (%d C ABI functions, aarch64, --gc-sections): .text %d bytes (%.1f KiB), .rodata %d bytes; no undefined or allocator symbols\n", n, t, t / 1024, r }'
