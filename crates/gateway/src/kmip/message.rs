//! The KMIP 1.4 messages a KMS client sends and the answers it reads: one operation per
//! request, built and taken apart here as pure code over [`ttlv`](super::ttlv) items.

use super::ttlv::{Item, Tag};

/// The tags this client uses (KMIP 1.4 §9.1.3.1).
pub mod tag {
    use super::Tag;
    pub const ATTRIBUTE: Tag = Tag(0x420008);
    pub const ATTRIBUTE_NAME: Tag = Tag(0x42000A);
    pub const ATTRIBUTE_VALUE: Tag = Tag(0x42000B);
    pub const AUTHENTICATED_ENCRYPTION_ADDITIONAL_DATA: Tag = Tag(0x4200FE);
    pub const AUTHENTICATED_ENCRYPTION_TAG: Tag = Tag(0x4200FF);
    pub const BATCH_COUNT: Tag = Tag(0x42000D);
    pub const BATCH_ITEM: Tag = Tag(0x42000F);
    pub const BLOCK_CIPHER_MODE: Tag = Tag(0x420011);
    pub const CRYPTOGRAPHIC_ALGORITHM: Tag = Tag(0x420028);
    pub const CRYPTOGRAPHIC_PARAMETERS: Tag = Tag(0x42002B);
    pub const DATA: Tag = Tag(0x4200C2);
    pub const IV_COUNTER_NONCE: Tag = Tag(0x42003D);
    pub const NAME_TYPE: Tag = Tag(0x420054);
    pub const NAME_VALUE: Tag = Tag(0x420055);
    pub const OBJECT_TYPE: Tag = Tag(0x420057);
    pub const OPERATION: Tag = Tag(0x42005C);
    pub const PROTOCOL_VERSION: Tag = Tag(0x420069);
    pub const PROTOCOL_VERSION_MAJOR: Tag = Tag(0x42006A);
    pub const PROTOCOL_VERSION_MINOR: Tag = Tag(0x42006B);
    pub const REQUEST_HEADER: Tag = Tag(0x420077);
    pub const REQUEST_MESSAGE: Tag = Tag(0x420078);
    pub const REQUEST_PAYLOAD: Tag = Tag(0x420079);
    pub const RESPONSE_MESSAGE: Tag = Tag(0x42007B);
    pub const RESPONSE_PAYLOAD: Tag = Tag(0x42007C);
    pub const RESULT_MESSAGE: Tag = Tag(0x42007D);
    pub const RESULT_REASON: Tag = Tag(0x42007E);
    pub const RESULT_STATUS: Tag = Tag(0x42007F);
    pub const REVOCATION_REASON: Tag = Tag(0x420081);
    pub const REVOCATION_REASON_CODE: Tag = Tag(0x420082);
    pub const TAG_LENGTH: Tag = Tag(0x4200CE);
    pub const TEMPLATE_ATTRIBUTE: Tag = Tag(0x420091);
    pub const UNIQUE_IDENTIFIER: Tag = Tag(0x420094);
}

/// The operations this client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create = 0x01,
    Locate = 0x08,
    GetAttributes = 0x0B,
    Activate = 0x12,
    Revoke = 0x13,
    Destroy = 0x14,
    Encrypt = 0x1F,
    Decrypt = 0x20,
}

const OBJECT_TYPE_SYMMETRIC_KEY: u32 = 0x02;
const ALGORITHM_AES: u32 = 0x03;
const MODE_GCM: u32 = 0x09;
const USAGE_ENCRYPT_DECRYPT: i32 = 0x04 | 0x08;
const NAME_TYPE_TEXT: u32 = 0x01;
const REVOKED_CESSATION_OF_OPERATION: u32 = 0x06;
pub const STATUS_SUCCESS: u32 = 0x00;

/// A result reason a server gives with a failure (KMIP 1.4 §9.1.3.2.29).
pub mod reason {
    pub const ITEM_NOT_FOUND: u32 = 0x01;
    pub const AUTHENTICATION_NOT_SUCCESSFUL: u32 = 0x03;
    pub const PERMISSION_DENIED: u32 = 0x0C;
}

/// The length of the GCM tag of a wrapped data key.
pub const TAG_BYTES: usize = 16;
/// The length of the GCM nonce of a wrapped data key: random, so one version should wrap
/// no more than 2^32 data keys (NIST SP 800-38D), which rotation keeps it far from.
pub const NONCE_BYTES: usize = 12;

/// Why an answer holds no payload.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The server turned the operation down: its reason code, if it gave one, and message.
    Server {
        reason: Option<u32>,
        message: String,
    },
    /// The bytes are not an answer to the request.
    Malformed(String),
}

/// The bytes of a request for `operation` with `payload`, under protocol version 1.4 (the
/// first in which Encrypt and Decrypt carry GCM's tag and additional data).
pub fn request(operation: Operation, payload: Vec<Item>) -> Vec<u8> {
    let header = Item::structure(
        tag::REQUEST_HEADER,
        vec![
            Item::structure(
                tag::PROTOCOL_VERSION,
                vec![
                    Item::integer(tag::PROTOCOL_VERSION_MAJOR, 1),
                    Item::integer(tag::PROTOCOL_VERSION_MINOR, 4),
                ],
            ),
            Item::integer(tag::BATCH_COUNT, 1),
        ],
    );
    let batch = Item::structure(
        tag::BATCH_ITEM,
        vec![
            Item::enumeration(tag::OPERATION, operation as u32),
            Item::structure(tag::REQUEST_PAYLOAD, payload),
        ],
    );
    Item::structure(tag::REQUEST_MESSAGE, vec![header, batch]).encode()
}

/// The payload of the answer `bytes` to a request for `operation` (empty when the server
/// sent none).
pub fn response(bytes: &[u8], operation: Operation) -> Result<Item, Refusal> {
    let malformed = |why: &str| Refusal::Malformed(why.to_string());
    let message = Item::decode(bytes).map_err(|e| Refusal::Malformed(e.to_string()))?;
    if message.tag != tag::RESPONSE_MESSAGE {
        return Err(malformed("the answer is not a KMIP response message"));
    }
    let mut batch = message.all(tag::BATCH_ITEM);
    let item = batch
        .next()
        .ok_or_else(|| malformed("the response holds no batch item"))?;
    if batch.next().is_some() {
        return Err(malformed("the response holds more than the one batch item"));
    }
    let status = item
        .find(tag::RESULT_STATUS)
        .and_then(Item::as_enumeration)
        .ok_or_else(|| malformed("the batch item has no result status"))?;
    if status != STATUS_SUCCESS {
        return Err(Refusal::Server {
            reason: item.find(tag::RESULT_REASON).and_then(Item::as_enumeration),
            message: item
                .find(tag::RESULT_MESSAGE)
                .and_then(Item::as_text)
                .unwrap_or("no message")
                .to_string(),
        });
    }
    // A server that cannot parse a request answers without naming an operation.
    match item.find(tag::OPERATION).and_then(Item::as_enumeration) {
        Some(op) if op == operation as u32 => {}
        _ => return Err(malformed("the answer is to another operation")),
    }
    Ok(item
        .find(tag::RESPONSE_PAYLOAD)
        .cloned()
        .unwrap_or_else(|| Item::structure(tag::RESPONSE_PAYLOAD, Vec::new())))
}

fn attribute(name: &str, value: Item) -> Item {
    Item::structure(
        tag::ATTRIBUTE,
        vec![Item::text(tag::ATTRIBUTE_NAME, name), value],
    )
}

fn name_value(name: &str) -> Item {
    Item::structure(
        tag::ATTRIBUTE_VALUE,
        vec![
            Item::text(tag::NAME_VALUE, name),
            Item::enumeration(tag::NAME_TYPE, NAME_TYPE_TEXT),
        ],
    )
}

fn uid(id: &str) -> Item {
    Item::text(tag::UNIQUE_IDENTIFIER, id)
}

/// Create: a 256-bit AES key for encrypting and decrypting, named `name`, in `group`.
pub fn create(name: &str, group: &str) -> Vec<Item> {
    vec![
        Item::enumeration(tag::OBJECT_TYPE, OBJECT_TYPE_SYMMETRIC_KEY),
        Item::structure(
            tag::TEMPLATE_ATTRIBUTE,
            vec![
                attribute(
                    "Cryptographic Algorithm",
                    Item::enumeration(tag::ATTRIBUTE_VALUE, ALGORITHM_AES),
                ),
                attribute(
                    "Cryptographic Length",
                    Item::integer(tag::ATTRIBUTE_VALUE, 256),
                ),
                attribute(
                    "Cryptographic Usage Mask",
                    Item::integer(tag::ATTRIBUTE_VALUE, USAGE_ENCRYPT_DECRYPT),
                ),
                attribute("Name", name_value(name)),
                attribute("Object Group", Item::text(tag::ATTRIBUTE_VALUE, group)),
            ],
        ),
    ]
}

/// Locate: the symmetric keys in `group`.
pub fn locate(group: &str) -> Vec<Item> {
    vec![
        attribute(
            "Object Type",
            Item::enumeration(tag::ATTRIBUTE_VALUE, OBJECT_TYPE_SYMMETRIC_KEY),
        ),
        attribute("Object Group", Item::text(tag::ATTRIBUTE_VALUE, group)),
    ]
}

/// Get Attributes: the names of object `id`.
pub fn get_names(id: &str) -> Vec<Item> {
    vec![uid(id), Item::text(tag::ATTRIBUTE_NAME, "Name")]
}

/// Activate, or Destroy: object `id`.
pub fn object(id: &str) -> Vec<Item> {
    vec![uid(id)]
}

/// Revoke: object `id`, no longer used (it is about to be destroyed).
pub fn revoke(id: &str) -> Vec<Item> {
    vec![
        uid(id),
        Item::structure(
            tag::REVOCATION_REASON,
            vec![Item::enumeration(
                tag::REVOCATION_REASON_CODE,
                REVOKED_CESSATION_OF_OPERATION,
            )],
        ),
    ]
}

fn gcm() -> Item {
    Item::structure(
        tag::CRYPTOGRAPHIC_PARAMETERS,
        vec![
            Item::enumeration(tag::BLOCK_CIPHER_MODE, MODE_GCM),
            Item::enumeration(tag::CRYPTOGRAPHIC_ALGORITHM, ALGORITHM_AES),
            Item::integer(tag::TAG_LENGTH, TAG_BYTES as i32),
        ],
    )
}

/// Encrypt: `data` under object `id` with AES-GCM, `nonce` and additional data `aad`.
pub fn encrypt(id: &str, data: &[u8], nonce: &[u8], aad: &[u8]) -> Vec<Item> {
    vec![
        uid(id),
        gcm(),
        Item::bytes(tag::DATA, data),
        Item::bytes(tag::IV_COUNTER_NONCE, nonce),
        Item::bytes(tag::AUTHENTICATED_ENCRYPTION_ADDITIONAL_DATA, aad),
    ]
}

/// Decrypt: `sealed` (what [`encrypt`] gave, as nonce ‖ ciphertext ‖ tag) under object
/// `id` with additional data `aad`; None if `sealed` is too short to be that.
pub fn decrypt(id: &str, sealed: &[u8], aad: &[u8]) -> Option<Vec<Item>> {
    if sealed.len() < NONCE_BYTES + TAG_BYTES {
        return None;
    }
    let (nonce, rest) = sealed.split_at(NONCE_BYTES);
    let (data, tag) = rest.split_at(rest.len() - TAG_BYTES);
    Some(vec![
        uid(id),
        gcm(),
        Item::bytes(tag::DATA, data),
        Item::bytes(tag::IV_COUNTER_NONCE, nonce),
        Item::bytes(tag::AUTHENTICATED_ENCRYPTION_ADDITIONAL_DATA, aad),
        Item::bytes(tag::AUTHENTICATED_ENCRYPTION_TAG, tag),
    ])
}

/// The object id an answer's payload names (Create, Activate, Revoke, Destroy).
pub fn named_id(payload: &Item) -> Option<String> {
    payload
        .find(tag::UNIQUE_IDENTIFIER)
        .and_then(Item::as_text)
        .map(str::to_string)
}

/// The object ids a Locate found.
pub fn located(payload: &Item) -> Vec<String> {
    payload
        .all(tag::UNIQUE_IDENTIFIER)
        .filter_map(Item::as_text)
        .map(str::to_string)
        .collect()
}

/// The names a Get Attributes of "Name" gave.
pub fn names(payload: &Item) -> Vec<String> {
    payload
        .all(tag::ATTRIBUTE)
        .filter(|a| a.find(tag::ATTRIBUTE_NAME).and_then(Item::as_text) == Some("Name"))
        .filter_map(|a| a.find(tag::ATTRIBUTE_VALUE)?.find(tag::NAME_VALUE))
        .filter_map(Item::as_text)
        .map(str::to_string)
        .collect()
}

/// What an Encrypt gave, as nonce ‖ ciphertext ‖ tag, given the `nonce` it was sent; None
/// if the answer lacks the ciphertext or a whole tag.
pub fn sealed(payload: &Item, nonce: &[u8]) -> Option<Vec<u8>> {
    let data = payload.find(tag::DATA).and_then(Item::as_bytes)?;
    let tag = payload
        .find(tag::AUTHENTICATED_ENCRYPTION_TAG)
        .and_then(Item::as_bytes)
        .filter(|tag| tag.len() == TAG_BYTES)?;
    Some([nonce, data, tag].concat())
}

/// The plaintext a Decrypt gave.
pub fn opened(payload: &Item) -> Option<&[u8]> {
    payload.find(tag::DATA).and_then(Item::as_bytes)
}

/// The bytes of a server's answer to `operation` (none: to a request it could not read):
/// with `payload` if `status` is success, else refused as an item not found. For tests
/// and the fuzzer's seeds.
#[cfg(any(test, fuzzing))]
pub fn answer(operation: Option<Operation>, status: u32, payload: Vec<Item>) -> Vec<u8> {
    let mut batch = Vec::new();
    if let Some(op) = operation {
        batch.push(Item::enumeration(tag::OPERATION, op as u32));
    }
    batch.push(Item::enumeration(tag::RESULT_STATUS, status));
    if status == STATUS_SUCCESS {
        batch.push(Item::structure(tag::RESPONSE_PAYLOAD, payload));
    } else {
        batch.push(Item::enumeration(
            tag::RESULT_REASON,
            reason::ITEM_NOT_FOUND,
        ));
        batch.push(Item::text(tag::RESULT_MESSAGE, "Could not locate object"));
    }
    Item::structure(
        tag::RESPONSE_MESSAGE,
        vec![
            Item::structure(Tag(0x42007A), vec![Item::integer(tag::BATCH_COUNT, 1)]),
            Item::structure(tag::BATCH_ITEM, batch),
        ],
    )
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmip::ttlv::Value;

    #[test]
    fn a_request_carries_version_1_4_and_one_operation() {
        let bytes = request(Operation::Activate, object("7"));
        let message = Item::decode(&bytes).expect("a request decodes");
        let version = message
            .find(tag::REQUEST_HEADER)
            .and_then(|h| h.find(tag::PROTOCOL_VERSION))
            .and_then(|v| v.find(tag::PROTOCOL_VERSION_MINOR))
            .map(|m| m.value.clone());
        assert_eq!(version, Some(Value::Integer(4)));
        let batch = message.find(tag::BATCH_ITEM).expect("batch item");
        assert_eq!(
            batch.find(tag::OPERATION).and_then(Item::as_enumeration),
            Some(0x12)
        );
    }

    #[test]
    fn answers_give_their_payload_or_why_not() {
        let located = answer(
            Some(Operation::Locate),
            STATUS_SUCCESS,
            vec![uid("1"), uid("2")],
        );
        let payload = response(&located, Operation::Locate).expect("payload");
        assert_eq!(super::located(&payload), vec!["1", "2"]);
        assert!(matches!(
            response(&located, Operation::Create),
            Err(Refusal::Malformed(_))
        ));
        let refused = answer(Some(Operation::Decrypt), 1, Vec::new());
        assert_eq!(
            response(&refused, Operation::Decrypt),
            Err(Refusal::Server {
                reason: Some(reason::ITEM_NOT_FOUND),
                message: "Could not locate object".into()
            })
        );
        // An unparsable request's answer names no operation, and is still a refusal.
        let unparsed = answer(None, 1, Vec::new());
        assert!(matches!(
            response(&unparsed, Operation::Create),
            Err(Refusal::Server { .. })
        ));
        let anonymous = answer(None, STATUS_SUCCESS, Vec::new());
        assert!(matches!(
            response(&anonymous, Operation::Create),
            Err(Refusal::Malformed(_))
        ));
        assert!(matches!(
            response(&[0; 8], Operation::Create),
            Err(Refusal::Malformed(_))
        ));
    }

    #[test]
    fn a_wrap_is_nonce_ciphertext_and_tag() {
        let nonce = [7u8; NONCE_BYTES];
        let payload = Item::structure(
            tag::RESPONSE_PAYLOAD,
            vec![
                uid("3"),
                Item::bytes(tag::DATA, &[1; 32]),
                Item::bytes(tag::AUTHENTICATED_ENCRYPTION_TAG, &[2; TAG_BYTES]),
            ],
        );
        let wrapped = sealed(&payload, &nonce).expect("sealed");
        assert_eq!(wrapped.len(), NONCE_BYTES + 32 + TAG_BYTES);
        let request = Item::structure(
            tag::REQUEST_PAYLOAD,
            decrypt("3", &wrapped, b"aad").expect("long enough"),
        );
        let field = |t| request.find(t).and_then(Item::as_bytes).map(<[u8]>::to_vec);
        assert_eq!(field(tag::IV_COUNTER_NONCE), Some(nonce.to_vec()));
        assert_eq!(field(tag::DATA), Some(vec![1; 32]));
        assert_eq!(
            field(tag::AUTHENTICATED_ENCRYPTION_TAG),
            Some(vec![2; TAG_BYTES])
        );
        assert_eq!(decrypt("3", &[0; NONCE_BYTES + TAG_BYTES - 1], b""), None);
        let short_tag = Item::structure(
            tag::RESPONSE_PAYLOAD,
            vec![
                Item::bytes(tag::DATA, &[1; 32]),
                Item::bytes(tag::AUTHENTICATED_ENCRYPTION_TAG, &[2; 8]),
            ],
        );
        assert_eq!(sealed(&short_tag, &nonce), None);
    }

    #[test]
    fn names_come_out_of_get_attributes() {
        let payload = Item::structure(
            tag::RESPONSE_PAYLOAD,
            vec![
                uid("4"),
                attribute("Name", name_value("coffer-kms:a:v1")),
                attribute("Object Group", Item::text(tag::ATTRIBUTE_VALUE, "coffer")),
            ],
        );
        assert_eq!(names(&payload), vec!["coffer-kms:a:v1"]);
    }
}
