#!/usr/bin/env bash
# The main job on a small default: build ulfs, make an image, import a real
# directory tree into it, list it, read a file back, and check the image.
#   scripts/demo.sh [HOSTDIR] [IMAGE]
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-$PWD/crates}
img=${2:-${TMPDIR:-/tmp}/ulfs-demo.img}

cargo build --release -p ulfs-cli
ulfs=target/release/ulfs

$ulfs mkfs --force "$img" 64M
$ulfs import "$img" "$src" /demo
$ulfs info "$img"
echo "--- ls -l /demo"
$ulfs ls -l "$img" /demo
echo "--- ls -R / (first lines)"
$ulfs ls -R "$img" / | head -20
first=$(cd "$src" && find . -type f | sort | head -1)
first=${first#./}
echo "--- cat /demo/$first (first lines)"
$ulfs cat "$img" "/demo/$first" | head -5
echo "--- fsck"
$ulfs fsck "$img"
echo "demo: image $img checks clean"
