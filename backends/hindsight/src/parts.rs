//! How one delivery is cut into the retain requests Hindsight can take safely.
//!
//! Hindsight runs each asynchronous retain as queued work. Its workers take the retains of one
//! document strictly in the order they were submitted, but only for a retain that names exactly
//! one document; one that names several is claimable at once and races the others (measured on
//! the 1.1.0 peer: a replace in a two-document retain, sent before two appends to the same
//! document, ran beside them and wiped them). And an asynchronous retain may not name a
//! document twice. The synchronous form folds such items itself, but a synchronous retain
//! carries no operation id: resent after a timeout whose reply was lost, its appends and its
//! items without a document are stored twice, and one slower than the timeout is cancelled on
//! every attempt.
//!
//! So every part is asynchronous and carries its own stable operation id, but one:
//! - the items without a document, together, each named as a document of its own by its item
//!   id (a retain naming no document puts all its items in one generated document, which
//!   Hindsight 1.1 deletes whole: forgetting one memory would take the rest of its batch);
//! - then each item that names a document, alone, in the batch's order. An item of a document
//!   an earlier item of the batch already holds is sent as an append: the document is what the
//!   batch's items of it add up to, as the synchronous form stored it;
//! - but a document the batch replaces and names more than once goes in one synchronous part,
//!   its items in order, where its first item would go: an append gives the whole document its
//!   own tags and metadata (the items of one request lost theirs to the last one's: another
//!   project's tag, review59 #1), and each append took the server's worker half a second
//!   (a 300-item document held its bank's queue for minutes, review59 #8). The server folds
//!   the items of a synchronous retain itself, each keeping its own, as its own refusal of a
//!   document named twice advises; resent, it replaces the document again with the same items.

use mneme_core::MemoryItem;

use crate::wire::{retain_timestamp, RetainItem};

/// One retain request of a batch: its items, and the operation id it is sent under.
pub struct Part<'a> {
    /// What it sends.
    pub items: Vec<RetainItem<'a>>,
    /// The ids of the batch's items it sends.
    pub item_ids: Vec<String>,
    /// Named by the batch and by the items it sends (each with its mode), not by its place in the
    /// batch: items leave a batch between its attempts (a dead letter a newer version of its
    /// document superseded, a row set aside), and a part that took the place of another under
    /// that one's id would be answered as the other was, and never stored.
    pub operation_id: String,
    /// Sent synchronously (a document replaced by several items), without its operation id.
    pub synchronous: bool,
}

/// The parts of a batch, in the order they must be sent; never empty for a non-empty batch.
pub fn parts<'a>(batch_id: &str, items: &'a [MemoryItem]) -> Vec<Part<'a>> {
    cut(batch_id, items, Folding::Fold)
}

/// The parts of a batch without a synchronous one: each document's items alone, the later ones
/// appended (for a document whose synchronous part the server could not store in time).
pub fn item_by_item<'a>(batch_id: &str, items: &'a [MemoryItem]) -> Vec<Part<'a>> {
    cut(batch_id, items, Folding::ItemByItem)
}

#[derive(Clone, Copy, PartialEq)]
enum Folding {
    Fold,
    ItemByItem,
}

fn cut<'a>(batch_id: &str, items: &'a [MemoryItem], folding: Folding) -> Vec<Part<'a>> {
    let part = |sent: Vec<(&'a MemoryItem, bool)>| {
        let key: Vec<String> =
            sent.iter().map(|(i, append)| if *append { format!("+{}", i.id) } else { i.id.clone() }).collect();
        Part {
            operation_id: crate::operation_id(&format!("{batch_id}/{}", key.join(","))),
            item_ids: sent.iter().map(|(i, _)| i.id.clone()).collect(),
            items: sent.into_iter().map(|(i, append)| wire(i, append)).collect(),
            synchronous: false,
        }
    };
    let mut out = Vec::new();
    let loose: Vec<(&MemoryItem, bool)> =
        items.iter().filter(|i| i.document_id.is_none()).map(|i| (i, false)).collect();
    if !loose.is_empty() {
        let mut sent = part(loose);
        let ids = items.iter().filter(|i| i.document_id.is_none()).map(|i| i.id.as_str());
        for (item, id) in sent.items.iter_mut().zip(ids) {
            item.document_id = Some(id);
            item.metadata.own_document = true;
        }
        out.push(sent);
    }
    let mut named = std::collections::HashMap::new();
    for document in items.iter().filter_map(|i| i.document_id.as_deref()) {
        *named.entry(document).or_insert(0usize) += 1;
    }
    let mut seen = std::collections::HashSet::new();
    for item in items {
        let Some(document) = item.document_id.as_deref() else { continue };
        let first = seen.insert(document);
        // Named more than once, and its first item replaces it: the document's items go together,
        // synchronously, where the first would go (see the module's doc).
        let folded = folding == Folding::Fold && named[document] > 1 && replaced_first(items, document) && {
            let of_it: Vec<&MemoryItem> = items.iter().filter(|i| i.document_id.as_deref() == Some(document)).collect();
            !alike(&of_it) || of_it.iter().map(|i| i.content.len()).sum::<usize>() <= FOLD_MOST_BYTES
        };
        match (folded, first) {
            (true, true) => {
                let all = items.iter().filter(|i| i.document_id.as_deref() == Some(document)).map(|i| (i, false));
                out.push(Part { synchronous: true, ..part(all.collect()) });
            }
            (true, false) => {} // sent with its first
            (false, _) => out.push(part(vec![(item, item.append || !first)])),
        }
    }
    out
}

/// A document whose items all carry the same tags and metadata is folded only up to this much
/// text: past it, item by item is as right, and one request of more (1.1 MB) was refused by a
/// proxy's body limit where its items went through (review61 #7).
pub const FOLD_MOST_BYTES: usize = 256 * 1024;

/// Whether `items` all carry the same tags and metadata (appended one by one, nothing of any is
/// lost: an append gives the whole document its own).
pub fn alike<I: std::borrow::Borrow<MemoryItem>>(items: &[I]) -> bool {
    items
        .windows(2)
        .all(|w| w[0].borrow().tags == w[1].borrow().tags && w[0].borrow().metadata == w[1].borrow().metadata)
}

/// [`alike`] for items as they are sent.
pub fn alike_wire(items: &[RetainItem<'_>]) -> bool {
    items.windows(2).all(|w| w[0].tags == w[1].tags && w[0].metadata == w[1].metadata)
}

/// Whether the first item of `document` in `items` replaces it rather than appending to it.
fn replaced_first(items: &[MemoryItem], document: &str) -> bool {
    items.iter().find(|i| i.document_id.as_deref() == Some(document)).is_some_and(|i| !i.append)
}

/// One request of an import chunk.
pub struct ImportPart<'a> {
    /// What it sends.
    pub items: Vec<RetainItem<'a>>,
    /// One document's items folded into a synchronous retain (its document deleted first).
    pub synchronous: bool,
}

/// An import chunk's parts (every item names its document, and no other chunk of the import
/// names it): the items of documents the chunk names once, together; then each document it names
/// more than once, as a delivery sends one (see `parts`): its items folded into one synchronous
/// retain when they carry tags or metadata of their own, or are small, and otherwise alone and in
/// order, the first replacing the document and the rest appended to it (sent synchronously, such a
/// big chunk slower than the timeout would be cancelled by the server on every attempt).
pub fn import_parts(items: Vec<RetainItem<'_>>) -> Vec<ImportPart<'_>> {
    let mut count = std::collections::HashMap::new();
    for i in &items {
        *count.entry(i.document_id).or_insert(0usize) += 1;
    }
    let (once, shared): (Vec<_>, Vec<_>) = items.into_iter().partition(|i| count[&i.document_id] == 1);
    let mut out = Vec::new();
    if !once.is_empty() {
        out.push(ImportPart { items: once, synchronous: false });
    }
    // The shared documents, each whole, in the order they first come.
    let mut documents: Vec<Vec<RetainItem<'_>>> = Vec::new();
    for item in shared {
        match documents.iter_mut().find(|d| d[0].document_id == item.document_id) {
            Some(d) => d.push(item),
            None => documents.push(vec![item]),
        }
    }
    for mut document in documents {
        let alike = alike_wire(&document);
        let size: usize = document.iter().map(|i| i.content.len()).sum();
        if !alike || size <= FOLD_MOST_BYTES {
            out.push(ImportPart { items: document, synchronous: true });
            continue;
        }
        for item in document.iter_mut().skip(1) {
            item.update_mode = Some("append");
        }
        out.extend(document.into_iter().map(|i| ImportPart { items: vec![i], synchronous: false }));
    }
    out
}

/// The operation id of part `n` of import chunk `batch_id` (whose parts are fixed by its
/// content): the first part's is the chunk's own.
pub fn part_operation_id(batch_id: &str, n: usize) -> String {
    if n == 0 {
        crate::operation_id(batch_id)
    } else {
        crate::operation_id(&format!("{batch_id}/part-{n}"))
    }
}

fn wire(i: &MemoryItem, append: bool) -> RetainItem<'_> {
    RetainItem {
        content: &i.content,
        context: i.context.as_deref(),
        timestamp: retain_timestamp(&i.timestamp),
        metadata: crate::wire::SentMetadata::own(&i.metadata),
        tags: &i.tags,
        document_id: i.document_id.as_deref(),
        update_mode: append.then_some("append"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(content: &str, document: Option<&str>, append: bool) -> MemoryItem {
        MemoryItem {
            document_id: document.map(str::to_owned),
            append,
            ..MemoryItem::new(content, content, "2026-01-02T03:04:05.000Z")
        }
    }

    /// Each part's contents, an append marked `+`.
    fn shape(parts: &[Vec<RetainItem<'_>>]) -> Vec<Vec<String>> {
        let shown =
            |i: &RetainItem<'_>| format!("{}{}", if i.update_mode == Some("append") { "+" } else { "" }, i.content);
        parts.iter().map(|p| p.iter().map(shown).collect()).collect()
    }

    #[test]
    fn loose_items_go_together_and_each_document_alone_in_order() {
        let items = [
            item("x1", Some("x"), false),
            item("a", None, false),
            item("y1", Some("y"), false),
            item("x2", Some("x"), false),
            item("b", None, false),
            item("x3", Some("x"), true),
        ];
        let all = parts("b", &items);
        let synchronous: Vec<bool> = all.iter().map(|p| p.synchronous).collect();
        let sent: Vec<Vec<RetainItem<'_>>> = all.into_iter().map(|p| p.items).collect();
        // x, replaced and named three times: its items together, synchronously, where x1 was
        // (an append would give the whole document its own tags and metadata).
        assert_eq!(shape(&sent), [&["a", "b"][..], &["x1", "x2", "x3"], &["y1"]]);
        assert_eq!(synchronous, [false, true, false]);
        // Each loose item is a document of its own, named by its id (deleting one's document
        // deletes it alone).
        let loose: Vec<&str> = sent[0].iter().map(|i| i.document_id.unwrap()).collect();
        assert_eq!(loose, [items[1].id.as_str(), items[4].id.as_str()]);
        for p in &sent[1..] {
            let documents: std::collections::HashSet<&str> = p.iter().filter_map(|i| i.document_id).collect();
            assert!(documents.len() <= 1, "a part of a document's items names that document alone");
        }
        // A document the batch appends to first: item by item, as appends.
        let appended = [item("z1", Some("z"), true), item("z2", Some("z"), false), item("w", Some("w"), false)];
        let all = parts("b", &appended);
        assert!(all.iter().all(|p| !p.synchronous));
        let sent: Vec<Vec<RetainItem<'_>>> = all.into_iter().map(|p| p.items).collect();
        assert_eq!(shape(&sent), [&["+z1"][..], &["+z2"], &["w"]]);
    }

    /// A document whose items carry the same tags and metadata is folded only up to
    /// `FOLD_MOST_BYTES` (past it, item by item is as right, and a proxy refused one request of
    /// it all); one whose items carry their own always is (review61 #7).
    #[test]
    fn a_big_document_is_folded_only_when_its_items_differ() {
        let big = "x".repeat(FOLD_MOST_BYTES / 2 + 1);
        let alike = [item(&big, Some("d"), false), item(&big, Some("d"), false)];
        assert!(parts("b", &alike).iter().all(|p| !p.synchronous));
        let mut differ = alike.clone();
        differ[1].tags = vec!["project:beta".into()];
        let cut = parts("b", &differ);
        assert_eq!((cut.len(), cut[0].synchronous), (1, true));
    }

    #[test]
    fn a_part_is_named_by_its_items_not_its_place() {
        let (d1, e) = (item("d1", Some("d"), false), item("e", Some("e"), false));
        let before = parts("batch", std::slice::from_ref(&d1)).remove(0).operation_id;
        let both = [d1.clone(), e.clone()];
        let first = parts("batch", &both);
        assert_eq!(first[0].operation_id, before, "stable across resends");
        // d1 left the batch (superseded): e, first now, is not answered as d1 was.
        let after = parts("batch", std::slice::from_ref(&e));
        assert_eq!(after[0].operation_id, first[1].operation_id);
        assert_ne!(after[0].operation_id, first[0].operation_id);
        // The same item as an append is another request.
        let e_appended = [item("e", Some("e"), true)];
        let appended = parts("batch", &e_appended);
        assert_ne!(appended[0].operation_id, after[0].operation_id);
        assert_ne!(parts("other", std::slice::from_ref(&e))[0].operation_id, after[0].operation_id);
    }

    #[test]
    fn an_import_chunks_parts_have_ids_of_their_own() {
        assert_eq!(parts("b", &[item("a", None, false), item("b", None, false)]).len(), 1);
        assert_eq!(
            part_operation_id("0192f4a1b2c3d4e5f60718293a4b5c6d", 0),
            crate::operation_id("0192f4a1b2c3d4e5f60718293a4b5c6d")
        );
        let ids: std::collections::HashSet<String> =
            (0..20).map(|n| part_operation_id("0192f4a1b2c3d4e5f60718293a4b5c6d", n)).collect();
        assert_eq!(ids.len(), 20, "every part its own id");
        assert_eq!(part_operation_id("b", 3), part_operation_id("b", 3), "stable across resends");
    }

    #[test]
    fn an_import_chunk_sends_its_single_documents_together_and_a_shared_one_item_by_item() {
        let stored = [
            item("a", Some("a"), false),
            item("d1", Some("d"), false),
            item("b", Some("b"), false),
            item("d2", Some("d"), false),
            item("d3", Some("d"), false),
        ];
        let parts = import_parts(stored.iter().map(|i| wire(i, false)).collect());
        let synchronous: Vec<bool> = parts.iter().map(|p| p.synchronous).collect();
        let got = shape(&parts.into_iter().map(|p| p.items).collect::<Vec<_>>());
        // d, small: folded, as a delivery's (review61 #6).
        assert_eq!(got, [&["a", "b"][..], &["d1", "d2", "d3"]]);
        assert_eq!(synchronous, [false, true]);
        // Big and alike: item by item, the first replacing, the rest appended.
        let big = "x".repeat(FOLD_MOST_BYTES / 2 + 1);
        let stored = [item(&big, Some("d"), false), item(&big, Some("d"), false)];
        let parts = import_parts(stored.iter().map(|i| wire(i, false)).collect());
        assert!(parts.iter().all(|p| !p.synchronous && p.items.len() == 1), "two requests");
        assert_eq!(parts[1].items[0].update_mode, Some("append"));
        assert!(import_parts(Vec::new()).is_empty());
    }

    #[test]
    fn an_append_stays_an_append_and_an_empty_batch_has_no_parts() {
        assert!(parts("b", &[]).is_empty());
        let appended = [item("x1", Some("x"), true)];
        let sent: Vec<Vec<RetainItem<'_>>> = parts("b", &appended).into_iter().map(|p| p.items).collect();
        assert_eq!(shape(&sent), [["+x1"]]);
    }
}
