//! `mneme export` and `mneme import`: JSON lines through the running daemon, a page at a time.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mneme_core::transfer::{document_of, oldest_first, sized_chunks_of_whole_documents, ChunkLimit, SizedChunk};
use mneme_core::StoredMemory;
use reqwest::Method;

use super::commands::load_client_settings;
use super::{CliError, Client};
use crate::daemon::api::{ExportAnswer, ImportBody, Imported};
use sink::Sink;

mod sink;

/// Memories sent per import request at most (each request also within the body limit).
const IMPORT_CHUNK: usize = 500;

/// A memory of an import file and the line it is on.
struct Line {
    number: usize,
    memory: StoredMemory,
}

impl std::borrow::Borrow<StoredMemory> for Line {
    fn borrow(&self) -> &StoredMemory {
        &self.memory
    }
}

/// Refuses an export over one of the files this configuration runs on (its store, its spool, its
/// token or pidfile, the config file itself): renamed into place, the export replaced the
/// running daemon's store, which then could not start again (review115 #3).
fn refuse_own_file(output: &Path, loaded: &crate::config::Loaded) -> Result<(), CliError> {
    let own = loaded.settings.private_files().into_iter().chain([loaded.path.clone()]);
    refuse_any_of(output, own)
}

/// [`refuse_own_file`] for the files the running daemon says it runs on: its store may not be
/// the one this command's config names (a reload it refused, a store named by its environment,
/// a typo that made this command pass over `[local]`: review118 #2).
fn refuse_daemons_file(output: &Path, status: &crate::daemon::api::Status) -> Result<(), CliError> {
    let dir = Path::new(&status.storage_dir);
    let databases = status.local_store.iter().map(PathBuf::from).chain([dir.join("spool.db")]);
    let with_logs =
        databases.flat_map(|db| ["", "-wal", "-shm"].map(|suffix| mneme_core::database_file::beside(&db, suffix)));
    let own = with_logs.chain([dir.join("token"), dir.join("mneme.pid"), PathBuf::from(&status.config_path)]);
    refuse_any_of(output, own)
}

fn refuse_any_of(output: &Path, own: impl IntoIterator<Item = PathBuf>) -> Result<(), CliError> {
    match own.into_iter().find(|own| crate::files::same_file(output, own)) {
        Some(own) => Err(CliError::Other(format!(
            "cannot write {}: it is {}, which mneme runs on; export to a file of its own",
            output.display(),
            own.display()
        ))),
        None => Ok(()),
    }
}

pub(super) async fn export(
    config: Option<&Path>,
    bank: Option<String>,
    output: Option<PathBuf>,
    as_json: bool,
) -> Result<ExitCode, CliError> {
    let loaded = load_client_settings(config)?;
    if let Some(path) = &output {
        refuse_own_file(path, &loaded)?;
    }
    let settings = loaded.settings;
    let client = Client::connect(&settings).await?;
    let status: crate::daemon::api::Status = client.get("/v1/status").await?;
    if let Some(path) = &output {
        refuse_daemons_file(path, &status)?;
    }
    if let Some(bank) = &bank {
        known_bank(&client, bank).await?;
    }
    // Signals are listened for only when writing a file beside the one it replaces (so that
    // what it wrote is removed), from before that file exists; to standard output, a FIFO or a
    // device they stop the export as ever (a FIFO without a reader waits in its open, which
    // Ctrl-C must still end).
    let stopped = output.as_deref().is_some_and(Sink::replaces).then(stop_signal);
    // A file is written beside its name and renamed over it once whole: an export that fails
    // part-way leaves an earlier backup of that name as it was, not a truncated one.
    let mut out = match &output {
        Some(path) => Sink::open(path)?,
        None => Sink::stdout(),
    };
    // Stopped (Ctrl-C, a terminal closed, SIGTERM), the export goes the way of a failed one: a
    // partial copy of every memory is not left beside the file (the sink's drop removes it).
    let mut lines = 0u64;
    let written = {
        let mut counted = CountedLines { inner: &mut out, lines: &mut lines };
        tokio::select! {
            written = write_export(&client, &settings, &status, bank, &mut counted) => written,
            Some(signal) = async { Some(stopped?.await) } => Err(CliError::Other(format!("stopped by {signal}"))),
        }
    };
    let n = match (written, &out) {
        (Ok(n), _) => n,
        (Err(e), Sink::Replacing { .. }) => {
            let path = output.as_ref().expect("a file is replaced only for an output path");
            return Err(e.with_note(&format!("; {} was left as it was", path.display())));
        }
        // Written as it went (standard output, a FIFO): what came out is not the whole export,
        // and is said so (a backup redirected to a file kept a part of one, silently).
        // Counted as they went into the output's buffer: exact once it is flushed; where the
        // output refuses (a full disk), some of them may never have reached it.
        (Err(e), _) => {
            let flushed = out.flush().is_ok();
            // Nothing came out (the backend refused the first page: memory is off): not an
            // export cut short that the same command again completes (review65 #2).
            if lines == 0 && flushed {
                return Err(e.with_note("; nothing was exported"));
            }
            let noun = if lines == 1 { "memory was" } else { "memories were" };
            let how_many = match flushed {
                true => format!("{lines} {noun} written before that"),
                false => format!("at most {lines} {noun} written before that, the last perhaps cut"),
            };
            return Err(e.with_note(&format!(
                "; the export is incomplete: {how_many} (the same command again writes them all)"
            )));
        }
    };
    let to_stdout = matches!(out, Sink::Stdout(_));
    out.finish()?;
    if let Some(path) = output {
        if as_json && to_stdout {
            // `-o /dev/stdout`: standard output holds the memories, not a count among them.
        } else if as_json {
            // Standard output is free when the memories went to a file: a script reads the count.
            println!("{}", serde_json::json!({"exported": n, "path": path}));
        } else {
            crate::say!("Exported {n} {} to {}.", if n == 1 { "memory" } else { "memories" }, path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The signal that stops a command: Ctrl-C, a closed terminal or SIGTERM (never, if they cannot
/// be listened for).
/// Listens from the call on, not from the first poll: a signal before that would stop the
/// command the default way, leaving what it was writing.
fn stop_signal() -> impl std::future::Future<Output = &'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let signals = (signal(SignalKind::interrupt()), signal(SignalKind::hangup()), signal(SignalKind::terminate()));
    async move {
        let (Ok(mut int), Ok(mut hup), Ok(mut term)) = signals else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => "Ctrl-C",
            _ = hup.recv() => "SIGHUP",
            _ = term.recv() => "SIGTERM",
        }
    }
}

/// Refuses a bank that holds no memory, naming those that do (as far as the backend lists
/// them): a misspelt `--bank` exported nothing and said it succeeded. Asked of the bank itself,
/// not looked up in the list (a Hindsight server lists its banks a page at a time).
pub(super) async fn known_bank(client: &Client, bank: &str) -> Result<(), CliError> {
    // (The daemon reads a blank bank as none given: every bank.)
    if bank.trim().is_empty() {
        return Err(CliError::Other("--bank names no bank (it is blank); nothing was exported".into()));
    }
    let path = format!("/v1/export?limit=1&bank={}", super::browse::encode(bank));
    let page: ExportAnswer = client.call(Method::GET, &path, None).await?;
    if !page.memories.is_empty() {
        return Ok(());
    }
    let listed = client.get::<crate::daemon::api::BankList>("/v1/banks").await;
    let banks = listed.map(|l| l.banks).map_err(|e| e.to_string());
    Err(CliError::Other(format!("no bank {bank:?} holds memories ({}); nothing was exported", banks_held(banks))))
}

/// "those that do: a, b" (sorted), "there are none", or why they could not be listed. A bank
/// listed with no memories (a Hindsight server keeps a cleared one) is not among them: the bank
/// said to hold none was named among those that do (review64 #4).
pub(super) fn banks_held(banks: Result<Vec<mneme_core::BankCount>, String>) -> String {
    let names = banks.map(|l| l.into_iter().filter(|b| b.memories != Some(0)).map(|b| b.bank).collect::<Vec<_>>());
    match names {
        Err(why) => format!("the banks could not be listed: {why}"),
        Ok(names) if names.is_empty() => "there are none".to_owned(),
        Ok(mut names) => {
            names.sort_unstable();
            format!("those that do: {}", names.join(", "))
        }
    }
}

/// Writes every page of the export as JSON lines; returns how many memories.
///
/// A Hindsight server's pages are offsets into a list: a memory deleted before the offset
/// between two pages (an agent's session replacing its transcript meanwhile) shifts the rest
/// forward, and the next page skips as many. So from such a backend the bank is read again once
/// the export is through, and what this export has not written yet is written; again, up to
/// [`SWEEPS`] times, until a reading finds nothing new (as `mneme migrate` does). The local
/// store's cursor is a sequence number: nothing is skipped, and it is read once.
///
/// Without a bank, a Hindsight server (read a bank at a time) gives every bank of this
/// configuration, as `mneme clear --all --remote` and `migrate` take them: under `per-project`
/// scoping each project's too. Only the base bank was written, with none of the projects'
/// memories, and a backup taken before such a clear missed all that it deleted (review64 #12).
async fn write_export(
    client: &Client,
    settings: &crate::config::Settings,
    status: &crate::daemon::api::Status,
    bank: Option<String>,
    out: &mut dyn Write,
) -> Result<u64, CliError> {
    let hindsight = status.backend.backend == mneme_core::BackendId::Hindsight;
    let sweeps = if hindsight { SWEEPS } else { 0 };
    let banks = match bank {
        None if hindsight => {
            let listed: crate::daemon::api::BankList = client.get("/v1/banks").await?;
            // The daemon's reading of its configuration; this command's own from a daemon
            // before it said.
            let banks = match listed.of_configuration.is_empty() {
                false => listed.of_configuration,
                true => crate::session::banks_of_configuration(settings, listed.banks.into_iter().map(|b| b.bank)),
            };
            banks.into_iter().map(Some).collect()
        }
        bank => vec![bank],
    };
    let mut written: HashSet<String> = HashSet::new();
    // The store every page came from: another, and the export went across a reload that switched
    // the backend or its store (each pass and bank begins without a cursor to say so: review118 #3).
    let mut store: Option<String> = None;
    let mut n = 0;
    for bank in &banks {
        // Hindsight lists a bank newest first: each document's memories are written oldest first.
        n += export_pass(client, bank.as_deref(), out, &mut written, &mut store, hindsight).await?;
        for _ in 0..sweeps {
            let found = export_pass(client, bank.as_deref(), out, &mut written, &mut store, hindsight).await?;
            if found == 0 {
                break;
            }
            n += found;
        }
    }
    out.flush().map_err(write_failed)?;
    Ok(n)
}

/// A writer that counts the lines written through it: an export's memories, one a line.
struct CountedLines<'a> {
    inner: &'a mut dyn Write,
    lines: &'a mut u64,
}

impl Write for CountedLines<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        *self.lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Readings of the bank after the first in [`write_export`], at most.
const SWEEPS: usize = 3;

/// One reading of the export: writes the memories not in `written` (and adds them); returns how
/// many. `newest_first`: each document's memories are put oldest first, the last document of a
/// page held back until the next page says whether it runs on.
async fn export_pass(
    client: &Client,
    bank: Option<&str>,
    out: &mut dyn Write,
    written: &mut HashSet<String>,
    store: &mut Option<String>,
    newest_first: bool,
) -> Result<u64, CliError> {
    let mut cursor: Option<String> = None;
    let mut n = 0u64;
    let mut held: Vec<StoredMemory> = Vec::new();
    let mut write = |memories: &mut Vec<StoredMemory>, out: &mut dyn Write| -> Result<(), CliError> {
        if newest_first {
            oldest_first(memories);
        }
        for m in memories.drain(..) {
            let line = serde_json::to_string(&m).expect("memory serializes");
            writeln!(out, "{line}").map_err(write_failed)?;
            n += 1;
        }
        Ok(())
    };
    loop {
        let mut path = String::from("/v1/export?limit=1000");
        if let Some(b) = bank {
            path.push_str(&format!("&bank={}", super::browse::encode(b)));
        }
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", super::browse::encode(c)));
        }
        let page: ExportAnswer = client.call(Method::GET, &path, None).await?;
        if store.is_some() && page.store.is_some() && *store != page.store {
            return Err(CliError::Other(
                "the daemon's backend or its store changed during the export (a reload): begin it again".into(),
            ));
        }
        *store = store.take().or(page.store);
        let page_was_empty = page.memories.is_empty();
        // A memory of which nothing is left once private spans are removed (one another client
        // of a Hindsight server wrote) is not written: an import would refuse it.
        let kept = page.memories.into_iter().filter(|m| !mneme_core::text::is_blank(&m.content));
        held.extend(kept.filter(|m| written.insert(m.id.clone())));
        let more = page.next.filter(|_| !page_was_empty);
        let ready = if newest_first && more.is_some() { before_last_run(&held) } else { held.len() };
        let mut rest = held.split_off(ready);
        std::mem::swap(&mut held, &mut rest);
        write(&mut rest, out)?;
        match more {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    write(&mut held, out)?;
    Ok(n)
}

/// How many of `held` come before the last document's run (its memories at the end, in the
/// same bank), which the next page of a newest-first listing may continue: those can be written.
fn before_last_run(held: &[StoredMemory]) -> usize {
    let Some(last) = held.last() else { return 0 };
    held.iter().rposition(|m| m.bank != last.bank || document_of(m) != document_of(last)).map_or(0, |i| i + 1)
}

pub(super) async fn import(config: Option<&Path>, file: &Path, as_json: bool) -> Result<ExitCode, CliError> {
    let reader: Box<dyn BufRead> = if file == Path::new("-") {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        Box::new(BufReader::new(
            std::fs::File::open(file).map_err(|e| CliError::Other(format!("cannot read {}: {e}", file.display())))?,
        ))
    };
    let settings = load_client_settings(config)?.settings;
    // Lines are bounded by the running daemon's limit, not the config file's, edited since
    // (review67 #8).
    let client = Client::connect(&settings).await?;
    // Read and check every line before sending anything: a bad file imports nothing.
    let mut memories = Vec::new();
    let mut lines = BoundedLines { reader, most: client.max_import_body() };
    for i in 0.. {
        let line = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(LineError::TooLong) => {
                return Err(CliError::Other(format!(
                    "{}: the memory on line {} is longer than the daemon takes in one request (server.max_body_bytes = {}, and 64 KiB an import has beyond it); raise it and restart the daemon. Nothing was imported.",
                    file.display(),
                    i + 1,
                    client.max_body()
                )))
            }
            Err(LineError::NotUtf8) => {
                return Err(CliError::Other(format!(
                    "{}:{}: not UTF-8 text; nothing was imported",
                    file.display(),
                    i + 1
                )))
            }
            Err(LineError::Io(e)) => return Err(CliError::Other(format!("cannot read {}: {e}", file.display()))),
        };
        // A file saved by an editor that marks UTF-8 may open with a byte-order mark.
        let line = if i == 0 { line.trim_start_matches('\u{feff}') } else { &line };
        if line.trim().is_empty() {
            continue;
        }
        // Its error quotes the line: not when it holds private text, as the daemon answers.
        // Half an emoji (`\ud83d`) is read as U+FFFD, as the daemon reads its import.
        let memory: StoredMemory = crate::json_text::from_slice_mended(line.as_bytes()).map_err(|e| {
            let said = crate::daemon::quoting_request(e.to_string(), line.as_bytes());
            CliError::Other(format!("{}:{}: not a memory line: {said}", file.display(), i + 1))
        })?;
        // What the daemon would refuse, refused here with its line, before anything is sent.
        if let Some(problem) = crate::daemon::import_problem(&memory) {
            return Err(CliError::Other(format!("{}:{}: {problem}; nothing was imported", file.display(), i + 1)));
        }
        memories.push(Line { number: i + 1, memory });
    }
    if let Some((first, again)) = crate::daemon::reused_id(&memories, |l| &l.memory) {
        return Err(CliError::Other(format!(
            "{}:{}: the id of line {} (in the same bank) with another memory: an id names one memory, and the second would be taken for the first already there. Nothing was imported.",
            file.display(),
            memories[again].number,
            memories[first].number
        )));
    }
    // Cleaned here as the daemon cleans an import, the whole file at once: a document sent in
    // parts (below) was cleaned a part at a time, and the private span one part left open was
    // stored in clear by the next (review43 #1). Those left with nothing are not sent.
    let read = memories.len();
    let memories = crate::session::clean_imported_each(&settings, memories, |l| &mut l.memory);
    let cleaned_away = read - memories.len();
    // Each request within the running daemon's body limit for an import (not the file's, edited
    // since), less the request's own JSON around the memories.
    let most = client.max_import_body().saturating_sub(64);
    let limit = ChunkLimit { items: IMPORT_CHUNK, bytes: Some(most) };
    let chunks = sized_chunks_of_whole_documents(memories, limit);
    // The local store takes a document's memories in several imports (they join it): one
    // larger than a request (grown by appends) goes in parts. Hindsight replaces a document with
    // what one request holds of it.
    let chunks = match chunks.iter().any(|c| c.bytes > most) && documents_join(&client).await? {
        true => chunks.into_iter().flat_map(|c| in_parts(c, most)).collect(),
        false => chunks,
    };
    for chunk in &chunks {
        let size = chunk.bytes;
        if size > most {
            let first = &chunk.memories[0];
            let n = chunk.memories.len();
            let what = match &first.memory.document_id {
                Some(doc) if n > 1 => format!("document {doc:?} (from line {}, {n} memories)", first.number),
                _ => format!("the memory on line {}", first.number),
            };
            return Err(CliError::Other(format!(
                "{}: {what} is {size} bytes, more than fits in one request beside the request's own 64 bytes (server.max_body_bytes = {}, and 64 KiB an import has beyond it); raise it and restart the daemon. Nothing was imported.",
                file.display(),
                client.max_body()
            )));
        }
    }
    let mut total = Imported { received: 0, imported: Some(0), skipped: 0, store: None };
    for chunk in chunks {
        let memories = chunk.memories.into_iter().map(|l| l.memory).collect();
        let answer: Imported = client.post("/v1/import", &ImportBody { memories }).await.map_err(|e| {
            if total.received == 0 {
                return e.with_note("; nothing was imported");
            }
            // The requests before this one were stored: said, as the other errors say what
            // became of the file (an import stopped half way looked like one that did nothing).
            let done = total.received;
            let verb = if total.imported.is_some() { "imported" } else { "sent" };
            e.with_note(&format!(
                "; {done} of the file's {read} memories were {verb} before that: the same command again imports the rest (those already there are counted as such)"
            ))
        })?;
        // A reload that switched the backend or its store between two requests: what went before
        // is in the other store (the import said it had imported everything: review115 #1).
        if total.store.is_some() && answer.store.is_some() && total.store != answer.store {
            return Err(CliError::Other(format!(
                "{}: the daemon's backend or its store changed during the import (a reload): the {} memories sent before went to the earlier one, the last request's {} to the one in force now; run the same command again to import the whole file into it",
                file.display(),
                total.received,
                answer.received
            )));
        }
        total.store = total.store.or(answer.store);
        total.received += answer.received;
        total.skipped += answer.skipped;
        total.imported = total.imported.zip(answer.imported).map(|(a, b)| a + b);
    }
    // Received and skipped, as the daemon counts what it cleans away.
    total.received += cleaned_away;
    total.skipped += cleaned_away;
    let Imported { received, imported, skipped, .. } = total;
    // Memories with nothing but `<private>` text are not stored (and not "already there").
    let skipped_note =
        if skipped > 0 { format!("; {skipped} skipped: nothing but private text") } else { String::new() };
    if as_json {
        // (The store the daemon named is for this command's check, not a script's count.)
        println!("{}", serde_json::to_string(&Imported { store: None, ..total }).unwrap_or_default());
    } else if let Some(imported) = imported {
        let there = (received as u64).saturating_sub(imported + skipped as u64);
        println!("Imported {imported} of {received} memories ({there} already there{skipped_note}).");
    } else {
        // Those skipped were not sent.
        let sent = received.saturating_sub(skipped);
        println!("Sent {sent} {} to the backend{skipped_note}.", if sent == 1 { "memory" } else { "memories" });
    }
    Ok(ExitCode::SUCCESS)
}

/// A failed write of the export. To a reader that went away (`mneme export | head`) the command
/// ends as Unix tools do, killed by SIGPIPE, without a word (SIGPIPE is ignored otherwise, see
/// `main`); any other failure is an error.
fn write_failed(e: std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        super::end_by_sigpipe();
    }
    CliError::Other(format!("cannot write: {e}"))
}

/// Whether the daemon's backend takes a document's memories in several imports: the local
/// store (they join their document).
async fn documents_join(client: &Client) -> Result<bool, CliError> {
    let status: crate::daemon::api::Status = client.get("/v1/status").await?;
    Ok(status.backend.backend == mneme_core::BackendId::Local)
}

/// A chunk over `most` bytes as chunks of its memories within it, in order; one that holds a
/// single memory, or whose memories each fit, as they come (a memory larger than `most` stays
/// a chunk of its own, over it).
fn in_parts(chunk: SizedChunk<Line>, most: usize) -> Vec<SizedChunk<Line>> {
    if chunk.bytes <= most || chunk.memories.len() == 1 {
        return vec![chunk];
    }
    let mut parts: Vec<SizedChunk<Line>> = Vec::new();
    for line in chunk.memories {
        let bytes = mneme_core::transfer::json_size(&line.memory);
        match parts.last_mut() {
            Some(part) if part.bytes + bytes <= most => {
                part.bytes += bytes;
                part.memories.push(line);
            }
            _ => parts.push(SizedChunk { memories: vec![line], bytes }),
        }
    }
    parts
}

/// The lines of a file, each at most `most` bytes (its end of line aside): no longer line can be
/// sent, and one read whole without a bound (`/dev/zero`) grew the CLI until the OOM killer came.
struct BoundedLines<R> {
    reader: R,
    most: usize,
}

/// Why [`BoundedLines`] gave no line.
enum LineError {
    TooLong,
    NotUtf8,
    Io(std::io::Error),
}

impl<R: BufRead> BoundedLines<R> {
    /// The next line without its `\n` or `\r\n`; `None` at the end.
    fn next_line(&mut self) -> Result<Option<String>, LineError> {
        let mut buf = Vec::new();
        let read = std::io::Read::take(&mut self.reader, self.most as u64 + 2)
            .read_until(b'\n', &mut buf)
            .map_err(LineError::Io)?;
        if read == 0 {
            return Ok(None);
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        if buf.len() > self.most {
            return Err(LineError::TooLong);
        }
        String::from_utf8(buf).map(Some).map_err(|_| LineError::NotUtf8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bank listed with no memories is not among those that hold some (review64 #4).
    #[test]
    fn banks_with_no_memories_are_not_said_to_hold_some() {
        let bank = |bank: &str, memories: Option<u64>| mneme_core::BankCount { bank: bank.into(), memories };
        let listed = Ok(vec![bank("cleared", Some(0)), bank("b", Some(2)), bank("a", None)]);
        assert_eq!(banks_held(listed), "those that do: a, b");
        assert_eq!(banks_held(Ok(vec![bank("cleared", Some(0))])), "there are none");
    }

    fn memory(id: &str, bank: &str, document: Option<&str>) -> StoredMemory {
        StoredMemory {
            id: id.into(),
            bank: bank.into(),
            content: format!("memory {id}"),
            document_id: document.map(Into::into),
            ..serde_json::from_value(serde_json::json!({"id": "", "bank": "", "content": "", "created_at": ""}))
                .unwrap()
        }
    }

    /// A page of a newest-first listing keeps back its last document's run, whose older memories
    /// the next page may hold: written now, the document's memories would not be put oldest first.
    #[test]
    fn the_last_documents_run_of_a_page_is_held_back() {
        let page = [
            memory("1", "b", Some("d1")),
            memory("2", "b", None),
            memory("3", "b", Some("d2")),
            memory("4", "b", Some("d2")),
        ];
        assert_eq!(before_last_run(&page), 2, "d2's run waits");
        // The same document id in another bank is another document.
        let page = [memory("1", "a", Some("d")), memory("2", "b", Some("d"))];
        assert_eq!(before_last_run(&page), 1);
        // A page that is one run waits whole; an empty one has nothing to write.
        assert_eq!(before_last_run(&page[1..]), 0);
        assert_eq!(before_last_run(&[]), 0);
    }
}
