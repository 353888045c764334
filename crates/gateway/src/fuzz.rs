//! Entry points for the fuzz targets in `fuzz/` and for the tests that replay what they
//! find (docs/fuzzing.md); compiled for tests and the fuzzer only. They take bytes as a
//! hostile S3 client sends them and read them as the gateway does. None may panic or hang,
//! whatever the bytes.
//!
//! Requests are served by the service the gateway serves (HTTP/1.1, s3s's routing and
//! signature checks, the request ids and error bodies the gateway adds) in front of verbs
//! that all answer `NotImplemented`: what is under test is everything a request passes
//! before a verb sees it, with no cluster behind. The XML bodies the verbs take are read
//! by [`xml`], since an unsigned request is refused before its body is parsed.

use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The one user the fuzzed service knows.
pub const ACCESS_KEY_ID: &str = "AKIAFUZZFUZZFUZZFUZZ";
pub const SECRET_ACCESS_KEY: &str = "fuzz/fuzz/fuzz/fuzz/fuzz/fuzz/fuzz/fuzz0";

/// Answers every verb with s3s's `NotImplemented`.
struct NoVerbs;

impl s3s::S3 for NoVerbs {}

thread_local! {
    /// Built once per thread: a fuzzer calls [`http`] thousands of times a second.
    static SERVING: (tokio::runtime::Runtime, s3s::service::S3Service) = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
        let mut builder = S3ServiceBuilder::new(NoVerbs);
        builder.set_auth(SimpleAuth::from_single(ACCESS_KEY_ID, SECRET_ACCESS_KEY));
        builder.set_access(crate::metrics::NoteVerb);
        (runtime, builder.build())
    };
}

/// Serves one HTTP connection whose client sends `bytes` then closes its side; returns the
/// responses the gateway wrote.
pub fn http(bytes: &[u8]) -> Vec<u8> {
    SERVING.with(|(runtime, service)| serve(runtime, service.clone(), bytes))
}

fn serve(
    runtime: &tokio::runtime::Runtime,
    service: s3s::service::S3Service,
    bytes: &[u8],
) -> Vec<u8> {
    let service = crate::serve::annotated(service, None);
    let (client, server) = tokio::io::duplex(64 << 10);
    runtime.block_on(async move {
        // The client's closed side must not cut the answers off.
        let serving = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(hyper_util::rt::TokioIo::new(server), service);
        let (mut answers, mut requests) = tokio::io::split(client);
        // The client writes and reads at once, so neither side waits on a full buffer.
        let sending = async move {
            // The server may close before it has read everything: that ends the talk.
            if requests.write_all(bytes).await.is_ok() {
                let _ = requests.shutdown().await;
            }
        };
        let receiving = async move {
            let mut written = Vec::new();
            let _ = answers.read_to_end(&mut written).await;
            written
        };
        let (_, (), written) = tokio::join!(serving, sending, receiving);
        written
    })
}

/// Reads `bytes` as each request body the gateway's verbs take (CompleteMultipartUpload,
/// DeleteObjects, CreateBucket, PutBucketEncryption); returns how many read it as theirs.
pub fn xml(bytes: &[u8]) -> usize {
    fn reads<'x, T: s3s::xml::Deserialize<'x>>(bytes: &'x [u8]) -> bool {
        let mut reader = s3s::xml::Deserializer::new(bytes);
        T::deserialize(&mut reader).is_ok() && reader.expect_eof().is_ok()
    }
    use s3s::dto::{
        CompletedMultipartUpload, CreateBucketConfiguration, Delete,
        ServerSideEncryptionConfiguration,
    };
    [
        reads::<CompletedMultipartUpload>(bytes),
        reads::<Delete>(bytes),
        reads::<CreateBucketConfiguration>(bytes),
        reads::<ServerSideEncryptionConfiguration>(bytes),
    ]
    .into_iter()
    .filter(|read| *read)
    .count()
}

/// Requests as clients send them, for [`http`]: an anonymous GET, a SigV4-signed PUT with
/// a body, a header-signed SigV2 GET, and two requests on one connection.
pub fn http_seeds() -> Vec<Vec<u8>> {
    let get = "GET /bucket/key?versionId=1 HTTP/1.1\r\nHost: 127.0.0.1:7480\r\n\r\n";
    let sigv4 = concat!(
        "PUT /bucket/some/key HTTP/1.1\r\nHost: 127.0.0.1:7480\r\n",
        "x-amz-date: 20261126T120000Z\r\n",
        "x-amz-content-sha256: UNSIGNED-PAYLOAD\r\n",
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIAFUZZFUZZFUZZFUZZ/20261126/us-east-1/s3/",
        "aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n",
        "Content-Length: 5\r\n\r\nhello"
    );
    let sigv2 = concat!(
        "GET /bucket HTTP/1.1\r\nHost: 127.0.0.1:7480\r\n",
        "Date: Thu, 26 Nov 2026 12:00:00 GMT\r\n",
        "Authorization: AWS AKIAFUZZFUZZFUZZFUZZ:frJIUN8DYpKDtOLCwo//yllqDzg=\r\n\r\n"
    );
    vec![
        get.as_bytes().to_vec(),
        sigv4.as_bytes().to_vec(),
        sigv2.as_bytes().to_vec(),
        [get, get].concat().into_bytes(),
    ]
}

/// Bodies of the verbs [`xml`] reads.
pub fn xml_seeds() -> Vec<Vec<u8>> {
    [
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"a\"</ETag></Part></CompleteMultipartUpload>",
        "<Delete><Quiet>true</Quiet><Object><Key>a/b</Key></Object><Object><Key>c</Key></Object></Delete>",
        "<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>",
        "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>",
    ]
    .into_iter()
    .map(|body| body.as_bytes().to_vec())
    .collect()
}

/// Reads `bytes` as a KMIP server's answer to each operation the gateway's KMIP client
/// asks for, and each payload that comes out as the client does; returns how many
/// operations it answers, with a payload or a refusal.
pub fn kmip(bytes: &[u8]) -> usize {
    use crate::kmip::message::{self, Operation};
    [
        Operation::Create,
        Operation::Locate,
        Operation::GetAttributes,
        Operation::Activate,
        Operation::Revoke,
        Operation::Destroy,
        Operation::Encrypt,
        Operation::Decrypt,
    ]
    .into_iter()
    .map(|operation| message::response(bytes, operation))
    .inspect(|answer| {
        if let Ok(payload) = answer {
            message::named_id(payload);
            message::located(payload);
            message::names(payload);
            message::sealed(payload, &[0; message::NONCE_BYTES]);
            message::opened(payload);
        }
    })
    .filter(|answer| !matches!(answer, Err(message::Refusal::Malformed(_))))
    .count()
}

/// Answers a KMIP server gives: to Locate, Get Attributes, Encrypt and Decrypt, and a
/// refusal.
pub fn kmip_seeds() -> Vec<Vec<u8>> {
    use crate::kmip::message::{answer, tag, Operation, STATUS_SUCCESS};
    use crate::kmip::ttlv::Item;
    let id = || Item::text(tag::UNIQUE_IDENTIFIER, "7");
    vec![
        answer(
            Some(Operation::Locate),
            STATUS_SUCCESS,
            vec![id(), Item::text(tag::UNIQUE_IDENTIFIER, "8")],
        ),
        answer(
            Some(Operation::GetAttributes),
            STATUS_SUCCESS,
            vec![
                id(),
                Item::structure(
                    tag::ATTRIBUTE,
                    vec![
                        Item::text(tag::ATTRIBUTE_NAME, "Name"),
                        Item::structure(
                            tag::ATTRIBUTE_VALUE,
                            vec![
                                Item::text(tag::NAME_VALUE, "coffer-kms:coffer/s3:v1"),
                                Item::enumeration(tag::NAME_TYPE, 1),
                            ],
                        ),
                    ],
                ),
            ],
        ),
        answer(
            Some(Operation::Encrypt),
            STATUS_SUCCESS,
            vec![
                id(),
                Item::bytes(tag::DATA, &[1; 32]),
                Item::bytes(tag::AUTHENTICATED_ENCRYPTION_TAG, &[2; 16]),
            ],
        ),
        answer(
            Some(Operation::Decrypt),
            STATUS_SUCCESS,
            vec![id(), Item::bytes(tag::DATA, &[3; 32])],
        ),
        answer(Some(Operation::Destroy), 1, Vec::new()),
    ]
}

/// The date the IAM requests of [`iam_sigv4`] are checked at.
const IAM_NOW: &str = "20261130T120000Z";

/// Reads `bytes` as a request to IAM's API is checked (`crate::sigv4`): its first line the
/// `Authorization` header, its second `X-Amz-Date`, its third `Host`, the rest its body;
/// checks the signature with [`SECRET_ACCESS_KEY`] at [`IAM_NOW`]. Returns whether it
/// matched.
pub fn iam_sigv4(bytes: &[u8]) -> bool {
    let mut lines = bytes.splitn(4, |&b| b == b'\n');
    let (authorization, date, host) = (lines.next(), lines.next(), lines.next());
    let body = lines.next().unwrap_or(b"");
    let mut headers = hyper::HeaderMap::new();
    for (name, value) in [
        ("authorization", authorization),
        ("x-amz-date", date),
        ("host", host),
    ] {
        if let Some(value) = value.and_then(|v| hyper::http::HeaderValue::from_bytes(v).ok()) {
            headers.insert(name, value);
        }
    }
    let signed = crate::sigv4::Signed {
        method: "POST",
        path: "/",
        query: "",
        headers: &headers,
        body,
    };
    let Some(now) = crate::sigv4::date(IAM_NOW) else {
        return false;
    };
    match signed.read(now) {
        Ok((authorization, stamp)) => signed
            .check(&authorization, stamp, SECRET_ACCESS_KEY)
            .is_ok(),
        Err(_) => false,
    }
}

/// IAM requests for [`iam_sigv4`]: one signed as boto3 signs a ListUserPolicies, and the
/// same with its body changed.
pub fn iam_sigv4_seeds() -> Vec<Vec<u8>> {
    let body = b"Action=ListUserPolicies&UserName=bob&Version=2010-05-08";
    let host = "127.0.0.1:7480";
    let signed = crate::sigv4::sign(ACCESS_KEY_ID, SECRET_ACCESS_KEY, IAM_NOW, host, body);
    let request =
        |body: &[u8]| [format!("{signed}\n{IAM_NOW}\n{host}\n").as_bytes(), body].concat();
    vec![request(body), request(b"Action=DeleteUserPolicy")]
}

/// Reads `bytes` as STS's AssumeRoleWithWebIdentity reads a token and a provider's keys
/// (`crate::web_identity`): its first line the token, its second the thumbprint the
/// provider lists, the rest the provider's JWK set. Returns whether the token verified.
pub fn web_identity(bytes: &[u8]) -> bool {
    let mut lines = bytes.splitn(3, |&b| b == b'\n');
    let (token, thumbprint) = (lines.next().unwrap_or(b""), lines.next().unwrap_or(b""));
    let Ok(token) = std::str::from_utf8(token) else {
        return false;
    };
    let Ok(token) = crate::web_identity::Token::read(token) else {
        return false;
    };
    let keys = serde_json::from_slice(lines.next().unwrap_or(b"")).unwrap_or_default();
    let thumbprint = String::from_utf8_lossy(thumbprint).into_owned();
    token.verify(&keys, &[thumbprint]).is_ok()
}

/// Inputs for [`web_identity`]: a token signed as a provider signs one, with its key set
/// and thumbprint, and the same with a claim changed after signing.
pub fn web_identity_seeds() -> Vec<Vec<u8>> {
    let claims = serde_json::json!({
        "iss": "https://idp.test/realms/r", "sub": "ann", "aud": "coffer-app",
        "exp": 1_800_000_000,
    });
    let (token, certificate) = crate::web_identity::es256_sample(&claims);
    let keys = crate::web_identity::sample_keys(&certificate);
    let thumbprint = crate::web_identity::thumbprint(&certificate);
    let seed = |token: &str| format!("{token}\n{thumbprint}\n{keys}").into_bytes();
    let (head, rest) = token.split_once('.').unwrap_or_default();
    let (_, signature) = rest.split_once('.').unwrap_or_default();
    let forged = serde_json::json!({"iss": "https://idp.test/realms/r", "sub": "root",
                                    "exp": 1_800_000_000});
    let forged = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        forged.to_string(),
    );
    vec![seed(&token), seed(&format!("{head}.{forged}.{signature}"))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_get_answers_and_bodies_are_read() {
        for seed in http_seeds() {
            let answer = http(&seed);
            assert!(
                answer.starts_with(b"HTTP/1.1 "),
                "{}",
                String::from_utf8_lossy(&seed)
            );
        }
        for seed in xml_seeds() {
            assert_eq!(xml(&seed), 1, "{}", String::from_utf8_lossy(&seed));
        }
        assert_eq!(xml(b"<Delete>"), 0);
    }

    #[test]
    fn an_iam_request_matches_its_signature_and_a_changed_one_not() {
        let answered: Vec<bool> = iam_sigv4_seeds()
            .iter()
            .map(|seed| iam_sigv4(seed))
            .collect();
        assert_eq!(answered, vec![true, false]);
        let seed = &iam_sigv4_seeds()[0];
        for cut in [0, 10, seed.len() - 1] {
            assert!(!iam_sigv4(&seed[..cut]), "cut at {cut}");
        }
    }

    #[test]
    fn a_token_verifies_under_its_key_and_a_changed_one_not() {
        let seeds = web_identity_seeds();
        let verified: Vec<bool> = seeds.iter().map(|seed| web_identity(seed)).collect();
        assert_eq!(verified, vec![true, false]);
        for cut in [0, 10, seeds[0].len() - 1] {
            assert!(!web_identity(&seeds[0][..cut]), "cut at {cut}");
        }
    }

    #[test]
    fn kmip_answers_are_read_and_cut_ones_refused() {
        let answered: Vec<usize> = kmip_seeds().iter().map(|seed| kmip(seed)).collect();
        // Each success answers its own operation; a refusal answers any.
        assert_eq!(answered, vec![1, 1, 1, 1, 8]);
        for seed in kmip_seeds() {
            for cut in [1, 8, seed.len() - 8] {
                assert_eq!(kmip(&seed[..cut]), 0, "cut at {cut}");
            }
        }
    }
}

/// What the fuzz target found, each answered as it must be.
#[cfg(test)]
mod found {
    use super::*;

    fn status(answer: &[u8]) -> &str {
        std::str::from_utf8(&answer[..answer.len().min(12)]).unwrap_or("")
    }

    /// The KMIP decoder computed how many bytes an item lacked before it knew any were
    /// missing: for every item but a structure's last, that subtraction overflowed. Builds
    /// with overflow checks (the fuzzer's, debug builds) panicked on the first answer with
    /// two object ids, a seed; release builds wrapped, and dropped the value unused.
    #[test]
    fn a_kmip_answer_with_two_items_is_read() {
        let located = crate::kmip::message::answer(
            Some(crate::kmip::message::Operation::Locate),
            crate::kmip::message::STATUS_SUCCESS,
            ["7", "8"]
                .iter()
                .map(|id| {
                    crate::kmip::ttlv::Item::text(crate::kmip::message::tag::UNIQUE_IDENTIFIER, id)
                })
                .collect(),
        );
        assert_eq!(kmip(&located), 1);
    }

    /// s3s 0.14.1 checks a credential's date digit by digit, subtracting `'0'` before it
    /// knows the byte is a digit: a byte below `'0'` overflows. Builds with overflow checks
    /// (the fuzzer's) panic there; the release build's arithmetic wraps and the date is
    /// refused. Either way the request must be refused, never answered as signed.
    #[test]
    fn a_credential_date_with_a_byte_below_zero_is_refused() {
        let request = concat!(
            "PUT /bucket/key HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            "x-amz-date: 20261126T120000Z\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n",
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIAFUZZFUZZFUZZFUZZ/#0130563/",
            "us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\n",
            "Content-Length: 0\r\n\r\n"
        );
        let answer = http(request.as_bytes());
        assert_eq!(status(&answer), "HTTP/1.1 400");
    }
}
