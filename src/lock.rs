//! Locks that survive a panic elsewhere.
//!
//! A std lock is poisoned when a thread panics while holding it, and `lock().unwrap()` then
//! panics in every later request: one bug would take the daemon down for good. The daemon's
//! locks guard plain maps and counters that a panic cannot leave half-updated in a way worse
//! than losing that one request, so they are taken whether poisoned or not.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`] that ignores poisoning.
pub trait MutexExt<T> {
    /// The guard, poisoned or not.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> MutexExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock`] access that ignores poisoning.
pub trait RwLockExt<T> {
    /// A read guard, poisoned or not.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// A write guard, poisoned or not.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One async lock per key (a session id, a document), made when first asked for: callers of
/// one key wait for each other, and never for another key's.
#[derive(Default)]
pub struct KeyedLocks(Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>);

impl KeyedLocks {
    /// Locks no call holds or waits for are dropped once there are this many.
    const PRUNE_AT: usize = 256;

    /// Waits for `key`'s lock; held until the guard is dropped.
    pub async fn lock(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.0.locked();
            if locks.len() >= Self::PRUNE_AT {
                // Held or awaited, a lock has a clone outside the map.
                locks.retain(|_, l| std::sync::Arc::strong_count(l) > 1);
            }
            locks.entry(key.to_owned()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// Waits for the locks of every key in `keys`, taken sorted and once each (two callers that
    /// hold several never wait for each other); held until the guards are dropped.
    pub async fn lock_all(&self, mut keys: Vec<String>) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        keys.sort_unstable();
        keys.dedup();
        let mut held = Vec::with_capacity(keys.len());
        for key in &keys {
            held.push(self.lock(key).await);
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_opens() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *m.locked() += 1;
        assert_eq!(*m.locked(), 2);
    }
}
