#!/usr/bin/env bash
# The main job on a small default: build ulfs, make an image, put a real
# directory tree in it, and run an unmodified program on it with
# `ulfs run` (python3 when the machine has it, else the shell and
# coreutils), then read its result back and check the image.
#   scripts/demo.sh [HOSTDIR] [IMAGE]
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-$PWD/crates}
img=${2:-${TMPDIR:-/tmp}/ulfs-demo.img}

# The ulfs tool and the library `ulfs run` preloads into programs.
cargo build --release -p ulfs-cli -p ulfs-preload
ulfs=target/release/ulfs

$ulfs mkfs --force "$img" 64M
$ulfs import "$img" "$src" /demo
$ulfs info "$img"

echo "--- ulfs run: a program works on the image's files under /ulfs"
if command -v python3 >/dev/null; then
    $ulfs run "$img" -- python3 - <<'PY'
import collections, os
sizes = collections.Counter()
files = collections.Counter()
for root, dirs, names in os.walk("/ulfs/demo"):
    for n in names:
        ext = os.path.splitext(n)[1] or "(none)"
        files[ext] += 1
        sizes[ext] += os.path.getsize(os.path.join(root, n))
os.makedirs("/ulfs/reports", exist_ok=True)
with open("/ulfs/reports/summary.txt", "w") as out:
    for ext, n in files.most_common():
        out.write(f"{ext:>10}  {n:5} files  {sizes[ext]:9} bytes\n")
print(f"python3 on the image: {sum(files.values())} files walked, "
      "summary written to /ulfs/reports/summary.txt")
PY
else
    $ulfs run "$img" -- sh -c '
        mkdir -p /ulfs/reports
        find /ulfs/demo -type f | sed "s/.*\.//" | sort | uniq -c | sort -rn > /ulfs/reports/summary.txt
        echo "sh, find and sort on the image: summary written to /ulfs/reports/summary.txt"'
fi
echo "--- the report, read back from the image by the ulfs tool"
$ulfs cat "$img" /reports/summary.txt
echo "--- fsck"
$ulfs fsck "$img"
echo "demo: image $img checks clean"
