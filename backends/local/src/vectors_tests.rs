//! Unit tests of the in-memory vector index.

use mneme_embed::vector::normalize;

use super::*;

fn unit(seed: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..16).map(|i| (((i + 1) * (seed + 3) * 7919) % 113) as f32 - 56.0).collect();
    normalize(&mut v);
    v
}

fn add(index: &mut VectorIndex, pid: i64, bank: &str, prev: Option<i64>, v: &[f32]) {
    assert!(index.add(NewVector {
        pid,
        memory_seq: pid,
        bank: bank.into(),
        prev_pid: prev,
        label: Label::default(),
        vector: quantize(v)
    }));
}

#[test]
fn a_bank_loaded_with_its_crowding_is_measured_and_one_without_is_not() {
    let mut index = VectorIndex::new(2);
    let v = |pid: i64, bank: &str, x: f32| NewVector {
        pid,
        memory_seq: pid,
        bank: bank.into(),
        prev_pid: None,
        label: Label::default(),
        vector: quantize(&[x, 1.0 - x]),
    };
    assert!(index.add_loaded(v(1, "whole", 0.1), Some(0.25)));
    assert!(index.add_loaded(v(2, "whole", 0.9), Some(0.5)));
    assert!(index.add_loaded(v(3, "part", 0.1), Some(0.25)));
    assert!(index.add_loaded(v(4, "part", 0.9), None));
    index.loaded();
    let whole = index.bank_of["whole"];
    assert_eq!(index.crowding_of_bank(whole), vec![(1, 0.25), (2, 0.5)]);
    // Not measured: no crowding at all until it is, and due to be measured.
    let part = index.bank_of["part"];
    assert_eq!(index.crowding_of_bank(part), vec![(3, 0.0), (4, 0.0)]);
    assert_eq!(index.unmeasured_banks(), vec![part]);
    // A passage added to the measured bank is measured against its reference as it comes.
    assert!(index.crowding_for("whole", &quantize(&[0.5, 0.5])).is_some());
    assert_eq!(index.crowding_for("part", &quantize(&[0.5, 0.5])), None);
}

#[test]
fn finds_the_nearest_in_the_bank_only() {
    let mut index = VectorIndex::new(16);
    for pid in 0..50 {
        add(&mut index, pid, "a", None, &unit(pid as usize));
    }
    add(&mut index, 100, "b", None, &unit(7));
    let hits = index.search("a", &unit(7), 3, &[1, 100]).unwrap();
    assert_eq!(hits.top[0].0, 7);
    assert!((hits.top[0].2 - 1.0).abs() < 0.02, "{:?}", hits.top[0]);
    assert_eq!(hits.top.len(), 3);
    assert!(hits.of.contains_key(&1) && !hits.of.contains_key(&100), "the other bank's passage is not scored");
    assert!(hits.min <= hits.max);
    assert!(index.search("nobody", &unit(7), 3, &[]).is_none());
    let short = NewVector {
        pid: 5,
        memory_seq: 5,
        bank: "a".into(),
        prev_pid: None,
        label: Label::default(),
        vector: quantize(&[1.0, 0.0]),
    };
    assert!(!index.add(short));
}

/// Runs a neighbourhood job the way the embedding thread does, in chunks of 7 rows.
fn measure(index: &mut VectorIndex) {
    for b in index.unmeasured_banks() {
        let job = index.neighbourhood_job(b).unwrap();
        let mut measured = Vec::new();
        for from in (0..job.len()).step_by(7) {
            job.measure(&index.rows(&job, from, from + 7).unwrap(), &mut measured);
        }
        assert!(index.install(job, measured));
    }
    assert!(index.unmeasured_banks().is_empty());
}

/// A unit vector `cos` away from `axis` (0 or 1) towards a direction of its own (`side` ≥ 2).
fn toward(axis: usize, side: usize, cos: f32) -> Vec<f32> {
    let mut v = vec![0.0; 16];
    v[axis] = cos;
    v[side] = (1.0 - cos * cos).sqrt();
    v
}

#[test]
fn a_crowded_passage_yields_to_one_that_stands_alone() {
    let mut index = VectorIndex::new(16);
    // Passage 1 sits in a crowd: 12 others (ids 10..) close to it and to each other.
    add(&mut index, 1, "a", None, &toward(0, 2, 0.80));
    for pid in 10..22 {
        let mut v = toward(0, 2, 0.80);
        v[3 + (pid as usize % 12)] = 0.25;
        normalize(&mut v);
        add(&mut index, pid, "a", None, &v);
    }
    // Passage 2 is alone, a little less like the question.
    add(&mut index, 2, "a", None, &toward(0, 15, 0.75));
    let q = toward(0, 1, 1.0);
    let before = index.search("a", &q, 3, &[]).unwrap();
    assert_ne!(before.top[0].0, 2, "by plain cosine the crowd wins: {:?}", before.top);
    assert_eq!(index.unmeasured_banks(), vec![0]);
    measure(&mut index);
    let after = index.search("a", &q, 3, &[]).unwrap();
    assert_eq!(after.top[0].0, 2, "{:?}", after.top);
    assert!((after.top[0].2 - 0.75).abs() < 0.02, "the plain cosine is kept for the floor: {:?}", after.top[0]);

    // A passage added after the measure is measured as it is added: a copy of the crowd's
    // centre ranks below the lone passage too.
    let centre = quantize(&toward(0, 2, 0.80));
    let measured = index.crowding_for("a", &centre).unwrap();
    assert!(measured > 0.9, "{measured}");
    assert_eq!(index.crowding_for("nobody", &centre), None);
    let v = |pid| NewVector {
        pid,
        memory_seq: pid,
        bank: "a".into(),
        prev_pid: None,
        label: Label::default(),
        vector: centre.clone(),
    };
    // Measured on a copy of the reference, taken and let go: the index may change meanwhile
    // (the embedding thread measures off the lock), and the copy measures as the index did.
    let copy = index.reference_copy("a").unwrap();
    index.add(NewVector { pid: 99, ..v(99) });
    index.remove(&[99]);
    assert_eq!(copy.crowding_for(&centre), Some(measured));
    assert!(index.reference_copy("nobody").is_none());
    assert!(index.add_measured(v(3), Some(measured)) && index.add(v(4)));
    let later = index.search("a", &q, 4, &[]).unwrap();
    let at = |pid| later.top.iter().position(|t| t.0 == pid);
    assert!(at(2) < at(3) || at(3).is_none(), "{:?}", later.top);
    let score = |pid| later.top.iter().find(|t| t.0 == pid).map(|t| t.1);
    assert_eq!(score(3), score(4), "measured before or as it is added, the same");

    // Positions that moved during a job void it; compaction keeps each measure with its passage.
    let job = index.neighbourhood_job(0).unwrap();
    index.remove(&(10..22).collect::<Vec<_>>());
    for pid in 100..400 {
        add(&mut index, pid, "b", None, &unit(pid as usize));
    }
    index.remove(&(100..390).collect::<Vec<_>>());
    assert!(index.rows(&job, 0, 7).is_none() && !index.install(job, Vec::new()), "compacted meanwhile");
    let crowd_gone = index.search("a", &q, 3, &[]).unwrap();
    assert_eq!(crowd_gone.top[0].0, 2, "{:?}", crowd_gone.top);
}

#[test]
fn a_passage_is_smoothed_with_its_predecessor_and_removal_survives_compaction() {
    let mut index = VectorIndex::new(16);
    let q = unit(1);
    add(&mut index, 1, "a", None, &q); // the question's turn
    add(&mut index, 2, "a", Some(1), &unit(2)); // the answer, after it
    add(&mut index, 3, "a", None, &unit(2)); // the same text, standalone
    let hits = index.search("a", &q, 3, &[]).unwrap();
    let score = |pid| hits.top.iter().find(|t| t.0 == pid).unwrap().1;
    assert!(score(2) > score(3), "the predecessor's match lifts the answer");
    for pid in 100..300 {
        add(&mut index, pid, "a", None, &unit(pid as usize));
    }
    index.remove(&(100..300).collect::<Vec<_>>());
    assert_eq!(index.len(), 3);
    assert_eq!(index.banks[0].pids.len(), 3, "compacted");
    let again = index.search("a", &q, 3, &[]).unwrap();
    assert_eq!(again.top.iter().map(|t| t.0).collect::<Vec<_>>(), hits.top.iter().map(|t| t.0).collect::<Vec<_>>());
    assert!((again.top[1].1 - hits.top[1].1).abs() < 1e-6, "links re-pointed");
    index.clear();
    assert_eq!(index.len(), 0);
}

fn labelled(index: &mut VectorIndex, pid: i64, kind: &str, tags: &[&str], v: &[f32]) {
    let tags = crate::rows::encode_tags(&tags.iter().map(|t| t.to_string()).collect::<Vec<_>>());
    let label = Label { kind: kind.into(), tags };
    assert!(index.add(NewVector {
        pid,
        memory_seq: pid,
        bank: "b".into(),
        prev_pid: None,
        label,
        vector: quantize(v)
    }));
}

fn filter(tags: &[&str], tags_match: TagsMatch, types: &[&str]) -> DenseFilter {
    DenseFilter {
        tags: tags.iter().map(|t| t.to_string()).collect(),
        tags_match,
        types: types.iter().map(|t| t.to_string()).collect(),
    }
}

fn top(index: &VectorIndex, f: &DenseFilter) -> Vec<i64> {
    index.scan("b", &unit(7), 5, f).map(|s| index.finish(s, &[]).top.iter().map(|t| t.0).collect()).unwrap_or_default()
}

#[test]
fn a_filtered_scan_ranks_only_the_passages_that_pass_its_filter() {
    let mut index = VectorIndex::new(16);
    // Another project's 200 passages are all nearer the query than this project's one.
    for pid in 0..200 {
        labelled(&mut index, pid, "world", &["project:other"], &unit(7));
    }
    labelled(&mut index, 1000, "world", &["project:mine"], &unit(8));
    labelled(&mut index, 1001, "experience", &[], &unit(9));
    assert!(
        top(&index, &DenseFilter::default()).iter().all(|pid| *pid < 200),
        "unfiltered, the other project fills the best"
    );
    // Any: the project's passage and the untagged one, ranked among themselves only.
    let mine = filter(&["project:mine"], TagsMatch::Any, &[]);
    let mut found = top(&index, &mine);
    found.sort();
    assert_eq!(found, vec![1000, 1001]);
    let scan = index.scan("b", &unit(7), 5, &mine).unwrap();
    assert_eq!(index.finish(scan, &[]).live, 2, "what chance gives is measured among the passages that pass");
    assert_eq!(top(&index, &filter(&["project:mine"], TagsMatch::AnyStrict, &[])), vec![1000]);
    assert_eq!(top(&index, &filter(&["project:mine"], TagsMatch::Any, &["experience"])), vec![1001]);
    assert_eq!(top(&index, &filter(&[], TagsMatch::Exact, &[])), vec![1001], "exact with no tags: untagged only");
    assert!(top(&index, &filter(&["nobody"], TagsMatch::AnyStrict, &[])).is_empty());
    // A retain of the same text from this project gives one of the other's memories its tag.
    let mut retagged = HashMap::new();
    retagged.insert(5, crate::rows::encode_tags(&["project:other".into(), "project:mine".into()]));
    index.retag(&retagged);
    assert_eq!(top(&index, &filter(&["project:mine"], TagsMatch::AnyStrict, &[]))[0], 5);
    // Compaction keeps each passage's label.
    index.remove(&(100..200).collect::<Vec<_>>());
    assert_eq!(top(&index, &filter(&["project:mine"], TagsMatch::AnyStrict, &[])).len(), 2);
}

#[test]
fn a_few_long_memories_do_not_crowd_a_short_one_out_of_the_best() {
    let mut index = VectorIndex::new(16);
    // Three transcripts of 100 passages each, all nearer the query than the fact.
    for pid in 0..300 {
        let v = NewVector {
            pid,
            memory_seq: 1000 + pid / 100,
            bank: "b".into(),
            prev_pid: None,
            label: Label::default(),
            vector: quantize(&unit(7)),
        };
        assert!(index.add(v));
    }
    add(&mut index, 500, "b", None, &unit(8));
    let top: Vec<i64> = index.search("b", &unit(7), 10, &[]).unwrap().top.iter().map(|t| t.0).collect();
    assert_eq!(top.len(), 7, "two of each transcript and the fact: {top:?}");
    assert!(top.contains(&500), "{top:?}");
}
