//! Processes carried across `fork` and `exec` (PREPARE_FORK, PREPARE_EXEC,
//! ADOPT): the adopter gets the same descriptions (shared offsets), the
//! locks go where the kernel would put them (kept across an exec, not
//! inherited by a fork's child, ended when the last process holding the
//! owner goes), an exec that fails takes its process back, and a token is
//! worth nothing to anyone but the process it was made for. The fork case
//! runs this binary again as the child (`child_adopts_its_parents_process`,
//! which does nothing unless the environment says so).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use ulfs::Errno;
use ulfs_client::Client;
use ulfs_client::locks::{LockAnswer, LockClass, LockCmd, LockRequest};
use ulfs_wire::AdoptKind;

const ROLE: &str = "ULFS_ADOPT_TEST_ROLE";

fn write_lock(start: i64, len: i64) -> LockRequest {
    LockRequest {
        class: LockClass::Posix,
        kind: libc::F_WRLCK,
        whence: libc::SEEK_SET,
        start,
        len,
    }
}

fn blocked(c: &mut Client, fd: i32, q: &LockRequest) -> bool {
    matches!(c.lock(fd, LockCmd::Set, q).unwrap(), LockAnswer::Blocked(_))
}

#[test]
fn an_exec_carries_descriptors_and_locks_to_the_new_program() {
    let mut s = serve(64 << 20, |_| {});
    let mut old = s.client();
    let fd = old.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    old.write(fd, b"abc").unwrap();
    let q = write_lock(0, 10);
    assert!(matches!(
        old.lock(fd, LockCmd::Set, &q).unwrap(),
        LockAnswer::Granted
    ));
    let token = old.prepare_exec().unwrap();
    // Not a fork's token, and not some other token.
    assert_eq!(
        Client::adopt(&s.socket, &token, AdoptKind::Fork).err(),
        Some(Errno::EACCES)
    );
    assert_eq!(
        Client::adopt(&s.socket, &[7; 16], AdoptKind::Exec).err(),
        Some(Errno::EACCES)
    );
    // The exec happens: the old connection goes, the new program adopts.
    drop(old);
    let mut new = Client::adopt(&s.socket, &token, AdoptKind::Exec).unwrap();
    assert_eq!(new.lseek(fd, 0, libc::SEEK_CUR).unwrap(), 3);
    new.write(fd, b"def").unwrap();
    // Once adopted, the token is spent.
    assert_eq!(
        Client::adopt(&s.socket, &token, AdoptKind::Exec).err(),
        Some(Errno::EACCES)
    );
    // The lock is still the process's: another client is kept out...
    let mut other = s.client();
    let ofd = other.open("/f", libc::O_RDWR, 0).unwrap();
    s.wait_clients(2);
    assert!(blocked(&mut other, ofd, &q));
    // ...until the process's last connection goes.
    drop(new);
    s.wait_clients(1);
    assert!(matches!(
        other.lock(ofd, LockCmd::Set, &q).unwrap(),
        LockAnswer::Granted
    ));
    let mut buf = [0u8; 8];
    assert_eq!(other.pread(ofd, &mut buf, 0).unwrap(), 6);
    assert_eq!(&buf[..6], b"abcdef");
    drop(other);
    s.stop();
}

/// A process that prepared an exec goes on as before until the exec
/// happens (a failed exec, other threads' calls): what it does meanwhile
/// is what the new program adopts, whenever that comes, and the adoption
/// ends the old connection (whose process is the adopter itself).
#[test]
fn until_its_exec_a_process_goes_on_and_the_program_gets_it_as_it_is() {
    let mut s = serve(64 << 20, |_| {});
    let mut c = s.client();
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let q = write_lock(0, 0);
    c.lock(fd, LockCmd::Set, &q).unwrap();
    let first = c.prepare_exec().unwrap();
    // The exec failed: the program goes on, and prepares another.
    c.write(fd, b"still mine").unwrap();
    let late = c.open("/g", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let token = c.prepare_exec().unwrap();
    assert_ne!(first, token);
    let mut other = s.client();
    let ofd = other.open("/f", libc::O_RDWR, 0).unwrap();
    assert!(blocked(&mut other, ofd, &q));
    // Only the latest token counts.
    assert_eq!(
        Client::adopt(&s.socket, &first, AdoptKind::Exec).err(),
        Some(Errno::EACCES)
    );
    // The exec happens (the old connection not seen to end yet).
    let mut new = Client::adopt(&s.socket, &token, AdoptKind::Exec).unwrap();
    assert_eq!(c.write(fd, b"x"), Err(Errno::ENOTCONN));
    assert_eq!(new.lseek(fd, 0, libc::SEEK_CUR).unwrap(), 10);
    new.write(late, b"opened after the first prepare").unwrap();
    assert!(
        blocked(&mut other, ofd, &q),
        "the lock went with the process"
    );
    drop((c, new));
    s.wait_clients(1);
    assert!(!blocked(&mut other, ofd, &q));
    drop(other);
    s.stop();
}

#[test]
fn a_forks_token_is_only_for_a_child_of_the_preparer() {
    let mut s = serve(64 << 20, |_| {});
    let mut parent = s.client();
    let fd = parent
        .open("/out", libc::O_CREAT | libc::O_WRONLY, 0o644)
        .unwrap();
    parent.write(fd, b"parent ").unwrap();
    let q = write_lock(0, 1);
    parent.lock(fd, LockCmd::Set, &q).unwrap();
    let token = parent.prepare_fork().unwrap();
    // This process is the preparer, not its child.
    assert_eq!(
        Client::adopt(&s.socket, &token, AdoptKind::Fork).err(),
        Some(Errno::EACCES)
    );
    let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_adopts_its_parents_process", "--nocapture"])
        .env(ROLE, format!("{}/{hex}/{fd}", s.socket.display()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    // The child wrote through the shared offset, and met the parent's
    // lock as another process's.
    assert!(
        BufReader::new(&out.stdout[..])
            .lines()
            .any(|l| l.is_ok_and(|l| l == "child: lock blocked")),
        "{said}"
    );
    assert_eq!(parent.lseek(fd, 0, libc::SEEK_CUR).unwrap(), 13);
    parent.write(fd, b"parent").unwrap();
    let mut buf = [0u8; 32];
    let rd = parent.open("/out", libc::O_RDONLY, 0).unwrap();
    let n = parent.read(rd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"parent child parent");
    drop(parent);
    s.stop();
}

/// The child of `a_forks_token_is_only_for_a_child_of_the_preparer`.
#[test]
fn child_adopts_its_parents_process() {
    let Ok(arg) = std::env::var(ROLE) else {
        return;
    };
    let mut parts = arg.rsplitn(3, '/');
    let fd: i32 = parts.next().unwrap().parse().unwrap();
    let hex = parts.next().unwrap();
    let socket = parts.next().unwrap();
    let mut token = [0u8; 16];
    for (i, b) in token.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let mut c = Client::adopt(socket, &token, AdoptKind::Fork).unwrap();
    c.write(fd, b"child ").unwrap();
    if blocked(&mut c, fd, &write_lock(0, 1)) {
        println!("child: lock blocked");
    }
}
