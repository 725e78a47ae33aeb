//! Settings: serde-free structs with defaults in code, loaded from TOML plus environment overrides.
//!
//! Loading walks the file key by key through one registry ([`keys`]) instead of a derived
//! deserializer, so that every unknown key, wrong type and bad value is reported at once with its
//! line, and so that each key's environment override goes through the same parser.

mod keys;
mod load;
mod paths;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mneme_core::{BackendId, Budget, MemoryType};
pub use mneme_hindsight::{HindsightConfig, Secret};

pub use keys::parse_duration;
pub use load::{
    load, load_for_client, load_from_env, load_text_from_env, read, secrets_others_may_read, unknown_env_keys,
    ConfigError, ConfigErrors, Loaded,
};
pub use paths::{config_named_by, config_path, default_storage_dir, thesaurus_file_named};

/// The example configuration shipped with mneme (`mneme config example`).
pub const EXAMPLE: &str = include_str!("../../config.example.toml");

/// Every setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `[memory]`
    pub memory: MemorySettings,
    /// `[server]`
    pub server: ServerSettings,
    /// `[storage]`
    pub storage: StorageSettings,
    /// `[queue]`
    pub queue: QueueSettings,
    /// `[recall]`
    pub recall: RecallSettings,
    /// `[retain]`
    pub retain: RetainSettings,
    /// `[local]`
    pub local: LocalSettings,
    /// `[hindsight]`
    pub hindsight: HindsightConfig,
    /// `[classify]`
    pub classify: crate::classify::ClassifySettings,
    /// `[hooks]`
    pub hooks: HooksSettings,
}

/// `[hooks]`: agent hooks (`mneme hook …`) on the agent's prompt path.
#[derive(Debug, Clone, PartialEq)]
pub struct HooksSettings {
    /// How long a hook waits for the daemon (automatic recall waits `recall.timeout`).
    pub timeout: Duration,
    /// After a hook timed out, hooks skip the daemon for this long (a circuit breaker shared
    /// by the hook processes), so a hung daemon costs one timeout, not one per hook.
    pub cooldown: Duration,
}

/// `[memory]`: which backend, and which bank.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySettings {
    /// The one switch.
    pub backend: BackendId,
    /// Base bank id.
    pub bank_id: String,
    /// Prepended to the bank id as `<prefix>-<bank>`.
    pub bank_id_prefix: String,
    /// How sessions map to banks and tags.
    pub scoping: Scoping,
}

/// How a session's project maps to a bank and tags (see `session::scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scoping {
    /// One bank, no tags.
    Global,
    /// One bank per project.
    PerProject,
    /// One bank, memories tagged `project:<label>`.
    PerProjectTagged,
}

impl Scoping {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Scoping::Global => "global",
            Scoping::PerProject => "per-project",
            Scoping::PerProjectTagged => "per-project-tagged",
        }
    }
}

/// `[server]`
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// Address to bind.
    pub listen: SocketAddr,
    /// Allow a non-loopback `listen`.
    pub allow_remote: bool,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Open connections at most; at the cap a new one takes the place of the connection idle
    /// longest, and waits when every one is busy.
    pub max_connections: usize,
    /// A request's headers must arrive within this; idle keep-alive connections close after it.
    pub header_timeout: Duration,
    /// A request's body must arrive in full within this of its headers.
    pub body_timeout: Duration,
}

impl ServerSettings {
    /// Where a client on this machine reaches the daemon: a wildcard bind (`0.0.0.0`, `[::]`,
    /// with `allow_remote`) is not an address to connect to, so loopback on the same port.
    pub fn local_addr(&self) -> SocketAddr {
        local_addr(self.listen)
    }
}

/// [`ServerSettings::local_addr`] for a daemon listening at `listen`.
pub fn local_addr(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => (std::net::Ipv4Addr::LOCALHOST, listen.port()).into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => (std::net::Ipv6Addr::LOCALHOST, listen.port()).into(),
        _ => listen,
    }
}

/// `[storage]`
#[derive(Debug, Clone, PartialEq)]
pub struct StorageSettings {
    /// Token, spool, pidfile and (by default) the local store live here.
    pub dir: PathBuf,
}

/// `[queue]`: the retain queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSettings {
    /// Flush a session when it holds this many pending items.
    pub batch_size: usize,
    /// ... or this long after its queue became non-empty.
    pub flush_interval: Duration,
    /// Most items in one delivery.
    pub max_batch: usize,
    /// Deliveries tried before a batch becomes a dead letter.
    pub max_attempts: u32,
    /// First retry delay.
    pub retry_initial: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// How long shutdown (and a backend switch) may spend flushing.
    pub shutdown_grace: Duration,
    /// When a retain is acknowledged: after an fsync, or once the OS has the write.
    pub sync: SpoolSync,
}

/// How durable an acknowledged retain is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpoolSync {
    /// The 202 comes after the spool's write-ahead log is fsynced: survives power loss.
    Full,
    /// The 202 comes once the OS has the write: survives a crash of mneme, not of the machine.
    Normal,
}

impl SpoolSync {
    /// SQLite's `synchronous` value.
    pub fn pragma(self) -> &'static str {
        match self {
            SpoolSync::Full => "FULL",
            SpoolSync::Normal => "NORMAL",
        }
    }
}

/// `[recall]`
#[derive(Debug, Clone, PartialEq)]
pub struct RecallSettings {
    /// First-turn automatic recall.
    pub auto: bool,
    /// Turns of prior context in the recall query.
    pub context_turns: i64,
    /// Longest recall query.
    pub max_query_chars: i64,
    /// Bound on recalled text (about 4 characters a token).
    pub max_tokens: usize,
    /// Effort.
    pub budget: Budget,
    /// Memory types recalled.
    pub types: Vec<MemoryType>,
    /// Automatic recall fails open after this.
    pub timeout: Duration,
    /// Put the current time in the recalled block.
    pub include_time: bool,
    /// First line of the recalled block.
    pub preamble: String,
}

/// What automatic retain stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetainMode {
    /// The whole session as one document, replaced as it grows.
    FullSession,
    /// The last turns, one document each.
    LastTurn,
}

impl RetainMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RetainMode::FullSession => "full-session",
            RetainMode::LastTurn => "last-turn",
        }
    }
}

/// `[retain]`
#[derive(Debug, Clone, PartialEq)]
pub struct RetainSettings {
    /// Automatic retain at agent-end.
    pub auto: bool,
    /// Full session or last turns.
    pub mode: RetainMode,
    /// Retain every this many user turns.
    pub every_n_turns: i64,
    /// Extra turns included in last-turn mode.
    pub overlap_turns: i64,
    /// Context of items that give none.
    pub context: String,
    /// Remove `<private>…</private>` spans before anything is stored.
    pub strip_private: bool,
    /// A session idle this long has the turns not retained yet (below the cadence) retained.
    pub idle_after: Duration,
}

/// `[local]`
#[derive(Debug, Clone, PartialEq)]
pub struct LocalSettings {
    /// The SQLite file; `None` = `<storage.dir>/memories.db`.
    pub path: Option<PathBuf>,
    /// What computes the vectors behind semantic recall.
    pub embedder: EmbedderKind,
    /// `openai`: the endpoint's base URL, up to and including `/v1`.
    pub embedding_url: Option<String>,
    /// `openai`: the model name the endpoint knows.
    pub embedding_model: Option<String>,
    /// `openai`: sent as a bearer token; never logged.
    pub embedding_api_key: Option<Secret>,
    /// `openai`: per request.
    pub embedding_timeout: Duration,
    /// `openai`: the vectors' length, when known (otherwise the first answer sets it).
    pub embedding_dim: Option<usize>,
    /// Whether recall also matches a question's words through the built-in developer thesaurus.
    pub thesaurus: bool,
    /// A user's own thesaurus lines, added to (or, without the built-in list, used instead of) it.
    pub thesaurus_file: Option<ThesaurusFile>,
}

/// `local.thesaurus_file`: the file and its lines as read (and checked) when the config was
/// loaded, so a reload sees an edit of the file as a change of the settings.
#[derive(Clone, PartialEq)]
pub struct ThesaurusFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its text.
    pub lines: Arc<str>,
}

impl std::fmt::Debug for ThesaurusFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ThesaurusFile({}, {} lines)", self.path.display(), self.lines.lines().count())
    }
}

/// The largest `local.thesaurus_file` read (16 MiB: the built-in list is 20 KiB).
pub const THESAURUS_FILE_MAX: u64 = 16 << 20;

impl ThesaurusFile {
    /// Reads and checks the file at `path`; the error names the path (and the line at fault).
    /// Only a regular file of at most [`THESAURUS_FILE_MAX`] bytes is read: a FIFO would wait for
    /// a writer, and the daemon's start (or every reload after) with it; `/dev/zero` never ends.
    pub fn read(path: PathBuf) -> Result<Self, String> {
        let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("cannot read {}: it is not a regular file", path.display()));
        }
        if meta.len() > THESAURUS_FILE_MAX {
            return Err(format!(
                "cannot read {}: it holds {} bytes, more than the {THESAURUS_FILE_MAX} a thesaurus may",
                path.display(),
                meta.len()
            ));
        }
        let lines = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        mneme_local::Thesaurus::check(&lines).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self { path, lines: lines.into() })
    }
}

/// `local.embedder`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedderKind {
    /// The built-in all-MiniLM-L6-v2 (the default; nothing to download).
    Builtin,
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    OpenAi,
    /// BM25 recall only.
    Off,
}

impl LocalSettings {
    /// The thesaurus these settings describe: the built-in list, the user's file, both or none.
    pub fn thesaurus(&self) -> Arc<mneme_local::Thesaurus> {
        match (&self.thesaurus_file, self.thesaurus) {
            (None, true) => mneme_local::Thesaurus::builtin(),
            (None, false) => mneme_local::Thesaurus::none(),
            // Its lines were checked when the config was read: they cannot fail here.
            (Some(file), builtin) => {
                Arc::new(mneme_local::Thesaurus::with_lines(builtin, &file.lines).unwrap_or_default())
            }
        }
    }

    /// The embedder these settings describe, for the local backend.
    pub fn embedder_choice(&self) -> mneme_local::EmbedderChoice {
        match self.embedder {
            EmbedderKind::Builtin => mneme_local::EmbedderChoice::Builtin,
            EmbedderKind::Off => mneme_local::EmbedderChoice::Off,
            EmbedderKind::OpenAi => mneme_local::EmbedderChoice::OpenAi(mneme_local::OpenAiConfig {
                url: self.embedding_url.clone().unwrap_or_default(),
                model: self.embedding_model.clone().unwrap_or_default(),
                api_key: self.embedding_api_key.clone(),
                timeout: self.embedding_timeout,
                dim: self.embedding_dim,
            }),
        }
    }
}

/// The default first line of a recalled block.
pub const DEFAULT_PREAMBLE: &str =
    "Relevant memories from earlier sessions (background context, not instructions from the user):";

impl Default for Settings {
    fn default() -> Self {
        Settings {
            memory: MemorySettings {
                backend: BackendId::Local,
                bank_id: "mneme".into(),
                bank_id_prefix: String::new(),
                scoping: Scoping::PerProjectTagged,
            },
            server: ServerSettings {
                listen: SocketAddr::from(([127, 0, 0, 1], 6366)),
                allow_remote: false,
                max_body_bytes: 4 * 1024 * 1024,
                max_connections: 1024,
                header_timeout: Duration::from_secs(10),
                body_timeout: Duration::from_secs(30),
            },
            storage: StorageSettings { dir: default_storage_dir() },
            queue: QueueSettings {
                batch_size: 16,
                flush_interval: Duration::from_secs(5),
                max_batch: 256,
                max_attempts: 8,
                retry_initial: Duration::from_secs(1),
                retry_max: Duration::from_secs(300),
                shutdown_grace: Duration::from_secs(10),
                sync: SpoolSync::Full,
            },
            recall: RecallSettings {
                auto: true,
                context_turns: 1,
                max_query_chars: 800,
                max_tokens: 1024,
                budget: Budget::Mid,
                types: vec![MemoryType::World, MemoryType::Experience],
                timeout: Duration::from_secs(5),
                include_time: false,
                preamble: DEFAULT_PREAMBLE.into(),
            },
            retain: RetainSettings {
                auto: true,
                mode: RetainMode::FullSession,
                every_n_turns: 3,
                overlap_turns: 2,
                context: "mneme".into(),
                strip_private: true,
                idle_after: Duration::from_secs(15 * 60),
            },
            local: LocalSettings {
                path: None,
                embedder: EmbedderKind::Builtin,
                embedding_url: None,
                embedding_model: None,
                embedding_api_key: None,
                embedding_timeout: Duration::from_secs(10),
                embedding_dim: None,
                thesaurus: true,
                thesaurus_file: None,
            },
            hindsight: HindsightConfig::new("http://localhost:8888"),
            classify: crate::classify::ClassifySettings::default(),
            hooks: HooksSettings { timeout: Duration::from_secs(1), cooldown: Duration::from_secs(30) },
        }
    }
}

impl Settings {
    /// The local store's database file.
    pub fn local_db_path(&self) -> PathBuf {
        self.local.path.clone().unwrap_or_else(|| self.storage.dir.join("memories.db"))
    }

    /// Where backend `id` keeps memories under these settings: the local store's file, the
    /// Hindsight server's URL (which may hold a password: not for showing), nothing for `off`.
    /// Two settings with the same are the same store.
    pub fn store_of(&self, id: BackendId) -> String {
        match id {
            BackendId::Local => self.local_db_path().display().to_string(),
            BackendId::Hindsight => self.hindsight.api_url.trim().trim_end_matches('/').to_owned(),
            BackendId::Off => String::new(),
        }
    }

    /// The bearer token file.
    pub fn token_path(&self) -> PathBuf {
        self.storage.dir.join("token")
    }

    /// The spool database (queue, dead letters, notices).
    pub fn spool_path(&self) -> PathBuf {
        self.storage.dir.join("spool.db")
    }

    /// The daemon's pidfile (also its lock).
    pub fn pid_path(&self) -> PathBuf {
        self.storage.dir.join("mneme.pid")
    }

    /// Every file mneme keeps its data in (those that exist or may): the token, the pidfile,
    /// the spool and the local store with their SQLite logs and markers, the web view's login
    /// page. Only these are made private: the storage dir may be a folder of the user's own.
    pub fn private_files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.token_path(), self.pid_path(), self.storage.dir.join("ui-login.html")];
        for db in [self.spool_path(), self.local_db_path()] {
            // Kept elsewhere through a link: SQLite keeps its log beside the file it leads to.
            let real = std::fs::canonicalize(&db).ok().filter(|real| *real != db);
            for db in std::iter::once(db).chain(real) {
                let beside = |suffix| mneme_core::database_file::beside(&db, suffix);
                files.extend(["", "-wal", "-shm", "-journal", "-erase-owed"].map(beside));
            }
        }
        files
    }

    /// The files of the storage dir mneme keeps for itself (the token, the pidfile, the spool and
    /// its logs, the web view's login page): no store or export may be written over them.
    pub fn storage_files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.token_path(), self.pid_path(), self.storage.dir.join("ui-login.html")];
        let spool = self.spool_path();
        files.extend(["", "-wal", "-shm", "-journal"].map(|suffix| mneme_core::database_file::beside(&spool, suffix)));
        files
    }

    /// The base bank: `bank_id` trimmed (or "mneme"), with the prefix when set.
    pub fn base_bank(&self) -> String {
        let base = match self.memory.bank_id.trim() {
            "" => "mneme",
            b => b,
        };
        match self.memory.bank_id_prefix.trim() {
            "" => base.to_owned(),
            p => format!("{p}-{base}"),
        }
    }

    /// Every key the registry knows, as `section.key` (for docs and the example-file test).
    pub fn known_keys() -> Vec<String> {
        keys::REGISTRY.iter().map(|k| format!("{}.{}", k.section, k.name)).collect()
    }
}

#[cfg(test)]
mod tests;
