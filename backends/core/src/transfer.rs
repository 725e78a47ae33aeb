//! Moving memories between stores: how an import is cut into requests.

use std::borrow::Borrow;
use std::collections::hash_map::{Entry, HashMap};

use crate::StoredMemory;

/// How large a chunk of [`chunks_of_whole_documents`] may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLimit {
    /// Memories in a chunk.
    pub items: usize,
    /// The chunk's memories as JSON, in bytes (a request body's limit), when it has one.
    pub bytes: Option<usize>,
}

impl ChunkLimit {
    /// At most `items` memories a chunk, whatever their size.
    pub fn items(items: usize) -> Self {
        ChunkLimit { items, bytes: None }
    }
}

/// A memory's size as a chunk's JSON holds it (its comma included).
/// The metadata key the Hindsight backend marks a memory of no document with when it imports
/// it as a document of its own (the document's id): read back, each fact the server made of it
/// carries the mark and no document.
pub const LOOSE_MEMORY_KEY: &str = "mneme_loose_memory";

/// The metadata key the Hindsight backend marks an item of no document with when it retains it
/// as a document of its own (named by the item's id, so that forgetting it does not delete its
/// batch): a mneme serving Hindsight's API stores such an item as a fact (`world`), not as a
/// transcript (review111 #3: behind one, every tool retain was an `experience`). Taken out of
/// the metadata where it is read; the memory keeps its document (it is forgotten by it).
pub const OWN_DOCUMENT_KEY: &str = "mneme_own_document";

/// The metadata key the Hindsight backend keeps a memory's type in when it imports it: the
/// server types what it stores itself (a chunk is a `world` fact), so a transcript (`experience`)
/// copied there and back came back a `world` fact, and a `recall.types` that kept transcripts
/// out let it in. Read back, the key gives the type and is taken out of the metadata.
pub const TYPE_KEY: &str = "mneme_type";

/// The document a memory travels with: its own, or the one its loose-memory mark names (the
/// facts a server made of one imported memory go together, as a document's memories do: sent
/// in two requests, the second replaced the first).
pub fn document_of(m: &StoredMemory) -> Option<&str> {
    m.document_id.as_deref().or_else(|| m.metadata.get(LOOSE_MEMORY_KEY).map(String::as_str))
}

pub fn json_size(m: &StoredMemory) -> usize {
    serde_json::to_vec(m).map_or(0, |v| v.len()) + 1
}

/// The memories in chunks within `limit`, a document's memories always in the same chunk (a
/// backend may store a document as what one request holds of it, replacing what it had), in
/// their order otherwise. A document (or a memory) larger than the limit is a chunk of its own.
pub fn chunks_of_whole_documents<M: Borrow<StoredMemory>>(
    memories: impl IntoIterator<Item = M>,
    limit: ChunkLimit,
) -> Vec<Vec<M>> {
    sized_chunks_of_whole_documents(memories, limit).into_iter().map(|c| c.memories).collect()
}

/// A chunk of [`sized_chunks_of_whole_documents`].
#[derive(Debug)]
pub struct SizedChunk<M> {
    /// Its memories.
    pub memories: Vec<M>,
    /// Their size as JSON ([`json_size`]); 0 when the limit has no size in bytes.
    pub bytes: usize,
}

/// [`chunks_of_whole_documents`], each chunk with its size: one over `limit.bytes` is a single
/// memory or document that cannot fit.
pub fn sized_chunks_of_whole_documents<M: Borrow<StoredMemory>>(
    memories: impl IntoIterator<Item = M>,
    limit: ChunkLimit,
) -> Vec<SizedChunk<M>> {
    // Units: a memory alone, or every memory of one (bank, document), at its first appearance.
    let mut units: Vec<SizedChunk<M>> = Vec::new();
    let mut document_unit: HashMap<(String, String), usize> = HashMap::new();
    for m in memories {
        let bytes = if limit.bytes.is_some() { json_size(m.borrow()) } else { 0 };
        let key = document_of(m.borrow()).map(|doc| (m.borrow().bank.clone(), doc.to_owned()));
        match key.map(|k| document_unit.entry(k)) {
            Some(Entry::Occupied(e)) => {
                let unit = &mut units[*e.get()];
                unit.memories.push(m);
                unit.bytes += bytes;
            }
            Some(Entry::Vacant(e)) => {
                e.insert(units.len());
                units.push(SizedChunk { memories: vec![m], bytes });
            }
            None => units.push(SizedChunk { memories: vec![m], bytes }),
        }
    }
    let mut chunks: Vec<SizedChunk<M>> = Vec::new();
    for unit in units {
        match chunks.last_mut() {
            Some(chunk)
                if chunk.memories.len() + unit.memories.len() <= limit.items
                    && limit.bytes.is_none_or(|most| chunk.bytes + unit.bytes <= most) =>
            {
                chunk.memories.extend(unit.memories);
                chunk.bytes += unit.bytes;
            }
            _ => chunks.push(unit),
        }
    }
    chunks
}

/// Puts each document's memories in the order they were stored, oldest first: Hindsight lists
/// a bank newest first, so a document read from it came back with its parts the other way
/// round (parts 3, 2, 1, 0 in the local store, and sent on to Hindsight again, a document whose
/// text ran backwards). For a list read newest first. Each run of one document's memories is reversed, then ordered by date
/// (a tie keeps that order).
pub fn oldest_first(memories: &mut [StoredMemory]) {
    let mut start = 0;
    while start < memories.len() {
        let key = (memories[start].bank.clone(), document_of(&memories[start]).map(str::to_owned));
        let len =
            memories[start..].iter().take_while(|m| m.bank == key.0 && document_of(m) == key.1.as_deref()).count();
        let run = &mut memories[start..start + len];
        if key.1.is_some() {
            run.reverse();
            run.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        }
        start += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(id: &str, doc: Option<&str>) -> StoredMemory {
        serde_json::from_value(serde_json::json!({"id": id, "bank": "b", "content": id, "document_id": doc,
            "created_at": "2026-01-01T00:00:00Z"}))
        .unwrap()
    }

    #[test]
    fn a_document_is_never_split_across_chunks() {
        let file = vec![
            memory("a", None),
            memory("d1", Some("doc")),
            memory("b", None),
            memory("d2", Some("doc")),
            memory("c", None),
            memory("d3", Some("doc")),
        ];
        let ids = |chunks: Vec<Vec<&StoredMemory>>| -> Vec<Vec<String>> {
            chunks.into_iter().map(|c| c.into_iter().map(|m| m.id.clone()).collect()).collect()
        };
        let items = ChunkLimit::items;
        assert_eq!(
            ids(chunks_of_whole_documents(&file, items(2))),
            [vec!["a"], vec!["d1", "d2", "d3"], vec!["b", "c"]]
        );
        assert_eq!(ids(chunks_of_whole_documents(&file, items(500))), [vec!["a", "d1", "d2", "d3", "b", "c"]]);
        let owned = chunks_of_whole_documents(file.clone(), items(3));
        assert_eq!(owned.iter().map(Vec::len).collect::<Vec<_>>(), [1, 3, 2]);
    }

    /// The facts a server made of one imported memory of no document carry its mark: they go
    /// together, as a document's memories do.
    #[test]
    fn memories_of_one_loose_mark_go_together() {
        let marked = |id: &str, mark: &str| {
            let mut m = memory(id, None);
            m.metadata.insert(LOOSE_MEMORY_KEY.to_owned(), mark.to_owned());
            m
        };
        let file = vec![marked("f1", "L"), memory("a", None), marked("f2", "L"), memory("b", None)];
        let ids: Vec<Vec<String>> = chunks_of_whole_documents(&file, ChunkLimit::items(2))
            .into_iter()
            .map(|c| c.into_iter().map(|m| m.id.clone()).collect())
            .collect();
        assert_eq!(ids, [vec!["f1", "f2"], vec!["a", "b"]]);
        assert_eq!(document_of(&file[0]), Some("L"));
        assert_eq!(document_of(&file[1]), None);
    }

    #[test]
    fn chunks_hold_to_a_size_in_bytes_too() {
        let file = vec![
            memory("a", None),
            memory("b", None),
            memory("c", None),
            memory("d", Some("doc")),
            memory("e", Some("doc")),
        ];
        let one = json_size(&file[0]);
        let limit = ChunkLimit { items: 500, bytes: Some(2 * one + 1) };
        let sizes: Vec<usize> = chunks_of_whole_documents(&file, limit).iter().map(Vec::len).collect();
        // Two memories fit; a document of two (with a longer document id each) is a chunk of its own.
        assert_eq!(sizes, [2, 1, 2]);
    }
}
