//! The storage trait: one implementation per crate (`off` here, `local`, `hindsight`).

use async_trait::async_trait;

use crate::browse::{BankCount, BrowsePage, BrowseQuery, Forget, Forgotten, MemoryDetail};
use crate::error::BackendError;
use crate::types::{
    BackendEvent, BackendId, BackendStatus, BankProfileUpdate, Capabilities, ClearReport, ClearWhat, ExportPage,
    RecallQuery, Recalled, ReflectQuery, RetainBatch, Scope, StoredMemory,
};

/// A place where memories live. The daemon holds exactly one as `Arc<dyn MemoryBackend>`.
///
/// Implementations must be idempotent by item id in [`MemoryBackend::retain`]: the retain queue
/// delivers at least once on the wire, and the store must hold each item exactly once.
#[async_trait]
pub trait MemoryBackend: Send + Sync + 'static {
    /// Which backend this is.
    fn id(&self) -> BackendId;

    /// What it can do.
    fn capabilities(&self) -> Capabilities {
        Capabilities::LOCAL_STORE
    }

    /// Prepares a scope before its first use (for example: ensure a bank and its mission).
    async fn start(&self, scope: &Scope) -> Result<(), BackendError>;

    /// Stores one batch. Resending the same batch (same `batch.id`, same items) stores nothing twice.
    async fn retain(&self, scope: &Scope, batch: &RetainBatch) -> Result<(), BackendError>;

    /// Finds memories relevant to a query, best first.
    async fn recall(&self, scope: &Scope, query: &RecallQuery) -> Result<Vec<Recalled>, BackendError>;

    /// Answers a question from memory with an LLM; [`BackendError::Unsupported`] where there is none.
    async fn reflect(&self, scope: &Scope, query: &ReflectQuery) -> Result<String, BackendError>;

    /// What the backend adds to a session's developer instructions (markdown), if anything.
    async fn instructions(&self, scope: &Scope) -> Result<Option<String>, BackendError>;

    /// Deletes memories.
    async fn clear(&self, scope: &Scope, what: ClearWhat) -> Result<ClearReport, BackendError>;

    /// Health and counts. Never fails: a problem is reported inside the status.
    async fn status(&self) -> BackendStatus;

    /// One page of stored memories (of `bank`, or of every bank where the backend can list them),
    /// starting after `cursor`, in a stable order.
    async fn export(&self, bank: Option<&str>, cursor: Option<&str>, limit: usize) -> Result<ExportPage, BackendError> {
        let _ = (bank, cursor, limit);
        Err(BackendError::Unsupported(format!("the {} backend cannot export memories", self.id())))
    }

    /// Events the backend raises by itself (an embedder outage and its end), for the daemon to
    /// show as notices. Taken once; `None` for backends that raise none.
    fn take_events(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<BackendEvent>> {
        None
    }

    /// Stores exported memories as they are (ids, timestamps, tags, documents). Idempotent:
    /// importing the same memories again stores nothing twice. Returns how many were new, where known.
    async fn import(&self, memories: &[StoredMemory]) -> Result<Option<u64>, BackendError> {
        let _ = memories;
        Err(BackendError::Unsupported(format!("the {} backend cannot import memories", self.id())))
    }

    /// Stored memories newest first, a page at a time.
    async fn browse(&self, query: &BrowseQuery) -> Result<BrowsePage, BackendError> {
        let _ = query;
        Err(BackendError::Unsupported(format!("the {} backend cannot list memories", self.id())))
    }

    /// The banks that hold memories, with their counts where known.
    async fn banks(&self) -> Result<Vec<BankCount>, BackendError> {
        Err(BackendError::Unsupported(format!("the {} backend cannot list banks", self.id())))
    }

    /// One memory by id with its passages; [`BackendError::NotFound`] when there is none.
    async fn memory(&self, id: &str, bank: Option<&str>) -> Result<MemoryDetail, BackendError> {
        let _ = (id, bank);
        Err(BackendError::Unsupported(format!("the {} backend cannot show single memories", self.id())))
    }

    /// Deletes one memory or a whole document; [`BackendError::NotFound`] when nothing matched.
    async fn forget(&self, what: &Forget) -> Result<Forgotten, BackendError> {
        let _ = what;
        Err(BackendError::Unsupported(format!("the {} backend cannot forget single memories", self.id())))
    }

    /// Gives a bank the profile a client set (its mission and disposition steer a server's
    /// reflect); nothing where no server reflects.
    async fn set_bank_profile(&self, bank: &str, profile: &BankProfileUpdate) -> Result<(), BackendError> {
        let _ = (bank, profile);
        Ok(())
    }

    /// Closes what the backend holds open, and waits for it (at most a few seconds): the daemon
    /// calls it as it stops, before the process ends. Used after, the backend refuses. Nothing to
    /// do by default.
    async fn close(&self) {}
}
