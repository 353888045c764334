//! The fuzz targets' shared code: the wire messages target, which lives here because it
//! reads every service's vocabulary (the MDS's is in `fs`, which the messenger cannot
//! see), and each target's seed corpus.

use messenger::fuzz::reads;
use messenger::message::{MonReply, MonRequest, OsdReply, OsdRequest};

/// Reads `bytes` as each message a peer may send in a frame's metadata (to and from OSDs,
/// monitors and the MDS), each as [`messenger::fuzz::reads`] does. Returns how many types
/// read the bytes.
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

/// The targets, each with its seed corpus: inputs a well-behaved peer sends, for the
/// fuzzer to start from.
pub fn seeds() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    vec![
        ("frames_crc", messenger::fuzz::crc_seeds()),
        ("frame_secure", messenger::fuzz::secure_seeds()),
        ("hello", messenger::fuzz::hello_seeds()),
        ("iam_sigv4", gateway::fuzz::iam_sigv4_seeds()),
        ("web_identity", gateway::fuzz::web_identity_seeds()),
        ("kmip_answers", gateway::fuzz::kmip_seeds()),
        ("messages", messenger::fuzz::message_seeds()),
        ("nbd_negotiation", block::nbd::fuzz::negotiation_seeds()),
        ("nbd_requests", block::nbd::fuzz::request_seeds()),
        ("s3_http", gateway::fuzz::http_seeds()),
        ("s3_xml", gateway::fuzz::xml_seeds()),
        ("select", select::fuzz::seeds()),
        ("store_records", store::fuzz::record_seeds()),
    ]
}
