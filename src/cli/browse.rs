//! `mneme forget` (delete one memory or a document) and `mneme ui` (log in to the web view).

use std::process::ExitCode;

use mneme_core::Forgotten;
use reqwest::Method;

use super::client::Client;
use super::CliError;
use crate::daemon::api::{UiCode, UiCodeRequest};

/// What `mneme forget` deletes.
pub struct ForgetTarget {
    /// A memory id, or with `document` a document id.
    pub id: String,
    /// The bank (needed for a document, and on Hindsight).
    pub bank: Option<String>,
    /// Whether `id` names a document.
    pub document: bool,
}

/// `/{segments…}?bank=…`, each segment percent-encoded (ids may hold any character).
pub(super) fn api_path(segments: &[&str], bank: Option<&str>) -> String {
    let mut path = String::new();
    for segment in segments {
        path.push('/');
        path.push_str(&encode(segment));
    }
    if let Some(bank) = bank {
        path.push_str("?bank=");
        path.push_str(&encode(bank));
    }
    path
}

/// Percent-encodes a path segment or a query value: everything but RFC 3986's unreserved bytes.
pub(super) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Deletes a memory or a document through `DELETE /v1/memories/{id}` or `/v1/documents/{id}`.
pub async fn forget(client: &Client, target: ForgetTarget, json_out: bool) -> Result<ExitCode, CliError> {
    if target.id.trim().is_empty() {
        return Err(CliError::Other(
            "give the id of what to forget (`mneme export` and the web view show memories' ids)".into(),
        ));
    }
    let kind = if target.document { "documents" } else { "memories" };
    let path = api_path(&["v1", kind, &target.id], target.bank.as_deref());
    let done: Forgotten = client.send(Method::DELETE, &path).await?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&done).expect("serializes"));
    } else {
        println!("{}", mneme_core::text::escape_controls(&done.message));
    }
    Ok(ExitCode::SUCCESS)
}

/// Options of `mneme ui`.
pub struct UiOptions {
    /// How long the browser session lasts.
    pub valid_for: Option<std::time::Duration>,
    /// Print the URL only, even when a desktop is there.
    pub no_open: bool,
    /// Where the page that sends the browser on is written (the daemon's storage dir).
    pub storage_dir: std::path::PathBuf,
}

/// Prints a one-time login URL for the web view and, on a desktop, opens it.
pub async fn ui(client: &Client, opts: UiOptions, json_out: bool) -> Result<ExitCode, CliError> {
    let body = UiCodeRequest { valid_for_seconds: opts.valid_for.map(|d| d.as_secs()) };
    let code: UiCode = client.post("/v1/ui/codes", &body).await?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&code).expect("serializes"));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}", code.url);
    crate::say!(
        "Open it within {} s; it works once. The browser stays logged in for {} or until the daemon stops.",
        code.code_expires_in_seconds,
        humantime::format_duration(std::time::Duration::from_secs(code.valid_for_seconds))
    );
    let desktop = std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if desktop && !opts.no_open {
        let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
        // The browser is given a private page that sends it on, not the URL: a command's
        // arguments are readable by every user (/proc/*/cmdline), and whoever uses the code
        // first gets the session.
        let page = match login_page(&opts.storage_dir, &code.url) {
            Ok(page) => page,
            Err(e) => {
                crate::say!(
                    "Could not write the login page in {} ({e}): open the URL yourself.",
                    opts.storage_dir.display()
                );
                return Ok(ExitCode::SUCCESS);
            }
        };
        match std::process::Command::new(opener)
            .arg(&page)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(child) => match opened(child) {
                Some(false) => crate::say!("{opener} could not open a browser: open the URL yourself."),
                _ => crate::say!("Opened it in your browser."),
            },
            Err(e) => crate::say!("Could not run {opener} ({e}): open the URL yourself."),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the opener says it opened the page: its exit status within 3 s, or `None` while it
/// still runs (some openers stay with the browser they started). "Opened" was said even when it
/// failed at once (no display to open a browser on).
fn opened(mut child: std::process::Child) -> Option<bool> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < until {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status.success());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

/// Writes `ui-login.html` in `dir`, readable by its owner only, which sends the browser to `url`;
/// returns its path. Replaced by the next `mneme ui`; the code in it works once, for a minute.
fn login_page(dir: &std::path::Path, url: &str) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("ui-login.html");
    let _ = std::fs::remove_file(&path); // a file of another mode (or a link) is not written through
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    let url = url.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;");
    writeln!(
        file,
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0; url={url}\"><title>mneme</title><a href=\"{url}\">Open the mneme view</a>"
    )?;
    Ok(path)
}

/// `--valid-for`: a duration from a minute to 30 days, refused as a usage error either way (one
/// over a year was the config parser's "at most 365 days", exit 2, one of 31 days this check's,
/// exit 1; review109 #2).
pub(super) fn parse_valid_for(text: &str) -> Result<std::time::Duration, String> {
    let d = crate::config::parse_duration(text).map_err(|e| match e.contains("at most") {
        true => VALID_FOR_RANGE.to_owned(),
        false => e,
    })?;
    match (60..=30 * 24 * 3600).contains(&d.as_secs()) {
        true => Ok(d),
        false => Err(VALID_FOR_RANGE.to_owned()),
    }
}

const VALID_FOR_RANGE: &str = "must be from 1m to 30days";

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_encoded_in_paths() {
        assert_eq!(super::api_path(&["v1", "memories", "a/b c?"], None), "/v1/memories/a%2Fb%20c%3F");
        assert_eq!(super::api_path(&["v1", "sessions", "a%b#c", "recall"], None), "/v1/sessions/a%25b%23c/recall");
        assert_eq!(super::api_path(&["v1", "documents", "d"], Some("my bank")), "/v1/documents/d?bank=my%20bank");
    }
}
