//! Fixed newstyle negotiation: the server's greeting, the client's flags, then options until
//! the client picks the export (`GO` or `EXPORT_NAME`) or leaves.
//!
//! | option                          | answer                                              |
//! |---------------------------------|-----------------------------------------------------|
//! | `LIST`                          | one `SERVER` (the export's name), `ACK`             |
//! | `INFO`, `GO`                    | `INFO` export (size, flags), block size, name and   |
//! |                                 | description if asked, `ACK`; `GO` then transmits     |
//! | `EXPORT_NAME`                   | size and flags, then transmission; an unknown name  |
//! |                                 | closes the connection (the option has no errors)    |
//! | `STRUCTURED_REPLY`              | `ACK`; reads may then come back in chunks and holes |
//! | `LIST_`/`SET_META_CONTEXT`      | `base:allocation` (structured replies first)        |
//! | `ABORT`                         | `ACK`, then the server closes                       |
//! | `STARTTLS`                      | `ACK` and a TLS handshake where the server has a    |
//! |                                 | certificate (then negotiation starts over inside    |
//! |                                 | TLS), `ERR_POLICY` where it has none                |
//! | anything else                   | `ERR_UNSUP`; the client may go on                    |
//!
//! Where TLS is required ([`Tls::Required`]), every option but `STARTTLS` and `ABORT` gets
//! `ERR_TLS_REQD` before the handshake (`EXPORT_NAME`, which has no errors, closes).
//!
//! A client without the fixed-newstyle flag, or with flags this server does not know, is
//! disconnected; so is one that sends an option longer than [`OPTION_BYTES_MAX`], more than
//! [`OPTIONS_MAX`] options, or takes longer than [`NEGOTIATION_TIMEOUT`].

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::wire::*;

/// Longest option data a client may send.
pub const OPTION_BYTES_MAX: u32 = 64 << 10;
/// Most options in one negotiation.
pub const OPTIONS_MAX: u32 = 256;
/// How long a client may take from connecting to starting transmission.
pub const NEGOTIATION_TIMEOUT: Duration = Duration::from_secs(30);
/// The id of `base:allocation` in block status replies.
pub const ALLOCATION_CONTEXT_ID: u32 = 1;
/// The smallest, preferred and largest request sizes advertised. Any byte offset and length
/// works; 4 KiB is the store's block; requests are capped at 32 MiB.
pub const BLOCK_SIZE_MIN: u32 = 1;
pub const BLOCK_SIZE_PREFERRED: u32 = 4096;
pub const PAYLOAD_BYTES_MAX: u32 = 32 << 20;

/// What the client and server agreed on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Session {
    pub structured_replies: bool,
    /// `base:allocation` was selected: block status requests are answered.
    pub allocation: bool,
    /// The export's size in bytes as the negotiation offered it (the image's size when the
    /// client connected, or when it started TLS); requests are checked against it.
    pub size: u64,
    pub flags: u16,
}

/// What negotiation tells a client of the export it serves: all it needs of the image.
#[derive(Clone, Copy, Debug)]
pub struct Offer<'a> {
    pub name: &'a str,
    /// Sent as the export's description (`INFO_DESCRIPTION`): the image's pool and name.
    pub description: &'a str,
    pub size_bytes: u64,
    pub read_only: bool,
}

impl Offer<'_> {
    /// Clients may ask for the export by its name or as the default export (the empty name).
    fn answers_to(&self, name: &str) -> bool {
        name.is_empty() || name == self.name
    }
}

/// Where a connection stands with TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tls {
    /// The server has no certificate: plaintext only.
    Off,
    /// A client may start TLS, or not.
    Offered,
    /// Nothing but TLS: options other than `STARTTLS` and `ABORT` are refused until then.
    Required,
    /// The connection is inside TLS.
    Active,
}

/// How a negotiation (or its part on one stream) ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The client picked the export: transmission follows.
    Transmit(Session),
    /// The client left, or asked to.
    Closed,
    /// `STARTTLS` was acknowledged: a TLS handshake follows, then [`options`] again inside.
    StartTls,
}

/// Runs `phase` within what is left of the negotiation's time, which ends at `deadline`.
pub async fn within<T>(
    deadline: tokio::time::Instant,
    phase: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout_at(deadline, phase).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("negotiation took longer than {NEGOTIATION_TIMEOUT:?}"),
        )),
    }
}

fn refused(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// The transmission flags of this export for a session with or without structured replies.
fn transmission_flags(offer: &Offer, structured_replies: bool) -> u16 {
    let mut flags = TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH | TFLAG_SEND_FUA | TFLAG_CAN_MULTI_CONN;
    if offer.read_only {
        flags |= TFLAG_READ_ONLY;
    } else {
        flags |= TFLAG_SEND_TRIM | TFLAG_SEND_WRITE_ZEROES | TFLAG_SEND_FAST_ZERO;
    }
    if structured_replies {
        flags |= TFLAG_SEND_DF;
    }
    flags
}

/// Sends the greeting and reads the client's flags; returns whether the client asked for
/// no zeroes.
pub async fn greet<S>(stream: &mut S) -> io::Result<bool>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBD_MAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    stream.write_all(&greeting).await?;
    stream.flush().await?;
    let client_flags = stream.read_u32().await?;
    if client_flags & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(refused(
            "the client does not speak fixed newstyle negotiation".into(),
        ));
    }
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(refused(format!("unknown client flags {client_flags:#x}")));
    }
    Ok(client_flags & FLAG_C_NO_ZEROES != 0)
}

/// Answers options on `stream` until the client picks the export, leaves, or starts TLS.
/// Negotiated state starts afresh on each stream, as the protocol asks after `STARTTLS`.
pub async fn options<S>(
    stream: &mut S,
    offer: &Offer<'_>,
    no_zeroes: bool,
    tls: Tls,
) -> io::Result<Outcome>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut session = Session::default();
    for _ in 0..OPTIONS_MAX {
        let magic = stream.read_u64().await?;
        if magic != IHAVEOPT {
            return Err(refused(format!("option magic {magic:#x}")));
        }
        let option = stream.read_u32().await?;
        let len = stream.read_u32().await?;
        if len > OPTION_BYTES_MAX {
            return Err(refused(format!(
                "option {option} carries {len} bytes; the limit is {OPTION_BYTES_MAX}"
            )));
        }
        let mut data = vec![0u8; len as usize];
        stream.read_exact(&mut data).await?;
        let mut out = Vec::new();
        let next = match gate(tls, option, &data, &mut out) {
            Some(next) => next,
            None => answer(offer, &mut session, option, &data, no_zeroes, &mut out),
        };
        stream.write_all(&out).await?;
        stream.flush().await?;
        match next {
            Next::Continue => {}
            Next::Transmit => return Ok(Outcome::Transmit(session)),
            Next::StartTls => return Ok(Outcome::StartTls),
            Next::Close => return Ok(Outcome::Closed),
            Next::Disconnect(why) => return Err(refused(why)),
        }
    }
    Err(refused(format!("more than {OPTIONS_MAX} options")))
}

/// The answer TLS decides, if it decides one: `STARTTLS` itself, and every option but
/// `ABORT` while TLS is required and not yet active.
fn gate(tls: Tls, option: u32, data: &[u8], out: &mut Vec<u8>) -> Option<Next> {
    let mut reply = |kind: u32, body: &[u8]| out.extend(option_reply(option, kind, body));
    match (option, tls) {
        (OPT_STARTTLS, Tls::Off) => {
            reply(REP_ERR_POLICY, b"this server has no TLS certificate");
            Some(Next::Continue)
        }
        (OPT_STARTTLS, Tls::Active) => {
            reply(REP_ERR_INVALID, b"TLS is already on");
            Some(Next::Continue)
        }
        (OPT_STARTTLS, _) if !data.is_empty() => {
            reply(REP_ERR_INVALID, b"STARTTLS takes no data");
            Some(Next::Continue)
        }
        (OPT_STARTTLS, _) => {
            reply(REP_ACK, &[]);
            Some(Next::StartTls)
        }
        (OPT_ABORT, _) => None,
        (OPT_EXPORT_NAME, Tls::Required) => Some(Next::Disconnect(
            "EXPORT_NAME without TLS, which this server requires".into(),
        )),
        (_, Tls::Required) => {
            reply(
                REP_ERR_TLS_REQD,
                b"this server requires TLS: send STARTTLS first",
            );
            Some(Next::Continue)
        }
        _ => None,
    }
}

enum Next {
    Continue,
    Transmit,
    /// Acknowledged STARTTLS: the TLS handshake comes next.
    StartTls,
    /// The client asked to end (or left): close quietly.
    Close,
    /// The protocol leaves no answer but to close.
    Disconnect(String),
}

/// Writes the reply to one option into `out` and says what comes next.
fn answer(
    offer: &Offer,
    session: &mut Session,
    option: u32,
    data: &[u8],
    no_zeroes: bool,
    out: &mut Vec<u8>,
) -> Next {
    let mut reply = |kind: u32, body: &[u8]| out.extend(option_reply(option, kind, body));
    match option {
        OPT_ABORT => {
            reply(REP_ACK, &[]);
            Next::Close
        }
        OPT_LIST => {
            if !data.is_empty() {
                reply(REP_ERR_INVALID, b"LIST takes no data");
                return Next::Continue;
            }
            let mut server = Vec::new();
            server.extend_from_slice(&(offer.name.len() as u32).to_be_bytes());
            server.extend_from_slice(offer.name.as_bytes());
            reply(REP_SERVER, &server);
            reply(REP_ACK, &[]);
            Next::Continue
        }
        OPT_STRUCTURED_REPLY => {
            if !data.is_empty() {
                reply(REP_ERR_INVALID, b"STRUCTURED_REPLY takes no data");
                return Next::Continue;
            }
            session.structured_replies = true;
            reply(REP_ACK, &[]);
            Next::Continue
        }
        OPT_EXPORT_NAME => {
            let Ok(name) = std::str::from_utf8(data) else {
                return Next::Disconnect("export name is not UTF-8".into());
            };
            if !offer.answers_to(name) {
                return Next::Disconnect(format!("no export named {name:?}"));
            }
            start(offer, session);
            out.extend_from_slice(&session.size.to_be_bytes());
            out.extend_from_slice(&session.flags.to_be_bytes());
            if !no_zeroes {
                out.extend_from_slice(&[0u8; 124]);
            }
            Next::Transmit
        }
        OPT_INFO | OPT_GO => {
            let mut cursor = Cursor::new(data);
            let parsed = cursor.string().and_then(|name| {
                let count = cursor.u16()?;
                let wanted: Option<Vec<u16>> = (0..count).map(|_| cursor.u16()).collect();
                Some((name, wanted?)).filter(|_| cursor.is_empty())
            });
            let Some((name, wanted)) = parsed else {
                reply(REP_ERR_INVALID, b"malformed INFO/GO request");
                return Next::Continue;
            };
            if !offer.answers_to(name) {
                reply(
                    REP_ERR_UNKNOWN,
                    format!("no export named {name:?}").as_bytes(),
                );
                return Next::Continue;
            }
            let flags = transmission_flags(offer, session.structured_replies);
            let mut info = Vec::with_capacity(12);
            info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
            info.extend_from_slice(&offer.size_bytes.to_be_bytes());
            info.extend_from_slice(&flags.to_be_bytes());
            reply(REP_INFO, &info);
            let mut block_size = Vec::with_capacity(14);
            block_size.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
            for value in [BLOCK_SIZE_MIN, BLOCK_SIZE_PREFERRED, PAYLOAD_BYTES_MAX] {
                block_size.extend_from_slice(&value.to_be_bytes());
            }
            reply(REP_INFO, &block_size);
            for kind in wanted {
                let text = match kind {
                    INFO_NAME => offer.name,
                    INFO_DESCRIPTION => offer.description,
                    _ => continue,
                };
                let mut body = kind.to_be_bytes().to_vec();
                body.extend_from_slice(text.as_bytes());
                reply(REP_INFO, &body);
            }
            reply(REP_ACK, &[]);
            if option == OPT_GO {
                start(offer, session);
                Next::Transmit
            } else {
                Next::Continue
            }
        }
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
            meta_context(offer, session, option, data, &mut reply);
            Next::Continue
        }
        _ => {
            reply(REP_ERR_UNSUP, b"this server does not support that option");
            Next::Continue
        }
    }
}

/// Fixes the session's size and flags as transmission begins.
fn start(offer: &Offer, session: &mut Session) {
    session.size = offer.size_bytes;
    session.flags = transmission_flags(offer, session.structured_replies);
}

/// Answers LIST_META_CONTEXT and SET_META_CONTEXT: the only context is `base:allocation`.
fn meta_context(
    offer: &Offer,
    session: &mut Session,
    option: u32,
    data: &[u8],
    reply: &mut impl FnMut(u32, &[u8]),
) {
    if !session.structured_replies {
        reply(
            REP_ERR_INVALID,
            b"metadata contexts need structured replies first",
        );
        return;
    }
    let mut cursor = Cursor::new(data);
    let parsed = cursor.string().and_then(|name| {
        let count = cursor.u32()?;
        let queries: Option<Vec<&str>> = (0..count).map(|_| cursor.string()).collect();
        Some((name, queries?)).filter(|_| cursor.is_empty())
    });
    let Some((name, queries)) = parsed else {
        reply(REP_ERR_INVALID, b"malformed metadata context request");
        return;
    };
    if !offer.answers_to(name) {
        reply(
            REP_ERR_UNKNOWN,
            format!("no export named {name:?}").as_bytes(),
        );
        return;
    }
    let listing = option == OPT_LIST_META_CONTEXT;
    // Listing with no query lists every context; listing "base:" lists the base namespace.
    let offered = if listing && queries.is_empty() {
        true
    } else {
        queries
            .iter()
            .any(|q| *q == BASE_ALLOCATION || (listing && *q == "base:"))
    };
    if !listing {
        session.allocation = offered;
    }
    if offered {
        let mut body = ALLOCATION_CONTEXT_ID.to_be_bytes().to_vec();
        body.extend_from_slice(BASE_ALLOCATION.as_bytes());
        reply(REP_META_CONTEXT, &body);
    }
    reply(REP_ACK, &[]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `gate` decides for `option`: the reply type it wrote (if any) and what comes next.
    fn gated(tls: Tls, option: u32, data: &[u8]) -> Option<(Option<u32>, &'static str)> {
        let mut out = Vec::new();
        let next = gate(tls, option, data, &mut out)?;
        let kind = (out.len() >= 16)
            .then(|| u32::from_be_bytes(out[12..16].try_into().expect("four bytes")));
        let next = match next {
            Next::Continue => "continue",
            Next::StartTls => "start tls",
            Next::Disconnect(_) => "disconnect",
            Next::Transmit | Next::Close => "other",
        };
        Some((kind, next))
    }

    #[test]
    fn starttls_follows_the_servers_certificate_and_where_it_stands() {
        assert_eq!(
            gated(Tls::Off, OPT_STARTTLS, &[]),
            Some((Some(REP_ERR_POLICY), "continue"))
        );
        assert_eq!(
            gated(Tls::Offered, OPT_STARTTLS, &[]),
            Some((Some(REP_ACK), "start tls"))
        );
        assert_eq!(
            gated(Tls::Required, OPT_STARTTLS, &[]),
            Some((Some(REP_ACK), "start tls"))
        );
        assert_eq!(
            gated(Tls::Required, OPT_STARTTLS, b"x"),
            Some((Some(REP_ERR_INVALID), "continue"))
        );
        assert_eq!(
            gated(Tls::Active, OPT_STARTTLS, &[]),
            Some((Some(REP_ERR_INVALID), "continue"))
        );
    }

    #[test]
    fn required_tls_refuses_every_other_option_but_abort() {
        for option in [
            OPT_GO,
            OPT_INFO,
            OPT_LIST,
            OPT_STRUCTURED_REPLY,
            OPT_SET_META_CONTEXT,
        ] {
            assert_eq!(
                gated(Tls::Required, option, &[]),
                Some((Some(REP_ERR_TLS_REQD), "continue")),
                "option {option}"
            );
            assert_eq!(gated(Tls::Active, option, &[]), None, "option {option}");
            assert_eq!(gated(Tls::Offered, option, &[]), None, "option {option}");
        }
        assert_eq!(gated(Tls::Required, OPT_ABORT, &[]), None);
        assert_eq!(
            gated(Tls::Required, OPT_EXPORT_NAME, b"disk"),
            Some((None, "disconnect"))
        );
    }
}
