//! [`HindsightBackend`]: the trait over Hindsight's HTTP API.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mneme_core::*;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::{Method, Url};

use crate::errors;
use crate::limiter::{self, Limiter};
use crate::parts;
use crate::redelete::Redeletes;
use crate::wire::*;

pub use mneme_core::Secret;

mod delivery;
mod requests;

/// Where the server is and how to talk to it.
#[derive(Debug, Clone, PartialEq)]
pub struct HindsightConfig {
    /// Base URL, e.g. `http://localhost:8888`.
    pub api_url: String,
    /// Bearer token, when the server wants one.
    pub api_token: Option<Secret>,
    /// Sent as the bank's reflect mission (and makes mneme ensure banks); empty = leave banks alone.
    pub bank_mission: String,
    /// Sent as the bank's retain mission when non-empty.
    pub retain_mission: String,
    /// Sustained request rate shared by every session.
    pub requests_per_second: u32,
    /// Requests allowed in a burst.
    pub burst: u32,
    /// Timeout of other calls (health, banks, clear).
    pub timeout: Duration,
    /// Timeout of recall.
    pub recall_timeout: Duration,
    /// Timeout of retain.
    pub retain_timeout: Duration,
    /// Timeout of reflect.
    pub reflect_timeout: Duration,
    /// Log every request (method, path, status, time; never the token) at info level.
    pub debug: bool,
    /// Banks asked for in one request of the bank list (1,000; smaller in tests of the paging).
    pub banks_page: usize,
}

impl HindsightConfig {
    /// The server at `api_url` with mneme's defaults: no token, no missions, 20 requests/s in
    /// bursts of 40, 30 s for most calls, 60 s for a retain and 120 s for a reflect.
    pub fn new(api_url: impl Into<String>) -> Self {
        HindsightConfig {
            api_url: api_url.into(),
            api_token: None,
            bank_mission: String::new(),
            retain_mission: String::new(),
            requests_per_second: 20,
            burst: 40,
            timeout: Duration::from_secs(30),
            recall_timeout: Duration::from_secs(30),
            retain_timeout: Duration::from_secs(60),
            reflect_timeout: Duration::from_secs(120),
            debug: false,
            banks_page: 1000,
        }
    }
}

/// The `hindsight` backend.
pub struct HindsightBackend {
    config: HindsightConfig,
    base: Url,
    /// `base` as messages and the status show it: a password in it replaced by `****`.
    shown: String,
    http: reqwest::Client,
    limiter: Limiter,
    ensured: Mutex<HashSet<String>>,
    /// When each operation this client waits for was first seen unfinished (see
    /// `wait_for_operation`); forgotten once it finished.
    unfinished: Mutex<HashMap<String, Instant>>,
    /// Deletes owed once the retains the server was running at a forget or clear finish.
    redeletes: Redeletes,
    /// The server's version as the status last read it, and when (see [`VERSION_KEPT`]).
    version: Mutex<Option<(Instant, Option<String>)>>,
}

/// How long the status keeps the server's version: it asked for it with every status, a third
/// of the requests the web view's status (every 2 s) took from `requests_per_second`.
const VERSION_KEPT: Duration = Duration::from_secs(60);

/// Operations timed at most (see `unfinished_since`).
const MAX_TIMED_OPERATIONS: usize = 1024;

/// A URL as it may be shown: user and password (userinfo) replaced, never repeated.
pub fn shown_url(url: &Url) -> String {
    if url.username().is_empty() && url.password().is_none() {
        return url.as_str().to_owned();
    }
    let mut shown = url.clone();
    let _ = shown.set_username("****");
    let _ = shown.set_password(None);
    shown.as_str().to_owned()
}

impl fmt::Debug for HindsightBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HindsightBackend").field("api_url", &self.shown).finish_non_exhaustive()
    }
}

/// Hindsight wants a UUID as `operation_id`: the batch id's 128 bits shaped as one (deterministic,
/// so every resend of a batch carries the same operation id).
pub fn operation_id(batch_id: &str) -> String {
    let mut hex: String = batch_id.chars().filter(|c| c.is_ascii_hexdigit()).map(|c| c.to_ascii_lowercase()).collect();
    if hex.len() != 32 {
        hex = hash128(batch_id); // not our id format
    }
    let mut b: Vec<char> = hex.chars().collect();
    b[12] = '4'; // version 4 layout
    b[16] = ['8', '9', 'a', 'b'][b[16].to_digit(16).unwrap_or(0) as usize % 4]; // RFC 4122 variant
    let s: String = b.into_iter().collect();
    format!("{}-{}-{}-{}-{}", &s[0..8], &s[8..12], &s[12..16], &s[16..20], &s[20..32])
}

/// 128 bits of `text` as 32 hex digits (FNV-1a twice, seeded differently): an id, not a secret.
fn hash128(text: &str) -> String {
    let h = |seed: u64| text.bytes().fold(seed, |acc, b| (acc ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{:016x}{:016x}", h(0xcbf2_9ce4_8422_2325), h(0x8422_2325_cbf2_9ce4))
}

impl HindsightBackend {
    /// The server's version: asked for at most every [`VERSION_KEPT`] while the server answers
    /// (its health is asked every time); a failed answer is not kept.
    async fn server_version(&self, quick: Duration) -> Option<String> {
        let kept = self.version.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some((_, version)) = kept.filter(|(at, _)| at.elapsed() < VERSION_KEPT) {
            return version;
        }
        let asked =
            self.send::<VersionResponse>("version", Method::GET, self.url(&["version"]), None::<&()>, quick).await;
        let version = match asked {
            Ok(answer) => answer.and_then(|v| v.api_version),
            Err(_) => return None,
        };
        *self.version.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), version.clone()));
        version
    }

    /// A client for `config`. Does not contact the server: a server that is down at start is fine.
    pub fn new(config: HindsightConfig) -> Result<Self, BackendError> {
        let base = Url::parse(config.api_url.trim())
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                // It may hold a password: shown only when it cannot.
                let shown = if config.api_url.contains('@') {
                    "(not shown: it holds an @)".to_owned()
                } else {
                    format!("{:?}", config.api_url)
                };
                BackendError::permanent(format!("hindsight.api_url {shown} is not an http(s) URL"))
            })?;
        let shown = shown_url(&base);
        let mut headers = HeaderMap::new();
        // Who is asking: a mneme whose api_url names its own /hindsight API refuses the request
        // before spooling it (the answer's same header then tells this client of the loop).
        headers.insert(mneme_core::INSTANCE_HEADER, HeaderValue::from_static(mneme_core::instance_id()));
        if let Some(token) = &config.api_token {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                .map_err(|_| BackendError::permanent("hindsight.api_token holds characters a header cannot carry"))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .user_agent(concat!("mneme/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(5).min(config.timeout))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| BackendError::permanent(format!("cannot build the HTTP client: {e}")))?;
        let rps = NonZeroU32::new(config.requests_per_second.max(1)).expect("at least 1");
        let burst = NonZeroU32::new(config.burst.max(1)).expect("at least 1");
        let limiter = Limiter::new(rps, burst);
        Ok(Self {
            config,
            base,
            shown,
            http,
            limiter,
            ensured: Mutex::new(HashSet::new()),
            unfinished: Mutex::new(HashMap::new()),
            redeletes: Redeletes::default(),
            version: Mutex::new(None),
        })
    }

    pub(crate) fn config(&self) -> &HindsightConfig {
        &self.config
    }

    /// When `operation_id` was first seen unfinished (now, the first time asked).
    pub(crate) fn unfinished_since(&self, operation_id: &str) -> Instant {
        let mut unfinished = self.unfinished.lock().unwrap_or_else(|e| e.into_inner());
        // An operation never looked at again (its batch cleared, or a dead letter never
        // retried) leaves its entry: bounded, the oldest half dropped.
        if unfinished.len() >= MAX_TIMED_OPERATIONS && !unfinished.contains_key(operation_id) {
            let mut since: Vec<Instant> = unfinished.values().copied().collect();
            since.sort_unstable();
            let cut = since[since.len() / 2];
            unfinished.retain(|_, t| *t > cut);
        }
        *unfinished.entry(operation_id.to_owned()).or_insert_with(Instant::now)
    }

    /// `operation_id` finished (or is gone): no longer timed.
    pub(crate) fn finished(&self, operation_id: &str) {
        self.unfinished.lock().unwrap_or_else(|e| e.into_inner()).remove(operation_id);
    }

    pub(crate) fn redeletes(&self) -> &Redeletes {
        &self.redeletes
    }

    /// How many deletes are owed until retains the server was running at a forget or a clear
    /// have finished (see [`Redeletes`]).
    pub fn deletes_owed(&self) -> usize {
        self.redeletes.owed()
    }

    /// The configured per-request timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.config.timeout
    }

    /// The configured retain timeout.
    pub(crate) fn retain_timeout(&self) -> Duration {
        self.config.retain_timeout
    }
}

/// The mode sent with a recall: none without tags (no filter), but for `exact`, where no tags
/// asks for untagged memories.
fn tags_match(tags: &[String], mode: TagsMatch) -> Option<&'static str> {
    (!tags.is_empty() || mode == TagsMatch::Exact).then(|| mode.as_str())
}

#[async_trait]
impl MemoryBackend for HindsightBackend {
    fn id(&self) -> BackendId {
        BackendId::Hindsight
    }

    fn capabilities(&self) -> Capabilities {
        // A server's retain under way is not the daemon's to finish: a switch stops waiting for it.
        Capabilities {
            stores: true,
            lists_every_bank: false,
            clears_remotely: true,
            reflects: true,
            finishes_retains: false,
        }
    }

    async fn start(&self, scope: &Scope) -> Result<(), BackendError> {
        self.ensure_bank(&scope.bank).await;
        Ok(())
    }

    async fn retain(&self, scope: &Scope, batch: &RetainBatch) -> Result<(), BackendError> {
        // A delivery: its requests yield to any someone waits on (see `limiter`).
        limiter::in_background(self.deliver(scope, batch)).await
    }

    async fn recall(&self, scope: &Scope, q: &RecallQuery) -> Result<Vec<Recalled>, BackendError> {
        let body = RecallRequest {
            query: &q.query,
            budget: q.budget.as_str(),
            max_tokens: q.max_tokens,
            types: q.types.iter().map(|t| t.as_str()).collect(),
            tags: &q.tags,
            tags_match: tags_match(&q.tags, q.tags_match),
        };
        let url = self.bank_url(&scope.bank, &["memories", "recall"])?;
        let answer: Option<RecallResponse> =
            self.send_bank_read("recall", Method::POST, url, Some(&body), self.config.recall_timeout).await?;
        // A bank that does not exist yet holds no memories.
        let Some(answer) = answer else { return Ok(Vec::new()) };
        // The server may hold what other clients marked private: it is never passed on (nor
        // cached in a session's recall block or a mental model).
        let results = answer
            .results
            .into_iter()
            .filter_map(|r| {
                let text = mneme_core::text::strip_private(&r.text);
                (!text.trim().is_empty()).then_some(hindsight_result(r, text))
            })
            .collect();
        Ok(within_chars(results, q.max_tokens.saturating_mul(4)))
    }

    async fn reflect(&self, scope: &Scope, q: &ReflectQuery) -> Result<String, BackendError> {
        let body = ReflectRequest {
            query: &q.query,
            context: q.context.as_deref(),
            budget: q.budget.as_str(),
            tags: &q.tags,
            tags_match: tags_match(&q.tags, q.tags_match),
            tag_groups: q.tag_groups.as_ref(),
            fact_types: q.types.iter().map(|t| t.as_str()).collect(),
            max_tokens: q.max_tokens,
        };
        let url = self.bank_url(&scope.bank, &["reflect"])?;
        let answer: Option<ReflectResponse> =
            self.send_bank_read("reflect", Method::POST, url, Some(&body), self.config.reflect_timeout).await?;
        // The server's LLM read memories other clients marked private, and may quote them.
        Ok(answer.map(|a| mneme_core::text::strip_private(&a.text)).unwrap_or_default())
    }

    async fn instructions(&self, _scope: &Scope) -> Result<Option<String>, BackendError> {
        Ok(None)
    }

    async fn set_bank_profile(&self, bank: &str, profile: &BankProfileUpdate) -> Result<(), BackendError> {
        if profile.mission.is_none() && profile.disposition.is_none() {
            return Ok(());
        }
        let body = crate::wire::BankProfileRequest {
            reflect_mission: profile.mission.as_deref(),
            disposition: profile.disposition.map(|[skepticism, literalism, empathy]| crate::wire::Disposition {
                skepticism,
                literalism,
                empathy,
            }),
        };
        let url = self.bank_url(bank, &[])?;
        self.send::<serde_json::Value>("bank profile", Method::PUT, url, Some(&body), self.config.timeout).await?;
        Ok(())
    }

    async fn clear(&self, scope: &Scope, what: ClearWhat) -> Result<ClearReport, BackendError> {
        match what {
            ClearWhat::Remote => {
                // Retains still queued on the server would store what the clear deletes.
                let pending = self.cancel_pending_retains(&scope.bank, None).await;
                let url = self.bank_url(&scope.bank, &["memories"])?;
                let answer: Option<serde_json::Value> =
                    self.send_delete("clear", url, self.config.timeout).await?;
                let mut message = match answer {
                    Some(_) => format!("Deleted the memories of bank {:?} on the Hindsight server.", scope.bank),
                    None => format!("Bank {:?} does not exist on the Hindsight server: nothing to delete.", scope.bank),
                };
                message.push_str(&pending.running_note());
                self.delete_again_after(&scope.bank, pending.owed(None, self.config.retain_timeout));
                Ok(ClearReport { deleted: None, message })
            }
            ClearWhat::Scope | ClearWhat::All => Ok(ClearReport {
                deleted: None,
                message: format!(
                    "Cleared local state; the memories of bank {:?} on the Hindsight server were kept (use --remote to delete them).",
                    scope.bank
                ),
            }),
        }
    }

    async fn export(&self, bank: Option<&str>, cursor: Option<&str>, limit: usize) -> Result<ExportPage, BackendError> {
        let bank = bank.ok_or_else(|| BackendError::permanent("exporting from Hindsight needs a bank (--bank)"))?;
        let offset: usize = match cursor {
            Some(c) => c.parse().map_err(|_| {
                BackendError::Invalid(format!("bad export cursor {}", mneme_core::text::quoted_unless_private(c)))
            })?,
            None => 0,
        };
        let limit = limit.clamp(1, 1000);
        let mut url = self.bank_url(bank, &["memories", "list"])?;
        url.query_pairs_mut().append_pair("limit", &limit.to_string()).append_pair("offset", &offset.to_string());
        let page: Option<ListResponse> =
            self.send_bank_read("export", Method::GET, url, None::<&()>, self.config.timeout).await?;
        let Some(page) = page else { return Ok(ExportPage::default()) };
        let n = page.items.len();
        let memories = page.items.into_iter().map(|m| without_private(m.into_stored(bank))).collect();
        Ok(ExportPage { memories, next: (n == limit).then(|| (offset + n).to_string()) })
    }

    async fn import(&self, memories: &[StoredMemory]) -> Result<Option<u64>, BackendError> {
        // Bulk: its requests yield to any someone waits on, as a delivery's (see `limiter`).
        limiter::in_background(self.import_memories(memories)).await
    }

    async fn browse(&self, query: &BrowseQuery) -> Result<BrowsePage, BackendError> {
        crate::browse::browse(self, query).await
    }

    async fn banks(&self) -> Result<Vec<BankCount>, BackendError> {
        crate::browse::banks(self).await
    }

    async fn memory(&self, id: &str, bank: Option<&str>) -> Result<MemoryDetail, BackendError> {
        crate::browse::memory(self, id, bank).await
    }

    async fn forget(&self, what: &Forget) -> Result<Forgotten, BackendError> {
        crate::browse::forget(self, what).await
    }

    async fn status(&self) -> BackendStatus {
        let quick = self.config.timeout.min(Duration::from_secs(3));
        let health =
            self.send::<serde_json::Value>("health", Method::GET, self.url(&["health"]), None::<&()>, quick).await;
        let mut status = BackendStatus::healthy(BackendId::Hindsight);
        status.detail = Some(self.shown.trim_end_matches('/').to_owned());
        status.reachable = Some(true);
        match health {
            Ok(Some(_)) => {
                status.version = self.server_version(quick).await;
                // /health needs no key: a route that does says whether the token is taken (a
                // wrong one showed "healthy" while every recall was refused), and whether the
                // URL is a Hindsight API at all.
                let mut url = self.url(&["v1", "default", "banks"]);
                url.query_pairs_mut().append_pair("limit", "1");
                match self.send::<serde_json::Value>("list banks", Method::GET, url, None::<&()>, quick).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        status.healthy = false;
                        status.detail = Some(format!(
                            "{} answers /health but has no /v1/default/banks: is hindsight.api_url right?",
                            self.shown
                        ));
                    }
                    Err(e) => {
                        status.healthy = false;
                        status.detail = Some(e.to_string());
                    }
                }
            }
            Ok(None) => {
                status.healthy = false;
                status.detail = Some(format!("{} has no /health: is hindsight.api_url right?", self.shown));
            }
            Err(e) => {
                status.healthy = false;
                // A server that answered with an error (a 500, the token refused, this mneme's
                // own /hindsight) is not unreachable (review67 #6): asked once more, plainly,
                // whether anything answers at all.
                let answers = self.http.get(self.url(&["health"])).timeout(quick).send().await.is_ok();
                status.reachable = Some(answers);
                status.detail = Some(match answers {
                    true => e.to_string(),
                    false => format!("unreachable: {e}"),
                });
            }
        }
        status
    }
}

/// A recall result as the trait returns it, with its text (cleaned of private spans) and every
/// other field it shows cleaned too.
fn hindsight_result(r: RecallResult, text: String) -> Recalled {
    use mneme_core::text::has_private_tag;
    let mut metadata = r.metadata.unwrap_or_default();
    mneme_core::text::strip_private_map(&mut metadata);
    // The server makes ids, types and dates, but another of its clients may have written
    // anything there (as `without_private` says of the lists).
    let made_by_the_server = |field: Option<String>| field.filter(|f| !has_private_tag(f));
    Recalled {
        text,
        kind: made_by_the_server(r.kind).unwrap_or_default(),
        mentioned_at: made_by_the_server(r.mentioned_at).unwrap_or_default(),
        tags: mneme_core::text::strip_private_list(r.tags.unwrap_or_default()),
        score: r.scores.and_then(|s| s.final_score),
        id: r.id.map(|id| match has_private_tag(&id) {
            true => format!("private-{:016x}", mneme_core::text::fnv1a(id.as_bytes())),
            false => id,
        }),
        document_id: r.document_id.filter(|d| !mneme_core::text::has_private_tag(d)),
        context: r.context.map(|c| mneme_core::text::strip_private(&c)).filter(|c| !c.trim().is_empty()),
        metadata,
    }
}

/// A memory the server holds, as an export, the web view or a lookup gives it: what other
/// clients marked private is left out of every field. A memory of which no text is left stays in
/// its page, blank, for the reader to leave out and count (a page of such memories read as empty
/// ended an export or a migrate there, with more to read).
pub(crate) fn without_private(m: StoredMemory) -> StoredMemory {
    use mneme_core::text::{has_private_tag, strip_private};
    let content = strip_private(&m.content);
    let mut metadata = m.metadata;
    mneme_core::text::strip_private_map(&mut metadata);
    // The server makes ids and dates, but another of its clients may have written anything:
    // shown as it is, private text in them reached the web view and the exports.
    let id = match has_private_tag(&m.id) {
        true => format!("private-{:016x}", mneme_core::text::fnv1a(m.id.as_bytes())),
        false => m.id,
    };
    StoredMemory {
        id,
        content,
        context: m.context.map(|c| strip_private(&c)).filter(|c| !c.trim().is_empty()),
        tags: mneme_core::text::strip_private_list(m.tags),
        metadata,
        document_id: m.document_id.filter(|d| !has_private_tag(d)),
        created_at: if has_private_tag(&m.created_at) { String::new() } else { m.created_at },
        ..m
    }
}

/// The server's results within `max_units` of text in all, best first: the server counts
/// `max_tokens` in its tokenizer's tokens, mneme in quarter tokens as
/// [`mneme_core::text::budget_units`] counts them (a hard bound for every backend). A result
/// that does not fit is left out for shorter ones after it; a first one too long for the bound
/// is cut, marked with `…`.
fn within_chars(results: Vec<Recalled>, max_units: usize) -> Vec<Recalled> {
    let mut room = max_units;
    let mut kept: Vec<Recalled> = Vec::new();
    for r in results {
        let len = mneme_core::text::budget_units(&r.text);
        if len <= room {
            room -= len;
            kept.push(r);
        } else if kept.is_empty() && room > 1 {
            let head = mneme_core::text::take_units(&r.text, room - 1);
            let head = &head[..mneme_core::text::shown_char_boundary(&r.text, head.len())];
            kept.push(Recalled { text: format!("{}…", head.trim_end()), ..r });
            break;
        }
    }
    kept
}

#[cfg(test)]
#[path = "backend_tests.rs"]
mod tests;
