//! The image's lock (a `flock` of its file: one writer, or readers only)
//! ends with the mount that took it, even while another process holds a
//! copy of its descriptor: a process forked by some thread of the program
//! shares the open file description until it execs or exits, and the
//! image stayed "in use" that long (a test harness running tests on
//! threads saw it).

mod common;

use ulfs::{Fs, Mode, MountOptions};

#[test]
fn an_unmount_releases_the_image_while_a_forked_copy_lives() {
    let (_dir, img) = common::image_in(16 << 20, Mode::Journal);
    let fs = Fs::mount(&img, MountOptions::default()).unwrap();
    // SAFETY: the child only sleeps and exits, calling nothing that takes
    // a lock another thread may hold.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // SAFETY: async-signal-safe calls only.
        unsafe {
            libc::sleep(30);
            libc::_exit(0);
        }
    }
    fs.unmount().unwrap();
    let again = Fs::mount(&img, MountOptions::default());
    // SAFETY: our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let mut again = again.expect("the image is still in use after its unmount");

    // A forked child that drops its copy of the mount (as `ulfs run`
    // abandons it) leaves the lock with the parent, which goes on writing.
    // SAFETY: the child abandons and drops its copy and exits; this test
    // binary runs no other test thread that could hold a lock at the fork.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        again.abandon();
        drop(again);
        // SAFETY: ends the child without running the parent's exit code.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: our own child.
    unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    let second = Fs::mount(&img, MountOptions::default());
    assert!(
        second.is_err(),
        "the parent's lock went with the child's copy"
    );
    again.unmount().unwrap();
}
