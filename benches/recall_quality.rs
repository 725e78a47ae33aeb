//! `cargo bench --bench recall_quality`: how well the local store's recall finds what is asked,
//! ranked by BM25 alone, by vectors alone and by both (what the daemon does), on two dev sets:
//!
//! - LoCoMo, development half (`../shared/bench/locomo-dev/`, read from there, never copied): every
//!   turn one memory (`"{speaker}: {text}"`, plus the image caption) in a bank per conversation,
//!   retained in order with its session as `session_id` (so each turn knows the one before it);
//!   each question with evidence one recall; turn-level R@1/5/10 (an evidence turn among the first
//!   k) and session-level R@5, MRR, and R@5 per category;
//! - the coding-memory set (`benches/coding-set/`): 55 facts among 6,000 distractors in one bank
//!   (retained in one session, in a fixed shuffled order);
//!   330 questions (half paraphrased, sharing no content word with their fact) and 110 reworded
//!   ones; hit@1/5/10 and MRR, hit@5 for each half;
//! - LoCoMo again with every turn a fact retained without a session (as a harness feeding the
//!   conversation through the `retain` tool or Hindsight's API stores it), turn-level R@k;
//! - LoCoMo again as the `full-session` retain mode stores it: each session one document the
//!   store splits into passages; R@k = a passage holding an evidence turn among the first k.
//!
//! Stores are kept in `target/bench-recall/` (retains are idempotent and vectors are stored, so a
//! second run only recalls). Args: `locomo` or `coding` to run one set; `MNEME_BENCH_CODING_SET`
//! names another coding set of the same format. `MNEME_BENCH_TRICKLE=n` fills fresh stores (in
//! `target/bench-recall/trickle-n/`) waiting for the embedding thread after every n retain
//! batches, as memories arrive in use, so that banks are measured as they grow instead of once
//! when they are full. Not a test: it reports.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mneme_core::*;
use mneme_local::{LocalBackend, LocalConfig, RecallMode};
use serde_json::Value;

const MODES: [(RecallMode, &str); 3] =
    [(RecallMode::Lexical, "bm25"), (RecallMode::Dense, "dense"), (RecallMode::Hybrid, "hybrid")];

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` probes with --list
    }
    let only: Option<String> = std::env::args().skip(1).find(|a| a == "locomo" || a == "coding");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = match trickle() {
        Some(n) => root.join(format!("target/bench-recall/trickle-{n}")),
        None => root.join("target/bench-recall"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    let path = root.join("../shared/bench/locomo-dev/locomo-dev.json");
    let locomo_text = std::fs::read_to_string(&path);
    if only.as_deref() != Some("coding") {
        match &locomo_text {
            Ok(text) => rt.block_on(locomo(&dir, text)),
            Err(e) => println!("LoCoMo dev skipped: cannot read {}: {e}", path.display()),
        }
    }
    if only.as_deref() != Some("locomo") {
        // `MNEME_BENCH_CODING_SET=file.json` runs another set of the same format (the blind check
        // set in `benches/coding-check-set/`, say).
        let set = std::env::var_os("MNEME_BENCH_CODING_SET")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("benches/coding-set/coding-set.json"));
        let text = std::fs::read_to_string(&set).unwrap_or_else(|e| panic!("{}: {e}", set.display()));
        // Questions about something else (LoCoMo's, when it is there) for what they pull in.
        let unrelated = locomo_text.as_deref().map(|t| locomo_questions(t, 200)).unwrap_or_default();
        let name = set.file_stem().and_then(|s| s.to_str()).unwrap_or("coding-set");
        rt.block_on(coding(&dir, name, &text, &unrelated));
    }
}

/// One memory to retain and what it answers.
struct Doc {
    /// Conversation turns are experiences (each knows the turn before it), notes world facts.
    kind: MemoryType,
    bank: String,
    session: String,
    id: String,
    /// The document a whole transcript is retained as (replacing it replaces its passages).
    document: Option<String>,
    text: String,
}

async fn open_and_fill(db: &Path, docs: &[Doc]) -> LocalBackend {
    let backend = LocalBackend::open(&LocalConfig::new(db)).unwrap();
    let started = Instant::now();
    // In order, a session's turns together, as a retain queue delivers them.
    let (mut i, mut batches) = (0, 0usize);
    while i < docs.len() {
        let (bank, session) = (&docs[i].bank, &docs[i].session);
        let mut items = Vec::new();
        while i < docs.len() && &docs[i].bank == bank && &docs[i].session == session && items.len() < 16 {
            let d = &docs[i];
            let item = MemoryItem::new(d.id.clone(), d.text.clone(), "2026-01-01T00:00:00.000Z");
            let item = if d.session.is_empty() { item } else { item.in_session(d.session.clone()) };
            items.push(MemoryItem { kind: d.kind, document_id: d.document.clone(), ..item });
            i += 1;
        }
        let scope = Scope { bank: bank.clone(), tags: vec![] };
        backend.retain(&scope, &RetainBatch { id: format!("b{i}"), items }).await.unwrap();
        batches += 1;
        if trickle().is_some_and(|n| batches % n == 0) {
            settled(&backend).await;
        }
    }
    let retained = started.elapsed();
    let mut last = (Instant::now(), 0u64);
    let mut first_embedded = None;
    loop {
        let e = backend.embedding_status().await.expect("the built-in embedder is on");
        if e.state == "ready" && first_embedded.is_none() {
            first_embedded = Some((Instant::now(), e.embedded));
        }
        if is_settled(&e) {
            if let Some((t, n)) = first_embedded {
                let new = e.embedded - n;
                if new > 0 {
                    let secs = t.elapsed().as_secs_f64();
                    println!("  embedded {new} passages in {secs:.1} s: {:.0} passages/s", new as f64 / secs);
                }
            }
            break;
        }
        if let Some(err) = e.error {
            panic!("embedder unavailable: {err}");
        }
        if last.0.elapsed() > Duration::from_secs(10) {
            println!("  … {} of {} passages embedded", e.embedded, e.passages);
            last = (Instant::now(), e.embedded);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("  {} memories retained in {:.1} s", docs.len(), retained.as_secs_f64());
    backend
}

/// `MNEME_BENCH_TRICKLE`: retain batches between waits for the embedding thread.
fn trickle() -> Option<usize> {
    std::env::var("MNEME_BENCH_TRICKLE").ok()?.parse().ok().filter(|n| *n > 0)
}

/// Every passage embedded and every bank measured.
fn is_settled(e: &EmbeddingStatus) -> bool {
    e.state == "ready" && e.embedded >= e.passages && e.banks_measuring == 0
}

/// Waits until every passage is embedded and every bank measured.
async fn settled(backend: &LocalBackend) {
    loop {
        let e = backend.embedding_status().await.expect("the built-in embedder is on");
        assert!(e.error.is_none(), "embedder unavailable: {:?}", e.error);
        if is_settled(&e) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ranked(backend: &LocalBackend, bank: &str, query: &str, mode: RecallMode) -> Vec<String> {
    let q = RecallQuery {
        query: query.to_owned(),
        budget: Budget::Mid,
        max_tokens: 1_000_000,
        types: vec![],
        tags: vec![],
        tags_match: TagsMatch::Any,
        deadline: None,
    };
    let scope = Scope { bank: bank.to_owned(), tags: vec![] };
    backend.recall_with(&scope, &q, mode).await.unwrap().into_iter().map(|r| r.text).collect()
}

/// 1-based rank of the first result `is_hit` accepts (`usize::MAX`: none).
fn rank_of(results: &[String], is_hit: impl Fn(&str) -> bool) -> usize {
    results.iter().position(|t| is_hit(t)).map_or(usize::MAX, |i| i + 1)
}

fn at(ranks: &[usize], k: usize) -> f64 {
    ranks.iter().filter(|r| **r <= k).count() as f64 / ranks.len().max(1) as f64
}

fn mrr(ranks: &[usize]) -> f64 {
    ranks.iter().map(|r| if *r == usize::MAX { 0.0 } else { 1.0 / *r as f64 }).sum::<f64>() / ranks.len().max(1) as f64
}

/// Evidence ids as written, with the data's few typos repaired (`D8:6; D9:17`, `D:11:26`);
/// ids naming no turn are dropped.
fn evidence(q: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for e in q["evidence"].as_array().into_iter().flatten() {
        let text = e.as_str().map(str::to_owned).unwrap_or_else(|| e.to_string());
        for part in text.split(';') {
            let part = part.trim().replace("D:", "D");
            let ok = part.strip_prefix('D').and_then(|r| r.split_once(':')).is_some_and(|(a, b)| {
                !a.is_empty()
                    && !b.is_empty()
                    && a.chars().all(|c| c.is_ascii_digit())
                    && b.chars().all(|c| c.is_ascii_digit())
            });
            if ok {
                out.push(part);
            }
        }
    }
    out
}

fn session_of(dia: &str) -> &str {
    dia.split(':').next().unwrap_or("")
}

async fn locomo(dir: &Path, text: &str) {
    println!("\n## LoCoMo dev (turn-level R@k: an evidence turn among the first k)\n");
    let data: Vec<Value> = serde_json::from_str(text).unwrap();
    let mut docs = Vec::new();
    let mut turn_of: HashMap<(String, String), Vec<String>> = HashMap::new(); // (bank, text) → dia ids
    let mut questions = Vec::new();
    for sample in &data {
        let id = sample["sample_id"].as_str().unwrap().to_owned();
        let c = &sample["conversation"];
        let mut n = 1;
        while let Some(turns) = c.get(format!("session_{n}")).and_then(Value::as_array) {
            for t in turns {
                let mut text = format!("{}: {}", t["speaker"].as_str().unwrap(), t["text"].as_str().unwrap());
                if let Some(cap) = t.get("blip_caption").and_then(Value::as_str) {
                    text.push_str(&format!(" [shares an image: {cap}]"));
                }
                let dia = t["dia_id"].as_str().unwrap().to_owned();
                turn_of.entry((id.clone(), text.clone())).or_default().push(dia.clone());
                docs.push(Doc {
                    kind: MemoryType::Experience,
                    bank: id.clone(),
                    session: format!("{id}/session_{n}"),
                    id: format!("{id}/{dia}"),
                    document: None,
                    text,
                });
            }
            n += 1;
        }
        let known: std::collections::HashSet<String> =
            turn_of.iter().filter(|((b, _), _)| *b == id).flat_map(|(_, d)| d.clone()).collect();
        for q in sample["qa"].as_array().unwrap() {
            let ev: Vec<String> = evidence(q).into_iter().filter(|e| known.contains(e)).collect();
            if ev.is_empty() {
                continue;
            }
            questions.push((
                id.clone(),
                q["question"].as_str().unwrap().to_owned(),
                ev,
                q["category"].as_i64().unwrap_or(0),
            ));
        }
    }
    println!("  {} turns, {} questions with evidence", docs.len(), questions.len());
    let backend = open_and_fill(&dir.join("locomo-dev.db"), &docs).await;
    println!("\n| recall | R@1 | R@5 | R@10 | session R@5 | MRR | R@5 cat 1 / 2 / 3 / 4 / 5 |\n|---|---|---|---|---|---|---|");
    // Turn R@5 of each conversation, per ranking: the spread says how far a held-out
    // conversation may land from the mean.
    let mut spread = Vec::new();
    let mut ranks_by_mode = Vec::new();
    for (mode, name) in MODES {
        let (mut turn, mut session, mut by_cat) = (Vec::new(), Vec::new(), BTreeMap::<i64, Vec<usize>>::new());
        let mut by_conversation = BTreeMap::<&str, Vec<usize>>::new();
        for (bank, q, ev, cat) in &questions {
            let results = ranked(&backend, bank, q, mode).await;
            let dias = |t: &str| turn_of.get(&(bank.clone(), t.to_owned())).cloned().unwrap_or_default();
            let r = rank_of(&results, |t| dias(t).iter().any(|d| ev.contains(d)));
            let s = rank_of(&results, |t| dias(t).iter().any(|d| ev.iter().any(|e| session_of(e) == session_of(d))));
            turn.push(r);
            session.push(s);
            by_cat.entry(*cat).or_default().push(r);
            by_conversation.entry(bank.as_str()).or_default().push(r);
        }
        let each: Vec<String> = by_conversation.iter().map(|(c, r)| format!("{c} {:.3}", at(r, 5))).collect();
        spread.push(format!("  {name}: {}", each.join(", ")));
        ranks_by_mode.push(turn.clone());
        let cats: Vec<String> = by_cat.values().map(|r| format!("{:.3}", at(r, 5))).collect();
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} |",
            at(&turn, 1),
            at(&turn, 5),
            at(&turn, 10),
            at(&session, 5),
            mrr(&turn),
            cats.join(" / ")
        );
    }
    println!("\nturn R@5 by conversation:\n{}", spread.join("\n"));
    // Each question's rank by bm25, dense and hybrid, for looking at misses
    // (`MNEME_BENCH_RANKS_LOCOMO=file.tsv`).
    if let Some(p) = std::env::var_os("MNEME_BENCH_RANKS_LOCOMO") {
        use std::io::Write;
        let mut f = std::fs::File::create(p).unwrap();
        for (i, (bank, q, _, _)) in questions.iter().enumerate() {
            let r: Vec<String> = ranks_by_mode.iter().map(|m| m[i].to_string()).collect();
            writeln!(f, "{bank}\t{}\t{q}", r.join("\t")).unwrap();
        }
    }
    // How much the fusion leaves on the table: questions either side alone has in its top 5.
    if let [bm25, dense, hybrid] = &ranks_by_mode[..] {
        let n = hybrid.len().max(1) as f64;
        let either = bm25.iter().zip(dense).filter(|(b, d)| **b <= 5 || **d <= 5).count();
        let lost = (0..hybrid.len()).filter(|&i| hybrid[i] > 5 && (bm25[i] <= 5 || dense[i] <= 5)).count();
        let gained = (0..hybrid.len()).filter(|&i| hybrid[i] <= 5 && bm25[i] > 5 && dense[i] > 5).count();
        let lost_lexical = (0..hybrid.len()).filter(|&i| hybrid[i] > 5 && bm25[i] <= 5).count();
        println!(
            "either side alone in its top 5: {:.3}; hybrid misses {lost} of those ({lost_lexical} in BM25's top 5) and finds {gained} neither side has",
            either as f64 / n
        );
    }
    as_facts(dir, &docs, &turn_of, &questions).await;
    transcripts(dir, &docs, &turn_of, &questions).await;
}

/// LoCoMo's turns retained as a harness feeding a conversation through the `retain` tool or
/// Hindsight's API stores them: facts (world), without a session, one after another in the
/// conversation's bank.
async fn as_facts(dir: &Path, turns: &[Doc], turn_of: &HashMap<(String, String), Vec<String>>, questions: &[Question]) {
    println!("\n## LoCoMo dev, every turn retained as a fact without a session (turn-level R@k)\n");
    let docs: Vec<Doc> = turns
        .iter()
        .map(|t| Doc {
            kind: MemoryType::World,
            bank: t.bank.clone(),
            session: String::new(),
            id: t.id.clone(),
            document: None,
            text: t.text.clone(),
        })
        .collect();
    let backend = open_and_fill(&dir.join("locomo-facts.db"), &docs).await;
    rank_table(&backend, questions, |bank, ev, turn| {
        turn_of.get(&(bank.to_owned(), turn.to_owned())).is_some_and(|d| d.iter().any(|d| ev.contains(d)))
    })
    .await;
}

/// R@1/5/10 and MRR of each ranking over LoCoMo's questions, a result being a hit when
/// `is_hit(bank, evidence, text)`.
async fn rank_table(backend: &LocalBackend, questions: &[Question], is_hit: impl Fn(&str, &[String], &str) -> bool) {
    println!("\n| recall | R@1 | R@5 | R@10 | MRR |\n|---|---|---|---|---|");
    for (mode, name) in MODES {
        let mut ranks = Vec::new();
        for (bank, q, ev, _) in questions {
            let results = ranked(backend, bank, q, mode).await;
            ranks.push(rank_of(&results, |t| is_hit(bank, ev, t)));
        }
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} |",
            at(&ranks, 1),
            at(&ranks, 5),
            at(&ranks, 10),
            mrr(&ranks)
        );
    }
}

/// A fixed permutation (xorshift64, Fisher–Yates): the same order on every run.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        items.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// One LoCoMo question: its conversation (bank), text, evidence turns and category.
type Question = (String, String, Vec<String>, i64);

/// LoCoMo as the `full-session` retain mode stores it: each session one document, its turns
/// joined by blank lines, which the store splits into passages of up to about a thousand
/// characters. A passage is a hit when one of its turns is an evidence turn.
async fn transcripts(
    dir: &Path,
    turns: &[Doc],
    turn_of: &HashMap<(String, String), Vec<String>>,
    questions: &[Question],
) {
    println!("\n## LoCoMo dev as session transcripts (R@k: a passage holding an evidence turn among the first k)\n");
    let mut docs: Vec<Doc> = Vec::new();
    for t in turns {
        match docs.last_mut() {
            Some(d) if d.session == t.session => {
                d.text.push_str("\n\n");
                d.text.push_str(&t.text);
            }
            _ => docs.push(Doc {
                kind: MemoryType::Experience,
                bank: t.bank.clone(),
                session: t.session.clone(),
                id: format!("{}/transcript", t.session),
                document: Some(t.session.clone()),
                text: t.text.clone(),
            }),
        }
    }
    let chars: usize = docs.iter().map(|d| d.text.chars().count()).sum();
    println!("  {} sessions, {} characters each on average", docs.len(), chars / docs.len().max(1));
    let backend = open_and_fill(&dir.join("locomo-transcripts.db"), &docs).await;
    rank_table(&backend, questions, |bank, ev, passage| {
        passage.split("\n\n").any(|turn| {
            turn_of.get(&(bank.to_owned(), turn.trim().to_owned())).is_some_and(|d| d.iter().any(|d| ev.contains(d)))
        })
    })
    .await;
}

/// The first `n` questions of the LoCoMo file.
fn locomo_questions(text: &str, n: usize) -> Vec<String> {
    let data: Vec<Value> = serde_json::from_str(text).unwrap();
    data.iter()
        .flat_map(|s| s["qa"].as_array().unwrap().iter())
        .filter_map(|q| q["question"].as_str().map(str::to_owned))
        .take(n)
        .collect()
}

async fn coding(dir: &Path, name: &str, text: &str, unrelated: &[String]) {
    println!("\n## Coding-memory set `{name}` (hit@k: the question's fact among the first k)\n");
    let data: Value = serde_json::from_str(text).unwrap();
    let bank = "coding".to_owned();
    let mut docs = Vec::new();
    let mut fact_of: HashMap<String, String> = HashMap::new();
    for f in data["facts"].as_array().unwrap() {
        let text = f["text"].as_str().unwrap().to_owned();
        fact_of.insert(text.clone(), f["id"].as_str().unwrap().to_owned());
        docs.push(Doc {
            kind: MemoryType::World,
            bank: bank.clone(),
            session: String::new(),
            id: format!("fact/{}", f["id"].as_str().unwrap()),
            document: None,
            text,
        });
    }
    for (i, d) in data["distractors"].as_array().unwrap().iter().enumerate() {
        docs.push(Doc {
            kind: MemoryType::World,
            bank: bank.clone(),
            session: String::new(),
            id: format!("distractor/{i}"),
            document: None,
            text: d.as_str().unwrap().to_owned(),
        });
    }
    // Notes retained in one session, the facts among the distractors in a fixed shuffled order:
    // each knows the one before it, which is about something else.
    for d in docs.iter_mut() {
        d.session = "notes".into();
    }
    shuffle(&mut docs, 0x5eed_c0d1);
    let parse = |key: &str| -> Vec<(String, String, bool)> {
        data[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| {
                (
                    q["q"].as_str().unwrap().to_owned(),
                    q["fact_id"].as_str().unwrap().to_owned(),
                    q["paraphrased"].as_bool().unwrap_or(false),
                )
            })
            .collect()
    };
    let (questions, reworded) = (parse("questions"), parse("reworded_questions"));
    println!(
        "  {} facts, {} distractors, {} questions, {} reworded",
        fact_of.len(),
        docs.len() - fact_of.len(),
        questions.len(),
        reworded.len()
    );
    let db: PathBuf = dir.join(format!("{name}.db"));
    let backend = open_and_fill(&db, &docs).await;
    println!("\n| recall | hit@1 | hit@5 | hit@10 | MRR | hit@5 lexical half | hit@5 paraphrased half | reworded hit@5 |\n|---|---|---|---|---|---|---|---|");
    // Each question's rank by each ranking, for looking at misses (`MNEME_BENCH_RANKS=file.tsv`).
    let mut ranks_out = std::env::var_os("MNEME_BENCH_RANKS").map(|p| std::fs::File::create(p).unwrap());
    for (mode, name) in MODES {
        let mut all = Vec::new();
        let (mut lex, mut para, mut rew) = (Vec::new(), Vec::new(), Vec::new());
        for (set, out) in [(&questions, None), (&reworded, Some(()))] {
            for (q, fact, paraphrased) in set.iter() {
                let results = ranked(&backend, &bank, q, mode).await;
                let r = rank_of(&results, |t| fact_of.get(t) == Some(fact));
                if let Some(f) = ranks_out.as_mut() {
                    use std::io::Write;
                    let set = if out.is_some() {
                        "reworded"
                    } else if *paraphrased {
                        "paraphrased"
                    } else {
                        "lexical"
                    };
                    writeln!(f, "{name}\t{set}\t{r}\t{fact}\t{q}").unwrap();
                }
                match out {
                    Some(()) => rew.push(r),
                    None => {
                        all.push(r);
                        if *paraphrased {
                            para.push(r)
                        } else {
                            lex.push(r)
                        }
                    }
                }
            }
        }
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            at(&all, 1),
            at(&all, 5),
            at(&all, 10),
            mrr(&all),
            at(&lex, 5),
            at(&para, 5),
            at(&rew, 5)
        );
    }
    if !unrelated.is_empty() {
        // A store should have little to say about what it holds nothing on.
        let mut line = format!("\n  {} questions about something else (LoCoMo's) recall on average:", unrelated.len());
        for (mode, name) in MODES {
            let mut n = 0;
            for q in unrelated {
                n += ranked(&backend, &bank, q, mode).await.len();
            }
            line.push_str(&format!(" {name} {:.1},", n as f64 / unrelated.len() as f64));
        }
        println!("{} results", line.trim_end_matches(','));
    }
}
