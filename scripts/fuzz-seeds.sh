#!/usr/bin/env bash
# Regenerates the fuzz targets' seed files made from the bundled examples, so that they stay
# valid when the format or an example changes: fuzz/corpus/bytes/NAME.ptow (the assembled
# example), fuzz/corpus/device/NAME[-small] (its 6 launch bytes, kept, then the bytecode),
# fuzz/corpus/text/NAME.pto (the example's text) and fuzz/corpus/text/attention.ptol (a listing).
# The generator-input seeds (partition, roundtrip, schedule) do not depend on the format.
#
#   scripts/fuzz-seeds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
ptovm=target/release/ptovm
corpus=fuzz/corpus
for src in examples/*.pto; do
  name=$(basename "$src" .pto)
  "$ptovm" asm -q "$src" -o "$corpus/bytes/$name.ptow"
  cp "$src" "$corpus/text/$name.pto"
  for dev in "$corpus/device/$name" "$corpus/device/$name-small"; do
    [ -f "$dev" ] || continue
    tmp=$(mktemp)
    head -c 6 "$dev" >"$tmp"
    cat "$corpus/bytes/$name.ptow" >>"$tmp"
    mv "$tmp" "$dev"
  done
done
"$ptovm" disasm "$corpus/bytes/attention.ptow" -o "$corpus/text/attention.ptol"
echo "seed corpus regenerated from examples/"
