//! The fixture of this crate's tests: a server in this process (its own
//! threads) over a fresh journal-mode image, and clients connected to it
//! over real sockets and channels.
#![allow(dead_code)]

use std::path::PathBuf;
use ulfs::fs::Volume;
use ulfs::{MkfsOptions, Mode, MountOptions};
use ulfs_client::Client;
use ulfs_server::{Config, Server};

pub struct Served {
    pub dir: tempfile::TempDir,
    pub img: PathBuf,
    pub socket: PathBuf,
    pub server: Option<Server>,
}

pub fn serve() -> Served {
    serve_with(|_| {})
}

/// As [`serve`], with the volume set up by `setup` first.
pub fn serve_with(setup: impl FnOnce(&mut Volume)) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    ulfs::mkfs(
        &img,
        &MkfsOptions {
            size: 64 << 20,
            mode: Mode::Journal,
            ..Default::default()
        },
    )
    .unwrap();
    let socket = dir.path().join("sock");
    let mut vol = Volume::mount(&img, MountOptions::default()).unwrap();
    setup(&mut vol);
    let mut cfg = Config::new(&socket);
    cfg.workers = 2;
    let server = Server::start(vol, cfg).unwrap();
    Served {
        dir,
        img,
        socket,
        server: Some(server),
    }
}

impl Served {
    pub fn client(&self) -> Client {
        Client::connect(&self.socket).unwrap()
    }

    /// Stops the server; the image must then be clean.
    pub fn stop(&mut self) {
        let server = self.server.take().unwrap();
        server.stopper().stop();
        server.join().unwrap();
        let report = ulfs::fsck(&self.img, &mut Default::default()).unwrap();
        assert!(report.is_clean(), "{report:?}");
    }
}
