//! Striping: a byte range of an image (or, later, a file) laid over objects of one fixed
//! size, object `i` holding bytes `[i * object_size, (i + 1) * object_size)`. Shared by every
//! front end that stores a large address space in objects.

/// One object's share of a byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The object's index: its first byte is at `index * object_size` in the address space.
    pub index: u64,
    /// Where the piece starts within the object.
    pub offset: u64,
    pub len: u64,
    /// Where the piece starts within the range it was cut from.
    pub range_offset: u64,
}

impl Piece {
    /// The piece covers its whole object.
    pub fn is_whole(&self, object_size: u64) -> bool {
        self.offset == 0 && self.len == object_size
    }
}

/// The pieces of `[offset, offset + len)` over objects of `object_size` bytes, in address
/// order. A range that would pass the end of the 64-bit address space stops there.
pub fn pieces(offset: u64, len: u64, object_size: u64) -> impl Iterator<Item = Piece> {
    assert!(object_size > 0, "objects of zero bytes hold nothing");
    let end = offset.saturating_add(len);
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let index = at / object_size;
        let within = at % object_size;
        let piece_len = (object_size - within).min(end - at);
        let piece = Piece {
            index,
            offset: within,
            len: piece_len,
            range_offset: at - offset,
        };
        at += piece_len;
        Some(piece)
    })
}

/// How many objects an address space of `size` bytes spans.
pub fn object_count(size: u64, object_size: u64) -> u64 {
    size.div_ceil(object_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: u64 = 4 << 20;

    #[test]
    fn a_range_inside_one_object_is_one_piece() {
        let got: Vec<Piece> = pieces(OBJECT + 4096, 8192, OBJECT).collect();
        assert_eq!(
            got,
            vec![Piece {
                index: 1,
                offset: 4096,
                len: 8192,
                range_offset: 0
            }]
        );
    }

    #[test]
    fn a_range_across_boundaries_is_cut_at_each_object() {
        let got: Vec<Piece> = pieces(OBJECT - 100, 2 * OBJECT + 200, OBJECT).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(
            (got[0].index, got[0].offset, got[0].len),
            (0, OBJECT - 100, 100)
        );
        assert!(got[1].is_whole(OBJECT) && got[2].is_whole(OBJECT));
        assert_eq!((got[3].index, got[3].offset, got[3].len), (3, 0, 100));
        let mut expected_range_offset = 0;
        for piece in &got {
            assert_eq!(piece.range_offset, expected_range_offset);
            expected_range_offset += piece.len;
        }
        assert_eq!(expected_range_offset, 2 * OBJECT + 200);
    }

    #[test]
    fn empty_and_overflowing_ranges() {
        assert_eq!(pieces(12345, 0, OBJECT).count(), 0);
        let last = pieces(u64::MAX - 10, 100, OBJECT)
            .last()
            .expect("one piece");
        assert_eq!(last.offset + last.len, u64::MAX % OBJECT);
        assert_eq!(object_count(0, OBJECT), 0);
        assert_eq!(object_count(OBJECT + 1, OBJECT), 2);
    }
}
