//! Looking at what is stored, one memory at a time: listing newest first, one memory with its
//! passages, forgetting a memory or a document. The web view and `mneme forget` use these.

use serde::{Deserialize, Serialize};

use crate::types::StoredMemory;

/// Which memories [`crate::MemoryBackend::browse`] lists, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrowseQuery {
    /// One bank, or every bank where the backend can list them all.
    pub bank: Option<String>,
    /// Only memories carrying every one of these tags (empty = no filter).
    pub tags: Vec<String>,
    /// Where the page starts: the `next` of the page before.
    pub cursor: Option<String>,
    /// At most this many.
    pub limit: usize,
}

/// One page of [`crate::MemoryBackend::browse`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrowsePage {
    /// Newest first.
    pub memories: Vec<StoredMemory>,
    /// Where the next (older) page starts; `None` at the end.
    pub next: Option<String>,
}

/// A bank and how many memories it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BankCount {
    /// The bank id.
    pub bank: String,
    /// Stored memories, where known.
    pub memories: Option<u64>,
}

/// One memory and what recall ranks of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryDetail {
    /// The memory as stored.
    pub memory: StoredMemory,
    /// Its passages in order (a short memory is one; a long one is split). Empty where the
    /// backend does not split memories itself.
    pub passages: Vec<String>,
    /// How many memories share its document (itself included); 1 without a document.
    pub document_memories: u64,
}

/// What [`crate::MemoryBackend::forget`] deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forget {
    /// One memory, by id (and bank, where ids are per bank).
    Memory {
        /// Its id.
        id: String,
        /// Its bank, where the backend needs it.
        bank: Option<String>,
    },
    /// Every memory of a document in a bank.
    Document {
        /// The document id.
        id: String,
        /// Its bank.
        bank: String,
    },
}

/// What a forget deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten {
    /// Memories deleted, where known.
    pub deleted: Option<u64>,
    /// For a person.
    pub message: String,
}
