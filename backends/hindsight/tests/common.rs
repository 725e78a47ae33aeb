//! Shared helpers for tests against the real Hindsight peer (`../shared/peers/hindsight`).
#![allow(dead_code)]

use std::time::Duration;

use mneme_hindsight::{HindsightBackend, HindsightConfig, Secret};

/// The peer's URL from `MNEME_HINDSIGHT_URL`. Outside CI a missing peer skips the test (with a
/// message); in CI (`CI=true`) it fails, so a run without the peer cannot pass silently.
pub fn peer_url() -> Option<String> {
    match std::env::var("MNEME_HINDSIGHT_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("MNEME_HINDSIGHT_URL is not set: .ci/run must start the Hindsight peer")
        }
        _ => {
            eprintln!("skipping: set MNEME_HINDSIGHT_URL to a running Hindsight peer (see .ci/run)");
            None
        }
    }
}

pub fn config(url: &str, token: Option<&str>) -> HindsightConfig {
    HindsightConfig {
        api_token: token.map(Secret::new),
        requests_per_second: 50,
        burst: 100,
        timeout: Duration::from_secs(10),
        recall_timeout: Duration::from_secs(20),
        retain_timeout: Duration::from_secs(20),
        reflect_timeout: Duration::from_secs(60),
        ..HindsightConfig::new(url)
    }
}

pub fn backend(url: &str) -> HindsightBackend {
    HindsightBackend::new(config(url, None)).unwrap()
}

/// A bank name no other test run uses.
pub fn fresh_bank(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{nanos:x}")
}

/// Creates a bank that stores content as chunks (the mock LLM would otherwise split it into "facts").
pub async fn chunk_bank(url: &str, bank: &str) {
    let r = reqwest::Client::new()
        .put(format!("{url}/v1/default/banks/{bank}"))
        .json(&serde_json::json!({"retain_extraction_mode": "chunks", "enable_observations": false}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

/// Every memory text in a bank (the server's list route).
pub async fn list_texts(url: &str, bank: &str) -> Vec<String> {
    let v: serde_json::Value = reqwest::Client::new()
        .get(format!("{url}/v1/default/banks/{bank}/memories/list?limit=1000"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["items"]
        .as_array()
        .map(|a| a.iter().map(|i| i["text"].as_str().unwrap_or("").to_owned()).collect())
        .unwrap_or_default()
}

/// Waits until the bank lists `n` memories (async retains finish in the background).
pub async fn wait_for_count(url: &str, bank: &str, n: usize) -> Vec<String> {
    for _ in 0..120 {
        let texts = list_texts(url, bank).await;
        if texts.len() >= n {
            // Give a duplicate a moment to show up, if there were one.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            return list_texts(url, bank).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    list_texts(url, bank).await
}

/// The document's text once it holds every one of `needles` (retains are asynchronous).
pub async fn wait_for_document(url: &str, bank: &str, id: &str, needles: &[&str]) -> String {
    let mut text = String::new();
    for _ in 0..120 {
        let res = reqwest::get(format!("{url}/v1/default/banks/{bank}/documents/{id}")).await.unwrap();
        if res.status().is_success() {
            let v: serde_json::Value = res.json().await.unwrap();
            text = v["original_text"].as_str().unwrap_or_default().to_owned();
            if needles.iter().all(|n| text.contains(n)) {
                return text;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("document {id} never held {needles:?}: {text:?}");
}

/// A batch id no other run used: Hindsight keeps operation ids across banks and restarts.
pub fn fresh_batch_id() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{nanos:016x}{:08x}{n:08x}", std::process::id())
}
