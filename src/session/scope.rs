//! Which bank and tags a session writes to (`memory.scoping`: global, per-project, per-project-tagged).

use std::path::{Path, PathBuf};

use mneme_core::Scope;

use crate::config::{Scoping, Settings};

/// The scope of a session working in `cwd`, and its project label.
pub fn scope_for(settings: &Settings, cwd: &str) -> (Scope, String) {
    let label = project_label(Path::new(cwd));
    (scope_of_project(settings, &label), label)
}

/// The scope of a session of the project labelled `label` (see [`project_label`]).
pub fn scope_of_project(settings: &Settings, label: &str) -> Scope {
    let base = settings.base_bank();
    match settings.memory.scoping {
        Scoping::Global => Scope { bank: base, tags: vec![] },
        Scoping::PerProject => Scope { bank: format!("{base}-{label}"), tags: vec![] },
        Scoping::PerProjectTagged => {
            Scope { bank: base, tags: vec![format!("{}{label}", mneme_core::PROJECT_TAG_PREFIX)] }
        }
    }
}

/// Of the banks a server lists, those of this configuration: the base bank (first, listed or
/// not: a server may list only banks it holds facts in) and, under `per-project` scoping, each
/// project's (`{base}-{project}`; under the other scopings none: a bank of that name may be
/// another tool's).
pub fn banks_of_configuration(settings: &Settings, listed: impl IntoIterator<Item = String>) -> Vec<String> {
    let base = settings.base_bank();
    let project_prefix = format!("{base}-");
    let per_project = settings.memory.scoping == Scoping::PerProject;
    let mut banks: Vec<String> =
        listed.into_iter().filter(|b| per_project && b.starts_with(&project_prefix) && *b != base).collect();
    banks.sort();
    banks.dedup();
    banks.insert(0, base);
    banks
}

/// The longest project label, in bytes: a longer one is cut and ends with a hash of the whole
/// (a bank a project's name made longer than a bank may be could not be imported or named).
pub const MAX_LABEL_BYTES: usize = 64;

/// The lowercased base name of the git primary checkout containing `cwd` (a linked worktree maps
/// to its main checkout, a worktree of a bare repository to the repository), else of `cwd`
/// itself, else "unknown". The path is resolved first (symbolic links, `..`), so every client
/// naming one folder gets one project, however it spells the path.
pub fn project_label(cwd: &Path) -> String {
    let cwd = resolved(cwd);
    let root = primary_checkout(&cwd).unwrap_or_else(|| cwd.clone());
    let label = root
        .file_name()
        .map(|n| n.to_string_lossy().trim().to_lowercase())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let label = cut_label(label);
    // A tag or a bank name holds no control character (a unit separator in a folder's name
    // dropped the project's tag from its memories: every project saw them).
    label.chars().map(|c| if c == '/' || c.is_control() { '-' } else { c }).collect()
}

/// The working directory as a client sends it to the daemon (in JSON: UTF-8). A path that is
/// not UTF-8 cannot be sent as it is, and its lossy form names no folder on the disk, so the
/// daemon took the last folder's name (`src`) for the project: the client sends its project's
/// folder instead (the lossy form of the primary checkout, which the daemon reads the name of).
pub fn cwd_to_send(cwd: &Path) -> String {
    match cwd.to_str() {
        Some(text) => text.to_owned(),
        None => {
            let cwd = resolved(cwd);
            primary_checkout(&cwd).unwrap_or(cwd).to_string_lossy().into_owned()
        }
    }
}

/// `path` with its symbolic links and `.`/`..` steps resolved; when it does not exist (a folder
/// deleted under the agent), the longest start of it that does, resolved, and the rest's steps
/// resolved in its text (through a link, a deleted folder was named after the link).
fn resolved(path: &Path) -> PathBuf {
    resolved_within(path, MAX_LINKS_FOLLOWED)
}

/// How many links to folders that are gone [`resolved`] follows (a loop of them ends).
const MAX_LINKS_FOLLOWED: usize = 8;

/// [`resolved`], following at most `links` more links whose target is gone (a link into a
/// monorepo's folder that a branch switch removed names that folder, not the link's).
fn resolved_within(path: &Path, links: usize) -> PathBuf {
    for start in path.ancestors() {
        let rest = path.strip_prefix(start).unwrap_or(Path::new(""));
        if let Ok(real) = start.canonicalize() {
            return steps_resolved(real, rest);
        }
        if let (Some(left), Ok(target)) = (links.checked_sub(1), std::fs::read_link(start)) {
            let target = start.parent().map_or(target.clone(), |dir| dir.join(&target));
            return resolved_within(&target.join(rest), left);
        }
    }
    steps_resolved(PathBuf::new(), path)
}

/// `rest`'s components added to `out`, its `.`/`..` steps resolved in the text.
fn steps_resolved(mut out: PathBuf, rest: &Path) -> PathBuf {
    for part in rest.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// A label of at most [`MAX_LABEL_BYTES`]: a longer one cut at a character and ended with 8 hex
/// digits of its whole text's fingerprint (two long names that share a start stay apart).
fn cut_label(label: String) -> String {
    if label.len() <= MAX_LABEL_BYTES {
        return label;
    }
    let mut end = MAX_LABEL_BYTES - 9;
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    let print = super::placement::fingerprint(&label);
    format!("{}-{:08x}", label[..end].trim_end(), print as u32)
}

fn primary_checkout(cwd: &Path) -> Option<PathBuf> {
    for dir in cwd.ancestors() {
        let dot_git = dir.join(".git");
        if dot_git.is_dir() {
            return Some(dir.to_path_buf());
        }
        if dot_git.is_file() {
            // A linked worktree: ".git" says "gitdir: <main>/.git/worktrees/<name>", and that
            // folder's "commondir" points at the main ".git".
            let text = read_small_file(&dot_git)?;
            let gitdir = dir.join(text.trim().strip_prefix("gitdir:")?.trim());
            let commondir = read_small_file(&gitdir.join("commondir"));
            let linked = commondir.is_some();
            let common = commondir.map(|c| gitdir.join(c.trim())).unwrap_or(gitdir);
            let common = common.canonicalize().unwrap_or(common);
            return match common.file_name().and_then(|n| n.to_str()) {
                Some(".git") => common.parent().map(Path::to_path_buf),
                // A worktree of a bare repository: the repository is the project, named after
                // its folder (`project.git`), or after the folder holding it when hidden
                // (`project/.bare`). Every worktree of it shares its memories.
                Some(name) if linked && name.starts_with('.') => common.parent().map(Path::to_path_buf),
                Some(name) if linked => Some(common.with_file_name(name.strip_suffix(".git").unwrap_or(name))),
                // A checkout whose git folder lives elsewhere (`--separate-git-dir`).
                _ => Some(dir.to_path_buf()),
            };
        }
    }
    None
}

/// A git pointer file's text: a regular file (checked on the file opened, so a swap to a FIFO or
/// a device after the check does not count), at most 4 KiB read. A cwd is the client's to name:
/// a "commondir" linked to /dev/zero read until memory ran out, and a FIFO blocked a thread
/// (and every reload after it) for good.
fn read_small_file(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    const MAX: u64 = 4096;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_the_primary_checkout() {
        let tmp = tempfile::tempdir().unwrap();
        let main = tmp.path().join("MyRepo");
        std::fs::create_dir_all(main.join(".git/worktrees/feature")).unwrap();
        std::fs::write(main.join(".git/worktrees/feature/commondir"), "../..\n").unwrap();
        std::fs::create_dir_all(main.join("src/deep")).unwrap();
        let wt = tmp.path().join("feature-wt");
        std::fs::create_dir_all(wt.join("sub")).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", main.join(".git/worktrees/feature").display()))
            .unwrap();
        assert_eq!(project_label(&main.join("src/deep")), "myrepo");
        assert_eq!(project_label(&wt.join("sub")), "myrepo");
        assert_eq!(project_label(&tmp.path().join("Plain Dir")), "plain dir");
        assert_eq!(project_label(Path::new("/")), "unknown");
    }

    /// One folder is one project however the path to it is spelled: `..` steps and symbolic
    /// links are resolved (a parent folder was put in its child repository's project), and the
    /// worktrees of a bare repository share it. A control character or a name too long for a
    /// bank does not make it into the label.
    #[test]
    fn labels_name_the_folder_not_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("a/RepoA/.git")).unwrap();
        std::fs::create_dir_all(root.join("a/plain")).unwrap();
        std::os::unix::fs::symlink(root.join("a/RepoA"), root.join("linkA")).unwrap();
        assert_eq!(project_label(&root.join("a/RepoA/..")), "a");
        assert_eq!(project_label(&root.join("a/RepoA/../plain")), "plain");
        assert_eq!(project_label(&root.join("a/RepoA/sub/../../plain")), "plain", "a folder that does not exist");
        assert_eq!(project_label(&root.join("linkA")), "repoa");
        // A folder deleted under the agent, reached through a link: the link's target's project.
        assert_eq!(project_label(&root.join("linkA/src/deleted")), "repoa");
        assert_eq!(project_label(&root.join("linkA/gone/../src/x")), "repoa");
        // A link to a folder of the repository that is gone itself.
        std::os::unix::fs::symlink(root.join("a/RepoA/removed"), root.join("linkGone")).unwrap();
        assert_eq!(project_label(&root.join("linkGone")), "repoa");
        assert_eq!(project_label(&root.join("linkGone/deeper")), "repoa");
        // Links that loop end.
        std::os::unix::fs::symlink(root.join("loopB"), root.join("loopA")).unwrap();
        std::os::unix::fs::symlink(root.join("loopA"), root.join("loopB")).unwrap();
        assert_eq!(project_label(&root.join("loopA/x")), "x");
        for (repo, common) in [("bareproj", ".bare"), ("tools", "tools.git")] {
            let git = root.join(repo).join(common);
            for wt in ["main", "feature"] {
                std::fs::create_dir_all(git.join("worktrees").join(wt)).unwrap();
                std::fs::write(git.join("worktrees").join(wt).join("commondir"), "../..\n").unwrap();
                let dir = root.join(repo).join(wt);
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(".git"), format!("gitdir: {}\n", git.join("worktrees").join(wt).display()))
                    .unwrap();
                assert_eq!(project_label(&dir), repo.to_lowercase(), "{repo}/{wt}");
            }
        }
        assert_eq!(project_label(&root.join("ctl\u{1f}proj")), "ctl-proj");
        let long = "项目".repeat(40);
        let label = project_label(&root.join(&long));
        assert!(label.len() <= MAX_LABEL_BYTES && label.starts_with("项目"), "{label}");
        assert_ne!(label, project_label(&root.join(format!("{long}x"))));
    }

    /// A working directory that is not UTF-8 is sent as its project's folder: the label the
    /// daemon reads from it is the project's, not the last folder's.
    #[test]
    fn a_cwd_that_is_not_utf8_is_sent_as_its_project() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let parent = tmp.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
        std::fs::create_dir_all(parent.join("myrepo/.git")).unwrap();
        std::fs::create_dir_all(parent.join("myrepo/src")).unwrap();
        let sent = cwd_to_send(&parent.join("myrepo/src"));
        assert_eq!(project_label(Path::new(&sent)), "myrepo", "{sent}");
        assert_eq!(cwd_to_send(Path::new("/plain/dir")), "/plain/dir");
    }

    /// A worktree pointer that names a FIFO, a device or an endless file is no project: the
    /// label comes back at once from the folder's name.
    #[test]
    fn git_pointers_to_fifos_and_devices_are_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        for (name, target) in [("fifo", None), ("zero", Some("/dev/zero"))] {
            let project = tmp.path().join(format!("Proj-{name}"));
            std::fs::create_dir_all(project.join("g")).unwrap();
            std::fs::write(project.join(".git"), "gitdir: g\n").unwrap();
            let commondir = project.join("g/commondir");
            match target {
                None => assert!(std::process::Command::new("mkfifo").arg(&commondir).status().unwrap().success()),
                Some(t) => std::os::unix::fs::symlink(t, &commondir).unwrap(),
            }
            let (tx, rx) = std::sync::mpsc::channel();
            let cwd = project.join("sub");
            std::thread::spawn(move || tx.send(project_label(&cwd)).unwrap());
            let label = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("answered at once");
            assert_eq!(label, format!("proj-{name}"));
        }
        // A .git file that is endless is not read whole either.
        let project = tmp.path().join("Endless");
        std::fs::create_dir_all(&project).unwrap();
        std::os::unix::fs::symlink("/dev/zero", project.join(".git")).unwrap();
        assert_eq!(project_label(&project), "endless");
    }

    #[test]
    fn scoping_modes() {
        let mut s = Settings::default();
        s.memory.bank_id_prefix = "team".into();
        let (scope, _) = scope_for(&s, "/x/proj");
        assert_eq!(scope, Scope { bank: "team-mneme".into(), tags: vec!["project:proj".into()] });
        s.memory.scoping = Scoping::PerProject;
        assert_eq!(scope_for(&s, "/x/proj").0, Scope { bank: "team-mneme-proj".into(), tags: vec![] });
        s.memory.scoping = Scoping::Global;
        s.memory.bank_id = "  ".into();
        s.memory.bank_id_prefix = String::new();
        assert_eq!(scope_for(&s, "/x/proj").0, Scope { bank: "mneme".into(), tags: vec![] });
    }
}
