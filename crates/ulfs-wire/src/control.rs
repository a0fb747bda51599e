//! The control socket: an `AF_UNIX` `SOCK_SEQPACKET` socket at the
//! server's `--socket PATH`. It carries the handshake, goodbyes, and the
//! descriptors a request's answer cannot carry (a shared mapping's memfd,
//! OBJECT); requests go over the channel. Its other use is its lifetime:
//! either side's death closes it, which is how the other learns of it.
//!
//! Why rustix and not std: stable std has no SOCK_SEQPACKET, and its
//! ancillary data (`SocketAncillary`) and `peer_cred` are nightly-only.
//! SEQPACKET keeps message boundaries, so each message is one fixed
//! record and a short or long one is an error, not a framing problem.
//!
//! Messages (little-endian; every one starts with `kind: u16, version:
//! u16`, the version being [`PROTOCOL_VERSION`]):
//!
//! ```text
//! HELLO    1  16 B  4 want_sq u32, 8 want_data u32, 12 reserved
//! WELCOME  2  32 B  8 client_id u64, 16 sq_entries, 20 cq_entries,
//!                   24 data_off, 28 data_len (u32s)  + SCM_RIGHTS [memfd, kick]
//! ADOPT    3  24 B  4 kind u32 (1 fork, 2 exec), 8 token [u8; 16]
//! REFUSED  4 128 B  4 errno i32, 8 text length u16, 12 text [u8; 116]
//! GONE     5   8 B
//! OBJECT   6  24 B  4 tag u32, 8 object u64, 16 writable u32 (0 or 1),
//!                   20 reserved  + SCM_RIGHTS [memfd]
//! ```
//!
//! A client sends HELLO or ADOPT and gets WELCOME or REFUSED; the server
//! may send GONE at any time (shutdown). OBJECT goes with a `MAP_SHARED`
//! answer: the server sends it on the socket *before* it publishes the
//! answer (tag = the request's tag, object = the answer's object id), so a
//! client that has the answer finds the message already queued and reads
//! it without waiting ([`try_recv`]); `writable` says whether the memfd
//! was sent open for writing (the mapped descriptor was writable), as the
//! kernel's `VM_MAYWRITE`. A receiver treats anything else
//! (a wrong length, an unknown kind, a wrong number of fds, truncated
//! ancillary data) as EPROTO, closing every fd that came with it, and a
//! version it does not speak as EPROTONOSUPPORT.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use ulfs::Errno;

use crate::PROTOCOL_VERSION;
use crate::layout::Geometry;

pub const KIND_HELLO: u16 = 1;
pub const KIND_WELCOME: u16 = 2;
pub const KIND_ADOPT: u16 = 3;
pub const KIND_REFUSED: u16 = 4;
pub const KIND_GONE: u16 = 5;
pub const KIND_OBJECT: u16 = 6;

const HELLO_LEN: usize = 16;
const WELCOME_LEN: usize = 32;
const ADOPT_LEN: usize = 24;
const REFUSED_LEN: usize = 128;
const GONE_LEN: usize = 8;
const OBJECT_LEN: usize = 24;
/// The longest message; a receive buffer one byte longer notices a longer
/// one even without MSG_TRUNC.
const MAX_MSG: usize = 128;
/// Room for more fds than any message carries, so a sender that attaches
/// extra ones is caught (and its fds closed) rather than truncated.
const MAX_RECV_FDS: usize = 4;

/// Longest REFUSED text.
pub const REFUSAL_MAX: usize = 116;

/// Backlog of the listening socket: connects queue while the acceptor
/// sets up a channel.
const BACKLOG: i32 = 128;

const EPROTO: Errno = Errno(libc::EPROTO);
const EPROTONOSUPPORT: Errno = Errno(libc::EPROTONOSUPPORT);
const ENOTCONN: Errno = Errno(libc::ENOTCONN);
const EADDRINUSE: Errno = Errno(libc::EADDRINUSE);

fn errno(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// What an ADOPT takes over: a process prepared by PREPARE_FORK (the new
/// child) or PREPARE_EXEC (the same process after exec).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdoptKind {
    Fork = 1,
    Exec = 2,
}

/// A WELCOME as received: the channel's geometry and its two fds, ready
/// for [`ClientChannel::attach`](crate::ClientChannel::attach).
#[derive(Debug)]
pub struct Welcome {
    pub client_id: u64,
    pub geometry: Geometry,
    pub memfd: OwnedFd,
    pub kick: OwnedFd,
}

/// A REFUSED: the errno the client's call fails with, and a short text
/// for its log.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub errno: Errno,
    len: u16,
    text: [u8; REFUSAL_MAX],
}

impl Refusal {
    /// `text` is cut to [`REFUSAL_MAX`] bytes.
    pub fn new(errno: Errno, text: &str) -> Refusal {
        let n = text.len().min(REFUSAL_MAX);
        let mut buf = [0u8; REFUSAL_MAX];
        buf[..n].copy_from_slice(&text.as_bytes()[..n]);
        Refusal {
            errno,
            len: n as u16,
            text: buf,
        }
    }

    pub fn text(&self) -> &[u8] {
        &self.text[..self.len as usize]
    }
}

impl std::fmt::Debug for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusal")
            .field("errno", &self.errno)
            .field("text", &String::from_utf8_lossy(self.text()))
            .finish()
    }
}

/// A message as received.
#[derive(Debug)]
pub enum Msg {
    Hello {
        want_sq: u32,
        want_data: u32,
    },
    Welcome(Welcome),
    Adopt {
        token: [u8; 16],
        kind: AdoptKind,
    },
    Refused(Refusal),
    Gone,
    /// A shared mapping's memfd (see the module comment).
    Object {
        tag: u32,
        object: u64,
        writable: bool,
        memfd: OwnedFd,
    },
}

fn header(kind: u16, buf: &mut [u8]) {
    buf[0..2].copy_from_slice(&kind.to_le_bytes());
    buf[2..4].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// HELLO's bytes.
pub fn encode_hello(want_sq: u32, want_data: u32) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    header(KIND_HELLO, &mut b);
    b[4..8].copy_from_slice(&want_sq.to_le_bytes());
    b[8..12].copy_from_slice(&want_data.to_le_bytes());
    b
}

/// WELCOME's bytes (the fds travel beside them).
pub fn encode_welcome(client_id: u64, g: &Geometry) -> [u8; WELCOME_LEN] {
    let mut b = [0u8; WELCOME_LEN];
    header(KIND_WELCOME, &mut b);
    b[8..16].copy_from_slice(&client_id.to_le_bytes());
    b[16..20].copy_from_slice(&g.sq_entries.to_le_bytes());
    b[20..24].copy_from_slice(&g.cq_entries.to_le_bytes());
    b[24..28].copy_from_slice(&g.data_off.to_le_bytes());
    b[28..32].copy_from_slice(&g.data_len.to_le_bytes());
    b
}

pub fn encode_adopt(token: &[u8; 16], kind: AdoptKind) -> [u8; ADOPT_LEN] {
    let mut b = [0u8; ADOPT_LEN];
    header(KIND_ADOPT, &mut b);
    b[4..8].copy_from_slice(&(kind as u32).to_le_bytes());
    b[8..24].copy_from_slice(token);
    b
}

pub fn encode_refused(r: &Refusal) -> [u8; REFUSED_LEN] {
    let mut b = [0u8; REFUSED_LEN];
    header(KIND_REFUSED, &mut b);
    b[4..8].copy_from_slice(&r.errno.0.to_le_bytes());
    b[8..10].copy_from_slice(&r.len.to_le_bytes());
    b[12..12 + REFUSAL_MAX].copy_from_slice(&r.text);
    b
}

pub fn encode_gone() -> [u8; GONE_LEN] {
    let mut b = [0u8; GONE_LEN];
    header(KIND_GONE, &mut b);
    b
}

/// OBJECT's bytes (the memfd travels beside them).
pub fn encode_object(tag: u32, object: u64, writable: bool) -> [u8; OBJECT_LEN] {
    let mut b = [0u8; OBJECT_LEN];
    header(KIND_OBJECT, &mut b);
    b[4..8].copy_from_slice(&tag.to_le_bytes());
    b[8..16].copy_from_slice(&object.to_le_bytes());
    b[16..20].copy_from_slice(&u32::from(writable).to_le_bytes());
    b
}

/// Decodes one message and the fds that came with it. Every fd not moved
/// into the result is closed (dropped) whatever the outcome.
pub fn decode(b: &[u8], fds: Vec<OwnedFd>) -> Result<Msg, Errno> {
    if b.len() < 4 {
        return Err(EPROTO);
    }
    if u16_at(b, 2) != PROTOCOL_VERSION {
        return Err(EPROTONOSUPPORT);
    }
    let kind = u16_at(b, 0);
    let (len, nfds) = match kind {
        KIND_HELLO => (HELLO_LEN, 0),
        KIND_WELCOME => (WELCOME_LEN, 2),
        KIND_ADOPT => (ADOPT_LEN, 0),
        KIND_REFUSED => (REFUSED_LEN, 0),
        KIND_GONE => (GONE_LEN, 0),
        KIND_OBJECT => (OBJECT_LEN, 1),
        _ => return Err(EPROTO),
    };
    if b.len() != len || fds.len() != nfds {
        return Err(EPROTO);
    }
    Ok(match kind {
        KIND_HELLO => Msg::Hello {
            want_sq: u32_at(b, 4),
            want_data: u32_at(b, 8),
        },
        KIND_WELCOME => {
            let geometry = Geometry {
                sq_entries: u32_at(b, 16),
                cq_entries: u32_at(b, 20),
                data_off: u32_at(b, 24),
                data_len: u32_at(b, 28),
            };
            geometry.validate().map_err(|_| EPROTO)?;
            let mut fds = fds.into_iter();
            let (Some(memfd), Some(kick)) = (fds.next(), fds.next()) else {
                return Err(EPROTO);
            };
            Msg::Welcome(Welcome {
                client_id: u64_at(b, 8),
                geometry,
                memfd,
                kick,
            })
        }
        KIND_ADOPT => {
            let kind = match u32_at(b, 4) {
                1 => AdoptKind::Fork,
                2 => AdoptKind::Exec,
                _ => return Err(EPROTO),
            };
            Msg::Adopt {
                token: b[8..24].try_into().expect("16 bytes"),
                kind,
            }
        }
        KIND_REFUSED => {
            let e = u32_at(b, 4) as i32;
            let n = u16_at(b, 8) as usize;
            if !(1..4096).contains(&e) || n > REFUSAL_MAX {
                return Err(EPROTO);
            }
            Msg::Refused(Refusal {
                errno: Errno(e),
                len: n as u16,
                text: b[12..12 + REFUSAL_MAX].try_into().expect("116 bytes"),
            })
        }
        KIND_OBJECT => {
            let writable = match u32_at(b, 16) {
                0 => false,
                1 => true,
                _ => return Err(EPROTO),
            };
            if u32_at(b, 20) != 0 {
                return Err(EPROTO);
            }
            let Some(memfd) = fds.into_iter().next() else {
                return Err(EPROTO);
            };
            Msg::Object {
                tag: u32_at(b, 4),
                object: u64_at(b, 8),
                writable,
                memfd,
            }
        }
        _ => Msg::Gone,
    })
}

/// Sends one record with `fds` attached. MSG_NOSIGNAL: a peer that went
/// away is ENOTCONN/EPIPE, not a SIGPIPE that would kill a client's
/// program.
pub fn send_raw(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), Errno> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Errno::EINVAL);
    }
    loop {
        match rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut cmsg, SendFlags::NOSIGNAL) {
            Ok(n) if n == bytes.len() => return Ok(()),
            // SEQPACKET sends whole records; anything else is a broken peer.
            Ok(_) => return Err(EPROTO),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(errno(e)),
        }
    }
}

pub fn send_hello(sock: BorrowedFd<'_>, want_sq: u32, want_data: u32) -> Result<(), Errno> {
    send_raw(sock, &encode_hello(want_sq, want_data), &[])
}

pub fn send_welcome(
    sock: BorrowedFd<'_>,
    client_id: u64,
    geometry: &Geometry,
    memfd: BorrowedFd<'_>,
    kick: BorrowedFd<'_>,
) -> Result<(), Errno> {
    send_raw(sock, &encode_welcome(client_id, geometry), &[memfd, kick])
}

pub fn send_adopt(sock: BorrowedFd<'_>, token: &[u8; 16], kind: AdoptKind) -> Result<(), Errno> {
    send_raw(sock, &encode_adopt(token, kind), &[])
}

pub fn send_refused(sock: BorrowedFd<'_>, errno: Errno, text: &str) -> Result<(), Errno> {
    send_raw(sock, &encode_refused(&Refusal::new(errno, text)), &[])
}

pub fn send_gone(sock: BorrowedFd<'_>) -> Result<(), Errno> {
    send_raw(sock, &encode_gone(), &[])
}

/// The memfd of a `MAP_SHARED` answer, sent before the answer itself.
pub fn send_object(
    sock: BorrowedFd<'_>,
    tag: u32,
    object: u64,
    writable: bool,
    memfd: BorrowedFd<'_>,
) -> Result<(), Errno> {
    send_raw(sock, &encode_object(tag, object, writable), &[memfd])
}

/// Receives one message. Blocks unless the socket is non-blocking (then
/// EAGAIN) or has a receive timeout. The peer's close is ENOTCONN.
/// Received fds are close-on-exec; any the message does not carry by
/// definition are closed.
pub fn recv(sock: BorrowedFd<'_>) -> Result<Msg, Errno> {
    recv_with(sock, RecvFlags::CMSG_CLOEXEC)
}

/// As [`recv`], but never waits: EAGAIN when no message is queued, even
/// on a blocking socket. For a message known to be queued already (an
/// OBJECT, sent before the answer that announces it): a confused or dead
/// server then costs an error, never a hang.
pub fn try_recv(sock: BorrowedFd<'_>) -> Result<Msg, Errno> {
    recv_with(sock, RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT)
}

fn recv_with(sock: BorrowedFd<'_>, flags: RecvFlags) -> Result<Msg, Errno> {
    let mut buf = [0u8; MAX_MSG + 1];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_RECV_FDS))];
    // Dropping the buffer closes any fd not taken out of it.
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let r = loop {
        match rustix::net::recvmsg(sock, &mut [IoSliceMut::new(&mut buf)], &mut cmsg, flags) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r.map_err(errno)?,
        }
    };
    let mut fds = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if r.flags.intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC) || r.bytes > MAX_MSG {
        return Err(EPROTO);
    }
    if r.bytes == 0 {
        return Err(if fds.is_empty() { ENOTCONN } else { EPROTO });
    }
    decode(&buf[..r.bytes], fds)
}

/// A client's HELLO and the server's answer: the WELCOME, or the errno of
/// a REFUSED (ENOTCONN for GONE, EPROTO for anything else).
pub fn hello(sock: BorrowedFd<'_>, want_sq: u32, want_data: u32) -> Result<Welcome, Errno> {
    sent(sock, send_hello(sock, want_sq, want_data))?;
    expect_welcome(sock)
}

/// A client's ADOPT and the server's answer, as [`hello`].
pub fn adopt(sock: BorrowedFd<'_>, token: &[u8; 16], kind: AdoptKind) -> Result<Welcome, Errno> {
    sent(sock, send_adopt(sock, token, kind))?;
    expect_welcome(sock)
}

/// A request's send, unless the server refused the connection before
/// reading it: a server that refuses at accept (full, or out of
/// descriptors) sends its REFUSED and closes, so the send fails with EPIPE
/// or ECONNRESET while the reason waits in our queue. Its errno is the
/// answer then.
fn sent(sock: BorrowedFd<'_>, r: Result<(), Errno>) -> Result<(), Errno> {
    match r {
        Err(e) if e == Errno(libc::EPIPE) || e == Errno(libc::ECONNRESET) => match recv(sock) {
            Ok(Msg::Refused(refusal)) => Err(refusal.errno),
            Ok(Msg::Gone) => Err(ENOTCONN),
            _ => Err(e),
        },
        r => r,
    }
}

fn expect_welcome(sock: BorrowedFd<'_>) -> Result<Welcome, Errno> {
    match recv(sock)? {
        Msg::Welcome(w) => Ok(w),
        Msg::Refused(r) => Err(r.errno),
        Msg::Gone => Err(ENOTCONN),
        _ => Err(EPROTO),
    }
}

fn seqpacket() -> Result<OwnedFd, Errno> {
    rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(errno)
}

/// Connects to a server's socket (close-on-exec).
pub fn connect(path: &Path) -> Result<OwnedFd, Errno> {
    let addr = SocketAddrUnix::new(path).map_err(errno)?;
    let fd = seqpacket()?;
    loop {
        match rustix::net::connect(&fd, &addr) {
            Ok(()) => return Ok(fd),
            // An interrupted connect goes on in the background; waiting
            // for it is what a retry does (EALREADY, then EISCONN).
            Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::ALREADY) => continue,
            Err(rustix::io::Errno::ISCONN) => return Ok(fd),
            Err(e) => return Err(errno(e)),
        }
    }
}

/// A listening control socket.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    path: PathBuf,
    /// The socket file's (dev, ino), so `remove` deletes only our own.
    id: (u64, u64),
}

fn file_id(path: &Path) -> Result<(u64, u64), Errno> {
    let st = rustix::fs::lstat(path).map_err(errno)?;
    Ok((st.st_dev, st.st_ino))
}

fn bind_listen(path: &Path, addr: &SocketAddrUnix) -> Result<OwnedFd, Errno> {
    let fd = seqpacket()?;
    rustix::net::bind(&fd, addr).map_err(errno)?;
    if let Err(e) = rustix::net::listen(&fd, BACKLOG) {
        let _ = rustix::fs::unlink(path);
        return Err(errno(e));
    }
    Ok(fd)
}

/// Listens at `path` with permissions `mode`. A socket file already there
/// is replaced only if nobody answers on it (a server that died without
/// cleaning up); a live server, or a file that is not a socket, is
/// EADDRINUSE.
pub fn listen(path: &Path, mode: u32) -> Result<Listener, Errno> {
    let addr = SocketAddrUnix::new(path).map_err(errno)?;
    let fd = match bind_listen(path, &addr) {
        Err(e) if e == EADDRINUSE => {
            match connect(path) {
                Ok(_) => return Err(EADDRINUSE),
                Err(e) if e == Errno(libc::ECONNREFUSED) || e == Errno::ENOENT => {}
                Err(_) => return Err(EADDRINUSE),
            }
            match rustix::fs::lstat(path) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFSOCK => {
                    match rustix::fs::unlink(path) {
                        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                        Err(e) => return Err(errno(e)),
                    }
                }
                Ok(_) => return Err(EADDRINUSE),
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(errno(e)),
            }
            bind_listen(path, &addr)?
        }
        r => r?,
    };
    let id = file_id(path)?;
    rustix::fs::chmod(path, rustix::fs::Mode::from_raw_mode(mode)).map_err(errno)?;
    Ok(Listener {
        fd,
        path: path.to_owned(),
        id,
    })
}

/// Accepts one connection on a listening socket (close-on-exec).
pub fn accept(listener: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    loop {
        match rustix::net::accept_with(listener, SocketFlags::CLOEXEC) {
            Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::CONNABORTED) => continue,
            r => return r.map_err(errno),
        }
    }
}

impl Listener {
    pub fn accept(&self) -> Result<OwnedFd, Errno> {
        accept(self.fd.as_fd())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Deletes the socket file if it is still the one this listener bound
    /// (not one a later server put there). Not done on drop: a daemon that
    /// listens and then forks would otherwise delete its child's socket.
    pub fn remove(&self) -> Result<(), Errno> {
        match file_id(&self.path) {
            Ok(id) if id == self.id => rustix::fs::unlink(&self.path).map_err(errno),
            Ok(_) => Ok(()),
            Err(e) if e == Errno::ENOENT => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Who is at the other end of a connection, as the kernel recorded it at
/// `connect` time (not what the peer says).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCreds {
    /// 0 when the peer is in a pid namespace this process cannot see.
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, sorted, without duplicates.
    pub groups: Vec<u32>,
}

/// `SO_PEERGROUPS` (Linux 4.13): libc exports no constant for it.
const SO_PEERGROUPS: libc::c_int = 59;

/// The peer's credentials: SO_PEERCRED, and its groups from SO_PEERGROUPS,
/// or from `/proc/<pid>/status` on a kernel without it (racy against pid
/// reuse, so only the fallback).
pub fn peer_credentials(sock: BorrowedFd<'_>) -> Result<PeerCreds, Errno> {
    // libc, not rustix's `socket_peercred`: rustix's `UCred` holds a
    // non-zero `Pid`, and a peer in a pid namespace we cannot see is
    // reported with pid 0.
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable `ucred` of `len` bytes, which is what
    // SO_PEERCRED fills.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(last_errno());
    }
    let mut groups = match peer_groups(sock) {
        Ok(g) => g,
        Err(e) if e == Errno(libc::ENOPROTOOPT) => proc_groups(cred.pid)?,
        Err(e) => return Err(e),
    };
    groups.sort_unstable();
    groups.dedup();
    Ok(PeerCreds {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        groups,
    })
}

fn last_errno() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

/// SO_PEERGROUPS, with libc because rustix 1.1 does not have it. On
/// ERANGE the kernel says how much room it needs.
fn peer_groups(sock: BorrowedFd<'_>) -> Result<Vec<u32>, Errno> {
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * 4) as libc::socklen_t;
        // SAFETY: `groups` is writable for `len` bytes; the kernel writes
        // at most that many and stores the length it used (or needs).
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / 4;
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = last_errno();
        if e == Errno::ERANGE && n > groups.len() {
            groups.resize(n, 0);
            continue;
        }
        return Err(e);
    }
}

/// The `Groups:` line of `/proc/<pid>/status`.
pub(crate) fn proc_groups(pid: i32) -> Result<Vec<u32>, Errno> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    parse_groups(&status).ok_or(Errno::EIO)
}

fn parse_groups(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    line.split_whitespace().map(|g| g.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    #[test]
    fn messages_round_trip() {
        let (a, b) = pair();
        send_hello(a.as_fd(), 32, 1 << 16).unwrap();
        assert!(matches!(
            recv(b.as_fd()).unwrap(),
            Msg::Hello {
                want_sq: 32,
                want_data: 65536
            }
        ));
        let token = *b"0123456789abcdef";
        send_adopt(a.as_fd(), &token, AdoptKind::Exec).unwrap();
        match recv(b.as_fd()).unwrap() {
            Msg::Adopt { token: t, kind } => {
                assert_eq!(t, token);
                assert_eq!(kind, AdoptKind::Exec);
            }
            m => panic!("{m:?}"),
        }
        send_refused(b.as_fd(), Errno::EACCES, "not for you").unwrap();
        match recv(a.as_fd()).unwrap() {
            Msg::Refused(r) => {
                assert_eq!(r.errno, Errno::EACCES);
                assert_eq!(r.text(), b"not for you");
            }
            m => panic!("{m:?}"),
        }
        let long = "x".repeat(500);
        send_refused(b.as_fd(), Errno::EMFILE, &long).unwrap();
        match recv(a.as_fd()).unwrap() {
            Msg::Refused(r) => assert_eq!(r.text().len(), REFUSAL_MAX),
            m => panic!("{m:?}"),
        }
        send_gone(b.as_fd()).unwrap();
        assert!(matches!(recv(a.as_fd()).unwrap(), Msg::Gone));
        drop(b);
        assert_eq!(recv(a.as_fd()).unwrap_err(), ENOTCONN);
    }

    #[test]
    fn garbled_messages_are_errors() {
        let hello = encode_hello(1, 2);
        assert_eq!(decode(&hello[..15], vec![]).unwrap_err(), EPROTO);
        assert_eq!(decode(&[1, 0], vec![]).unwrap_err(), EPROTO);
        assert_eq!(decode(&[], vec![]).unwrap_err(), EPROTO);
        let mut bad = hello;
        bad[2] = 9;
        assert_eq!(decode(&bad, vec![]).unwrap_err(), EPROTONOSUPPORT);
        let mut bad = hello;
        bad[0] = 77;
        assert_eq!(decode(&bad, vec![]).unwrap_err(), EPROTO);
        let mut long = [0u8; 17];
        long[..16].copy_from_slice(&hello);
        assert_eq!(decode(&long, vec![]).unwrap_err(), EPROTO);
        // A WELCOME without its fds, or with an impossible geometry.
        let w = encode_welcome(7, &Geometry::default());
        assert_eq!(decode(&w, vec![]).unwrap_err(), EPROTO);
        let g = Geometry {
            sq_entries: 3,
            ..Geometry::default()
        };
        let fds = vec![
            rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap(),
            rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap(),
        ];
        assert_eq!(decode(&encode_welcome(7, &g), fds).unwrap_err(), EPROTO);
        let mut a = encode_adopt(&[0; 16], AdoptKind::Fork);
        a[4] = 3;
        assert_eq!(decode(&a, vec![]).unwrap_err(), EPROTO);
        let mut r = encode_refused(&Refusal::new(Errno::EPERM, "x"));
        r[8] = 200;
        assert_eq!(decode(&r, vec![]).unwrap_err(), EPROTO);
        let mut r = encode_refused(&Refusal::new(Errno::EPERM, "x"));
        r[4..8].copy_from_slice(&0i32.to_le_bytes());
        assert_eq!(decode(&r, vec![]).unwrap_err(), EPROTO);
    }

    #[test]
    fn object_carries_its_memfd_and_try_recv_never_waits() {
        let (a, b) = pair();
        // Nothing queued: EAGAIN at once on a blocking socket.
        assert_eq!(try_recv(b.as_fd()).unwrap_err(), Errno::EAGAIN);
        let memfd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::io::write(&memfd, b"shared").unwrap();
        send_object(a.as_fd(), 7, 0x1_0000_0002, true, memfd.as_fd()).unwrap();
        match try_recv(b.as_fd()).unwrap() {
            Msg::Object {
                tag,
                object,
                writable,
                memfd: got,
            } => {
                assert_eq!((tag, object, writable), (7, 0x1_0000_0002, true));
                // The same file: what one end wrote, the other reads.
                let mut buf = [0u8; 6];
                rustix::io::pread(&got, &mut buf, 0).unwrap();
                assert_eq!(&buf, b"shared");
                let (x, y) = (
                    rustix::fs::fstat(&memfd).unwrap(),
                    rustix::fs::fstat(&got).unwrap(),
                );
                assert_eq!((x.st_dev, x.st_ino), (y.st_dev, y.st_ino));
            }
            m => panic!("{m:?}"),
        }
        send_object(a.as_fd(), 8, 9, false, memfd.as_fd()).unwrap();
        assert!(matches!(
            recv(b.as_fd()).unwrap(),
            Msg::Object {
                tag: 8,
                object: 9,
                writable: false,
                ..
            }
        ));

        // Garbled OBJECTs: no fd, a flag that is neither 0 nor 1, a
        // reserved word that is not zero.
        let o = encode_object(1, 2, false);
        assert_eq!(decode(&o, vec![]).unwrap_err(), EPROTO);
        let mut bad = o;
        bad[16] = 2;
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        assert_eq!(decode(&bad, vec![fd]).unwrap_err(), EPROTO);
        let mut bad = o;
        bad[20] = 1;
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        assert_eq!(decode(&bad, vec![fd]).unwrap_err(), EPROTO);
        assert_eq!(decode(&o[..20], vec![]).unwrap_err(), EPROTO);
        // A GONE carrying an fd is garbage too, and its fd is closed.
        let (r, w) = nonblocking_pipe();
        send_raw(a.as_fd(), &encode_gone(), &[w.as_fd()]).unwrap();
        drop(w);
        assert_eq!(try_recv(b.as_fd()).unwrap_err(), EPROTO);
        assert!(write_end_closed(&r));
        // The peer's close: ENOTCONN, not EAGAIN.
        drop(a);
        assert_eq!(try_recv(b.as_fd()).unwrap_err(), ENOTCONN);
    }

    /// Whether every copy of a pipe's write end is closed: its read end
    /// then reads EOF instead of EAGAIN.
    fn write_end_closed(r: &OwnedFd) -> bool {
        let mut b = [0u8; 1];
        rustix::io::read(r, &mut b) == Ok(0)
    }

    fn nonblocking_pipe() -> (OwnedFd, OwnedFd) {
        rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )
        .unwrap()
    }

    #[test]
    fn unwanted_fds_are_closed() {
        let (a, b) = pair();
        // A HELLO carrying an fd it should not.
        let (r, w) = nonblocking_pipe();
        send_raw(a.as_fd(), &encode_hello(1, 1), &[w.as_fd()]).unwrap();
        drop(w);
        assert!(!write_end_closed(&r), "the copy in flight keeps it open");
        assert_eq!(recv(b.as_fd()).unwrap_err(), EPROTO);
        assert!(write_end_closed(&r), "the received copy was closed");

        // A WELCOME with three fds.
        let (r, w) = nonblocking_pipe();
        let e = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
        let wel = encode_welcome(1, &Geometry::default());
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        let three = [w.as_fd(), e.as_fd(), w.as_fd()];
        assert!(cmsg.push(SendAncillaryMessage::ScmRights(&three)));
        rustix::net::sendmsg(&a, &[IoSlice::new(&wel)], &mut cmsg, SendFlags::empty()).unwrap();
        drop(w);
        assert_eq!(recv(b.as_fd()).unwrap_err(), EPROTO);
        assert!(write_end_closed(&r));

        // More fds than the receive buffer has room for: MSG_CTRUNC.
        let (r, w) = nonblocking_pipe();
        let many = [w.as_fd(); 8];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(8))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        assert!(cmsg.push(SendAncillaryMessage::ScmRights(&many)));
        rustix::net::sendmsg(&a, &[IoSlice::new(&wel)], &mut cmsg, SendFlags::empty()).unwrap();
        drop(w);
        assert_eq!(recv(b.as_fd()).unwrap_err(), EPROTO);
        assert!(write_end_closed(&r));

        // An oversized record.
        send_raw(a.as_fd(), &[1u8; 300], &[]).unwrap();
        assert_eq!(recv(b.as_fd()).unwrap_err(), EPROTO);
        // And the socket still works afterwards.
        send_gone(a.as_fd()).unwrap();
        assert!(matches!(recv(b.as_fd()).unwrap(), Msg::Gone));
    }

    #[test]
    fn peer_credentials_are_this_process() {
        let (a, _b) = pair();
        let c = peer_credentials(a.as_fd()).unwrap();
        assert_eq!(c.pid, std::process::id() as i32);
        assert_eq!(c.uid, rustix::process::getuid().as_raw());
        assert_eq!(c.gid, rustix::process::getgid().as_raw());
        let mut want = rustix::process::getgroups()
            .unwrap()
            .into_iter()
            .map(|g| g.as_raw())
            .collect::<Vec<_>>();
        want.sort_unstable();
        want.dedup();
        assert_eq!(c.groups, want);
        // The fallback agrees with the socket option.
        let mut from_proc = proc_groups(c.pid).unwrap();
        from_proc.sort_unstable();
        from_proc.dedup();
        assert_eq!(from_proc, want);
    }

    #[test]
    fn groups_line_parsing() {
        let s = "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups(s), Some(vec![4, 24, 27]));
        assert_eq!(parse_groups("Groups:\t\n"), Some(vec![]));
        assert_eq!(parse_groups("Groups:\t4 x\n"), None);
        assert_eq!(parse_groups("Uid: 1\n"), None);
    }

    #[test]
    fn listen_replaces_only_stale_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let l = listen(&path, 0o600).unwrap();
        let st = rustix::fs::lstat(&path).unwrap();
        assert_eq!(st.st_mode & 0o777, 0o600);
        // A live one is not taken over.
        assert_eq!(listen(&path, 0o666).unwrap_err(), EADDRINUSE);
        // Its probe shows up at the live server as a connection that hung
        // up before saying anything.
        let probe = l.accept().unwrap();
        assert_eq!(recv(probe.as_fd()).unwrap_err(), ENOTCONN);
        let c = connect(&path).unwrap();
        let s = l.accept().unwrap();
        send_gone(s.as_fd()).unwrap();
        assert!(matches!(recv(c.as_fd()).unwrap(), Msg::Gone));
        // A dead one is.
        drop((c, s, l));
        let l2 = listen(&path, 0o666).unwrap();
        assert_eq!(rustix::fs::lstat(&path).unwrap().st_mode & 0o777, 0o666);
        // A plain file is never removed.
        let file = dir.path().join("f");
        std::fs::write(&file, b"data").unwrap();
        assert_eq!(listen(&file, 0o666).unwrap_err(), EADDRINUSE);
        assert_eq!(std::fs::read(&file).unwrap(), b"data");
        // `remove` deletes only its own socket file.
        let l3_path = dir.path().join("t");
        let l3 = listen(&l3_path, 0o666).unwrap();
        std::fs::remove_file(&l3_path).unwrap();
        let _other = listen(&l3_path, 0o666).unwrap();
        l3.remove().unwrap();
        assert!(l3_path.exists(), "someone else's socket stays");
        l2.remove().unwrap();
        assert!(!path.exists());
        assert_eq!(connect(&path).unwrap_err(), Errno::ENOENT);
    }
}
