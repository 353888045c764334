//! The typed requests and replies between Coffer's processes. The metadata segment of a
//! frame carries one of these (postcard); bulk bytes travel in the data segment. Each
//! service's vocabulary is in its own file: [`mon`] for what clients, OSDs and monitors ask
//! the monitors (maps, commands, beacons, auth, the KMS, raft between monitors), [`osd`] for
//! what clients and OSDs ask an OSD (object operations and their results, replication,
//! recovery and scrub). A mount and its MDS speak `fs::proto`.

mod mon;
mod osd;

pub use mon::*;
pub use osd::*;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Serialize;

    use super::*;

    #[test]
    fn pg_state_names_lists_every_name() {
        let states = [
            PgState::Clean,
            PgState::Undersized,
            PgState::Recovering,
            PgState::Peering,
            PgState::Inactive(String::new()),
            PgState::ReadOnly(String::new()),
        ];
        let names: Vec<&str> = states.iter().map(PgState::name).collect();
        assert_eq!(names, PgState::NAMES);
    }

    fn seal(n: u8) -> ChunkSeal {
        ChunkSeal {
            key_id: u64::MAX - u64::from(n),
            nonce: [n; 12],
            tag: [n.wrapping_add(1); 16],
        }
    }

    fn round_trip<T: Serialize + serde::de::DeserializeOwned>(value: &T) -> (T, usize) {
        let bytes = postcard::to_allocvec(value).expect("encode");
        (postcard::from_bytes(&bytes).expect("decode"), bytes.len())
    }

    #[test]
    fn chunk_seal_lists_travel_as_36_bytes_per_record() {
        let seals: Vec<ChunkSeal> = (0..1024).map(|i| seal(i as u8)).collect();
        let op = ObjectOp::WriteChunks {
            first: 3,
            seals: seals.clone(),
            end: 1025 * CHUNK_BYTES,
        };
        let (back, len) = round_trip(&op);
        assert_eq!(back, op);
        let none = ObjectOp::WriteChunks {
            first: 3,
            seals: Vec::new(),
            end: 1025 * CHUNK_BYTES,
        };
        let (_, len_none) = round_trip(&none);
        // 36 bytes per record, and the list's length prefix grows from 1 byte to 3.
        assert_eq!(len - len_none, 1024 * 36 + 2);

        let holes: Vec<Option<ChunkSeal>> = vec![None, Some(seal(1)), None, None, Some(seal(2))];
        let result = OpResult::Chunks {
            size: 5 * CHUNK_BYTES,
            seals: holes.clone(),
        };
        assert_eq!(round_trip(&result).0, result);
        let empty = OpResult::Chunks {
            size: 0,
            seals: Vec::new(),
        };
        assert_eq!(round_trip(&empty).0, empty);

        for chunks in [None, Some(Vec::new()), Some(holes)] {
            let copy = ObjectCopy {
                version: Version::default(),
                size: 9,
                attrs: BTreeMap::new(),
                omap: Vec::new(),
                omap_more: false,
                chunks,
            };
            assert_eq!(round_trip(&copy).0, copy);
        }
    }

    #[test]
    fn malformed_chunk_seal_lists_are_refused() {
        let op = ObjectOp::WriteChunks {
            first: 0,
            seals: vec![seal(1), seal(2)],
            end: 2 * CHUNK_BYTES,
        };
        let bytes = postcard::to_allocvec(&op).expect("encode");
        // The list's length prefix (72) sits after the variant and `first`; one byte short
        // leaves a partial record.
        let at = bytes.iter().position(|b| *b == 72).expect("length prefix");
        let mut short = bytes.clone();
        short[at] = 71;
        short.remove(at + 1);
        assert!(postcard::from_bytes::<ObjectOp>(&short).is_err());

        let result = OpResult::Chunks {
            size: 0,
            seals: vec![Some(seal(1)), None],
        };
        let bytes = postcard::to_allocvec(&result).expect("encode");
        // The list's length prefix (38) is followed by the first entry's kind byte.
        let at = bytes.iter().position(|b| *b == 38).expect("length prefix");
        assert_eq!(bytes[at + 1], 1);
        let mut unknown_kind = bytes.clone();
        unknown_kind[at + 1] = 2;
        assert!(postcard::from_bytes::<OpResult>(&unknown_kind).is_err());
        // A seal cut short: the list ends one byte into its last 36.
        let mut cut = bytes[..bytes.len() - 2].to_vec();
        cut[at] = 36;
        assert!(postcard::from_bytes::<OpResult>(&cut).is_err());
    }
}
