//! Waiting for a `mneme serve` child to be up: it writes "pid\naddr\n" to its pidfile once it
//! listens. Shared by the tests (`tests/common`) and the benchmarks (`benches/support`).

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// The address the daemon with this pid recorded in its pidfile, once it has.
pub fn recorded_addr(pid_path: &Path, pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(pid_path).ok()?;
    let mut lines = text.lines();
    let recorded: u32 = lines.next()?.trim().parse().ok()?;
    (recorded == pid).then(|| lines.next().map(str::to_owned)).flatten()
}

/// Polls every `every` until `child` recorded its address; panics when it exits first or
/// `timeout` passes.
pub fn wait_for_addr(child: &mut Child, pid_path: &Path, timeout: Duration, every: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(addr) = recorded_addr(pid_path, child.id()) {
            return addr;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("daemon exited at start: {status}");
        }
        assert!(Instant::now() < deadline, "daemon did not start within {timeout:?}");
        std::thread::sleep(every);
    }
}
