//! Builds the configured backend: the one `match` on `memory.backend`.

use std::sync::Arc;

use mneme_core::{BackendId, MemoryBackend, OffBackend};
use mneme_hindsight::HindsightBackend;
use mneme_local::{LocalBackend, LocalConfig};

use crate::config::Settings;

/// The backend `settings.memory.backend` names.
pub fn build(settings: &Settings) -> Result<Arc<dyn MemoryBackend>, String> {
    build_id(settings.memory.backend, settings)
}

/// The backend `id`, configured from `settings` (migrate opens two at once).
pub fn build_id(id: BackendId, settings: &Settings) -> Result<Arc<dyn MemoryBackend>, String> {
    Ok(match id {
        BackendId::Off => Arc::new(OffBackend),
        BackendId::Local => {
            Arc::new(LocalBackend::open(&LocalConfig { path: settings.local_db_path() }).map_err(|e| e.to_string())?)
        }
        BackendId::Hindsight => Arc::new(HindsightBackend::new(settings.hindsight.clone()).map_err(|e| e.to_string())?),
    })
}
