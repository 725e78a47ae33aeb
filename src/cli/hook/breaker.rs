//! The hooks' circuit breaker. Every hook is its own short process, so the state is a file in the
//! storage dir: the time a hook last gave up on the daemon. While it is younger than
//! `hooks.cooldown`, hooks answer at once without trying, so a hung daemon costs the agent one
//! timeout, not one per hook and turn. After the cooldown the next hook tries again; an answer
//! removes the file.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The breaker of one storage dir.
pub struct Breaker {
    path: PathBuf,
    cooldown: Duration,
}

impl Breaker {
    /// The breaker kept in `storage_dir`.
    pub fn new(storage_dir: &Path, cooldown: Duration) -> Self {
        Breaker { path: storage_dir.join("hooks-breaker"), cooldown }
    }

    /// How long hooks still skip the daemon, if they do.
    pub fn open(&self) -> Option<Duration> {
        let tripped: u128 = std::fs::read_to_string(&self.path).ok()?.trim().parse().ok()?;
        // A trip in the future (the clock was set back since) is not believed: counted as just
        // now, hooks skipped a healthy daemon until the clock caught up, hours perhaps.
        let since = now_ms().checked_sub(tripped)?;
        let cooldown = self.cooldown.as_millis();
        (since < cooldown).then(|| Duration::from_millis((cooldown - since) as u64))
    }

    /// A hook gave up waiting: the others skip the daemon for the cooldown.
    pub fn trip(&self) {
        if self.cooldown.is_zero() {
            return;
        }
        // Only where the daemon keeps its files (a folder a hook should not create).
        if self.path.parent().is_some_and(Path::is_dir) {
            let tmp = self.path.with_extension("tmp");
            let _ = std::fs::write(&tmp, now_ms().to_string()).and_then(|_| std::fs::rename(&tmp, &self.path));
        }
    }

    /// The daemon answered.
    pub fn close(&self) {
        if self.path.exists() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_for_the_cooldown_and_closes_on_an_answer() {
        let dir = tempfile::tempdir().unwrap();
        let b = Breaker::new(dir.path(), Duration::from_secs(30));
        assert!(b.open().is_none());
        b.trip();
        assert!(b.open().is_some_and(|left| left > Duration::from_secs(29)));
        b.close();
        assert!(b.open().is_none());
        let short = Breaker::new(dir.path(), Duration::from_millis(1));
        short.trip();
        std::thread::sleep(Duration::from_millis(5));
        assert!(short.open().is_none(), "the cooldown passed");
        std::fs::write(dir.path().join("hooks-breaker"), (now_ms() + 3_600_000).to_string()).unwrap();
        assert!(b.open().is_none(), "a trip an hour ahead (the clock was set back) is not believed");
        let off = Breaker::new(dir.path(), Duration::ZERO);
        off.trip();
        assert!(off.open().is_none());
    }
}
