//! Row decoding and the SQL filter fragments the store's queries share, and the tag-list codec.

/// Tag list separator (ASCII unit separator): cannot appear in a tag a user types.
const SEP: char = '\u{1f}';

use mneme_core::{Recalled, StoredMemory, TagsMatch};

/// A result from the columns content, kind, created_at, tags, id, document_id, context, metadata
/// starting at `first`.
pub(crate) fn recalled(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Recalled> {
    Ok(Recalled {
        text: row.get(first)?,
        kind: row.get(first + 1)?,
        mentioned_at: row.get(first + 2)?,
        tags: decode_tags(&row.get::<_, String>(first + 3)?),
        score: None,
        id: Some(row.get(first + 4)?),
        document_id: row.get(first + 5)?,
        context: row.get(first + 6)?,
        metadata: serde_json::from_str(&row.get::<_, String>(first + 7)?).unwrap_or_default(),
    })
}

pub(crate) fn push_type_filter(sql: &mut String, args: &mut Vec<String>, types: &[&str]) {
    if types.is_empty() {
        return;
    }
    let start = args.len() + 1;
    let marks: Vec<String> = (0..types.len()).map(|i| format!("?{}", start + i)).collect();
    sql.push_str(&format!(" AND m.kind IN ({})", marks.join(",")));
    args.extend(types.iter().map(|t| (*t).to_owned()));
}

/// Appends Hindsight's tag-match semantics as SQL over the encoded `tags` column.
pub(crate) fn push_tag_filter(sql: &mut String, args: &mut Vec<String>, tags: &[String], mode: TagsMatch) {
    // Exact: the set of tags, compared as its members and its size (a row's tags are distinct,
    // in no set order), and no tags at all when none are asked for.
    let tags: Vec<&String> = match mode {
        TagsMatch::Exact => tags.iter().collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
        _ => tags.iter().collect(),
    };
    if tags.is_empty() {
        if mode == TagsMatch::Exact {
            sql.push_str(" AND m.tags = ''");
        }
        return;
    }
    let start = args.len() + 1;
    let tests: Vec<String> = (0..tags.len()).map(|i| format!("instr(m.tags, ?{}) > 0", start + i)).collect();
    let joined = match mode {
        TagsMatch::Any | TagsMatch::AnyStrict => tests.join(" OR "),
        TagsMatch::All | TagsMatch::AllStrict | TagsMatch::Exact => tests.join(" AND "),
    };
    match mode {
        TagsMatch::Any | TagsMatch::All => sql.push_str(&format!(" AND (m.tags = '' OR ({joined}))")),
        TagsMatch::AnyStrict | TagsMatch::AllStrict => sql.push_str(&format!(" AND ({joined})")),
        TagsMatch::Exact => sql.push_str(&format!(
            " AND ({joined}) AND length(m.tags) - length(replace(m.tags, char(31), '')) = {}",
            tags.len() + 1
        )),
    }
    args.extend(tags.iter().map(|t| format!("{SEP}{}{SEP}", stored_tag(t))));
}

/// Whether a memory's encoded `tags` pass the filter: [`push_tag_filter`]'s SQL, in Rust (the
/// vector index filters by it; a test holds the two to the same answers).
pub(crate) fn tags_pass(encoded: &str, tags: &[String], mode: TagsMatch) -> bool {
    let tags: Vec<&String> = match mode {
        TagsMatch::Exact => tags.iter().collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
        _ => tags.iter().collect(),
    };
    if tags.is_empty() {
        return mode != TagsMatch::Exact || encoded.is_empty();
    }
    let has = |t: &&String| encoded.contains(&format!("{SEP}{}{SEP}", stored_tag(t)));
    match mode {
        TagsMatch::Any => encoded.is_empty() || tags.iter().any(has),
        TagsMatch::All => encoded.is_empty() || tags.iter().all(has),
        TagsMatch::AnyStrict => tags.iter().any(has),
        TagsMatch::AllStrict => tags.iter().all(has),
        TagsMatch::Exact => tags.iter().all(has) && encoded.matches(SEP).count() == tags.len() + 1,
    }
}

pub(crate) fn encode_tags(tags: &[String]) -> String {
    let mut seen = std::collections::HashSet::with_capacity(tags.len());
    // Distinct: a tag set (exact matching counts them).
    let clean: Vec<std::borrow::Cow<'_, str>> =
        tags.iter().filter(|t| !t.is_empty()).map(|t| stored_tag(t)).filter(|t| seen.insert(t.clone())).collect();
    if clean.is_empty() {
        return String::new();
    }
    format!("{SEP}{}{SEP}", clean.join(&SEP.to_string()))
}

/// A tag as stored: the separator in it replaced (U+FFFD), in the filters as in the rows. A tag
/// holding it was dropped, and a memory whose only tag was its project's (a folder named with
/// it) became untagged: every project's recall saw it.
pub(crate) fn stored_tag(tag: &str) -> std::borrow::Cow<'_, str> {
    match tag.contains(SEP) {
        true => std::borrow::Cow::Owned(tag.replace(SEP, "\u{fffd}")),
        false => std::borrow::Cow::Borrowed(tag),
    }
}

/// A memory from a row of `seq, id, bank, content, context, kind, tags, metadata, document_id,
/// created_at` (the export's columns).
pub(crate) fn stored_memory(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredMemory> {
    let kind: String = r.get(5)?;
    let metadata: String = r.get(7)?;
    Ok(StoredMemory {
        id: r.get(1)?,
        bank: r.get(2)?,
        content: r.get(3)?,
        context: r.get(4)?,
        kind: kind.parse().unwrap_or_default(),
        tags: decode_tags(&r.get::<_, String>(6)?),
        metadata: serde_json::from_str(&metadata).unwrap_or_default(),
        document_id: r.get(8)?,
        created_at: r.get(9)?,
    })
}

pub(crate) fn decode_tags(encoded: &str) -> Vec<String> {
    encoded.split(SEP).filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

/// Whether a memory's stored tags (`encoded`) and a retain's `tags` reach the same recalls, so
/// that the retain may merge its tags into the memory: the same tags but the projects', and a
/// project's on both or on neither (untagged, global, being the case of no tag at all). A
/// project's tag is the only one a clear leaves a shared memory under: merged with a memory of
/// no project (global, or a Hindsight client's `team:red` alone), a project's retain made it
/// that project's, and a clear of the project deleted it.
pub(crate) fn same_reach(encoded: &str, tags: &[String]) -> bool {
    let is_project = |t: &String| t.starts_with(mneme_core::PROJECT_TAG_PREFIX);
    let reach = |tags: Vec<String>| -> (bool, std::collections::BTreeSet<String>) {
        (tags.iter().any(is_project), tags.into_iter().filter(|t| !is_project(t)).collect())
    };
    let given: Vec<String> = tags.iter().map(|t| stored_tag(t).into_owned()).collect();
    reach(decode_tags(encoded)) == reach(given)
}

/// Whether a stored memory's tags (`encoded`) and `tags` name the same projects.
pub(crate) fn same_projects(encoded: &str, tags: &[String]) -> bool {
    let projects = |tags: Vec<String>| -> std::collections::BTreeSet<String> {
        tags.into_iter().filter(|t| t.starts_with(mneme_core::PROJECT_TAG_PREFIX)).collect()
    };
    projects(decode_tags(encoded)) == projects(tags.iter().map(|t| stored_tag(t).into_owned()).collect())
}

pub(crate) fn merge_tags(encoded: &str, more: &[String]) -> String {
    let mut tags = decode_tags(encoded);
    tags.extend(more.iter().cloned());
    encode_tags(&tags) // drops the repeats
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector index's tag filter answers as the SQL one does, for every mode over tag sets
    /// with and without the asked tags (and untagged).
    #[test]
    fn tags_pass_agrees_with_the_sql_filter() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let sets: Vec<Vec<&str>> = vec![
            vec![],
            vec!["a"],
            vec!["b"],
            vec!["a", "b"],
            vec!["b", "a"],
            vec!["a", "b", "c"],
            vec!["ab"],
            vec!["c"],
        ];
        let asks: Vec<Vec<&str>> =
            vec![vec![], vec!["a"], vec!["a", "b"], vec!["b", "a", "a"], vec!["x"], vec!["a", "x"]];
        let modes = [TagsMatch::Any, TagsMatch::All, TagsMatch::AnyStrict, TagsMatch::AllStrict, TagsMatch::Exact];
        let mut checked = 0;
        for set in &sets {
            let encoded = encode_tags(&set.iter().map(|t| t.to_string()).collect::<Vec<_>>());
            for ask in &asks {
                let ask: Vec<String> = ask.iter().map(|t| t.to_string()).collect();
                for mode in modes {
                    let mut sql = "SELECT count(*) FROM (SELECT ?1 AS tags) m WHERE 1".to_owned();
                    let mut args = vec![encoded.clone()];
                    push_tag_filter(&mut sql, &mut args, &ask, mode);
                    let by_sql: i64 =
                        conn.query_row(&sql, rusqlite::params_from_iter(args.iter()), |r| r.get(0)).unwrap();
                    assert_eq!(tags_pass(&encoded, &ask, mode), by_sql == 1, "{set:?} asked {ask:?} {mode:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, sets.len() * asks.len() * modes.len());
    }
}
