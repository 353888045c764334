//! Transactions: operations on one or more objects, applied atomically and durably by
//! `Store::apply`. Operations apply in the order they were added; a later operation sees
//! the effect of an earlier one on the same object. Any operation that creates data
//! creates the object if it does not exist; `remove` of a missing object does nothing.

use crate::device::{AlignedBuf, Blocks, BLOCK_SIZE_BYTES};
use crate::seal::ChunkRecord;
use bytes::Bytes;
use map::ObjectRef;

#[derive(Debug)]
pub(crate) enum Op {
    Touch {
        object: ObjectRef,
    },
    /// `data` holds the write at byte `offset_bytes % BLOCK_SIZE_BYTES` of its first block;
    /// it is shared only when the write covers whole blocks.
    Write {
        object: ObjectRef,
        offset_bytes: u64,
        len_bytes: u64,
        data: Blocks,
    },
    /// `len_bytes` is what the caller gave; it must be whole chunks.
    WriteSealed {
        object: ObjectRef,
        first_chunk: u64,
        len_bytes: u64,
        data: Blocks,
        chunks: Vec<ChunkRecord>,
        /// The object grows to at least this size (inside the last chunk, or its end).
        end_bytes: u64,
    },
    Zero {
        object: ObjectRef,
        offset_bytes: u64,
        len_bytes: u64,
    },
    Truncate {
        object: ObjectRef,
        size_bytes: u64,
    },
    Remove {
        object: ObjectRef,
    },
    SetAttr {
        object: ObjectRef,
        name: String,
        value: Vec<u8>,
    },
    RemoveAttr {
        object: ObjectRef,
        name: String,
    },
    OmapSet {
        object: ObjectRef,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    OmapRemove {
        object: ObjectRef,
        key: Vec<u8>,
    },
    OmapClear {
        object: ObjectRef,
    },
    KeepUndo {
        object: ObjectRef,
        version: u64,
    },
    ContinueUndo {
        object: ObjectRef,
        version: u64,
    },
    Rollback {
        object: ObjectRef,
        version: u64,
    },
    DropUndo {
        object: ObjectRef,
        version: u64,
    },
}

impl Op {
    pub(crate) fn object(&self) -> &ObjectRef {
        match self {
            Op::Touch { object }
            | Op::Write { object, .. }
            | Op::WriteSealed { object, .. }
            | Op::Zero { object, .. }
            | Op::Truncate { object, .. }
            | Op::Remove { object }
            | Op::SetAttr { object, .. }
            | Op::RemoveAttr { object, .. }
            | Op::OmapSet { object, .. }
            | Op::OmapRemove { object, .. }
            | Op::OmapClear { object }
            | Op::KeepUndo { object, .. }
            | Op::ContinueUndo { object, .. }
            | Op::Rollback { object, .. }
            | Op::DropUndo { object, .. } => object,
        }
    }
}

#[derive(Debug, Default)]
pub struct Transaction {
    pub(crate) ops: Vec<Op>,
}

impl Transaction {
    pub fn new() -> Transaction {
        Transaction::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// How many operations it holds (the store takes at most `TRANSACTION_OPS_MAX`).
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether it may remove a range of keys (the omap rows of an object it removes or
    /// whose omap it clears, if there are any; a rollback may remove the object): if it
    /// does, its group is committed to the database at once, not kept waiting.
    pub(crate) fn removes_ranges(&self) -> bool {
        self.ops.iter().any(|op| {
            matches!(
                op,
                Op::Remove { .. } | Op::OmapClear { .. } | Op::Rollback { .. }
            )
        })
    }

    /// The bytes of data its writes carry.
    pub fn data_bytes(&self) -> u64 {
        self.ops
            .iter()
            .map(|op| match op {
                Op::Write { len_bytes, .. } | Op::WriteSealed { len_bytes, .. } => *len_bytes,
                _ => 0,
            })
            .sum()
    }

    /// Adds `other`'s ops after this one's, to be applied in the same commit.
    pub fn append(&mut self, other: Transaction) -> &mut Self {
        self.ops.extend(other.ops);
        self
    }

    /// Creates the object if it does not exist.
    pub fn touch(&mut self, object: &ObjectRef) -> &mut Self {
        self.ops.push(Op::Touch {
            object: object.clone(),
        });
        self
    }

    /// Writes `data` at `offset_bytes`, extending the object if needed. The data is copied
    /// once, into a block-aligned buffer that is later sealed in place and written.
    pub fn write(&mut self, object: &ObjectRef, offset_bytes: u64, data: &[u8]) -> &mut Self {
        let head = (offset_bytes % BLOCK_SIZE_BYTES) as usize;
        self.push_write(
            object,
            offset_bytes,
            data.len(),
            Blocks::Owned(AlignedBuf::copied(data, head)),
        )
    }

    /// [`Transaction::write`] of bytes the caller hands over. Whole blocks at a block offset,
    /// in memory that starts on a block boundary (as the messenger receives large segments),
    /// are not copied where the store has nothing to seal in place (mode `none`).
    pub fn write_bytes(&mut self, object: &ObjectRef, offset_bytes: u64, data: Bytes) -> &mut Self {
        if !offset_bytes.is_multiple_of(BLOCK_SIZE_BYTES) {
            return self.write(object, offset_bytes, &data);
        }
        let len = data.len();
        self.push_write(object, offset_bytes, len, Blocks::from_bytes(data))
    }

    fn push_write(
        &mut self,
        object: &ObjectRef,
        offset_bytes: u64,
        len: usize,
        data: Blocks,
    ) -> &mut Self {
        self.ops.push(Op::Write {
            object: object.clone(),
            offset_bytes,
            len_bytes: len as u64,
            data,
        });
        self
    }

    /// Stores whole chunks sealed by a client (MISSION.md, "Encrypt once") as they are:
    /// `data` holds `chunks.len()` chunks of `BLOCK_SIZE_BYTES`, starting at chunk index
    /// `first_chunk`; `chunks[i]` is the seal record of chunk i. The object's size grows to
    /// the end of the last chunk; `truncate` may set it lower. Aligned bytes are written
    /// from where they are (see [`Transaction::write_bytes`]).
    pub fn write_sealed(
        &mut self,
        object: &ObjectRef,
        first_chunk: u64,
        data: Bytes,
        chunks: Vec<ChunkRecord>,
    ) -> &mut Self {
        let end_bytes = (first_chunk + chunks.len() as u64) * BLOCK_SIZE_BYTES;
        self.write_sealed_ending(object, first_chunk, data, chunks, end_bytes)
    }

    /// [`Transaction::write_sealed`], growing the object only to `end_bytes`, which must lie
    /// in the last chunk written (the end of the client's bytes in it).
    pub fn write_sealed_ending(
        &mut self,
        object: &ObjectRef,
        first_chunk: u64,
        data: Bytes,
        chunks: Vec<ChunkRecord>,
        end_bytes: u64,
    ) -> &mut Self {
        self.ops.push(Op::WriteSealed {
            object: object.clone(),
            first_chunk,
            len_bytes: data.len() as u64,
            data: Blocks::from_bytes(data),
            chunks,
            end_bytes,
        });
        self
    }

    /// Makes `[offset, offset + len)` read as zeros, freeing the whole blocks inside it.
    /// Extends the object like a write of zeros would.
    pub fn zero(&mut self, object: &ObjectRef, offset_bytes: u64, len_bytes: u64) -> &mut Self {
        self.ops.push(Op::Zero {
            object: object.clone(),
            offset_bytes,
            len_bytes,
        });
        self
    }

    /// Sets the size: shrinking frees the blocks past it; growing adds a hole.
    pub fn truncate(&mut self, object: &ObjectRef, size_bytes: u64) -> &mut Self {
        self.ops.push(Op::Truncate {
            object: object.clone(),
            size_bytes,
        });
        self
    }

    /// Removes the object with its data, attributes and omap.
    pub fn remove(&mut self, object: &ObjectRef) -> &mut Self {
        self.ops.push(Op::Remove {
            object: object.clone(),
        });
        self
    }

    pub fn set_attr(&mut self, object: &ObjectRef, name: &str, value: &[u8]) -> &mut Self {
        self.ops.push(Op::SetAttr {
            object: object.clone(),
            name: name.to_string(),
            value: value.to_vec(),
        });
        self
    }

    pub fn remove_attr(&mut self, object: &ObjectRef, name: &str) -> &mut Self {
        self.ops.push(Op::RemoveAttr {
            object: object.clone(),
            name: name.to_string(),
        });
        self
    }

    pub fn omap_set(&mut self, object: &ObjectRef, key: &[u8], value: &[u8]) -> &mut Self {
        self.ops.push(Op::OmapSet {
            object: object.clone(),
            key: key.to_vec(),
            value: value.to_vec(),
        });
        self
    }

    pub fn omap_remove(&mut self, object: &ObjectRef, key: &[u8]) -> &mut Self {
        self.ops.push(Op::OmapRemove {
            object: object.clone(),
            key: key.to_vec(),
        });
        self
    }

    pub fn omap_clear(&mut self, object: &ObjectRef) -> &mut Self {
        self.ops.push(Op::OmapClear {
            object: object.clone(),
        });
        self
    }

    /// Keeps, under `version`, the way back from this transaction's changes to `object`
    /// (its record before, and the extents it replaced, whose blocks stay taken): see
    /// undo.rs. `version` must be above every record the object has (as this transaction's
    /// earlier operations leave them); omap operations on the object in the same
    /// transaction, or a remove of an object that has omap entries, are refused.
    pub fn keep_undo(&mut self, object: &ObjectRef, version: u64) -> &mut Self {
        self.ops.push(Op::KeepUndo {
            object: object.clone(),
            version,
        });
        self
    }

    /// Makes this transaction's changes to `object` part of its newest undo record,
    /// `version`, kept by an earlier transaction: the record stays (a change without a
    /// record of its own drops them all otherwise), and rolling it back takes these changes
    /// back too. Only a record kept with a remove of the object can be continued (it owns
    /// every block it would put back, and covers them all): a write of one object in
    /// several transactions, such as a recovery's pieces, is taken back as one. Refused
    /// with omap changes, and with a record kept, dropped or rolled back in the same
    /// transaction.
    pub fn continue_undo(&mut self, object: &ObjectRef, version: u64) -> &mut Self {
        self.ops.push(Op::ContinueUndo {
            object: object.clone(),
            version,
        });
        self
    }

    /// Takes back the transaction that kept the object's record `version`, which must be
    /// its newest: the object's record and the extents it replaced come back, and the blocks
    /// it wrote are freed. It comes before any other change to the object in this
    /// transaction (drops, and rollbacks of newer records, may precede it).
    pub fn rollback(&mut self, object: &ObjectRef, version: u64) -> &mut Self {
        self.ops.push(Op::Rollback {
            object: object.clone(),
            version,
        });
        self
    }

    /// Drops the object's records at or below `version`, freeing the blocks they kept.
    pub fn drop_undo(&mut self, object: &ObjectRef, version: u64) -> &mut Self {
        self.ops.push(Op::DropUndo {
            object: object.clone(),
            version,
        });
        self
    }
}
