//! The C ABI as C sees it: compiles `tests/c/smoke.c` against
//! `include/ulfs.h`, links it once with `libulfs_c.a` and once with
//! `libulfs_c.so`, runs both on fresh images and checks their output. Also
//! checks that the header compiles as C++ and that it declares exactly the
//! functions the shared library exports.
//!
//! Finding the libraries: this test binary lives in
//! `<target>/<profile-dir>/deps/`. When `cargo test` builds the library as a
//! dependency of this test it compiles all its crate types there, so
//! `deps/libulfs_c.{a,so}` are built from the current sources with the same
//! profile as this test. If they are not there (e.g. a cargo that builds
//! only the rlib for tests), the test runs `cargo build -p ulfs-capi` with the
//! matching profile and target dir, and uses the uplifted
//! `<target>/<profile-dir>/libulfs_c.{a,so}`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use ulfs_testkit::skip::skip;

/// The workspace root (this crate is `<root>/crates/ulfs-capi`).
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .expect("crate lies two levels below the workspace root")
        .to_path_buf()
}

/// Where the two libraries are, building them if needed.
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(find_or_build_libs)
}

fn has_libs(dir: &Path) -> bool {
    dir.join("libulfs_c.a").is_file() && dir.join("libulfs_c.so").is_file()
}

fn find_or_build_libs() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe
        .parent()
        .expect("test binary has a directory")
        .to_path_buf();
    if has_libs(&deps) {
        return deps;
    }
    // `<target>/<profile-dir>/deps/<test>`; cargo names the profile
    // directory `debug` for the dev and test profiles, `release` for the
    // release and bench profiles, and after the profile otherwise.
    let profile_dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps has a parent").to_path_buf()
    } else {
        deps.clone()
    };
    let target_dir = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if profile_dir.starts_with(&t) => PathBuf::from(t),
        _ => profile_dir
            .parent()
            .expect("profile dir has a parent")
            .to_path_buf(),
    };
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(other) => other.to_owned(),
        None => panic!("cannot tell the profile from {}", profile_dir.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "build",
            "-p",
            "ulfs-capi",
            "--profile",
            &profile,
            "--target-dir",
        ])
        .arg(&target_dir)
        .status()
        .expect("run cargo build -p ulfs-capi");
    assert!(
        status.success(),
        "cargo build -p ulfs-capi --profile {profile} failed: {status}"
    );
    assert!(
        has_libs(&profile_dir),
        "libulfs_c.a / libulfs_c.so not found in {} after cargo build",
        profile_dir.display()
    );
    profile_dir
}

#[derive(Clone, Copy, Debug)]
enum Link {
    Static,
    Shared,
}

/// Compiles `tests/c/<source>` into `out`, linked as asked.
fn compile(source: &str, link: Link, out: &Path) {
    let root = workspace_root();
    let libs = lib_dir();
    let mut cc = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()));
    cc.args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("tests/c").join(source))
        .arg("-o")
        .arg(out);
    match link {
        Link::Static => {
            cc.arg(libs.join("libulfs_c.a"))
                .args(["-lpthread", "-ldl", "-lm"]);
        }
        Link::Shared => {
            // `-l:NAME` names the exact file, so the .a beside it is not used.
            // The program records the library's soname (`libulfs_c.so.0`,
            // crate build.rs), which cargo does not make: a link of that name
            // beside the program, on its rpath, leads to the library built.
            let bin_dir = out.parent().expect("output has a directory");
            let soname = concat!("libulfs_c.so.", env!("CARGO_PKG_VERSION_MAJOR"));
            std::os::unix::fs::symlink(libs.join("libulfs_c.so"), bin_dir.join(soname))
                .or_else(|e| match e.kind() {
                    std::io::ErrorKind::AlreadyExists => Ok(()),
                    _ => Err(e),
                })
                .expect("link the soname beside the program");
            cc.arg("-L")
                .arg(libs)
                .arg("-l:libulfs_c.so")
                .arg(format!("-Wl,-rpath,{}", bin_dir.display()));
        }
    }
    let output = cc.output().expect("run the C compiler (cc)");
    assert!(
        output.status.success(),
        "compiling {source} ({link:?}) failed:\n{}",
        text(&output)
    );
}

fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Builds smoke.c with `link`, runs it on a fresh image and checks it passed.
fn run_smoke(link: Link) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("smoke");
    compile("smoke.c", link, &bin);
    let image = dir.path().join("smoke.img");
    let output = Command::new(&bin)
        .arg(&image)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run smoke");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "smoke ({link:?}) failed ({}):\n{}",
        output.status,
        text(&output)
    );
    for line in [
        "ok mkfs",
        "ok mount (err 0)",
        "ok readv data matches",
        "ok fstat timestamps nonzero",
        "ok getdents64 has f as DT_REG (d_type 8)",
        "ok nlink is 2 after link (got 2)",
        "ok readlink truncates",
        "ok dup shares the offset",
        "ok getcwd is /d/sub (got /d/sub)",
        "ok rmdir non-empty is ENOTEMPTY",
        "ok close unknown fd is EBADF",
        "ok unmount",
        "ok persisted /d/g content",
        "ok final unmount",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "smoke ({link:?}) output lacks {line:?}:\n{out}"
        );
    }
    let last = out.lines().last().unwrap_or("");
    assert!(
        last.starts_with("smoke: all ") && last.ends_with(" checks passed"),
        "last line {last:?}"
    );
    assert!(!out.contains("FAIL"), "{out}");
}

/// `tests/c/served.c` on a handle from `ulfs_connect`, served by a server
/// in this process: the calls answer as on a mounted image, and what the
/// C program wrote is in the image once the server has stopped.
#[test]
fn a_c_program_uses_an_image_a_server_owns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("served");
    compile("served.c", Link::Static, &bin);
    let image = dir.path().join("img");
    ulfs::mkfs(
        &image,
        &ulfs::MkfsOptions {
            size: 32 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    let socket = dir.path().join("sock");
    let vol = ulfs::fs::Volume::mount(&image, ulfs::MountOptions::default()).unwrap();
    let server = ulfs_server::Server::start(vol, ulfs_server::Config::new(&socket)).unwrap();
    let output = Command::new(&bin)
        .arg(&socket)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run served");
    server.stopper().stop();
    server.join().unwrap();
    assert!(output.status.success(), "served failed:\n{}", text(&output));
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l.starts_with("served: all ")),
        "{out}"
    );
    let mut fs = ulfs::Fs::mount(&image, ulfs::MountOptions::default()).unwrap();
    let fd = fs.open("/served/data", libc::O_RDONLY, 0).unwrap();
    let mut buf = [0u8; 64];
    let n = fs.read(fd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello from C");
}

#[test]
fn smoke_static() {
    run_smoke(Link::Static);
}

#[test]
fn smoke_shared() {
    run_smoke(Link::Shared);
}

/// One handle mounted with ULFS_THREADSAFE, used by four threads at once
/// (`tests/c/threads.c`): every file and every appended record is there,
/// before and after a remount.
#[test]
fn threadsafe_handle_shared_by_threads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("threads");
    compile("threads.c", Link::Shared, &bin);
    let output = Command::new(&bin)
        .arg(dir.path().join("threads.img"))
        // cargo's LD_LIBRARY_PATH would win over the rpath and could load
        // another build's library.
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run threads");
    assert!(
        output.status.success(),
        "threads failed:\n{}",
        text(&output)
    );
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        out.starts_with("threads: ok (4 threads x 1000 files)"),
        "{out}"
    );
}

/// The header is usable from C++ (its `extern "C"` block) and from strict C.
#[test]
fn header_compiles_as_cxx_and_c99() {
    let include = workspace_root().join("include");
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("use.c");
    std::fs::write(
        &src,
        "#include \"ulfs.h\"\nint use(ulfs_t *fs) { return ulfs_sync(fs); }\n",
    )
    .unwrap();
    let cxx = std::env::var_os("CXX").unwrap_or_else(|| "c++".into());
    // Strict C needs the POSIX feature macro for ssize_t and struct timespec
    // (as the header says).
    let posix = "-D_POSIX_C_SOURCE=200809L";
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    for (compiler, lang, std) in [(cxx, "c++", "-std=c++11"), (cc, "c", "-std=c99")] {
        let out = Command::new(&compiler)
            .args([
                "-x",
                lang,
                std,
                posix,
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-I",
            ])
            .arg(&include)
            .arg(&src)
            .output();
        match out {
            Ok(o) => assert!(
                o.status.success(),
                "{lang} {std} rejects ulfs.h:\n{}",
                text(&o)
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && lang == "c++" => {
                skip(
                    "header_compiles_as_cxx_and_c99 (C++ part)",
                    &format!("needs a C++ compiler ({e})"),
                );
            }
            Err(e) => panic!("run {compiler:?}: {e}"),
        }
    }
}

/// The header's text without `/* */` and `//` comments.
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, after)| after);
            out.push(' ');
        } else if let Some(r) = rest.strip_prefix("//") {
            rest = r.split_once('\n').map_or("", |(_, after)| after);
            out.push('\n');
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Every function the header declares is exported by the shared library, and
/// every exported `ulfs_*` function is declared.
#[test]
fn header_matches_exports() {
    let header =
        strip_comments(&std::fs::read_to_string(workspace_root().join("include/ulfs.h")).unwrap());
    let mut declared: Vec<String> = Vec::new();
    for (i, _) in header.match_indices("ulfs_") {
        let ident: String = header[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if header[i + ident.len()..].starts_with('(') {
            declared.push(ident);
        }
    }
    declared.sort();
    declared.dedup();

    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib_dir().join("libulfs_c.so"))
        .output();
    let nm = match nm {
        Ok(nm) => nm,
        Err(e) => return skip("header_matches_exports", &format!("needs nm ({e})")),
    };
    assert!(nm.status.success(), "nm failed:\n{}", text(&nm));
    let mut exported: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().rev();
            let (name, kind) = (f.next()?, f.next()?);
            (kind == "T" && name.starts_with("ulfs_")).then(|| name.to_owned())
        })
        .collect();
    exported.sort();
    assert!(declared.len() >= 40, "header parse found only {declared:?}");
    assert_eq!(
        declared, exported,
        "include/ulfs.h and libulfs_c.so disagree"
    );
}
