//! What the local backend's tests share: building items and queries, waiting for the
//! embedding thread, and an OpenAI-compatible endpoint on 127.0.0.1 (see [`stub`]).

// Not every test binary uses every helper.
#![allow(dead_code)]

pub mod stub;

use std::time::{Duration, Instant};

use mneme_core::*;
use mneme_local::{LocalBackend, RecallMode};

pub fn item(id: &str, content: &str, session: &str) -> MemoryItem {
    MemoryItem::new(id, content, "2026-01-02T03:04:05Z").in_session(session)
}

pub fn scope() -> Scope {
    Scope { bank: "b".into(), tags: vec![] }
}

pub fn query(q: &str) -> RecallQuery {
    RecallQuery {
        query: q.into(),
        budget: Budget::Mid,
        max_tokens: 4096,
        types: vec![],
        tags: vec![],
        tags_match: TagsMatch::Any,
        deadline: None,
    }
}

pub async fn retain(b: &LocalBackend, items: Vec<MemoryItem>) {
    for (i, chunk) in items.chunks(64).enumerate() {
        b.retain(&scope(), &RetainBatch { id: format!("batch-{i}-{}", chunk[0].id), items: chunk.to_vec() })
            .await
            .unwrap();
    }
}

pub async fn recall(b: &LocalBackend, q: &str, mode: RecallMode) -> Vec<String> {
    b.recall_with(&scope(), &query(q), mode).await.unwrap().into_iter().map(|r| r.text).collect()
}

/// Waits until every passage has a vector; returns the last status.
pub async fn embedded(b: &LocalBackend, within: Duration) -> EmbeddingStatus {
    let until = Instant::now() + within;
    loop {
        let e = b.embedding_status().await.expect("an embedder is configured");
        if e.state == "ready" && e.embedded == e.passages && e.banks_measuring == 0 {
            return e;
        }
        assert!(Instant::now() < until, "not embedded in {within:?}: {e:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to 30 s) until the embedder's error says `says`: the embedding thread tries again
/// after a pause that grows while the endpoint fails, so no fixed sleep is long enough on a busy
/// machine. Returns the last status either way; the caller asserts on it.
pub async fn refused_with(b: &LocalBackend, says: &str) -> EmbeddingStatus {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let e = b.embedding_status().await.unwrap();
        if e.error.as_deref().is_some_and(|m| m.contains(says)) || Instant::now() > until {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
