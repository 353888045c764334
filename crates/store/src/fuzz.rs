//! Entry points for the fuzz target in `fuzz/` and for the tests that replay what it finds
//! (docs/fuzzing.md); compiled for tests and the fuzzer only. They read the metadata
//! records a store reads back from its database, as a damaged disk may hold them. In
//! `none` mode nothing authenticates a record, so its decoding and the checks behind it are
//! all that stand between a damaged byte and the read path; none may panic, whatever the
//! bytes.

use std::collections::BTreeMap;

use map::cluster::PoolUsage;
use map::PoolId;

use crate::metadata::{extent_key, MetaSealer, ObjectId};
use crate::object::{self, decode_extent, Extent, ExtentMap, ObjectRecord};
use crate::omap;
use crate::seal::ExtentSeal;
use crate::usage::{decode_row, encode_row, row_key};

const ID: ObjectId = [7; 16];

/// Reads `bytes` as an object record, as an extent record (then slices its map the way
/// reads and overwrites do), as a pool's usage row, and as the root, a page and an entry
/// of a paged omap (then lists and changes an omap whose root and pages are all `bytes`);
/// returns how many accepted them.
pub fn records(bytes: &[u8]) -> usize {
    let plain = MetaSealer::plain();
    let record = postcard::from_bytes::<ObjectRecord>(bytes).is_ok();
    let first_block = 3;
    let extent = decode_extent(&plain, &extent_key(&ID, first_block), bytes).inspect(|extent| {
        let mut map = ExtentMap::from([(first_block, extent.clone())]);
        let end_block = first_block + extent.len_blocks;
        for from_block in [first_block, first_block + 1, end_block - 1] {
            object::pieces(&map, from_block, end_block);
        }
        object::punch(&mut map, first_block + 1, end_block);
    });
    let usage = decode_row(&plain, &row_key(PoolId(1)), bytes).is_some();
    let root = omap::Root::decode(bytes).is_ok();
    let page = omap::decode_page(bytes).is_ok();
    let entry = omap::entry_value(bytes.to_vec(), b"k").is_ok();
    let every_row = |_: omap::Row| Ok::<_, omap::Damaged>(Some(bytes.to_vec()));
    let listed = omap::list(None, 100, every_row).is_ok();
    let mut keys = omap::Keys::default();
    let changed = keys.insert(b"k", &mut { every_row }).is_ok()
        && keys.remove(b"m", &mut { every_row }).is_ok();
    keys.changes();
    [
        record,
        extent.is_some(),
        usage,
        root,
        page,
        entry,
        listed,
        changed,
    ]
    .into_iter()
    .map(usize::from)
    .sum()
}

/// Records as a store writes them, for [`records`]: an object record, an extent of each
/// kind of seal, a usage row.
pub fn record_seeds() -> Vec<Vec<u8>> {
    let record = ObjectRecord {
        name: "rbd_data.1.0000000000000003".into(),
        size_bytes: 4 << 20,
        version: 17,
        mtime_ns: 1_790_000_000_000_000_000,
        attrs: BTreeMap::from([("_".into(), vec![1, 2, 3])]),
    };
    let extent = |seal: ExtentSeal, len_blocks: u64| Extent {
        physical_block: 4096,
        len_blocks,
        seal,
    };
    let usage = PoolUsage {
        objects: 3,
        stored_bytes: 12 << 20,
        allocated_bytes: 12 << 20,
    };
    let encoded = |bytes: postcard::Result<Vec<u8>>| bytes.expect("a record encodes");
    vec![
        encoded(postcard::to_allocvec(&record)),
        encoded(postcard::to_allocvec(&extent(ExtentSeal::Bare, 1024))),
        encoded(postcard::to_allocvec(&extent(
            ExtentSeal::Store {
                incarnation: 2,
                nonce_base: 99,
                tags: vec![[5; crate::TAG_BYTES]; 4],
            },
            4,
        ))),
        encode_row(&usage),
        omap::build(
            (0..400)
                .map(|n| format!("key-{n:03}").into_bytes())
                .collect(),
        )
        .pop()
        .expect("a root")
        .1,
        omap::encode_page(&[b"k".to_vec(), b"m".to_vec()]),
        omap::encode_entry(b"k", b"value"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_a_store_writes_are_read() {
        for seed in record_seeds() {
            assert!(records(&seed) >= 1, "{seed:?}");
        }
    }
}

/// What the fuzz target found, each refused as it must be.
#[cfg(test)]
mod found {
    use super::*;

    /// An extent record whose device blocks run past the last block number: slicing it (as
    /// every read and overwrite does) overflowed, a panic with overflow checks and, without
    /// them, device blocks wrapped round to the start of the device. The same for the byte
    /// offset of a block, found by reading the code after the fuzzer's find.
    #[test]
    fn an_extent_past_the_last_block_number_is_refused() {
        let input = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x40, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x0b, 0xff, 0xff, 0xff, 0xff, 0xeb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xe3,
        ];
        let plain = MetaSealer::plain();
        assert!(decode_extent(&plain, &extent_key(&ID, 3), &input).is_none());
        records(&input);
        let past_bytes = Extent {
            physical_block: u64::MAX / crate::BLOCK_SIZE_BYTES,
            len_blocks: 1,
            seal: ExtentSeal::Bare,
        };
        let bytes = postcard::to_allocvec(&past_bytes).expect("an extent encodes");
        assert!(decode_extent(&plain, &extent_key(&ID, 3), &bytes).is_none());
    }

    /// A paged omap's root whose next page number is the last: the first insert's page
    /// took it and the count after it overflowed (a panic with overflow checks; release
    /// builds wrapped, so later pages could take numbers in use). Only a `none` store can
    /// hold it; the root now refuses a next number a store never reaches.
    #[test]
    fn a_root_at_the_last_page_number_is_refused() {
        let input = [0xff; 8];
        assert_eq!(
            omap::Root::decode(&input),
            Err(omap::Damaged("an omap root"))
        );
        records(&input);
    }
}
