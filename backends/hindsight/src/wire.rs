//! Hindsight's JSON bodies, as far as mneme uses them (unknown response fields are ignored).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One item of a retain.
#[derive(Debug, Clone, Serialize)]
pub struct RetainItem<'a> {
    /// The memory.
    pub content: &'a str,
    /// What it is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<&'a str>,
    /// When it was said (RFC 3339).
    pub timestamp: &'a str,
    /// Free-form string metadata.
    pub metadata: SentMetadata<'a>,
    /// Tags.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub tags: &'a [String],
    /// Replaces the document with this id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_id: Option<&'a str>,
    /// `"append"` adds to the document instead (absent: the server's default, replace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_mode: Option<&'static str>,
}

/// An item's metadata as sent: its own, and for an item of no document sent as a document of
/// its own, the mark that says so (see [`OWN_DOCUMENT_KEY`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SentMetadata<'a> {
    /// The item's own.
    pub own: &'a BTreeMap<String, String>,
    /// The item has no document, and is sent as a document of its own.
    pub own_document: bool,
}

impl<'a> SentMetadata<'a> {
    /// The item's own metadata, unmarked.
    pub fn own(own: &'a BTreeMap<String, String>) -> Self {
        Self { own, own_document: false }
    }
}

impl Serialize for SentMetadata<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in self.own.iter().filter(|(k, _)| *k != OWN_DOCUMENT_KEY) {
            map.serialize_entry(k, v)?;
        }
        if self.own_document {
            map.serialize_entry(OWN_DOCUMENT_KEY, "true")?;
        }
        map.end()
    }
}

/// `POST …/memories`
#[derive(Debug, Serialize)]
pub struct RetainRequest<'a> {
    /// The batch.
    pub items: Vec<RetainItem<'a>>,
    /// Whether the server answers once the operation is queued (see [`RetainRequest::asynchronous`]),
    /// rather than once it is stored ([`RetainRequest::synchronous`]).
    #[serde(rename = "async")]
    pub is_async: bool,
    /// Stable across resends of the same batch (a UUID); none for a synchronous retain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
}

impl<'a> RetainRequest<'a> {
    /// An asynchronous retain: the server answers once the work is queued, and a resend with the
    /// same operation id is answered from the first without storing anything again. At most one
    /// item may name a given document (the server refuses more); the queue's batches are cut
    /// into such parts by `parts`, an import's chunks by `import_parts`.
    pub fn asynchronous(items: Vec<RetainItem<'a>>, operation_id: String) -> Self {
        RetainRequest { items, is_async: true, operation_id: Some(operation_id) }
    }

    /// A synchronous retain: answered once stored. The server folds the items of one document
    /// into it, each keeping its own tags and metadata (appends give the whole document the
    /// last one's); it carries no operation id, so it is sent only where a resend stores
    /// nothing twice: a document it replaces whole (see `parts`).
    pub fn synchronous(items: Vec<RetainItem<'a>>) -> Self {
        RetainRequest { items, is_async: false, operation_id: None }
    }
}

/// A memory's date as Hindsight takes it: year 1 and year 9999 are its placeholders for "no
/// date", which it refuses with a 422 (that dead-lettered the whole batch, good items and all),
/// so they are sent as `unset`.
pub fn retain_timestamp(t: &str) -> &str {
    if t.starts_with("0001-") || t.starts_with("9999-") {
        "unset"
    } else {
        t
    }
}

/// `POST …/memories/recall`
#[derive(Debug, Serialize)]
pub struct RecallRequest<'a> {
    /// The query.
    pub query: &'a str,
    /// low | mid | high.
    pub budget: &'a str,
    /// Bound on the results.
    pub max_tokens: usize,
    /// Memory types.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<&'a str>,
    /// Tag filter.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub tags: &'a [String],
    /// How tags match (only sent with tags).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags_match: Option<&'a str>,
}

/// One recall result.
#[derive(Debug, Deserialize)]
pub struct RecallResult {
    /// The memory's id.
    #[serde(default)]
    pub id: Option<String>,
    /// The document it came from.
    #[serde(default)]
    pub document_id: Option<String>,
    /// What it is about.
    #[serde(default)]
    pub context: Option<String>,
    /// Its metadata.
    #[serde(default)]
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
    /// The memory's text.
    pub text: String,
    /// world | experience | observation.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// When it was mentioned.
    #[serde(default)]
    pub mentioned_at: Option<String>,
    /// Its tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Scores; `final` is the ranking score.
    #[serde(default)]
    pub scores: Option<Scores>,
}

/// A result's scores.
#[derive(Debug, Deserialize)]
pub struct Scores {
    /// The ranking score.
    #[serde(rename = "final", default)]
    pub final_score: Option<f64>,
}

/// `GET …/operations/{id}`: where an asynchronous retain stands on the server.
#[derive(Debug, Deserialize)]
pub struct OperationStatus {
    /// pending | processing | completed | failed | cancelled | not_found.
    pub status: String,
    /// Why it failed, when it did.
    #[serde(default)]
    pub error_message: Option<String>,
}

/// The answer to a retain (or an import): whether the server took it; the rest is not used.
#[derive(Debug, Deserialize)]
pub struct RetainResponse {
    /// `true` once the items are stored (or, asynchronously, queued) under the operation id.
    pub success: bool,
}

/// The answer to a recall.
#[derive(Debug, Deserialize)]
pub struct RecallResponse {
    /// Best first.
    pub results: Vec<RecallResult>,
}

/// `POST …/reflect`
#[derive(Debug, Serialize)]
pub struct ReflectRequest<'a> {
    /// The question.
    pub query: &'a str,
    /// Extra context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<&'a str>,
    /// low | mid | high.
    pub budget: &'a str,
    /// Tag filter.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub tags: &'a [String],
    /// How tags match (only sent with tags).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags_match: Option<&'a str>,
    /// Compound tag filters, as the client gave them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag_groups: Option<&'a serde_json::Value>,
    /// Only these types.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fact_types: Vec<&'static str>,
    /// A bound on the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

/// The answer to a reflect.
#[derive(Debug, Deserialize)]
pub struct ReflectResponse {
    /// The answer.
    #[serde(default)]
    pub text: String,
}

/// `PUT {bank}`: missions.
#[derive(Debug, Serialize)]
pub struct BankRequest<'a> {
    /// What reflect is for.
    pub reflect_mission: &'a str,
    /// What retain should extract.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retain_mission: Option<&'a str>,
}

/// `PUT {bank}`: a profile a client set through mneme's `/hindsight`.
#[derive(Debug, Serialize)]
pub struct BankProfileRequest<'a> {
    /// What reflect is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reflect_mission: Option<&'a str>,
    /// How reflect weighs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disposition: Option<Disposition>,
}

/// A bank's disposition traits, each 1–5.
#[derive(Debug, Serialize)]
pub struct Disposition {
    /// How much it doubts.
    pub skepticism: u8,
    /// How literally it reads.
    pub literalism: u8,
    /// How much it weighs feelings.
    pub empathy: u8,
}

/// `GET /version`
#[derive(Debug, Deserialize)]
pub struct VersionResponse {
    /// The server's API version.
    #[serde(default)]
    pub api_version: Option<String>,
}

/// `GET …/memories/list`
#[derive(Debug, Deserialize)]
pub struct ListResponse {
    /// One page.
    pub items: Vec<ListedMemory>,
}

/// One listed memory.
#[derive(Debug, Deserialize)]
pub struct ListedMemory {
    /// The server's id.
    pub id: String,
    /// The text.
    pub text: String,
    /// Context.
    #[serde(default)]
    pub context: Option<String>,
    /// world | experience | observation (`fact_type` in a list, `type` in one memory's answer).
    #[serde(default, alias = "type")]
    pub fact_type: Option<String>,
    /// Document.
    #[serde(default)]
    pub document_id: Option<String>,
    /// When it was mentioned.
    #[serde(default)]
    pub mentioned_at: Option<String>,
    /// Its date.
    #[serde(default)]
    pub date: Option<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Metadata. The server allows any JSON value in a listed memory's metadata: a value other
    /// than a string is kept as its JSON text (one number in one memory's metadata made the
    /// whole page unreadable, and an export or a migration stop there).
    #[serde(default, deserialize_with = "metadata_as_text")]
    pub metadata: Option<BTreeMap<String, String>>,
}

fn metadata_as_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let map: Option<BTreeMap<String, serde_json::Value>> = Deserialize::deserialize(d)?;
    Ok(map.map(|m| {
        m.into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect()
    }))
}

impl ListedMemory {
    /// The memory as mneme stores and exports it, in `bank`.
    pub fn into_stored(self, bank: &str) -> mneme_core::StoredMemory {
        let mut metadata = self.metadata.unwrap_or_default();
        // The type an import kept (see `TYPE_KEY`) over the one the server gave it.
        let kept_kind = metadata.get(TYPE_KEY).and_then(|t| t.parse().ok());
        if kept_kind.is_some() {
            metadata.remove(TYPE_KEY);
        }
        // mneme's own mark of a memory of no document (see `OWN_DOCUMENT_KEY`), not the user's.
        metadata.remove(OWN_DOCUMENT_KEY);
        let mut document_id = self.document_id;
        // A memory of no document, imported as a document of its own: of none again. The mark
        // stays, so that imported again it goes to the same document (replacing it) instead of
        // one named after the server's id for it (a second copy).
        if metadata.get(LOOSE_MEMORY_KEY).is_some_and(|id| document_id.as_deref() == Some(id.as_str())) {
            document_id = None;
        }
        mneme_core::StoredMemory {
            id: self.id,
            bank: bank.to_owned(),
            content: self.text,
            context: self.context,
            tags: self.tags.unwrap_or_default(),
            metadata,
            document_id,
            kind: kept_kind.or_else(|| self.fact_type.as_deref().and_then(|t| t.parse().ok())).unwrap_or_default(),
            created_at: self.mentioned_at.or(self.date).unwrap_or_default(),
        }
    }
}

/// The metadata key an import marks a memory of no document with (the document it is sent as:
/// its id, or the mark it already carries): read back, it is a memory of no document again, so
/// a copy to the local store and back finds the one it came from instead of adding a second (the
/// local store keeps one loose memory of a text in a bank), and imported into Hindsight again it
/// replaces the document it was (not one named after the server's id for it). Chunks and pages
/// keep the memories of one mark together (`mneme_core::transfer::document_of`).
pub use mneme_core::transfer::{LOOSE_MEMORY_KEY, OWN_DOCUMENT_KEY, TYPE_KEY};

/// `GET /v1/default/banks`, one page.
#[derive(Debug, Deserialize)]
pub struct BankList {
    /// The banks.
    pub banks: Vec<BankListItem>,
    /// How many there are in all (a page holds at most its `limit`).
    #[serde(default)]
    pub total: Option<usize>,
}

/// One bank of [`BankList`].
#[derive(Debug, Deserialize)]
pub struct BankListItem {
    /// Its id.
    pub bank_id: String,
    /// How many facts it holds.
    #[serde(default)]
    pub fact_count: Option<u64>,
}

/// `GET …/documents/{id}`, the part mneme reads.
#[derive(Debug, Clone, Deserialize)]
pub struct DocumentInfo {
    /// Memory units the document holds.
    #[serde(default)]
    pub memory_unit_count: Option<u64>,
}

/// `DELETE /v1/default/banks/{bank}/documents/{id}`.
#[derive(Debug, Deserialize)]
pub struct DocumentDeleted {
    /// Memory units deleted with it.
    #[serde(default)]
    pub memory_units_deleted: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_memorys_metadata_may_hold_any_json() {
        let listed: ListedMemory = serde_json::from_str(
            r#"{"id": "m", "text": "t", "metadata": {"session_id": "s", "turn": 3, "ok": true, "gone": null}}"#,
        )
        .unwrap();
        let m = listed.metadata.unwrap();
        assert_eq!(m.get("session_id").map(String::as_str), Some("s"));
        assert_eq!(m.get("turn").map(String::as_str), Some("3"));
        assert_eq!(m.get("ok").map(String::as_str), Some("true"));
        assert!(!m.contains_key("gone"));
        let none: ListedMemory = serde_json::from_str(r#"{"id": "m", "text": "t", "metadata": null}"#).unwrap();
        assert_eq!(none.metadata, None);
    }

    /// A list names a memory's kind `fact_type`; one memory's answer (`GET …/memories/{id}`)
    /// names it `type`, which was not read: every memory shown alone was a world fact.
    #[test]
    fn placeholder_years_are_sent_as_unset() {
        assert_eq!(retain_timestamp("9999-12-31T23:59:59.999Z"), "unset");
        assert_eq!(retain_timestamp("0001-01-01T00:00:00Z"), "unset");
        assert_eq!(retain_timestamp("2026-01-02T03:04:05Z"), "2026-01-02T03:04:05Z");
    }

    #[test]
    fn a_memorys_kind_is_read_under_either_name() {
        let listed: ListedMemory =
            serde_json::from_str(r#"{"id": "m", "text": "t", "fact_type": "observation"}"#).unwrap();
        assert_eq!(listed.into_stored("b").kind, mneme_core::MemoryType::Observation);
        let shown: ListedMemory = serde_json::from_str(r#"{"id": "m", "text": "t", "type": "experience"}"#).unwrap();
        assert_eq!(shown.into_stored("b").kind, mneme_core::MemoryType::Experience);
    }

    /// The type an import kept in the metadata wins over the server's, and leaves the metadata;
    /// a value that names no type is the client's own and stays.
    #[test]
    fn the_type_an_import_kept_comes_back() {
        let kept: ListedMemory = serde_json::from_str(
            r#"{"id": "m", "text": "t", "fact_type": "world", "metadata": {"mneme_type": "experience", "k": "v"}}"#,
        )
        .unwrap();
        let m = kept.into_stored("b");
        assert_eq!(m.kind, mneme_core::MemoryType::Experience);
        assert_eq!(m.metadata.keys().collect::<Vec<_>>(), ["k"]);
        let other: ListedMemory = serde_json::from_str(
            r#"{"id": "m", "text": "t", "fact_type": "observation", "metadata": {"mneme_type": "note"}}"#,
        )
        .unwrap();
        let m = other.into_stored("b");
        assert_eq!(m.kind, mneme_core::MemoryType::Observation);
        assert_eq!(m.metadata.get("mneme_type").map(String::as_str), Some("note"));
    }
}
