//! Random identifiers and secrets, without pulling in an RNG crate.

use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique id for an item or a batch: 32 hex digits, time-ordered prefix, random tail.
/// Not a secret (see [`secret_hex`] for that).
pub fn new_id() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // std's RandomState is seeded from the OS once per thread and varies per instance.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(nanos);
    h.write_u64(n);
    format!("{:012x}{:04x}{:016x}", (nanos / 1_000_000) & 0xffff_ffff_ffff, n & 0xffff, h.finish())
}

/// `bytes` bytes from the operating system's CSPRNG, as hex.
pub fn secret_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The default session of calls from `cwd` (`{prefix}-{16 hex digits}`): one per directory, so
/// two projects' calls never re-scope each other's session between a call and the next.
pub fn directory_session(prefix: &str, cwd: &str) -> String {
    // FNV-1a: stable across runs and builds (the id is kept with the session).
    let hash = mneme_core::text::fnv1a(cwd.as_bytes());
    format!("{prefix}-{hash:016x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_unique_and_secrets_random() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| super::new_id()).collect();
        assert_eq!(ids.len(), 10_000);
        let a = super::secret_hex(32).unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, super::secret_hex(32).unwrap());
    }
}
