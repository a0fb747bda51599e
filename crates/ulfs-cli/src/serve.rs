//! `ulfs serve IMAGE --socket PATH`: one process owns the image and serves
//! every program that connects (crates/ulfs-server, docs/SERVE.md), in the
//! background by default (`daemon.rs`), like `ulfs mount`. SIGTERM, SIGINT
//! or SIGHUP stops it: clients are told it is gone (their calls fail with
//! ENOTCONN), their files are closed, the journal is committed and the
//! image marked clean.

use crate::error::{CliError, CliResult};
use std::path::Path;
use std::time::Duration;
use ulfs::MountOptions;
use ulfs::fs::Volume;
use ulfs_server::{Config, Server};

pub struct Args<'a> {
    pub image: &'a Path,
    pub socket: &'a Path,
    pub workers: Option<usize>,
    pub read_only: bool,
    pub socket_mode: u32,
    pub spin_us: u64,
    pub direct_reads: bool,
    pub foreground: bool,
}

pub fn run(args: &Args) -> CliResult {
    let ctx = || "serve".to_string();
    // The server outlives the caller's working directory (it moves to /).
    let absolute = |p: &Path| {
        std::path::absolute(p).map_err(|e| CliError::io(format!("serve: {}", p.display()), &e))
    };
    let image = absolute(args.image)?;
    let socket = absolute(args.socket)?;
    if args.workers == Some(0) {
        return Err(
            CliError::new(ctx(), "--workers must be at least 1").with_code(crate::EXIT_USAGE)
        );
    }
    let mut cfg = Config::new(&socket);
    if let Some(n) = args.workers {
        cfg.workers = n;
    }
    cfg.socket_mode = args.socket_mode;
    cfg.spin = Duration::from_micros(args.spin_us);
    cfg.direct_reads = args.direct_reads;
    let serve = |ready: &mut dyn FnMut()| serve(&image, args.read_only, cfg, ready);
    let served = if args.foreground {
        serve(&mut || {})
    } else {
        crate::daemon::daemonize(serve)
    };
    served.map_err(|m| CliError::new(ctx(), m))
}

/// Mounts the image and serves it until a termination signal.
fn serve(
    image: &Path,
    read_only: bool,
    cfg: Config,
    ready: &mut dyn FnMut(),
) -> Result<(), String> {
    let opts = MountOptions {
        read_only,
        ..MountOptions::default()
    };
    raise_descriptor_limit();
    let vol = Volume::mount(image, opts).map_err(|e| e.to_string())?;
    let server = Server::start(vol, cfg).map_err(|e| e.to_string())?;
    let stopper = server.stopper();
    if let Err(e) = ctrlc::set_handler(move || stopper.stop()) {
        eprintln!("ulfs serve: SIGTERM and SIGINT will not stop the server cleanly: {e}");
    }
    ready();
    server
        .join()
        .map_err(|e| format!("unmounting {}: {e}", image.display()))
}

/// Raises the soft limit on open descriptors to the hard one: each client
/// takes two (its socket and its kick) and the usual soft limit of 1,024
/// would refuse clients long before `Limits::max_clients`.
fn raise_descriptor_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit/setrlimit to read and
    // fill.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
