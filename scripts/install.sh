#!/usr/bin/env bash
# Installs ulfs like a system library:
#   scripts/install.sh [--prefix DIR] [--no-build] [--profile NAME]
#
#   PREFIX/bin/ulfs                       the command-line tool
#   PREFIX/lib/libulfs_c.so.VERSION       the C library, soname libulfs_c.so.MAJOR
#   PREFIX/lib/libulfs_c.so.MAJOR -> ...  the name programs load at run time
#   PREFIX/lib/libulfs_c.so -> ...        the name `cc -lulfs_c` links with
#   PREFIX/lib/libulfs_c.a                the static C library
#   PREFIX/lib/libulfs_preload.so         what `ulfs run` preloads (it looks
#                                         in ../lib from its own executable)
#   PREFIX/include/ulfs.h                 the C header
#   PREFIX/lib/pkgconfig/ulfs.pc          for pkg-config --cflags --libs ulfs
#   PREFIX/share/man/man1, PREFIX/share/{bash-completion,zsh,fish}/...
#                                         man pages and shell completions (made
#                                         by the installed ulfs from --help)
#
# --prefix DIR    where to install (absolute; default /usr/local)
# --no-build      install what is already built instead of running
#                 cargo build first
# --profile NAME  the cargo profile to build and install (default release;
#                 dev installs target/debug)
# DESTDIR         staged install: every file goes under $DESTDIR$PREFIX,
#                 while the installed files name $PREFIX (as packagers use it)
# CARGO_TARGET_DIR  where cargo builds (default ./target), as for cargo
#
# ldconfig runs only for a real install (no DESTDIR) as root into a library
# directory the dynamic linker searches (/usr/local/lib is one on Debian).
# Exit status: 0 done, 1 failed, 2 bad usage.
set -euo pipefail

usage() {
    sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//'
    echo "(scripts/install.sh --help says more)"
}

die() {
    echo "install.sh: $*" >&2
    exit 1
}

bad_usage() {
    echo "install.sh: $*" >&2
    usage >&2
    exit 2
}

prefix=/usr/local
build=1
profile=release
while [ $# -gt 0 ]; do
    case $1 in
        --prefix)
            [ $# -ge 2 ] || bad_usage "--prefix needs a directory"
            prefix=$2
            shift 2
            ;;
        --prefix=*)
            prefix=${1#--prefix=}
            shift
            ;;
        --profile)
            [ $# -ge 2 ] || bad_usage "--profile needs a cargo profile name"
            profile=$2
            shift 2
            ;;
        --profile=*)
            profile=${1#--profile=}
            shift
            ;;
        --no-build)
            build=0
            shift
            ;;
        -h | --help)
            # The comment at the top of this file.
            sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
            exit 0
            ;;
        *)
            bad_usage "unknown argument: $1"
            ;;
    esac
done
case $prefix in
    /*) ;;
    *) bad_usage "--prefix must be an absolute path (got '$prefix')" ;;
esac
[ -n "$profile" ] || bad_usage "--profile needs a cargo profile name"
# Without trailing slashes, so that the paths printed and written look right;
# the prefix / becomes the empty string (files go to /bin, /lib, ...).
while [ "${prefix%/}" != "$prefix" ] && [ "$prefix" != / ]; do prefix=${prefix%/}; done
if [ "$prefix" = / ]; then prefix=; fi
destdir=${DESTDIR:-}
dest=$destdir$prefix

cd "$(dirname "$0")/.."
root=$PWD

# The workspace version, e.g. 0.1.0: the library file's suffix and the
# pkg-config Version; its first number is the soname's (crates/ulfs-capi/build.rs).
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
case $version in
    [0-9]*.[0-9]*.[0-9]*) ;;
    *) die "cannot read the workspace version from $root/Cargo.toml (got '$version')" ;;
esac
major=${version%%.*}
soname=libulfs_c.so.$major

# Where cargo puts a profile's build: `debug` for dev and test, `release`
# for release and bench, the profile's own name otherwise.
case $profile in
    dev | test) profile_dir=debug ;;
    release | bench) profile_dir=release ;;
    *) profile_dir=$profile ;;
esac
target_dir=${CARGO_TARGET_DIR:-$root/target}
case $target_dir in
    /*) ;;
    *) target_dir=$root/$target_dir ;;
esac
built=$target_dir/$profile_dir

if [ "$build" = 1 ]; then
    command -v "${CARGO:-cargo}" >/dev/null ||
        die "cargo not found; install a stable Rust toolchain (1.89 or newer) with rustup, or pass --no-build"
    echo "install.sh: building (cargo build --profile $profile -p ulfs-cli -p ulfs-capi -p ulfs-preload)"
    "${CARGO:-cargo}" build --profile "$profile" -p ulfs-cli -p ulfs-capi -p ulfs-preload
fi

for f in ulfs libulfs_c.so libulfs_c.a libulfs_preload.so; do
    [ -f "$built/$f" ] || die "$built/$f is missing: build it first (cargo build --profile $profile -p ulfs-cli -p ulfs-capi -p ulfs-preload), or drop --no-build"
done
# A library built before the soname was set would install under a name
# programs never ask for: refuse it rather than install something broken.
if command -v readelf >/dev/null; then
    got=$(readelf -d "$built/libulfs_c.so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
    [ "$got" = "$soname" ] ||
        die "$built/libulfs_c.so has soname '${got:-none}', not $soname: rebuild it (cargo build --profile $profile -p ulfs-capi)"
fi

echo "install.sh: installing ulfs $version into ${destdir:+$destdir (DESTDIR) + }${prefix:-/}"

# install -D makes the directories; it replaces a file by a new one (unlink,
# then create), so programs running the old binary or library keep theirs.
put() { # MODE SOURCE DESTINATION
    install -D -m "$1" "$2" "$3"
    echo "  $3"
}
link() { # TARGET LINK-NAME
    ln -sfn "$1" "$2"
    echo "  $2 -> $1"
}

libdir=$dest/lib
put 0755 "$built/ulfs" "$dest/bin/ulfs"
put 0755 "$built/libulfs_c.so" "$libdir/libulfs_c.so.$version"
link "libulfs_c.so.$version" "$libdir/$soname"
link "libulfs_c.so.$version" "$libdir/libulfs_c.so"
put 0644 "$built/libulfs_c.a" "$libdir/libulfs_c.a"
# `ulfs run` looks for it next to its executable, then in ../lib
# (crates/ulfs-cli/src/run.rs, find_library).
put 0755 "$built/libulfs_preload.so" "$libdir/libulfs_preload.so"
put 0644 include/ulfs.h "$dest/include/ulfs.h"

# The pkg-config file names the final prefix, never DESTDIR (a staged
# install is read with PKG_CONFIG_SYSROOT_DIR=$DESTDIR). Libs.private is what
# linking libulfs_c.a needs besides libc: the Rust standard library's native
# libraries, as
#   cargo rustc -p ulfs-capi --release -- --print native-static-libs
# reports them on Linux with glibc.
pc=$(mktemp)
trap 'rm -f "$pc"' EXIT
cat >"$pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include

Name: ulfs
Description: In-process POSIX file system over one memory-mapped image file (C API)
Version: $version
Libs: -L\${libdir} -lulfs_c
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
Cflags: -I\${includedir}
EOF
put 0644 "$pc" "$libdir/pkgconfig/ulfs.pc"

# --- Man pages and shell completions ----------------------------------------
# `ulfs generate-man DIR` (clap_mangen) and `ulfs generate-completions SHELL
# DIR` (clap_complete) are hidden subcommands (crates/ulfs-cli/src/
# generate.rs). An ulfs built before them (--no-build of an old tree) has
# neither: the part is then skipped with a message, and the rest stands.
BIN=$dest/bin/ulfs
MANDIR=$dest/share/man
if "$BIN" generate-man --help >/dev/null 2>&1; then
    mkdir -p "$MANDIR/man1"
    "$BIN" generate-man "$MANDIR/man1"
    for f in "$MANDIR/man1"/ulfs*; do
        if [ -e "$f" ]; then echo "  $f"; fi
    done
    for shell_dir in \
        "bash:$dest/share/bash-completion/completions" \
        "zsh:$dest/share/zsh/site-functions" \
        "fish:$dest/share/fish/vendor_completions.d"; do
        shell=${shell_dir%%:*}
        dir=${shell_dir#*:}
        mkdir -p "$dir"
        "$BIN" generate-completions "$shell" "$dir"
        for f in "$dir"/*ulfs*; do
            if [ -e "$f" ]; then echo "  $f"; fi
        done
    done
else
    echo "install.sh: skipped man pages and shell completions: this ulfs has no" \
        "'generate-man' subcommand yet"
fi
# --- end of the hook ---------------------------------------------------------

# The dynamic linker's cache: only for a real install as root, and only when
# the library directory is one the linker searches (/lib and /usr/lib always;
# others when ld.so.conf names them: ldconfig -v -N lists them and writes
# nothing); otherwise say how to reach the library.
linker_searches() { # DIR
    case $1 in
        /lib | /usr/lib) return 0 ;;
    esac
    # grep reads to the end (no -q): under pipefail, an early exit would fail
    # the pipeline with ldconfig's SIGPIPE.
    ldconfig -v -N 2>/dev/null | sed -n 's/^\(\/[^:]*\):.*/\1/p' | grep -xF "$1" >/dev/null
}
if [ -z "$destdir" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
    if linker_searches "$libdir"; then
        ldconfig
        echo "install.sh: ran ldconfig"
    else
        echo "install.sh: note: $libdir is not in the dynamic linker's search path:" \
            "add it to /etc/ld.so.conf.d/ and run ldconfig, or set LD_LIBRARY_PATH"
    fi
fi
if command -v pkg-config >/dev/null; then
    case ":$(pkg-config --variable pc_path pkg-config 2>/dev/null || true):${PKG_CONFIG_PATH:-}:" in
        *":$prefix/lib/pkgconfig:"*) ;;
        *) echo "install.sh: note: pkg-config does not search $prefix/lib/pkgconfig:" \
            "export PKG_CONFIG_PATH=$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}" ;;
    esac
fi
echo "install.sh: done"
