//! The requests of [`HindsightBackend`]: the rate limiter, the timeouts, and what each answer
//! of the server (or of whatever answers at `api_url`) means to the caller.

use std::time::{Duration, Instant};

use mneme_core::*;
use reqwest::header::{LOCATION, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::*;

/// Whether a retain or an import was taken. Writing creates banks, so a 404 is a wrong api_url
/// or bank id (once taken for success: a migration "copied" nothing). An answer that says it
/// did not succeed, or that is not a retain's answer at all (an empty 200 from a proxy), is
/// retried: the resend carries the same operation id, so nothing is stored twice.
pub(super) fn accepted(what: &str, answer: Option<RetainResponse>, bank: &str) -> Result<(), BackendError> {
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

/// What a 404 means to a request ([`HindsightBackend::send_with`]).
#[derive(Debug, Clone, Copy)]
enum Missing {
    /// Nothing there: `Ok(None)`.
    Nothing,
    /// `Ok(None)` when the server names what is missing, else the URL is wrong.
    Named,
}

impl HindsightBackend {
    /// `{api_url}/{segments…}`, each segment percent-encoded.
    pub(crate) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut().expect("http URL has a path").pop_if_empty().extend(segments);
        url
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
}
