//! Reading a config file: syntax, then every key through the registry, then cross-key checks,
//! then environment overrides. All problems are collected before anything is reported.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use mneme_core::BackendId;

use super::keys::{self, Ctx, Raw};
use super::Settings;

/// A loaded configuration and where it came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The settings in force.
    pub settings: Settings,
    /// The file read (or that would have been read).
    pub path: PathBuf,
    /// Whether that file exists (a missing file means all defaults).
    pub exists: bool,
    /// Ignored environment overrides and other non-fatal findings.
    pub warnings: Vec<String>,
    /// The file's text as read (empty when there is none).
    pub text: String,
    /// For a client going on past a problem in the file ([`load_for_client`]): the sections of
    /// it that were read (none: the defaults and the environment). `None`: the whole file, or
    /// no file.
    pub sections_read: Option<&'static [&'static str]>,
}

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// `section.key` (or the section, or "" for a syntax error).
    pub key: String,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// Every problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file.
    pub path: PathBuf,
    /// The problems, in file order.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.key.is_empty()) {
            (Some(line), false) => write!(f, "line {line}: {}: {}", self.key, self.message),
            (Some(line), true) => write!(f, "line {line}: {}", self.message),
            (None, false) => write!(f, "{}: {}", self.key, self.message),
            (None, true) => write!(f, "{}", self.message),
        }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        write!(f, "invalid config {} ({n} problem{}):", self.path.display(), if n == 1 { "" } else { "s" })?;
        for e in &self.errors {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    /// Whether the file could not be read at all (rather than having wrong keys).
    pub fn is_unreadable(&self) -> bool {
        self.errors.iter().any(|e| e.key.is_empty() && e.message.starts_with("cannot read: "))
    }

    /// The file could not be read at all.
    pub fn unreadable(path: &Path, why: impl fmt::Display) -> Self {
        ConfigErrors {
            path: path.to_owned(),
            errors: vec![ConfigError { key: String::new(), line: None, message: format!("cannot read: {why}") }],
        }
    }
}

/// Loads `path` (missing = defaults) and applies the environment given by `env`.
pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ConfigErrors> {
    load_text(path, read(path)?, env)
}

/// The text of the config file, `None` when there is none. Only a regular file is read: a FIFO
/// would wait for a writer, and the caller with it. Only one no other user may change: not
/// another user's, not one every user may write, reached through no link another user made,
/// in folders no other user may replace it in (see [`crate::owned_path`]). Such a user chose
/// `hindsight.api_url`, and the daemon's reload sent the Hindsight token there (even one kept in
/// the environment), or `storage.dir` and `server.listen`, and a hook sent the conversation to
/// that user's daemon. root's files and folders are trusted (`/etc`); a group may write it (a
/// user's own group, as umask 002 makes files). The file is judged as opened, and read from
/// what was opened: looked at by name and read by name again, another user's file swapped in
/// between was read.
pub fn read(path: &Path) -> Result<Option<String>, ConfigErrors> {
    use crate::owned_path::{self, Unwalked};
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let changeable = |why: String| {
        ConfigErrors::unreadable(
            path,
            format!("another user may change it ({why}), and so choose where mneme sends its memories and tokens; keep it a file of your own that only you may write (`chmod go-w`), in a folder of yours"),
        )
    };
    let file = match owned_path::walked(path) {
        Ok(file) => file,
        Err(Unwalked::Planted { link, uid, .. }) => {
            return Err(changeable(format!(
                "it is reached through {}, a symbolic link another user (uid {uid}) made",
                link.display()
            )))
        }
        Err(Unwalked::Failed(e)) => return Err(ConfigErrors::unreadable(path, e)),
    };
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW).open(&file);
    let mut opened = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ConfigErrors::unreadable(path, e)),
    };
    let m = opened.metadata().map_err(|e| ConfigErrors::unreadable(path, e))?;
    if !m.is_file() {
        return Err(ConfigErrors::unreadable(path, "it is not a regular file"));
    }
    if owned_path::another_users(m.uid()) {
        return Err(changeable(format!("it belongs to another user (uid {})", m.uid())));
    }
    if m.mode() & 0o002 != 0 {
        return Err(changeable(format!("every user may write it: mode {:o}", m.mode() & 0o7777)));
    }
    if let Some(why) = owned_path::others_may_replace(&file) {
        return Err(changeable(why));
    }
    let mut bytes = Vec::new();
    opened.read_to_end(&mut bytes).map_err(|e| ConfigErrors::unreadable(path, e))?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some(text)),
        Err(e) => Err(not_utf8(path, e.as_bytes(), e.utf8_error().valid_up_to())),
    }
}

/// A file that is not UTF-8 cannot be read at all; said with the line and column of its first
/// byte that is not (review106 #4: "stream did not contain valid UTF-8", and no line).
fn not_utf8(path: &Path, bytes: &[u8], valid_up_to: usize) -> ConfigErrors {
    let before = &bytes[..valid_up_to];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
    let byte = bytes.get(valid_up_to).copied().unwrap_or_default();
    let message =
        format!("cannot read: the file is not UTF-8 text (the byte 0x{byte:02X} at column {column}); save it as UTF-8");
    ConfigErrors { path: path.to_owned(), errors: vec![ConfigError { key: String::new(), line: Some(line), message }] }
}

/// [`load`] of a text already [`read`] from `path`.
/// The config file's secrets (`hindsight.api_token`, `local.embedding_api_key`) when others
/// may read the file (a config made with umask 022 is 0644): what to say, once at the start and
/// by `mneme doctor`. The token file is 0600; a key written beside it in a world-readable file
/// gave every local user the Hindsight server's or the embedding endpoint's key.
pub fn secrets_others_may_read(loaded: &Loaded) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&loaded.path).ok()?.permissions().mode();
    if mode & 0o044 == 0 {
        return None;
    }
    let table: toml::Table = loaded.text.parse().ok()?;
    let set = |section: &str, key: &str| {
        table.get(section).and_then(|s| s.get(key)).and_then(toml::Value::as_str).is_some_and(|v| !v.trim().is_empty())
    };
    let secrets = [
        ("hindsight", "api_token", "HINDSIGHT_API_TOKEN"),
        ("local", "embedding_api_key", "MNEME_LOCAL__EMBEDDING_API_KEY"),
    ];
    let (named, variables): (Vec<String>, Vec<&str>) = secrets
        .into_iter()
        .filter(|(section, key, _)| set(section, key))
        .map(|(section, key, variable)| (format!("{section}.{key}"), variable))
        .unzip();
    (!named.is_empty()).then(|| {
        format!(
            "the config file {} holds {} and others may read it (mode {:o}): `chmod 600` it, or set {} in mneme's environment instead",
            loaded.path.display(),
            named.join(" and "),
            mode & 0o777,
            variables.join(" and "),
        )
    })
}

fn load_text(path: &Path, text: Option<String>, env: &dyn Fn(&str) -> Option<String>) -> Result<Loaded, ConfigErrors> {
    let exists = text.is_some();
    let text = text.unwrap_or_default();
    let mut settings = parse(&text, path.parent()).map_err(|errors| ConfigErrors { path: path.to_owned(), errors })?;
    let EnvApplied { mut warnings, set_by, overrides } = apply_env(&mut settings, env, path.parent());
    // The store named as this very file (review118 #1), checked here, where its path is known:
    // the start advised moving the config aside as a damaged store.
    if settings.local.path.as_deref().is_some_and(|store| crate::files::same_file(store, path)) {
        let line = LineIndex::new(&text).key("local", "path");
        let message = "names this config file; name a file of its own".to_owned();
        let errors = vec![ConfigError { key: "local.path".into(), line, message }];
        return Err(ConfigErrors { path: path.to_owned(), errors });
    }
    // An override of a key the file sets hides every edit of it: said, or a live switch made in
    // the file (memory.backend) does nothing without a word. (The file's lines are indexed only
    // when there is an override.)
    let lines = if overrides.is_empty() { LineIndex::new("") } else { LineIndex::new(&text) };
    for (name, section, key) in overrides {
        // Also where the file sets it under another name: `[hindsight]`'s synonyms of `[memory]`
        // keys, and the legacy `[memories] enabled` for the backend (review64 #2).
        let line = lines.exact_key(section, key).or_else(|| match (section, key) {
            ("memory", "backend") => lines.exact_key("memories", "enabled"),
            ("memory", key) if HINDSIGHT_SYNONYMS.contains(&key) => lines.exact_key("hindsight", key),
            _ => None,
        });
        if let Some(line) = line {
            warnings.push(format!(
                "{name} overrides {section}.{key} (line {line} of the file): edits of it in the file have no effect while it is set"
            ));
        }
    }
    let mut errors = cross_checks(&settings, &LineIndex::new(""));
    if !errors.is_empty() {
        // Only the environment can have introduced these (the file passed the same checks):
        // each says which variable set what it refuses.
        let from = match set_by.is_empty() {
            true => String::new(),
            false => format!(" (set by the environment: {})", set_by.join(", ")),
        };
        for e in &mut errors {
            e.message.push_str(&from);
        }
        return Err(ConfigErrors { path: path.to_owned(), errors });
    }
    Ok(Loaded { settings, path: path.to_owned(), exists, warnings, text, sections_read: None })
}

/// [`load`] with this process's environment, warning also about `MNEME_<SECTION>__<KEY>`
/// variables that name no key (a misspelt override would otherwise be ignored without a word).
pub fn load_from_env(path: &Path) -> Result<Loaded, ConfigErrors> {
    load_text_from_env(path, read(path)?)
}

/// [`load_from_env`] of a text already [`read`] from `path`.
pub fn load_text_from_env(path: &Path, text: Option<String>) -> Result<Loaded, ConfigErrors> {
    let mut loaded = load_text(path, text, &|k| std::env::var(k).ok())?;
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    loaded.warnings.extend(unknown_env_keys(names));
    Ok(loaded)
}

/// For a client of the daemon (a hook, a CLI command that talks to it): the file's settings, or,
/// when it has a problem, those of its sections that say how to reach the daemon and how long to
/// wait for it, with the problem beside (to be told). The daemon keeps its last good
/// configuration through a bad edit; a hook that gave up on the file would lose the turn. When
/// even those sections cannot be read (a misspelt key in `[server]`), its `[storage]` alone,
/// else the defaults and the environment, as for a file that cannot be read: the pidfile in the
/// storage dir still finds a daemon on another port (review64 #6: the hooks gave up, and the
/// conversation went unretained while the daemon ran on). `Err` only for a bad environment.
pub fn load_for_client(path: &Path) -> Result<(Loaded, Option<ConfigErrors>), ConfigErrors> {
    let text = match read(path) {
        Ok(text) => text,
        // A file that cannot be read at all (a directory for a moment while a dotfile tool swaps
        // it, a file of another user's): the defaults and the environment, as with no file, and
        // the problem told. The daemon keeps its configuration; a command that gave up did nothing.
        Err(problem) => return load_text_from_env(path, None).map(|loaded| (none_read(loaded), Some(problem))),
    };
    let problem = match load_text_from_env(path, text.clone()) {
        Ok(loaded) => return Ok((loaded, None)),
        Err(problem) => problem,
    };
    let text = text.unwrap_or_default();
    let whole: Option<toml::Table> = text.parse().ok();
    // [storage] (whose pidfile gives the daemon's address and holds its token) before [server]
    // alone: with [server] alone the daemon is found, but not its token (review69 #3).
    const STEPS: [&[&str]; 4] =
        [&["server", "storage", "hooks", "recall"], &["server", "storage"], &["storage"], &["server"]];
    for sections in STEPS {
        let kept: toml::Table = match &whole {
            Some(table) => table
                .iter()
                .filter(|(k, _)| sections.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            // A syntax error elsewhere (an edit in progress) leaves these sections readable alone.
            None => match sections_text(&text, sections).parse() {
                Ok(table) => table,
                Err(_) => continue,
            },
        };
        if let Ok(mut settings) = parse(&kept.to_string(), path.parent()) {
            let warnings = apply_env(&mut settings, &|k| std::env::var(k).ok(), path.parent()).warnings;
            let loaded = Loaded {
                settings,
                path: path.to_owned(),
                exists: true,
                warnings,
                text: text.clone(),
                sections_read: Some(sections),
            };
            return Ok((loaded, Some(problem)));
        }
    }
    load_text_from_env(path, None).map(|loaded| (none_read(loaded), Some(problem)))
}

/// `loaded` (the defaults and the environment) marked as having read none of the file.
fn none_read(loaded: Loaded) -> Loaded {
    Loaded { sections_read: Some(&[]), ..loaded }
}

impl Loaded {
    /// What a client going on past a problem in the file goes on with, for its message: "its
    /// [server] and [storage]", or "the defaults and the environment".
    pub fn going_on_with(&self) -> String {
        match self.sections_read {
            Some(sections) if !sections.is_empty() => {
                let named: Vec<String> = sections.iter().map(|s| format!("[{s}]")).collect();
                let (last, rest) = named.split_last().expect("not empty");
                match rest.is_empty() {
                    true => format!("its {last} alone (else the defaults and the environment)"),
                    false => format!("its {} and {last} (else the defaults and the environment)", rest.join(", ")),
                }
            }
            _ => "the defaults and the environment".into(),
        }
    }

    /// Whether the storage dir (the daemon's pidfile and token) is the file's, not the default
    /// taken because the file's `[storage]` could not be read.
    pub fn storage_read(&self) -> bool {
        self.sections_read.is_none_or(|s| s.contains(&"storage"))
    }
}

/// The lines of the named top-level sections (`[server]` to the next header), headers included.
/// For text TOML cannot parse whole: a client still finds the daemon.
fn sections_text(text: &str, names: &[&str]) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            let header = trimmed.trim_start_matches('[').split(']').next().unwrap_or_default().trim();
            inside = names.contains(&header);
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Warnings for the `MNEME_<SECTION>__<KEY>` names among `names` that are no config key.
pub fn unknown_env_keys(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let known: std::collections::HashSet<String> = keys::REGISTRY.iter().map(|k| k.env_name()).collect();
    let mut unknown: Vec<String> =
        names.into_iter().filter(|n| n.starts_with("MNEME_") && n.contains("__") && !known.contains(n)).collect();
    unknown.sort();
    unknown
        .into_iter()
        .map(|n| format!("ignoring {n}: no config key has that name (overrides are MNEME_<SECTION>__<KEY>, like MNEME_QUEUE__BATCH_SIZE)"))
        .collect()
}

/// Parses config text (no environment). `base` resolves relative paths.
pub fn parse(text: &str, base: Option<&Path>) -> Result<Settings, Vec<ConfigError>> {
    let table: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            let line = e.span().map(|s| line_of(text, s.start));
            // The scan finds assignments in text TOML cannot parse, so the error names its key;
            // a line that assigns nothing (a key cut short mid-edit) names its section.
            let index = LineIndex::new(text);
            let key = line.and_then(|l| index.key_at(l).or_else(|| index.section_at(l))).unwrap_or_default();
            // One line: toml's message may run over several.
            let mut message =
                e.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
            // What the line holds, when it assigns nothing: "expected `.`, `=`" alone does not
            // say which text it is about.
            // Only a key's name cut short is shown: a line may hold a secret pasted without its
            // `=` (`api_token "hs_…"`), and this message goes to notices and the log.
            let at = line.and_then(|l| text.lines().nth(l - 1)).map(str::trim).filter(|t| !t.is_empty());
            let a_key_cut_short = |t: &&str| {
                t.len() <= 40
                    && t.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    && keys::REGISTRY.iter().any(|k| k.name.starts_with(*t))
            };
            if let Some(at) = at.filter(a_key_cut_short).filter(|_| line.and_then(|l| index.key_at(l)).is_none()) {
                message.push_str(&format!(" (at `{at}`)"));
            }
            return Err(vec![ConfigError { key, line, message }]);
        }
    };
    let lines = LineIndex::new(text);
    let ctx = Ctx { base };
    let mut settings = Settings::default();
    let mut errors = Vec::new();
    let mut backend_set = false;
    let mut legacy_enabled = None;
    for (section, value) in &table {
        let section_line = lines.section(section);
        let Some(entries) = value.as_table() else {
            errors.push(ConfigError {
                key: section.clone(),
                line: section_line,
                message: if keys::is_section(section) {
                    format!("expected a [{section}] table")
                } else {
                    format!("unknown section; known sections: {}", known_sections().join(", "))
                },
            });
            continue;
        };
        if section == "memories" {
            // Legacy: `memories.enabled` from the original agent.
            for (name, v) in entries {
                let line = lines.key(section, name).or(section_line);
                match (name.as_str(), v) {
                    ("enabled", toml::Value::Boolean(b)) => legacy_enabled = Some(*b),
                    ("enabled", v) => errors.push(ConfigError {
                        key: "memories.enabled".into(),
                        line,
                        message: format!("expected true or false, found {}", v.type_str()),
                    }),
                    _ => errors.push(ConfigError {
                        key: format!("memories.{name}"),
                        line,
                        message: "unknown key (the legacy [memories] section only has `enabled`)".into(),
                    }),
                }
            }
            continue;
        }
        if !keys::is_section(section) {
            errors.push(ConfigError {
                key: section.clone(),
                line: section_line,
                message: format!("unknown section; known sections: {}", known_sections().join(", ")),
            });
            continue;
        }
        for (name, v) in entries {
            let line = lines.key(section, name).or(section_line);
            // DESIGN.md's example names the bank and its scoping under [hindsight]; SPEC.md, and
            // mneme, under [memory] (they scope the local store too). Either is taken; [memory]'s
            // wins when both are set.
            if section == "hindsight" && HINDSIGHT_SYNONYMS.contains(&name.as_str()) {
                let in_memory =
                    table.get("memory").and_then(toml::Value::as_table).is_some_and(|m| m.contains_key(name));
                let key = keys::find("memory", name).expect("a [memory] key");
                if !in_memory {
                    if let Err(message) = (key.apply)(&mut settings, Raw::Toml(v), &ctx) {
                        errors.push(ConfigError { key: format!("{section}.{name}"), line, message });
                    }
                }
                continue;
            }
            let Some(key) = keys::find(section, name) else {
                errors.push(ConfigError {
                    key: format!("{section}.{name}"),
                    line,
                    message: format!("unknown key; [{section}] has: {}", section_keys(section).join(", ")),
                });
                continue;
            };
            backend_set |= section == "memory" && name == "backend";
            if let Err(message) = (key.apply)(&mut settings, Raw::Toml(v), &ctx) {
                errors.push(ConfigError { key: format!("{section}.{name}"), line, message });
            }
        }
    }
    if let (false, Some(enabled)) = (backend_set, legacy_enabled) {
        settings.memory.backend = if enabled { BackendId::Local } else { BackendId::Off };
    }
    // A key already refused on its line is not refused again by a check across keys.
    for e in cross_checks(&settings, &lines) {
        if !errors.iter().any(|x| x.key == e.key) {
            errors.push(e);
        }
    }
    errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
    if errors.is_empty() {
        Ok(settings)
    } else {
        Err(errors)
    }
}

/// `[memory]` keys also taken under `[hindsight]`, as DESIGN.md's example file has them.
const HINDSIGHT_SYNONYMS: [&str; 3] = ["bank_id", "bank_id_prefix", "scoping"];

/// What [`apply_env`] did besides changing the settings.
struct EnvApplied {
    /// Overrides ignored (a value that could not be read), each named.
    warnings: Vec<String>,
    /// `NAME=value` of each override that made a check between keys fail.
    set_by: Vec<String>,
    /// Each override applied: its variable, section and key.
    overrides: Vec<(String, &'static str, &'static str)>,
}

/// Applies `MNEME_<SECTION>__<KEY>` and the `HINDSIGHT_*` aliases. Bad values are ignored with a warning.
fn apply_env(settings: &mut Settings, env: &dyn Fn(&str) -> Option<String>, base: Option<&Path>) -> EnvApplied {
    let ctx = Ctx { base };
    let mut warnings = Vec::new();
    let mut set_by = Vec::new();
    let mut overrides = Vec::new();
    for key in keys::REGISTRY {
        let primary = key.env_name();
        let names = std::iter::once(primary.as_str()).chain(key.aliases.iter().copied());
        let Some((name, value)) = names.filter_map(|n| env(n).map(|v| (n, v))).next() else { continue };
        let mut candidate = settings.clone();
        let ignored = |e: &str| format!("ignoring {name}={} ({}.{}): {e}", shown(&value), key.section, key.name);
        match (key.apply)(&mut candidate, Raw::Env(&value), &ctx) {
            Ok(()) => {
                // A value fine alone may not be with the others (a listen address that is not
                // loopback without allow_remote): the config is refused, as for the file, and the
                // error names the variable (it named the file, and no line).
                let no_lines = LineIndex::new("");
                let before = cross_checks(settings, &no_lines).len();
                if cross_checks(&candidate, &no_lines).len() > before {
                    set_by.push(format!("{name}={}", shown(&value)));
                }
                *settings = candidate;
                overrides.push((name.to_owned(), key.section, key.name));
            }
            Err(e) => warnings.push(ignored(&e)),
        }
    }
    EnvApplied { warnings, set_by, overrides }
}

/// An override's value as a warning repeats it: warnings are logged and shown, so not a value that
/// may carry a password (a URL's `user:password@`) or private text.
fn shown(value: &str) -> String {
    if value.contains('@') {
        "(a value with an @, not shown)".to_owned()
    } else {
        mneme_core::text::quoted_unless_private(value)
    }
}

/// Checks that involve more than one key, or the build.
fn cross_checks(s: &Settings, lines: &LineIndex) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    let mut err = |section: &str, name: &str, message: String| {
        errors.push(ConfigError { key: format!("{section}.{name}"), line: lines.key(section, name), message })
    };
    if !s.server.listen.ip().is_loopback() && !s.server.allow_remote {
        err(
            "server",
            "listen",
            format!(
            "{} is not a loopback address; set server.allow_remote = true to accept connections from other machines",
            s.server.listen
        ),
        );
    }
    if s.local.embedder == super::EmbedderKind::OpenAi {
        // One the file sets that was refused has its own error (on its own line).
        if s.local.embedding_url.is_none() && lines.exact_key("local", "embedding_url").is_none() {
            err(
                "local",
                "embedder",
                "is \"openai\" but local.embedding_url is not set (e.g. \"http://127.0.0.1:11434/v1\" for Ollama)"
                    .into(),
            );
        }
        match (&s.local.embedding_model, lines.exact_key("local", "embedding_model")) {
            (Some(_), _) => {}
            (None, None) => err(
                "local",
                "embedder",
                "is \"openai\" but local.embedding_model is not set (e.g. \"nomic-embed-text\")".into(),
            ),
            // Set blank in the file (a value refused otherwise has its own error on its line,
            // and this one is not added: see `parse`): said on its line, not blamed on an
            // environment variable of no name.
            (None, Some(_)) => err(
                "local",
                "embedding_model",
                "is empty: local.embedder = \"openai\" needs the model name the endpoint knows (e.g. \"nomic-embed-text\")"
                    .into(),
            ),
        }
    }
    // A bank is at most `MAX_BANK_BYTES` (as import and the Hindsight API take one, and a Hindsight
    // server); per project, the project's name (at most `MAX_LABEL_BYTES`) follows the base bank.
    let bank_room = match s.memory.scoping {
        super::Scoping::PerProject => mneme_core::MAX_BANK_BYTES - 1 - crate::session::MAX_LABEL_BYTES,
        _ => mneme_core::MAX_BANK_BYTES,
    };
    let base = s.base_bank();
    if base.len() > bank_room {
        let key = if s.memory.bank_id.trim().len() > bank_room { "bank_id" } else { "bank_id_prefix" };
        err(
            "memory",
            key,
            format!(
                "makes the bank {} bytes long (\"{}…\"); it may be at most {bank_room}{}",
                base.len(),
                base.chars().take(24).collect::<String>(),
                if bank_room < mneme_core::MAX_BANK_BYTES {
                    " with per-project scoping (the project's name follows it)"
                } else {
                    ""
                }
            ),
        );
    }
    // A slip (a path the shell completed to the wrong file): the store would be opened on the
    // spool (locked by the daemon's own connection, "another process"), and the advice for a
    // damaged store moved the spool aside, with the retains waiting in it (review115 #2).
    if let Some(store) = &s.local.path {
        if let Some(own) = s.storage_files().iter().find(|own| crate::files::same_file(store, own)) {
            err(
                "local",
                "path",
                format!(
                    "names {}, a file mneme keeps for itself in storage.dir; name a file of its own",
                    own.display()
                ),
            );
        }
    }
    if s.queue.retry_max < s.queue.retry_initial {
        err("queue", "retry_max", "must not be shorter than queue.retry_initial".into());
    }
    errors
}

fn known_sections() -> Vec<String> {
    let mut v: Vec<String> = keys::REGISTRY.iter().map(|k| k.section.to_owned()).collect();
    v.dedup();
    v
}

fn section_keys(section: &str) -> Vec<&'static str> {
    keys::REGISTRY.iter().filter(|k| k.section == section).map(|k| k.name).collect()
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Lines of `[section]` headers and `key =` assignments, found by a light scan of the text
/// (the toml crate's `Table` does not keep spans).
struct LineIndex {
    sections: HashMap<String, usize>,
    /// Each `[section]` header's line and section, in file order.
    headers: Vec<(usize, String)>,
    keys: HashMap<(String, String), usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut sections = HashMap::new();
        let mut keys = HashMap::new();
        let mut headers = Vec::new();
        let mut current = String::new();
        // The closing quotes of a multi-line string the scan is inside: its lines are text,
        // whatever they look like (a `[heading]` in a preamble is no section).
        let mut in_string: Option<&str> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if let Some(quotes) = in_string {
                if raw.matches(quotes).count() % 2 == 1 {
                    in_string = None;
                }
                continue;
            }
            in_string = ["\"\"\"", "'''"].into_iter().find(|q| line.matches(q).count() % 2 == 1);
            // `[section]`, or `[[section]]` (an array of tables, which mneme refuses by this line).
            let opened = line.strip_prefix("[[").or_else(|| line.strip_prefix('['));
            if let Some(header) = opened.and_then(|l| l.split(']').next()) {
                current = header.trim().trim_matches('"').to_owned();
                sections.entry(current.clone()).or_insert(i + 1);
                headers.push((i + 1, current.clone()));
                continue;
            }
            let Some((lhs, _)) = line.split_once('=') else { continue };
            if line.starts_with('#') {
                continue;
            }
            let path: Vec<String> =
                lhs.split('.').map(|p| p.trim().trim_matches('"').trim_matches('\'').to_owned()).collect();
            let (section, name) = match (current.is_empty(), path.as_slice()) {
                (true, [s, k]) => (s.clone(), k.clone()),
                (false, [k]) => (current.clone(), k.clone()),
                // `memory = 3`: a section given a value; its error names this line.
                (true, [s]) => {
                    sections.entry(s.clone()).or_insert(i + 1);
                    continue;
                }
                _ => continue,
            };
            sections.entry(section.clone()).or_insert(i + 1);
            keys.entry((section, name)).or_insert(i + 1);
        }
        Self { sections, headers, keys }
    }

    fn section(&self, section: &str) -> Option<usize> {
        self.sections.get(section).copied()
    }

    /// The section whose header is the last at or above `line` (none above the first header).
    fn section_at(&self, line: usize) -> Option<String> {
        self.headers.iter().rev().find(|(l, _)| *l <= line).map(|(_, s)| s.clone())
    }

    /// The `section.key` assigned on `line`.
    fn key_at(&self, line: usize) -> Option<String> {
        self.keys.iter().find(|(_, l)| **l == line).map(|((section, name), _)| format!("{section}.{name}"))
    }

    fn key(&self, section: &str, name: &str) -> Option<usize> {
        self.exact_key(section, name).or_else(|| self.section(section))
    }

    /// The line of `section.name` when the file sets it (not its section's, as [`Self::key`]).
    fn exact_key(&self, section: &str, name: &str) -> Option<usize> {
        self.keys.get(&(section.to_owned(), name.to_owned())).copied()
    }
}
