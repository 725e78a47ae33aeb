//! The `off` backend: stores nothing, finds nothing.

use crate::text::quoted_unless_private as q;
use async_trait::async_trait;

use crate::backend::MemoryBackend;
use crate::browse::*;
use crate::error::BackendError;
use crate::types::*;

/// Memory switched off. Retains are refused before they reach the queue (the session layer
/// answers `queued: 0`); anything that still arrives here is an error so it stays spooled.
#[derive(Debug, Default, Clone)]
pub struct OffBackend;

#[async_trait]
impl MemoryBackend for OffBackend {
    fn id(&self) -> BackendId {
        BackendId::Off
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { stores: false, ..Capabilities::LOCAL_STORE }
    }

    async fn start(&self, _scope: &Scope) -> Result<(), BackendError> {
        Ok(())
    }

    async fn retain(&self, _scope: &Scope, _batch: &RetainBatch) -> Result<(), BackendError> {
        // Transient on purpose: spooled items wait for the next storing backend.
        Err(BackendError::transient("memory is off; items stay spooled for the next storing backend"))
    }

    async fn recall(&self, _scope: &Scope, _q: &RecallQuery) -> Result<Vec<Recalled>, BackendError> {
        Ok(Vec::new())
    }

    async fn reflect(&self, _scope: &Scope, _q: &ReflectQuery) -> Result<String, BackendError> {
        Err(BackendError::Unsupported(
            "reflect needs the hindsight backend (memory.backend = \"hindsight\"); memory is off".into(),
        ))
    }

    async fn instructions(&self, _scope: &Scope) -> Result<Option<String>, BackendError> {
        Ok(None)
    }

    async fn clear(&self, _scope: &Scope, _what: ClearWhat) -> Result<ClearReport, BackendError> {
        // Not "nothing to clear": the stores keep what they hold, for when memory is on again.
        Ok(ClearReport {
            deleted: Some(0),
            message: "Memory is off: no store is open, so no stored memory was deleted (switch memory.backend back on to clear what it holds).".into(),
        })
    }

    async fn status(&self) -> BackendStatus {
        BackendStatus::healthy(BackendId::Off)
    }

    async fn browse(&self, _query: &BrowseQuery) -> Result<BrowsePage, BackendError> {
        Ok(BrowsePage::default())
    }

    async fn banks(&self) -> Result<Vec<BankCount>, BackendError> {
        Ok(Vec::new())
    }

    async fn memory(&self, id: &str, _bank: Option<&str>) -> Result<MemoryDetail, BackendError> {
        Err(BackendError::NotFound(format!("memory is off: no memory {} is stored", q(id))))
    }

    /// Refused, not answered "nothing to forget": the memory stays in the store it is in, and
    /// comes back with it when memory is on again.
    async fn forget(&self, _what: &Forget) -> Result<Forgotten, BackendError> {
        Err(BackendError::Unsupported(
            "memory is off (memory.backend = \"off\"): no store is open, so nothing was forgotten; switch memory.backend back on to forget what it holds".into(),
        ))
    }
}
