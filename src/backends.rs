//! Builds the configured backend: the one `match` on `memory.backend`.

use std::sync::Arc;

use mneme_core::{BackendError, BackendId, MemoryBackend, OffBackend};
use mneme_hindsight::HindsightBackend;
use mneme_local::{LocalBackend, LocalConfig, OutageNotices, Upgrade};

use crate::config::Settings;
use crate::files::{self, FileProblem};
use crate::notices::{Level, Notices};

/// Why a backend could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The local store's file cannot be used (it names the path and what to do).
    #[error(transparent)]
    File(#[from] FileProblem),
    /// The backend refused its configuration.
    #[error("{0}")]
    Config(#[source] BackendError),
}

/// The backend `settings.memory.backend` names, for a daemon switching to it while it runs
/// (a file problem's advice says to retry by a reload, not a start).
pub fn build_while_running(settings: &Settings, outages: &OutageNotices) -> Result<Arc<dyn MemoryBackend>, BuildError> {
    build(settings, outages).map_err(|e| match e {
        BuildError::File(p) => BuildError::File(p.met_while_running()),
        other => other,
    })
}

/// The backend `settings.memory.backend` names, a local store's embedder outages told as
/// `outages` says (the daemon's, the same across its reloads).
pub fn build(settings: &Settings, outages: &OutageNotices) -> Result<Arc<dyn MemoryBackend>, BuildError> {
    build_with(settings.memory.backend, settings, Upgrade::Allowed, outages)
}

/// The backend `id`, configured from `settings` (migrate opens two at once).
pub fn build_id(id: BackendId, settings: &Settings) -> Result<Arc<dyn MemoryBackend>, BuildError> {
    build_with(id, settings, Upgrade::Allowed, &OutageNotices::default())
}

/// [`build_id`] for a command run beside a daemon (`mneme migrate`): a local store of an earlier
/// schema is refused, not upgraded under a daemon of an earlier mneme (see [`Upgrade::Refused`]).
pub fn build_id_beside_daemon(id: BackendId, settings: &Settings) -> Result<Arc<dyn MemoryBackend>, BuildError> {
    build_with(id, settings, Upgrade::Refused, &OutageNotices::default())
}

fn build_with(
    id: BackendId,
    settings: &Settings,
    upgrade: Upgrade,
    outages: &OutageNotices,
) -> Result<Arc<dyn MemoryBackend>, BuildError> {
    Ok(match id {
        BackendId::Off => Arc::new(OffBackend),
        BackendId::Local => {
            let path = settings.local_db_path();
            let config = LocalConfig {
                path: path.clone(),
                embedder: settings.local.embedder_choice(),
                thesaurus: settings.local.thesaurus(),
                upgrade,
                outages: outages.clone(),
            };
            Arc::new(LocalBackend::open(&config).map_err(|e| files::local_store_problem(&path, e))?)
        }
        BackendId::Hindsight => {
            Arc::new(HindsightBackend::new(settings.hindsight.clone()).map_err(BuildError::Config)?)
        }
    })
}

/// Shows what `backend` raises by itself (an embedder outage and its end) as notices, for as
/// long as the backend lives.
pub fn forward_events(backend: &Arc<dyn MemoryBackend>, notices: &Notices) {
    let Some(mut events) = backend.take_events() else { return };
    let notices = notices.clone();
    let source = backend.id().to_string();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let level = if event.problem { Level::Warning } else { Level::Info };
            notices.emit(level, &source, None, event.message).await;
        }
    });
}
