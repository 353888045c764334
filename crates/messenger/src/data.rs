//! A frame's data segment as it is sent: one buffer, or pieces that go out one after another
//! without being joined first. An OSD's read served from its cache replies with the cached
//! blocks themselves (docs/design/messenger.md, "Data in pieces"); the receiver gets the
//! segment as one buffer either way.

use bytes::Bytes;

/// The bytes of a data segment, in order, in one piece or several.
#[derive(Clone, Debug, Default)]
pub struct Data(Inner);

#[derive(Clone, Debug, Default)]
enum Inner {
    #[default]
    Empty,
    One(Bytes),
    /// At least two pieces, none empty, and their length in all.
    Pieces(Vec<Bytes>, usize),
}

impl Data {
    /// Bytes in all.
    pub fn len(&self) -> usize {
        match &self.0 {
            Inner::Empty => 0,
            Inner::One(bytes) => bytes.len(),
            Inner::Pieces(_, len) => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces in order, none of them empty.
    pub fn pieces(&self) -> &[Bytes] {
        match &self.0 {
            Inner::Empty => &[],
            Inner::One(bytes) => std::slice::from_ref(bytes),
            Inner::Pieces(pieces, _) => pieces,
        }
    }

    /// The bytes as one buffer: the piece itself when there is one, else a copy of them all.
    pub fn joined(&self) -> Bytes {
        match &self.0 {
            Inner::Empty => Bytes::new(),
            Inner::One(bytes) => bytes.clone(),
            Inner::Pieces(pieces, _) => Bytes::from(pieces.concat()),
        }
    }
}

impl From<Bytes> for Data {
    fn from(bytes: Bytes) -> Data {
        if bytes.is_empty() {
            Data(Inner::Empty)
        } else {
            Data(Inner::One(bytes))
        }
    }
}

impl FromIterator<Bytes> for Data {
    /// The pieces in order; empty ones are left out.
    fn from_iter<I: IntoIterator<Item = Bytes>>(pieces: I) -> Data {
        let mut pieces: Vec<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        match pieces.len() {
            0 => Data(Inner::Empty),
            1 => Data(Inner::One(pieces.pop().expect("one piece"))),
            _ => {
                let len = pieces.iter().map(Bytes::len).sum();
                Data(Inner::Pieces(pieces, len))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_keep_their_order_and_empty_ones_are_dropped() {
        let data: Data = [&b"ab"[..], b"", b"cde", b"f"]
            .into_iter()
            .map(Bytes::from_static)
            .collect();
        assert_eq!(data.len(), 6);
        assert_eq!(data.pieces().len(), 3);
        assert_eq!(&data.joined()[..], b"abcdef");

        let one: Data = [Bytes::new(), Bytes::from_static(b"xyz")]
            .into_iter()
            .collect();
        assert_eq!(
            one.pieces(),
            Data::from(Bytes::from_static(b"xyz")).pieces()
        );

        let none: Data = [Bytes::new()].into_iter().collect();
        assert!(none.is_empty() && none.pieces().is_empty());
        assert!(Data::from(Bytes::new()).pieces().is_empty());
    }
}
