//! `scripts/install.sh` as a user runs it, and a C program built the way a
//! user builds one against the installed library: `#include <ulfs.h>` and
//! the flags `pkg-config ulfs` gives, nothing from the source tree.
//!
//! The script installs the build of this test's own profile (`--profile
//! dev` for `cargo test`), so it builds nothing new after `cargo build
//! --workspace` (scripts/test.sh runs it first); from a fresh clone the
//! script's own `cargo build` builds the three crates. The tools it needs
//! (cc, pkg-config, readelf) are ones scripts/test.sh installs.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root (this crate is `<root>/crates/ulfs-capi`).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crate lies two levels below the workspace root")
        .to_path_buf()
}

/// The cargo profile this test was built with and its target directory:
/// the test binary lives in `<target>/<profile-dir>/deps/`.
fn profile_and_target_dir() -> (String, PathBuf) {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    let profile_dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps has a parent")
    } else {
        deps
    };
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(other) => other.to_owned(),
        None => panic!("cannot tell the profile from {}", profile_dir.display()),
    };
    let target = profile_dir
        .parent()
        .expect("profile dir has a parent")
        .to_path_buf();
    (profile, target)
}

/// The workspace version (`[workspace.package]`), as cargo gives it.
const VERSION: &str = env!("CARGO_PKG_VERSION");
const SONAME: &str = concat!("libulfs_c.so.", env!("CARGO_PKG_VERSION_MAJOR"));
const TEXT: &str = "hello from an installed ulfs\n";

fn text(o: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `cmd`, failing with a clear message when `tool` is not installed.
fn run(cmd: &mut Command, tool: &str) -> Output {
    match cmd.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "{tool} is not installed ({e}): this test needs it \
             (Debian: apt-get install {}; scripts/test.sh installs it as root)",
            match tool {
                "pkg-config" => "pkg-config",
                "readelf" => "binutils",
                "cc" => "gcc libc6-dev",
                other => other,
            }
        ),
        Err(e) => panic!("run {tool}: {e}"),
    }
}

fn ok(cmd: &mut Command, tool: &str) -> String {
    let o = run(cmd, tool);
    assert!(o.status.success(), "{cmd:?} failed: {}", text(&o));
    String::from_utf8(o.stdout).expect("UTF-8 output")
}

/// `scripts/install.sh ARGS` for this test's build, with `DESTDIR` when
/// given (and never the caller's).
fn install(args: &[&OsStr], destdir: Option<&Path>) -> Output {
    let (profile, target) = profile_and_target_dir();
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join("scripts/install.sh"))
        .args(["--profile", &profile])
        .args(args)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("DESTDIR");
    if let Some(cargo) = std::env::var_os("CARGO") {
        cmd.env("CARGO", cargo);
    }
    if let Some(d) = destdir {
        cmd.env("DESTDIR", d);
    }
    run(&mut cmd, "bash")
}

/// The `(NEEDED)` or `(SONAME)` names in `readelf -d FILE`.
fn dynamic(file: &Path, tag: &str) -> Vec<String> {
    let out = ok(Command::new("readelf").arg("-d").arg(file), "readelf");
    out.lines()
        .filter(|l| l.contains(&format!("({tag})")))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_owned()))
        .collect()
}

/// `pkg-config ARGS ulfs` reading only the installed `ulfs.pc`.
fn pkg_config(pc_dir: &Path, sysroot: Option<&Path>, args: &[&str]) -> String {
    let mut cmd = Command::new("pkg-config");
    cmd.args(args)
        .arg("ulfs")
        .env("PKG_CONFIG_PATH", pc_dir)
        .env_remove("PKG_CONFIG_SYSROOT_DIR");
    if let Some(s) = sysroot {
        cmd.env("PKG_CONFIG_SYSROOT_DIR", s);
    }
    ok(&mut cmd, "pkg-config").trim().to_owned()
}

/// Compiles `tests/c/installed.c` with `flags` into `out`.
fn compile(flags: &[String], out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/installed.c");
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let o = run(
        Command::new(cc)
            .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .arg(&src)
            .args(flags)
            .arg("-o")
            .arg(out),
        "cc",
    );
    assert!(o.status.success(), "cc {flags:?} failed: {}", text(&o));
}

/// Runs the compiled program on a fresh image; returns what it printed.
fn run_program(bin: &Path, image: &Path, lib_path: Option<&Path>) -> String {
    let mut cmd = Command::new(bin);
    cmd.arg(image).env_remove("LD_LIBRARY_PATH");
    if let Some(p) = lib_path {
        cmd.env("LD_LIBRARY_PATH", p);
    }
    let out = ok(&mut cmd, "the compiled program");
    assert!(out.contains(&format!("read back: {TEXT}")), "{out}");
    out
}

fn split(flags: &str) -> Vec<String> {
    flags.split_whitespace().map(str::to_owned).collect()
}

/// The first ```LANG block of README.md after the line `heading`.
fn readme_block(heading: &str, lang: &str) -> String {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let (_, after) = readme
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no {heading:?}"));
    let (_, block) = after
        .split_once(&format!("```{lang}\n"))
        .unwrap_or_else(|| panic!("no {lang} block after {heading:?}"));
    block
        .split_once("```")
        .expect("a closed block")
        .0
        .to_owned()
}

/// Installs into a prefix, builds a C program with `pkg-config --cflags
/// --libs ulfs` (and once statically with `--static`), runs it, and uses
/// the installed `ulfs` on its image, `ulfs run` included (which must find
/// the installed `libulfs_preload.so`). Then a staged install (`DESTDIR`)
/// puts everything under DESTDIR while naming the prefix.
#[test]
fn installed_library_builds_and_runs_a_c_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = dir.path().join("prefix");
    let o = install(&["--prefix".as_ref(), prefix.as_os_str()], None);
    assert!(o.status.success(), "install.sh failed: {}", text(&o));
    let said = String::from_utf8_lossy(&o.stdout);

    // The layout, as distributions have it.
    let lib = prefix.join("lib");
    let real = format!("libulfs_c.so.{VERSION}");
    for f in [
        prefix.join("bin/ulfs"),
        lib.join(&real),
        lib.join("libulfs_c.a"),
        lib.join("libulfs_preload.so"),
        prefix.join("include/ulfs.h"),
        lib.join("pkgconfig/ulfs.pc"),
    ] {
        assert!(f.is_file(), "{} was not installed:\n{said}", f.display());
        assert!(
            said.contains(&*f.to_string_lossy()),
            "not reported: {}",
            f.display()
        );
    }
    for link in [SONAME, "libulfs_c.so"] {
        assert_eq!(
            std::fs::read_link(lib.join(link)).expect("a symlink"),
            Path::new(&real),
            "{link}"
        );
    }
    assert_eq!(dynamic(&lib.join(&real), "SONAME"), [SONAME]);
    // Man pages (one per command) and completions, made by the installed
    // ulfs from its own command line.
    let share = prefix.join("share");
    for f in [
        "man/man1/ulfs.1",
        "man/man1/ulfs-mkfs.1",
        "man/man1/ulfs-cp.1",
        "man/man1/ulfs-resize.1",
        "bash-completion/completions/ulfs",
        "zsh/site-functions/_ulfs",
        "fish/vendor_completions.d/ulfs.fish",
    ] {
        let f = share.join(f);
        assert!(f.is_file(), "{} was not installed:\n{said}", f.display());
    }
    let page = std::fs::read_to_string(share.join("man/man1/ulfs-resize.1")).unwrap();
    assert!(page.contains("resize2fs"), "the page is --help's text");
    let hidden = share.join("man/man1/ulfs-generate-man.1");
    assert!(!hidden.exists(), "no page for the hidden generators");
    let bash = std::fs::read_to_string(share.join("bash-completion/completions/ulfs")).unwrap();
    assert!(
        bash.contains("convert") && bash.contains("resize"),
        "{bash}"
    );

    // pkg-config, from the installed ulfs.pc alone.
    let pc_dir = lib.join("pkgconfig");
    assert_eq!(pkg_config(&pc_dir, None, &["--modversion"]), VERSION);
    let flags = pkg_config(&pc_dir, None, &["--cflags", "--libs"]);
    assert_eq!(
        flags,
        format!(
            "-I{} -L{} -lulfs_c",
            prefix.join("include").display(),
            lib.display()
        )
    );

    // Shared: the program records the soname and the loader finds that file
    // in the prefix.
    let shared = dir.path().join("installed-shared");
    compile(&split(&flags), &shared);
    let needed = dynamic(&shared, "NEEDED");
    assert!(needed.iter().any(|n| n == SONAME), "NEEDED {needed:?}");
    let image = dir.path().join("shared.img");
    let out = run_program(&shared, &image, Some(&lib));
    assert!(
        out.contains(&format!("libulfs_c: {}\n", lib.join(SONAME).display())),
        "not loaded from {}:\n{out}",
        lib.join(SONAME).display()
    );

    // Static: libulfs_c.a by its path, then what it needs (Libs.private),
    // as the README shows.
    let libdir = pkg_config(&pc_dir, None, &["--variable=libdir"]);
    assert_eq!(Path::new(&libdir), lib);
    let mut flags = split(&pkg_config(&pc_dir, None, &["--cflags"]));
    flags.push(format!("{libdir}/libulfs_c.a"));
    flags.push("-Wl,--as-needed".to_owned());
    flags.extend(split(&pkg_config(&pc_dir, None, &["--static", "--libs"])));
    let stat = dir.path().join("installed-static");
    compile(&flags, &stat);
    let needed = dynamic(&stat, "NEEDED");
    assert!(
        !needed.iter().any(|n| n.starts_with("libulfs_c")),
        "NEEDED {needed:?}"
    );
    let out = run_program(&stat, &dir.path().join("static.img"), None);
    assert!(out.contains("libulfs_c: static\n"), "{out}");

    // The README's C example, built as the README says.
    let example = dir.path().join("readme");
    std::fs::create_dir(&example).unwrap();
    std::fs::write(
        example.join("prog.c"),
        readme_block("### Using ulfs from C", "c"),
    )
    .unwrap();
    let o = run(
        Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
            .current_dir(&example)
            .args(["-Wall", "-Werror", "prog.c", "-o", "prog"])
            .args(split(&pkg_config(&pc_dir, None, &["--cflags", "--libs"]))),
        "cc",
    );
    assert!(o.status.success(), "the README's C example: {}", text(&o));
    ok(
        Command::new(example.join("prog"))
            .current_dir(&example)
            .env("LD_LIBRARY_PATH", &lib),
        "the README's C example",
    );
    let listing = ok(
        Command::new(prefix.join("bin/ulfs"))
            .arg("cat")
            .arg(example.join("disk.img"))
            .arg("/hello"),
        "ulfs",
    );
    assert_eq!(listing, "hello\n");

    // The installed tool reads the C program's image, and its `ulfs run`
    // finds the installed libulfs_preload.so (not the build tree's).
    let ulfs = prefix.join("bin/ulfs");
    assert_eq!(
        ok(
            Command::new(&ulfs).arg("cat").arg(&image).arg("/hello"),
            "ulfs"
        ),
        TEXT
    );
    let o = run(
        Command::new(&ulfs)
            .arg("run")
            .arg(&image)
            .args(["--ro", "--", "cat", "/ulfs/hello"])
            .env_remove("ULFS_PRELOAD_LIB")
            .env_remove("LD_PRELOAD"),
        "ulfs",
    );
    assert!(
        o.status.success(),
        "installed ulfs run failed: {}",
        text(&o)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), TEXT);
    ok(Command::new(&ulfs).arg("fsck").arg(&image), "ulfs");

    // Staged: the same files under DESTDIR, the .pc naming the prefix only;
    // PKG_CONFIG_SYSROOT_DIR reads it in place.
    let stage = dir.path().join("stage");
    let o = install(
        &[
            "--no-build".as_ref(),
            "--prefix".as_ref(),
            "/opt/ulfs-test".as_ref(),
        ],
        Some(&stage),
    );
    assert!(
        o.status.success(),
        "install.sh with DESTDIR failed: {}",
        text(&o)
    );
    let staged = stage.join("opt/ulfs-test");
    for f in [
        "bin/ulfs",
        "lib/libulfs_c.a",
        "include/ulfs.h",
        "lib/libulfs_preload.so",
    ] {
        assert!(staged.join(f).is_file(), "{f} not under DESTDIR");
    }
    assert_eq!(
        std::fs::read_link(staged.join("lib").join(SONAME)).expect("a symlink"),
        Path::new(&real)
    );
    let pc = std::fs::read_to_string(staged.join("lib/pkgconfig/ulfs.pc")).unwrap();
    assert!(pc.lines().any(|l| l == "prefix=/opt/ulfs-test"), "{pc}");
    assert!(
        !pc.contains(&*stage.to_string_lossy()),
        "DESTDIR leaked into ulfs.pc:\n{pc}"
    );
    assert_eq!(
        pkg_config(&staged.join("lib/pkgconfig"), Some(&stage), &["--cflags"]),
        format!("-I{}", staged.join("include").display())
    );
}

/// Unknown arguments and a relative prefix are usage errors: status 2 and
/// the usage, nothing installed.
#[test]
fn install_script_rejects_bad_usage() {
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [
        &["--bogus"][..],
        &["--prefix"],
        &["--prefix", "relative/dir"],
        &["--no-build", "extra"],
    ] {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let o = install(&args, Some(&dir.path().join("stage")));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("scripts/install.sh [--prefix DIR]"),
            "{args:?}: {err}"
        );
    }
    assert!(
        !dir.path().join("stage").exists(),
        "bad usage installed something"
    );
}

/// The README's Rust example is `crates/ulfs/examples/readme.rs`, which
/// `cargo test` compiles.
#[test]
fn readme_rust_example_is_the_compiled_example() {
    let shown = readme_block("### Using ulfs from Rust", "rust");
    let example =
        std::fs::read_to_string(workspace_root().join("crates/ulfs/examples/readme.rs")).unwrap();
    assert!(
        example.contains(&shown),
        "README.md's Rust example differs from crates/ulfs/examples/readme.rs:\n{shown}"
    );
}
