//! An OpenAI-compatible embeddings endpoint: `POST {url}/embeddings` with `{model, input: [..]}`,
//! answered with `{data: [{index, embedding}]}` — what OpenAI, Ollama, llama.cpp's server and LM
//! Studio all speak. The key is a [`Secret`]: never logged, never in an error.

use std::io::Read;
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

/// The longest vector taken (OpenAI's largest model gives 3,072; an int8 dot product of more
/// than ~130,000 would overflow its sum).
pub const MAX_DIM: usize = 65_536;

/// The most of an answer read: a text's vector written as JSON numbers of up to 24 characters
/// each, at [`MAX_DIM`]; an error's body is read to 4 KiB. Past that it is not an answer.
fn answer_limit(texts: usize) -> u64 {
    (texts as u64).saturating_mul(MAX_DIM as u64 * 24).saturating_add(64 << 10)
}

/// Answers of a new length, one after another, before it is taken as the endpoint's (another
/// model served under the same name): one odd answer fixed the length for good, and every
/// stored vector was dropped for it.
const NEW_LENGTH_CONFIRMED_AFTER: u32 = 3;

/// A client of one endpoint and model.
pub struct OpenAi {
    config: OpenAiConfig,
    http: reqwest::blocking::Client,
    id: String,
    /// `{url}/embeddings` as errors show it (see [`shown`]).
    shown_endpoint: String,
    dims: std::sync::Mutex<Dims>,
}

/// The vectors' length as the answers tell it, when `embedding_dim` is unset.
#[derive(Default)]
struct Dims {
    /// The length answers are taken at (0: none known yet).
    known: usize,
    /// Another length, and how many answers running have had it.
    other: Option<(usize, u32)>,
    /// Lengths taken in place of another since the start: each makes the next take four times
    /// as many answers running (an endpoint that flaps between two models re-embedded the whole
    /// store again and again).
    changes: u32,
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
        let mut http = reqwest::blocking::Client::builder()
            .timeout(config.timeout)
            .user_agent(concat!("mneme/", env!("CARGO_PKG_VERSION")))
            // The passages go where the config says and nowhere else: a redirect is an answer
            // (the text was sent to the host it named, without a word).
            .redirect(reqwest::redirect::Policy::none());
        if is_loopback(&config.url) {
            // A proxy from the environment cannot reach this machine's loopback (and would see
            // the passages and the key): a local server is reached directly.
            http = http.no_proxy();
        }
        let http = http.build().map_err(|e| EmbedError::Invalid(format!("cannot build the HTTP client: {e}")))?;
        let id = Self::model_id_for(&config);
        let dims = std::sync::Mutex::new(Dims { known: config.dim.unwrap_or(0), other: None, changes: 0 });
        let shown_endpoint = format!("{}/embeddings", shown(&config.url));
        Ok(OpenAi { config, http, id, shown_endpoint, dims })
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

    /// The configured dimension, else the one the answers have (0 before any).
    fn dim(&self) -> usize {
        self.dims.lock().unwrap_or_else(|p| p.into_inner()).known
    }

    fn expect_dim(&self, dim: usize) {
        let mut dims = self.dims.lock().unwrap_or_else(|p| p.into_inner());
        if dims.known == 0 {
            dims.known = dim;
        }
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        // Whatever an error quotes of the answer (a body, a JSON value), the key is not in it:
        // an endpoint or a proxy may say what it was sent.
        self.ask(texts).map_err(|e| match e {
            EmbedError::Unavailable(m) => EmbedError::Unavailable(self.unsaid(&m)),
            EmbedError::Invalid(m) => EmbedError::Invalid(self.unsaid(&m)),
            EmbedError::Unsettled(m) => EmbedError::Unsettled(self.unsaid(&m)),
            EmbedError::TimedOut(m) => EmbedError::TimedOut(self.unsaid(&m)),
        })
    }
}

impl OpenAi {
    fn ask(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let endpoint = format!("{}/embeddings", self.config.url.trim_end_matches('/'));
        let url = &self.shown_endpoint;
        let mut req = self.http.post(&endpoint).json(&serde_json::json!({"model": self.config.model, "input": texts}));
        if let Some(key) = &self.config.api_key {
            req = req.bearer_auth(key.expose());
        }
        let resp = req.send().map_err(|e| {
            if e.is_timeout() {
                EmbedError::TimedOut(format!("{url} timed out ({} texts)", texts.len()))
            } else {
                EmbedError::Unavailable(format!("{url} cannot connect"))
            }
        })?;
        let status = resp.status();
        if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
            return Err(EmbedError::Unavailable(format!("{url} answered {status}")));
        }
        if status.is_redirection() {
            let to = resp.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok()).map(shown);
            let to = to.map_or_else(String::new, |to| format!(" to {}", self.unsaid(&to)));
            return Err(EmbedError::Invalid(format!(
                "{url} answered {status}{to}, which is not followed: set local.embedding_url to where it points"
            )));
        }
        if !status.is_success() {
            let mut body = Vec::new();
            let _ = resp.take(4096).read_to_end(&mut body);
            // The key left out before the cut: cut first, a key across it stayed in part.
            let body: String = self.unsaid(&String::from_utf8_lossy(&body)).chars().take(200).collect();
            return Err(EmbedError::Invalid(format!("{url} answered {status}: {body}")));
        }
        // Read whole before it is parsed, and bounded: a timeout or a connection broken while
        // the answer is read is the endpoint being unavailable (it was taken for a bad answer,
        // and the passages were left out for good), and an endless answer is not read to the end.
        let limit = answer_limit(texts.len());
        let mut body = Vec::new();
        resp.take(limit + 1).read_to_end(&mut body).map_err(|e| {
            let timed_out = e.kind() == std::io::ErrorKind::TimedOut
                || std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<reqwest::Error>())
                    .is_some_and(reqwest::Error::is_timeout);
            match timed_out {
                true => EmbedError::TimedOut(format!("{url} timed out while answering ({} texts)", texts.len())),
                false => EmbedError::Unavailable(format!("{url} broke off its answer: {e}")),
            }
        })?;
        if body.len() as u64 > limit {
            return Err(EmbedError::Invalid(format!(
                "{url} answered more than {limit} bytes for {} texts",
                texts.len()
            )));
        }
        let answer: Answer = serde_json::from_slice(&body).map_err(|e| {
            // serde quotes the value it could not read, whole (a 200 KB text reached the
            // status, a notice and the log): the key left out first, then cut.
            let why: String = self.unsaid(&e.to_string()).chars().take(200).collect();
            EmbedError::Invalid(format!("{url} answered something else than embeddings: {why}"))
        })?;
        let data = in_order(answer.data, texts.len()).map_err(|why| EmbedError::Invalid(format!("{url} {why}")))?;
        // The length is learned from an answer that holds up, never from a broken one (a first
        // answer of empty vectors fixed the length at 0, refusing everything after it).
        let first = data[0].embedding.len();
        if first == 0 || first > MAX_DIM || data.iter().any(|d| d.embedding.len() != first) {
            return Err(EmbedError::Invalid(format!(
                "{url} gave vectors of {} dimensions",
                data.iter().map(|d| d.embedding.len().to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        let want = self.length_of(first).map_err(|why| match why {
            Length::Configured(why) => EmbedError::Invalid(format!("{url} {why}")),
            Length::Unsettled(why) => EmbedError::Unsettled(format!("{url} {why}")),
        })?;
        let mut out = Vec::with_capacity(data.len());
        for d in data {
            if d.embedding.len() != want {
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

/// Why an answer's length is refused (see [`OpenAi::length_of`]).
#[derive(Debug, PartialEq, Eq)]
enum Length {
    /// Not the configured `local.embedding_dim`.
    Configured(String),
    /// Not the length answers have had, which another takes only after answers running.
    Unsettled(String),
}

impl OpenAi {
    /// The length an answer whose vectors are `got` long is taken at, or why it is refused.
    /// Unconfigured, the first answer sets it, and another length takes its place once
    /// [`NEW_LENGTH_CONFIRMED_AFTER`] answers running have had it (the stored vectors are then
    /// embedded again): one odd answer is refused, and changes nothing.
    fn length_of(&self, got: usize) -> Result<usize, Length> {
        let mut dims = self.dims.lock().unwrap_or_else(|p| p.into_inner());
        if dims.known == 0 || dims.known == got {
            dims.known = got;
            dims.other = None;
            return Ok(got);
        }
        let known = dims.known;
        if self.config.dim.is_some() {
            return Err(Length::Configured(format!(
                "gave a vector of {got} dimensions, expected {known} (local.embedding_dim)"
            )));
        }
        let running = match dims.other {
            Some((other, n)) if other == got => n + 1,
            _ => 1,
        };
        let needed = NEW_LENGTH_CONFIRMED_AFTER * 4u32.pow(dims.changes.min(6));
        if running >= needed {
            dims.known = got;
            dims.other = None;
            dims.changes += 1;
            return Ok(got);
        }
        dims.other = Some((got, running));
        Err(Length::Unsettled(format!(
            "gave a vector of {got} dimensions, expected {known} (taken as the new length after {needed} answers running)"
        )))
    }

    /// `text` with the key left out.
    /// (A key of a few letters is a placeholder a local server ignores, "ollama" say: left
    /// out, it made `http://****:11434` of every error's URL.)
    fn unsaid(&self, text: &str) -> String {
        match &self.config.api_key {
            Some(key) if key.expose().len() >= 8 => key.masked_in(text),
            _ => text.to_owned(),
        }
    }
}

/// Whether the URL's host is this machine's loopback (`localhost`, `127.0.0.0/8`, `::1`).
fn is_loopback(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else { return false };
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The answer's vectors in the order of the texts: by their `index` when every one has one (each
/// of `0..n` once), as sent when none has. Sorting by an index trusted as it came gave a text
/// another's vector when a proxy numbered the halves of a batch on their own (`0, 1, 0, 1`).
fn in_order(data: Vec<Datum>, n: usize) -> Result<Vec<Datum>, String> {
    if data.len() != n {
        return Err(format!("gave {} vectors for {n} texts", data.len()));
    }
    let indexed = data.iter().filter(|d| d.index.is_some()).count();
    if indexed == 0 {
        return Ok(data);
    }
    if indexed != n {
        return Err(format!("numbered {indexed} of its {n} vectors"));
    }
    let mut slots: Vec<Option<Datum>> = (0..n).map(|_| None).collect();
    for d in data {
        let i = d.index.unwrap_or(usize::MAX);
        match slots.get_mut(i) {
            Some(slot @ None) => *slot = Some(d),
            _ => return Err(format!("numbered its vectors other than 0 to {} once each", n - 1)),
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

#[cfg(test)]
mod order_tests {
    use super::*;

    fn datum(index: Option<usize>, x: f32) -> Datum {
        Datum { index, embedding: vec![x] }
    }

    #[test]
    fn vectors_are_put_in_the_texts_order_by_an_index_that_holds_up() {
        let firsts = |r: Result<Vec<Datum>, String>| r.map(|d| d.iter().map(|d| d.embedding[0]).collect::<Vec<_>>());
        assert_eq!(firsts(in_order(vec![datum(Some(1), 1.0), datum(Some(0), 0.0)], 2)), Ok(vec![0.0, 1.0]));
        assert_eq!(firsts(in_order(vec![datum(None, 0.0), datum(None, 1.0)], 2)), Ok(vec![0.0, 1.0]));
        // A proxy numbering the halves of a batch on their own, an index past the end, a mix.
        let halves = vec![datum(Some(0), 0.0), datum(Some(1), 1.0), datum(Some(0), 2.0), datum(Some(1), 3.0)];
        assert!(in_order(halves, 4).is_err());
        assert!(in_order(vec![datum(Some(0), 0.0), datum(Some(2), 1.0)], 2).is_err());
        assert!(in_order(vec![datum(Some(0), 0.0), datum(None, 1.0)], 2).is_err());
        assert!(in_order(vec![datum(None, 0.0)], 2).is_err());
    }
}

#[cfg(test)]
mod length_tests {
    use super::*;

    fn client() -> OpenAi {
        let config = OpenAiConfig {
            url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
            api_key: None,
            timeout: Duration::from_secs(1),
            dim: None,
        };
        OpenAi::new(config).unwrap()
    }

    /// A key is left out of what an endpoint says, but not a placeholder of a few letters
    /// ("ollama" made `http://****:11434` of every error's URL); a long answer is cut.
    #[test]
    fn a_key_is_left_out_but_not_a_placeholder() {
        let with_key = |key: &str| {
            let mut config = client().config.clone();
            config.api_key = Some(mneme_core::Secret::new(key.to_owned()));
            OpenAi::new(config).unwrap()
        };
        assert_eq!(with_key("sk-0123456789").unsaid("Bearer sk-0123456789 refused"), "Bearer **** refused");
        let key = with_key("Zm9vYmFy/c2VjcmV0+a2V5MTIz==");
        assert_eq!(
            key.unsaid(r#"{"message":"Incorrect API key: Zm9vYmFy\/c2VjcmV0+a2V5MTIz=="}"#),
            r#"{"message":"Incorrect API key: ****"}"#
        );
        assert_eq!(key.unsaid("to /login?key=Zm9vYmFy%2Fc2VjcmV0%2Ba2V5MTIz%3D%3D"), "to /login?key=****");
        assert_eq!(with_key("ollama").unsaid("http://ollama:11434/v1"), "http://ollama:11434/v1");
    }

    /// The stored length holds through odd answers; three running give another, and each change
    /// makes the next take four times as many (an endpoint flapping between two models re-embedded
    /// the store again and again).
    #[test]
    fn a_new_length_takes_answers_running_and_more_each_time() {
        let c = client();
        c.expect_dim(64);
        assert!(c.length_of(32).is_err());
        assert_eq!(c.length_of(64), Ok(64));
        assert!(c.length_of(32).is_err() && c.length_of(32).is_err());
        assert_eq!(c.length_of(32), Ok(32));
        assert_eq!(c.dim(), 32);
        for _ in 0..11 {
            assert!(c.length_of(64).is_err());
        }
        assert_eq!(c.length_of(64), Ok(64));
        for _ in 0..47 {
            assert!(c.length_of(32).is_err());
        }
        assert_eq!(c.length_of(32), Ok(32));
    }
}
