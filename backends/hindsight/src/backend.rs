//! [`HindsightBackend`]: the trait over Hindsight's HTTP API.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mneme_core::transfer::{chunks_of_whole_documents, ChunkLimit};
use mneme_core::*;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, LOCATION, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::errors;
use crate::limiter::{self, Limiter};
use crate::parts;
use crate::redelete::Redeletes;
use crate::wire::*;

/// Whether a retain or an import was taken. Writing creates banks, so a 404 is a wrong api_url
/// or bank id (once taken for success: a migration "copied" nothing). An answer that says it
/// did not succeed, or that is not a retain's answer at all (an empty 200 from a proxy), is
/// retried: the resend carries the same operation id, so nothing is stored twice.
fn accepted(what: &str, answer: Option<RetainResponse>, bank: &str) -> Result<(), BackendError> {
    match answer {
        None => Err(BackendError::permanent(format!(
            "{what}: Hindsight answered 404 for bank {bank:?}; check hindsight.api_url and memory.bank_id"
        ))),
        Some(RetainResponse { success: false }) => {
            Err(BackendError::transient(format!("{what}: Hindsight answered that it did not store the items")))
        }
        Some(RetainResponse { success: true }) => Ok(()),
    }
}

/// The longest answer read from the server: its largest (a list of 1,000 memories, a recall
/// within its token budget) take a few MiB; a proxy or a server gone wrong may send without end.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// An answer's body as text, refused once it passes [`MAX_ANSWER_BYTES`] (worth retrying, like
/// any answer that is not Hindsight's).
async fn read_answer(what: &str, shown: &str, mut resp: reqwest::Response) -> Result<String, BackendError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| errors::from_transport(what, shown, &e))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(BackendError::transient(format!(
                "{what}: Hindsight's answer is longer than {} MiB; not read",
                MAX_ANSWER_BYTES >> 20
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Memories sent in one import request.
const IMPORT_CHUNK: usize = 100;

pub use mneme_core::Secret;

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

/// The id of an import chunk: of its bank and its memories whole. The server answers an
/// operation id it has seen with what it did then, and refuses it (409) with another body: from
/// the ids alone, importing an edited export failed, and a chunk of one memory (its id 32 hex
/// digits) had the memory's id whatever the bank, so importing it into a second bank did too.
/// (Ids of each import run were tried: a second import of a document of several memories then
/// raced the server's asynchronous work on the first, and the document kept only its first part.
/// A chunk imported again after its first document was deleted (a clear of the bank) goes under
/// ids of a new generation: see `import_generation`.)
fn import_chunk_id(bank: &str, chunk: &[&StoredMemory]) -> String {
    let mut key = format!("import:{bank}");
    for m in chunk {
        key.push('\n');
        key.push_str(&serde_json::to_string(m).unwrap_or_else(|_| m.id.clone()));
    }
    hash128(&key)
}

impl HindsightBackend {
    /// `error` (a transient failure of a retain) as an outage when the server does not answer
    /// its health check either (hung, stopped, a proxy with nothing behind it): a hung server's
    /// timeouts used up every batch's attempts, and its memories were dead letters, not
    /// delivered when it came back. One that answers keeps `error`, an attempt.
    async fn outage_unless_answering(&self, error: BackendError) -> BackendError {
        let quick = self.config.timeout.min(Duration::from_secs(3));
        let health = self.send::<serde_json::Value>("health", Method::GET, self.url(&["health"]), None::<&()>, quick);
        match health.await {
            Ok(_) => error,
            Err(health) => BackendError::Unreachable {
                reason: format!("{error}; the server does not answer its health check either ({health})"),
            },
        }
    }

    /// Imports `memories` (see [`MemoryBackend::import`]).
    async fn import_memories(&self, memories: &[StoredMemory]) -> Result<Option<u64>, BackendError> {
        // Each memory is its own document (its id unless it has one), so a re-import replaces
        // instead of duplicating; each chunk's operation id derives from its bank and its
        // memories (see `import_chunk_id`).
        // A request holds one bank, and a document's memories go in one chunk: the server stores
        // a document as what one retain holds of it, replacing what it had, so one that has more
        // than one memory is sent as a replace and appends, in order (see `parts::import_parts`).
        let mut banks: Vec<(&str, Vec<&StoredMemory>)> = Vec::new();
        for m in memories {
            match banks.iter_mut().find(|(bank, _)| *bank == m.bank) {
                Some((_, of_bank)) => of_bank.push(m),
                None => banks.push((&m.bank, vec![m])),
            }
        }
        for (bank, of_bank) in banks {
            // A delete owed after a forget or clear (see `redelete`) would take what is imported.
            let documents = of_bank.iter().flat_map(|m| m.document_id.as_deref().into_iter().chain([m.id.as_str()]));
            self.redeletes.retaining(bank, documents);
            for chunk in chunks_of_whole_documents(of_bank, ChunkLimit::items(IMPORT_CHUNK)) {
                let chunk_id = import_chunk_id(bank, &chunk);
                // A memory of no document goes as a document of its own, marked (see
                // `LOOSE_MEMORY_KEY`): the one its mark names, else its id.
                let loose_document = |m: &StoredMemory| {
                    m.metadata.get(crate::wire::LOOSE_MEMORY_KEY).cloned().unwrap_or_else(|| m.id.clone())
                };
                // Its type goes along too (see `TYPE_KEY`): the server would make it its own.
                let metadata: Vec<BTreeMap<String, String>> = chunk
                    .iter()
                    .map(|m| {
                        let mut marked = m.metadata.clone();
                        // (A client's own value under the key is left as it is.)
                        marked.entry(crate::wire::TYPE_KEY.to_owned()).or_insert_with(|| m.kind.as_str().to_owned());
                        if m.document_id.is_none() {
                            marked.insert(crate::wire::LOOSE_MEMORY_KEY.to_owned(), loose_document(m));
                        }
                        marked
                    })
                    .collect();
                let items = chunk
                    .iter()
                    .zip(&metadata)
                    .map(|(m, metadata)| RetainItem {
                        content: &m.content,
                        context: m.context.as_deref(),
                        timestamp: retain_timestamp(&m.created_at),
                        metadata: crate::wire::SentMetadata::own(metadata),
                        tags: &m.tags,
                        document_id: Some(
                            m.document_id.as_deref().unwrap_or_else(|| &metadata[crate::wire::LOOSE_MEMORY_KEY]),
                        ),
                        update_mode: None,
                    })
                    .collect();
                self.ensure_bank(bank).await;
                let url = self.bank_url(bank, &["memories"])?;
                let parts = parts::import_parts(items);
                let mut documents: Vec<&str> =
                    parts.iter().flat_map(|p| &p.items).filter_map(|i| i.document_id).collect();
                documents.sort_unstable();
                documents.dedup();
                let chunk_id = self.import_generation(bank, &chunk_id, &documents).await?;
                for (n, part) in parts.into_iter().enumerate() {
                    let id = parts::part_operation_id(&chunk_id, n);
                    if !part.synchronous {
                        self.import_part(bank, &url, RetainRequest::asynchronous(part.items, id)).await?;
                        continue;
                    }
                    // Deleted first, as a delivery's fold is (a second synchronous retain of a
                    // document gives each memory every item's tags); failed, items alike go one
                    // by one, as a delivery's do.
                    let document = part.items[0].document_id.unwrap_or_default();
                    let alike = parts::alike_wire(&part.items);
                    let folded = async {
                        self.delete_before_fold(bank, document).await?;
                        self.import_part(bank, &url, RetainRequest::synchronous(part.items.clone())).await
                    };
                    match folded.await {
                        Ok(()) => {}
                        Err(_) if alike => {
                            // Ids of this run's own, after the delete (see `send_folded`).
                            let mark = attempt_mark();
                            for (k, mut item) in part.items.into_iter().enumerate() {
                                item.update_mode = (k > 0).then_some("append");
                                let id = parts::part_operation_id(&format!("{id}/one-by-one-{mark}"), k);
                                self.import_part(bank, &url, RetainRequest::asynchronous(vec![item], id)).await?;
                            }
                        }
                        Err(e) => return Err(said_deleted(e)),
                    }
                }
            }
        }
        Ok(None)
    }

    /// Delivers `batch` (see [`MemoryBackend::retain`]).
    async fn deliver(&self, scope: &Scope, batch: &RetainBatch) -> Result<(), BackendError> {
        self.ensure_bank(&scope.bank).await;
        let url = self.bank_url(&scope.bank, &["memories"])?;
        self.redeletes.retaining(&scope.bank, batch.items.iter().filter_map(|i| i.document_id.as_deref()));
        // One request per part (see `parts`), in order: a resend after any failure sends them all
        // again, and those the server already has are answered from their operation ids.
        // Each part is done once the server has stored it, not when it has queued it: the
        // spool lets go of a batch only then, and a document's next part never overtakes it.
        // A part that fails after others were stored says which: they are delivered, and are
        // not dead-lettered with the rest (see `BackendError::PartlyStored`).
        let mut stored: Vec<String> = Vec::new();
        for part in parts::parts(&batch.id, &batch.items) {
            let ids = part.item_ids.clone();
            let sent = match part.synchronous {
                false => self.send_part(&scope.bank, &url, part).await,
                true => {
                    let items: Vec<MemoryItem> = batch.items.iter().filter(|i| ids.contains(&i.id)).cloned().collect();
                    self.send_folded(&scope.bank, &url, &batch.id, part, &items).await
                }
            };
            let error = match sent {
                Ok(()) => {
                    stored.extend(ids);
                    continue;
                }
                // A timeout or a 5xx counts as an attempt (this very batch may be choking the
                // server) only while the server answers its health check: when that fails too,
                // the server does not answer at all, and an outage dead-letters nothing.
                Err(error @ BackendError::Transient { .. }) => self.outage_unless_answering(error).await,
                Err(error) => error,
            };
            return Err(match stored.is_empty() {
                true => error,
                false => BackendError::PartlyStored { stored, error: Box::new(error) },
            });
        }
        Ok(())
    }

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

    /// `{api_url}/{segments…}`, each segment percent-encoded.
    pub(crate) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut().expect("http URL has a path").pop_if_empty().extend(segments);
        url
    }

    /// The configured per-request timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.config.timeout
    }

    /// Sends a document's items folded into one synchronous retain (see `parts`), after deleting
    /// the document: the server answers a second synchronous retain of a document (a resend, after
    /// a lost reply or a later part's failure) by giving each of its memories every item's tags
    /// and the first item's metadata, another project's tag among them (review61 #1). When it
    /// fails and its items all carry the same tags and metadata, it goes item by item, as
    /// appends, in the same attempt (a server whose LLM outlasts `retain_timeout` cancels a
    /// synchronous retain the client gave up on, on every attempt); items with their own are
    /// not, as the appends would give them the last one's (review61 #2): the error is the part's.
    async fn send_folded(
        &self,
        bank: &str,
        url: &reqwest::Url,
        batch_id: &str,
        part: parts::Part<'_>,
        items: &[MemoryItem],
    ) -> Result<(), BackendError> {
        let document = items.first().and_then(|i| i.document_id.as_deref()).unwrap_or_default();
        let sent = async {
            self.delete_before_fold(bank, document).await?;
            self.send_part(bank, url, part).await
        };
        let error = match sent.await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        if !parts::alike(items) {
            return Err(said_deleted(error));
        }
        tracing::warn!(
            bank,
            "a document of {} memories sent at once failed ({error}); sent one memory at a time",
            items.len()
        );
        // Under operation ids of this attempt's own: the document was deleted, and the ids of an
        // earlier attempt's would be answered from the operations that stored what the delete
        // took, and store nothing (the whole document was lost: review62 #1).
        for one in parts::item_by_item(&format!("{batch_id}/after-delete-{}", attempt_mark()), items) {
            self.send_part(bank, url, one).await?;
        }
        Ok(())
    }

    /// Deletes `document` before its items go folded into a synchronous retain (see
    /// `send_folded`), first cancelling its retains still queued on the server: left by an
    /// earlier attempt (a kill while one waited), they would store its items again after it.
    async fn delete_before_fold(&self, bank: &str, document: &str) -> Result<(), BackendError> {
        self.cancel_pending_retains(bank, Some(document)).await;
        let url = self.bank_url(bank, &["documents", document])?;
        self.send_delete::<serde_json::Value>("replace document", url, self.config.timeout).await.map(drop)
    }

    /// Sends one request of an import. Not waited for, unlike a delivery's: an import answers one
    /// request of up to 500 memories, and the server's LLM may take minutes over them.
    async fn import_part(&self, bank: &str, url: &reqwest::Url, body: RetainRequest<'_>) -> Result<(), BackendError> {
        let answer = self.send("import", Method::POST, url.clone(), Some(&body), self.config.retain_timeout).await?;
        accepted("import", answer, bank)
    }

    /// Sends one part of a delivery and waits until the server has stored it (an asynchronous
    /// one: until its operation is done).
    async fn send_part(&self, bank: &str, url: &reqwest::Url, part: parts::Part<'_>) -> Result<(), BackendError> {
        let body = match part.synchronous {
            true => RetainRequest::synchronous(part.items),
            false => RetainRequest::asynchronous(part.items, part.operation_id),
        };
        let answer = self.send("retain", Method::POST, url.clone(), Some(&body), self.config.retain_timeout).await?;
        accepted("retain", answer, bank)?;
        match &body.operation_id {
            Some(operation) => self.wait_for_operation(bank, operation).await,
            None => Ok(()), // stored once answered
        }
    }

    /// The configured retain timeout.
    pub(crate) fn retain_timeout(&self) -> Duration {
        self.config.retain_timeout
    }

    /// `{api_url}/v1/default/banks/{bank}/{tail…}`. A bank or id of `.` or `..` is refused: a URL
    /// takes it for a step in the path and drops it, so `DELETE …/banks/./memories` would reach
    /// (and clear) the bank named `memories`.
    pub(crate) fn bank_url(&self, bank: &str, tail: &[&str]) -> Result<Url, BackendError> {
        if let Some(dot) = std::iter::once(&bank).chain(tail).find(|s| matches!(**s, "." | "..")) {
            return Err(BackendError::Invalid(format!(
                "{dot:?} cannot name a Hindsight bank, memory or document: a URL takes it for a step in its path"
            )));
        }
        let mut segments = vec!["v1", "default", "banks", bank];
        segments.extend_from_slice(tail);
        Ok(self.url(&segments))
    }

    /// One request: waits for the rate limiter, sends, maps failures. `Ok(None)` for a 404.
    pub(crate) async fn send<T: DeserializeOwned>(
        &self,
        what: &str,
        method: Method,
        url: Url,
        body: Option<&(impl Serialize + Sync)>,
        timeout: Duration,
    ) -> Result<Option<T>, BackendError> {
        self.send_with(what, method, url, body, timeout, Missing::Nothing).await
    }

    /// [`Self::send`] for a read of a bank whose 404 would read as "no memories" (recall,
    /// reflect, export): `Ok(None)` only when the server names what is missing (`Bank 'b' not
    /// found`), an error when the 404 names nothing (a web server's page, the bare `Not Found` of
    /// a route the server lacks): a wrong `hindsight.api_url` looked like an empty memory.
    pub(crate) async fn send_bank_read<T: DeserializeOwned>(
        &self,
        what: &str,
        method: Method,
        url: Url,
        body: Option<&(impl Serialize + Sync)>,
        timeout: Duration,
    ) -> Result<Option<T>, BackendError> {
        self.send_with(what, method, url, body, timeout, Missing::Named).await
    }

    /// `text` with the API token left out, however the server spelled it (see
    /// [`mneme_core::secret::mask`]).
    fn unsaid(&self, text: &str) -> String {
        self.config.api_token.as_ref().map_or_else(|| text.to_owned(), |token| token.masked_in(text))
    }

    async fn send_with<T: DeserializeOwned>(
        &self,
        what: &str,
        method: Method,
        url: Url,
        body: Option<&(impl Serialize + Sync)>,
        timeout: Duration,
        missing: Missing,
    ) -> Result<Option<T>, BackendError> {
        self.limiter.until_ready().await;
        let started = Instant::now();
        let mut req = self.http.request(method.clone(), url.clone()).timeout(timeout);
        if let Some(b) = body {
            req = req.json(b);
        }
        let shown = shown_url(&url);
        let result = req.send().await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => {
                self.log(what, &method, &shown, None, started);
                return Err(errors::from_transport(what, &self.shown, &e));
            }
        };
        let status = resp.status();
        self.log(what, &method, &shown, Some(status), started);
        if resp.headers().get(mneme_core::INSTANCE_HEADER).is_some_and(|v| v == mneme_core::instance_id()) {
            return Err(BackendError::permanent(format!(
                "hindsight.api_url ({}) is this mneme's own /hindsight API: everything retained would go round for ever; point it at a Hindsight server",
                self.shown
            )));
        }
        if status == StatusCode::NOT_FOUND {
            if let Missing::Named = missing {
                let text = read_answer(what, &self.shown, resp).await.unwrap_or_default();
                if errors::readable_detail(&text).is_none_or(|d| d.trim().eq_ignore_ascii_case("not found")) {
                    return Err(errors::no_such_route(what, &self.shown));
                }
            }
            return Ok(None);
        }
        if status.is_redirection() {
            // A redirect may carry the token in its URL: never repeated.
            let location = resp.headers().get(LOCATION).and_then(|v| v.to_str().ok()).map(|l| self.unsaid(l));
            return Err(errors::redirected(what, status, location.as_deref()));
        }
        let retry_after = resp.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let text = read_answer(what, &self.shown, resp).await?;
        let no_token = self.config.api_token.as_ref().is_none_or(|t| t.expose().is_empty());
        if status == StatusCode::UNAUTHORIZED && no_token {
            return Err(BackendError::permanent(format!(
                "{what}: Hindsight asks for an API key and none is set; set hindsight.api_token (or HINDSIGHT_API_TOKEN)"
            )));
        }
        if !status.is_success() {
            // A server or a proxy may say what it was sent: the token is never repeated.
            return Err(errors::from_status(what, status, retry_after.as_deref(), &self.unsaid(&text)));
        }
        // An answer that is not what Hindsight sends (a proxy's page, a server mid-restart) is
        // worth retrying: a retain carries its operation id, so a resend stores nothing twice.
        if text.trim().is_empty() {
            return serde_json::from_str("null").map(Some).map_err(|_| {
                BackendError::transient(format!("{what}: Hindsight answered {status} with an empty body"))
            });
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| BackendError::transient(format!("{what}: unexpected answer from Hindsight: {e}")))
    }

    /// A DELETE, tried again (twice at most, within `timeout` in all) when the server answers
    /// with a server error: deleting is idempotent, and Hindsight 1.1's database now and then
    /// deadlocks a delete against the server's own upkeep of the bank (a 500 "deadlock
    /// detected") that passes a moment later. An answer that took the whole timeout is not
    /// tried again.
    pub(crate) async fn send_delete<T: DeserializeOwned>(
        &self,
        what: &str,
        url: Url,
        timeout: Duration,
    ) -> Result<Option<T>, BackendError> {
        const PAUSE: Duration = Duration::from_millis(250);
        let started = Instant::now();
        let mut tries = 1;
        loop {
            let left = timeout.saturating_sub(started.elapsed());
            let result = self.send(what, Method::DELETE, url.clone(), None::<&()>, left).await;
            let pause = PAUSE * tries;
            match result {
                Err(BackendError::Transient { .. }) if tries < 3 && started.elapsed() + pause * 2 < timeout => {
                    tries += 1;
                    tokio::time::sleep(pause).await;
                }
                other => return other,
            }
        }
    }

    fn log(&self, what: &str, method: &Method, url: &str, status: Option<StatusCode>, started: Instant) {
        let took = started.elapsed();
        let status = status.map_or_else(|| "no answer".to_owned(), |s| s.as_u16().to_string());
        if self.config.debug {
            tracing::info!(target: "mneme::hindsight", "{what}: {method} {url} -> {status} in {took:?}");
        } else {
            tracing::debug!(target: "mneme::hindsight", "{what}: {method} {url} -> {status} in {took:?}");
        }
    }

    /// Sets the bank's missions once per bank per run, when a mission is configured. A failure is
    /// logged and tried again on the next write; it never blocks writes.
    async fn ensure_bank(&self, bank: &str) {
        if self.config.bank_mission.trim().is_empty()
            || self.ensured.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(bank)
        {
            return;
        }
        let body = BankRequest {
            reflect_mission: self.config.bank_mission.trim(),
            retain_mission: Some(self.config.retain_mission.trim()).filter(|m| !m.is_empty()),
        };
        let Ok(url) = self.bank_url(bank, &[]) else { return };
        match self.send::<serde_json::Value>("ensure bank", Method::PUT, url, Some(&body), self.config.timeout).await {
            Ok(Some(_)) => {
                self.ensured.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(bank.to_owned());
            }
            // Not set: a wrong api_url (writing a bank creates it), tried again next time.
            Ok(None) => {
                tracing::warn!(bank, "could not set the bank's mission: Hindsight answered 404 (will try again)")
            }
            Err(e) => tracing::warn!(bank, "could not set the bank's mission (will try again): {e}"),
        }
    }
}

/// What makes the operation ids of the retains sent after a folded document's delete this
/// attempt's own (the clock, in nanoseconds).
fn attempt_mark() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// A folded document's failure, saying that its earlier version on the server is gone: the new
/// one is only in mneme until a retry stores it (review62 #2).
fn said_deleted(error: BackendError) -> BackendError {
    let note = "; the document's earlier version on the server was deleted first: the new one waits in mneme";
    match error {
        BackendError::Transient { reason, retry_after } => {
            BackendError::Transient { reason: reason + note, retry_after }
        }
        BackendError::Unavailable { reason, retry_after } => {
            BackendError::Unavailable { reason: reason + note, retry_after }
        }
        BackendError::Unreachable { reason } => BackendError::Unreachable { reason: reason + note },
        BackendError::Permanent { reason } => BackendError::Permanent { reason: reason + note },
        other => other,
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

/// What a 404 means to a request ([`HindsightBackend::send_with`]).
#[derive(Debug, Clone, Copy)]
enum Missing {
    /// Nothing there: `Ok(None)`.
    Nothing,
    /// `Ok(None)` when the server names what is missing, else the URL is wrong.
    Named,
}

#[cfg(test)]
#[path = "backend_tests.rs"]
mod tests;
