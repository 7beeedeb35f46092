#!/usr/bin/env bash
# Builds the Python package's release wheel as users install it: one abi3 wheel for
# CPython >= 3.10, manylinux_2_17 x86_64 (maturin with zig as the linker, both from
# PyPI), stripped; checks its platform tag with auditwheel (manylinux_2_17 or lower)
# and its size (at most 8 MiB). Its own venv in target/wheel-venv; the wheel in
# target/wheels. Prints the wheel's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/wheel-venv
if ! "$venv/bin/python" -c 'import maturin, ziglang, auditwheel' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r sdk/python/wheel-requirements.txt
fi
out=target/wheels
rm -f "$out"/higgsmeter-*.whl
PATH="$PWD/$venv/bin:$PATH" maturin build --release --strip --zig --compatibility manylinux2014 \
  -i python3 -m sdk/python/Cargo.toml -o "$out" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
wheel=$(ls "$out"/higgsmeter-*manylinux*.whl)
tag=$("$venv/bin/auditwheel" show "$wheel" | tr -d '\n' | sed -n 's/.*consistent with the following platform tag: *"\([^"]*\)".*/\1/p')
glibc_minor=$(echo "$tag" | sed -n 's/^manylinux_2_\([0-9]*\)_x86_64$/\1/p')
if [ -z "$glibc_minor" ] || [ "$glibc_minor" -gt 17 ]; then
  echo "build-wheel: auditwheel says the wheel is \"$tag\"; manylinux_2_17 or lower expected" >&2
  exit 1
fi
size=$(stat -c %s "$wheel")
if [ "$size" -gt $((8 * 1024 * 1024)) ]; then
  echo "build-wheel: the wheel is $size bytes; at most 8 MiB expected" >&2
  exit 1
fi
echo "build-wheel: $(basename "$wheel"): $tag, $((size / 1024)) KiB" >&2
echo "$wheel"
