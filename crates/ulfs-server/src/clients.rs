//! Who is connected, and each client's life: accepted on the socket,
//! identified by the kernel, given a channel at its HELLO, served, torn
//! down when it goes.
//!
//! **Identity.** A client's credentials are the kernel's record of who
//! connected (SO_PEERCRED: effective uid and gid, pid; SO_PEERGROUPS: the
//! supplementary groups), read once at accept, before the client has sent
//! a byte. Nothing the client says changes them: its `Process` is
//! `Identity::Verified` with those ids, and every call is judged by them.
//!
//! **Teardown.** However a client goes (it closes its socket, exits, is
//! killed with SIGKILL in the middle of a request, or breaks its ring),
//! the server sees its socket hang up or the ring broken, and does what a
//! process's exit does: every descriptor it had is closed and its working
//! directory let go (`Ctx::exit_noting`), so files it held open, unlinked
//! or not, are released; its locks go as those closes and its exit say
//! (`locks.rs`), and its shared mappings as if it had unmapped each
//! (`maps.rs`: the last mapping of a file writes it back). A request being
//! served when it died finishes first: it
//! only touches the server's own mapping of the channel, which outlives
//! the client. The state is behind one mutex per client, taken by the one
//! worker serving it, so teardown waits for that request and no later one
//! starts.

use crate::Shared;
use crate::adopt::Taken;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use ulfs::posix::Process;
use ulfs::posix::perm::Creds;
use ulfs::{Errno, Identity};
use ulfs_wire::{Geometry, Msg, ServerChannel};

pub(crate) struct Client {
    pub id: u64,
    pub sock: OwnedFd,
    pub creds: Creds,
    /// The client's pid as the kernel reported it at connect time
    /// (SO_PEERCRED; 0 for a process in a pid namespace the server cannot
    /// see): what `F_GETLK` reports for its POSIX locks.
    pub pid: i32,
    pub state: Mutex<State>,
    /// Set (before its state is locked) when the client is being torn
    /// down: the worker serving it stops after the request in hand rather
    /// than finish its turn for a client that is gone.
    pub leaving: AtomicBool,
    /// When the connection was accepted (for `Limits::hello_timeout`).
    pub accepted: std::time::Instant,
    /// DIRECT was answered (once per connection: each answer sends a
    /// descriptor, which a client that never takes it would pile up);
    /// LEASE is only for a client that was given the board.
    pub direct_given: AtomicBool,
}

/// A client's state, changed only by whoever holds its mutex.
pub(crate) struct State {
    /// Given at the HELLO.
    pub chan: Option<ServerChannel>,
    /// The server's end of the client's kick eventfd.
    pub kick: Option<OwnedFd>,
    pub proc: Option<Process>,
    /// Who the client's POSIX locks belong to: its id, unless an exec
    /// adoption carries the locks of the process it continues (the same
    /// process to the kernel, so the same owner).
    pub lock_owner: u64,
    /// The token of an exec this client prepared (PREPARE_EXEC): when the
    /// connection ends while the process runs, the process is parked under
    /// it for the new program (`adopt.rs`).
    pub exec_token: Option<crate::adopt::ExecToken>,
    /// The bytes of `Shared::data_bytes` its channel holds.
    pub data_bytes: u64,
    pub dead: bool,
}

impl Client {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while serving was caught and answered; the state is as
        // the call left it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
pub(crate) struct Clients {
    map: Mutex<HashMap<u64, Arc<Client>>>,
    next_id: AtomicU64,
}

impl Clients {
    fn map(&self) -> MutexGuard<'_, HashMap<u64, Arc<Client>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// The clients of user `uid`.
    fn of_user(&self, uid: u32) -> usize {
        self.map().values().filter(|c| c.creds.uid() == uid).count()
    }

    pub fn get(&self, id: u64) -> Option<Arc<Client>> {
        self.map().get(&id).cloned()
    }

    /// A new connection: its credentials from the kernel, then it waits
    /// for its HELLO (in the epoll). Refused with a message when the
    /// server is full or the kernel cannot say who it is.
    pub fn accept(&self, s: &Shared, sock: OwnedFd) {
        if self.len() >= s.cfg.limits.max_clients {
            return refuse(
                sock,
                Msg::Refused(ulfs_wire::Refusal::new(
                    Errno(libc::EAGAIN),
                    "the server has too many clients",
                )),
            );
        }
        let peer = match ulfs_wire::control::peer_credentials(sock.as_fd()) {
            Ok(p) => p,
            Err(e) => {
                let why = "the kernel could not say who is connecting";
                return refuse(sock, Msg::Refused(ulfs_wire::Refusal::new(e, why)));
            }
        };
        if peer.uid != 0 && self.of_user(peer.uid) >= s.cfg.limits.max_clients_per_user {
            return refuse(
                sock,
                Msg::Refused(ulfs_wire::Refusal::new(
                    Errno(libc::EAGAIN),
                    "this user has too many clients of the server",
                )),
            );
        }
        if rustix::io::ioctl_fionbio(&sock, true).is_err() {
            return;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let client = Arc::new(Client {
            id,
            sock,
            creds: Creds::new(peer.uid, peer.gid, peer.groups),
            pid: peer.pid,
            state: Mutex::new(State {
                chan: None,
                kick: None,
                proc: None,
                lock_owner: id,
                exec_token: None,
                data_bytes: 0,
                dead: false,
            }),
            leaving: AtomicBool::new(false),
            accepted: std::time::Instant::now(),
            direct_given: AtomicBool::new(false),
        });
        self.map().insert(id, client.clone());
        if crate::worker::watch_socket(s, &client).is_err() {
            self.remove(s, &client);
        }
    }

    /// The client's socket is readable: its HELLO, or its hang-up.
    pub fn on_socket(&self, s: &Shared, c: &Arc<Client>) {
        let msg = ulfs_wire::control::recv(c.sock.as_fd());
        let mut st = c.lock();
        if st.dead {
            return;
        }
        match msg {
            Err(e) if e == Errno(libc::EAGAIN) => {
                drop(st);
                let _ = crate::worker::rearm_socket(s, c);
            }
            Ok(Msg::Hello { want_sq, want_data }) if st.chan.is_none() => {
                let r = welcome(s, c, &mut st, want_sq, want_data, None);
                self.answered(s, c, st, r, "could not make a channel");
            }
            Ok(Msg::Adopt { token, kind }) if st.chan.is_none() => {
                let r = adopt(s, c, &mut st, &token, kind);
                let why = "no process was set aside for this one under that token";
                self.answered(s, c, st, r, why);
            }
            // A hang-up, garbage, or a message this server does not take:
            // the client is gone or confused.
            _ => {
                drop(st);
                self.remove(s, c);
            }
        }
    }

    /// After a HELLO or ADOPT: the client is watched again, or told why
    /// not and torn down.
    fn answered(
        &self,
        s: &Shared,
        c: &Arc<Client>,
        st: MutexGuard<'_, State>,
        r: Result<(), Errno>,
        why: &str,
    ) {
        drop(st);
        match r {
            Ok(()) => {
                let _ = crate::worker::rearm_socket(s, c);
            }
            Err(e) => {
                let _ = ulfs_wire::control::send_refused(c.sock.as_fd(), e, why);
                self.remove(s, c);
            }
        }
    }

    /// Tears a client down (see the module comment); once.
    pub fn remove(&self, s: &Shared, c: &Arc<Client>) {
        c.leaving.store(true, Ordering::Relaxed);
        let mut st = c.lock();
        if st.dead {
            return;
        }
        st.dead = true;
        crate::worker::unwatch(s, c, &st);
        if let Some(chan) = &st.chan {
            chan.mark_gone();
        }
        let exec = st.exec_token.take();
        if let Some(mut proc) = st.proc.take() {
            let pid = u32::try_from(c.pid).unwrap_or(0);
            match exec {
                // The process runs on: an exec closed the connection. Its
                // process waits for the new program, with its locks.
                Some((token, memory)) if crate::adopt::running(pid) => {
                    let holder = if memory {
                        let h = s.tokens.new_owner();
                        s.maps.rehome(c.id, h);
                        h
                    } else {
                        // The exec ended the process's mappings.
                        let _ = s.vol.exclusive(|vol| {
                            s.maps.drop_client(vol, c.id);
                            Ok(())
                        });
                        0
                    };
                    s.tokens.park(
                        token,
                        crate::adopt::Pending {
                            proc,
                            kind: ulfs_wire::AdoptKind::Exec,
                            pid,
                            uid: c.creds.uid(),
                            client: c.id,
                            lock_owner: st.lock_owner,
                            holder,
                            made: std::time::Instant::now(),
                        },
                    );
                }
                _ => {
                    if let Some((token, _)) = exec {
                        s.tokens.unreserve(&token);
                    }
                    crate::adopt::exit_process(s, &mut proc, st.lock_owner, c.id);
                }
            }
        }
        st.chan = None;
        st.kick = None;
        s.data_bytes
            .fetch_sub(std::mem::take(&mut st.data_bytes), Ordering::AcqRel);
        drop(st);
        self.map().remove(&c.id);
    }

    /// Closes the connections that have not said HELLO within `timeout`
    /// (they hold a client slot each): told ETIMEDOUT, then torn down.
    pub fn close_silent(&self, s: &Shared, timeout: std::time::Duration) {
        let silent: Vec<Arc<Client>> = self
            .map()
            .values()
            .filter(|c| c.accepted.elapsed() > timeout)
            .cloned()
            .collect();
        for c in silent {
            // A client being welcomed holds its lock: skip it this time.
            let Ok(st) = c.state.try_lock() else {
                continue;
            };
            let speechless = st.chan.is_none() && !st.dead;
            drop(st);
            if speechless {
                tell(
                    &c.sock,
                    Msg::Refused(ulfs_wire::Refusal::new(
                        Errno(libc::ETIMEDOUT),
                        "no HELLO in time",
                    )),
                );
                self.remove(s, &c);
            }
        }
    }

    /// At shutdown: every client is told the server is gone, and let go.
    pub fn drop_all(&self, s: &Shared) {
        let all: Vec<Arc<Client>> = self.map().values().cloned().collect();
        for c in all {
            let _ = ulfs_wire::control::send_gone(c.sock.as_fd());
            self.remove(s, &c);
        }
    }
}

/// Sends a connection its REFUSED (or GONE) and closes it. What it sent
/// first (its HELLO, most likely, queued before we accepted) is read
/// before the close: a socket closed with unread data makes the peer's
/// next receive fail with ECONNRESET, before it can read our message.
pub(crate) fn refuse(sock: OwnedFd, msg: Msg) {
    tell(&sock, msg);
}

/// As [`refuse`], without closing the socket.
pub(crate) fn tell(sock: &OwnedFd, msg: Msg) {
    let _ = match msg {
        Msg::Refused(r) => {
            ulfs_wire::control::send_raw(sock.as_fd(), &ulfs_wire::control::encode_refused(&r), &[])
        }
        _ => ulfs_wire::control::send_gone(sock.as_fd()),
    };
    if rustix::io::ioctl_fionbio(sock, true).is_ok() {
        for _ in 0..4 {
            if ulfs_wire::control::recv(sock.as_fd()).is_err() {
                break;
            }
        }
    }
}

/// ADOPT: the process set aside under `token`, if this connection's
/// process is the one it was made for (`adopt.rs`), becomes this client's.
fn adopt(
    s: &Shared,
    c: &Client,
    st: &mut State,
    token: &crate::adopt::Token,
    kind: ulfs_wire::AdoptKind,
) -> Result<(), Errno> {
    // SO_PEERCRED's pid: 0 for a process the server cannot see (another
    // pid namespace), which adopts nothing.
    let pid = u32::try_from(c.pid).unwrap_or(0);
    if pid == 0 {
        return Err(Errno::EACCES);
    }
    let uid = c.creds.uid();
    let parent = crate::adopt::parent_of(pid);
    let p = match s.tokens.take(token, kind, pid, uid, parent) {
        Ok(p) => p,
        // The exec's old connection has not been seen to end: this
        // process (the same pid) cannot be using it any more.
        Err(Taken::Reserved(old)) => {
            if let Some(old) = s.clients.get(old) {
                s.clients.remove(s, &old);
            }
            s.tokens
                .take(token, kind, pid, uid, parent)
                .map_err(|_| Errno::EACCES)?
        }
        Err(Taken::Refused) => return Err(Errno::EACCES),
    };
    st.lock_owner = p.lock_owner;
    let r = welcome(s, c, st, 0, 0, Some(p.proc));
    if p.holder != 0 {
        s.maps.rehome(p.holder, c.id);
    }
    r
}

/// Takes up to `want` bytes of the data areas' budget (whole pages):
/// what is left when that is less, EAGAIN when not even a page is. The
/// client's teardown gives them back.
fn reserve_data(s: &Shared, want: u32) -> Result<u32, Errno> {
    let budget = s.cfg.limits.max_data_bytes;
    let page = ulfs_wire::layout::DATA_ALIGN as u64;
    let mut used = s.data_bytes.load(Ordering::Acquire);
    loop {
        let grant = (want as u64).min(budget.saturating_sub(used)) / page * page;
        if grant < ulfs_wire::layout::MIN_DATA_LEN as u64 {
            return Err(Errno(libc::EAGAIN));
        }
        match s.data_bytes.compare_exchange_weak(
            used,
            used + grant,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Ok(grant as u32),
            Err(now) => used = now,
        }
    }
}

/// Makes the client's channel and process (or takes on `adopted`, judged
/// by this connection's credentials from now on), and sends the WELCOME.
fn welcome(
    s: &Shared,
    c: &Client,
    st: &mut State,
    want_sq: u32,
    want_data: u32,
    adopted: Option<Process>,
) -> Result<(), Errno> {
    let asked = Geometry::negotiate(want_sq, want_data, s.cfg.limits.max_channel_bytes);
    let granted = reserve_data(s, asked.data_len)?;
    st.data_bytes = granted as u64;
    let geo = Geometry::negotiate(want_sq, granted, granted);
    let made = s.with_fd_room(|| ServerChannel::create(geo));
    let identity = Identity::Verified(c.creds.clone());
    let mut proc = match adopted {
        Some(mut p) => {
            p.set_identity(identity);
            p
        }
        None => {
            let p = s.vol.exclusive(|vol| Ok(Process::new(vol, identity)))?;
            s.tokens.hold_owner(st.lock_owner);
            p
        }
    };
    let (chan, memfd, kick) = match made {
        Ok(m) => m,
        Err(e) => {
            // The process is this client's already: it exits with it.
            st.proc = Some(proc);
            return Err(e);
        }
    };
    let _ = proc_limit(&mut proc, s);
    // Nobody polls the new channel: its first request must kick.
    chan.set_idle();
    // Kept before the WELCOME is sent, so that if it cannot be (the client
    // hung up already) the teardown undoes the process (`Ctx::exit` lets
    // go of the root it holds as its working directory).
    st.chan = Some(chan);
    st.proc = Some(proc);
    let kick = st.kick.insert(kick);
    ulfs_wire::control::send_welcome(c.sock.as_fd(), c.id, &geo, memfd.as_fd(), kick.as_fd())?;
    crate::worker::watch_kick(s, c, st)?;
    Ok(())
}

fn proc_limit(proc: &mut Process, s: &Shared) -> ulfs::Result<()> {
    s.vol
        .exclusive(|vol| ulfs::posix::Ctx { vol, proc }.set_max_fds(s.cfg.limits.max_fds))
}
