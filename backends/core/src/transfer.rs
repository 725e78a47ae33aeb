//! Moving memories between stores: how an import is cut into requests.

use std::borrow::Borrow;
use std::collections::hash_map::{Entry, HashMap};

use crate::StoredMemory;

/// The memories in chunks of about `size`, a document's memories always in the same chunk (a
/// backend may store a document as what one request holds of it, replacing what it had), in
/// their order otherwise. A document larger than `size` is a chunk of its own.
pub fn chunks_of_whole_documents<M: Borrow<StoredMemory>>(
    memories: impl IntoIterator<Item = M>,
    size: usize,
) -> Vec<Vec<M>> {
    // Units: a memory alone, or every memory of one (bank, document), at its first appearance.
    let mut units: Vec<Vec<M>> = Vec::new();
    let mut document_unit: HashMap<(String, String), usize> = HashMap::new();
    for m in memories {
        let key = m.borrow().document_id.clone().map(|doc| (m.borrow().bank.clone(), doc));
        match key.map(|k| document_unit.entry(k)) {
            Some(Entry::Occupied(e)) => units[*e.get()].push(m),
            Some(Entry::Vacant(e)) => {
                e.insert(units.len());
                units.push(vec![m]);
            }
            None => units.push(vec![m]),
        }
    }
    let mut chunks: Vec<Vec<M>> = Vec::new();
    for unit in units {
        match chunks.last_mut() {
            Some(chunk) if chunk.len() + unit.len() <= size => chunk.extend(unit),
            _ => chunks.push(unit),
        }
    }
    chunks
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
        assert_eq!(ids(chunks_of_whole_documents(&file, 2)), [vec!["a"], vec!["d1", "d2", "d3"], vec!["b", "c"]]);
        assert_eq!(ids(chunks_of_whole_documents(&file, 500)), [vec!["a", "d1", "d2", "d3", "b", "c"]]);
        let owned = chunks_of_whole_documents(file.clone(), 3);
        assert_eq!(owned.iter().map(Vec::len).collect::<Vec<_>>(), [1, 3, 2]);
    }
}
