//! Entry points for the fuzz targets in `fuzz/` and for the tests that replay what they
//! find (docs/fuzzing.md); compiled for tests and the fuzzer only. They take bytes as a
//! hostile NBD client sends them and read them as the server does. Neither may panic or
//! hang, whatever the bytes.

use super::negotiate::{self, Offer, Outcome, Session, Tls, PAYLOAD_BYTES_MAX};
use super::transmit;
use super::wire::*;

/// The export the fuzzed negotiations are offered.
const OFFER: Offer<'static> = Offer {
    name: "disk",
    description: "rbd/disk",
    size_bytes: 1 << 30,
    read_only: false,
};

/// A whole negotiation with a client that sends `bytes` after the server's greeting: its
/// flags, then options. The first byte picks where the server stands with TLS and whether
/// the export is read-only. Returns whether the client reached transmission.
pub fn negotiation(bytes: &[u8]) -> bool {
    let Some((&setup, client)) = bytes.split_first() else {
        return false;
    };
    let tls = [Tls::Off, Tls::Offered, Tls::Required, Tls::Active][usize::from(setup & 3)];
    let offer = Offer {
        read_only: setup & 4 != 0,
        ..OFFER
    };
    let mut stream = tokio::io::join(std::io::Cursor::new(client), tokio::io::sink());
    let outcome = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime")
        .block_on(async {
            let no_zeroes = negotiate::greet(&mut stream).await?;
            negotiate::options(&mut stream, &offer, no_zeroes, tls).await
        });
    matches!(outcome, Ok(Outcome::Transmit(_)))
}

/// Request headers as a client sends them in transmission, each write followed by its
/// payload, read and vetted as the server does before any reaches the image, up to a
/// bad magic, an oversized write or `DISC`. The first byte picks the session: structured
/// replies and the allocation context, read-only, and an export size of up to 2^63
/// bytes. Returns how many requests passed the vetting.
pub fn requests(bytes: &[u8]) -> usize {
    let Some((&setup, mut stream)) = bytes.split_first() else {
        return 0;
    };
    let session = Session {
        structured_replies: setup & 1 != 0,
        allocation: setup & 1 != 0,
        size: 1u64 << (setup >> 2),
        flags: 0,
    };
    let read_only = setup & 2 != 0;
    let mut passed = 0;
    while let Some((header, rest)) = stream.split_first_chunk::<REQUEST_BYTES>() {
        let Some(request) = Request::parse(header) else {
            break;
        };
        stream = rest;
        if request.kind == CMD_DISC {
            break;
        }
        if request.kind == CMD_WRITE {
            if request.len > PAYLOAD_BYTES_MAX || stream.len() < request.len as usize {
                break;
            }
            stream = &stream[request.len as usize..];
        }
        if transmit::refusal(&session, read_only, &request).is_none() {
            passed += 1;
        }
    }
    passed
}

/// Inputs a well-behaved client sends, for [`negotiation`]: fixed newstyle, then `GO` for
/// the export by name, and `EXPORT_NAME` for the default export.
pub fn negotiation_seeds() -> Vec<Vec<u8>> {
    let option = |code: u32, data: &[u8]| {
        let mut bytes = IHAVEOPT.to_be_bytes().to_vec();
        bytes.extend_from_slice(&code.to_be_bytes());
        bytes.extend_from_slice(&(data.len() as u32).to_be_bytes());
        bytes.extend_from_slice(data);
        bytes
    };
    let flags = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes();
    let mut go = (OFFER.name.len() as u32).to_be_bytes().to_vec();
    go.extend_from_slice(OFFER.name.as_bytes());
    go.extend_from_slice(&1u16.to_be_bytes());
    go.extend_from_slice(&INFO_NAME.to_be_bytes());
    let structured = option(OPT_STRUCTURED_REPLY, &[]);
    vec![
        [&[1][..], &flags, &structured, &option(OPT_GO, &go)].concat(),
        [&[0][..], &flags, &option(OPT_EXPORT_NAME, b"")].concat(),
    ]
}

/// A session's worth of requests, for [`requests`]: a write with its payload, a read, a
/// flush and a disconnect.
pub fn request_seeds() -> Vec<Vec<u8>> {
    let request = |kind: u16, offset: u64, len: u32| {
        let mut bytes = REQUEST_MAGIC.to_be_bytes().to_vec();
        bytes.extend_from_slice(&0u16.to_be_bytes());
        bytes.extend_from_slice(&kind.to_be_bytes());
        bytes.extend_from_slice(&7u64.to_be_bytes());
        bytes.extend_from_slice(&offset.to_be_bytes());
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes
    };
    let session = 1 | (30 << 2);
    vec![[
        &[session][..],
        &request(CMD_WRITE, 4096, 512),
        &[0xab; 512],
        &request(CMD_READ, 0, 8192),
        &request(CMD_FLUSH, 0, 0),
        &request(CMD_DISC, 0, 0),
    ]
    .concat()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_are_served() {
        for seed in negotiation_seeds() {
            assert!(negotiation(&seed), "{seed:?}");
            assert!(!negotiation(&seed[..seed.len() - 1]));
        }
        let seed = &request_seeds()[0];
        assert_eq!(requests(seed), 3);
        // Read-only: the write is refused.
        let mut read_only = seed.clone();
        read_only[0] |= 2;
        assert_eq!(requests(&read_only), 2);
    }
}
