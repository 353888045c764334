//! KMIP's wire encoding, TTLV (KMIP 1.4 §9.1): every item is a 3-byte tag, a 1-byte type,
//! a 4-byte big-endian length and the value, padded with zeros to a multiple of 8 bytes; a
//! structure's value is its items one after the other. Pure code: bytes in, items out.

/// A KMIP tag (`0x42xxxx` for the standard ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag(pub u32);

/// A value of each TTLV type. Byte strings carry key material (a data key on its way to
/// be wrapped, or unwrapped): they are zeroised when dropped and never printed.
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    /// Items one after the other.
    Structure(Vec<Item>),
    /// A signed 32-bit integer (a bit mask, a length).
    Integer(i32),
    /// A signed 64-bit integer.
    LongInteger(i64),
    /// A big integer's bytes, big-endian two's complement, a multiple of 8 long.
    BigInteger(Vec<u8>),
    /// One of the values a tag's enumeration defines.
    Enumeration(u32),
    Boolean(bool),
    /// UTF-8 text (a name, an object id, a message).
    Text(String),
    /// Bytes (data, a nonce, a tag).
    Bytes(Vec<u8>),
    /// Seconds since 1970.
    DateTime(i64),
    /// Seconds.
    Interval(u32),
}

impl Drop for Value {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        if let Value::Bytes(bytes) | Value::BigInteger(bytes) = self {
            bytes.zeroize();
        }
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Structure(items) => f.debug_list().entries(items).finish(),
            Value::Integer(v) => write!(f, "Integer({v})"),
            Value::LongInteger(v) => write!(f, "LongInteger({v})"),
            Value::BigInteger(bytes) => write!(f, "BigInteger({} bytes)", bytes.len()),
            Value::Enumeration(v) => write!(f, "Enumeration({v:#x})"),
            Value::Boolean(v) => write!(f, "Boolean({v})"),
            Value::Text(text) => write!(f, "Text({text:?})"),
            Value::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
            Value::DateTime(v) => write!(f, "DateTime({v})"),
            Value::Interval(v) => write!(f, "Interval({v})"),
        }
    }
}

/// A tagged value: what TTLV encodes, and what a structure holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub tag: Tag,
    pub value: Value,
}

/// Why bytes are not a TTLV item.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TtlvError {
    #[error("TTLV ends {0} bytes early")]
    Short(usize),
    #[error("TTLV item {tag:#08x} has type {kind:#04x}, which KMIP does not define")]
    UnknownType { tag: u32, kind: u8 },
    #[error("TTLV item {tag:#08x} of type {kind:#04x} has length {length}")]
    BadLength { tag: u32, kind: u8, length: usize },
    #[error("TTLV boolean {tag:#08x} is neither 0 nor 1")]
    NotBoolean { tag: u32 },
    #[error("TTLV text of item {0:#08x} is not UTF-8")]
    NotText(u32),
    #[error("TTLV structures nest deeper than {STRUCTURE_DEPTH_MAX}")]
    TooDeep,
    #[error("{0} bytes follow the TTLV item")]
    Trailing(usize),
}

/// How deep structures may nest in what a server sends (KMIP's own messages need 6 or 7).
const STRUCTURE_DEPTH_MAX: usize = 16;

/// Items of each type, and what they hold; the accessors give None for another type, and
/// `find` and `all` nothing in an item that is not a structure.
impl Item {
    pub fn structure(tag: Tag, items: Vec<Item>) -> Item {
        Item {
            tag,
            value: Value::Structure(items),
        }
    }

    pub fn integer(tag: Tag, value: i32) -> Item {
        Item {
            tag,
            value: Value::Integer(value),
        }
    }

    pub fn enumeration(tag: Tag, value: u32) -> Item {
        Item {
            tag,
            value: Value::Enumeration(value),
        }
    }

    pub fn text(tag: Tag, value: &str) -> Item {
        Item {
            tag,
            value: Value::Text(value.into()),
        }
    }

    pub fn bytes(tag: Tag, value: &[u8]) -> Item {
        Item {
            tag,
            value: Value::Bytes(value.to_vec()),
        }
    }

    /// The first item tagged `tag` in this structure.
    pub fn find(&self, tag: Tag) -> Option<&Item> {
        self.all(tag).next()
    }

    /// Every item tagged `tag` in this structure, in order.
    pub fn all(&self, tag: Tag) -> impl Iterator<Item = &Item> {
        let items: &[Item] = match &self.value {
            Value::Structure(items) => items,
            _ => &[],
        };
        items.iter().filter(move |item| item.tag == tag)
    }

    pub fn as_text(&self) -> Option<&str> {
        match &self.value {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.value {
            Value::Bytes(bytes) => Some(bytes),
            _ => None,
        }
    }

    pub fn as_enumeration(&self) -> Option<u32> {
        match self.value {
            Value::Enumeration(value) => Some(value),
            _ => None,
        }
    }

    /// The item's bytes on the wire.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        debug_assert!(self.tag.0 >> 24 == 0, "a TTLV tag is 3 bytes");
        if let Value::BigInteger(bytes) = &self.value {
            assert!(
                bytes.len().is_multiple_of(8),
                "a TTLV big integer is sign-extended to a multiple of 8 bytes"
            );
        }
        out.extend_from_slice(&self.tag.0.to_be_bytes()[1..]);
        out.push(self.value.kind());
        let length_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let start = out.len();
        match &self.value {
            Value::Structure(items) => items.iter().for_each(|item| item.encode_into(out)),
            Value::Integer(v) => out.extend_from_slice(&v.to_be_bytes()),
            Value::LongInteger(v) | Value::DateTime(v) => out.extend_from_slice(&v.to_be_bytes()),
            Value::Enumeration(v) | Value::Interval(v) => out.extend_from_slice(&v.to_be_bytes()),
            Value::Boolean(v) => out.extend_from_slice(&u64::from(*v).to_be_bytes()),
            Value::Text(text) => out.extend_from_slice(text.as_bytes()),
            Value::Bytes(bytes) | Value::BigInteger(bytes) => out.extend_from_slice(bytes),
        }
        let length = u32::try_from(out.len() - start).expect("a KMIP item under 4 GiB");
        out[length_at..start].copy_from_slice(&length.to_be_bytes());
        out.resize(start + padded(out.len() - start), 0);
    }

    /// The one item `bytes` holds, nothing after it.
    pub fn decode(bytes: &[u8]) -> Result<Item, TtlvError> {
        let (item, used) = decode_at(bytes, 0)?;
        match bytes.len() - used {
            0 => Ok(item),
            rest => Err(TtlvError::Trailing(rest)),
        }
    }
}

impl Value {
    fn kind(&self) -> u8 {
        match self {
            Value::Structure(_) => 0x01,
            Value::Integer(_) => 0x02,
            Value::LongInteger(_) => 0x03,
            Value::BigInteger(_) => 0x04,
            Value::Enumeration(_) => 0x05,
            Value::Boolean(_) => 0x06,
            Value::Text(_) => 0x07,
            Value::Bytes(_) => 0x08,
            Value::DateTime(_) => 0x09,
            Value::Interval(_) => 0x0A,
        }
    }
}

/// `length` rounded up to a multiple of 8.
fn padded(length: usize) -> usize {
    length.div_ceil(8) * 8
}

/// The length of the whole message whose first 8 bytes are `header`: 8 plus its value's
/// declared length.
pub fn message_length(header: &[u8; 8]) -> usize {
    let length = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    8 + padded(length as usize)
}

/// The item at the start of `bytes`, and how many bytes it took (padding included).
fn decode_at(bytes: &[u8], depth: usize) -> Result<(Item, usize), TtlvError> {
    if depth > STRUCTURE_DEPTH_MAX {
        return Err(TtlvError::TooDeep);
    }
    let header = bytes
        .get(..8)
        .ok_or(TtlvError::Short(8usize.saturating_sub(bytes.len())))?;
    let tag = u32::from_be_bytes([0, header[0], header[1], header[2]]);
    let kind = header[3];
    let length = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    let used = 8 + padded(length);
    let raw = bytes
        .get(8..8 + length)
        .ok_or_else(|| TtlvError::Short(8 + length - bytes.len()))?;
    if bytes.len() < used {
        return Err(TtlvError::Short(used - bytes.len()));
    }
    let bad_length = || TtlvError::BadLength { tag, kind, length };
    let fixed = |want: usize| {
        if length == want {
            Ok(raw)
        } else {
            Err(bad_length())
        }
    };
    let four = |raw: &[u8]| [raw[0], raw[1], raw[2], raw[3]];
    let eight = |raw: &[u8]| {
        let mut out = [0; 8];
        out.copy_from_slice(raw);
        out
    };
    let value = match kind {
        0x01 => {
            let mut items = Vec::new();
            let mut at = 0;
            while at < raw.len() {
                let (item, took) = decode_at(&raw[at..], depth + 1)?;
                items.push(item);
                at += took;
            }
            Value::Structure(items)
        }
        0x02 => Value::Integer(i32::from_be_bytes(four(fixed(4)?))),
        0x03 => Value::LongInteger(i64::from_be_bytes(eight(fixed(8)?))),
        0x04 if length.is_multiple_of(8) && length > 0 => Value::BigInteger(raw.to_vec()),
        0x05 => Value::Enumeration(u32::from_be_bytes(four(fixed(4)?))),
        0x06 => match u64::from_be_bytes(eight(fixed(8)?)) {
            0 => Value::Boolean(false),
            1 => Value::Boolean(true),
            _ => return Err(TtlvError::NotBoolean { tag }),
        },
        0x07 => Value::Text(String::from_utf8(raw.to_vec()).map_err(|_| TtlvError::NotText(tag))?),
        0x08 => Value::Bytes(raw.to_vec()),
        0x09 => Value::DateTime(i64::from_be_bytes(eight(fixed(8)?))),
        0x0A => Value::Interval(u32::from_be_bytes(four(fixed(4)?))),
        0x04 => return Err(bad_length()),
        _ => return Err(TtlvError::UnknownType { tag, kind }),
    };
    Ok((
        Item {
            tag: Tag(tag),
            value,
        },
        used,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Tag = Tag(0x420001);
    const B: Tag = Tag(0x420002);

    #[test]
    fn the_specifications_examples_encode_as_written() {
        // KMIP 1.4 §9.1.2's examples.
        let hex = |item: Item| {
            item.encode()
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<String>()
        };
        assert_eq!(
            hex(Item::integer(Tag(0x420020), 8)),
            "42002002000000040000000800000000"
        );
        assert_eq!(
            hex(Item {
                tag: Tag(0x420020),
                value: Value::LongInteger(123456789000000000),
            }),
            "420020030000000801B69B4BA5749200"
        );
        assert_eq!(
            hex(Item {
                tag: Tag(0x420020),
                value: Value::BigInteger(vec![
                    0, 0, 0, 0, 0, 0, 0, 0, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF
                ]),
            }),
            "42002004000000100000000000000000 1FFFFFFFFFFFFFFF".replace(' ', "")
        );
        assert_eq!(
            hex(Item {
                tag: Tag(0x420020),
                value: Value::Boolean(true),
            }),
            "42002006000000080000000000000001"
        );
        assert_eq!(
            hex(Item::enumeration(Tag(0x420020), 255)),
            "4200200500000004000000FF00000000"
        );
        assert_eq!(
            hex(Item::text(Tag(0x420020), "Hello World")),
            "420020070000000B48656C6C6F20576F726C640000000000"
        );
        assert_eq!(
            hex(Item::bytes(Tag(0x420020), &[1, 2, 3])),
            "42002008000000030102030000000000"
        );
        assert_eq!(
            hex(Item::structure(
                Tag(0x420020),
                vec![
                    Item::enumeration(Tag(0x420004), 254),
                    Item::integer(Tag(0x420005), 255),
                ]
            )),
            "42002001000000204200040500000004000000FE000000004200050200000004000000FF00000000"
        );
    }

    #[test]
    fn every_type_comes_back_as_it_went() {
        let item = Item::structure(
            A,
            vec![
                Item::integer(B, -7),
                Item {
                    tag: B,
                    value: Value::LongInteger(-1 << 40),
                },
                Item {
                    tag: B,
                    value: Value::BigInteger(vec![0xFF; 16]),
                },
                Item::enumeration(B, 0x1F),
                Item {
                    tag: B,
                    value: Value::Boolean(true),
                },
                Item::text(B, "coffer-kms:key:v1"),
                Item::bytes(B, &[9; 33]),
                Item {
                    tag: B,
                    value: Value::DateTime(1_700_000_000),
                },
                Item {
                    tag: B,
                    value: Value::Interval(86400),
                },
                Item::structure(A, vec![Item::text(B, "")]),
            ],
        );
        let bytes = item.encode();
        assert_eq!(bytes.len() % 8, 0);
        let header: [u8; 8] = bytes[..8].try_into().expect("8 bytes");
        assert_eq!(message_length(&header), bytes.len());
        assert_eq!(Item::decode(&bytes), Ok(item.clone()));
        assert_eq!(item.all(B).count(), 9);
        assert_eq!(item.find(B).map(|i| &i.value), Some(&Value::Integer(-7)));
        assert_eq!(item.find(Tag(0x420003)), None);
        assert_eq!(
            format!("{:?}", Item::bytes(A, &[7; 32]).value),
            "Bytes(32 bytes)",
            "key material is never printed"
        );
    }

    #[test]
    fn malformed_bytes_are_refused_never_panic() {
        let good = Item::structure(A, vec![Item::text(B, "abc"), Item::integer(B, 1)]).encode();
        for cut in 0..good.len() {
            assert!(
                matches!(Item::decode(&good[..cut]), Err(TtlvError::Short(_))),
                "cut at {cut}"
            );
        }
        let mut long = good.clone();
        long.extend_from_slice(&[0; 8]);
        assert_eq!(Item::decode(&long), Err(TtlvError::Trailing(8)));
        let mut kind = Item::integer(A, 1).encode();
        kind[3] = 0x0B;
        assert!(matches!(
            Item::decode(&kind),
            Err(TtlvError::UnknownType { kind: 0x0B, .. })
        ));
        let mut length = Item::integer(A, 1).encode();
        length[7] = 8;
        assert!(matches!(
            Item::decode(&length),
            Err(TtlvError::BadLength { length: 8, .. })
        ));
        let mut boolean = Item {
            tag: A,
            value: Value::Boolean(true),
        }
        .encode();
        boolean[15] = 2;
        assert_eq!(
            Item::decode(&boolean),
            Err(TtlvError::NotBoolean { tag: 0x420001 })
        );
        let text = Item::bytes(A, &[0xFF, 0xFE]).encode();
        let mut text = text.clone();
        text[3] = 0x07;
        assert_eq!(Item::decode(&text), Err(TtlvError::NotText(0x420001)));
        let mut deep = Item::integer(B, 0);
        for _ in 0..=STRUCTURE_DEPTH_MAX {
            deep = Item::structure(A, vec![deep]);
        }
        assert_eq!(Item::decode(&deep.encode()), Err(TtlvError::TooDeep));
        // A structure whose declared length cuts its last item.
        let mut cut = good.clone();
        cut[7] -= 8;
        cut.truncate(cut.len() - 8);
        assert!(Item::decode(&cut).is_err());
    }
}
