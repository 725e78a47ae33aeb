//! Paths no other user can redirect: a path walked as the kernel walks it, once, with every
//! symbolic link on it (a folder's as well as the last one's) followed here and one another user
//! made refused; and whether the folders the file ends in are beyond other users' reach.
//!
//! `mneme export -o` writes every memory where its path leads, and the config file says where
//! memories and tokens go: another local user who can plant a link on the way (in /tmp), or
//! replace an entry of a folder (one every user may write, not sticky; one of theirs), chooses.
//! The kernel's fs.protected_symlinks, when on, refuses only links in sticky folders every user
//! may write.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Why a path was not walked.
#[derive(Debug)]
pub enum Unwalked {
    /// A link on it is another user's.
    Planted {
        /// The link.
        link: PathBuf,
        /// The folder it is in.
        folder: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// The walk itself failed (a loop, a folder that cannot be read).
    Failed(std::io::Error),
}

impl From<std::io::Error> for Unwalked {
    fn from(e: std::io::Error) -> Self {
        Self::Failed(e)
    }
}

/// The file `path` names, every symbolic link on the way followed (a link to a file not there
/// yet names the file to create; a folder that is not there ends the walk, the rest joined as
/// written), refusing a link another user (other than root) made wherever it stands.
pub fn walked(path: &Path) -> Result<PathBuf, Unwalked> {
    let mut at = if path.is_absolute() { PathBuf::from("/") } else { std::env::current_dir()? };
    // The parts still to walk, the next last.
    let mut rest: Vec<OsString> = Vec::new();
    push_parts(&mut rest, path);
    let mut links = 0;
    while let Some(part) = rest.pop() {
        if part == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&part);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    return Err(std::io::Error::other("too many levels of symbolic links").into());
                }
                if another_users(m.uid()) {
                    return Err(Unwalked::Planted { link: next, folder: at, uid: m.uid() });
                }
                let target = std::fs::read_link(&next)?;
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                push_parts(&mut rest, &target);
            }
            Ok(_) => at = next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                at = next;
                while let Some(part) = rest.pop() {
                    at.push(part);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(at)
}

/// Why another user may replace what `file` (a walked path: no link on it) names, if one may:
/// one of its folders is another user's (other than root's), or one every user may write in
/// that is not sticky. (A sticky one, /tmp, lets no other user replace this user's entries.)
pub fn others_may_replace(file: &Path) -> Option<String> {
    for folder in file.ancestors().skip(1) {
        let Ok(m) = std::fs::metadata(folder) else { continue };
        if another_users(m.uid()) {
            return Some(format!("its folder {} belongs to another user (uid {})", folder.display(), m.uid()));
        }
        if m.mode() & 0o002 != 0 && m.mode() & 0o1000 == 0 {
            return Some(format!(
                "every user may write in its folder {} (mode {:o}), and so replace it",
                folder.display(),
                m.mode() & 0o7777
            ));
        }
    }
    None
}

/// Whether `uid` is another user's: neither this process's nor root's.
pub fn another_users(uid: u32) -> bool {
    uid != crate::files::effective_uid() && uid != 0
}

/// "`path` is `kind` another user (uid N) made in `folder`[, a folder every user may write to]:
/// not written through; name a file of your own".
pub fn made_by_another(path: &Path, folder: &Path, kind: &str, uid: u32) -> String {
    let shared = std::fs::metadata(folder).is_ok_and(|m| m.mode() & 0o002 != 0);
    format!(
        "{} is {kind} another user (uid {uid}) made in {}{}: not written through; name a file of your own",
        path.display(),
        folder.display(),
        if shared { ", a folder every user may write to" } else { "" }
    )
}

/// `path`'s parts onto `rest`, its first on top (`.` left out, `..` kept).
fn push_parts(rest: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    rest.extend(parts.into_iter().rev());
}
