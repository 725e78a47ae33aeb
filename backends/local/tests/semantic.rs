//! Semantic recall: the built-in model finds a paraphrase, a store of the previous schema is
//! backfilled, measured neighbourhoods are stored and kept across a restart. (An OpenAI-compatible
//! endpoint's faults: `openai_endpoint.rs`.)

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use mneme_core::*;
use mneme_local::{LocalBackend, LocalConfig, RecallMode};

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

/// A store indexed before accented letters were folded ahead of the stemmer (the schema
/// before): its passages holding them are indexed again when it is opened, so `Andre` finds
/// what `André` did (review121 #3). Indexed the earlier way, `andré` stayed a term of its own.
#[tokio::test]
async fn a_store_indexed_before_accents_were_folded_is_indexed_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    {
        let b = LocalBackend::open(&LocalConfig::lexical(&path)).unwrap();
        retain(&b, vec![item("m1", "André reviewed the pull request", "s")]).await;
        b.close().await;
    }
    let earlier = |path: &Path| {
        let conn = rusqlite::Connection::open(path).unwrap();
        // As the earlier build indexed it: the accented word stemmed as written.
        conn.execute("DELETE FROM passages_fts WHERE rowid IN (SELECT pid FROM passages)", []).unwrap();
        conn.execute(
            "INSERT INTO passages_fts (rowid, terms, ctx) SELECT pid, 'andré review the pull request', '' FROM passages",
            [],
        )
        .unwrap();
        conn.pragma_update(None, "user_version", (mneme_local::schema::VERSION - 1) as i64).unwrap();
    };
    earlier(&path);
    let b = LocalBackend::open(&LocalConfig::lexical(&path)).unwrap();
    let found = recall(&b, "Andre", RecallMode::Lexical).await;
    assert_eq!(found, ["André reviewed the pull request"]);
}
