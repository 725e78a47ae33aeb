//! Unit tests of the Hindsight backend.

#[test]
fn results_are_held_to_four_characters_a_token() {
    let r = |text: &str| Recalled::of_text(text);
    let long = "x".repeat(7_000);
    let kept = super::within_chars(vec![r(&long), r("short one")], 4);
    assert_eq!(kept.len(), 1);
    assert!(kept[0].text.chars().count() <= 4, "{:?}", kept[0].text);
    let kept = super::within_chars(vec![r("abcdef"), r(&long), r("gh")], 10);
    assert_eq!(kept.iter().map(|k| k.text.as_str()).collect::<Vec<_>>(), ["abcdef", "gh"]);
    // A CJK character is a token, not a quarter of one.
    let kept = super::within_chars(vec![r(&"部署".repeat(100)), r("gh")], 40);
    assert_eq!(kept.len(), 1);
    assert!(mneme_core::text::budget_units(&kept[0].text) <= 40, "{:?}", kept[0].text);
    assert_eq!(kept[0].text.chars().count(), 10, "9 characters and the mark: {:?}", kept[0].text);
}

use super::delivery::import_chunk_id;
use super::*;

/// What another client of the server wrote is shown without its private text, ids and
/// dates too (the server makes its own, but a client may have written any).
#[test]
fn private_text_leaves_every_field_of_a_listed_memory() {
    let m = StoredMemory {
        id: "<private>SECRET-id</private>".into(),
        bank: "work".into(),
        content: "kept <private>SECRET</private>".into(),
        context: Some("<private>SECRET</private>".into()),
        tags: vec!["t<private>SECRET</private>".into()],
        metadata: [("k".to_owned(), "<private>SECRET</private>".to_owned())].into(),
        document_id: Some("<private>SECRET</private>".into()),
        kind: MemoryType::World,
        created_at: "<private>SECRET-date</private>".into(),
    };
    let shown = without_private(m);
    let text = format!("{shown:?}");
    assert!(!text.contains("SECRET"), "{text}");
    assert!(shown.id.starts_with("private-"), "{text}");
    assert_eq!(
        shown.id,
        without_private(StoredMemory { id: "<private>SECRET-id</private>".into(), ..shown.clone() }).id
    );
}

#[test]
fn an_import_chunks_id_is_of_its_bank_and_its_memories_whole() {
    let m = StoredMemory {
        id: "0192f4a1b2c3d4e5f60718293a4b5c6d".into(),
        bank: "work".into(),
        content: "the build uses sccache".into(),
        context: None,
        tags: vec![],
        metadata: Default::default(),
        document_id: None,
        kind: Default::default(),
        created_at: "2026-01-01T00:00:00Z".into(),
    };
    let id = |bank: &str, m: &StoredMemory| operation_id(&import_chunk_id(bank, &[m]));
    assert_eq!(id("work", &m), id("work", &m), "a resend is the same operation");
    assert_ne!(id("work", &m), id("tools", &m), "another bank is another operation");
    let edited = StoredMemory { content: "the build uses ccache".into(), ..m.clone() };
    assert_ne!(id("work", &m), id("work", &edited), "an edited memory is another operation");
    assert_ne!(id("work", &m), operation_id(&m.id));
}

#[test]
fn operation_ids_are_stable_uuids() {
    let a = operation_id("0192f4a1b2c3d4e5f60718293a4b5c6d");
    assert_eq!(a, operation_id("0192f4a1b2c3d4e5f60718293a4b5c6d"));
    assert_eq!(a.len(), 36);
    assert_eq!(&a[14..15], "4");
    assert_ne!(a, operation_id("0192f4a1b2c3d4e5f60718293a4b5c6e"));
    assert_eq!(operation_id("weird id").len(), 36);
}

#[test]
fn the_token_never_shows() {
    let c = HindsightConfig {
        api_token: Some(Secret::new("hunter2-token")),
        debug: true,
        ..HindsightConfig::new("http://127.0.0.1:1")
    };
    let b = HindsightBackend::new(c.clone()).unwrap();
    assert!(!format!("{c:?} {b:?}").contains("hunter2"));
}

#[test]
fn bank_ids_are_path_encoded() {
    let b = HindsightBackend::new(HindsightConfig::new("http://h:1/prefix/")).unwrap();
    assert_eq!(
        b.bank_url("my bank?", &["memories"]).unwrap().as_str(),
        "http://h:1/prefix/v1/default/banks/my%20bank%3F/memories"
    );
    for dot in [".", ".."] {
        assert!(matches!(b.bank_url(dot, &["memories"]), Err(BackendError::Invalid(_))), "{dot}");
        assert!(matches!(b.bank_url("work", &["documents", dot]), Err(BackendError::Invalid(_))), "{dot}");
    }
    assert!(b.bank_url("...", &["documents", ".a"]).is_ok(), "only a whole . or .. is a step");
}
