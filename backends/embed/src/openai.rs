//! An OpenAI-compatible embeddings endpoint: `POST {url}/embeddings` with `{model, input: [..]}`,
//! answered with `{data: [{index, embedding}]}` — what OpenAI, Ollama, llama.cpp's server and LM
//! Studio all speak. The key is a [`Secret`]: never logged, never in an error.

use std::time::Duration;

use mneme_core::Secret;
use serde::Deserialize;

use crate::vector::normalize;
use crate::{EmbedError, Embedder};

/// Where the endpoint is and how to talk to it.
#[derive(Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1`, e.g. `http://localhost:11434/v1` (Ollama).
    pub url: String,
    /// The model name the endpoint knows.
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<Secret>,
    /// Per request.
    pub timeout: Duration,
    /// The vectors' length, when known in advance; otherwise the first answer tells.
    pub dim: Option<usize>,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("url", &shown(&self.url))
            .field("model", &self.model)
            .field("api_key", &self.api_key)
            .field("timeout", &self.timeout)
            .field("dim", &self.dim)
            .finish()
    }
}

/// A URL as it may be shown (in errors, the status, the log and the stored model id): a user and
/// password in it (`http://user:pass@host/v1`) left out, as the key is.
pub fn shown(url: &str) -> String {
    let url = url.trim_end_matches('/');
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else { return url.to_owned() };
    let authority_end = url[scheme_end..].find(['/', '?', '#']).map_or(url.len(), |i| scheme_end + i);
    match url[scheme_end..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &url[..scheme_end], &url[scheme_end + at + 1..]),
        None => url.to_owned(),
    }
}

/// A client of one endpoint and model.
pub struct OpenAi {
    config: OpenAiConfig,
    http: reqwest::blocking::Client,
    id: String,
    /// `{url}/embeddings` as errors show it (see [`shown`]).
    shown_endpoint: String,
    dim: std::sync::OnceLock<usize>,
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Datum>,
}

#[derive(Deserialize)]
struct Datum {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

impl OpenAi {
    /// A client; nothing is sent until [`Embedder::embed`].
    pub fn new(config: OpenAiConfig) -> Result<OpenAi, EmbedError> {
        let http = reqwest::blocking::Client::builder()
            .timeout(config.timeout)
            .user_agent(concat!("mneme/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| EmbedError::Invalid(format!("cannot build the HTTP client: {e}")))?;
        let id = Self::model_id_for(&config);
        let dim = std::sync::OnceLock::new();
        if let Some(d) = config.dim {
            let _ = dim.set(d);
        }
        let shown_endpoint = format!("{}/embeddings", shown(&config.url));
        Ok(OpenAi { config, http, id, shown_endpoint, dim })
    }
}

impl OpenAi {
    /// The id vectors of this endpoint and model are stored under.
    pub fn model_id_for(config: &OpenAiConfig) -> String {
        format!("openai:{}@{}", config.model, shown(&config.url))
    }
}

impl Embedder for OpenAi {
    fn model_id(&self) -> &str {
        &self.id
    }

    /// The configured dimension, else the one the first answer had (0 before any).
    fn dim(&self) -> usize {
        self.dim.get().copied().unwrap_or(0)
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let endpoint = format!("{}/embeddings", self.config.url.trim_end_matches('/'));
        let url = &self.shown_endpoint;
        let mut req = self.http.post(&endpoint).json(&serde_json::json!({"model": self.config.model, "input": texts}));
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key.expose());
        }
        let resp = req.send().map_err(|e| {
            let what = if e.is_timeout() { "timed out" } else { "cannot connect" };
            EmbedError::Unavailable(format!("{url} {what}"))
        })?;
        let status = resp.status();
        if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
            return Err(EmbedError::Unavailable(format!("{url} answered {status}")));
        }
        if !status.is_success() {
            let body: String = resp.text().unwrap_or_default().chars().take(200).collect();
            return Err(EmbedError::Invalid(format!("{url} answered {status}: {body}")));
        }
        let answer: Answer = resp.json().map_err(|e| {
            EmbedError::Invalid(format!("{url} answered something else than embeddings: {}", e.without_url()))
        })?;
        if answer.data.len() != texts.len() {
            return Err(EmbedError::Invalid(format!(
                "{url} gave {} vectors for {} texts",
                answer.data.len(),
                texts.len()
            )));
        }
        let mut data = answer.data;
        data.sort_by_key(|d| d.index.unwrap_or(0));
        let want = *self.dim.get_or_init(|| data[0].embedding.len());
        let mut out = Vec::with_capacity(data.len());
        for d in data {
            if d.embedding.len() != want || want == 0 {
                return Err(EmbedError::Invalid(format!(
                    "{url} gave a vector of {} dimensions, expected {want}",
                    d.embedding.len()
                )));
            }
            let mut v = d.embedding;
            // A value past f32's range arrives as infinity, and a vector of zeros points
            // nowhere: stored, either would sit in the index matching nothing.
            if v.iter().any(|x| !x.is_finite()) {
                return Err(EmbedError::Invalid(format!("{url} gave a vector with a value beyond a 32-bit float")));
            }
            if v.iter().all(|x| *x == 0.0) {
                return Err(EmbedError::Invalid(format!("{url} gave a vector of zeros")));
            }
            normalize(&mut v);
            out.push(v);
        }
        Ok(out)
    }
}
