//! Where an export's lines go: standard output, a private file renamed over the one it replaces
//! once whole, or a FIFO or device written as it is; never through a link or into a FIFO another
//! user made on the way.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::write_failed;
use crate::cli::CliError;
use crate::owned_path::{self, Unwalked};

/// Where an export's lines go.
pub(super) enum Sink {
    Stdout(std::io::BufWriter<std::io::StdoutLock<'static>>),
    /// A private file beside the regular file it replaces once whole (`target`: a symlink's
    /// target, so the link stays). Unique and created anew (never one already there, nor one a
    /// link names), so two exports to one name never write into each other; dropped unfinished,
    /// it is removed.
    Replacing {
        file: std::io::BufWriter<tempfile::NamedTempFile>,
        target: PathBuf,
    },
    /// A FIFO, a device, a terminal (`-o /dev/stdout`, `-o >(gzip > x)`): written as it is.
    Direct(std::io::BufWriter<std::fs::File>),
}

impl Sink {
    pub(super) fn stdout() -> Self {
        Self::Stdout(std::io::BufWriter::new(std::io::stdout().lock()))
    }

    /// Whether an export to `path` goes through a file beside it, renamed over it (a regular
    /// file, or none yet), rather than to it as it is (a descriptor, a FIFO, a device: as
    /// root, `-o /dev/null` made a regular file of /dev/null).
    pub(super) fn replaces(path: &Path) -> bool {
        descriptor(path).is_none() && !std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
    }

    /// The sink for `-o path`. Every symbolic link on the path (a folder's too) is followed
    /// here, once, and one another user made is refused; what is written to as it is (a FIFO)
    /// is judged by what was opened, not by a look before: another user's FIFO renamed in
    /// between was written to.
    pub(super) fn open(path: &Path) -> Result<Self, CliError> {
        let failed = |e: std::io::Error| CliError::Other(format!("cannot write {}: {e}", path.display()));
        // Walked first, for a link another user made anywhere on it: one of theirs naming
        // /dev/stderr (or a folder of theirs naming /dev) had every memory go to this process's
        // own descriptor, which no open of the link would have been refused.
        let target = match owned_path::walked(path) {
            Ok(target) => target,
            Err(Unwalked::Planted { link, folder, uid }) => {
                let why = owned_path::made_by_another(&link, &folder, "a symbolic link", uid);
                return Err(CliError::Other(format!("cannot write {}: {why}", path.display())));
            }
            Err(Unwalked::Failed(e)) => return Err(failed(e)),
        };
        match descriptor(path) {
            Some(1) => return Ok(Self::stdout()),
            Some(fd) => {
                // SAFETY: dup(2) takes a number and gives -1 (EBADF) when it names no open file.
                let copy = unsafe { libc::dup(fd) };
                if copy < 0 {
                    return Err(failed(std::io::Error::last_os_error()));
                }
                // SAFETY: `copy` was just made by dup(2); nothing else owns it.
                let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(copy) };
                return Ok(Self::Direct(std::io::BufWriter::new(file)));
            }
            None => {}
        }
        // A name ending in '/' names a folder, as the shell's `>` takes it: not a file made
        // under that name.
        let folder_named = path.as_os_str().as_encoded_bytes().ends_with(b"/");
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => Err(CliError::Other(format!("cannot write {}: it is a folder", path.display()))),
            _ if folder_named => Err(CliError::Other(format!("cannot write {}: Not a directory", path.display()))),
            Ok(m) if !m.is_file() => match written_as_it_is(&target).map_err(failed)? {
                Some(file) => Ok(Self::Direct(std::io::BufWriter::new(file))),
                // A regular file by the time it was opened: replaced, as any.
                None => Self::replacing(target),
            },
            _ => Self::replacing(target),
        }
    }

    fn replacing(target: PathBuf) -> Result<Self, CliError> {
        let folder = match target.parent() {
            Some(f) if !f.as_os_str().is_empty() => f.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        // Private (0600), as the store it copies: tempfile creates it so, anew (O_EXCL).
        let file = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            .tempfile_in(&folder)
            .map_err(|e| CliError::Other(format!("cannot write in {}: {e}", folder.display())))?;
        Ok(Self::Replacing { file: std::io::BufWriter::new(file), target })
    }

    /// Puts a whole export in place.
    pub(super) fn finish(self) -> Result<(), CliError> {
        match self {
            Self::Stdout(mut out) => out.flush().map_err(write_failed),
            Self::Direct(mut out) => out.flush().map_err(write_failed),
            Self::Replacing { file, target } => {
                let file = file.into_inner().map_err(|e| write_failed(e.into_error()))?;
                file.as_file().sync_all().map_err(write_failed)?;
                // A failed rename drops the temporary file (a whole copy of every memory is not
                // left lying beside it). The rename replaces whatever name is there, a link or
                // a FIFO put there since included, and never writes into it.
                file.persist(&target)
                    .map(drop)
                    .map_err(|e| CliError::Other(format!("cannot put the export at {}: {}", target.display(), e.error)))
            }
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Stdout(out) => out.write(buf),
            Self::Replacing { file, .. } => file.write(buf),
            Self::Direct(out) => out.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stdout(out) => out.flush(),
            Self::Replacing { file, .. } => file.flush(),
            Self::Direct(out) => out.flush(),
        }
    }
}

/// The descriptor of this process a path names (`/dev/stdout`, `/dev/fd/3`, `/proc/self/fd/2`,
/// or a link to one): written through that descriptor, sharing its offset (reopened, the file a
/// shell redirected it to was replaced whole, or its start written over by what the descriptor
/// wrote after).
fn descriptor(path: &Path) -> Option<i32> {
    let named = |p: &Path| -> Option<i32> {
        match p.to_str()? {
            "/dev/stdin" => Some(0),
            "/dev/stdout" => Some(1),
            "/dev/stderr" => Some(2),
            p => p.strip_prefix("/dev/fd/").or_else(|| p.strip_prefix("/proc/self/fd/"))?.parse().ok(),
        }
    };
    // Each hop of a link chain (/dev/stdout itself is a link to /proc/self/fd/1, which is one
    // to the file the descriptor has open).
    link_hops(path).unwrap_or_else(|_| vec![path.to_path_buf()]).iter().find_map(|p| named(p))
}

/// `path` and each path a symlink chain from it goes through, to the first that is no link.
fn link_hops(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut hops = vec![path.to_path_buf()];
    for _ in 0..40 {
        let at = hops.last().expect("one at least");
        let Ok(next) = std::fs::read_link(at) else { return Ok(hops) };
        let next = match at.parent() {
            Some(folder) if next.is_relative() => folder.join(next),
            _ => next,
        };
        hops.push(next);
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}

/// `target` (no link: see [`walked`]) opened to be written as it is: `None` when what was
/// opened is a regular file (one put there since it was looked at), which is replaced instead.
/// A FIFO or device another user made is refused as opened: looked at first, another user's
/// FIFO renamed in between was written to, and its maker read every memory.
fn written_as_it_is(target: &Path) -> std::io::Result<Option<std::fs::File>> {
    let another_users = |m: &std::fs::Metadata| {
        let folder = target.parent().unwrap_or(Path::new("/"));
        owned_path::another_users(m.uid())
            .then(|| std::io::Error::other(owned_path::made_by_another(target, folder, "a FIFO", m.uid())))
    };
    // Looked at first too: the open of a FIFO waits for a reader, and this one's is its maker.
    if let Some(refused) = std::fs::symlink_metadata(target).ok().as_ref().and_then(another_users) {
        return Err(refused);
    }
    // O_NOFOLLOW: a link put there since is not followed.
    let file = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NOFOLLOW).open(target)?;
    let opened = file.metadata()?;
    if opened.is_file() {
        return Ok(None);
    }
    match another_users(&opened) {
        Some(refused) => Err(refused),
        None => Ok(Some(file)),
    }
}
