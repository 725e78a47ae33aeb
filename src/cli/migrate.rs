//! `mneme migrate --from A --to B`: copies memories between stores in this process (the daemon
//! may keep running). Resumable: progress is saved after every page in
//! `<storage.dir>/migrate-A-to-B.json`, and a second run continues from there. Idempotent: the
//! local store keys memories by id, Hindsight replaces a memory's document on a re-send. Hindsight
//! lists a bank by offset, so a copy from it ends by reading the bank again for what a change
//! during the copy made the first reading skip.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use mneme_core::transfer::{document_of, oldest_first};
use mneme_core::{BackendError, BackendId, ExportPage, MemoryBackend, StoredMemory};
use serde::{Deserialize, Serialize};

use super::commands::load_settings;
use super::versions::TargetVersions;
use super::CliError;

/// Memories read per page.
const PAGE: usize = 200;

/// Memories read per page when the source is read again (see [`sweep`]).
const SWEEP_PAGE: usize = 1000;

/// How often the source is read again at most.
const SWEEPS: usize = 3;

/// What to copy.
pub(super) struct Plan {
    pub from: BackendId,
    pub to: BackendId,
    pub bank: Option<String>,
    pub limit: Option<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Progress {
    cursor: Option<String>,
    copied: u64,
    bank: Option<String>,
    /// The stores copied from and to (see [`stores_of`]): a run against others starts over.
    #[serde(default)]
    stores: u64,
}

/// Which stores a copy goes between, as a fingerprint (a URL may hold a password): the local
/// store's file, the Hindsight server's URL. Progress saved against others is not resumed: after
/// `local.path` or `hindsight.api_url` was edited, the cursor and the memories seen belonged
/// to other stores, and the copy said it was done with what it had copied to the old one.
fn stores_of(settings: &crate::config::Settings, plan: &Plan) -> u64 {
    crate::session::fingerprint(&format!("{}\n{}", settings.store_of(plan.from), settings.store_of(plan.to)))
}

/// A page of `want` memories, and the pages after it while a document runs on into them: a
/// backend stores a document as what one request holds of it (Hindsight replaces the rest), so
/// a document is never cut in two by a page boundary. A page read ahead that does not continue
/// the document is kept in `ahead`: it is the next call's page (read again only if it is larger
/// than that call wants).
async fn read_whole_documents(
    source: &dyn MemoryBackend,
    bank: Option<&str>,
    cursor: Option<&str>,
    want: usize,
    ahead: &mut Option<ExportPage>,
) -> Result<ExportPage, BackendError> {
    let mut page = match ahead.take() {
        Some(page) if page.memories.len() <= want => page,
        _ => source.export(bank, cursor, want).await?,
    };
    while let (Some(next), Some(last)) = (page.next.clone(), page.memories.last()) {
        let Some(document) = document_of(last).map(str::to_owned) else { break };
        let bank_of_last = last.bank.clone();
        let more = source.export(bank, Some(&next), PAGE).await?;
        let continues =
            more.memories.first().is_some_and(|m| m.bank == bank_of_last && document_of(m) == Some(document.as_str()));
        if !continues {
            *ahead = Some(more);
            break;
        }
        page.memories.extend(more.memories);
        page.next = more.next;
    }
    if source.id() == BackendId::Hindsight {
        oldest_first(&mut page.memories);
    }
    Ok(page)
}

/// Hindsight lists a bank by offset, newest first: a memory deleted during the copy (a document
/// replaced by a new retain, a consolidation) moves every later one a place forward, and the next
/// page skips as many as went. So once the copy is through, the bank is read again and whatever
/// this run has not seen is copied; again, up to [`SWEEPS`] times, until a reading finds nothing
/// new. Returns how many of those the target did not have yet (what the first pass had skipped,
/// or what arrived meanwhile; a resumed run sees again what an earlier run copied, and the
/// target, which keys memories by id, stores none of it twice).
async fn sweep(
    source: &dyn MemoryBackend,
    target: &dyn MemoryBackend,
    bank: Option<&str>,
    seen: &mut HashSet<String>,
    settings: &crate::config::Settings,
    versions: &mut TargetVersions,
) -> Result<u64, BackendError> {
    let mut stored = 0;
    for _ in 0..SWEEPS {
        let mut found = 0;
        let mut cursor: Option<String> = None;
        loop {
            let page = source.export(bank, cursor.as_deref(), SWEEP_PAGE).await?;
            // A memory not seen yet goes with every memory of its document on the page (the local
            // store pages whole documents): an append found alone would replace its document on
            // Hindsight with itself.
            let unseen_documents: HashSet<(String, String)> = page
                .memories
                .iter()
                .filter(|m| !seen.contains(&m.id))
                .filter_map(|m| document_of(m).map(|d| (m.bank.clone(), d.to_owned())))
                .collect();
            let mut unseen = page.memories;
            let mut new_here = 0;
            unseen.retain(|m| {
                let new = seen.insert(m.id.clone());
                new_here += usize::from(new);
                new || document_of(m).is_some_and(|d| unseen_documents.contains(&(m.bank.clone(), d.to_owned())))
            });
            if !unseen.is_empty() {
                found += new_here;
                // Counted: the memories found, not those of their documents sent along.
                if source.id() == BackendId::Hindsight {
                    oldest_first(&mut unseen);
                }
                let mut fit = fit_to_import(settings, unseen).fit;
                versions.keep_newer(target, &mut fit, seen).await?;
                target.import(&fit).await?;
                stored += new_here as u64;
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if found == 0 {
            break;
        }
    }
    Ok(stored)
}

/// A page as the target is given it: each memory checked and cleaned as `/v1/import` does (a
/// Hindsight server holds what other clients wrote: private spans, blank or odd ids and dates).
fn fit_to_import(settings: &crate::config::Settings, memories: Vec<StoredMemory>) -> Fitted {
    let read = memories.len() as u64;
    let mut first_refusal = None;
    let fit: Vec<StoredMemory> = memories
        .into_iter()
        .filter(|m| match crate::daemon::import_problem(m) {
            None => true,
            Some(problem) => {
                first_refusal.get_or_insert_with(|| refusal_of(m, &problem));
                false
            }
        })
        .collect();
    let fit = crate::session::clean_imported_all(settings, fit);
    let left_out = read - fit.len() as u64;
    Fitted { fit, left_out, first_refusal }
}

/// What [`fit_to_import`] leaves of a page.
struct Fitted {
    /// The memories to copy, cleaned.
    fit: Vec<StoredMemory>,
    /// How many were left out: refused, or blank once cleaned.
    left_out: u64,
    /// The first refused, and why (see [`refusal_of`]).
    first_refusal: Option<String>,
}

/// `memory "ID": why`, for the summary; the id left out when it holds a private span.
fn refusal_of(m: &StoredMemory, problem: &crate::daemon::ImportProblem) -> String {
    match mneme_core::text::has_private_tag(&m.id) {
        true => format!("a memory: {problem}"),
        false => format!("memory {:?}: {problem}", m.id),
    }
}

/// The progress file of a copy of `bank`: `migrate-A-to-B.json` for a copy of no bank, of the
/// configured one or of the one `--bank` names, one a project bank of a copy of them all.
fn state_path(dir: &Path, plan: &Plan, bank: Option<&str>, base: &str) -> PathBuf {
    match bank {
        Some(b) if b != base && plan.bank.is_none() => {
            dir.join(format!("migrate-{}-to-{}-bank-{:016x}.json", plan.from, plan.to, crate::session::fingerprint(b)))
        }
        _ => dir.join(format!("migrate-{}-to-{}.json", plan.from, plan.to)),
    }
}

/// What a copy did, over all of its banks.
#[derive(Debug, Default)]
struct Copied {
    this_run: u64,
    total: u64,
    found_again: u64,
    skipped: u64,
    /// The first memory left out because an import refuses it, and why.
    first_refusal: Option<String>,
    /// Documents left as the target has them: it holds a newer version (see [`TargetVersions`]),
    /// and their memories (read, not copied).
    kept_newer: u64,
    kept_newer_memories: u64,
    finished: bool,
    /// What became of progress saved before that was not simply resumed.
    progress_note: Option<&'static str>,
}

pub(super) async fn migrate(config: Option<&Path>, plan: Plan, as_json: bool) -> Result<ExitCode, CliError> {
    // It may create the storage dir and the memories' store: as private as the daemon makes them.
    crate::files::create_private();
    if plan.from == plan.to {
        return Err(CliError::Other("--from and --to name the same backend".into()));
    }
    if plan.from == BackendId::Off || plan.to == BackendId::Off {
        return Err(CliError::Other("the off backend stores nothing: migrate between local and hindsight".into()));
    }
    let mut settings = load_settings(config)?.settings;
    // A copy computes no vectors: the daemon embeds what it finds without one.
    settings.local.embedder = crate::config::EmbedderKind::Off;
    // A daemon running on the storage may be an earlier mneme's: its store is not upgraded
    // under it (the daemon's own start does that).
    let daemon = super::client::locked_pid(&settings.pid_path());
    let open = |id| {
        let opened = match daemon {
            Some(_) => crate::backends::build_id_beside_daemon(id, &settings),
            None => crate::backends::build_id(id, &settings),
        };
        opened.map_err(|e| CliError::Other(format!("cannot open the {id} backend: {e}")))
    };
    let (source, target) = (open(plan.from)?, open(plan.to)?);
    std::fs::create_dir_all(&settings.storage.dir)
        .map_err(|e| CliError::Other(format!("cannot create {}: {e}", settings.storage.dir.display())))?;
    let banks = banks_to_copy(source.as_ref(), &settings, &plan).await?;
    let mut all = Copied { finished: true, ..Copied::default() };
    let mut lines = Vec::new();
    for bank in &banks {
        // `--limit` bounds the run, not each bank.
        let left = plan.limit.map(|l| l.saturating_sub(all.this_run));
        if left == Some(0) {
            all.finished = false;
            break;
        }
        let plan = Plan { limit: left, bank: plan.bank.clone(), ..plan };
        let copied = copy_bank(source.as_ref(), target.as_ref(), &settings, &plan, bank.as_deref()).await?;
        let line = summary(&plan, &copied);
        lines.push(match (bank, banks.len()) {
            (Some(b), 2..) => format!("Bank {b}: {line}"),
            _ => line,
        });
        all.this_run += copied.this_run;
        all.total += copied.total;
        all.found_again += copied.found_again;
        all.skipped += copied.skipped;
        all.kept_newer += copied.kept_newer;
        all.kept_newer_memories += copied.kept_newer_memories;
        if !copied.finished {
            all.finished = false;
            break; // the banks after it wait for the run that finishes this one
        }
    }
    if as_json {
        println!(
            "{}",
            serde_json::json!({"copied": all.this_run - all.kept_newer_memories, "total_copied": all.total, "finished": all.finished, "found_again": all.found_again, "skipped": all.skipped, "kept_newer": all.kept_newer, "banks": banks.len()})
        );
    } else {
        if banks.is_empty() {
            lines.push(format!(
                "The Hindsight server holds no bank of this configuration ({}); nothing to copy.",
                settings.base_bank()
            ));
        }
        println!("{}", lines.join("\n"));
    }
    Ok(ExitCode::SUCCESS)
}

/// The banks a copy goes through: the one named; every bank a local store holds (read as one);
/// from Hindsight, which is read a bank at a time, every bank of this configuration the server
/// has — the configured one and, under `per-project` scoping, one a project (`{bank}-{project}`;
/// under the other scopings none: a bank of that name may be another tool's). Copying the
/// configured bank alone left every project's memories behind without a word.
async fn banks_to_copy(
    source: &dyn MemoryBackend,
    settings: &crate::config::Settings,
    plan: &Plan,
) -> Result<Vec<Option<String>>, CliError> {
    if let Some(bank) = &plan.bank {
        // A misspelt --bank copied nothing and said "done". Asked of the bank itself (a
        // Hindsight server lists its banks a page at a time); the list only names the others.
        if bank.trim().is_empty() {
            return Err(CliError::Other("--bank names no bank (it is blank); nothing was copied".into()));
        }
        let first = source.export(Some(bank), None, 1).await;
        if first.is_ok_and(|page| page.memories.is_empty()) {
            let banks = source.banks().await.map_err(|e| e.to_string());
            return Err(CliError::Other(format!(
                "no bank {bank:?} in {} holds memories ({}); nothing was copied",
                plan.from,
                super::transfer::banks_held(banks)
            )));
        }
        return Ok(vec![Some(bank.clone())]);
    }
    if source.capabilities().lists_every_bank {
        return Ok(vec![None]);
    }
    let listed =
        source.banks().await.map_err(|e| CliError::Other(format!("listing the banks of {}: {e}", plan.from)))?;
    let banks = crate::session::banks_of_configuration(settings, listed.into_iter().map(|b| b.bank));
    Ok(banks.into_iter().map(Some).collect())
}

/// Said of progress an older mneme saved, which does not name the stores it copied between.
const PROGRESS_UNFINGERPRINTED: &str =
    "resumed from progress an older mneme saved, which does not say which stores it copied between: if local.path or hindsight.api_url changed since, delete the progress file in the storage dir and run again";
/// Said of progress saved for other stores.
const PROGRESS_OTHER_STORES: &str =
    "started over: the progress saved was for other stores (local.path or hindsight.api_url changed since)";

/// What one bank's copy says it did.
fn summary(plan: &Plan, c: &Copied) -> String {
    let mut resumed =
        if c.total > c.this_run { format!(" (resumed after {})", c.total - c.this_run) } else { String::new() };
    if let Some(note) = c.progress_note {
        resumed.push_str(&format!(" ({note})"));
    }
    if c.skipped > 0 {
        let first = match &c.first_refusal {
            Some(refusal) => format!("; the first refused: {refusal}"),
            None => String::new(),
        };
        resumed.push_str(&format!(
            " ({} of them left out, as an import would: blank or private only, or refused{first})",
            c.skipped
        ));
    }
    if c.kept_newer > 0 {
        let documents = match c.kept_newer {
            1 => "its document".to_owned(),
            n => format!("their {n} documents"),
        };
        resumed.push_str(&format!(
            " ({} more read and left out: {} holds a version of {documents} dated later)",
            c.kept_newer_memories, plan.to
        ));
    }
    // Read, but not copied: the documents the target holds newer.
    let copied = c.this_run - c.kept_newer_memories;
    if c.finished && c.found_again > 0 {
        format!(
            "Copied {} memories from {} to {}{resumed}, and {} more the bank's list had moved past while it changed (found by reading it again); done.",
            copied, plan.from, plan.to, c.found_again
        )
    } else if c.finished {
        format!("Copied {copied} memories from {} to {}{resumed}; done.", plan.from, plan.to)
    } else {
        format!(
            "Copied {copied} memories from {} to {}{resumed}; {} so far. Run the same command again to continue.",
            plan.from, plan.to, c.total
        )
    }
}

/// Copies one bank (every bank, for `None` from a store that lists them all), resuming the
/// progress saved for it.
async fn copy_bank(
    source: &dyn MemoryBackend,
    target: &dyn MemoryBackend,
    settings: &crate::config::Settings,
    plan: &Plan,
    bank: Option<&str>,
) -> Result<Copied, CliError> {
    let bank_owned = bank.map(str::to_owned);
    let state_file = state_path(&settings.storage.dir, plan, bank, &settings.base_bank());
    let stores = stores_of(settings, plan);
    let saved: Option<Progress> = std::fs::read_to_string(&state_file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .filter(|p: &Progress| p.bank == bank_owned && p.copied > 0);
    let (mut progress, progress_note) = match saved {
        Some(p) if p.stores == stores => (p, None),
        // Saved by a mneme from before the fingerprint: resumed, as that mneme would have.
        Some(p) if p.stores == 0 => (Progress { stores, ..p }, Some(PROGRESS_UNFINGERPRINTED)),
        Some(_) => (Progress { bank: bank_owned.clone(), stores, ..Progress::default() }, Some(PROGRESS_OTHER_STORES)),
        None => (Progress { bank: bank_owned.clone(), stores, ..Progress::default() }, None),
    };
    let resumed_at = progress.copied;
    let total = match bank {
        Some(b) => source.banks().await.ok().and_then(|l| l.into_iter().find(|x| x.bank == b)).and_then(|x| x.memories),
        None => source.status().await.memories,
    };
    let bar = match total {
        Some(t) => ProgressBar::new(t),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {bar:30} {pos}/{len} memories ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(progress.copied);
    let mut this_run = 0u64;
    let mut finished = false;
    let mut ahead = None;
    // Read but not copied: what `/v1/import` would refuse or clean away (see `fit_to_import`).
    let mut skipped = 0u64;
    let mut first_refusal = None;
    // Documents the target holds a newer version of: left as they are there.
    let mut versions = TargetVersions::default();
    let mut kept_newer = 0u64;
    let mut kept_newer_memories = 0u64;
    // What this run read, for the source read again at the end (see `sweep`): Hindsight's list
    // is paged by offset, newest first; the local store's by a sequence that a replaced
    // document's new version (or a memory retained after the newest was forgotten) may take
    // from before the cursor, and a document appended to after its first page was read.
    // Kept beside the progress, so that a resumed run's sweep does not take what earlier runs
    // copied for changes (and copy it all again): one JSON string a line, appended a page at a time.
    let seen_file = state_file.with_extension("seen");
    let mut seen: HashSet<String> = if resumed_at > 0 {
        std::fs::read_to_string(&seen_file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    } else {
        let _ = std::fs::remove_file(&seen_file);
        HashSet::new()
    };
    loop {
        if plan.limit.is_some_and(|l| this_run >= l) {
            break;
        }
        let want = plan.limit.map_or(PAGE, |l| PAGE.min((l - this_run) as usize));
        let page = read_whole_documents(source, bank, progress.cursor.as_deref(), want, &mut ahead)
            .await
            .map_err(|e| CliError::Other(format!("reading from {}: {e}", plan.from)))?;
        if page.memories.is_empty() {
            finished = true;
            break;
        }
        let n = page.memories.len() as u64;
        let mut fitted = fit_to_import(settings, page.memories.clone());
        skipped += fitted.left_out;
        first_refusal = first_refusal.or(fitted.first_refusal);
        let (documents, memories) = versions.keep_newer(target, &mut fitted.fit, &seen).await.map_err(|e| {
            CliError::Other(format!(
                "reading {} for the versions of the documents it holds (progress is saved; run the same command again to resume): {e}",
                plan.to
            ))
        })?;
        kept_newer += documents;
        kept_newer_memories += memories;
        // Remembered before they are written: a run cut between the two would find them on the
        // target as versions of its own, and leave out the older rest of their documents. (The
        // progress is saved after: a resumed run reads this page again.)
        remember_seen(&seen_file, &page.memories)?;
        seen.extend(page.memories.iter().map(|m| m.id.clone()));
        target.import(&fitted.fit).await.map_err(|e| {
            CliError::Other(format!(
                "writing to {} (progress is saved; run the same command again to resume): {e}",
                plan.to
            ))
        })?;
        this_run += n;
        progress.copied += n;
        bar.inc(n);
        let at_end = page.next.is_none();
        progress.cursor = page.next.or(progress.cursor.take());
        save(&state_file, &progress)?;
        if at_end {
            finished = true;
            break;
        }
    }
    let mut found_again = 0;
    if finished {
        found_again = sweep(source, target, bank, &mut seen, settings, &mut versions).await.map_err(|e| {
            CliError::Other(format!(
                "reading {} again for what changed during the copy (all it read once is copied; run the same command again to finish): {e}",
                plan.from
            ))
        })?;
    }
    bar.finish_and_clear();
    if finished {
        let _ = std::fs::remove_file(&state_file);
        let _ = std::fs::remove_file(&seen_file);
    }
    Ok(Copied {
        this_run,
        total: progress.copied,
        found_again,
        skipped,
        first_refusal,
        kept_newer,
        kept_newer_memories,
        finished,
        progress_note,
    })
}

/// Appends the ids of a page copied to `path` (see `seen_file`).
fn remember_seen(path: &Path, memories: &[StoredMemory]) -> Result<(), CliError> {
    use std::io::Write;
    let lines: String = memories.iter().map(|m| serde_json::to_string(&m.id).expect("a string") + "\n").collect();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(lines.as_bytes()))
        .map_err(|e| CliError::Other(format!("cannot save progress to {}: {e}", path.display())))
}

fn save(path: &Path, p: &Progress) -> Result<(), CliError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string(p).expect("progress serializes"))
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| CliError::Other(format!("cannot save progress to {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mneme_core::*;

    /// Progress saved against other stores is not resumed: after `local.path` or
    /// `hindsight.api_url` was edited the copy starts over (its cursor and the memories it saw
    /// belonged to the old ones); a trailing slash is the same server.
    #[test]
    fn progress_names_the_stores_it_was_made_against() {
        let plan = Plan { from: BackendId::Hindsight, to: BackendId::Local, bank: None, limit: None };
        let mut settings = crate::config::Settings::default();
        settings.local.path = Some("/a/memories.db".into());
        let first = stores_of(&settings, &plan);
        settings.hindsight = crate::config::HindsightConfig::new("http://localhost:8888/");
        assert_eq!(stores_of(&settings, &plan), first);
        settings.local.path = Some("/b/memories.db".into());
        assert_ne!(stores_of(&settings, &plan), first);
        settings.local.path = Some("/a/memories.db".into());
        settings.hindsight = crate::config::HindsightConfig::new("http://10.0.0.2:8888");
        assert_ne!(stores_of(&settings, &plan), first);
        // A progress file of an older version names no stores (0): told apart from any copy's.
        let old: Progress = serde_json::from_str(r#"{"cursor":"200","copied":200,"bank":null}"#).unwrap();
        assert_ne!(old.stores, first);
    }

    /// Progress an older mneme saved (no stores named) is resumed, and says so; progress saved
    /// for other stores is set aside, and that is said too (it was set aside without a word).
    #[tokio::test]
    async fn old_and_foreign_progress_are_resumed_or_set_aside_with_a_word() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = crate::config::Settings::default();
        settings.storage.dir = dir.path().to_owned();
        settings.local.path = Some(dir.path().join("m.db"));
        let local =
            mneme_local::LocalBackend::open(&mneme_local::LocalConfig::lexical(settings.local_db_path())).unwrap();
        let scope = Scope { bank: "b".into(), tags: vec![] };
        for i in 0..3 {
            let batch = RetainBatch {
                id: format!("batch-{i}"),
                items: vec![MemoryItem::new(format!("m{i}"), format!("fact number {i}"), "2026-01-01T00:00:00.000Z")],
            };
            local.retain(&scope, &batch).await.unwrap();
        }
        let target = crate::queue::tests::TestBackend::new(&[crate::queue::tests::Mode::Ok]);
        let plan = |limit| Plan { from: BackendId::Local, to: BackendId::Hindsight, bank: None, limit };
        let first = copy_bank(&local, target.as_ref(), &settings, &plan(Some(1)), None).await.unwrap();
        assert_eq!((first.this_run, first.progress_note), (1, None));
        let file = state_path(dir.path(), &plan(None), None, &settings.base_bank());
        let mut saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        saved.as_object_mut().unwrap().remove("stores");
        std::fs::write(&file, saved.to_string()).unwrap();
        let old = copy_bank(&local, target.as_ref(), &settings, &plan(Some(1)), None).await.unwrap();
        assert_eq!((old.this_run, old.total, old.progress_note), (1, 2, Some(PROGRESS_UNFINGERPRINTED)));
        saved["stores"] = serde_json::json!(12345);
        saved["copied"] = serde_json::json!(2);
        std::fs::write(&file, saved.to_string()).unwrap();
        let foreign = copy_bank(&local, target.as_ref(), &settings, &plan(None), None).await.unwrap();
        assert_eq!((foreign.this_run, foreign.total, foreign.progress_note), (3, 3, Some(PROGRESS_OTHER_STORES)));
        assert!(summary(&plan(None), &foreign).contains("started over"), "{}", summary(&plan(None), &foreign));
    }

    /// A document the target holds a newer version of is left as it is there: after a live
    /// switch, a client's plan replaced on the new store was put back to the old store's version,
    /// and migrate said it was done (review37 #1). An older one, and a document it lacks, are copied.
    #[tokio::test]
    async fn a_document_newer_on_the_target_is_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = crate::config::Settings::default();
        settings.storage.dir = dir.path().to_owned();
        settings.local.path = Some(dir.path().join("source.db"));
        let open = |name: &str| {
            mneme_local::LocalBackend::open(&mneme_local::LocalConfig::lexical(dir.path().join(name))).unwrap()
        };
        let (source, target) = (open("source.db"), open("target.db"));
        let scope = Scope { bank: "b".into(), tags: vec![] };
        let retain = |id: &str, content: &str, doc: &str, at: &str| RetainBatch {
            id: format!("batch-{id}"),
            items: vec![MemoryItem { document_id: Some(doc.into()), ..MemoryItem::new(id, content, at) }],
        };
        source
            .retain(&scope, &retain("p1", "plan v1: deploy on friday", "plan", "2026-01-01T00:00:00.000Z"))
            .await
            .unwrap();
        source
            .retain(&scope, &retain("n2", "notes v2: the newer notes", "notes", "2026-01-03T00:00:00.000Z"))
            .await
            .unwrap();
        source.retain(&scope, &retain("o1", "only in the source", "only", "2026-01-01T00:00:00.000Z")).await.unwrap();
        target
            .retain(&scope, &retain("p2", "plan v2: deploy moved to monday", "plan", "2026-01-02T00:00:00.000Z"))
            .await
            .unwrap();
        target
            .retain(&scope, &retain("n1", "notes v1: the older notes", "notes", "2026-01-02T00:00:00.000Z"))
            .await
            .unwrap();
        let plan = Plan { from: BackendId::Local, to: BackendId::Local, bank: None, limit: None };
        let copied = copy_bank(&source, &target, &settings, &plan, None).await.unwrap();
        assert_eq!(copied.kept_newer, 1);
        assert_eq!(
            summary(&plan, &copied),
            "Copied 2 memories from local to local (1 more read and left out: local holds a version of its document dated later); done."
        );
        let on_target: Vec<String> =
            target.export(Some("b"), None, 100).await.unwrap().memories.into_iter().map(|m| m.content).collect();
        assert!(!on_target.iter().any(|c| c.contains("plan v1")), "{on_target:?}");
        for kept in ["plan v2", "notes v2", "only in the source"] {
            assert!(on_target.iter().any(|c| c.contains(kept)), "{kept}: {on_target:?}");
        }
    }

    /// Read again at the end, the local store gives what its cursor moved past during the copy:
    /// a replaced document's new version, which took the sequence number of the one it replaced
    /// (missed, and the progress saved past it), and an append to a document already read, sent
    /// with the rest of its document (alone, it would replace the document on Hindsight).
    #[tokio::test]
    async fn reading_the_local_store_again_finds_what_its_cursor_moved_past() {
        let dir = tempfile::tempdir().unwrap();
        let local =
            mneme_local::LocalBackend::open(&mneme_local::LocalConfig::lexical(dir.path().join("m.db"))).unwrap();
        let scope = Scope { bank: "b".into(), tags: vec![] };
        let retain = |id: &str, content: &str, doc: &str, append: bool| RetainBatch {
            id: format!("batch-{id}"),
            items: vec![MemoryItem {
                document_id: Some(doc.into()),
                append,
                ..MemoryItem::new(id, content, "2026-01-01T00:00:00.000Z")
            }],
        };
        local.retain(&scope, &retain("r1", "runbook first step", "runbook", false)).await.unwrap();
        local.retain(&scope, &retain("t1", "transcript version one", "transcript", false)).await.unwrap();
        let copied = local.export(None, None, 100).await.unwrap().memories;
        let mut seen: HashSet<String> = copied.iter().map(|m| m.id.clone()).collect();
        local.retain(&scope, &retain("t2", "transcript version two", "transcript", false)).await.unwrap();
        local.retain(&scope, &retain("r2", "runbook second step", "runbook", true)).await.unwrap();
        let target = crate::queue::tests::TestBackend::new(&[crate::queue::tests::Mode::Ok]);
        let settings = crate::config::Settings::default();
        let mut versions = TargetVersions::default();
        let found = sweep(&local, target.as_ref(), None, &mut seen, &settings, &mut versions).await.unwrap();
        let mut sent: Vec<String> = target.imports.lock().unwrap().concat();
        sent.sort();
        assert_eq!(sent, ["runbook first step", "runbook second step", "transcript version two"]);
        assert_eq!(found, 2, "the new version and the append; not the document's first part, sent along");
    }

    #[test]
    fn a_copy_checks_and_cleans_as_an_import_does() {
        let m = |id: &str, content: &str| StoredMemory {
            id: id.into(),
            bank: "b".into(),
            content: content.into(),
            context: Some("<private>why</private>".into()),
            tags: vec![],
            metadata: Default::default(),
            document_id: None,
            kind: Default::default(),
            created_at: "2026-01-01T00:00:00Z".into(),
        };
        let page = vec![
            m("1", "kept <private>the key is hunter2</private>as it is"),
            m("2", "<private>nothing but this</private>"),
            m("..", "an id no URL can name"),
            StoredMemory { created_at: "yesterday".into(), ..m("4", "a date it refuses") },
        ];
        let Fitted { fit, left_out, first_refusal } = fit_to_import(&crate::config::Settings::default(), page);
        assert_eq!(left_out, 3);
        assert_eq!(
            first_refusal.as_deref(),
            Some("memory \"..\": id may not be \".\" or \"..\" (a URL cannot name it)")
        );
        assert_eq!(fit.len(), 1);
        assert!(!fit[0].content.contains("hunter2") && fit[0].content.starts_with("kept"), "{}", fit[0].content);
        assert_eq!(fit[0].context, None);
    }
}
