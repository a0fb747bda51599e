//! A server's process that forks (`Ctx::fork`): the child's descriptors
//! are the parent's descriptions, so offsets and status flags move
//! together (a shell's `(cmd1; cmd2) > f` appends one output after the
//! other); each process closes only its own descriptors; a file unlinked
//! while both hold it open lives until the last of them closes it, and
//! its space then returns; the child has its own working directory from
//! then on.

mod common;

use ulfs::fs::Volume;
use ulfs::posix::{Ctx, Process};
use ulfs::{Identity, Mode, MountOptions};

#[test]
fn a_forked_process_shares_descriptions_and_keeps_files_alive() {
    let (_dir, img) = common::image_in(32 << 20, Mode::Journal);
    let mut vol = Volume::mount(&img, MountOptions::default()).unwrap();
    let mut parent = Process::new(&mut vol, Identity::Host);
    let mut ctx = Ctx {
        vol: &mut vol,
        proc: &mut parent,
    };
    // The root's first entry gives it a block it keeps: counted before.
    ctx.mkdir("/d", 0o755).unwrap();
    let free_before = ctx.statfs("/").unwrap().bfree;
    let out = ctx
        .open("/out", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    let big = ctx
        .open("/big", libc::O_CREAT | libc::O_RDWR, 0o644)
        .unwrap();
    ctx.write(big, &vec![5u8; 4 << 20]).unwrap();
    ctx.write(out, b"parent ").unwrap();
    let mut child = ctx.fork(Identity::Host);

    let mut cctx = Ctx {
        vol: &mut vol,
        proc: &mut child,
    };
    cctx.write(out, b"child ").unwrap();
    cctx.fcntl_setfl(out, libc::O_APPEND).unwrap();
    cctx.chdir("/d").unwrap();
    cctx.close(out).unwrap();
    assert_eq!(cctx.getcwd().unwrap(), b"/d");

    let mut ctx = Ctx {
        vol: &mut vol,
        proc: &mut parent,
    };
    // The child's write moved the shared offset; its F_SETFL is seen.
    assert_eq!(ctx.lseek(out, 0, libc::SEEK_CUR).unwrap(), 13);
    assert_ne!(ctx.fcntl_getfl(out).unwrap() & libc::O_APPEND, 0);
    ctx.write(out, b"parent").unwrap();
    assert_eq!(ctx.getcwd().unwrap(), b"/");
    // Unlinked while both hold it: alive until the last close.
    ctx.unlink("/big").unwrap();
    ctx.close(big).unwrap();
    let mut cctx = Ctx {
        vol: &mut vol,
        proc: &mut child,
    };
    let mut buf = [0u8; 4];
    assert_eq!(cctx.pread(big, &mut buf, 1 << 20).unwrap(), 4);
    assert_eq!(buf, [5; 4]);
    assert_eq!(cctx.close(out), Err(ulfs::Errno::EBADF));
    cctx.exit().unwrap();

    let mut ctx = Ctx {
        vol: &mut vol,
        proc: &mut parent,
    };
    let fd = ctx.open("/out", libc::O_RDONLY, 0).unwrap();
    let mut text = [0u8; 64];
    let n = ctx.read(fd, &mut text).unwrap();
    assert_eq!(&text[..n], b"parent child parent");
    ctx.close(fd).unwrap();
    ctx.close(out).unwrap();
    ctx.unlink("/out").unwrap();
    assert_eq!(ctx.statfs("/").unwrap().bfree, free_before);
    ctx.exit().unwrap();
    vol.unmount().unwrap();
}
