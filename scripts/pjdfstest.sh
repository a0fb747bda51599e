#!/usr/bin/env bash
# pjdfstest.sh — build the pjdfstest POSIX conformance suite and run it in DIR.
#
# Why: ulfs must behave like a POSIX file system (permissions, ownership, link
# counts, timestamps, error codes). pjdfstest checks exactly that, one syscall
# at a time, against whatever file system holds the current directory.
#
# Usage: scripts/pjdfstest.sh [--build-only] DIR [TEST-SUBDIR...]
#   DIR          directory on the file system under test (tests run inside it)
#   TEST-SUBDIR  e.g. "chmod" or "rename/24.t" (relative to tests/); default: all
# Environment:
#   PJDFSTEST_SRC    source tree   (default: ../../shared/third_party/pjdfstest
#                    relative to this script; it is never modified)
#   PJDFSTEST_BUILD  build copy    (default: /tmp/ulfs-pjdfstest-build)
#   PJDFSTEST_SKIP   file listing test paths relative to tests/ (e.g.
#                    mknod/11.t), one a line, '#' comments allowed: not run
#   PJDFSTEST_FS     force the fs type the suite sees (e.g. EXT4); by default
#                    tests/conf derives it from `df -PT .` (FUSE.ULFS for ulfs)
# Must run as root. Exits with prove's status (2 for usage errors).
set -euo pipefail

die() { echo "pjdfstest.sh: $*" >&2; exit 2; }
usage() { sed -n '8,19p' "$0" | sed 's/^# //' >&2; exit 2; }

build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
[[ ${1:-} == -h || ${1:-} == --help ]] && usage
[[ $# -ge 1 || $build_only -eq 1 ]] || usage
if ((!build_only)); then
    [[ -d $1 ]] || die "DIR '$1' does not exist or is not a directory"
fi
[[ $(id -u) -eq 0 ]] || die "must run as root (pjdfstest changes owners and uses uids 65533/65534)"

src=${PJDFSTEST_SRC:-$(dirname "$0")/../../shared/third_party/pjdfstest}
[[ -f $src/pjdfstest.c && -d $src/tests ]] || die "pjdfstest source not found at '$src' (set PJDFSTEST_SRC)"
src=$(realpath "$src")
build=${PJDFSTEST_BUILD:-/tmp/ulfs-pjdfstest-build}

# --- tools: install only what is missing ------------------------------------
need=()
for pair in autoreconf:autoconf aclocal:automake cc:gcc make:make prove:perl openssl:openssl; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
dpkg -s libc6-dev >/dev/null 2>&1 || need+=(libc6-dev)
if ((${#need[@]})); then
    echo "pjdfstest.sh: installing ${need[*]}" >&2
    apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -qy --no-install-recommends "${need[@]}" >&2; }
    apt_install || { apt-get -q update >&2 && apt_install; } || die "apt-get install ${need[*]} failed"
fi

# --- build a private copy, only when missing or the source changed -----------
sum=$(cd "$src" && find . -type f ! -path './.git/*' -print0 | LC_ALL=C sort -z \
        | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [[ ! -x $build/pjdfstest || $(cat "$build/.ulfs-src-sum" 2>/dev/null) != "$sum" ]]; then
    echo "pjdfstest.sh: building pjdfstest in $build" >&2
    if [[ -e $build && ! -e $build/.ulfs-src-sum && -n $(ls -A "$build") ]]; then
        die "refusing to wipe '$build': not empty and not a pjdfstest build dir"
    fi
    rm -rf "$build"
    mkdir -p "$build"
    cp -a "$src"/. "$build"/
    chmod -R u+w "$build"
    log=$build/.ulfs-build.log
    echo none >"$build/.ulfs-src-sum"   # marks the dir as ours, even if the build fails
    (cd "$build" && autoreconf -ifs && ./configure && make pjdfstest) >"$log" 2>&1 \
        || { tail -n 30 "$log" >&2; die "pjdfstest build failed (log: $log)"; }
    echo "$sum" >"$build/.ulfs-src-sum"
fi
# Optional fs-type override: patch the copy's conf (restored when unset).
conf=$build/tests/conf
sed -i '/^fs=.*# ulfs-override$/d' "$conf"
if [[ -n ${PJDFSTEST_FS:-} ]]; then
    sed -i "/^# If we cannot figure out file system type/i fs=\"$PJDFSTEST_FS\" # ulfs-override" "$conf"
fi
((build_only)) && { echo "pjdfstest.sh: built $build/pjdfstest"; exit 0; }

# --- select tests -----------------------------------------------------------
dir=$1; shift
(($#)) || set -- .
skip=()
if [[ -n ${PJDFSTEST_SKIP:-} ]]; then
    [[ -r $PJDFSTEST_SKIP ]] || die "skip list '$PJDFSTEST_SKIP' not readable"
    while IFS= read -r line; do
        line=${line%%#*}; line=$(echo "$line" | xargs)
        [[ -n $line ]] && skip+=("$line")
    done <"$PJDFSTEST_SKIP"
fi
tests=()
for sel in "$@"; do
    [[ -e $build/tests/$sel ]] || die "no such test or subdirectory: tests/$sel"
    while IFS= read -r t; do
        rel=${t#"$build"/tests/}
        rel=${rel#./}
        if [[ " ${skip[*]-} " == *" $rel "* ]]; then echo "skipped: $rel"; else tests+=("$t"); fi
    done < <(find "$build/tests/$sel" -name '*.t' -type f | LC_ALL=C sort)
done
((${#tests[@]})) || die "no tests selected"

echo "pjdfstest.sh: running ${#tests[@]} test files in $(realpath "$dir") ($(df -PT "$dir" | awk 'END {print $2}'))"
cd "$dir"
status=0
prove "${tests[@]}" || status=$?
exit "$status"
