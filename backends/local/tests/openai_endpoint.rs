//! An OpenAI-compatible endpoint (a real HTTP server on 127.0.0.1, `common::stub`) that is
//! down, slow, refusing or answering vectors of another length never fails a retain or a
//! recall, is reported once per outage, and is caught up with once it answers; a model change
//! re-embeds.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::stub::*;
use common::*;
use mneme_core::*;
use mneme_local::{LocalBackend, LocalConfig, RecallMode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_is_down_never_fails_anything_and_is_caught_up_with() {
    let dir = tempfile::tempdir().unwrap();
    let mut stub = Stub::start();
    stub.stop(); // down from the start
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_secs(2));
    let mut events = b.take_events().expect("the local backend raises events");
    retain(&b, numbered(0, 20)).await;
    // Recall answers, by BM25, quickly.
    let t = Instant::now();
    assert_eq!(
        recall(&b, "walrus7", RecallMode::Hybrid).await,
        vec!["note 7 about walrus7 and the harbour".to_owned()]
    );
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    for _ in 0..5 {
        assert!(!recall(&b, "walrus3 harbour", RecallMode::Hybrid).await.is_empty());
    }
    // The embedding thread's first attempt can come after those recalls on a busy machine (they
    // do not wait for it): its outage notice says it has failed, and then the status shows it.
    let outage = tokio::time::timeout(Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
    assert!(outage.problem && outage.message.contains("BM25"), "{outage:?}");
    let e = b.embedding_status().await.unwrap();
    assert_eq!(e.state, "unavailable");
    assert_eq!(e.embedded, 0);
    assert!(e.error.as_deref().is_some_and(|m| m.contains("cannot connect")), "{e:?}");
    // Up again: the backfill catches up, and the end of the outage is told once.
    stub.restart();
    let e = embedded(&b, Duration::from_secs(30)).await;
    assert_eq!(e.embedded, 20);
    let back = events.recv().await.unwrap();
    assert!(!back.problem, "one notice for the whole outage, then its end: {back:?}");
    assert!(events.try_recv().is_err());
    let dense = recall(&b, "note 12 about walrus12", RecallMode::Dense).await;
    assert_eq!(dense.first().map(String::as_str), Some("note 12 about walrus12 and the harbour"));
}

/// The store refusing the vectors (its disk full, its file locked) is an outage like the
/// embedder's: semantic recall comes back once the store takes writes again, without a restart
/// (the embedding thread used to stop for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_refuses_the_vectors_for_a_while_is_caught_up_with() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let mut stub = Stub::start();
    stub.stop();
    let b = openai(&path, &stub, "hash-64", Duration::from_secs(2));
    retain(&b, numbered(0, 10)).await;
    refused_with(&b, "cannot connect").await;
    // Another process holds the store's write lock past the writer's 5 s busy timeout.
    let locker = rusqlite::Connection::open(&path).unwrap();
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();
    stub.restart();
    let e = refused_with(&b, "cannot store the vectors").await;
    assert!(e.error.as_deref().is_some_and(|m| m.contains("cannot store the vectors")), "{e:?}");
    locker.execute_batch("ROLLBACK").unwrap();
    let e = embedded(&b, Duration::from_secs(90)).await;
    assert_eq!(e.embedded, 10);
}

/// A text the endpoint refuses is left to BM25; the passages around it, and after it, get their
/// vectors (the whole batch was retried for good, and nothing later was ever embedded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_the_endpoint_refuses_holds_up_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_secs(2));
    let mut items = numbered(0, 5);
    items.insert(2, item("poison", "POISON: a passage too large for the endpoint", "sp"));
    retain(&b, items).await;
    retain(&b, numbered(5, 5)).await;
    let until = Instant::now() + Duration::from_secs(60);
    let e = loop {
        let e = b.embedding_status().await.unwrap();
        if e.embedded == 10 || Instant::now() > until {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((e.embedded, e.passages), (10, 11), "{e:?}");
    assert_eq!(recall(&b, "POISON passage", RecallMode::Hybrid).await.len(), 1, "found by its words");
    // Alone in its batch (the last passage retained), it is left out the same way: the endpoint
    // still embeds a plain word, so semantic recall is not taken for down (it was, for every
    // question, until another passage came).
    retain(&b, vec![item("poison-2", "POISON again, on its own", "sp2")]).await;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let e = b.embedding_status().await.unwrap();
        assert_eq!((e.state.as_str(), e.error.as_deref()), ("ready", None), "{e:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!recall(&b, "walrus3", RecallMode::Dense).await.is_empty(), "the dense side answers");
}

/// A query the embedder was too slow for leaves recall to BM25 only until the embedder answers
/// again, found out by the idle embedding thread: not until the next retain woke it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semantic_recall_comes_back_after_a_slow_query_without_a_retain() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = embedded_openai(&dir.path().join("m.db"), &stub, Duration::from_millis(300), 10).await;
    stub.set(Answer::Slow(3000));
    assert!(!recall(&b, "walrus4", RecallMode::Hybrid).await.is_empty());
    assert_eq!(b.embedding_status().await.unwrap().state, "unavailable");
    stub.set(Answer::Vectors);
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.state, "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_broken_endpoint_leaves_recall_to_bm25() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_millis(300));
    let mut events = b.take_events().unwrap();
    retain(&b, numbered(0, 10)).await;
    embedded(&b, Duration::from_secs(10)).await;
    // Slow: the query's vector is not waited for past the timeout.
    stub.set(Answer::Slow(3000));
    let t = Instant::now();
    assert_eq!(
        recall(&b, "walrus4", RecallMode::Hybrid).await.first().map(String::as_str),
        Some("note 4 about walrus4 and the harbour")
    );
    assert!(t.elapsed() < Duration::from_millis(1500), "{:?}", t.elapsed());
    assert!(events.recv().await.unwrap().problem);
    assert_eq!(b.embedding_status().await.unwrap().state, "unavailable");
    // Vectors of zeros are refused, not stored. (Vectors of another length: below.)
    stub.set(Answer::Zeros);
    retain(&b, numbered(10, 5)).await;
    // Until the embedding thread has tried them: after its retry pause, which grows while the
    // endpoint fails, so no fixed sleep is long enough on a busy machine.
    let e = refused_with(&b, "vector of zeros").await;
    assert_eq!((e.state.as_str(), e.embedded, e.passages), ("unavailable", 10, 15), "{e:?}");
    assert_eq!(
        recall(&b, "walrus12", RecallMode::Hybrid).await.first().map(String::as_str),
        Some("note 12 about walrus12 and the harbour")
    );
    // Values past f32's range, or zeros: refused the same way, never stored as vectors that
    // match nothing.
    // An answer broken off is the endpoint being unavailable, not a bad answer (which would leave
    // the passages out for good when some of a batch came through).
    stub.set(Answer::BrokenOff);
    let e = refused_with(&b, "broke off its answer").await;
    assert_eq!((e.state.as_str(), e.embedded, e.passages), ("unavailable", 10, 15), "{e:?}");
    assert!(e.error.as_deref().is_some_and(|m| m.contains("broke off its answer")), "{e:?}");
    for (answer, says) in [(Answer::Overflowing, "beyond a 32-bit float"), (Answer::Zeros, "vector of zeros")] {
        stub.set(answer);
        let e = refused_with(&b, says).await;
        assert_eq!((e.state.as_str(), e.embedded, e.passages), ("unavailable", 10, 15), "{e:?}");
    }
    // Answering properly again: caught up.
    stub.set(Answer::Vectors);
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_change_re_embeds_every_passage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let stub = Stub::start();
    {
        let b = openai(&path, &stub, "model-a", Duration::from_secs(2));
        retain(&b, numbered(0, 30)).await;
        embedded(&b, Duration::from_secs(10)).await;
    }
    let before = stub.requests.load(Ordering::SeqCst);
    // Reopened with the same model: nothing to compute.
    {
        let b = openai(&path, &stub, "model-a", Duration::from_secs(2));
        assert_eq!(embedded(&b, Duration::from_secs(10)).await.embedded, 30);
    }
    assert_eq!(stub.requests.load(Ordering::SeqCst), before, "stored vectors are reused");
    let b = openai(&path, &stub, "model-b", Duration::from_secs(2));
    let e = embedded(&b, Duration::from_secs(10)).await;
    assert_eq!((e.model.as_str(), e.embedded), (format!("openai:model-b@{}", stub.url()).as_str(), 30));
    assert!(stub.requests.load(Ordering::SeqCst) > before);
    drop(b);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let by_model: Vec<(String, i64)> = conn
        .prepare("SELECT model, count(*) FROM passage_vectors GROUP BY model")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(by_model, vec![(format!("openai:model-b@{}", stub.url()), 30)]);
}

/// An endpoint that serves vectors of another length under the same model name after a restart
/// (another model behind it, `embedding_dim` unset): every passage is embedded again at the new
/// length, and recall has its dense side back (the stored vectors could no longer be compared
/// with a question's, and recall went on with BM25 alone, silently).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_of_a_new_length_after_a_restart_are_computed_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let stub = Stub::start();
    {
        let b = openai(&path, &stub, "hash-64", Duration::from_secs(5));
        retain(&b, numbered(0, 10)).await;
        assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 10);
        assert!(!recall(&b, "walrus4", RecallMode::Dense).await.is_empty());
    }
    stub.set(Answer::WrongLength); // from now on the endpoint's vectors are half as long
    let b = openai(&path, &stub, "hash-64", Duration::from_secs(5));
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let dense = recall(&b, "walrus4", RecallMode::Dense).await;
        if dense.first().map(String::as_str) == Some("note 4 about walrus4 and the harbour") {
            break;
        }
        assert!(Instant::now() < until, "no dense recall at the new length: {dense:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 10);
    assert_eq!(vector_lengths(&path), [DIM as i64 / 2]);
}

/// Passages left to embed at a restart after which the endpoint's vectors changed length: the
/// first batch is embedded before anything shows the change, and must be found by meaning
/// afterwards too (it was stored, refused by the index, and kept by the start-over, so never
/// loaded until the next restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passages_left_to_embed_when_the_length_changes_are_found_by_meaning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let mut stub = Stub::start();
    {
        let b = openai(&path, &stub, "hash-64", Duration::from_secs(5));
        retain(&b, numbered(0, 10)).await;
        assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 10);
    }
    stub.stop();
    {
        // The endpoint down: these wait to be embedded.
        let b = openai(&path, &stub, "hash-64", Duration::from_secs(1));
        retain(&b, numbered(10, 5)).await;
    }
    stub.restart();
    stub.set(Answer::WrongLength); // from now on the endpoint's vectors are half as long
    let b = openai(&path, &stub, "hash-64", Duration::from_secs(5));
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 15);
    for i in [2, 12] {
        let dense = recall(&b, &format!("note {i} about walrus{i}"), RecallMode::Dense).await;
        assert_eq!(
            dense.first().map(String::as_str),
            Some(format!("note {i} about walrus{i} and the harbour").as_str())
        );
    }
}

/// Passages another process writes (`mneme migrate --to local` while the daemon runs) are
/// embedded without a retain through this one: its idle embedding thread waited only for its
/// own writer's word, and they stayed without vectors until the next retain or a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passages_another_process_writes_are_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let stub = Stub::start();
    let b = openai(&path, &stub, "hash-64", Duration::from_secs(2));
    retain(&b, numbered(0, 5)).await;
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 5);
    let other = LocalBackend::open(&LocalConfig::lexical(&path)).unwrap();
    retain(&other, numbered(5, 5)).await;
    let e = embedded(&b, Duration::from_secs(30)).await;
    assert_eq!((e.embedded, e.passages), (10, 10));
}

/// An endpoint that starts refusing everything (a revoked key: 401) once the store is embedded
/// is an outage, told once: only questions met it, and each refused question was taken for that
/// question's own fault, so recall fell back to BM25 with no notice and status said "ready".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_refusing_every_question_is_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_secs(2));
    let mut events = b.take_events().expect("the local backend raises events");
    retain(&b, numbered(0, 5)).await;
    embedded(&b, Duration::from_secs(30)).await;
    stub.set(Answer::Unauthorized);
    assert!(!recall(&b, "walrus3 harbour", RecallMode::Hybrid).await.is_empty(), "BM25 answers");
    let e = refused_with(&b, "401").await;
    assert_eq!(e.state, "unavailable", "{e:?}");
    let outage = tokio::time::timeout(Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
    assert!(outage.problem && outage.message.contains("401"), "{outage:?}");
}

/// An endpoint that embeds a few texts within the timeout but never a whole batch (a slow
/// model on a CPU) is sent fewer at a time: a batch of 32 that timed out was sent again whole,
/// for ever, and nothing was embedded (the review saw 0 of 100 after a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_is_sent_fewer_texts_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    // 60 ms a text: a batch of 32 takes 1.9 s, past the timeout; 8 take 0.5 s.
    stub.set(Answer::SlowPerText(60));
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_secs(1));
    retain(&b, numbered(0, 40)).await;
    let e = embedded(&b, Duration::from_secs(60)).await;
    assert_eq!((e.embedded, e.error), (40, None));
}

/// An endpoint slower than recall waits for a question's vector (but within its timeout) makes
/// one recall wait, not every one: each recall waited its second in vain, the embedding thread's
/// ping (which has all of the timeout) found it answering, and status said "ready".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_slower_than_recall_waits_holds_up_one_recall() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = embedded_openai(&dir.path().join("m.db"), &stub, Duration::from_secs(5), 10).await;
    // Its time grows with the text: a word in 60 ms, this question in over a second.
    let question = "which note is about walrus4 and the harbour, the one we wrote down last week?";
    a_question_takes_too_long(&b, &stub, question).await;
    // The idle thread times that question again: answered, but slower than a recall waits (a
    // word, which it timed before, was answered in time, and every recall waited again).
    tokio::time::sleep(Duration::from_secs(4)).await;
    for _ in 0..3 {
        let t = Instant::now();
        assert!(!recall(&b, question, RecallMode::Hybrid).await.is_empty());
        assert!(t.elapsed() < Duration::from_millis(500), "a recall waited again: {:?}", t.elapsed());
    }
    let e = b.embedding_status().await.unwrap();
    assert!(e.error.as_deref().is_some_and(|m| m.contains("a recall waits")), "{e:?}");
    // Fast again: semantic recall comes back (the idle thread looks again within 10 s).
    stub.set(Answer::Vectors);
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.state, "ready");
    assert!(!recall(&b, "walrus4", RecallMode::Dense).await.is_empty());
}

/// Without `embedding_dim`, the vectors' length is the stored vectors' until answers running
/// say otherwise: one odd answer after a start set the length for good, every stored vector was
/// dropped for it and every right answer refused; and a new length (another model served under
/// the same name) was refused until a restart, though the README says it re-embeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_odd_length_changes_nothing_and_a_lasting_one_re_embeds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let stub = Stub::start();
    {
        let b = openai(&path, &stub, "hash-64", Duration::from_secs(5));
        retain(&b, numbered(0, 10)).await;
        assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 10);
    }
    let b = openai(&path, &stub, "hash-64", Duration::from_secs(5));
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 10);
    // The first answer after the start is odd: that question goes without vectors, no more.
    stub.set(Answer::WrongLength);
    recall(&b, "walrus4", RecallMode::Hybrid).await;
    stub.set(Answer::Vectors);
    let until = Instant::now() + Duration::from_secs(30);
    while recall(&b, "note 4 about walrus4", RecallMode::Dense).await.first().map(String::as_str)
        != Some("note 4 about walrus4 and the harbour")
    {
        assert!(Instant::now() < until, "no dense recall after one odd answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(vector_lengths(&path), [DIM as i64]);
    assert_eq!(b.embedding_status().await.unwrap().embedded, 10);
    // Another model behind the same name, for good: everything is embedded again, without a
    // restart.
    stub.set(Answer::WrongLength);
    retain(&b, numbered(10, 5)).await;
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let e = b.embedding_status().await.unwrap();
        if e.embedded == 15 && e.state == "ready" && vector_lengths(&path) == [DIM as i64 / 2] {
            break;
        }
        assert!(Instant::now() < until, "not embedded again at the new length: {e:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dense = recall(&b, "note 12 about walrus12", RecallMode::Dense).await;
    assert_eq!(dense.first().map(String::as_str), Some("note 12 about walrus12 and the harbour"));
}

/// An endpoint whose answers alternate between two lengths (two models behind one name, a
/// rolling upgrade) leaves no passage unembedded once it settles: those answered with the
/// other length were taken for texts it refuses, and stayed without vectors until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passages_passed_over_while_the_length_alternates_are_embedded_once_it_settles() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let stub = Stub::start();
    let b = openai(&path, &stub, "hash-64", Duration::from_secs(5));
    retain(&b, numbered(0, 2)).await;
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 2);
    stub.set(Answer::Alternating);
    // Two at a time: a batch answered with the other length is embedded a text at a time, and
    // the second text's answer is the other length again.
    for n in (2..14).step_by(2) {
        retain(&b, numbered(n, 2)).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    stub.set(Answer::Vectors);
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let e = b.embedding_status().await.unwrap();
        if e.embedded == 14 {
            break;
        }
        assert!(Instant::now() < until, "passages left unembedded after the endpoint settled: {e:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(vector_lengths(&path), [DIM as i64]);
}

fn vector_lengths(path: &std::path::Path) -> Vec<i64> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut lengths: Vec<i64> = conn
        .prepare("SELECT DISTINCT dim FROM passage_vectors")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    lengths.sort_unstable();
    lengths
}

/// What an endpoint says back is never where the key shows (a gateway repeating the header it
/// got put the key in the status, the notices, the log and the spool), and a redirect is not
/// followed (the passages went to the host it named, without a word).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_key_is_left_out_and_a_redirect_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    stub.set(Answer::EchoingUnauthorized);
    // As long as OpenAI's project keys, and said past the 200 characters an error keeps of a
    // body: the key was left out after the cut, so the part before it stayed.
    let key = format!("sk-proj-{}", "ECHOED".repeat(26));
    let b = openai_with_key(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_secs(5), Some(&key));
    let mut events = b.take_events().unwrap();
    retain(&b, numbered(0, 3)).await;
    let e = refused_with(&b, "401").await;
    let error = e.error.unwrap_or_default();
    assert!(!error.contains("ECHOED"), "{error}");
    let told = events.recv().await.unwrap();
    assert!(told.problem && !told.message.contains("ECHOED"), "{}", told.message);
    drop(b);
    // A 200 whose vectors are a text repeating the header: the key is left out of that error too.
    stub.set(Answer::EchoingOk);
    let b = openai_with_key(&dir.path().join("o.db"), &stub, "hash-64", Duration::from_secs(5), Some(&key));
    retain(&b, numbered(0, 3)).await;
    let e = refused_with(&b, "something else than embeddings").await;
    let error = e.error.unwrap_or_default();
    assert!(error.contains("something else than embeddings") && !error.contains("ECHOED"), "{error}");
    drop(b);
    let elsewhere = Stub::start();
    stub.set(Answer::RedirectTo(elsewhere.addr.port()));
    let b = openai(&dir.path().join("r.db"), &stub, "hash-64", Duration::from_secs(5));
    retain(&b, numbered(0, 3)).await;
    let e = refused_with(&b, "not followed").await;
    assert!(e.error.as_deref().is_some_and(|m| m.contains("307") && m.contains("not followed")), "{e:?}");
    assert_eq!(elsewhere.requests.load(Ordering::SeqCst), 0, "a passage went where the redirect said");
}

/// A replaced embedder (a switch, a closing backend) says nothing more: a request of its
/// embedding thread still waiting on a hung endpoint posted "semantic recall is unavailable"
/// seconds after the switch, about an embedder no longer in use, and no "back" ever followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_embedder_says_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_secs(2));
    let mut events = b.take_events().unwrap();
    stub.set(Answer::Slow(2500));
    retain(&b, numbered(0, 1)).await;
    // The embedding thread's request is under way, and hangs past its timeout.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(b);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(events.try_recv().is_err(), "a replaced embedder told of an outage");
}

/// A loopback endpoint is reached directly whatever the environment's proxy says: the proxy got
/// the passages and the key, and cannot reach this machine's loopback anyway. (The variables are
/// set for the whole test binary; every other test here talks to loopback too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_endpoint_is_reached_without_the_environments_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let proxy = Stub::start();
    for name in ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"] {
        std::env::set_var(name, format!("http://{}", proxy.addr));
    }
    let stub = Stub::start();
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_secs(5));
    retain(&b, numbered(0, 3)).await;
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.embedded, 3);
    assert_eq!(proxy.requests.load(Ordering::SeqCst), 0, "the proxy got the passages");
    assert!(stub.requests.load(Ordering::SeqCst) > 0);
}

/// An endpoint that hangs is an outage told after two timeouts (the batch, then a single
/// passage), not after the batch was halved five times, each a whole timeout, with status
/// saying "ready" meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_endpoint_is_told_after_two_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    stub.set(Answer::Slow(30_000));
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_millis(700));
    let t = Instant::now();
    retain(&b, numbered(0, 40)).await;
    let e = refused_with(&b, "timed out").await;
    assert_eq!(e.state, "unavailable", "{e:?}");
    assert!(t.elapsed() < Duration::from_millis(2900), "told after {:?}", t.elapsed());
}

/// The slow state ends once the latest question is answered in time: it was tied to the one
/// question that timed out, re-asked every 10 s, so after one long question every short one
/// went without vectors for as long as the daemon ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_question_after_a_slow_long_one_gets_its_vector() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = embedded_openai(&dir.path().join("m.db"), &stub, Duration::from_secs(5), 10).await;
    let long = "which note is about walrus4 and the harbour, the one we wrote down last week for the team?";
    a_question_takes_too_long(&b, &stub, long).await;
    let until = Instant::now() + Duration::from_secs(40);
    while recall(&b, "walrus4", RecallMode::Dense).await.is_empty() {
        assert!(Instant::now() < until, "a short question stayed without its vector");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Makes the endpoint's time grow with the text (15 ms a byte) and asks `question`, which
/// recall waits its second for in vain.
async fn a_question_takes_too_long(b: &LocalBackend, stub: &Stub, question: &str) {
    stub.set(Answer::SlowPerByte(15));
    let t = Instant::now();
    assert!(!recall(b, question, RecallMode::Hybrid).await.is_empty());
    assert!(t.elapsed() >= Duration::from_millis(900), "{:?}", t.elapsed());
}

/// A document stored again one turn longer (a session's transcript, as automatic retain stores
/// it every few turns) sends only its new text to the endpoint: the passages of the text it had
/// get the vectors that text was given. Every version was embedded whole again (review104 #2):
/// 100 passages, four requests of 32, at every version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_stored_again_sends_only_its_new_text() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = openai(&dir.path().join("m.db"), &stub, "m", Duration::from_secs(5));
    let turn = |i: usize| {
        format!("[user]: what does walrus{i} do with the harbour{i} ledger?\n\n[assistant]: walrus{i} keeps the harbour{i} ledger in order, {}", "and its tide tables too. ".repeat(30))
    };
    let version = |id: &str, turns: usize| MemoryItem {
        kind: MemoryType::Experience,
        document_id: Some("transcript".into()),
        ..MemoryItem::new(id, (0..turns).map(turn).collect::<Vec<_>>().join("\n\n"), "2026-01-02T03:04:05Z")
    };
    retain(&b, vec![version("v1", 100)]).await;
    let first = embedded(&b, Duration::from_secs(30)).await;
    assert!(first.embedded >= 100, "{first:?}");
    let before = stub.requests.load(Ordering::SeqCst);
    assert!(before >= 4, "{before} requests for {} passages", first.embedded);
    retain(&b, vec![version("v2", 101)]).await;
    let second = embedded(&b, Duration::from_secs(30)).await;
    assert!(second.embedded > first.embedded, "{second:?}");
    let sent = stub.requests.load(Ordering::SeqCst) - before;
    assert_eq!(sent, 1, "the new turn's passage, in one request");
    // The vectors found again are the text's own: a question of one of its turns finds it.
    let found = recall(&b, "walrus42 harbour42 ledger", RecallMode::Dense).await;
    assert!(found.first().is_some_and(|t| t.contains("walrus42")), "{found:?}");
}

/// A caller's deadline bounds the wait for the question's vector, leaving room for the answer: a
/// vector that comes before is used (half the wait dropped one that came in time, review107 #1),
/// one that does not leaves that recall to its words (review104 #1), and says nothing of the
/// embedder to callers that wait longer (review108 #1); one slower than the whole second is an
/// outage, as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_deadline_bounds_the_wait_for_the_questions_vector() {
    let dir = tempfile::tempdir().unwrap();
    let stub = Stub::start();
    let b = embedded_openai(&dir.path().join("m.db"), &stub, Duration::from_secs(5), 10).await;
    stub.set(Answer::Slow(400));
    let within =
        |ms: u64| RecallQuery { deadline: Some(Instant::now() + Duration::from_millis(ms)), ..query("walrus4") };
    let found = b.recall_with(&scope(), &within(700), RecallMode::Dense).await.unwrap();
    assert!(!found.is_empty(), "the vector came 300 ms before the caller's end");
    let found = b.recall_with(&scope(), &within(300), RecallMode::Dense).await.unwrap();
    assert!(found.is_empty(), "no vector within 200 ms: {found:?}");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(b.embedding_status().await.unwrap().error.is_none(), "a caller in a hurry says nothing of the embedder");
    let found = b.recall_with(&scope(), &query("walrus4"), RecallMode::Dense).await.unwrap();
    assert!(!found.is_empty(), "a caller without a deadline waits for it");
    stub.set(Answer::Slow(1_500));
    let found = b.recall_with(&scope(), &within(300), RecallMode::Dense).await.unwrap();
    assert!(found.is_empty());
    let mut status = b.embedding_status().await.unwrap();
    for _ in 0..30 {
        if status.error.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = b.embedding_status().await.unwrap();
    }
    assert!(status.error.as_deref().is_some_and(|m| m.contains("longer than 1000 ms")), "{status:?}");
}
