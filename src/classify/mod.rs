//! Meta-request and compaction-request detection (README, "Request classification"): tells a plugin whether a provider
//! request is the agent's real work, a side request (title, summary, label) or a compaction.
//!
//! Three layers, in order: compaction patterns, the agent header, then a score of small signals.
//! Every pattern and list is configuration ([`ClassifySettings`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `[classify]`: what the layers look for.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifySettings {
    /// Headers naming the agent, first present wins.
    pub agent_headers: Vec<String>,
    /// Agents whose requests are the real work.
    pub primary_agents: Vec<String>,
    /// Agents whose requests are side requests.
    pub meta_agents: Vec<String>,
    /// Lowercased system prompt containing one of these → compaction.
    pub compaction_system_patterns: Vec<String>,
    /// With no tools, the last user message containing one of these (case-sensitive) → compaction.
    pub compaction_user_patterns: Vec<String>,
    /// Even with tools, the last user message containing one of these (case-sensitive) →
    /// compaction (improved: Claude Code compacts with its tools still offered).
    pub compaction_request_patterns: Vec<String>,
    /// The last user message containing this marker ...
    pub template_marker: String,
    /// ... and at least `template_min_headings` of these → compaction.
    pub template_headings: Vec<String>,
    /// See `template_headings`.
    pub template_min_headings: usize,
    /// A system prompt containing one of these (case-insensitive) → meta, after the header layer
    /// (improved: side requests whose system prompt says what they are, however long).
    pub meta_system_patterns: Vec<String>,
    /// A short system prompt containing one of these (case-insensitive) scores the phrase signal.
    pub meta_phrases: Vec<String>,
    /// Scores at or above this are meta.
    pub meta_threshold: i64,
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl Default for ClassifySettings {
    fn default() -> Self {
        Self {
            agent_headers: strings(&["x-mneme-agent", "x-lore-agent"]),
            primary_agents: strings(&["coder", "code", "build", "plan"]),
            meta_agents: strings(&["title", "summary", "summarize", "categorize", "label", "classify"]),
            compaction_system_patterns: strings(&[
                "anchored context summarization assistant",
                // opencode 1.18
                "you are a context summarization agent",
            ]),
            compaction_user_patterns: strings(&[
                "anchored summary from the conversation history above",
                "Update the anchored summary below",
                "<previous-summary>",
                // opencode 1.18
                "Create a new anchored summary from the conversation history",
            ]),
            compaction_request_patterns: strings(&[
                // Claude Code 2.1 (`/compact` and automatic compaction)
                "Your task is to create a detailed summary of the conversation so far",
            ]),
            template_marker: "<template>".into(),
            template_headings: strings(&[
                "## Goal",
                "## Progress",
                "## Key Decisions",
                "## Next Steps",
                "## Critical Context",
                "## Relevant Files",
                // opencode 1.18
                "## Objective",
                "## Important Details",
                "## Work State",
                "## Next Move",
            ]),
            template_min_headings: 4,
            meta_system_patterns: strings(&[
                // opencode 1.18's title generator
                "you are a title generator",
            ]),
            meta_phrases: strings(&[
                "generate a title",
                "generate a short title",
                "title for the conversation",
                "title for this conversation",
                "summarize this conversation",
                "summarize the conversation",
                "conversation summary",
                "categorize",
                "classify this",
                "label this",
            ]),
            meta_threshold: 8,
        }
    }
}

/// What a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Side request: title, summary, label.
    Meta,
    /// Compaction of the conversation.
    Compaction,
    /// The agent's real work.
    Normal,
}

/// One signal of the score layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// Its name.
    pub name: String,
    /// Points it gave (0 when it did not fire).
    pub points: i64,
}

/// The verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classification {
    /// meta | compaction | normal.
    pub kind: Kind,
    /// compaction-pattern | header | meta-pattern | score.
    pub decided_by: String,
    /// The score layer's total (computed whatever decided).
    pub score: i64,
    /// Each signal's points.
    pub signals: Vec<Signal>,
    /// The compaction (or meta system) pattern that matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
}

/// A provider request reduced to what the layers look at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Normalized {
    /// The system prompt.
    pub system: String,
    /// Non-system messages as (role, text).
    pub messages: Vec<(String, String)>,
    /// Number of tools.
    pub tools: usize,
    /// The output budget (4096 when absent).
    pub max_tokens: i64,
}

/// Text of a message content: a string, or the text of its blocks / parts joined by "\n".
fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                _ => p.get("text").and_then(Value::as_str).map(str::to_owned),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Anthropic Messages, OpenAI Chat Completions or OpenAI Responses → [`Normalized`].
pub fn normalize(body: &Value) -> Normalized {
    let role_of = |m: &Value| m.get("role").and_then(Value::as_str).unwrap_or("").to_owned();
    let mut system = match body.get("system") {
        Some(Value::String(s)) => s.clone(),
        Some(v @ Value::Array(_)) => content_text(v),
        _ => String::new(),
    };
    // OpenAI's `developer` role is its `system` for newer models (the AI SDK sends it so): a
    // system prompt either way, in Chat Completions `messages` and in Responses `input`.
    let is_system = |role: &str| role == "system" || role == "developer";
    let mut messages = Vec::new();
    let mut system_parts = Vec::new();
    if let Some(list) = body.get("messages").and_then(Value::as_array) {
        for m in list {
            let role = role_of(m);
            let text = content_text(m.get("content").unwrap_or(&Value::Null));
            if is_system(&role) {
                // A string or a list of text parts, both Chat Completions' shapes: a list was
                // dropped, and a title request came out `normal` (review113 #1).
                system_parts.push(text);
            } else {
                messages.push((role, text));
            }
        }
    }
    match body.get("input") {
        Some(Value::String(s)) => messages.push(("user".into(), s.clone())),
        Some(Value::Array(items)) => {
            for item in items {
                let role = role_of(item);
                let text = content_text(item.get("content").unwrap_or(&Value::Null));
                if is_system(&role) {
                    system_parts.push(text);
                } else {
                    messages.push((if role.is_empty() { "user".into() } else { role }, text));
                }
            }
        }
        _ => {}
    }
    if system.is_empty() && !system_parts.is_empty() {
        system = system_parts.join("\n\n");
    }
    if system.is_empty() {
        if let Some(s) = body.get("instructions").and_then(Value::as_str) {
            system = s.to_owned();
        }
    }
    let tools = body.get("tools").and_then(Value::as_array).map_or(0, Vec::len);
    let max_tokens = ["max_tokens", "max_output_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_i64))
        .unwrap_or(4096);
    Normalized { system, messages, tools, max_tokens }
}

/// Classifies a request from its headers (any case) and body.
pub fn classify(settings: &ClassifySettings, headers: &[(String, String)], body: &Value) -> Classification {
    let n = normalize(body);
    let verdict = verdicts(score_signals(settings, &n));
    if let Some(pattern) = compaction_pattern(settings, &n) {
        return verdict(Kind::Compaction, "compaction-pattern", Some(pattern));
    }
    if let Some(agent) = agent_header(settings, headers) {
        if settings.primary_agents.iter().any(|a| a.eq_ignore_ascii_case(&agent)) {
            return verdict(Kind::Normal, "header", None);
        }
        if settings.meta_agents.iter().any(|a| a.eq_ignore_ascii_case(&agent)) {
            return verdict(Kind::Meta, "header", None);
        }
    }
    if let Some(pattern) = meta_pattern(settings, &n) {
        return verdict(Kind::Meta, "meta-pattern", Some(pattern));
    }
    let meta = verdict(Kind::Meta, "score", None);
    if meta.score >= settings.meta_threshold {
        meta
    } else {
        verdict(Kind::Normal, "score", None)
    }
}

/// The verdicts that come with `signals` and their score.
fn verdicts(signals: Vec<Signal>) -> impl Fn(Kind, &str, Option<String>) -> Classification {
    let score = signals.iter().map(|s| s.points).sum();
    move |kind, decided_by, pattern| Classification {
        kind,
        decided_by: decided_by.into(),
        score,
        signals: signals.clone(),
        pattern,
    }
}

/// The meta pattern the lowercased system prompt holds, if any.
fn meta_pattern(settings: &ClassifySettings, n: &Normalized) -> Option<String> {
    let system = n.system.to_lowercase();
    settings.meta_system_patterns.iter().find(|p| system.contains(&p.to_lowercase())).cloned()
}

/// A request of which only the system prompt is known (`body` holds nothing else): the
/// compaction and meta patterns decide, then the signals of the system prompt alone: a short one
/// (under 500 characters) that asks for a title, a summary or a label is meta. The signals of the
/// messages and tools the body lacks are not counted (a short system prompt with no messages and
/// no tools scored 8, meta: every custom agent with a short prompt).
pub fn classify_system(settings: &ClassifySettings, body: &Value) -> Classification {
    let n = normalize(body);
    let signals: Vec<Signal> = score_signals(settings, &n)
        .into_iter()
        .filter(|s| s.name == "short_system" || s.name == "meta_phrase")
        .collect();
    let both = signals.iter().all(|s| s.points > 0);
    let verdict = verdicts(signals);
    if let Some(pattern) = compaction_pattern(settings, &n) {
        return verdict(Kind::Compaction, "compaction-pattern", Some(pattern));
    }
    if let Some(pattern) = meta_pattern(settings, &n) {
        return verdict(Kind::Meta, "meta-pattern", Some(pattern));
    }
    verdict(if both { Kind::Meta } else { Kind::Normal }, "system-prompt", None)
}

/// The header layer alone, for a caller that only knows the agent's name.
pub fn classify_agent(settings: &ClassifySettings, agent: &str) -> Option<Kind> {
    let agent = agent.trim().to_lowercase();
    if settings.primary_agents.iter().any(|a| a.eq_ignore_ascii_case(&agent)) {
        Some(Kind::Normal)
    } else if settings.meta_agents.iter().any(|a| a.eq_ignore_ascii_case(&agent)) {
        Some(Kind::Meta)
    } else {
        None
    }
}

fn agent_header(settings: &ClassifySettings, headers: &[(String, String)]) -> Option<String> {
    settings.agent_headers.iter().find_map(|wanted| {
        headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(wanted)).map(|(_, v)| v.trim().to_lowercase())
    })
}

fn compaction_pattern(settings: &ClassifySettings, n: &Normalized) -> Option<String> {
    let system = n.system.to_lowercase();
    if let Some(p) = settings.compaction_system_patterns.iter().find(|p| system.contains(&p.to_lowercase())) {
        return Some(p.clone());
    }
    let last_user = n.messages.iter().rev().find(|(role, _)| role == "user").map(|(_, t)| t.as_str()).unwrap_or("");
    if n.tools == 0 {
        if let Some(p) = settings.compaction_user_patterns.iter().find(|p| last_user.contains(p.as_str())) {
            return Some(p.clone());
        }
    }
    if let Some(p) = settings.compaction_request_patterns.iter().find(|p| last_user.contains(p.as_str())) {
        return Some(p.clone());
    }
    if !settings.template_marker.is_empty() && last_user.contains(&settings.template_marker) {
        let headings = settings.template_headings.iter().filter(|h| last_user.contains(h.as_str())).count();
        if headings >= settings.template_min_headings {
            return Some(settings.template_marker.clone());
        }
    }
    None
}

fn score_signals(settings: &ClassifySettings, n: &Normalized) -> Vec<Signal> {
    let system_chars = n.system.chars().count();
    let system_lower = n.system.to_lowercase();
    let phrase = system_chars < 2000 && settings.meta_phrases.iter().any(|p| system_lower.contains(&p.to_lowercase()));
    let signal =
        |name: &str, fired: bool, points: i64| Signal { name: name.into(), points: if fired { points } else { 0 } };
    vec![
        signal("few_tools", n.tools <= 2, 3),
        signal("few_messages", n.messages.len() <= 2, 3),
        signal("short_system", system_chars < 500, 2),
        signal("small_max_tokens", n.max_tokens > 0 && n.max_tokens <= 300, 3),
        signal("meta_phrase", phrase, 2),
    ]
}

#[cfg(test)]
mod tests;
