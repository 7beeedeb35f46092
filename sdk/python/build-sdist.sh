#!/usr/bin/env bash
# Builds the Python package's sdist (maturin: the package, the workspace crates it
# needs and Cargo.lock) into target/wheels and shows that it builds offline: pip makes a
# wheel from it with no package index and cargo offline and locked (every crate from
# the local cache, none resolved anew; the same maturin, zig and manylinux settings as
# build-wheel.sh, so cargo reuses that build's compiled dependencies), and a fresh venv
# imports it. Prints the sdist's path on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=target/wheel-venv
if ! "$venv/bin/python" -c 'import maturin, ziglang' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r sdk/python/wheel-requirements.txt
fi
out=target/wheels
mkdir -p "$out"
rm -f "$out"/higgsmeter-*.tar.gz
PATH="$root/$venv/bin:$PATH" maturin sdist -m sdk/python/Cargo.toml -o "$out" >"$out/sdist.log" 2>&1 \
  || { cat "$out/sdist.log" >&2; exit 1; }
sdist=$(ls "$out"/higgsmeter-*.tar.gz)
for member in Cargo.lock sdk/python/Cargo.toml sdk/higgsmeter/Cargo.toml sdk/session/Cargo.toml; do
  tar -tzf "$sdist" | grep -qx "higgsmeter-[^/]*/$member" \
    || { echo "build-sdist: $member is missing from $sdist" >&2; exit 1; }
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Offline: no index for pip, no network for cargo, the lock file as it is.
if ! PATH="$root/$venv/bin:$PATH" PIP_NO_INDEX=1 CARGO_NET_OFFLINE=true \
    CARGO_TARGET_DIR="$root/target" \
    MATURIN_PEP517_ARGS="--locked --zig --compatibility manylinux2014 --strip" \
    "$venv/bin/pip" wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
      -w "$scratch/wheel" "$sdist" >"$out/sdist-build.log" 2>&1; then
  tail -n 40 "$out/sdist-build.log" >&2
  echo "build-sdist: the sdist did not build offline (log: $out/sdist-build.log)" >&2
  exit 1
fi
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q --disable-pip-version-check --no-index --no-deps "$scratch"/wheel/*.whl
version=$("$scratch/venv/bin/python" -c 'import higgsmeter, higgsmeter._core; print(higgsmeter.__version__)')
echo "build-sdist: $(basename "$sdist") ($(($(stat -c %s "$sdist") / 1024)) KiB) builds offline; its wheel imports, version $version" >&2
echo "$sdist"
