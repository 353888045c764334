//! Transactions: operations on one or more objects, applied atomically and durably by
//! `Store::apply`. Operations apply in the order they were added; a later operation sees
//! the effect of an earlier one on the same object. Any operation that creates data
//! creates the object if it does not exist; `remove` of a missing object does nothing.

use crate::device::{AlignedBuf, BLOCK_SIZE_BYTES};
use crate::seal::ChunkRecord;
use map::ObjectRef;

#[derive(Debug)]
pub(crate) enum Op {
    Touch {
        object: ObjectRef,
    },
    /// `data` holds the write at byte `offset_bytes % BLOCK_SIZE_BYTES` of its first block.
    Write {
        object: ObjectRef,
        offset_bytes: u64,
        len_bytes: u64,
        data: AlignedBuf,
    },
    /// `len_bytes` is what the caller gave; it must be whole chunks.
    WriteSealed {
        object: ObjectRef,
        first_chunk: u64,
        len_bytes: u64,
        data: AlignedBuf,
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
            | Op::OmapClear { object } => object,
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
        let blocks = (head + data.len()).div_ceil(BLOCK_SIZE_BYTES as usize);
        let mut buffer = AlignedBuf::for_overwrite(blocks);
        buffer[..head].fill(0);
        buffer[head..head + data.len()].copy_from_slice(data);
        buffer[head + data.len()..].fill(0);
        self.ops.push(Op::Write {
            object: object.clone(),
            offset_bytes,
            len_bytes: data.len() as u64,
            data: buffer,
        });
        self
    }

    /// Stores whole chunks sealed by a client (MISSION.md, "Encrypt once") as they are:
    /// `data` holds `chunks.len()` chunks of `BLOCK_SIZE_BYTES`, starting at chunk index
    /// `first_chunk`; `chunks[i]` is the seal record of chunk i. The object's size grows to
    /// the end of the last chunk; `truncate` may set it lower.
    pub fn write_sealed(
        &mut self,
        object: &ObjectRef,
        first_chunk: u64,
        data: &[u8],
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
        data: &[u8],
        chunks: Vec<ChunkRecord>,
        end_bytes: u64,
    ) -> &mut Self {
        let blocks = data.len().div_ceil(BLOCK_SIZE_BYTES as usize);
        let mut buffer = AlignedBuf::for_overwrite(blocks);
        buffer[..data.len()].copy_from_slice(data);
        buffer[data.len()..].fill(0);
        self.ops.push(Op::WriteSealed {
            object: object.clone(),
            first_chunk,
            len_bytes: data.len() as u64,
            data: buffer,
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
}
