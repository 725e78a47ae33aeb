//! The registry of settings: one entry per key, each with its parser. Loading from the file and
//! from the environment both go through it, so a key cannot be accepted in one and not the other.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::paths::resolve;
use super::{RetainMode, Scoping, Settings};

/// A value from the config file or from an environment variable.
#[derive(Clone, Copy)]
pub(super) enum Raw<'a> {
    Toml(&'a toml::Value),
    Env(&'a str),
}

/// What a parser may need besides the value.
pub(super) struct Ctx<'a> {
    /// The config file's folder, for relative paths.
    pub base: Option<&'a Path>,
}

type Apply = fn(&mut Settings, Raw<'_>, &Ctx<'_>) -> Result<(), String>;

/// One setting.
pub(super) struct Key {
    pub section: &'static str,
    pub name: &'static str,
    /// Extra environment names (the original's `HINDSIGHT_*`).
    pub aliases: &'static [&'static str],
    pub apply: Apply,
}

impl Key {
    /// `MNEME_<SECTION>__<KEY>`.
    pub fn env_name(&self) -> String {
        format!("MNEME_{}__{}", self.section.to_uppercase(), self.name.to_uppercase())
    }
}

fn type_name(v: &toml::Value) -> &'static str {
    v.type_str()
}

impl Raw<'_> {
    fn string(self) -> Result<String, String> {
        match self {
            Raw::Toml(toml::Value::String(s)) => Ok(s.clone()),
            Raw::Toml(v) => Err(format!("expected a string, found {}", type_name(v))),
            Raw::Env(s) => Ok(s.to_owned()),
        }
    }

    fn boolean(self) -> Result<bool, String> {
        match self {
            Raw::Toml(toml::Value::Boolean(b)) => Ok(*b),
            Raw::Toml(v) => Err(format!("expected true or false, found {}", type_name(v))),
            // Anything else was false: `MNEME_RECALL__AUTO=on` turned recall off, silently.
            Raw::Env(s) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(format!("expected true or false (or 1/0, yes/no, on/off), found {}", quoted(s))),
            },
        }
    }

    fn integer(self) -> Result<i64, String> {
        match self {
            Raw::Toml(toml::Value::Integer(i)) => Ok(*i),
            Raw::Toml(v) => Err(format!("expected an integer, found {}", type_name(v))),
            Raw::Env(s) => s.trim().parse().map_err(|_| format!("expected an integer, found {}", quoted(s))),
        }
    }

    fn duration(self) -> Result<Duration, String> {
        let text = match self {
            Raw::Toml(toml::Value::String(s)) => s.clone(),
            Raw::Toml(v) => return Err(format!("expected a duration string like \"5s\", found {}", type_name(v))),
            Raw::Env(s) => s.to_owned(),
        };
        parse_duration(&text)
    }

    fn string_list(self) -> Result<Vec<String>, String> {
        match self {
            Raw::Toml(toml::Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("expected a list of strings, found a {} in it", type_name(v)))
                })
                .collect(),
            Raw::Toml(v) => Err(format!("expected a list of strings, found {}", type_name(v))),
            Raw::Env(s) => Ok(s.split(',').map(|x| x.trim().to_owned()).filter(|x| !x.is_empty()).collect()),
        }
    }

    /// A list of patterns or names looked for in text: a blank one is found in every text (an
    /// empty compaction pattern took every request for a compaction, and nothing was retained).
    fn pattern_list(self) -> Result<Vec<String>, String> {
        let list = self.string_list()?;
        match list.iter().position(|p| p.trim().is_empty()) {
            Some(i) => Err(format!("item {} is blank, and a blank pattern is found in every text", i + 1)),
            None => Ok(list),
        }
    }
}

/// A duration as the config reads one (`5s`, `2m`, `1h 30m`, `2days`), at most 365 days; a bare
/// `M` (months to the parser) is refused as ambiguous. Also what the CLI's durations take.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if has_bare_capital_m(text) {
        // humantime reads "M" as months: "5M" meant as 5 minutes held a queue for 5 months.
        return Err(format!(
            "{} is ambiguous: \"M\" would be months; write \"m\" or \"min\" for minutes, \"months\" for months",
            quoted(text)
        ));
    }
    let d = humantime::parse_duration(text.trim()).map_err(|e| match mneme_core::text::has_private_tag(text) {
        // The parser's reason quotes the text too.
        true => format!("expected a duration like \"5s\" or \"2m\", found {}", quoted(text)),
        false => format!("expected a duration like \"5s\" or \"2m\", found {} ({e})", quoted(text)),
    })?;
    // Past this no setting means anything, and a time that far ahead overflows (the queue
    // panicked adding a flush interval of "500000000000years" to now).
    if d > MAX_DURATION {
        return Err(format!("must be at most 365 days, found {}", quoted(text)));
    }
    Ok(d)
}

/// Whether a duration's text has the unit "M" on its own (after a number, before no other letter).
fn has_bare_capital_m(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    chars.iter().enumerate().any(|(i, &c)| {
        let after_number = chars[..i].iter().rev().find(|c| !c.is_whitespace()).is_some_and(char::is_ascii_digit);
        c == 'M' && after_number && !chars.get(i + 1).is_some_and(|n| n.is_alphabetic())
    })
}

/// The longest duration any setting takes.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

fn at_least(v: i64, min: i64) -> Result<i64, String> {
    if v < min {
        Err(format!("must be at least {min}, found {v}"))
    } else {
        Ok(v)
    }
}

/// The most turns `retain.every_n_turns` and `retain.overlap_turns` may name (as many as an
/// agent-end may say it left out): more would overflow the turn counts they are added to.
const MAX_TURNS: i64 = 1_000_000;

/// The largest `recall.max_tokens`: the bound `POST /v1/search` allows.
const MAX_RECALL_TOKENS: i64 = 100_000;

fn within(v: i64, min: i64, max: i64) -> Result<i64, String> {
    if v > max {
        Err(format!("must be at most {max}, found {v}"))
    } else {
        at_least(v, min)
    }
}

fn one_of<T: Copy>(text: &str, choices: &[(&str, T)]) -> Result<T, String> {
    // Trimmed, as numbers, booleans and durations are (`HINDSIGHT_RETAIN_MODE="last-turn "`).
    let text = text.trim();
    choices.iter().find(|(name, _)| *name == text).map(|(_, v)| *v).ok_or_else(|| {
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("{n:?}")).collect();
        format!("must be one of {}, found {}", names.join(", "), quoted(text))
    })
}

/// A path that names something: an empty one would put the files in the config's own folder.
fn not_blank(s: String) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must name a folder or file, not be empty".into())
    } else {
        Ok(s)
    }
}

fn nonzero(d: Duration) -> Result<Duration, String> {
    if d.is_zero() {
        Err("must be longer than 0s".into())
    } else {
        Ok(d)
    }
}

/// A text stored or sent as it is (the context every retained transcript carries, a bank's
/// missions): private text in it would be written.
fn stored_text(s: String) -> Result<String, String> {
    if mneme_core::text::has_private_tag(&s) {
        Err("may not hold a <private> tag: it is stored and sent as it is".into())
    } else {
        Ok(s)
    }
}

fn bank_part(s: String) -> Result<String, String> {
    if mneme_core::text::has_private_tag(&s) {
        // A bank's name is stored and sent as it is, so private text in it would be written.
        Err("may not hold a <private> tag: a bank id is stored and sent as it is".into())
    } else if s.contains('/') {
        Err(format!("may not contain '/' (Hindsight answers 404 for such banks), found {}", quoted(&s)))
    } else if matches!(s.trim(), "." | "..") {
        Err(format!("may not be {:?}: in a URL it is a step in the path, not a bank", s.trim()))
    } else if s.chars().any(char::is_control) {
        Err(format!("may not contain control characters (a bank's name cannot), found {}", quoted(&s)))
    } else {
        Ok(s)
    }
}

macro_rules! key {
    ($section:literal, $name:literal, [$($alias:literal),*], |$s:ident, $v:ident, $c:ident| $body:expr) => {
        Key { section: $section, name: $name, aliases: &[$($alias),*], apply: |$s, $v, $c| { let _ = &$c; $body; Ok(()) } }
    };
}

/// Every key mneme reads, in the order of the example file.
pub(super) const REGISTRY: &[Key] = &[
    key!("memory", "backend", [], |s, v, c| s.memory.backend = v.string()?.parse()?),
    key!("memory", "bank_id", ["HINDSIGHT_BANK_ID"], |s, v, c| s.memory.bank_id = bank_part(v.string()?)?),
    key!("memory", "bank_id_prefix", [], |s, v, c| s.memory.bank_id_prefix = bank_part(v.string()?)?),
    key!("memory", "scoping", ["HINDSIGHT_SCOPING"], |s, v, c| s.memory.scoping = one_of(
        &v.string()?,
        &[
            ("global", Scoping::Global),
            ("per-project", Scoping::PerProject),
            ("per-project-tagged", Scoping::PerProjectTagged)
        ]
    )?),
    key!("server", "listen", [], |s, v, c| s.server.listen =
        v.string()?.parse::<SocketAddr>().map_err(|_| "expected an address like \"127.0.0.1:6366\"".to_string())?),
    key!("server", "allow_remote", [], |s, v, c| s.server.allow_remote = v.boolean()?),
    key!("server", "max_body_bytes", [], |s, v, c| s.server.max_body_bytes = at_least(v.integer()?, 1024)? as usize),
    // Bounded: tokio's semaphore panics above usize::MAX >> 3 permits, after the daemon announced itself.
    key!("server", "max_connections", [], |s, v, c| s.server.max_connections =
        within(v.integer()?, 1, 1_000_000)? as usize),
    key!("server", "header_timeout", [], |s, v, c| s.server.header_timeout = nonzero(v.duration()?)?),
    key!("server", "body_timeout", [], |s, v, c| s.server.body_timeout = nonzero(v.duration()?)?),
    key!("storage", "dir", [], |s, v, c| s.storage.dir = resolve(&not_blank(v.string()?)?, c.base)?),
    key!("queue", "batch_size", [], |s, v, c| s.queue.batch_size = at_least(v.integer()?, 1)? as usize),
    key!("queue", "flush_interval", [], |s, v, c| s.queue.flush_interval = nonzero(v.duration()?)?),
    key!("queue", "max_batch", [], |s, v, c| s.queue.max_batch = at_least(v.integer()?, 1)? as usize),
    key!("queue", "max_attempts", [], |s, v, c| s.queue.max_attempts =
        within(v.integer()?, 1, u32::MAX.into())? as u32),
    key!("queue", "retry_initial", [], |s, v, c| s.queue.retry_initial = nonzero(v.duration()?)?),
    key!("queue", "retry_max", [], |s, v, c| s.queue.retry_max = nonzero(v.duration()?)?),
    key!("queue", "shutdown_grace", [], |s, v, c| s.queue.shutdown_grace = v.duration()?),
    key!("queue", "sync", [], |s, v, c| s.queue.sync =
        one_of(&v.string()?, &[("full", super::SpoolSync::Full), ("normal", super::SpoolSync::Normal)])?),
    key!("recall", "auto", ["HINDSIGHT_AUTO_RECALL"], |s, v, c| s.recall.auto = v.boolean()?),
    key!("recall", "context_turns", ["HINDSIGHT_RECALL_CONTEXT_TURNS"], |s, v, c| s.recall.context_turns =
        at_least(v.integer()?, 0)?),
    key!("recall", "max_query_chars", ["HINDSIGHT_RECALL_MAX_QUERY_CHARS"], |s, v, c| s.recall.max_query_chars =
        at_least(v.integer()?, 0)?),
    key!("recall", "max_tokens", ["HINDSIGHT_RECALL_MAX_TOKENS"], |s, v, c| s.recall.max_tokens =
        within(v.integer()?, 1, MAX_RECALL_TOKENS)? as usize),
    key!("recall", "budget", ["HINDSIGHT_RECALL_BUDGET"], |s, v, c| s.recall.budget = one_of(
        &v.string()?,
        &[("low", mneme_core::Budget::Low), ("mid", mneme_core::Budget::Mid), ("high", mneme_core::Budget::High)]
    )?),
    key!("recall", "types", [], |s, v, c| s.recall.types =
        v.string_list()?.iter().map(|t| t.parse()).collect::<Result<_, _>>()?),
    key!("recall", "timeout", [], |s, v, c| s.recall.timeout = nonzero(v.duration()?)?),
    key!("recall", "include_time", [], |s, v, c| s.recall.include_time = v.boolean()?),
    key!("recall", "preamble", [], |s, v, c| s.recall.preamble = v.string()?),
    key!("retain", "auto", ["HINDSIGHT_AUTO_RETAIN"], |s, v, c| s.retain.auto = v.boolean()?),
    key!("retain", "mode", ["HINDSIGHT_RETAIN_MODE"], |s, v, c| s.retain.mode =
        one_of(&v.string()?, &[("full-session", RetainMode::FullSession), ("last-turn", RetainMode::LastTurn)])?),
    key!("retain", "every_n_turns", ["HINDSIGHT_RETAIN_EVERY_N_TURNS"], |s, v, c| s.retain.every_n_turns =
        within(v.integer()?, 1, MAX_TURNS)?),
    key!("retain", "overlap_turns", [], |s, v, c| s.retain.overlap_turns = within(v.integer()?, 0, MAX_TURNS)?),
    key!("retain", "context", [], |s, v, c| s.retain.context = stored_text(v.string()?)?),
    key!("retain", "strip_private", [], |s, v, c| s.retain.strip_private = v.boolean()?),
    key!("retain", "idle_after", [], |s, v, c| s.retain.idle_after = nonzero(v.duration()?)?),
    key!("local", "path", [], |s, v, c| s.local.path = Some(resolve(&not_blank(v.string()?)?, c.base)?)),
    key!("local", "embedder", [], |s, v, c| s.local.embedder = one_of(
        &v.string()?,
        &[
            ("builtin", super::EmbedderKind::Builtin),
            ("openai", super::EmbedderKind::OpenAi),
            ("off", super::EmbedderKind::Off)
        ]
    )?),
    key!("local", "embedding_url", [], |s, v, c| s.local.embedding_url = Some(base_url(v.string()?)?)),
    key!("local", "embedding_model", [], |s, v, c| s.local.embedding_model =
        Some(v.string()?).filter(|m| !m.trim().is_empty()).map(|m| m.trim().to_owned())),
    key!("local", "embedding_api_key", [], |s, v, c| s.local.embedding_api_key = header_secret(v.string()?)?),
    key!("local", "embedding_timeout", [], |s, v, c| s.local.embedding_timeout = nonzero(v.duration()?)?),
    // At most what the client takes (a longer vector is refused, so nothing would be embedded).
    key!("local", "embedding_dim", [], |s, v, c| s.local.embedding_dim =
        Some(within(v.integer()?, 1, mneme_embed::MAX_DIM as i64)? as usize)),
    key!("local", "thesaurus", [], |s, v, c| s.local.thesaurus = v.boolean()?),
    key!("local", "thesaurus_file", [], |s, v, c| s.local.thesaurus_file = Some(v.string()?)
        .filter(|p| !p.trim().is_empty())
        .map(|p| super::ThesaurusFile::read(resolve(p.trim(), c.base)?))
        .transpose()?),
    key!("hindsight", "api_url", ["HINDSIGHT_API_URL"], |s, v, c| s.hindsight.api_url = http_url(v.string()?)?),
    key!("hindsight", "api_token", ["HINDSIGHT_API_TOKEN"], |s, v, c| s.hindsight.api_token =
        header_secret(v.string()?)?),
    key!("hindsight", "bank_mission", ["HINDSIGHT_BANK_MISSION"], |s, v, c| s.hindsight.bank_mission =
        stored_text(v.string()?)?),
    key!("hindsight", "retain_mission", [], |s, v, c| s.hindsight.retain_mission = stored_text(v.string()?)?),
    key!("hindsight", "requests_per_second", [], |s, v, c| s.hindsight.requests_per_second =
        within(v.integer()?, 1, u32::MAX.into())? as u32),
    key!("hindsight", "burst", [], |s, v, c| s.hindsight.burst = within(v.integer()?, 1, u32::MAX.into())? as u32),
    key!("hindsight", "timeout", [], |s, v, c| s.hindsight.timeout = nonzero(v.duration()?)?),
    key!("hindsight", "recall_timeout", [], |s, v, c| s.hindsight.recall_timeout = nonzero(v.duration()?)?),
    key!("hindsight", "retain_timeout", [], |s, v, c| s.hindsight.retain_timeout = nonzero(v.duration()?)?),
    key!("hindsight", "reflect_timeout", [], |s, v, c| s.hindsight.reflect_timeout = nonzero(v.duration()?)?),
    key!("hindsight", "debug", ["HINDSIGHT_DEBUG"], |s, v, c| s.hindsight.debug = v.boolean()?),
    key!("classify", "agent_headers", [], |s, v, c| s.classify.agent_headers =
        v.string_list()?.into_iter().map(|h| h.to_lowercase()).collect()),
    key!("classify", "primary_agents", [], |s, v, c| s.classify.primary_agents = v.string_list()?),
    key!("classify", "meta_agents", [], |s, v, c| s.classify.meta_agents = v.string_list()?),
    key!("classify", "compaction_system_patterns", [], |s, v, c| s.classify.compaction_system_patterns =
        v.pattern_list()?),
    key!("classify", "compaction_user_patterns", [], |s, v, c| s.classify.compaction_user_patterns =
        v.pattern_list()?),
    key!("classify", "compaction_request_patterns", [], |s, v, c| s.classify.compaction_request_patterns =
        v.pattern_list()?),
    key!("classify", "template_marker", [], |s, v, c| s.classify.template_marker = v.string()?),
    key!("classify", "template_headings", [], |s, v, c| s.classify.template_headings = v.pattern_list()?),
    key!("classify", "template_min_headings", [], |s, v, c| s.classify.template_min_headings =
        at_least(v.integer()?, 1)? as usize),
    key!("classify", "meta_system_patterns", [], |s, v, c| s.classify.meta_system_patterns = v.pattern_list()?),
    key!("classify", "meta_phrases", [], |s, v, c| s.classify.meta_phrases = v.pattern_list()?),
    key!("classify", "meta_threshold", [], |s, v, c| s.classify.meta_threshold = at_least(v.integer()?, 1)?),
    key!("hooks", "timeout", [], |s, v, c| s.hooks.timeout = nonzero(v.duration()?)?),
    key!("hooks", "cooldown", [], |s, v, c| s.hooks.cooldown = v.duration()?),
];

/// A token sent as `Authorization: Bearer …`: none when blank; refused (never repeated) when it
/// holds a character a header cannot carry, which only opening the backend found (the daemon
/// did not start, naming no line, and `config check` passed it).
fn header_secret(s: String) -> Result<Option<super::Secret>, String> {
    let t = s.trim();
    if t.chars().any(|c| c.is_control() && c != '\t') {
        return Err("holds a control character (a line break?) that an HTTP header cannot carry".into());
    }
    Ok((!t.is_empty()).then(|| super::Secret::new(t)))
}

fn http_url(s: String) -> Result<String, String> {
    let t = s.trim();
    let rest = t.strip_prefix("http://").or_else(|| t.strip_prefix("https://"));
    // Parsed as the backends will (a bad port or host was found only when the daemon started).
    let parses = || url::Url::parse(t).is_ok_and(|u| u.host().is_some());
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') && parses() => Ok(t.to_owned()),
        // A URL with an @ may carry a password: not repeated.
        _ if s.contains('@') => {
            Err("expected an http:// or https:// URL (the value is not shown: it holds an @)".into())
        }
        _ => Err(format!("expected an http:// or https:// URL, found {}", quoted(&s))),
    }
}

/// An http(s) URL that paths are added to (`{url}/embeddings`): a query or fragment would take
/// the path in (and a key in it would be shown with the endpoint's errors), so it is refused, and
/// not repeated.
fn base_url(s: String) -> Result<String, String> {
    let t = http_url(s)?;
    if t.contains(['?', '#']) {
        return Err("expected a base URL without a query or fragment (the value is not shown: it may hold a key; use embedding_api_key)".into());
    }
    Ok(t)
}

/// The entry for `section.name`.
pub(super) fn find(section: &str, name: &str) -> Option<&'static Key> {
    REGISTRY.iter().find(|k| k.section == section && k.name == name)
}

/// Whether any key lives in `section`.
pub(super) fn is_section(section: &str) -> bool {
    REGISTRY.iter().any(|k| k.section == section)
}

/// A value as an error message quotes it: not when it holds `<private>` text (the message goes
/// to the log, the notices and a reload's answer), and cut when long.
fn quoted(value: &str) -> String {
    mneme_core::text::quoted_unless_private(value)
}
