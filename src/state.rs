//! The daemon's state: the settings in force and the backend they chose, owned in one place and
//! replaced as a whole on reload, so no layer ever sees new settings with the old backend (or
//! the other way round). The queue, the sessions, the Hindsight API and the reloader hold a
//! [`DaemonState`] handle and read [`DaemonState::current`] when they need it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use mneme_core::MemoryBackend;

use crate::config::Settings;
use crate::lock::RwLockExt;

/// One consistent view: settings and the backend built from them.
pub struct Current {
    /// The settings in force.
    pub settings: Arc<Settings>,
    /// The backend `settings.memory.backend` names, as built from those settings.
    pub backend: Arc<dyn MemoryBackend>,
}

impl Current {
    /// Names the store the backend in force reads and writes (16 hex digits): another after a
    /// reload that switched the backend or its store, the same after one that did not.
    pub fn store_mark(&self) -> String {
        let store = format!("{}:{}", self.backend.id(), self.settings.store_of(self.backend.id()));
        format!("{:016x}", mneme_core::text::fnv1a(store.as_bytes()))
    }
}

/// A handle to the daemon's state. Cheap to clone; every clone sees the same state.
#[derive(Clone)]
pub struct DaemonState {
    current: Arc<RwLock<Arc<Current>>>,
    /// A switch from memory `off` to a backend that stores is opening it (see
    /// [`DaemonState::takes_retains`]).
    opening_a_store: Arc<AtomicBool>,
    /// What was told of the local store's embedder outages, for every store opened by a reload
    /// after the one in force (see [`mneme_local::OutageNotices`]).
    embedder_outages: mneme_local::OutageNotices,
}

impl DaemonState {
    /// The state at start.
    pub fn new(settings: Arc<Settings>, backend: Arc<dyn MemoryBackend>) -> Self {
        Self::opened_with(settings, backend, mneme_local::OutageNotices::default())
    }

    /// The state at start, `backend` opened with `embedder_outages`.
    pub fn opened_with(
        settings: Arc<Settings>,
        backend: Arc<dyn MemoryBackend>,
        embedder_outages: mneme_local::OutageNotices,
    ) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(Current { settings, backend }))),
            opening_a_store: Arc::new(AtomicBool::new(false)),
            embedder_outages,
        }
    }

    /// What was told of the embedder's outages: given to every local store a reload opens.
    pub fn embedder_outages(&self) -> &mneme_local::OutageNotices {
        &self.embedder_outages
    }

    /// The settings and backend in force, together.
    pub fn current(&self) -> Arc<Current> {
        self.current.read_locked().clone()
    }

    /// The settings in force.
    pub fn settings(&self) -> Arc<Settings> {
        self.current().settings.clone()
    }

    /// The backend in force.
    pub fn backend(&self) -> Arc<dyn MemoryBackend> {
        self.current().backend.clone()
    }

    /// Whether a retain is kept: the backend in force stores, or a switch from `off` is opening
    /// one that does. Opening a store can take seconds (a large one upgraded by a newer mneme),
    /// and the retains of that time were answered "Memory is off" and dropped though the config
    /// already named the store (review76 #5); they wait in the spool for it instead.
    pub fn takes_retains(&self) -> bool {
        self.backend().capabilities().stores || self.opening_a_store.load(Ordering::SeqCst)
    }

    /// Marks a switch from `off` to a backend that stores as under way, or over.
    pub fn opening_a_store(&self, opening: bool) {
        self.opening_a_store.store(opening, Ordering::SeqCst);
    }

    /// Replaces settings and backend at once (a reload). Readers holding the previous
    /// [`Current`] finish with it.
    pub fn replace(&self, next: Current) {
        *self.current.write_locked() = Arc::new(next);
    }
}
