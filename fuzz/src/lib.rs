//! The fuzz targets' shared code: the wire messages target, which lives here because it
//! reads every service's vocabulary, and each target's seed corpus.

use messenger::message::{MonReply, MonRequest, OsdReply, OsdRequest};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Reads `bytes` as each message a peer may send in a frame's metadata (to and from OSDs,
/// monitors and the MDS). A message that decodes must encode again, and that encoding must
/// be its own: decoded and encoded once more, the bytes are the same. Returns how many
/// types read the bytes.
pub fn messages(bytes: &[u8]) -> usize {
    [
        reads::<OsdRequest>(bytes),
        reads::<OsdReply>(bytes),
        reads::<MonRequest>(bytes),
        reads::<MonReply>(bytes),
        reads::<fs::proto::Request>(bytes),
        reads::<fs::proto::Reply>(bytes),
    ]
    .into_iter()
    .filter(|read| *read)
    .count()
}

fn reads<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> bool {
    let Ok(message) = postcard::from_bytes::<T>(bytes) else {
        return false;
    };
    let encoded = postcard::to_allocvec(&message).expect("a decoded message encodes");
    let again: T = postcard::from_bytes(&encoded).expect("an encoded message decodes");
    let encoded_again = postcard::to_allocvec(&again).expect("a decoded message encodes");
    assert_eq!(
        encoded, encoded_again,
        "a message's encoding is not its own"
    );
    true
}

/// The targets, each with its seed corpus: inputs a well-behaved peer sends, for the
/// fuzzer to start from.
pub fn seeds() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let encode = |request: &MonRequest| postcard::to_allocvec(request).expect("encodes");
    vec![
        ("frames_crc", messenger::fuzz::crc_seeds()),
        ("frame_secure", messenger::fuzz::secure_seeds()),
        ("hello", messenger::fuzz::hello_seeds()),
        (
            "messages",
            vec![
                encode(&MonRequest::Status),
                encode(&MonRequest::GetStoreKek),
            ],
        ),
        ("nbd_negotiation", block::nbd::fuzz::negotiation_seeds()),
        ("nbd_requests", block::nbd::fuzz::request_seeds()),
        ("s3_http", gateway::fuzz::http_seeds()),
        ("s3_xml", gateway::fuzz::xml_seeds()),
        ("store_records", store::fuzz::record_seeds()),
    ]
}
