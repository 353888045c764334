//! Omaps whose keys are names, kept with no key in clear on the disk.
//!
//! Front ends keep names in omap keys: object keys in a bucket index, file names in a
//! directory, user names and access key ids. As row keys they would be readable by anyone
//! holding the disk, so since format 4 every omap but a PG log's lives in table
//! `omap_paged` as three kinds of rows under its object's id, each value sealed:
//!
//! ```text
//!  id · 0                   the root: each page's number and lowest key (its fence), in order
//!  id · 1 · page (u64 BE)   a page: its keys, sorted, about PAGE_BYTES_MAX at most
//!  id · 2 · slot (16)       an entry: its key and value
//!                           slot = HMAC-SHA256(omap subkey, id · key), first 16 bytes
//! ```
//!
//! A get reads one entry, by its slot. A list reads the root, the pages it walks and the
//! entries of the keys it returns. A change reads the root and the page its key falls in,
//! and writes the entry and that page, and the root when a page splits or empties. Pages
//! are never merged; an empty one is dropped.
//!
//! A PG log's omap (pools with `PoolId::is_pg_meta`) stays in table `omap`, one row per
//! entry keyed in clear: its keys are log versions, which name nothing, and it takes an
//! entry on every client write, where rewriting a page would cost.
//!
//! This module is the pure part: the rows' encodings and the changes to one object's keys.
//! The store reads rows for it (`Row`) and seals what it returns.

use crate::metadata::ObjectId;
use std::collections::{BTreeMap, BTreeSet};

/// A page whose keys take more than this many bytes (each with a 2-byte length) is cut into
/// pieces of at most half of it.
pub(crate) const PAGE_BYTES_MAX: usize = 8 << 10;
/// A root's next page number is below this: one per page ever made, so no store reaches
/// it, and the numbers one transaction hands out after it cannot overflow.
const PAGE_NUMBER_END: u64 = 1 << 63;

/// Which row of an object's paged omap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Row {
    Root,
    Page(u64),
}

impl Row {
    pub(crate) fn key(self, id: &ObjectId) -> Vec<u8> {
        let mut key = Vec::with_capacity(25);
        key.extend_from_slice(id);
        match self {
            Row::Root => key.push(0),
            Row::Page(number) => {
                key.push(1);
                key.extend_from_slice(&number.to_be_bytes());
            }
        }
        key
    }
}

/// The row key of the entry in `slot`.
pub(crate) fn entry_key(id: &ObjectId, slot: &[u8; 16]) -> Vec<u8> {
    let mut key = Vec::with_capacity(33);
    key.extend_from_slice(id);
    key.push(2);
    key.extend_from_slice(slot);
    key
}

/// A row that does not decode, or contradicts the others: the metadata is damaged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Damaged(pub &'static str);

const DAMAGED_ROOT: Damaged = Damaged("an omap root");
const DAMAGED_PAGE: Damaged = Damaged("an omap page");
const MISSING_PAGE: Damaged = Damaged("an omap page the root names");

/// The root: every page with its fence, in key order. The first fence is empty; every key
/// of a page is at least its fence and below the next page's.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Root {
    /// The number the next new page takes.
    next: u64,
    pages: Vec<(Vec<u8>, u64)>,
}

impl Root {
    /// The index in `pages` of the page `key` falls in; `pages` is not empty.
    fn find(&self, key: &[u8]) -> usize {
        self.pages
            .partition_point(|(fence, _)| fence.as_slice() <= key)
            .saturating_sub(1)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = self.next.to_be_bytes().to_vec();
        for (fence, number) in &self.pages {
            out.extend_from_slice(&number.to_be_bytes());
            put_bytes(&mut out, fence);
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Root, Damaged> {
        let (next, mut rest) = take_u64(bytes)
            .filter(|(next, _)| *next < PAGE_NUMBER_END)
            .ok_or(DAMAGED_ROOT)?;
        let mut pages: Vec<(Vec<u8>, u64)> = Vec::new();
        while !rest.is_empty() {
            let (number, after) = take_u64(rest).ok_or(DAMAGED_ROOT)?;
            let (fence, after) = take_bytes(after).ok_or(DAMAGED_ROOT)?;
            let in_order = match pages.last() {
                None => fence.is_empty(),
                Some((before, _)) => before.as_slice() < fence,
            };
            if !in_order || number >= next {
                return Err(DAMAGED_ROOT);
            }
            pages.push((fence.to_vec(), number));
            rest = after;
        }
        Ok(Root { next, pages })
    }
}

/// A page's keys: sorted, no two equal.
pub(crate) type Page = Vec<Vec<u8>>;

pub(crate) fn encode_page(keys: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(page_bytes(keys));
    keys.iter().for_each(|key| put_bytes(&mut out, key));
    out
}

pub(crate) fn decode_page(mut bytes: &[u8]) -> Result<Page, Damaged> {
    let mut keys: Page = Vec::new();
    while !bytes.is_empty() {
        let (key, rest) = take_bytes(bytes).ok_or(DAMAGED_PAGE)?;
        if keys.last().is_some_and(|last| last.as_slice() >= key) {
            return Err(DAMAGED_PAGE);
        }
        keys.push(key.to_vec());
        bytes = rest;
    }
    Ok(keys)
}

/// An entry's row value: the key (2-byte length) and the value.
pub(crate) fn encode_entry(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + key.len() + value.len());
    put_bytes(&mut out, key);
    out.extend_from_slice(value);
    out
}

/// The value of an entry row, checked to be the entry of `key`.
pub(crate) fn entry_value(mut row: Vec<u8>, key: &[u8]) -> Result<Vec<u8>, Damaged> {
    match take_bytes(&row) {
        Some((stored, _)) if stored == key => {
            row.drain(..2 + key.len());
            Ok(row)
        }
        _ => Err(Damaged("an omap entry")),
    }
}

fn page_bytes(keys: &[Vec<u8>]) -> usize {
    keys.iter().map(|key| 2 + key.len()).sum()
}

/// Cuts a page's keys into pieces of at most `PAGE_BYTES_MAX / 2` bytes each (or one key).
fn cut(keys: Page) -> Vec<Page> {
    let mut pieces = vec![Vec::new()];
    let mut bytes = 0;
    for key in keys {
        let piece = pieces.last_mut().expect("pieces starts with one");
        if !piece.is_empty() && bytes + 2 + key.len() > PAGE_BYTES_MAX / 2 {
            pieces.push(Vec::new());
            bytes = 0;
        }
        bytes += 2 + key.len();
        pieces.last_mut().expect("pieces starts with one").push(key);
    }
    pieces
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u16::try_from(bytes.len()).expect("omap keys are at most 4 KiB");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

fn take_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = bytes.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head), rest))
}

fn take_bytes(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*len));
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// One object's omap keys as a transaction reads and changes them: the root and pages it
/// needed, loaded through `load` (the row's opened value, None where absent).
#[derive(Default)]
pub(crate) struct Keys {
    root: Option<Root>,
    root_changed: bool,
    pages: BTreeMap<u64, Page>,
    changed: BTreeSet<u64>,
}

impl Keys {
    fn root<E: From<Damaged>>(
        &mut self,
        load: &mut impl FnMut(Row) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<&mut Root, E> {
        if self.root.is_none() {
            self.root = Some(match load(Row::Root)? {
                Some(bytes) => Root::decode(&bytes)?,
                None => Root::default(),
            });
        }
        Ok(self.root.as_mut().expect("loaded above"))
    }

    fn page<E: From<Damaged>>(
        &mut self,
        number: u64,
        load: &mut impl FnMut(Row) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<&mut Page, E> {
        match self.pages.entry(number) {
            std::collections::btree_map::Entry::Occupied(page) => Ok(page.into_mut()),
            std::collections::btree_map::Entry::Vacant(vacant) => {
                let bytes = load(Row::Page(number))?.ok_or(MISSING_PAGE)?;
                Ok(vacant.insert(decode_page(&bytes)?))
            }
        }
    }

    /// Adds `key` (nothing changes if it is there).
    pub(crate) fn insert<E: From<Damaged>>(
        &mut self,
        key: &[u8],
        load: &mut impl FnMut(Row) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<(), E> {
        let root = self.root(load)?;
        let created = root.pages.is_empty().then(|| {
            let number = root.next;
            root.next += 1;
            root.pages.push((Vec::new(), number));
            number
        });
        let number = root.pages[root.find(key)].1;
        if let Some(created) = created {
            self.root_changed = true;
            self.pages.insert(created, Vec::new());
        }
        let page = self.page(number, load)?;
        if let Err(at) = page.binary_search_by(|k| k.as_slice().cmp(key)) {
            page.insert(at, key.to_vec());
            self.changed.insert(number);
        }
        Ok(())
    }

    /// Removes `key` (nothing changes if it is not there).
    pub(crate) fn remove<E: From<Damaged>>(
        &mut self,
        key: &[u8],
        load: &mut impl FnMut(Row) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<(), E> {
        let root = self.root(load)?;
        if root.pages.is_empty() {
            return Ok(());
        }
        let number = root.pages[root.find(key)].1;
        let page = self.page(number, load)?;
        if let Ok(at) = page.binary_search_by(|k| k.as_slice().cmp(key)) {
            page.remove(at);
            self.changed.insert(number);
        }
        Ok(())
    }

    /// Forgets every key: the caller removes the object's rows.
    pub(crate) fn clear(&mut self) {
        *self = Keys {
            root: Some(Root::default()),
            ..Keys::default()
        };
    }

    /// The rows to write (with their plain values) and to remove (None), in that order of
    /// application: changed pages, cut where too large or dropped where empty, then the
    /// root if it changed.
    pub(crate) fn changes(self) -> Vec<(Row, Option<Vec<u8>>)> {
        let Keys {
            root,
            mut root_changed,
            mut pages,
            changed,
        } = self;
        let Some(mut root) = root else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for number in changed {
            let keys = pages.remove(&number).expect("a changed page was loaded");
            let at = root
                .pages
                .iter()
                .position(|(_, n)| *n == number)
                .expect("a changed page is in the root");
            if keys.is_empty() {
                root.pages.remove(at);
                root_changed = true;
                out.push((Row::Page(number), None));
            } else if page_bytes(&keys) <= PAGE_BYTES_MAX || keys.len() == 1 {
                out.push((Row::Page(number), Some(encode_page(&keys))));
            } else {
                for (i, piece) in cut(keys).into_iter().enumerate() {
                    let number = match i {
                        0 => number,
                        _ => {
                            let new = root.next;
                            root.next += 1;
                            root.pages.insert(at + i, (piece[0].clone(), new));
                            new
                        }
                    };
                    out.push((Row::Page(number), Some(encode_page(&piece))));
                }
                root_changed = true;
            }
        }
        if let Some((fence, _)) = root.pages.first_mut() {
            // Where the first page was dropped, the next one takes every key below it too.
            fence.clear();
        }
        if root_changed {
            let value = (!root.pages.is_empty()).then(|| root.encode());
            out.push((Row::Root, value));
        }
        out
    }
}

/// Up to `limit` keys after `after` (from the first without it), in order.
pub(crate) fn list<E: From<Damaged>>(
    after: Option<&[u8]>,
    limit: usize,
    mut load: impl FnMut(Row) -> Result<Option<Vec<u8>>, E>,
) -> Result<Vec<Vec<u8>>, E> {
    let Some(root) = load(Row::Root)? else {
        return Ok(Vec::new());
    };
    let root = Root::decode(&root)?;
    let first = after.map_or(0, |key| root.find(key));
    let mut out = Vec::new();
    for (_, number) in root.pages.iter().skip(first) {
        let bytes = load(Row::Page(*number))?.ok_or(MISSING_PAGE)?;
        for key in decode_page(&bytes)? {
            if out.len() >= limit {
                return Ok(out);
            }
            if after.is_none_or(|a| key.as_slice() > a) {
                out.push(key);
            }
        }
    }
    Ok(out)
}

/// The rows of an omap made at once from its keys in order (moving a format 3 omap).
pub(crate) fn build(keys: Page) -> Vec<(Row, Vec<u8>)> {
    if keys.is_empty() {
        return Vec::new();
    }
    let mut root = Root::default();
    let mut out = Vec::new();
    for piece in cut(keys) {
        let number = root.next;
        root.next += 1;
        let fence = match root.pages.is_empty() {
            true => Vec::new(),
            false => piece[0].clone(),
        };
        root.pages.push((fence, number));
        out.push((Row::Page(number), encode_page(&piece)));
    }
    out.push((Row::Root, root.encode()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The rows as a store would hold them, changed only through `changes`.
    #[derive(Default)]
    struct Rows(HashMap<Vec<u8>, Vec<u8>>);

    const ID: ObjectId = [7; 16];

    impl Rows {
        fn load(&self) -> impl FnMut(Row) -> Result<Option<Vec<u8>>, Damaged> + '_ {
            |row| Ok(self.0.get(&row.key(&ID)).cloned())
        }

        fn apply(&mut self, cleared: bool, changes: Vec<(Row, Option<Vec<u8>>)>) {
            if cleared {
                self.0.clear();
            }
            for (row, value) in changes {
                match value {
                    Some(value) => self.0.insert(row.key(&ID), value),
                    None => self.0.remove(&row.key(&ID)),
                };
            }
        }

        fn all(&self) -> Vec<Vec<u8>> {
            let mut out = Vec::new();
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = list(after.as_deref(), 7, self.load()).expect("list");
                match page.last() {
                    Some(last) => after = Some(last.clone()),
                    None => return out,
                }
                out.extend(page);
            }
        }
    }

    fn key(n: u32, len: usize) -> Vec<u8> {
        let mut key = format!("{n:08}").into_bytes();
        key.resize(len.max(8), b'x');
        key
    }

    #[derive(Clone, Debug)]
    enum Change {
        Insert(u32, usize),
        Remove(u32),
        Clear,
    }

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            8 => (0u32..400, 8usize..300).prop_map(|(n, len)| Change::Insert(n, len)),
            4 => (0u32..400).prop_map(Change::Remove),
            1 => Just(Change::Clear),
        ]
    }

    proptest! {
        /// Any run of transactions leaves exactly the keys a sorted set would hold, listed
        /// in order through any page size, with every page within its bound.
        #[test]
        fn keys_follow_a_sorted_set(
            transactions in proptest::collection::vec(proptest::collection::vec(change(), 1..40), 1..30)
        ) {
            let mut rows = Rows::default();
            let mut model: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
            for changes in transactions {
                let mut keys = Keys::default();
                let mut cleared = false;
                for change in changes {
                    match change {
                        Change::Insert(n, len) => {
                            let k = model.get(&n).cloned().unwrap_or_else(|| key(n, len));
                            keys.insert(&k, &mut rows.load()).expect("insert");
                            model.insert(n, k);
                        }
                        Change::Remove(n) => {
                            let k = model.remove(&n).unwrap_or_else(|| key(n, 8));
                            keys.remove(&k, &mut rows.load()).expect("remove");
                        }
                        Change::Clear => {
                            cleared = true;
                            keys.clear();
                            model.clear();
                        }
                    }
                }
                rows.apply(cleared, keys.changes());
                prop_assert_eq!(rows.all(), model.values().cloned().collect::<Vec<_>>());
                for (row, value) in &rows.0 {
                    if row[16] == 1 {
                        let page = decode_page(value).expect("a page");
                        prop_assert!(!page.is_empty());
                        prop_assert!(page.len() == 1 || page_bytes(&page) <= PAGE_BYTES_MAX);
                    }
                }
                prop_assert_eq!(rows.0.contains_key(&Row::Root.key(&ID)), !model.is_empty());
            }
        }
    }

    #[test]
    fn a_list_starts_after_a_key_that_is_gone() {
        let mut rows = Rows::default();
        let mut keys = Keys::default();
        for n in 0..1000 {
            keys.insert(&key(n, 40), &mut rows.load()).expect("insert");
        }
        rows.apply(false, keys.changes());
        let pages = rows.0.keys().filter(|row| row[16] == 1).count();
        assert!(pages > 5, "{pages} pages");
        let mut keys = Keys::default();
        keys.remove(&key(500, 40), &mut rows.load())
            .expect("remove");
        rows.apply(false, keys.changes());
        let listed = list(Some(&key(500, 40)), 2, rows.load()).expect("list");
        assert_eq!(listed, vec![key(501, 40), key(502, 40)]);
        let listed = list(Some(b"0000049".as_slice()), 1, rows.load()).expect("list");
        assert_eq!(listed, vec![key(490, 40)]);
    }

    #[test]
    fn a_built_omap_lists_and_changes_like_one_grown_by_inserts() {
        let all: Page = (0..2000).map(|n| key(n, 60)).collect();
        let mut rows = Rows::default();
        for (row, value) in build(all.clone()) {
            rows.0.insert(row.key(&ID), value);
        }
        assert_eq!(rows.all(), all);
        let mut keys = Keys::default();
        keys.remove(&key(0, 60), &mut rows.load()).expect("remove");
        keys.insert(&key(5000, 60), &mut rows.load())
            .expect("insert");
        rows.apply(false, keys.changes());
        assert_eq!(
            rows.all(),
            all[1..]
                .iter()
                .cloned()
                .chain([key(5000, 60)])
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn damaged_rows_are_refused() {
        let root = Root {
            next: 2,
            pages: vec![(Vec::new(), 0), (b"m".to_vec(), 1)],
        };
        assert_eq!(Root::decode(&root.encode()), Ok(root.clone()));
        let mut bytes = root.encode();
        bytes.pop();
        assert!(Root::decode(&bytes).is_err());
        let backwards = Root {
            next: 2,
            pages: vec![(Vec::new(), 0), (Vec::new(), 1)],
        };
        assert!(Root::decode(&backwards.encode()).is_err());
        let unnumbered = Root {
            next: 1,
            pages: vec![(Vec::new(), 0), (b"m".to_vec(), 1)],
        };
        assert!(Root::decode(&unnumbered.encode()).is_err());
        let unsorted = encode_page(&[b"b".to_vec(), b"a".to_vec()]);
        assert!(decode_page(&unsorted).is_err());
        let entry = encode_entry(b"key", b"value");
        assert_eq!(entry_value(entry.clone(), b"key"), Ok(b"value".to_vec()));
        assert!(entry_value(entry, b"other").is_err());
        let mut rows = Rows::default();
        rows.0.insert(Row::Root.key(&ID), root.encode());
        assert_eq!(list(None, 10, rows.load()), Err(MISSING_PAGE));
    }
}
