//! Browsing a Hindsight bank: its list endpoint (paged by offset), one memory unit, deleting a
//! document. Hindsight 1.1 has no call that deletes a single memory unit, so forgetting one is
//! refused with what to do instead.

use mneme_core::text::quoted_unless_private as q;
use mneme_core::{BackendError, BankCount, BrowsePage, BrowseQuery, Forget, Forgotten, MemoryDetail};
use reqwest::Method;

use crate::backend::HindsightBackend;
use crate::wire::{BankList, DocumentDeleted, DocumentInfo, ListResponse, ListedMemory};

fn need_bank(bank: Option<&str>) -> Result<&str, BackendError> {
    bank.ok_or_else(|| BackendError::Invalid("the Hindsight backend lists one bank at a time: name the bank".into()))
}

/// A page of the bank's memory units, as the server orders them.
pub(crate) async fn browse(b: &HindsightBackend, q: &BrowseQuery) -> Result<BrowsePage, BackendError> {
    let bank = need_bank(q.bank.as_deref())?;
    let offset: usize = match &q.cursor {
        Some(c) => c.parse().map_err(|_| {
            BackendError::Invalid(format!(
                "bad cursor {}: use the `next` of the page before",
                mneme_core::text::quoted_unless_private(c)
            ))
        })?,
        None => 0,
    };
    let limit = q.limit.clamp(1, 1000);
    let mut url = b.bank_url(bank, &["memories", "list"])?;
    {
        let mut pairs = url.query_pairs_mut();
        pairs.append_pair("limit", &limit.to_string()).append_pair("offset", &offset.to_string());
        for t in &q.tags {
            pairs.append_pair("tags", t);
        }
        if !q.tags.is_empty() {
            pairs.append_pair("tags_match", "all_strict");
        }
    }
    let page: Option<ListResponse> = b.send("list", Method::GET, url, None::<&()>, b.timeout()).await?;
    let Some(page) = page else { return Ok(BrowsePage::default()) };
    let n = page.items.len();
    Ok(BrowsePage {
        // What other clients marked private is not shown (a memory of nothing else, not at all).
        memories: page
            .items
            .into_iter()
            .map(|m| crate::backend::without_private(m.into_stored(bank)))
            .filter(|m| !m.content.trim().is_empty())
            .collect(),
        next: (n == limit).then(|| (offset + n).to_string()),
    })
}

/// The server's banks with their fact counts (the first 1,000).
/// Every bank on the server, a page (`banks_page`, 1,000) at a time: read in one request of 1,000,
/// a server with more left the rest out, and an export or a clear of every project's bank
/// missed theirs (review69 #4). The server lists the banks last written first, so one written
/// while the pages are read moves to a page already read, and is in none (review70 #3): a
/// list of more than a page is read again, up to [`BANK_READINGS`] times, until a reading
/// finds no bank the others had not.
pub(crate) async fn banks(b: &HindsightBackend) -> Result<Vec<BankCount>, BackendError> {
    let mut banks: Vec<BankCount> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..BANK_READINGS {
        let (found, pages) = bank_pages(b).await?;
        let before = banks.len();
        for bank in found {
            if seen.insert(bank.bank.clone()) {
                banks.push(bank);
            }
        }
        if pages <= 1 || banks.len() == before {
            break;
        }
    }
    Ok(banks)
}

/// Readings of the bank list at most (see [`banks`]).
const BANK_READINGS: usize = 3;

/// One reading of the bank list, page by page to the server's total; with how many pages.
async fn bank_pages(b: &HindsightBackend) -> Result<(Vec<BankCount>, usize), BackendError> {
    let mut banks: Vec<BankCount> = Vec::new();
    let mut offset = 0;
    let mut pages = 0;
    let per_page = b.config().banks_page.max(1);
    loop {
        let mut url = b.url(&["v1", "default", "banks"]);
        url.query_pairs_mut().append_pair("limit", &per_page.to_string()).append_pair("offset", &offset.to_string());
        let Some(page) = b.send::<BankList>("list banks", Method::GET, url, None::<&()>, b.timeout()).await? else {
            break;
        };
        pages += 1;
        let n = page.banks.len();
        offset += n;
        // A bank another client named with private text is not shown (nor can it be named).
        let shown = page.banks.into_iter().filter(|x| !mneme_core::text::has_private_tag(&x.bank_id));
        banks.extend(shown.map(|x| BankCount { bank: x.bank_id, memories: x.fact_count }));
        // The server's total says when the list is through (a server that pages by less than
        // asked still gives it); without one, a page shorter than asked is the last.
        let through = match page.total {
            Some(total) => offset >= total,
            None => n < per_page,
        };
        if n == 0 || through {
            break;
        }
    }
    Ok((banks, pages))
}

/// One memory unit. Hindsight keeps no passages of its own facts: `passages` is empty.
pub(crate) async fn memory(b: &HindsightBackend, id: &str, bank: Option<&str>) -> Result<MemoryDetail, BackendError> {
    let bank = need_bank(bank)?;
    // The server's memory ids are UUIDs, and it answers any other with a 400 (an error to retry
    // or report), where there is simply no such memory.
    if !is_uuid(id) {
        return Err(BackendError::NotFound(format!("no memory {} in Hindsight bank {bank:?}", q(id))));
    }
    let url = b.bank_url(bank, &["memories", id])?;
    let unit: Option<ListedMemory> = b.send("get memory", Method::GET, url, None::<&()>, b.timeout()).await?;
    let memory = unit
        .ok_or_else(|| BackendError::NotFound(format!("no memory {} in Hindsight bank {bank:?}", q(id))))?
        .into_stored(bank);
    let memory = crate::backend::without_private(memory);
    let document_memories = match &memory.document_id {
        Some(document) => document_units(b, bank, document).await,
        None => 1,
    };
    Ok(MemoryDetail { memory, passages: Vec::new(), document_memories })
}

/// How many memory units the server's document holds (the server extracts several from one
/// retain): a view that said "1" asked to delete "all 1 of its memories", and the delete took
/// every unit of the document (review114 #4). 1, the memory itself, when the server does not say.
async fn document_units(b: &HindsightBackend, bank: &str, document: &str) -> u64 {
    let Ok(url) = b.bank_url(bank, &["documents", document]) else { return 1 };
    match b.send::<DocumentInfo>("get document", Method::GET, url, None::<&()>, b.timeout()).await {
        Ok(Some(DocumentInfo { memory_unit_count: Some(n) })) => n.max(1),
        Ok(_) => 1,
        Err(e) => {
            tracing::debug!(bank, "cannot read the document's size: {e}");
            1
        }
    }
}

/// Whether `id` is a UUID as the server writes them (8-4-4-4-12 hex digits).
fn is_uuid(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// Deletes a document and its memory units; a single unit cannot be deleted on Hindsight 1.1.
pub(crate) async fn forget(b: &HindsightBackend, what: &Forget) -> Result<Forgotten, BackendError> {
    let (id, bank) = match what {
        Forget::Memory { .. } => {
            return Err(BackendError::Unsupported(
                "Hindsight 1.1 cannot delete a single memory unit: forget its document instead".into(),
            ))
        }
        Forget::Document { id, bank } => (id, bank),
    };
    // A retain of the document still queued on the server would store it again (and a document
    // only queued answers 404 below).
    let pending = b.cancel_pending_retains(bank, Some(id)).await;
    let url = b.bank_url(bank, &["documents", id])?;
    let done: Option<DocumentDeleted> = b.send_delete("delete document", url, b.timeout()).await?;
    let running = pending.running_note();
    b.delete_again_after(bank, pending.owed(Some(id), b.config().retain_timeout));
    let Some(done) = done else {
        if pending.cancelled > 0 || !pending.running.is_empty() {
            // Only queued (or being stored): nothing was stored yet, and what the server is
            // storing is deleted once it has.
            let message = format!("Nothing of document {} was stored on Hindsight bank {bank:?} yet; its queued retains are cancelled.{running}", q(id));
            return Ok(Forgotten { deleted: Some(0), message });
        }
        return Err(BackendError::NotFound(format!("no document {} in Hindsight bank {bank:?}", q(id))));
    };
    let deleted = done.memory_units_deleted;
    let message = match deleted {
        Some(n) => {
            format!("Deleted document {} and its {n} memory units from Hindsight bank {bank:?}.{running}", q(id))
        }
        None => format!("Deleted document {} from Hindsight bank {bank:?}.{running}", q(id)),
    };
    Ok(Forgotten { deleted, message })
}
