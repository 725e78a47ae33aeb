//! Semantic recall: the built-in model finds a paraphrase, a store of the previous schema is
//! backfilled, and an OpenAI-compatible endpoint (a real HTTP server on 127.0.0.1, below) that
//! is down, slow or gives vectors of the wrong length never fails a retain or a recall, is
//! reported once per outage, and is caught up with once it answers; a model change re-embeds;
//! measured neighbourhoods are stored and kept across a restart.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mneme_core::*;
use mneme_local::{EmbedderChoice, LocalBackend, LocalConfig, OpenAiConfig, RecallMode};

fn item(id: &str, content: &str, session: &str) -> MemoryItem {
    MemoryItem::new(id, content, "2026-01-02T03:04:05Z").in_session(session)
}

fn scope() -> Scope {
    Scope { bank: "b".into(), tags: vec![] }
}

fn query(q: &str) -> RecallQuery {
    RecallQuery {
        query: q.into(),
        budget: Budget::Mid,
        max_tokens: 4096,
        types: vec![],
        tags: vec![],
        tags_match: TagsMatch::Any,
    }
}

async fn retain(b: &LocalBackend, items: Vec<MemoryItem>) {
    for (i, chunk) in items.chunks(64).enumerate() {
        b.retain(&scope(), &RetainBatch { id: format!("batch-{i}-{}", chunk[0].id), items: chunk.to_vec() })
            .await
            .unwrap();
    }
}

async fn recall(b: &LocalBackend, q: &str, mode: RecallMode) -> Vec<String> {
    b.recall_with(&scope(), &query(q), mode).await.unwrap().into_iter().map(|r| r.text).collect()
}

/// Waits until every passage has a vector; returns the last status.
async fn embedded(b: &LocalBackend, within: Duration) -> EmbeddingStatus {
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
async fn refused_with(b: &LocalBackend, says: &str) -> EmbeddingStatus {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let e = b.embedding_status().await.unwrap();
        if e.error.as_deref().is_some_and(|m| m.contains(says)) || Instant::now() > until {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const DISTRACTORS: &[&str] = &[
    "The staging database is reset every Sunday night.",
    "Use tabs, not spaces, in the Makefile.",
    "The API rate limit is 100 requests per minute per token.",
    "Alice owns the billing service and reviews its pull requests.",
    "Integration tests need Docker running locally.",
    "Logs are shipped to Loki and kept for 14 days.",
    "The frontend uses React 18 with Vite.",
    "Feature flags live in LaunchDarkly, one project per team.",
    "We prefer small pull requests, under 400 lines.",
    "The nightly backup of the main database runs at 02:00 UTC.",
    "Postgres is pinned to version 15 until the extension is ported.",
    "Error messages must name the file and the line.",
    "The mobile app talks to the gateway over gRPC.",
    "Secrets are read from Vault at start, never from the environment.",
    "The search index is rebuilt when the schema changes.",
    "Our coding style forbids unwrap outside tests.",
    "The design review happens every Thursday afternoon.",
    "Benchmarks run on a dedicated machine in the lab.",
    "The cache is Redis with a one-hour expiry.",
    "Translations are managed in Crowdin.",
    "The user prefers concise answers without emojis.",
    "Payments go through Stripe's test mode in development.",
    "The parser is generated from a PEG grammar.",
    "Dependabot opens updates every Monday.",
    "The docs site is built with mdBook.",
    "Timeouts for outgoing HTTP calls default to ten seconds.",
    "The metrics dashboard is in Grafana under the team folder.",
    "Windows builds are not supported any more.",
    "The config file format is TOML.",
    "Customer data must stay in the EU region.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_model_finds_a_paraphrase() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(&LocalConfig::new(dir.path().join("m.db"))).unwrap();
    let mut items: Vec<MemoryItem> =
        DISTRACTORS.iter().enumerate().map(|(i, t)| item(&format!("d{i}"), t, &format!("n{i}"))).collect();
    items.push(item("fact", "We deploy with cargo-dist.", "fact"));
    retain(&b, items).await;
    // Found by BM25 at once, before any vector exists.
    assert_eq!(
        recall(&b, "cargo-dist", RecallMode::Hybrid).await.first().map(String::as_str),
        Some("We deploy with cargo-dist.")
    );
    let e = embedded(&b, Duration::from_secs(60)).await;
    assert_eq!(e.model, "builtin:all-MiniLM-L6-v2-int8");
    assert_eq!(e.embedded, DISTRACTORS.len() as u64 + 1);
    let hybrid = recall(&b, "how do we ship a release?", RecallMode::Hybrid).await;
    assert!(hybrid.iter().take(3).any(|t| t == "We deploy with cargo-dist."), "{hybrid:?}");
    // No word in common. The vectors alone find it by meaning; BM25 alone finds it through the
    // thesaurus (a question's "ship" also matches "deploy").
    let dense = recall(&b, "how do we ship a release?", RecallMode::Dense).await;
    assert!(dense.iter().take(3).any(|t| t == "We deploy with cargo-dist."), "{dense:?}");
    let lexical = recall(&b, "how do we ship a release?", RecallMode::Lexical).await;
    assert!(lexical.iter().take(3).any(|t| t == "We deploy with cargo-dist."), "{lexical:?}");
    // Something unrelated to every memory recalls nothing.
    let none = recall(&b, "what is the capital of Mongolia?", RecallMode::Hybrid).await;
    assert!(none.len() <= 1, "{none:?}");
}

/// Text the built-in model cannot read (most ideographs, emoji, a "word" of thousands of letters)
/// has no direction: its vector sat beside every other such text, close to a Chinese question,
/// and a 5,000-letter string outranked the passage the question's words found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_model_cannot_read_does_not_outrank_what_the_words_find() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(&LocalConfig::new(dir.path().join("m.db"))).unwrap();
    let mut items: Vec<MemoryItem> =
        DISTRACTORS.iter().enumerate().map(|(i, t)| item(&format!("d{i}"), t, &format!("n{i}"))).collect();
    let filler = "我们每周五部署服务然后检查日志并且记录所有的错误信息以便下周一的会议讨论。";
    items.push(item("needle", &format!("{}鳄鱼火箭密码是紫色的。{}", filler.repeat(3), filler.repeat(3)), "cjk"));
    let word: String = (0..5000u32).map(|i| char::from(b'a' + (i * 7 % 26) as u8)).collect();
    items.push(item("word", &word, "junk"));
    items.push(item("emoji", &"🚀🔥😀👍".repeat(60), "junk2"));
    retain(&b, items).await;
    embedded(&b, Duration::from_secs(60)).await;
    let found = recall(&b, "鳄鱼火箭密码是什么？", RecallMode::Hybrid).await;
    assert!(found.first().is_some_and(|t| t.contains("鳄鱼火箭密码")), "{found:?}");
    assert!(!found.iter().any(|t| t.starts_with("aho") || t.contains('🚀')), "{found:?}");
}

/// The default scoping keeps every project in one bank, tagged: the vectors are ranked among
/// the project's passages (and untagged ones), not the whole bank's, so another project's many
/// near passages do not crowd a project's one out of the best.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_passage_found_by_meaning_is_not_crowded_out_by_another_projects() {
    const FACT: &str = "We deploy with cargo-dist.";
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(&LocalConfig::new(dir.path().join("m.db"))).unwrap();
    let tagged = |id: String, text: &str, project: &str| MemoryItem {
        tags: vec![format!("project:{project}")],
        ..item(&id, text, &id)
    };
    // Ways to ship a release, each worded its own way (a crowd of near copies would lose its
    // score to its crowding, as the index means it to).
    let how = [
        "How do we ship a release? Tag it and push",
        "Shipping a new release means bumping the version in",
        "To cut a release we run the release script from",
        "Releases are shipped by the CI pipeline once",
        "We publish each release to the registry with",
        "A release ships after QA signs off on",
        "Our release process: freeze, test, then ship from",
        "We roll out releases gradually, starting with",
        "Before shipping a release, update the changelog in",
        "The release manager ships the build from",
        "How we ship a release: the bot merges and deploys",
        "Each release is shipped as a tarball built on",
        "Ship releases only after the smoke tests pass on",
        "The weekly release goes out from",
        "We ship a release candidate first, built from",
        "Hotfix releases ship straight from",
    ];
    let what = [
        "the main branch",
        "a release branch",
        "GitHub Actions",
        "the staging server",
        "Jenkins",
        "the monorepo",
        "our laptop",
        "the build farm",
        "a signed tag",
        "the canary fleet",
        "Friday's build",
        "the docs repo",
        "the release train",
        "a clean checkout",
        "the nightly job",
        "version control",
        "the ops channel",
        "a tagged commit",
        "the packaging VM",
        "Buildkite",
        "the deploy queue",
        "the mirror",
        "a fresh clone",
        "the QA sign-off",
    ];
    let mut items: Vec<MemoryItem> = how
        .iter()
        .flat_map(|h| what.iter().map(move |w| format!("{h} {w}.")))
        .enumerate()
        .map(|(i, t)| tagged(format!("o{i}"), &t, "other"))
        .collect();
    items.extend(DISTRACTORS.iter().enumerate().map(|(i, t)| tagged(format!("d{i}"), t, "mine")));
    items.push(tagged("fact".into(), FACT, "mine"));
    retain(&b, items).await;
    embedded(&b, Duration::from_secs(120)).await;
    let ask = |tags: &[&str], tags_match: TagsMatch| RecallQuery {
        tags: tags.iter().map(|t| t.to_string()).collect(),
        tags_match,
        ..query("how do we ship a release?")
    };
    let texts = |r: Vec<Recalled>| r.into_iter().map(|r| r.text).collect::<Vec<_>>();
    let whole = texts(b.recall_with(&scope(), &ask(&[], TagsMatch::Any), RecallMode::Dense).await.unwrap());
    assert!(
        !whole.iter().any(|t| t == FACT),
        "premise: in the whole bank the other project's fill the best: {whole:?}"
    );
    for tags_match in [TagsMatch::Any, TagsMatch::AnyStrict, TagsMatch::AllStrict] {
        let mine =
            texts(b.recall_with(&scope(), &ask(&["project:mine"], tags_match), RecallMode::Dense).await.unwrap());
        assert!(mine.iter().take(3).any(|t| t == FACT), "{tags_match:?}: {mine:?}");
        assert!(!mine.iter().any(|t| t.contains("other app")), "{tags_match:?}: {mine:?}");
    }
    let hybrid =
        texts(b.recall_with(&scope(), &ask(&["project:mine"], TagsMatch::Any), RecallMode::Hybrid).await.unwrap());
    assert_eq!(hybrid.first().map(String::as_str), Some(FACT), "{hybrid:?}");
}

/// As the lexical-only recall (tests/store.rs): the hybrid's word side ranks a project's own
/// words when a rarer word of the question is only in other projects' memories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_word_side_keeps_a_projects_words_past_a_word_only_others_hold() {
    let dir = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(&LocalConfig::new(dir.path().join("m.db"))).unwrap();
    let tagged = |id: String, text: String, project: &str| MemoryItem {
        tags: vec![format!("project:{project}")],
        ..item(&id, &text, &id)
    };
    let mut items = vec![tagged("a".into(), "To deploy alpha, run the go script.".into(), "alpha")];
    items.extend((0..6000).map(|i| {
        let billing = if i % 2000 == 0 { " for billing" } else { "" };
        tagged(format!("b{i}"), format!("Beta note {i}: deploy step {i}{billing}."), "beta")
    }));
    retain(&b, items).await;
    let ask = RecallQuery { tags: vec!["project:alpha".into()], ..query("how do we deploy the billing service") };
    for mode in [RecallMode::Lexical, RecallMode::Hybrid] {
        let found = b.recall_with(&scope(), &ask, mode).await.unwrap();
        assert!(found.iter().any(|r| r.text.starts_with("To deploy alpha")), "{mode:?}: {found:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_the_previous_schema_is_backfilled() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    {
        // Schema 3: one FTS row per memory, no passages, no vectors.
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        mneme_local::store::register_functions(&conn).unwrap();
        mneme_local::schema::migrate_to(&mut conn, 3).unwrap();
        let mut insert = conn
            .prepare(
                "INSERT INTO memories (id, bank, content, content_hash, kind, tags, metadata, created_at)
                 VALUES (?1, 'b', ?2, 0, 'world', '', '{}', '2026-01-01T00:00:00Z')",
            )
            .unwrap();
        for (i, t) in DISTRACTORS.iter().chain(["We deploy with cargo-dist."].iter()).enumerate() {
            insert.execute(rusqlite::params![format!("m{i}"), t]).unwrap();
        }
        // A session's transcript, stored whole then: a word in its tail only.
        let turns: Vec<String> = (0..40)
            .map(|i| format!("[role: user]\nturn {i} asks about the harbour crane schedule\n[user:end]"))
            .chain(["[role: assistant]\nthe zanzibarine ferry leaves at noon\n[assistant:end]".to_owned()])
            .collect();
        insert.execute(rusqlite::params!["transcript", turns.join("\n\n")]).unwrap();
        conn.execute("INSERT INTO memories_fts(rowid, terms) SELECT seq, mneme_terms(content) FROM memories", [])
            .unwrap();
    }
    let b = LocalBackend::open(&LocalConfig::new(&path)).unwrap();
    assert_eq!(recall(&b, "cargo-dist", RecallMode::Lexical).await, vec!["We deploy with cargo-dist.".to_owned()]);
    // The transcript is passages now, as a retain splits one: its tail is found as a passage.
    let tail = recall(&b, "zanzibarine ferry", RecallMode::Lexical).await;
    assert!(tail[0].contains("zanzibarine") && tail[0].len() < 1500, "{tail:?}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let split: i64 = conn
        .query_row(
            "SELECT count(*) FROM passages p JOIN memories m ON m.seq = p.memory_seq WHERE m.id = 'transcript'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(split > 1, "{split}");
    let e = embedded(&b, Duration::from_secs(60)).await;
    let passages = DISTRACTORS.len() as u64 + 1 + split as u64;
    assert_eq!((e.embedded, e.passages), (passages, passages));
    let hybrid = recall(&b, "how do we ship a release?", RecallMode::Hybrid).await;
    assert!(hybrid.iter().take(3).any(|t| t == "We deploy with cargo-dist."), "{hybrid:?}");
}

/// How many stored vectors have no measured crowding yet.
fn unmeasured_rows(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM passage_vectors WHERE crowding IS NULL", [], |r| r.get(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measured_neighbourhoods_are_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let mut items: Vec<MemoryItem> =
        DISTRACTORS.iter().enumerate().map(|(i, t)| item(&format!("d{i}"), t, &format!("n{i}"))).collect();
    items.push(item("fact", "We deploy with cargo-dist.", "fact"));
    let questions = ["how do we ship a release?", "which database do we use?", "where are the dashboards?"];
    let mut before = Vec::new();
    {
        let b = LocalBackend::open(&LocalConfig::new(&path)).unwrap();
        retain(&b, items).await;
        embedded(&b, Duration::from_secs(60)).await;
        for q in questions {
            before.push(recall(&b, q, RecallMode::Dense).await);
        }
        // Stored after the bank is measured, with the vectors.
        let until = Instant::now() + Duration::from_secs(30);
        while unmeasured_rows(&path) > 0 {
            assert!(Instant::now() < until, "measured crowding not stored");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let b = LocalBackend::open(&LocalConfig::new(&path)).unwrap();
    let e = embedded(&b, Duration::from_secs(60)).await;
    assert_eq!(e.embedded, DISTRACTORS.len() as u64 + 1);
    let mut after = Vec::new();
    for q in questions {
        after.push(recall(&b, q, RecallMode::Dense).await);
    }
    assert_eq!(after, before, "the reopened store ranks as the measured one did");
    // A vector added to a measured bank is stored with its crowding.
    retain(&b, vec![item("late", "Release notes are written by the on-call engineer.", "late")]).await;
    embedded(&b, Duration::from_secs(60)).await;
    assert_eq!(unmeasured_rows(&path), 0);
}

/// What the stub answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answer {
    Vectors,
    /// After this many milliseconds.
    Slow(u64),
    /// Vectors of half the length.
    WrongLength,
    /// Vectors with a value past f32's range (`1e39`), which arrives as infinity.
    Overflowing,
    /// Vectors of zeros.
    Zeros,
    /// 401 to everything (a revoked key).
    Unauthorized,
    /// The answer's headers, then half its body, and the connection closed.
    BrokenOff,
}

const BROKEN_OFF: u64 = 1_000_000;
const UNAUTHORIZED: u64 = 1_000_001;

/// An OpenAI-compatible `/v1/embeddings` server on 127.0.0.1: a word-hashing embedder of 64
/// dimensions (texts sharing words are near). It can be stopped (the port refuses connections)
/// and started again on the same port.
struct Stub {
    addr: SocketAddr,
    answer: Arc<AtomicU64>,
    requests: Arc<AtomicUsize>,
    running: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const DIM: usize = 64;

impl Stub {
    fn start() -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut stub = Stub {
            addr,
            answer: Arc::new(AtomicU64::new(0)),
            requests: Arc::new(AtomicUsize::new(0)),
            running: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        stub.serve(listener);
        stub
    }

    fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn set(&self, answer: Answer) {
        let code = match answer {
            Answer::Vectors => 0,
            Answer::WrongLength => 1,
            Answer::Overflowing => 2,
            Answer::Zeros => 3,
            Answer::BrokenOff => BROKEN_OFF,
            Answer::Unauthorized => UNAUTHORIZED,
            Answer::Slow(ms) => 4 + ms,
        };
        self.answer.store(code, Ordering::SeqCst);
    }

    fn stop(&mut self) {
        self.running.store(false, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }

    fn restart(&mut self) {
        let listener = TcpListener::bind(self.addr).unwrap();
        self.serve(listener);
    }

    fn serve(&mut self, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        self.running.store(true, Ordering::SeqCst);
        let (answer, requests, running) = (self.answer.clone(), self.requests.clone(), self.running.clone());
        self.thread = Some(std::thread::spawn(move || {
            while running.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let answer = answer.clone();
                        requests.fetch_add(1, Ordering::SeqCst);
                        std::thread::spawn(move || handle(stream, answer.load(Ordering::SeqCst)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }));
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.stop();
    }
}

fn hashed(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0f32; dim];
    for w in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let h = w
            .to_lowercase()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        v[(h % dim as u64) as usize] += 1.0;
    }
    v
}

fn handle(stream: TcpStream, answer: u64) {
    stream.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let mut stream = stream;
    // A text the endpoint refuses (as llama.cpp's server refuses one over its batch size).
    if request["input"].as_array().unwrap().iter().any(|t| t.as_str().unwrap().contains("POISON")) {
        let out = r#"{"error": {"message": "input is too large to process"}}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
            out.len()
        );
        return;
    }
    if answer == UNAUTHORIZED {
        let out = r#"{"error": {"message": "Incorrect API key provided"}}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
            out.len()
        );
        return;
    }
    if (4..BROKEN_OFF).contains(&answer) {
        std::thread::sleep(Duration::from_millis(answer - 4));
    }
    let dim = if answer == 1 { DIM / 2 } else { DIM };
    let embedding = |text: &str| -> serde_json::Value {
        let v = hashed(text, dim);
        match answer {
            // Written as JSON numbers: 1e39 is a valid one, beyond f32.
            2 => serde_json::Value::Array(v.iter().map(|x| serde_json::json!(f64::from(*x) * 1e39)).collect()),
            3 => serde_json::json!(vec![0f32; dim]),
            _ => serde_json::json!(v),
        }
    };
    let data: Vec<serde_json::Value> = request["input"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"index": i, "embedding": embedding(t.as_str().unwrap())}))
        .collect();
    let out = serde_json::json!({"object": "list", "data": data, "model": request["model"]}).to_string();
    if answer == BROKEN_OFF {
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            out.len(),
            &out[..out.len() / 2]
        );
        return;
    }
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
        out.len()
    );
}

fn openai(path: &Path, stub: &Stub, model: &str, timeout: Duration) -> LocalBackend {
    let config = OpenAiConfig { url: stub.url(), model: model.into(), api_key: None, timeout, dim: None };
    LocalBackend::open(&LocalConfig { embedder: EmbedderChoice::OpenAi(config), ..LocalConfig::new(path) }).unwrap()
}

fn numbered(from: usize, n: usize) -> Vec<MemoryItem> {
    (from..from + n)
        .map(|i| item(&format!("m{i}"), &format!("note {i} about walrus{i} and the harbour"), &format!("s{i}")))
        .collect()
}

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
    let b = openai(&dir.path().join("m.db"), &stub, "hash-64", Duration::from_millis(300));
    retain(&b, numbered(0, 10)).await;
    embedded(&b, Duration::from_secs(30)).await;
    stub.set(Answer::Slow(3000));
    assert!(!recall(&b, "walrus4", RecallMode::Hybrid).await.is_empty());
    assert_eq!(b.embedding_status().await.unwrap().state, "unavailable");
    stub.set(Answer::Vectors);
    assert_eq!(embedded(&b, Duration::from_secs(30)).await.state, "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_endpoint_or_a_wrong_length_leaves_recall_to_bm25() {
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
    // Vectors of another length are refused, not stored.
    stub.set(Answer::WrongLength);
    retain(&b, numbered(10, 5)).await;
    // Until the embedding thread has tried them: after its retry pause, which grows while the
    // endpoint fails, so no fixed sleep is long enough on a busy machine.
    let e = refused_with(&b, "dimensions").await;
    assert_eq!((e.state.as_str(), e.embedded, e.passages), ("unavailable", 10, 15), "{e:?}");
    assert!(e.error.as_deref().is_some_and(|m| m.contains("dimensions")), "{e:?}");
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
    let conn = rusqlite::Connection::open(&path).unwrap();
    let lengths: Vec<i64> = conn
        .prepare("SELECT DISTINCT dim FROM passage_vectors")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(lengths, [DIM as i64 / 2]);
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

/// A store an earlier build upgraded to schema 4–6 kept its old transcripts one passage each:
/// they are split when it is opened now, their tail found as a passage.
#[tokio::test]
async fn a_store_upgraded_by_an_earlier_build_has_its_transcripts_split() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        mneme_local::store::register_functions(&conn).unwrap();
        mneme_local::schema::migrate_to(&mut conn, 3).unwrap();
        let turns: Vec<String> = (0..40)
            .map(|i| format!("[role: user]\nturn {i} asks about the harbour crane schedule\n[user:end]"))
            .chain(["[role: assistant]\nthe zanzibarine ferry leaves at noon\n[assistant:end]".to_owned()])
            .collect();
        conn.execute(
            "INSERT INTO memories (id, bank, content, content_hash, kind, tags, metadata, created_at)
             VALUES ('transcript', 'b', ?1, 0, 'world', '', '{}', '2026-01-01T00:00:00Z')",
            [turns.join("\n\n")],
        )
        .unwrap();
        conn.execute("INSERT INTO memories_fts(rowid, terms) SELECT seq, mneme_terms(content) FROM memories", [])
            .unwrap();
        // What an earlier build did: schema 6, the transcript one passage.
        mneme_local::schema::migrate_to(&mut conn, 6).unwrap();
        let n: i64 = conn.query_row("SELECT count(*) FROM passages", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 1);
    }
    let b = LocalBackend::open(&LocalConfig::lexical(&path)).unwrap();
    let tail = recall(&b, "zanzibarine ferry", RecallMode::Lexical).await;
    assert!(tail[0].contains("zanzibarine") && tail[0].len() < 1500, "{tail:?}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn.query_row("SELECT count(*) FROM passages", [], |r| r.get(0)).unwrap();
    assert!(n > 1, "{n}");
}
