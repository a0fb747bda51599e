//! `ulfs::posix::locks::LockTable` against the kernel: a differential test.
//!
//! Two child processes each open one tmpfs file twice (four open file
//! descriptions) and obey requests sent down a pipe: POSIX locks
//! (`F_SETLK`), OFD locks (`F_OFD_SETLK`), `flock` with `LOCK_NB`, the
//! `F_GETLK` / `F_OFD_GETLK` queries, and closing a descriptor (then
//! opening the file again). The same random sequence runs against a
//! `LockTable` that names the children by pid and the descriptions by
//! id, and every answer must agree: granted or EAGAIN, and for a query
//! whether something is in the way and, if so, a lock the table holds
//! with the same range, mode and `l_pid` (the kernel reports the first
//! on its list, the table the lowest: either is a right answer). Then
//! one child exits and the other must find everything of it gone.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use ulfs::posix::locks::{Kind, LockTable, Owner, Refused};

const INO: u64 = 1;

/// A request, as it goes down the pipe: op, descriptor slot, lock type,
/// start, length.
#[derive(Clone, Copy, Debug)]
struct Req {
    op: i64,
    slot: i64,
    ty: i64,
    start: i64,
    len: i64,
}

const SETLK: i64 = 0;
const OFD_SETLK: i64 = 1;
const FLOCK: i64 = 2;
const GETLK: i64 = 3;
const OFD_GETLK: i64 = 4;
const REOPEN: i64 = 5;

/// The reply: 0 or errno, then the `struct flock` a query filled.
type Reply = [i64; 5];

struct Agent {
    pid: u32,
    to: libc::c_int,
    from: libc::c_int,
    /// The description id behind each of its two descriptors.
    ids: [u64; 2],
}

fn pipe() -> [libc::c_int; 2] {
    let mut p = [0; 2];
    // SAFETY: `p` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    p
}

/// Reads exactly `buf.len()` bytes; false at end of file.
fn read_all(fd: libc::c_int, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the rest of `buf` is writable.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n <= 0 {
            return false;
        }
        got += n as usize;
    }
    true
}

fn write_all(fd: libc::c_int, buf: &[u8]) {
    let mut put = 0;
    while put < buf.len() {
        // SAFETY: the rest of `buf` is readable.
        let n = unsafe { libc::write(fd, buf[put..].as_ptr().cast(), buf.len() - put) };
        assert!(n > 0);
        put += n as usize;
    }
}

fn errno() -> i64 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64
}

/// The child's side: system calls only (it was forked from a threaded
/// test), until it is killed or its pipe closes. It dies with the test
/// thread that forked it, so that a failing test (whose panic never
/// reaches `stop`) leaves no agent holding the runner's output open.
fn serve(path: &CString, cmd: libc::c_int, reply: libc::c_int, parent: libc::pid_t) -> ! {
    // SAFETY: plain system calls.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
    }
    let open = || {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR) };
        assert!(fd >= 0);
        fd
    };
    let mut fds = [open(), open()];
    let mut buf = [0u8; 40];
    while read_all(cmd, &mut buf) {
        let w = |i: usize| i64::from_ne_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
        let r = Req {
            op: w(0),
            slot: w(1),
            ty: w(2),
            start: w(3),
            len: w(4),
        };
        let fd = fds[r.slot as usize];
        let mut out: Reply = [0; 5];
        // SAFETY: `fl` is a local struct flock; `fd` is the child's own.
        unsafe {
            let mut fl: libc::flock = std::mem::zeroed();
            fl.l_type = r.ty as libc::c_short;
            fl.l_whence = libc::SEEK_SET as libc::c_short;
            fl.l_start = r.start;
            fl.l_len = r.len;
            let rc = match r.op {
                SETLK => libc::fcntl(fd, libc::F_SETLK, &mut fl),
                OFD_SETLK => libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl),
                GETLK => libc::fcntl(fd, libc::F_GETLK, &mut fl),
                OFD_GETLK => libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl),
                FLOCK => {
                    let op = match r.ty as libc::c_int {
                        libc::F_RDLCK => libc::LOCK_SH,
                        libc::F_WRLCK => libc::LOCK_EX,
                        _ => libc::LOCK_UN,
                    };
                    libc::flock(fd, op | libc::LOCK_NB)
                }
                _ => {
                    libc::close(fd);
                    fds[r.slot as usize] = open();
                    0
                }
            };
            out[0] = if rc < 0 { errno() } else { 0 };
            out[1] = fl.l_type as i64;
            out[2] = fl.l_start;
            out[3] = fl.l_len;
            out[4] = fl.l_pid as i64;
        }
        let mut bytes = [0u8; 40];
        for (i, v) in out.iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        }
        write_all(reply, &bytes);
    }
    // SAFETY: leaves the child without running the parent's destructors.
    unsafe { libc::_exit(0) }
}

fn spawn(path: &CString, ids: [u64; 2]) -> Agent {
    let [cmd_r, cmd_w] = pipe();
    let [rep_r, rep_w] = pipe();
    // SAFETY: no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the child runs `serve` (system calls only) and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        serve(path, cmd_r, rep_w, parent);
    }
    // SAFETY: the child's ends, not ours to use.
    unsafe {
        libc::close(cmd_r);
        libc::close(rep_w);
    }
    Agent {
        pid: pid as u32,
        to: cmd_w,
        from: rep_r,
        ids,
    }
}

fn ask(a: &Agent, r: Req) -> Reply {
    let mut bytes = [0u8; 40];
    for (i, v) in [r.op, r.slot, r.ty, r.start, r.len].iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&v.to_ne_bytes());
    }
    write_all(a.to, &bytes);
    assert!(read_all(a.from, &mut bytes), "agent {} died", a.pid);
    std::array::from_fn(|i| i64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap()))
}

/// Ends an agent. Killed, not told: every agent holds copies of the
/// pipe ends forked with it, so no end of file would come.
fn stop(a: &Agent) {
    // SAFETY: the agent is our child; the descriptors our ends.
    unsafe {
        libc::kill(a.pid as i32, libc::SIGKILL);
        libc::close(a.to);
        libc::close(a.from);
        let mut status = 0;
        assert_eq!(libc::waitpid(a.pid as i32, &mut status, 0), a.pid as i32);
    }
}

/// A small deterministic generator (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn kind_of(ty: i64) -> Kind {
    match ty as libc::c_int {
        libc::F_RDLCK => Kind::Read,
        libc::F_WRLCK => Kind::Write,
        _ => Kind::Unlock,
    }
}

/// `[start, end)` of a request (lengths here are never negative).
fn range(r: &Req) -> (u64, u64) {
    let start = r.start as u64;
    (
        start,
        if r.len == 0 {
            u64::MAX
        } else {
            start + r.len as u64
        },
    )
}

/// The table's side of `r` from `a`: what the kernel must answer, or for
/// a query, checks the kernel's answer `got` against the table.
fn model(
    t: &mut LockTable,
    a: &mut Agent,
    r: Req,
    next_id: &mut u64,
    got: &Reply,
) -> Result<(), String> {
    let id = a.ids[r.slot as usize];
    let (start, end) = range(&r);
    let set = |t: &mut LockTable, owner| match t.try_set(INO, owner, kind_of(r.ty), start, end) {
        Ok(()) => 0,
        Err(Refused::Conflict(_)) => libc::EAGAIN as i64,
        Err(Refused::TooMany) => libc::ENOLCK as i64,
    };
    let want = match r.op {
        SETLK => set(t, Owner::Process(a.pid)),
        OFD_SETLK => set(t, Owner::Ofd(id)),
        FLOCK => set(t, Owner::Flock(id)),
        GETLK | OFD_GETLK => {
            let owner = if r.op == GETLK {
                Owner::Process(a.pid)
            } else {
                Owner::Ofd(id)
            };
            let write = r.ty == libc::F_WRLCK as i64;
            let lowest = t.conflict(INO, owner, write, start, end);
            if got[1] == libc::F_UNLCK as i64 {
                return match lowest {
                    None => Ok(()),
                    Some(b) => Err(format!("kernel: nothing in the way; table: {b:?}")),
                };
            }
            let kernel_end = if got[3] == 0 {
                u64::MAX
            } else {
                (got[2] + got[3]) as u64
            };
            let seen = (
                got[1] == libc::F_WRLCK as i64,
                got[2] as u64,
                kernel_end,
                got[4] as i32,
            );
            // A lock of the table that is in the request's way and looks
            // like what the kernel reported.
            let holds = t.locks_on(INO).iter().any(|h| {
                h.owner != owner
                    && (h.write, h.start, h.end, h.owner.reported_pid()) == seen
                    && h.start < end
                    && start < h.end
                    && (write || h.write)
            });
            return if lowest.is_some() && holds {
                Ok(())
            } else {
                Err(format!(
                    "kernel reports {seen:?}; table's lowest {lowest:?}"
                ))
            };
        }
        _ => {
            t.release_process_on(INO, a.pid);
            t.release_owner(Owner::Ofd(id));
            t.release_owner(Owner::Flock(id));
            *next_id += 1;
            a.ids[r.slot as usize] = *next_id;
            0
        }
    };
    if want == got[0] {
        Ok(())
    } else {
        Err(format!("kernel {}, table {}", got[0], want))
    }
}

fn random_req(rng: &mut Rng) -> Req {
    let op = match rng.below(20) {
        0..=6 => SETLK,
        7..=11 => OFD_SETLK,
        12..=13 => FLOCK,
        14..=15 => GETLK,
        16..=17 => OFD_GETLK,
        _ => REOPEN,
    };
    let queries = [libc::F_RDLCK, libc::F_WRLCK];
    let sets = [libc::F_RDLCK, libc::F_WRLCK, libc::F_UNLCK];
    let ty = if matches!(op, GETLK | OFD_GETLK) {
        queries[rng.below(2) as usize]
    } else {
        sets[rng.below(3) as usize]
    };
    Req {
        op,
        slot: rng.below(2) as i64,
        ty: ty as i64,
        start: rng.below(24) as i64,
        // One in eight to the end of the file.
        len: match rng.below(8) {
            0 => 0,
            n => rng.below(3 * n) as i64 + 1,
        },
    }
}

#[test]
fn lock_table_agrees_with_the_kernel() {
    let dir = tempfile::Builder::new()
        .prefix("ulfs-locks-")
        .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm".into()
        } else {
            std::env::temp_dir()
        })
        .unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"").unwrap();
    let path = CString::new(file.as_os_str().as_bytes()).unwrap();

    let mut agents = [spawn(&path, [1, 2]), spawn(&path, [3, 4])];
    let mut next_id = 4;
    let mut t = LockTable::new();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut counts = [0usize; 6];
    // Requests refused, and queries that found a lock in the way: the
    // sequence must meet conflicts often to test anything.
    let mut refused = 0;
    let mut found = 0;
    let mut run = |agents: &mut [Agent], t: &mut LockTable, steps: usize| {
        for step in 0..steps {
            let k = rng.below(agents.len() as u64) as usize;
            let r = random_req(&mut rng);
            let got = ask(&agents[k], r);
            counts[r.op as usize] += 1;
            match r.op {
                GETLK | OFD_GETLK => found += usize::from(got[1] != libc::F_UNLCK as i64),
                _ => refused += usize::from(got[0] != 0),
            }
            if let Err(e) = model(t, &mut agents[k], r, &mut next_id, &got) {
                panic!("step {step}: agent {k} (pid {}) {r:?}: {e}", agents[k].pid);
            }
        }
    };
    run(&mut agents, &mut t, 4000);

    // One process exits: all of its locks go, POSIX and its descriptions'.
    let [first, second] = agents;
    stop(&first);
    t.release_process(first.pid);
    for id in first.ids {
        t.release_owner(Owner::Ofd(id));
        t.release_owner(Owner::Flock(id));
    }
    assert!(t.iter().all(|(_, h)| {
        h.owner != Owner::Process(first.pid)
            && !first
                .ids
                .iter()
                .any(|&id| h.owner == Owner::Ofd(id) || h.owner == Owner::Flock(id))
    }));
    let mut rest = [second];
    run(&mut rest, &mut t, 1000);
    // Whole-file write locks of every kind are to be had again once the
    // survivor lets go of its own.
    for r in [
        Req {
            op: REOPEN,
            slot: 0,
            ty: 0,
            start: 0,
            len: 0,
        },
        Req {
            op: REOPEN,
            slot: 1,
            ty: 0,
            start: 0,
            len: 0,
        },
    ] {
        let got = ask(&rest[0], r);
        model(&mut t, &mut rest[0], r, &mut next_id, &got).unwrap();
    }
    assert!(t.is_empty(), "{:?}", t.iter().collect::<Vec<_>>());
    stop(&rest[0]);
    eprintln!(
        "lock_rules: {counts:?} requests (setlk, ofd, flock, getlk, ofd getlk, reopen) agreed; \
         {refused} refused, {found} queries found a lock"
    );
    assert!(
        refused > 500 && found > 300,
        "too few conflicts: {refused}, {found}"
    );
}
