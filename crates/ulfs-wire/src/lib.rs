//! The wire between `ulfs serve` and its clients (docs/SERVE.md): the
//! channel's layout in a shared memfd, the request and reply records, the
//! control socket's handshake. Shared by the server and every client, so
//! both sides agree on one definition.
//!
//! - [`layout`]: the bytes of a channel (header, rings, data area) and the
//!   `Req`/`Cqe` records.
//! - [`op`]: the request codes and, in their doc comments, the argument
//!   table that is the protocol's reference.
//! - [`stat`]: `WireStat`/`WireStatFs`, the fixed records a stat call
//!   answers with.
//! - [`channel`]: both ends of a channel (rings, data copies, sleep/wake).
//! - [`control`]: the control socket (listen/connect, HELLO/WELCOME,
//!   peer credentials).
//! - [`lease`]: the record of a read lease (LEASE's answer).
//!
//! Nothing here touches the file-system engine: the server maps requests
//! onto `ulfs::Fs`, the clients onto their callers. The only things taken
//! from `ulfs` are its plain types (`Errno`, `Stat`, `StatFs`).

pub mod channel;
pub mod control;
pub mod layout;
pub mod lease;
pub mod op;
pub mod stat;

pub use channel::{Broken, ClientChannel, ClientStats, ServerChannel};
pub use control::{AdoptKind, Listener, Msg, PeerCreds, Refusal, Welcome};
pub use layout::{Cqe, Geometry, Req, Span};
pub use op::Op;
pub use stat::{WireStat, WireStatFs};
pub use ulfs::Errno;

/// The protocol's version: in the channel header and in every control
/// message. Bumped on any change a peer of the old version would
/// misread; there is no negotiation, a mismatch is refused.
pub const PROTOCOL_VERSION: u16 = 1;
