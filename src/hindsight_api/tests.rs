//! Unit tests of the Hindsight-compatible API.

use super::*;

#[test]
fn a_bank_named_as_a_step_in_a_path_is_refused() {
    for bank in [".", "..", "a/b", "", "  "] {
        assert!(matches!(check_bank(bank), Err(CompatError::Invalid(_))), "{bank:?}");
    }
    for bank in ["...", ".a", "work"] {
        assert!(check_bank(bank).is_ok(), "{bank:?}");
    }
}

#[test]
fn uuids_are_read_as_python_reads_them() {
    let canonical = Some("8f14e45f-ceea-467a-9575-4e1a8b1c2d3e".to_owned());
    for id in [
        "8f14e45f-ceea-467a-9575-4e1a8b1c2d3e",
        "8F14E45F-CEEA-467A-9575-4E1A8B1C2D3E",
        "{8f14e45f-ceea-467a-9575-4e1a8b1c2d3e}",
        "8f14e45fceea467a95754e1a8b1c2d3e",
        "urn:uuid:8f14e45f-ceea-467a-9575-4e1a8b1c2d3e",
    ] {
        assert_eq!(canonical_uuid(id), canonical, "{id}");
    }
    for id in [
        "",
        "nope",
        "8f14e45f-ceea-467a-9575-4e1a8b1c2d3",
        "8f14e45f-ceea-467a-9575-4e1a8b1c2d3g",
        "ü8f14e45fceea467a95754e1a8b1c2d3",
    ] {
        assert_eq!(canonical_uuid(id), None, "{id}");
    }
}

#[test]
fn bank_ids_are_checked() {
    assert!(check_bank("omp").is_ok());
    assert!(check_bank("omp-project").is_ok());
    for bad in ["", "  ", "a/b", "a\nb", "a<private>b", "a<PRIVATE x>b</private>"] {
        assert!(check_bank(bad).is_err(), "{bad:?}");
    }
    assert!(check_bank(&"x".repeat(201)).is_err());
}

#[test]
fn stable_ids_are_stable_and_distinct() {
    assert_eq!(stable_id("a", "t"), stable_id("a", "t"));
    assert_ne!(stable_id("a", "t"), stable_id("a", "u"));
    assert_ne!(stable_id("ab", ""), stable_id("a", "b"));
}
