//! The newest version of each document a migration's target holds: a copy never puts an older
//! version of a document over a newer one. After a live switch, a client goes on writing its
//! documents to the new store (a `/hindsight` client's plan, replaced there); the old store's
//! version of them, copied over, replaced the newer one, and `migrate` said it was done.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use mneme_core::transfer::document_of;
use mneme_core::{BackendError, MemoryBackend, StoredMemory};

/// Memories read per page when a target bank is read.
const PAGE: usize = 1000;

/// When each memory of each document of the target's banks read so far was written. A bank is
/// read whole the first time a copy meets it.
#[derive(Default)]
pub(super) struct TargetVersions {
    banks: HashMap<String, HashMap<String, Vec<(String, Written)>>>,
    /// The documents left out so far, each counted once however many pages it spans.
    left_out: HashSet<(String, String)>,
}

/// A date as a memory gives it: parsed when it can be, else as written (RFC 3339 in UTC, as
/// both stores give it, orders as text too).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Written {
    At(SystemTime),
    Text(String),
}

impl Written {
    fn of(m: &StoredMemory) -> Written {
        match mneme_core::time::parse_rfc3339(&m.created_at) {
            Some(at) => Written::At(at),
            None => Written::Text(m.created_at.clone()),
        }
    }
}

impl TargetVersions {
    /// Takes out of `memories` the documents the target holds a newer version of: its newest
    /// memory dated later than the source's newest, and none of `copied` (the ids this migration
    /// read, in earlier runs too) nor of `memories` among its memories. Returns how many documents
    /// that was (not counted before), and how many memories.
    ///
    /// A document the target holds some of those ids of is this migration's copy: Hindsight lists
    /// newest first, so a document across a cut, or across two pages of a run repeated after a
    /// copy was done, had its newest memories there (and they took the older rest for a version
    /// of their own); so after a client appended to it between two runs.
    pub(super) async fn keep_newer(
        &mut self,
        target: &dyn MemoryBackend,
        memories: &mut Vec<StoredMemory>,
        copied: &HashSet<String>,
    ) -> Result<(u64, u64), BackendError> {
        let source = newest_of_each_document(memories);
        let mut older: HashSet<(String, String)> = HashSet::new();
        // The ids of these memories too: a run after one that was done no longer has the ids it
        // read, and the target's copy of a document holds them.
        let these: HashSet<&str> = memories.iter().map(|m| m.id.as_str()).collect();
        for ((bank, document), written) in source {
            let on_target = self.bank(target, &bank).await?.get(&document).map_or(&[][..], Vec::as_slice);
            // What this migration copied of it is still there: the target's document is that copy,
            // maybe appended to since (a cut inside the document, then a client's append), and
            // its rest belongs with it. A client that replaced it left none of those.
            if on_target.iter().any(|(id, _)| copied.contains(id) || these.contains(id.as_str())) {
                continue;
            }
            if on_target.iter().map(|(_, at)| at).max().is_some_and(|t| *t > written) {
                older.insert((bank, document));
            }
        }
        let before = memories.len();
        memories.retain(|m| document_of(m).is_none_or(|d| !older.contains(&(m.bank.clone(), d.to_owned()))));
        let documents = older.into_iter().filter(|d| self.left_out.insert(d.clone())).count();
        Ok((documents as u64, (before - memories.len()) as u64))
    }

    /// The documents of `bank` on the target, read whole the first time.
    async fn bank(
        &mut self,
        target: &dyn MemoryBackend,
        bank: &str,
    ) -> Result<&HashMap<String, Vec<(String, Written)>>, BackendError> {
        if !self.banks.contains_key(bank) {
            let mut documents: HashMap<String, Vec<(String, Written)>> = HashMap::new();
            let mut cursor: Option<String> = None;
            loop {
                let page = match target.export(Some(bank), cursor.as_deref(), PAGE).await {
                    Ok(page) => page,
                    // A store that cannot list what it holds has no versions to keep.
                    Err(BackendError::Unsupported(_)) => break,
                    Err(e) => return Err(e),
                };
                for m in &page.memories {
                    if let Some(document) = document_of(m) {
                        documents.entry(document.to_owned()).or_default().push((m.id.clone(), Written::of(m)));
                    }
                }
                match page.next.filter(|_| !page.memories.is_empty()) {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            self.banks.insert(bank.to_owned(), documents);
        }
        Ok(&self.banks[bank])
    }
}

/// The newest date of each document (by bank) among `memories`.
fn newest_of_each_document(memories: &[StoredMemory]) -> HashMap<(String, String), Written> {
    let mut newest: HashMap<(String, String), Written> = HashMap::new();
    for m in memories {
        let Some(document) = document_of(m) else { continue };
        let written = Written::of(m);
        let at = newest.entry((m.bank.clone(), document.to_owned())).or_insert_with(|| written.clone());
        if written > *at {
            *at = written;
        }
    }
    newest
}
