//! Values that cross the [`crate::MemoryBackend`] trait. No HTTP or storage types here.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which backend is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendId {
    /// Stores nothing.
    Off,
    /// Embedded SQLite.
    Local,
    /// A Hindsight server.
    Hindsight,
}

impl BackendId {
    /// Every backend, in the order the docs list them.
    pub const ALL: [BackendId; 3] = [BackendId::Off, BackendId::Local, BackendId::Hindsight];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendId::Off => "off",
            BackendId::Local => "local",
            BackendId::Hindsight => "hindsight",
        }
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackendId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackendId::ALL
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| format!("unknown backend {s:?}; expected one of \"off\", \"local\", \"hindsight\""))
    }
}

/// What a backend can do, so the layers above ask it instead of naming backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// It keeps memories. (`off` does not: retains are answered with `queued: 0`, and items
    /// already spooled wait for a backend that stores.)
    pub stores: bool,
    /// It can list the memories of every bank at once. (Hindsight lists one bank at a time: the
    /// daemon names the configured bank when a request names none.)
    pub lists_every_bank: bool,
    /// A clear can delete the server's memories too (`remote`), not only mneme's.
    pub clears_remotely: bool,
    /// It answers `reflect` (it has a model to reason with): the guide names the tool only then.
    pub reflects: bool,
    /// A retain it has begun is finished even when its caller stops waiting (the local store's
    /// writer commits every job it was given): a delivery to it is awaited past a backend switch,
    /// or its batch, given to the new backend too, was stored in both.
    pub finishes_retains: bool,
}

impl Capabilities {
    /// A store mneme owns: it stores, lists every bank, and a clear is always local.
    pub const LOCAL_STORE: Capabilities = Capabilities {
        stores: true,
        lists_every_bank: true,
        clears_remotely: false,
        reflects: false,
        finishes_retains: true,
    };
}

/// How recall matches tags (Hindsight's meaning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TagsMatch {
    /// At least one of the tags, or no tags at all.
    #[default]
    Any,
    /// Every tag, or no tags at all.
    All,
    /// At least one of the tags; untagged memories excluded.
    AnyStrict,
    /// Every tag; untagged memories excluded.
    AllStrict,
    /// Exactly these tags, as a set; with none, only untagged memories.
    Exact,
}

impl TagsMatch {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TagsMatch::Any => "any",
            TagsMatch::All => "all",
            TagsMatch::AnyStrict => "any_strict",
            TagsMatch::AllStrict => "all_strict",
            TagsMatch::Exact => "exact",
        }
    }

    /// Whether a memory carrying `memory_tags` passes a filter on `wanted` (empty `wanted` = no
    /// filter, but for [`TagsMatch::Exact`], where it asks for untagged memories).
    pub fn matches(self, wanted: &[String], memory_tags: &[String]) -> bool {
        if self == TagsMatch::Exact {
            let set = |tags: &[String]| tags.iter().cloned().collect::<std::collections::BTreeSet<_>>();
            return set(wanted) == set(memory_tags);
        }
        if wanted.is_empty() {
            return true;
        }
        if memory_tags.is_empty() {
            return matches!(self, TagsMatch::Any | TagsMatch::All);
        }
        match self {
            TagsMatch::Any | TagsMatch::AnyStrict => wanted.iter().any(|t| memory_tags.contains(t)),
            TagsMatch::All | TagsMatch::AllStrict | TagsMatch::Exact => wanted.iter().all(|t| memory_tags.contains(t)),
        }
    }
}

/// Where a session's memories go: a bank, and the tags its retains carry and its recalls filter on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scope {
    /// Bank id (never contains `/`).
    pub bank: String,
    /// Tags added to every retained item; recall filters on them with [`TagsMatch::Any`].
    pub tags: Vec<String>,
}

/// Hindsight's memory types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryType {
    /// A fact about the world (tool retains).
    #[default]
    World,
    /// Something that happened (automatic-retain transcripts).
    Experience,
    /// A consolidated observation (Hindsight only).
    Observation,
}

impl MemoryType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryType::World => "world",
            MemoryType::Experience => "experience",
            MemoryType::Observation => "observation",
        }
    }
}

/// Whether `document` is one automatic retain writes for session `session`: its first part's
/// (the session's id), a later part's (`{session}-part{n}`) or a last-turn document's
/// (`{session}-{ms}`, milliseconds since the epoch: 13 digits from 2001 to 2286).
pub fn is_session_document(session: &str, document: &str) -> bool {
    document == session
        || document.strip_prefix(session).and_then(|rest| rest.strip_prefix('-')).is_some_and(is_document_suffix)
}

/// Whether session id `id` ends as a document automatic retain names after another session
/// (`{session}-part{n}`, `{session}-{ms}`; see [`is_session_document`]). Such an id is refused:
/// its conversation's document would be another session's later part or slice, and each would
/// replace the other's.
pub fn ends_as_a_session_document(id: &str) -> bool {
    id.rsplit_once('-').is_some_and(|(session, suffix)| !session.is_empty() && is_document_suffix(suffix))
}

/// `part{n}` or 13 digits (see [`is_session_document`]). Exactly 13: mneme's own default
/// session ids (`cli-` and 16 hex digits, all of them digits in about one folder in 1,850)
/// name no slice.
fn is_document_suffix(suffix: &str) -> bool {
    let digits = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    match suffix.strip_prefix("part") {
        Some(n) => digits(n),
        None => suffix.len() == 13 && digits(suffix),
    }
}

impl FromStr for MemoryType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "world" => Ok(MemoryType::World),
            "experience" => Ok(MemoryType::Experience),
            "observation" => Ok(MemoryType::Observation),
            other => {
                Err(format!("unknown memory type {other:?}; expected \"world\", \"experience\" or \"observation\""))
            }
        }
    }
}

/// One memory on its way into a store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryItem {
    /// Stable id chosen at enqueue time; stores key on it so a resend stores nothing twice.
    pub id: String,
    /// The memory's text.
    pub content: String,
    /// What the memory is about (`retain.context` by default).
    pub context: Option<String>,
    /// When it was enqueued, RFC 3339 UTC.
    pub timestamp: String,
    /// Free-form metadata (`session_id`, …).
    pub metadata: BTreeMap<String, String>,
    /// Tags (the scope's tags).
    pub tags: Vec<String>,
    /// A retain with an existing document id replaces that document.
    pub document_id: Option<String>,
    /// World fact or experience.
    pub kind: MemoryType,
    /// Adds to its document instead of replacing it (Hindsight's `update_mode: "append"`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
}

impl MemoryItem {
    /// A world fact retained at `timestamp`, without context, metadata, tags or document; set
    /// those with struct update syntax (and [`MemoryItem::in_session`]).
    pub fn new(id: impl Into<String>, content: impl Into<String>, timestamp: impl Into<String>) -> Self {
        MemoryItem {
            id: id.into(),
            content: content.into(),
            context: None,
            timestamp: timestamp.into(),
            metadata: BTreeMap::new(),
            tags: Vec::new(),
            document_id: None,
            append: false,
            kind: MemoryType::World,
        }
    }

    /// The same item with `session_id` metadata.
    pub fn in_session(mut self, session: impl Into<String>) -> Self {
        self.metadata.insert("session_id".to_owned(), session.into());
        self
    }
}

/// One delivery: a stable id (sent as Hindsight's `operation_id`) and the items, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct RetainBatch {
    /// Stable across resends of the same batch.
    pub id: String,
    /// The items, all of one scope.
    pub items: Vec<MemoryItem>,
}

/// How hard recall and reflect should work (Hindsight's budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Budget {
    /// Cheapest.
    Low,
    /// Default.
    #[default]
    Mid,
    /// Most thorough.
    High,
}

impl Budget {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::Low => "low",
            Budget::Mid => "mid",
            Budget::High => "high",
        }
    }
}

/// A recall request.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallQuery {
    /// The user's text, any characters.
    pub query: String,
    /// Effort.
    pub budget: Budget,
    /// Upper bound on the size of the results (about 4 characters a token).
    pub max_tokens: usize,
    /// Only these memory types (empty = all).
    pub types: Vec<MemoryType>,
    /// Tag filter (empty = none).
    pub tags: Vec<String>,
    /// How `tags` match.
    pub tags_match: TagsMatch,
    /// When the caller stops waiting for the answer (`None`: it waits as long as the backend's
    /// own bounds allow). A backend that can answer sooner with less does not spend all of the
    /// time left waiting for the more: the local store waits for the query's vector until 100 ms
    /// before it (or half the time left, if more), then answers by the query's words.
    pub deadline: Option<std::time::Instant>,
}

/// One recalled memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recalled {
    /// The memory's text.
    pub text: String,
    /// Its type (`world`, `experience`, …), empty when unknown.
    #[serde(rename = "type")]
    pub kind: String,
    /// When it was retained or mentioned, RFC 3339, empty when unknown.
    pub mentioned_at: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Relevance, higher is better, when the backend gives one.
    pub score: Option<f64>,
    /// The memory's id, when the backend gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The document it belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_id: Option<String>,
    /// What it is about, when the backend gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Its metadata, when the backend gives it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl Recalled {
    /// A result that is only its text (no type, time, tags or score): what a test or a plain
    /// list of texts needs.
    pub fn of_text(text: impl Into<String>) -> Self {
        Recalled {
            text: text.into(),
            kind: String::new(),
            mentioned_at: String::new(),
            tags: Vec::new(),
            score: None,
            id: None,
            document_id: None,
            context: None,
            metadata: BTreeMap::new(),
        }
    }
}

/// A reflect request.
#[derive(Debug, Clone, PartialEq)]
pub struct ReflectQuery {
    /// The question.
    pub query: String,
    /// Extra context for the LLM.
    pub context: Option<String>,
    /// Effort.
    pub budget: Budget,
    /// Tag filter.
    pub tags: Vec<String>,
    /// How `tags` match.
    pub tags_match: TagsMatch,
    /// Compound tag filters, AND-ed (Hindsight's `tag_groups`, as its JSON): a server that
    /// reflects is given them, never a wider scope.
    pub tag_groups: Option<serde_json::Value>,
    /// Only memories of these types (empty: every type).
    pub types: Vec<MemoryType>,
    /// A bound on the answer, in tokens (none: the server's own).
    pub max_tokens: Option<u32>,
}

/// A bank's profile as a client sets it: what a server's reflect is for, and how it weighs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BankProfileUpdate {
    /// What reflect is for (none: left as it is).
    pub mission: Option<String>,
    /// Skepticism, literalism and empathy, each 1–5 (none: left as they are).
    pub disposition: Option<[u8; 3]>,
}

/// What `clear` deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClearWhat {
    /// The memories of the given scope (its bank, and its tags where it has any).
    Scope,
    /// Everything the backend holds locally.
    All,
    /// The bank's memories on a remote server too (Hindsight only).
    Remote,
}

/// What a clear did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClearReport {
    /// Memories deleted, where the backend can count them.
    pub deleted: Option<u64>,
    /// One line for the user.
    pub message: String,
}

/// Health and counts for `mneme status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// Which backend.
    pub backend: BackendId,
    /// Whether it answers.
    pub healthy: bool,
    /// Why not, or other detail.
    pub detail: Option<String>,
    /// Remote server version, where there is one.
    pub version: Option<String>,
    /// Stored memories, where known.
    pub memories: Option<u64>,
    /// Bytes on disk, where known.
    pub storage_bytes: Option<u64>,
    /// The semantic side of recall, where the backend computes vectors itself (local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<EmbeddingStatus>,
    /// Words recall also matches through a thesaurus, where the backend has one (local; 0 when
    /// it is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thesaurus_words: Option<u64>,
    /// Whether a remote server answered the check at all (Hindsight): false when nothing
    /// answered (refused, unreachable, no answer in time), true when it answered, even with an
    /// error or a 404. Absent for a backend with no server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
}

impl BackendStatus {
    /// A healthy status with nothing else known.
    pub fn healthy(backend: BackendId) -> Self {
        Self {
            backend,
            healthy: true,
            detail: None,
            version: None,
            memories: None,
            storage_bytes: None,
            embedding: None,
            thesaurus_words: None,
            reachable: None,
        }
    }
}

/// How far the local store's vectors are (status and metrics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingStatus {
    /// The embedder's model id (`builtin:…`, `openai:<model>@<url>`).
    pub model: String,
    /// `loading` (the model or the stored vectors), `ready`, or `unavailable` (see `error`).
    pub state: String,
    /// Passages with a vector of this model.
    pub embedded: u64,
    /// Passages in the store.
    pub passages: u64,
    /// Banks whose neighbourhoods are due to be measured (after growing or shrinking by a
    /// quarter): their dense scores settle when this is 0 again.
    #[serde(default)]
    pub banks_measuring: u64,
    /// Why the embedder is unavailable, while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Something a backend wants the user told (shown as a notice), outside any request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendEvent {
    /// Whether it is a problem (a warning) or its end (information).
    pub problem: bool,
    /// What happened, for the user.
    pub message: String,
}

/// A memory as it is stored: what `mneme export` writes (one JSON line each) and `import` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredMemory {
    /// Stable id (the item id it was retained under, or the server's id).
    pub id: String,
    /// Its bank.
    pub bank: String,
    /// The text.
    pub content: String,
    /// What it is about.
    #[serde(default)]
    pub context: Option<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// The document it belongs to.
    #[serde(default)]
    pub document_id: Option<String>,
    /// world | experience | observation.
    #[serde(rename = "type", default)]
    pub kind: MemoryType,
    /// When it was retained (RFC 3339); empty, null or absent in an import: the import's time.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub created_at: String,
}

/// A string that may be `null` (an export writes its other empty fields so), read as "".
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// One page of an export.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExportPage {
    /// The memories, in a stable order.
    pub memories: Vec<StoredMemory>,
    /// Where the next page starts; `None` at the end.
    pub next: Option<String>,
}

/// The longest bank id, in bytes: the Hindsight server's bound (a longer one, taken from a
/// client or a config, was acknowledged, then dead-lettered for good by the hindsight backend).
pub const MAX_BANK_BYTES: usize = 192;

/// Most tags a recall, listing or clear may filter on: a filter is one SQL condition a tag, and
/// SQLite refuses an expression deeper than 1,000 (a client's mistake then looked like a failing
/// store, 503).
pub const MAX_FILTER_TAGS: usize = 100;

/// Most tags one memory may carry (a mental model's too: its tags are a recall's filter). Tags
/// are a small set; 150,000 of them in one request held the daemon for minutes.
pub const MAX_MEMORY_TAGS: usize = 100;

/// The longest memory or document id a client may give, in characters (a session id, at most
/// 256, is also its transcript's document id, `-part{n}` added after a history starts over).
pub const MAX_STORED_ID_CHARS: usize = 1024;

/// `None` when `n` tags are within [`MAX_MEMORY_TAGS`], else why not.
pub fn too_many_tags(n: usize) -> Option<String> {
    (n > MAX_MEMORY_TAGS).then(|| format!("has {n} tags; a memory carries at most {MAX_MEMORY_TAGS}"))
}

/// A tag filter within [`MAX_FILTER_TAGS`], or the client's error.
pub fn check_tag_filter(tags: &[String]) -> Result<(), crate::BackendError> {
    if tags.len() > MAX_FILTER_TAGS {
        return Err(crate::BackendError::Invalid(format!(
            "{} tags to filter on; at most {MAX_FILTER_TAGS} are accepted",
            tags.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_document_is_its_id_a_later_part_or_a_slice() {
        assert!(is_session_document("abc", "abc"));
        assert!(is_session_document("abc", "abc-part2"));
        assert!(is_session_document("abc", "abc-1733400000000"));
        // Another session's own document, however it begins.
        assert!(!is_session_document("abc", "abc-7"));
        assert!(!is_session_document("abc", "abc-part"));
        assert!(!is_session_document("abc", "abc-notes"));
        assert!(!is_session_document("abc", "abcd-part2"));
    }

    #[test]
    fn an_id_that_ends_as_another_sessions_document_is_told() {
        for id in ["alpha-part2", "a-b-part10", "alpha-1733400000000"] {
            assert!(ends_as_a_session_document(id), "{id}");
        }
        // A UUID's last group is 12 hex digits, mneme's own default ids 16: never a slice's name.
        let ids =
            ["550e8400-e29b-41d4-a716-446655440000", "cli-1234567890123456", "ses_01JABC", "-part2", "alpha-part"];
        for id in ids.into_iter().chain(["a-123", "part2"]) {
            assert!(!ends_as_a_session_document(id), "{id}");
        }
    }
}
