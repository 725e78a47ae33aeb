use std::collections::HashMap;
use std::time::Duration;

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| map.get(k).cloned()
}

#[test]
fn example_file_parses_to_the_defaults_and_names_every_key() {
    let parsed = load::parse(EXAMPLE, None).expect("config.example.toml parses");
    let mut want = Settings::default();
    want.storage.dir = parsed.storage.dir.clone(); // commented out in the example: platform default
    assert_eq!(parsed, want);
    for key in Settings::known_keys() {
        let name = key.split('.').nth(1).unwrap();
        assert!(EXAMPLE.contains(&format!("{name} =")), "config.example.toml does not mention {key}");
    }
}

#[test]
fn every_problem_is_reported_with_key_and_line() {
    let text =
        "[memory]\nbackend = \"remote\"\n\n[queue]\nbatch_size = 0\nflush_interval = 5\nbogus = 1\n\n[nope]\nx = 1\n";
    let errors = load::parse(text, None).unwrap_err();
    let got: Vec<(String, Option<usize>)> = errors.iter().map(|e| (e.key.clone(), e.line)).collect();
    assert_eq!(
        got,
        vec![
            ("memory.backend".into(), Some(2)),
            ("queue.batch_size".into(), Some(5)),
            ("queue.flush_interval".into(), Some(6)),
            ("queue.bogus".into(), Some(7)),
            ("nope".into(), Some(9)),
        ]
    );
    assert!(errors[0].message.contains("\"off\", \"local\", \"hindsight\""), "{}", errors[0].message);
}

/// A multi-line string's lines are text: one that looks like a section heading does not move
/// the lines errors name.
#[test]
fn lines_inside_a_multi_line_string_are_not_read_as_sections() {
    let text = "[recall]\npreamble = \"\"\"\nWhat we know:\n[background]\n\"\"\"\nmax_tokens = \"lots\"\n";
    let errors = load::parse(text, None).unwrap_err();
    let got: Vec<(String, Option<usize>)> = errors.iter().map(|e| (e.key.clone(), e.line)).collect();
    assert_eq!(got, vec![("recall.max_tokens".into(), Some(6))]);
}

#[test]
fn syntax_errors_name_the_line() {
    let errors = load::parse("[queue]\nbatch_size = = 3\n", None).unwrap_err();
    assert_eq!(errors[0].line, Some(2));
}

/// A key cut short mid-edit assigns nothing: the error names the section it is in and shows
/// the text (it said `key: ""` and "expected `.`, `=`" alone).
#[test]
fn a_key_cut_short_names_its_section_and_text() {
    let errors = load::parse("[server]\nport = 7878\n[memory]\nback", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("memory", Some(4)), "{errors:?}");
    assert!(errors[0].message.contains("`back`"), "{errors:?}");
    let errors = load::parse("[queue]\nbatch_size = = 3\n", None).unwrap_err();
    assert_eq!(errors[0].key, "queue.batch_size", "{errors:?}");
    assert!(!errors[0].message.contains("(at"), "{errors:?}");
    // A line that is no key's start (a secret pasted without its `=`) is not quoted.
    let errors = load::parse("[hindsight]\napi_token \"hs_SECRET123\"\n", None).unwrap_err();
    assert_eq!(errors[0].key, "hindsight", "{errors:?}");
    assert!(!errors[0].message.contains("SECRET"), "{errors:?}");
    let errors = load::parse("[local]\nsk-SECRET456\n", None).unwrap_err();
    assert!(!errors[0].message.contains("SECRET"), "{errors:?}");
}

#[test]
fn an_empty_path_is_refused_naming_its_key_and_line() {
    let errors = load::parse("[storage]\ndir = \"\"\n[local]\npath = \" \"\n", None).unwrap_err();
    let found: Vec<(String, Option<usize>)> = errors.iter().map(|e| (e.key.clone(), e.line)).collect();
    assert_eq!(found, vec![("storage.dir".to_owned(), Some(2)), ("local.path".to_owned(), Some(4))], "{errors:?}");
}

/// A blank pattern is found in every text: an empty compaction pattern took every request for a
/// compaction, and automatic retain kept nothing, with `config check` saying "valid".
#[test]
fn a_blank_classify_pattern_is_refused_naming_its_key_and_line() {
    let text = "[classify]\nmeta_phrases = [\"x\"]\ncompaction_system_patterns = [\"a\", \"\"]\nmeta_system_patterns = [\" \"]\n";
    let errors = load::parse(text, None).unwrap_err();
    let found: Vec<(String, Option<usize>)> = errors.iter().map(|e| (e.key.clone(), e.line)).collect();
    let want = [("classify.compaction_system_patterns", 3), ("classify.meta_system_patterns", 4)];
    assert_eq!(found, want.map(|(k, l)| (k.to_owned(), Some(l))), "{errors:?}");
    assert!(errors[0].message.contains("item 2 is blank"), "{errors:?}");
    // An empty template marker turns that rule off, as it did; agent names are not patterns.
    let off = "[classify]\ntemplate_marker = \"\"\nprimary_agents = [\"\"]\n";
    assert!(load::parse(off, None).is_ok());
}

/// DESIGN.md's example file, as it is written there: the bank and its scoping under
/// [hindsight] (SPEC.md and mneme keep them under [memory]). It was refused (unknown keys).
#[test]
fn the_design_documents_example_file_is_taken() {
    let design = r#"
[memory]
backend = "local"            # "off" | "local" | "hindsight"   (the one switch)

[server]
listen = "127.0.0.1:6366"    # loopback only unless allow_remote = true

[queue]
batch_size = 16              # flush a session's queue when it holds this many items
flush_interval = "5s"        # ... or this long after it became non-empty (not reset by later items)

[local]
# path = "<storage.dir>/memories.db"

[hindsight]
api_url = "http://localhost:8888"
# api_token = "..."          # or env HINDSIGHT_API_TOKEN
bank_id = "team"
scoping = "per-project"   # "global" | "per-project" | "per-project-tagged"
"#;
    let s = load::parse(design, None).unwrap();
    assert_eq!((s.memory.bank_id.as_str(), s.memory.scoping), ("team", crate::config::Scoping::PerProject));
    // [memory]'s own wins; a bad value is named where it was written.
    let both = "[memory]\nbank_id = \"mine\"\n[hindsight]\nbank_id = \"theirs\"\n";
    assert_eq!(load::parse(both, None).unwrap().memory.bank_id, "mine");
    let errors = load::parse("[hindsight]\nscoping = \"sideways\"\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("hindsight.scoping", Some(2)), "{errors:?}");
}

#[test]
fn legacy_memories_enabled() {
    assert_eq!(load::parse("[memories]\nenabled = false\n", None).unwrap().memory.backend, BackendId::Off);
    assert_eq!(load::parse("[memories]\nenabled = true\n", None).unwrap().memory.backend, BackendId::Local);
    let both = "[memories]\nenabled = false\n[memory]\nbackend = \"local\"\n";
    assert_eq!(load::parse(both, None).unwrap().memory.backend, BackendId::Local);
}

/// An override of a key the file sets under another name is said too: `[hindsight]`'s
/// synonyms and the legacy `[memories] enabled` (review64 #2).
#[test]
fn an_override_of_a_key_set_under_another_name_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[hindsight]\nbank_id = \"fromfile\"\n\n[memories]\nenabled = false\n").unwrap();
    let env = env_of(&[("HINDSIGHT_BANK_ID", "fromenv"), ("MNEME_MEMORY__BACKEND", "local")]);
    let warnings = load(&path, &env).unwrap().warnings.join("\n");
    assert!(warnings.contains("overrides memory.bank_id (line 2 of the file)"), "{warnings}");
    assert!(warnings.contains("MNEME_MEMORY__BACKEND overrides memory.backend (line 5 of the file)"), "{warnings}");
}

#[test]
fn environment_overrides_and_aliases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[queue]\nbatch_size = 4\n[recall]\nauto = true\n").unwrap();
    let env = env_of(&[
        ("MNEME_QUEUE__BATCH_SIZE", "9"),
        ("HINDSIGHT_AUTO_RECALL", "no"),
        ("HINDSIGHT_RECALL_MAX_TOKENS", "lots"),
        ("MNEME_QUEUE__FLUSH_INTERVAL", "250ms"),
        ("MNEME_RETAIN__STRIP_PRIVATE", "YES"),
        ("MNEME_RECALL__TYPES", "world, observation"),
        ("MNEME_QUEUE__SYNC", "normal "),
    ]);
    let loaded = load(&path, &env).unwrap();
    assert!(loaded.exists);
    let s = loaded.settings;
    assert_eq!(s.queue.batch_size, 9);
    assert!(!s.recall.auto);
    assert_eq!(s.recall.max_tokens, 1024, "unparsable env number ignored");
    assert_eq!(s.queue.flush_interval, Duration::from_millis(250));
    assert!(s.retain.strip_private);
    assert_eq!(s.recall.types, vec![MemoryType::World, MemoryType::Observation]);
    assert_eq!(s.queue.sync, SpoolSync::Normal, "a choice is trimmed as a number is");
    assert_eq!(loaded.warnings.len(), 3, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("HINDSIGHT_RECALL_MAX_TOKENS"));
    // The overrides of keys the file sets are told, with the file's line; the others are not.
    assert!(loaded.warnings[1].starts_with("MNEME_QUEUE__BATCH_SIZE overrides queue.batch_size (line 2"));
    assert!(loaded.warnings[2].starts_with("HINDSIGHT_AUTO_RECALL overrides recall.auto (line 4"));
}

/// An override whose value cannot be read is ignored with a warning naming it (a boolean that
/// is none was taken for false); one that does not go with the others (a listen address that
/// is not loopback) refuses the config, naming the variable (it named the file, and no line).
#[test]
fn an_override_that_does_not_fit_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.toml");
    let env = env_of(&[("MNEME_RECALL__AUTO", "treu"), ("HINDSIGHT_AUTO_RETAIN", "off")]);
    let loaded = load(&path, &env).unwrap();
    assert!(loaded.settings.recall.auto, "a value that is not a boolean changes nothing");
    assert!(!loaded.settings.retain.auto, "off is false");
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("MNEME_RECALL__AUTO") && loaded.warnings[0].contains("true or false"));
    let env = env_of(&[("MNEME_SERVER__LISTEN", "0.0.0.0:1"), ("MNEME_QUEUE__BATCH_SIZE", "9")]);
    let refused = load(&path, &env).unwrap_err().to_string();
    assert!(refused.contains("server.listen") && refused.contains("MNEME_SERVER__LISTEN=\"0.0.0.0:1\""), "{refused}");
    assert!(!refused.contains("BATCH_SIZE"), "{refused}");
}

#[test]
fn missing_file_means_defaults_and_relative_paths_follow_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load(&dir.path().join("absent.toml"), &env_of(&[])).unwrap();
    assert!(!loaded.exists);
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[storage]\ndir = \"data\"\n").unwrap();
    assert_eq!(load(&path, &env_of(&[])).unwrap().settings.storage.dir, dir.path().join("data"));
}

#[test]
fn remote_listen_needs_allow_remote_and_banks_refuse_slashes() {
    let errors = load::parse("[server]\nlisten = \"0.0.0.0:6366\"\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("server.listen", Some(2)));
    assert!(load::parse("[server]\nlisten = \"0.0.0.0:6366\"\nallow_remote = true\n", None).is_ok());
    let errors = load::parse("[memory]\nbank_id = \"a/b\"\n", None).unwrap_err();
    assert_eq!(errors[0].key, "memory.bank_id");
    // A URL takes . and .. for steps in its path: `…/banks/./memories` is the bank "memories".
    for dot in [".", ".."] {
        let errors = load::parse(&format!("[memory]\nscoping = \"global\"\nbank_id = \"{dot}\"\n"), None).unwrap_err();
        assert_eq!((errors[0].key.as_str(), errors[0].line), ("memory.bank_id", Some(3)), "{dot}");
    }
    // Nor is a bank that import, the Hindsight API and a Hindsight server refuse: a control
    // character, past 192 bytes, or past 127 when a project's name follows it.
    let errors = load::parse("[memory]\nbank_id = \"a\\u001fb\"\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("memory.bank_id", Some(2)));
    let long = "b".repeat(150);
    assert!(load::parse(&format!("[memory]\nscoping = \"global\"\nbank_id = \"{long}\"\n"), None).is_ok());
    let errors =
        load::parse(&format!("[memory]\nscoping = \"per-project\"\nbank_id = \"{long}\"\n"), None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("memory.bank_id", Some(3)));
    assert!(errors[0].message.contains("at most 127"), "{}", errors[0].message);
    let errors = load::parse(&format!("[memory]\nscoping = \"global\"\nbank_id = \"{}\"\n", "b".repeat(193)), None);
    assert_eq!(errors.unwrap_err()[0].key, "memory.bank_id", "past a Hindsight server's 192 bytes");
    let errors = load::parse(&format!("[memory]\nbank_id_prefix = \"{}\"\n", "p".repeat(200)), None).unwrap_err();
    assert_eq!(errors[0].key, "memory.bank_id_prefix");
}

#[test]
fn a_bank_id_holding_private_text_is_refused_without_repeating_it() {
    let file = "[memory]\nbank_id = \"team<private>hunter2</private>\"\nbank_id_prefix = \"p<PRIVATE reason='x'>\"\n";
    let errors = load::parse(file, None).unwrap_err();
    let found: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (e.key.as_str(), e.line)).collect();
    assert_eq!(found, [("memory.bank_id", Some(2)), ("memory.bank_id_prefix", Some(3))]);
    for e in &errors {
        assert!(e.message.contains("<private>") && !e.message.contains("hunter2"), "{}", e.message);
    }
    // From the environment (an alias too) it is warned about and ignored, as any bad override.
    let dir = tempfile::tempdir().unwrap();
    let loaded = load(&dir.path().join("none.toml"), &env_of(&[("HINDSIGHT_BANK_ID", "x<private>hunter2")])).unwrap();
    assert_eq!(loaded.settings.memory.bank_id, Settings::default().memory.bank_id);
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(!loaded.warnings[0].contains("hunter2"), "{}", loaded.warnings[0]);
    // Nor is a URL that may carry a password repeated.
    let loaded = load(&dir.path().join("none.toml"), &env_of(&[("HINDSIGHT_API_URL", "ftp://me:hunter2@h")])).unwrap();
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(
        loaded.warnings[0].contains("HINDSIGHT_API_URL") && !loaded.warnings[0].contains("hunter2"),
        "{:?}",
        loaded.warnings
    );
}

/// A value of any key refused for another reason (not one of the choices, not a number, not a
/// duration) is not repeated when it holds `<private>` text: the message goes to the log, the
/// notices and a reload's answer. It was (`found "<private>…</private>"`).
#[test]
fn a_refused_value_holding_private_text_is_not_repeated() {
    let file = "[recall]\nbudget = \"<private>SECRET-1</private>\"\nmax_tokens = \"<private>SECRET-2\"\n\
                [queue]\nflush_interval = \"<private>SECRET-3</private>\"\nbatch_size = \"x\"\n";
    let errors = load::parse(file, None).unwrap_err();
    assert_eq!(errors.len(), 4, "{errors:?}");
    for e in &errors {
        assert!(!e.message.contains("SECRET"), "{e}");
    }
    let dir = tempfile::tempdir().unwrap();
    for (name, value) in [
        ("MNEME_RECALL__BUDGET", "<private>SECRET-4</private>"),
        ("MNEME_RECALL__MAX_TOKENS", "<private>SECRET-5"),
        ("MNEME_QUEUE__FLUSH_INTERVAL", "5 <private>SECRET-6</private>"),
        ("MNEME_RECALL__AUTO", "<private>SECRET-7</private>"),
        ("MNEME_STORAGE__DIR", "$UNSET_VARIABLE/<private>SECRET-8</private>"),
        ("MNEME_STORAGE__DIR", "${<private>SECRET-9</private>"),
    ] {
        let loaded = load(&dir.path().join("none.toml"), &env_of(&[(name, value)])).unwrap();
        assert_eq!(loaded.warnings.len(), 1, "{name}: {:?}", loaded.warnings);
        assert!(!loaded.warnings[0].contains("SECRET"), "{}", loaded.warnings[0]);
    }
}

#[test]
fn a_thesaurus_file_is_read_and_checked_with_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("words.txt"), "# ours\nk8s kubernetes cluster\nshop > orchard\n").unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[local]\nthesaurus_file = \"words.txt\"\n").unwrap();
    let loaded = load::load(&config, &env_of(&[])).unwrap().settings;
    let file = loaded.local.thesaurus_file.clone().unwrap();
    assert_eq!(file.path, dir.path().join("words.txt"), "relative to the config file");
    assert!(loaded.local.thesaurus);
    assert!(!loaded.local.thesaurus().is_empty());
    // Without the built-in list only the file's lines count; with neither, none.
    std::fs::write(&config, "[local]\nthesaurus = false\n").unwrap();
    assert!(load::load(&config, &env_of(&[])).unwrap().settings.local.thesaurus().is_empty());
    assert!(!Settings::default().local.thesaurus().is_empty(), "the built-in list is the default");

    // A bad line names the config's key and line, the file and the file's line.
    std::fs::write(dir.path().join("words.txt"), "k8s kubernetes\nci/cd pipeline\n").unwrap();
    std::fs::write(&config, "[local]\nembedder = \"off\"\nthesaurus_file = \"words.txt\"\n").unwrap();
    let errors = load::load(&config, &env_of(&[])).unwrap_err().errors;
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("local.thesaurus_file", Some(3)));
    let words = dir.path().join("words.txt").display().to_string();
    assert!(
        errors[0].message.starts_with(&format!("{words}: line 2: \"ci/cd\" is not one word")),
        "{}",
        errors[0].message
    );
    // A missing file names its path.
    std::fs::write(&config, "[local]\nthesaurus_file = \"nowhere.txt\"\n").unwrap();
    let errors = load::load(&config, &env_of(&[])).unwrap_err().errors;
    assert!(errors[0].message.starts_with("cannot read "), "{}", errors[0].message);
    assert!(errors[0].message.contains("nowhere.txt"), "{}", errors[0].message);
    // A FIFO is not read (it would wait for a writer, and the daemon with it), nor is a device.
    let fifo = dir.path().join("words.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for (name, shown) in [(fifo.display().to_string(), "words.fifo"), ("/dev/zero".to_owned(), "/dev/zero")] {
        std::fs::write(&config, format!("[local]\nthesaurus_file = \"{name}\"\n")).unwrap();
        let errors = load::load(&config, &env_of(&[])).unwrap_err().errors;
        assert_eq!(errors[0].key, "local.thesaurus_file");
        assert!(
            errors[0].message.contains("it is not a regular file") && errors[0].message.contains(shown),
            "{}",
            errors[0].message
        );
    }
}

#[test]
fn an_embedding_url_with_a_query_is_refused_without_repeating_it() {
    let errors = load::parse("[local]\nembedding_url = \"https://gw.example/v1?key=S3CRET\"\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("local.embedding_url", Some(2)));
    assert!(!errors[0].to_string().contains("S3CRET"), "{}", errors[0]);
    assert!(load::parse("[local]\nembedding_url = \"http://127.0.0.1:11434/v1\"\n", None).is_ok());
    // Set, and refused: its own error, not also "not set".
    let text = "[local]\nembedder = \"openai\"\nembedding_url = \"ftp://127.0.0.1/v1\"\nembedding_model = \"m\"\n";
    let errors = load::parse(text, None).unwrap_err();
    let found: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (e.key.as_str(), e.line)).collect();
    assert_eq!(found, [("local.embedding_url", Some(3))], "{errors:?}");
    // Not set at all (its section is): said, on the embedder's line.
    let errors = load::parse("[local]\nembedder = \"openai\"\nembedding_model = \"m\"\n", None).unwrap_err();
    let found: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (e.key.as_str(), e.line)).collect();
    assert_eq!(found, [("local.embedder", Some(2))], "{errors:?}");
}

#[test]
fn max_connections_is_bounded_where_the_daemon_can_honour_it() {
    // tokio's semaphore panics above usize::MAX >> 3 permits: after the daemon announced itself.
    let errors = load::parse("[server]\nmax_connections = 9223372036854775807\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("server.max_connections", Some(2)));
    assert!(errors[0].message.contains("at most 1000000"), "{}", errors[0].message);
    assert!(load::parse("[server]\nmax_connections = 1000000\n", None).is_ok());
}

#[test]
fn a_value_toml_cannot_read_names_its_key() {
    let errors =
        load::parse("[queue]\nflush_interval = \"1s\"\nbatch_size = 99999999999999999999999\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("queue.batch_size", Some(3)), "{errors:?}");
    assert!(errors[0].to_string().starts_with("line 3: queue.batch_size: "), "{}", errors[0]);
}

#[test]
fn an_override_that_names_no_key_is_warned_about() {
    let names = ["MNEME_QUEUE__NOPE", "MNEME_QUEUE__BATCH_SIZE", "MNEME_LOG", "MNEME_CONFIG", "PATH", "MNEME_X__Y"];
    let warnings = unknown_env_keys(names.iter().map(|n| n.to_string()));
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].starts_with("ignoring MNEME_QUEUE__NOPE: no config key"), "{warnings:?}");
    assert!(warnings[1].starts_with("ignoring MNEME_X__Y"), "{warnings:?}");
}

#[test]
fn the_recall_budget_is_bounded_as_search_bounds_it() {
    let errors = load::parse("[recall]\nmax_tokens = 99999999999\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("recall.max_tokens", Some(2)));
    assert!(errors[0].message.contains("at most 100000"), "{}", errors[0].message);
    assert_eq!(load::parse("[recall]\nmax_tokens = 100000\n", None).unwrap().recall.max_tokens, 100_000);
}

#[test]
fn a_section_given_a_value_and_a_broken_file_are_one_line_each() {
    let errors = load::parse("[queue]\nbatch_size = 2\nmemory = 3\n", None).unwrap_err();
    assert!(errors.iter().all(|e| !e.message.contains('\n')), "{errors:?}");
    let errors = load::parse("memory = 3\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("memory", Some(1)), "{errors:?}");
    let errors = load::parse("[queue]\nbatch_size = 2\n[queue]\nbatch_size = 3\n", None).unwrap_err();
    assert!(!errors[0].to_string().contains('\n'), "{}", errors[0]);
}

/// A config named by a bare file name is made absolute, so its folder can be watched.
#[test]
fn a_relative_config_path_is_made_absolute() {
    let p = super::paths::config_path(Some(std::path::Path::new("c.toml")));
    assert!(p.is_absolute(), "{}", p.display());
    assert_eq!(p, std::env::current_dir().unwrap().join("c.toml"));
    assert!(p.parent().is_some_and(|d| d.is_dir()), "{}", p.display());
}

/// A syntax error outside `[server]` and `[storage]` (an edit in progress) still lets a client
/// find the daemon, with the problem beside; one inside `[server]` leaves `[storage]` (whose
/// pidfile gives the daemon's address), else the defaults (review64 #6).
#[test]
fn a_client_reads_its_sections_past_a_syntax_error_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:7777\"\n\n[recall]\ntimeout = \"2s\nmax_tokens = 10\n")
        .unwrap();
    let (loaded, problem) = load_for_client(&path).expect("the daemon's address is readable");
    assert_eq!(loaded.settings.server.listen.port(), 7777);
    assert!(problem.is_some_and(|p| p.to_string().contains("line 5")));
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:7777\n[recall]\n").unwrap();
    let (loaded, problem) = load_for_client(&path).expect("the defaults");
    assert_eq!(loaded.settings.server.listen, crate::config::Settings::default().server.listen);
    assert!(problem.is_some_and(|p| p.to_string().contains("line 2")));
    let data = dir.path().join("data");
    let text = format!("[server]\nmax_conections = 100\n\n[storage]\ndir = \"{}\"\n", data.display());
    std::fs::write(&path, text).unwrap();
    let (loaded, problem) = load_for_client(&path).expect("its [storage]");
    assert_eq!(loaded.settings.storage.dir, data);
    assert!(problem.is_some_and(|p| p.to_string().contains("max_conections")));
    assert_eq!(loaded.going_on_with(), "its [storage] alone (else the defaults and the environment)");
    assert!(loaded.storage_read());
    // A problem in [storage] itself: [server] alone, said so (review69 #3: the daemon was looked
    // for at the default address, and said not to run).
    let text = format!("[server]\nlisten = \"127.0.0.1:7777\"\n\n[storage]\ndri = \"{}\"\n", data.display());
    std::fs::write(&path, text).unwrap();
    let (loaded, problem) = load_for_client(&path).expect("its [server]");
    assert_eq!(loaded.settings.server.listen.port(), 7777);
    assert!(problem.is_some_and(|p| p.to_string().contains("storage.dri")));
    assert_eq!(loaded.going_on_with(), "its [server] alone (else the defaults and the environment)");
    assert!(!loaded.storage_read());
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:7777\"\n[recall]\ntypo = 1\n").unwrap();
    let (loaded, _) = load_for_client(&path).expect("its sections");
    assert_eq!(loaded.going_on_with(), "its [server] and [storage] (else the defaults and the environment)");
    // A path that cannot be read at all: the defaults, with the problem beside.
    let folder = dir.path().join("folder.toml");
    std::fs::create_dir(&folder).unwrap();
    let (loaded, problem) = load_for_client(&folder).expect("the defaults");
    assert_eq!(loaded.settings.server.listen, crate::config::Settings::default().server.listen);
    assert!(problem.is_some_and(|p| p.to_string().contains("not a regular file")));
    assert_eq!(loaded.going_on_with(), "the defaults and the environment");
}

/// Values the daemon could not use are refused naming their key and line: a duration that
/// overflowed the queue's clock (it panicked), a count past what the setting holds (truncated to
/// 0), a URL the backend cannot parse (found only when the daemon started), and private text in
/// what is stored or sent as it is.
#[test]
fn values_the_daemon_cannot_use_are_refused_with_key_and_line() {
    let text = "[queue]\nflush_interval = \"500000000000years\"\nmax_attempts = 4294967296\n\
                [hindsight]\napi_url = \"http://[::1\"\nburst = 4294967296\nbank_mission = \"a <private>hunter2</private>\"\n\
                [retain]\ncontext = \"team <private>hunter2</private>\"\noverlap_turns = 9223372036854775807\n\
                [local]\nembedding_url = \"http://u:hunter2@host:99999/v1\"\n";
    let errors = load::parse(text, None).unwrap_err();
    let got: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (e.key.as_str(), e.line)).collect();
    assert_eq!(
        got,
        vec![
            ("queue.flush_interval", Some(2)),
            ("queue.max_attempts", Some(3)),
            ("hindsight.api_url", Some(5)),
            ("hindsight.burst", Some(6)),
            ("hindsight.bank_mission", Some(7)),
            ("retain.context", Some(9)),
            ("retain.overlap_turns", Some(10)),
            ("local.embedding_url", Some(12)),
        ],
        "{errors:?}"
    );
    assert!(errors.iter().all(|e| !e.message.contains("hunter2")), "{errors:?}");
    let ok = "[queue]\nflush_interval = \"365days\"\nmax_attempts = 4294967295\n[hindsight]\napi_url = \"http://[::1]:8888\"\n";
    let parsed = load::parse(ok, None).unwrap();
    assert_eq!((parsed.queue.max_attempts, parsed.queue.flush_interval.as_secs()), (u32::MAX, 365 * 24 * 3600));
}

/// A token a header cannot carry is refused by `config check` with its line (only opening the
/// backend found it, naming no line), and an array of tables `[[memory]]` has its line too.
#[test]
fn a_token_with_a_line_break_and_an_array_of_tables_name_their_lines() {
    let errors = load::parse("[hindsight]\napi_token = \"hunter2\\nx\"\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("hindsight.api_token", Some(2)), "{errors:?}");
    assert!(!errors[0].message.contains("hunter2"), "{errors:?}");
    let errors = load::parse("# memories\n[[memory]]\nbackend = \"local\"\n", None).unwrap_err();
    assert_eq!(errors[0].line, Some(2), "{errors:?}");
}

#[test]
fn a_wildcard_bind_is_reached_on_loopback() {
    let addr = |s: &str| super::local_addr(s.parse().unwrap()).to_string();
    assert_eq!(addr("0.0.0.0:6366"), "127.0.0.1:6366");
    assert_eq!(addr("[::]:6366"), "[::1]:6366");
    assert_eq!(addr("127.0.0.1:7000"), "127.0.0.1:7000");
    assert_eq!(addr("[::1]:7000"), "[::1]:7000", "an IPv6 host in brackets, as a URL writes it");
}

/// "M" is months to the duration parser: "5M" for five minutes is refused as ambiguous, naming
/// its key and line, while "5m", "5min", "2months" and "1h 30m" are read as written.
#[test]
fn a_capital_m_duration_is_refused_as_ambiguous() {
    for bad in ["5M", "5 M", "1h 5M"] {
        let errors = load::parse(&format!("[queue]\nflush_interval = \"{bad}\"\n"), None).unwrap_err();
        assert_eq!((errors[0].key.as_str(), errors[0].line), ("queue.flush_interval", Some(2)), "{bad}");
        assert!(errors[0].message.contains("ambiguous") && errors[0].message.contains("min"), "{errors:?}");
    }
    for (good, secs) in [("5m", 300), ("5min", 300), ("2months", 2 * 2_630_016), ("1h 30m", 5400), ("100ms", 0)] {
        let parsed = load::parse(&format!("[queue]\nflush_interval = \"{good}\"\n"), None).unwrap();
        assert_eq!(parsed.queue.flush_interval.as_secs(), secs, "{good}");
    }
}

/// A path's `$NAME` and `${NAME}` are read from the environment, and one that is not set is an
/// error naming the variable, the key and the line (kept as written, `$HOME/.mneme` made a
/// folder called `$HOME` beside the config).
#[test]
fn a_paths_variables_are_expanded_and_an_unset_one_is_refused() {
    use super::paths::resolve_with;
    use std::os::unix::ffi::OsStringExt;
    let env = |name: &str| match name {
        "DATA" => Some("/srv/data".into()),
        "EMPTY" => Some(std::ffi::OsString::new()),
        // A Latin-1 folder name: taken as it is (it was "not set").
        "LATIN" => Some(std::ffi::OsString::from_vec(b"/srv/caf\xe9".to_vec())),
        _ => None,
    };
    let base = std::path::Path::new("/etc/mneme");
    let ok = |p: &str| resolve_with(p, Some(base), &env).unwrap().display().to_string();
    assert_eq!(ok("$DATA/mneme"), "/srv/data/mneme");
    assert_eq!(ok("${DATA}_x/y"), "/srv/data_x/y");
    assert_eq!(ok("cost$5/a$"), "/etc/mneme/cost$5/a$", "a $ before no name stays");
    use std::os::unix::ffi::OsStrExt;
    let latin = resolve_with("$LATIN/mneme", Some(base), &env).unwrap();
    assert_eq!(latin.as_os_str().as_bytes(), b"/srv/caf\xe9/mneme");
    for bad in ["$NOPE/x", "${NOPE}", "$EMPTY/x", "${DATA"] {
        let e = resolve_with(bad, Some(base), &env).unwrap_err();
        assert!(e.contains("NOPE") || e.contains("EMPTY") || e.contains("${"), "{bad}: {e}");
    }
    let errors = load::parse("[storage]\n\ndir = \"$MNEME_TEST_SURELY_UNSET_VAR/m\"\n", None).unwrap_err();
    assert_eq!((errors[0].key.as_str(), errors[0].line), ("storage.dir", Some(3)));
    assert!(errors[0].message.contains("$MNEME_TEST_SURELY_UNSET_VAR"), "{errors:?}");
}

/// `embedding_model = ""` with the `openai` embedder is refused on its line (it was blamed on
/// "the environment: " with no variable and no line), and an `embedding_dim` past what the
/// client takes is refused (nothing could ever be embedded with it).
#[test]
fn a_blank_embedding_model_and_an_impossible_dim_are_refused_on_their_lines() {
    let text = "[local]\nembedder = \"openai\"\nembedding_url = \"http://127.0.0.1:11434/v1\"\nembedding_model = \"\"\nembedding_dim = 100000\n";
    let errors = load::parse(text, None).unwrap_err();
    let found: Vec<(String, Option<usize>)> = errors.iter().map(|e| (e.key.clone(), e.line)).collect();
    assert_eq!(
        found,
        vec![("local.embedding_model".to_owned(), Some(4)), ("local.embedding_dim".to_owned(), Some(5))],
        "{errors:?}"
    );
    assert!(errors[0].message.contains("is empty") && !errors[0].message.contains("environment"), "{errors:?}");
    // A model of the wrong type has its own error, not a second one.
    let errors = load::parse(&text.replace("\"\"\nembedding_dim = 100000", "3"), None).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].key, "local.embedding_model");
}

/// A config file that is not UTF-8 names the line and column of its first byte that is not, and
/// is read as unreadable (the commands go on with the defaults): "stream did not contain valid
/// UTF-8" named neither (review106 #4).
#[test]
fn a_file_not_utf8_names_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, b"[server]\nlisten = \"127.0.0.1:7000\"\n[retain]\ncontext = \"caf\xe9\"\n").unwrap();
    let errors = load::load(&config, &env_of(&[])).unwrap_err();
    assert!(errors.is_unreadable());
    assert_eq!(
        errors.errors[0].to_string(),
        "line 4: cannot read: the file is not UTF-8 text (the byte 0xE9 at column 15); save it as UTF-8"
    );
}
