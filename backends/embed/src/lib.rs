//! mneme-embed: sentence embedders for the local store's semantic recall.
//!
//! - [`Embedder`]: text in, unit-length vectors out, with a stable model id (vectors of another id
//!   are computed again).
//! - [`MiniLm`]: the built-in model, all-MiniLM-L6-v2 (Apache-2.0, `model/`), compiled into the
//!   binary: nothing is downloaded, ever.
//! - [`OpenAi`]: any OpenAI-compatible `/v1/embeddings` endpoint (Ollama, llama.cpp's server,
//!   LM Studio, OpenAI).
//!
//! Every call blocks: run it on a blocking thread, never on an async worker.

mod activation;
mod attention;
/// The int8 products of the built-in model's forward pass; public for its benchmark.
pub mod kernel;
#[cfg(target_arch = "x86_64")]
mod kernel_vnni;
mod minilm;
mod openai;
pub mod vector;

pub use minilm::MiniLm;
pub use openai::{OpenAi, OpenAiConfig, MAX_DIM};

/// Why texts could not be embedded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    /// Worth trying again later: the endpoint is down, slow or busy.
    #[error("embedder unavailable: {0}")]
    Unavailable(String),
    /// The endpoint answered with something unusable (an error, a wrong dimension).
    #[error("embedder answered badly: {0}")]
    Invalid(String),
    /// The endpoint's answers disagree on the vectors' length (two models behind one name, a
    /// rolling upgrade) and this one had the other length: the text is not at fault, and is
    /// worth embedding again later.
    #[error("embedder answered badly: {0}")]
    Unsettled(String),
    /// The endpoint took longer than its timeout: worth trying again, with fewer texts at a
    /// time (a slow endpoint embeds a few texts in time and never a whole batch).
    #[error("embedder unavailable: {0}")]
    TimedOut(String),
}

/// Texts to vectors.
pub trait Embedder: Send + Sync {
    /// The model's stable id (e.g. `builtin:all-MiniLM-L6-v2`): stored with every vector, and a
    /// change means every vector is computed again.
    fn model_id(&self) -> &str;

    /// The vectors' length.
    fn dim(&self) -> usize;

    /// The length the stored vectors have, for an embedder that learns its own from its
    /// answers: taken until an answer says otherwise (see `OpenAi`). The built-in model's is fixed.
    fn expect_dim(&self, _dim: usize) {}

    /// One unit-length vector per text, in order. Blocks.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}
