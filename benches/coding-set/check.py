#!/usr/bin/env python3
"""Checks coding-set.json: its shape and sizes, that every paraphrased question shares no
content word with its fact, every lexical question at least one, and every reworded question
one or two.

Content words are found the way mneme's local store finds terms (backends/local/src/fts.rs): the
text is split into runs of letters and digits, lowercased, the stopwords of fts.rs are dropped and
the rest are stemmed with Snowball English. The stopword list is read from fts.rs itself, so the
two cannot drift apart.

    pip install snowballstemmer
    python3 check.py [coding-set.json]

Exits non-zero and names the offending questions when a check fails.
"""

import json
import os
import re
import sys

import snowballstemmer

HERE = os.path.dirname(os.path.abspath(__file__))
FTS_RS = os.path.join(HERE, "..", "..", "backends", "local", "src", "fts.rs")


def stopwords():
    src = open(FTS_RS, encoding="utf-8").read()
    block = re.search(r"const STOPWORDS: &\[&str\] = &\[(.*?)\];", src, re.S).group(1)
    return set(re.findall(r'"([^"]*)"', block))


STOP = stopwords()
STEM = snowballstemmer.stemmer("english")


def words(text):
    # Rust's char::is_alphanumeric: letters and digits of any script; `_` separates.
    return [w.lower() for w in re.split(r"[^0-9A-Za-z\u00C0-\uFFFF]+", text) if w]


def content_stems(text):
    return {STEM.stemWord(w) for w in words(text) if w not in STOP}


def main(path):
    data = json.load(open(path, encoding="utf-8"))
    facts = {f["id"]: f["text"] for f in data["facts"]}
    problems = []
    if len(facts) < 40:
        problems.append(f"{len(facts)} facts, need at least 40")
    if len(data["distractors"]) < 5000:
        problems.append(f"{len(data['distractors'])} distractors, need at least 5000")
    if len(set(data["distractors"])) != len(data["distractors"]):
        problems.append("duplicate distractors")
    if set(data["distractors"]) & set(facts.values()):
        problems.append("a distractor repeats a fact")
    qs = data["questions"]
    if len(qs) < 300:
        problems.append(f"{len(qs)} questions, need at least 300")
    para = [q for q in qs if q["paraphrased"]]
    if len(para) * 2 < len(qs):
        problems.append(f"only {len(para)} of {len(qs)} questions are paraphrased")
    for q in qs:
        if q["fact_id"] not in facts:
            problems.append(f"unknown fact {q['fact_id']!r}: {q['q']}")
            continue
        if q["paraphrased"]:
            shared = content_stems(q["q"]) & content_stems(facts[q["fact_id"]])
            if shared:
                problems.append(f"{q['fact_id']}: {q['q']!r} shares {sorted(shared)}")
        elif not content_stems(q["q"]) & content_stems(facts[q["fact_id"]]):
            problems.append(f"{q['fact_id']}: lexical question {q['q']!r} shares no content word")
    for q in data.get("reworded_questions", []):
        shared = content_stems(q["q"]) & content_stems(facts.get(q["fact_id"], ""))
        if not 1 <= len(shared) <= 2:
            problems.append(f"{q['fact_id']}: reworded {q['q']!r} shares {sorted(shared)} (want 1 or 2)")
    for p in problems:
        print("FAIL", p)
    print(
        f"{len(facts)} facts, {len(data['distractors'])} distractors, {len(qs)} questions "
        f"({len(para)} paraphrased): {'ok' if not problems else f'{len(problems)} problems'}"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "coding-set.json")))
