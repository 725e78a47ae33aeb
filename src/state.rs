//! The daemon's state: the settings in force and the backend they chose, owned in one place and
//! replaced as a whole on reload, so no layer ever sees new settings with the old backend (or
//! the other way round). The queue, the sessions, the Hindsight API and the reloader hold a
//! [`DaemonState`] handle and read [`DaemonState::current`] when they need it.

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

/// A handle to the daemon's state. Cheap to clone; every clone sees the same state.
#[derive(Clone)]
pub struct DaemonState {
    current: Arc<RwLock<Arc<Current>>>,
}

impl DaemonState {
    /// The state at start.
    pub fn new(settings: Arc<Settings>, backend: Arc<dyn MemoryBackend>) -> Self {
        Self { current: Arc::new(RwLock::new(Arc::new(Current { settings, backend }))) }
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

    /// Replaces settings and backend at once (a reload). Readers holding the previous
    /// [`Current`] finish with it.
    pub fn replace(&self, next: Current) {
        *self.current.write_locked() = Arc::new(next);
    }
}
