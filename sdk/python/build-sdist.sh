#!/usr/bin/env bash
# Builds the Python package's sdist (maturin: the package, the workspace crates it
# needs and Cargo.lock) into target/wheels and shows that it builds offline: pip makes a
# wheel from it with no package index and cargo offline and locked (every crate from
# the local cache, none resolved anew; the workspace's crates compiled from the sdist's
# sources, the registry crates reused from build-wheel.sh's build, which has the same
# maturin, zig and manylinux settings), and a fresh venv imports it. Prints the sdist's path on its last line.
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
members=$(tar -tzf "$sdist")
for member in Cargo.lock sdk/python/Cargo.toml sdk/higgsmeter/Cargo.toml sdk/session/Cargo.toml; do
  grep -qx "higgsmeter-[^/]*/$member" <<<"$members" \
    || { echo "build-sdist: $member is missing from $sdist" >&2; exit 1; }
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The sdist unpacked, its files newer than any build here: cargo compiles every crate
# of the workspace from the sdist's own sources (the registry crates, unchanged, it
# takes from the build it shares the target directory with).
tar -xzf "$sdist" -C "$scratch"
find "$scratch" -type f -exec touch {} +
unpacked=$(ls -d "$scratch"/higgsmeter-*/)
# Offline: no index for pip, no network for cargo, the lock file as it is.
if ! PATH="$root/$venv/bin:$PATH" PIP_NO_INDEX=1 CARGO_NET_OFFLINE=true \
    CARGO_TARGET_DIR="$root/target" \
    MATURIN_PEP517_ARGS="--locked --zig --compatibility manylinux2014 --strip" \
    "$venv/bin/pip" wheel -v --disable-pip-version-check --no-build-isolation --no-deps \
      -w "$scratch/wheel" "$unpacked" >"$out/sdist-build.log" 2>&1; then
  tail -n 40 "$out/sdist-build.log" >&2
  echo "build-sdist: the sdist did not build offline (log: $out/sdist-build.log)" >&2
  exit 1
fi
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q --disable-pip-version-check --no-index --no-deps "$scratch"/wheel/*.whl
version=$("$scratch/venv/bin/python" -c 'import higgsmeter, higgsmeter._core; print(higgsmeter.__version__)')
compiled=$(grep -c '^ *Compiling higgsmeter' "$out/sdist-build.log" || true)
if [ "$compiled" -lt 5 ]; then
  echo "build-sdist: cargo compiled $compiled of the workspace's crates from the sdist; expected all of them (log: $out/sdist-build.log)" >&2
  exit 1
fi
echo "build-sdist: $(basename "$sdist") ($(($(stat -c %s "$sdist") / 1024)) KiB) builds offline ($compiled workspace crates compiled from it); its wheel imports, version $version" >&2
echo "$sdist"
