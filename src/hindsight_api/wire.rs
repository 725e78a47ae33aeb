//! The JSON of Hindsight API v1 (server 1.1.0) as mneme serves it: field names and defaults
//! follow `openapi-1.1.0.json`; fields mneme cannot honour are accepted and ignored, the way
//! the server ignores what it does not know.

use std::collections::BTreeMap;

use mneme_core::{Budget, MemoryType, TagsMatch};
use serde::{Deserialize, Serialize};

mod mental_models;

pub use mental_models::*;

/// `POST /v1/default/banks/{bank_id}/memories`
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct RetainRequest {
    /// What to retain.
    pub items: Vec<MemoryItemIn>,
    /// Answer at once (true) or once stored (false, Hindsight's default).
    #[serde(default, rename = "async")]
    pub is_async: bool,
    /// Tags added to every item.
    #[serde(default)]
    pub document_tags: Option<Vec<String>>,
    /// The client's id for an asynchronous retain (a UUID): sent again, the retain is answered
    /// as the first time and stored once. Ignored for a synchronous retain, as Hindsight does.
    #[serde(default)]
    pub operation_id: Option<String>,
}

/// One item of a retain.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct MemoryItemIn {
    /// The text, or Hindsight's content blocks.
    pub content: Content,
    /// When it happened (ISO 8601, with or without an offset), or `unset` (dated at its retain:
    /// every mneme memory has a date).
    #[serde(default)]
    pub timestamp: Option<String>,
    /// What it is about.
    #[serde(default)]
    pub context: Option<String>,
    /// String metadata kept with it.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// A later retain with the same id replaces this one.
    #[serde(default)]
    pub document_id: Option<String>,
    /// Its tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// What it does to a stored document with its id: `replace` (the default) or `append`.
    #[serde(default)]
    pub update_mode: Option<UpdateMode>,
}

/// An item's content: a string, or Hindsight's ordered content blocks. mneme keeps text: a text
/// block's text is the content (blocks joined as the server joins them); an image or file block
/// is refused when retained (as Hindsight refuses them with a text-only model), never dropped.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Content {
    /// The plain string form.
    Text(String),
    /// The block form, each block as sent (its `type` checked).
    Blocks(Vec<serde_json::Value>),
}

impl Content {
    /// The text to retain, or which block cannot be retained (its index and type).
    pub fn text(&self) -> Result<std::borrow::Cow<'_, str>, (usize, &str)> {
        match self {
            Content::Text(s) => Ok(s.as_str().into()),
            Content::Blocks(blocks) => {
                let mut text = String::new();
                for (i, block) in blocks.iter().enumerate() {
                    match block_type(block) {
                        Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
                        other => return Err((i, other.unwrap_or("unknown"))),
                    }
                }
                Ok(text.into())
            }
        }
    }
}

fn block_type(block: &serde_json::Value) -> Option<&str> {
    block.get("type").and_then(serde_json::Value::as_str)
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(Content::Text(s)),
            serde_json::Value::Array(blocks) => {
                for (i, block) in blocks.iter().enumerate() {
                    match block_type(block) {
                        Some("text") if block.get("text").is_some_and(serde_json::Value::is_string) => {}
                        Some("text") => {
                            return Err(D::Error::custom(format!("content block {i} is a text block without its text")))
                        }
                        Some("image" | "file") => {}
                        Some(t) => {
                            return Err(D::Error::custom(format!(
                                "content block {i} has type {t:?}: expected \"text\", \"image\" or \"file\""
                            )))
                        }
                        None => {
                            return Err(D::Error::custom(format!("content block {i} is not an object with a type")))
                        }
                    }
                }
                Ok(Content::Blocks(blocks))
            }
            _ => Err(D::Error::custom("content is a string or a list of content blocks")),
        }
    }
}

/// How a retain treats a stored document with the same id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UpdateMode {
    /// The retain is the document now.
    Replace,
    /// The retain adds to the document.
    Append,
}

/// The answer to a retain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetainResponse {
    /// Always true when answered with 200.
    pub success: bool,
    /// The bank.
    pub bank_id: String,
    /// Items accepted (items with nothing left after `<private>` spans are removed are not).
    pub items_count: usize,
    /// Whether the request asked for an asynchronous retain.
    #[serde(rename = "async")]
    pub is_async: bool,
    /// The operation's id (asynchronous retains).
    pub operation_id: Option<String>,
    /// Hindsight's list of operation ids (null, as the server answers a single retain).
    pub operation_ids: Option<Vec<String>>,
    /// Token usage: mneme calls no LLM.
    pub usage: Option<serde_json::Value>,
}

/// `POST /v1/default/banks/{bank_id}/memories/recall`
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct RecallRequest {
    /// What to look for.
    pub query: String,
    /// Only these types.
    #[serde(default)]
    pub types: Option<Vec<MemoryType>>,
    /// Effort.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Bound on the results' size.
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Tag filter.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// How `tags` match.
    #[serde(default)]
    pub tags_match: Option<TagsMatch>,
    /// Compound tag filters, all of which a memory must pass (applied to the results; a leaf's
    /// `resolve: "fuzzy"` is read as exact).
    #[serde(default)]
    pub tag_groups: Option<Vec<TagGroup>>,
    /// Score floors: accepted and not applied (mneme's scores are not on the server's scale).
    #[serde(default)]
    pub min_scores: Option<serde_json::Value>,
}

/// One of a recall's `tag_groups`: a leaf `{tags, match}`, or `{and: […]}`, `{or: […]}`, `{not: …}`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum TagGroup {
    /// Memories matching `tags` as `match` says (`any_strict` when not given).
    Leaf {
        /// The tags.
        tags: Vec<String>,
        /// How they match.
        #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
        mode: Option<TagsMatch>,
        /// `exact` or `fuzzy` (read as `exact`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolve: Option<Resolve>,
    },
    /// Every one.
    And {
        /// The groups.
        and: Vec<TagGroup>,
    },
    /// At least one.
    Or {
        /// The groups.
        or: Vec<TagGroup>,
    },
    /// Not this one.
    Not {
        /// The group.
        not: Box<TagGroup>,
    },
}

/// How a tag group's leaf resolves its tags (Hindsight's `TagGroupLeaf.resolve`): another value
/// is refused, as the server refuses it (review107 #2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolve {
    /// As written.
    Exact,
    /// Read as `exact` by mneme.
    Fuzzy,
}

/// The answer to a recall.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RecallResponse {
    /// Best first.
    pub results: Vec<RecallResult>,
    /// Not computed by mneme.
    pub trace: Option<serde_json::Value>,
    /// Not computed by mneme.
    pub entities: Option<serde_json::Value>,
    /// Not computed by mneme.
    pub chunks: Option<serde_json::Value>,
    /// Not computed by mneme.
    pub source_facts: Option<serde_json::Value>,
    /// Not computed by mneme.
    pub source_facts_truncated: Option<bool>,
}

/// One recalled memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecallResult {
    /// The memory's id.
    pub id: String,
    /// The passage.
    pub text: String,
    /// world | experience | observation.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Not extracted by mneme.
    pub entities: Option<Vec<String>>,
    /// What it is about.
    pub context: Option<String>,
    /// Not extracted by mneme.
    pub occurred_start: Option<String>,
    /// Not extracted by mneme.
    pub occurred_end: Option<String>,
    /// When it was retained.
    pub mentioned_at: Option<String>,
    /// Its document.
    pub document_id: Option<String>,
    /// Not returned by mneme's recall.
    pub metadata: Option<BTreeMap<String, String>>,
    /// Not used by mneme.
    pub chunk_id: Option<String>,
    /// Its tags.
    pub tags: Option<Vec<String>>,
    /// Not used by mneme.
    pub source_fact_ids: Option<Vec<String>>,
    /// The ranking score.
    pub scores: Option<Scores>,
    /// Not used by mneme.
    pub attachments: Option<Vec<serde_json::Value>>,
}

/// A result's scores: mneme gives the final one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scores {
    /// The ranking score (higher is better).
    #[serde(rename = "final")]
    pub final_score: Option<f64>,
    /// Not computed separately.
    pub reranker: Option<f64>,
    /// Not reported separately.
    pub semantic: Option<f64>,
    /// Not reported separately.
    pub keyword: Option<f64>,
}

/// `POST /v1/default/banks/{bank_id}/reflect`
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ReflectRequest {
    /// The question.
    pub query: String,
    /// Effort.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Extra context.
    #[serde(default)]
    pub context: Option<String>,
    /// Tag filter.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// How `tags` match.
    #[serde(default)]
    pub tags_match: Option<TagsMatch>,
    /// Compound tag filters, passed to a server that reflects (never dropped: the answer would
    /// draw on every project's memories).
    #[serde(default)]
    pub tag_groups: Option<Vec<TagGroup>>,
    /// Only these types.
    #[serde(default)]
    pub fact_types: Option<Vec<MemoryType>>,
    /// A bound on the answer, in tokens.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// A JSON Schema for a structured answer: refused when given (mneme passes on the text only).
    #[serde(default)]
    pub response_schema: Option<serde_json::Value>,
    /// What else to answer with (the facts used, the tool calls): refused when it asks for any.
    #[serde(default)]
    pub include: Option<serde_json::Value>,
}

/// The answer to a reflect.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReflectResponse {
    /// The answer.
    pub text: String,
    /// Not reported.
    pub based_on: Option<serde_json::Value>,
    /// Not supported.
    pub structured_output: Option<serde_json::Value>,
    /// Not supported.
    pub structured_output_error: Option<String>,
    /// Not reported.
    pub usage: Option<serde_json::Value>,
    /// Not reported.
    pub trace: Option<serde_json::Value>,
}

/// `PUT` / `PATCH /v1/default/banks/{bank_id}`: every field optional.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct BankUpdate {
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// The bank's mission.
    #[serde(default)]
    pub mission: Option<String>,
    /// Background (Hindsight's older name for the mission).
    #[serde(default)]
    pub background: Option<String>,
    /// Disposition traits (1–5 each).
    #[serde(default)]
    pub disposition: Option<Disposition>,
    /// One trait on its own (Hindsight 1.1's flat, deprecated form), over `disposition`'s.
    #[serde(default)]
    pub disposition_skepticism: Option<i64>,
    /// See `disposition_skepticism`.
    #[serde(default)]
    pub disposition_literalism: Option<i64>,
    /// See `disposition_skepticism`.
    #[serde(default)]
    pub disposition_empathy: Option<i64>,
    /// What reflect is for.
    #[serde(default)]
    pub reflect_mission: Option<String>,
    /// What retain should keep.
    #[serde(default)]
    pub retain_mission: Option<String>,
}

/// Hindsight's disposition traits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub struct Disposition {
    /// 1–5.
    pub skepticism: u8,
    /// 1–5.
    pub literalism: u8,
    /// 1–5.
    pub empathy: u8,
}

impl Default for Disposition {
    fn default() -> Self {
        Disposition { skepticism: 3, literalism: 3, empathy: 3 }
    }
}

/// A bank's profile, as stored and as answered.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct BankProfile {
    /// The bank.
    pub bank_id: String,
    /// Display name (the id when never set).
    pub name: String,
    /// Disposition.
    pub disposition: Disposition,
    /// Mission ("" when never set).
    pub mission: String,
    /// Background.
    pub background: Option<String>,
}

/// `GET /v1/default/banks`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BankList {
    /// Banks with a profile, one page.
    pub banks: Vec<BankListItem>,
    /// How many match, whatever the page.
    pub total: usize,
    /// Page size.
    pub limit: usize,
    /// Page start.
    pub offset: usize,
}

/// The query string of `GET /v1/default/banks`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct BankListQuery {
    /// Case-insensitive substring of the id or name.
    #[serde(default)]
    pub q: Option<String>,
    /// Page size (default 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Page start.
    #[serde(default)]
    pub offset: Option<usize>,
}

/// One bank in a list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BankListItem {
    /// The bank.
    pub bank_id: String,
    /// Display name.
    pub name: Option<String>,
    /// Disposition.
    pub disposition: Disposition,
    /// Mission.
    pub mission: Option<String>,
    /// Created at.
    pub created_at: Option<String>,
    /// Updated at.
    pub updated_at: Option<String>,
}

/// The answer to creating a mental model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperationAnswer {
    /// The model created.
    pub mental_model_id: Option<String>,
    /// The operation (already done: mneme computes content from recall at once).
    pub operation_id: String,
}

/// `GET /health`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    /// "healthy".
    pub status: String,
    /// "connected".
    pub database: String,
}

/// `GET /version`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionAnswer {
    /// The Hindsight API version served.
    pub api_version: String,
    /// The server's feature flags, as mneme serves them (the API's schema requires them).
    pub features: serde_json::Value,
    /// "mneme".
    pub server: String,
    /// This mneme's version.
    pub mneme_version: String,
}

/// The answer to deleting a mental model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeletedAnswer {
    /// "deleted".
    pub status: String,
}

/// Hindsight's `detail` of an error, as FastAPI writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ErrorDetailField {
    /// A request refused as invalid (422): one validation error for the body.
    Invalid(Vec<ValueError>),
    /// Any other error: its message.
    Message(String),
}

/// One of FastAPI's validation errors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValueError {
    /// "value_error".
    #[serde(rename = "type")]
    pub kind: String,
    /// Where: `["body"]`.
    pub loc: Vec<String>,
    /// What.
    pub msg: String,
    /// Always null.
    pub input: Option<()>,
    /// Always `{"error": {}}`.
    pub ctx: ValueErrorContext,
}

impl ValueError {
    /// A validation error of the request's body.
    pub fn of_body(msg: impl Into<String>) -> Self {
        ValueError {
            kind: "value_error".into(),
            loc: vec!["body".into()],
            msg: msg.into(),
            input: None,
            ctx: ValueErrorContext::default(),
        }
    }
}

/// The `ctx` of a [`ValueError`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ValueErrorContext {
    /// Empty.
    pub error: Empty,
}

/// `{}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Empty {}
