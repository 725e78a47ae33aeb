//! Recall through the Hindsight API: the request's filters as the server reads them, and the
//! answer's results shaped as its are (one result a memory).

use mneme_core::{Recalled, TagsMatch};

use super::wire::{RecallResult, Scores, TagGroup};

/// The tag filter sent to the backend: `tags` as given (trimmed, as stored tags are), or when
/// the request gives neither `tags` nor `tags_match`, the first leaf of `tag_groups` (the
/// groups are AND-ed: every memory that passes them passes it). The groups are applied to the
/// results after ([`passes`]).
pub fn backend_filter(
    tags: Option<Vec<String>>,
    tags_match: Option<TagsMatch>,
    groups: &[TagGroup],
) -> (Vec<String>, TagsMatch) {
    if tags.is_none() && tags_match.is_none() {
        let leaf = groups.iter().find_map(|g| match g {
            TagGroup::Leaf { tags, mode, .. } => Some((trimmed(tags), mode.unwrap_or(TagsMatch::AnyStrict))),
            _ => None,
        });
        if let Some(leaf) = leaf {
            return leaf;
        }
    }
    (trimmed(&tags.unwrap_or_default()), tags_match.unwrap_or_default())
}

/// Refuses `tags` with `tag_groups`, as the server does: they are mutually exclusive.
pub fn one_filter(tags: Option<&[String]>, groups: &[TagGroup]) -> Result<(), String> {
    match tags.is_some_and(|t| !t.is_empty()) && !groups.is_empty() {
        true => Err("'tags' and 'tag_groups' are mutually exclusive".into()),
        false => Ok(()),
    }
}

/// Every tag the groups name (to refuse private ones before anything is sent).
pub fn named_tags(groups: &[TagGroup]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<&TagGroup> = groups.iter().collect();
    while let Some(g) = stack.pop() {
        match g {
            TagGroup::Leaf { tags, .. } => out.extend(tags.iter().cloned()),
            TagGroup::And { and } => stack.extend(and),
            TagGroup::Or { or } => stack.extend(or),
            TagGroup::Not { not } => stack.push(not),
        }
    }
    out
}

/// Whether a memory tagged `tags` passes every group (the groups of a request are AND-ed).
pub fn passes(groups: &[TagGroup], tags: &[String]) -> bool {
    groups.iter().all(|g| group_passes(g, tags))
}

fn group_passes(group: &TagGroup, tags: &[String]) -> bool {
    match group {
        TagGroup::Leaf { tags: asked, mode, .. } => {
            tags_match(tags, &trimmed(asked), mode.unwrap_or(TagsMatch::AnyStrict))
        }
        TagGroup::And { and } => and.iter().all(|g| group_passes(g, tags)),
        TagGroup::Or { or } => or.iter().any(|g| group_passes(g, tags)),
        TagGroup::Not { not } => !group_passes(not, tags),
    }
}

/// Whether a memory tagged `memory` matches the filter `asked` in `mode` (SPEC §3: `any` and
/// `all` let untagged memories through, the strict modes do not, `exact` is the same set).
pub fn tags_match(memory: &[String], asked: &[String], mode: TagsMatch) -> bool {
    let has = |t: &String| memory.contains(t);
    match mode {
        TagsMatch::Any => memory.is_empty() || asked.is_empty() || asked.iter().any(has),
        TagsMatch::All => memory.is_empty() || asked.iter().all(has),
        TagsMatch::AnyStrict => !asked.is_empty() && asked.iter().any(has),
        TagsMatch::AllStrict => !memory.is_empty() && asked.iter().all(has),
        TagsMatch::Exact => {
            let set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
            set(memory) == set(asked)
        }
    }
}

/// Filter tags as tags are stored: trimmed, the empty ones dropped (a tag `" a "` is stored as
/// `"a"`, and asked for as it was sent found nothing).
fn trimmed(tags: &[String]) -> Vec<String> {
    tags.iter().map(|t| t.trim()).filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

/// The backend's results as the server gives them: one a memory. mneme recalls passages, and
/// the two passages of one long memory it may show came back as two results with one id (a
/// client keying results by id lost one); they are one result, its text the two joined.
/// mneme's own stamp of the client session (`hindsight:…`, given to items that name none) is
/// not metadata the client sent, and is left out. Within `max_units` of text (quarter tokens,
/// see [`mneme_core::text::budget_units`]): the backend kept its passages within the budget, and
/// the separator of two joined passages went over it; a passage that no longer fits is left
/// out, for shorter ones after it.
pub fn results(found: Vec<Recalled>, stable_id: impl Fn(&str, &str) -> String, max_units: usize) -> Vec<RecallResult> {
    const JOIN: &str = "\n…\n";
    let mut out: Vec<RecallResult> = Vec::with_capacity(found.len());
    let mut room = max_units;
    for r in found {
        let id = r.id.clone().unwrap_or_else(|| stable_id(&r.text, &r.mentioned_at));
        let units = mneme_core::text::budget_units(&r.text);
        if let Some(first) = out.iter_mut().find(|o| o.id == id) {
            let joined = units + mneme_core::text::budget_units(JOIN);
            if joined <= room {
                room -= joined;
                first.text = format!("{}{JOIN}{}", first.text, r.text);
            }
            continue;
        }
        if units > room {
            continue;
        }
        room -= units;
        let mut metadata = r.metadata;
        if metadata.get("session_id").is_some_and(|s| s.starts_with("hindsight:")) {
            metadata.remove("session_id");
        }
        out.push(RecallResult {
            id,
            text: r.text,
            kind: (!r.kind.is_empty()).then_some(r.kind),
            entities: None,
            context: r.context,
            occurred_start: None,
            occurred_end: None,
            mentioned_at: (!r.mentioned_at.is_empty()).then_some(r.mentioned_at),
            document_id: r.document_id,
            metadata: Some(metadata),
            chunk_id: None,
            tags: Some(r.tags),
            source_fact_ids: None,
            scores: Some(Scores { final_score: r.score, reranker: None, semantic: None, keyword: None }),
            attachments: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(tags: &[&str], mode: TagsMatch) -> TagGroup {
        TagGroup::Leaf { tags: tags.iter().map(|t| t.to_string()).collect(), mode: Some(mode), resolve: None }
    }

    /// Two passages of one memory are one result, joined by a separator that the backend's
    /// budget did not count: what no longer fits is left out, and only that.
    #[test]
    fn joined_passages_stay_within_the_budget() {
        let passage = |id: &str, text: &str| Recalled {
            text: text.into(),
            kind: "world".into(),
            mentioned_at: "2026-01-01T00:00:00Z".into(),
            tags: Vec::new(),
            score: None,
            id: Some(id.into()),
            document_id: None,
            context: None,
            metadata: Default::default(),
        };
        let found =
            || vec![passage("m", &"a".repeat(40)), passage("n", &"b".repeat(30)), passage("m", &"c".repeat(30))];
        let texts = |max: usize| -> Vec<String> {
            results(found(), |_, _| String::new(), max).into_iter().map(|r| r.text).collect()
        };
        let joined = format!("{}\n…\n{}", "a".repeat(40), "c".repeat(30));
        assert_eq!(texts(103), [joined.as_str(), &"b".repeat(30)]);
        // The join no longer fits: the first passage stays, alone, and so does the other memory.
        assert_eq!(texts(102), ["a".repeat(40), "b".repeat(30)]);
        // One that does not fit leaves room for shorter ones after it.
        let found = vec![passage("m", &"a".repeat(40)), passage("n", &"b".repeat(80)), passage("o", &"c".repeat(10))];
        let kept: Vec<String> = results(found, |_, _| String::new(), 60).into_iter().map(|r| r.text).collect();
        assert_eq!(kept, ["a".repeat(40), "c".repeat(10)]);
    }

    #[test]
    fn groups_are_anded_and_compound() {
        let alpha = vec!["project:alpha".to_owned()];
        let beta = vec!["project:beta".to_owned()];
        let none: Vec<String> = vec![];
        let only_alpha = [leaf(&["project:alpha"], TagsMatch::AllStrict)];
        assert!(passes(&only_alpha, &alpha) && !passes(&only_alpha, &beta) && !passes(&only_alpha, &none));
        let not_beta = [TagGroup::Not { not: Box::new(leaf(&["project:beta"], TagsMatch::AnyStrict)) }];
        assert!(passes(&not_beta, &alpha) && !passes(&not_beta, &beta) && passes(&not_beta, &none));
        let either =
            [TagGroup::Or { or: vec![leaf(&["project:alpha"], TagsMatch::AnyStrict), leaf(&[], TagsMatch::Exact)] }];
        assert!(passes(&either, &alpha) && passes(&either, &none) && !passes(&either, &beta));
        let both = [leaf(&["project:alpha"], TagsMatch::Any), not_beta[0].clone()];
        assert!(passes(&both, &alpha) && passes(&both, &none) && !passes(&both, &beta));
        // The first leaf goes to the backend when the request names no tags of its own.
        let (tags, mode) = backend_filter(None, None, &only_alpha);
        assert_eq!((tags, mode), (alpha.clone(), TagsMatch::AllStrict));
        let (tags, mode) = backend_filter(Some(vec![" project:beta ".into(), " ".into()]), None, &only_alpha);
        assert_eq!((tags, mode), (beta, TagsMatch::Any));
    }
}
