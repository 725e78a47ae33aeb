//! The JSON of Hindsight's mental models (`…/mental-models`): what creates, edits, lists and
//! shows one, and how a list is filtered.

use super::*;

/// `POST /v1/default/banks/{bank_id}/mental-models`
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CreateMentalModel {
    /// Chosen id (generated when absent).
    #[serde(default)]
    pub id: Option<String>,
    /// Display name.
    pub name: String,
    /// The recall query whose answer is the model's content.
    pub source_query: String,
    /// Tags the query is filtered by.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Bound on the content.
    #[serde(default = "default_model_tokens")]
    pub max_tokens: usize,
    /// Refresh policy, kept as sent.
    #[serde(default)]
    pub trigger: Option<serde_json::Value>,
}

fn default_model_tokens() -> usize {
    2048
}

/// `PATCH /v1/default/banks/{bank_id}/mental-models/{id}`
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct UpdateMentalModel {
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// Source query.
    #[serde(default)]
    pub source_query: Option<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Bound on the content.
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Refresh policy.
    #[serde(default)]
    pub trigger: Option<serde_json::Value>,
}

/// A mental model, as stored and (with `detail=full`) as answered.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct MentalModel {
    /// Its id.
    pub id: String,
    /// Its bank.
    pub bank_id: String,
    /// Display name.
    pub name: String,
    /// The recall query.
    pub source_query: Option<String>,
    /// What recall last gave for the query ("" until it has been computed).
    pub content: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// Bound on the content.
    pub max_tokens: Option<usize>,
    /// Refresh policy, as sent.
    pub trigger: Option<serde_json::Value>,
    /// When the content was last computed.
    pub last_refreshed_at: Option<String>,
    /// When it was created.
    pub created_at: Option<String>,
    /// Not tracked.
    #[serde(default)]
    pub last_memory_seen_at: Option<String>,
    /// When a refresh last failed (the backend did not answer).
    #[serde(default)]
    pub last_refresh_failed_at: Option<String>,
    /// Same as `last_refreshed_at`: every refresh is full.
    #[serde(default)]
    pub last_full_refreshed_at: Option<String>,
    /// Always false.
    #[serde(default)]
    pub is_knowledge_page: bool,
    /// No LLM answer behind the content.
    #[serde(default)]
    pub reflect_response: Option<serde_json::Value>,
}

/// `GET /v1/default/banks/{bank_id}/mental-models`
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MentalModelList {
    /// By name.
    pub items: Vec<serde_json::Value>,
    /// How many there are.
    pub total: usize,
    /// Page size.
    pub limit: usize,
    /// Page start.
    pub offset: usize,
}

/// The answer to a refresh.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RefreshAnswer {
    /// The operation.
    pub operation_id: String,
    /// "completed": mneme refreshes before it answers.
    pub status: String,
}

/// `?detail=` of the mental-model routes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Detail {
    /// Every field, with the query, content, bound and trigger null (Hindsight's default).
    #[default]
    Metadata,
    /// Everything.
    Content,
    /// Everything.
    Full,
}

/// The query string of the mental-model routes.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct DetailQuery {
    /// How much of each model.
    #[serde(default)]
    pub detail: Option<Detail>,
}

/// How a mental-model list's `tags` match a model's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ModelTagsMatch {
    /// The model has one of them at least (Hindsight's default).
    #[default]
    Any,
    /// The model has every one of them.
    All,
    /// The model's tags are exactly these.
    Exact,
}

/// The query string of `GET …/mental-models`, as Hindsight 1.1.0's OpenAPI gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelListQuery {
    /// How much of each model.
    pub detail: Detail,
    /// Page size, 1 to 1000.
    pub limit: usize,
    /// Page start.
    pub offset: usize,
    /// Only models with these tags (`tags=a&tags=b`), matched by `tags_match`.
    pub tags: Vec<String>,
    /// How `tags` match.
    pub tags_match: ModelTagsMatch,
    /// Leave out knowledge pages.
    pub exclude_knowledge_pages: bool,
}

impl Default for ModelListQuery {
    fn default() -> Self {
        Self {
            detail: Detail::default(),
            limit: 100,
            offset: 0,
            tags: Vec::new(),
            tags_match: ModelTagsMatch::default(),
            exclude_knowledge_pages: false,
        }
    }
}

impl ModelListQuery {
    /// Reads the query's pairs (a repeated `tags` is a list); a value out of its bounds or not
    /// among its choices is an error naming the parameter. Unknown parameters are ignored, as
    /// Hindsight ignores them.
    pub fn parse(pairs: &[(String, String)]) -> Result<Self, String> {
        let mut q = ModelListQuery::default();
        for (key, value) in pairs {
            let number = |max: usize, min: usize| {
                value
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (min..=max).contains(n))
                    .ok_or_else(|| format!("{key} must be an integer from {min} to {max}, found {value:?}"))
            };
            match key.as_str() {
                "detail" => {
                    q.detail = match value.as_str() {
                        "metadata" => Detail::Metadata,
                        "content" => Detail::Content,
                        "full" => Detail::Full,
                        _ => return Err(format!("detail must be metadata, content or full, found {value:?}")),
                    }
                }
                "limit" => q.limit = number(1000, 1)?,
                "offset" => q.offset = number(usize::MAX, 0)?,
                "tags" => q.tags.push(value.clone()),
                "tags_match" => {
                    q.tags_match = match value.as_str() {
                        "any" => ModelTagsMatch::Any,
                        "all" => ModelTagsMatch::All,
                        "exact" => ModelTagsMatch::Exact,
                        _ => return Err(format!("tags_match must be any, all or exact, found {value:?}")),
                    }
                }
                "exclude_knowledge_pages" => {
                    q.exclude_knowledge_pages = match value.as_str() {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        _ => return Err(format!("exclude_knowledge_pages must be true or false, found {value:?}")),
                    }
                }
                _ => {}
            }
        }
        Ok(q)
    }

    /// Whether a model with `tags` (and this kind) is listed.
    pub fn lists(&self, tags: &[String], is_knowledge_page: bool) -> bool {
        if self.exclude_knowledge_pages && is_knowledge_page {
            return false;
        }
        if self.tags.is_empty() {
            return true;
        }
        match self.tags_match {
            ModelTagsMatch::Any => self.tags.iter().any(|t| tags.contains(t)),
            ModelTagsMatch::All => self.tags.iter().all(|t| tags.contains(t)),
            ModelTagsMatch::Exact => {
                self.tags.iter().all(|t| tags.contains(t)) && tags.iter().all(|t| self.tags.contains(t))
            }
        }
    }
}
