//! Table-driven: every signal, every threshold edge, each body shape, each compaction pattern.

use serde_json::{json, Value};

use super::*;

fn run(headers: &[(&str, &str)], body: Value) -> Classification {
    let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    classify(&ClassifySettings::default(), &headers, &body)
}

fn points(c: &Classification, name: &str) -> i64 {
    c.signals.iter().find(|s| s.name == name).unwrap().points
}

fn tools(n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"name": format!("t{i}")})).collect()
}

fn msgs(n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("m{i}")})).collect()
}

#[test]
fn each_signal_fires_alone() {
    // Baseline: nothing fires (3 tools, 3 messages, long system, default budget).
    let long = "x".repeat(600);
    let base = json!({"system": long, "tools": tools(3), "messages": msgs(3)});
    let c = run(&[], base.clone());
    assert_eq!(c.score, 0, "{c:?}");
    let cases: Vec<(&str, Value, i64)> = vec![
        ("few_tools", json!({"system": long, "tools": tools(2), "messages": msgs(3)}), 3),
        ("few_messages", json!({"system": long, "tools": tools(3), "messages": msgs(2)}), 3),
        ("short_system", json!({"system": "short", "tools": tools(3), "messages": msgs(3)}), 2),
        ("small_max_tokens", json!({"system": long, "tools": tools(3), "messages": msgs(3), "max_tokens": 300}), 3),
        (
            "meta_phrase",
            json!({"system": format!("Please Generate A Title. {long}"), "tools": tools(3), "messages": msgs(3)}),
            2,
        ),
    ];
    for (name, body, want) in cases {
        let c = run(&[], body);
        assert_eq!(points(&c, name), want, "{name}: {c:?}");
        assert_eq!(c.score, want, "{name} fired alone: {c:?}");
        assert_eq!((c.kind, c.decided_by.as_str()), (Kind::Normal, "score"));
    }
}

#[test]
fn threshold_edges() {
    let s = |n: usize| "s".repeat(n);
    // (system chars, max_tokens, phrase) edges on a request with 3 tools and 3 messages.
    let table: Vec<(String, Value, &str, i64)> = vec![
        (s(499), json!(4096), "short_system", 2),
        (s(500), json!(4096), "short_system", 0),
        (format!("{}label this", s(1989)), json!(4096), "meta_phrase", 2), // 1999 chars
        (format!("{}label this", s(1990)), json!(4096), "meta_phrase", 0), // 2000 chars
        (s(600), json!(300), "small_max_tokens", 3),
        (s(600), json!(301), "small_max_tokens", 0),
        (s(600), json!(0), "small_max_tokens", 0),
        (s(600), Value::Null, "small_max_tokens", 0),
    ];
    for (system, max, signal, want) in table {
        let mut body = json!({"system": system, "tools": tools(3), "messages": msgs(3)});
        if !max.is_null() {
            body["max_tokens"] = max.clone();
        }
        let c = run(&[], body);
        assert_eq!(points(&c, signal), want, "{signal} with {} chars, max_tokens {max}: {c:?}", system.chars().count());
    }
    // Score 7 is normal, 8 is meta.
    let seven = run(&[], json!({"system": s(600), "tools": [], "messages": msgs(1), "max_tokens": 4096}));
    assert_eq!(seven.score, 6);
    let seven = run(
        &[],
        json!({"system": format!("{}categorize", s(600)), "tools": tools(3), "messages": msgs(1), "max_tokens": 200}),
    );
    assert_eq!((seven.score, seven.kind), (8, Kind::Meta), "3 + 3 + 2 = 8: {seven:?}");
    let seven = run(&[], json!({"system": s(600), "tools": tools(3), "messages": msgs(1), "max_tokens": 200}));
    assert_eq!(seven.score, 6);
    let c = run(&[], json!({"system": s(600), "tools": [], "messages": msgs(3), "max_tokens": 200}));
    assert_eq!((c.score, c.kind), (6, Kind::Normal));
    let c = run(&[], json!({"system": s(100), "tools": tools(3), "messages": msgs(3), "max_tokens": 200}));
    assert_eq!((c.score, c.kind), (5, Kind::Normal));
    let c = run(
        &[],
        json!({"system": format!("{}classify this", s(100)), "tools": tools(3), "messages": msgs(1), "max_tokens": 4096}),
    );
    assert_eq!((c.score, c.kind), (7, Kind::Normal), "7 stays normal: {c:?}");
    let c = run(&[], json!({"system": "", "tools": [], "messages": msgs(1)}));
    assert_eq!((c.score, c.kind), (8, Kind::Meta), "a bare title request with the default budget scores exactly 8");
}

#[test]
fn body_shapes_normalize() {
    let anthropic = normalize(&json!({
        "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": tools(1), "max_tokens": 100
    }));
    assert_eq!(
        anthropic,
        Normalized { system: "a\nb".into(), messages: vec![("user".into(), "hi".into())], tools: 1, max_tokens: 100 }
    );
    let anthropic_str = normalize(&json!({"system": "plain", "messages": []}));
    assert_eq!(anthropic_str.system, "plain");
    let chat = normalize(&json!({
        "messages": [{"role": "system", "content": "one"}, {"role": "system", "content": "two"},
                     {"role": "user", "content": [{"type": "text", "text": "q"}]}],
        "max_completion_tokens": 50
    }));
    assert_eq!(
        chat,
        Normalized {
            system: "one\n\ntwo".into(),
            messages: vec![("user".into(), "q".into())],
            tools: 0,
            max_tokens: 50
        }
    );
    let responses = normalize(&json!({"instructions": "be brief", "input": "title please", "max_output_tokens": 20}));
    assert_eq!(
        responses,
        Normalized {
            system: "be brief".into(),
            messages: vec![("user".into(), "title please".into())],
            tools: 0,
            max_tokens: 20
        }
    );
    let responses_list = normalize(
        &json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "x"}]}, {"role": "assistant", "content": "y"}]}),
    );
    assert_eq!(responses_list.messages.len(), 2);
    assert_eq!(responses_list.max_tokens, 4096);
    // OpenAI's `developer` role is a system prompt, in Chat Completions and in Responses `input`
    // (where a `system` item was dropped and a `developer` one counted as a message).
    let developer = normalize(&json!({
        "messages": [{"role": "developer", "content": "You are a title generator."}, {"role": "user", "content": "q"}]
    }));
    assert_eq!((developer.system.as_str(), developer.messages.len()), ("You are a title generator.", 1));
    // Chat Completions' system (or developer) content as a list of text parts is read too: it
    // was dropped, and a title request came out `normal` (review113 #1).
    let parts = json!({
        "messages": [{"role": "system", "content": [{"type": "text", "text": "You are a title generator."}]},
                     {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]}, {"role": "user", "content": "q"}]
    });
    assert_eq!(normalize(&parts).system, "You are a title generator.\n\nBe brief.");
    assert_eq!(classify(&ClassifySettings::default(), &[], &parts).kind, Kind::Meta);
    let responses_system = normalize(&json!({
        "input": [{"role": "system", "content": "one"}, {"role": "developer", "content": [{"type": "input_text", "text": "two"}]},
                  {"role": "user", "content": "q"}]
    }));
    assert_eq!(
        (responses_system.system.as_str(), responses_system.messages),
        ("one\n\ntwo", vec![("user".to_owned(), "q".to_owned())])
    );
    // max_tokens wins over the others.
    assert_eq!(normalize(&json!({"max_tokens": 1, "max_output_tokens": 2, "max_completion_tokens": 3})).max_tokens, 1);
    assert_eq!(normalize(&json!({"max_output_tokens": 2, "max_completion_tokens": 3})).max_tokens, 2);
}

#[test]
fn compaction_patterns() {
    let user = |text: &str| json!({"role": "user", "content": text});
    let cases: Vec<(Value, Option<&str>)> = vec![
        (
            json!({"system": "You are an ANCHORED CONTEXT SUMMARIZATION ASSISTANT.", "tools": tools(5), "messages": msgs(5)}),
            Some("anchored context summarization assistant"),
        ),
        (
            json!({"messages": [user("Write an anchored summary from the conversation history above.")]}),
            Some("anchored summary from the conversation history above"),
        ),
        (
            json!({"messages": [user("Update the anchored summary below with new facts")]}),
            Some("Update the anchored summary below"),
        ),
        (json!({"messages": [user("<previous-summary>old</previous-summary>")]}), Some("<previous-summary>")),
        (json!({"messages": [user("update the anchored summary below")]}), None), // case-sensitive
        (json!({"tools": tools(1), "messages": [user("<previous-summary>x")]}), None), // tools present
        (
            json!({"tools": tools(3), "messages": [user("<template>\n## Goal\n## Progress\n## Next Steps\n## Relevant Files\n</template>")]}),
            Some("<template>"),
        ),
        (json!({"messages": [user("<template>\n## Goal\n## Progress\n## Next Steps\n</template>")]}), None), // only 3 headings
        (json!({"messages": [user("## Goal\n## Progress\n## Next Steps\n## Relevant Files")]}), None), // no marker
    ];
    for (body, want) in cases {
        let c = run(&[("x-mneme-agent", "build")], body.clone());
        match want {
            Some(p) => {
                assert_eq!((c.kind, c.decided_by.as_str()), (Kind::Compaction, "compaction-pattern"), "{body}");
                assert_eq!(c.pattern.as_deref(), Some(p));
            }
            None => assert_ne!(c.kind, Kind::Compaction, "{body}"),
        }
    }
}

#[test]
fn the_agent_header_decides_before_the_score() {
    let meta_shaped = json!({"system": "", "tools": [], "messages": msgs(1), "max_tokens": 50});
    let c = run(&[("X-Mneme-Agent", "Build")], meta_shaped.clone());
    assert_eq!((c.kind, c.decided_by.as_str()), (Kind::Normal, "header"));
    let work_shaped = json!({"system": "x".repeat(3000), "tools": tools(10), "messages": msgs(10)});
    let c = run(&[("x-lore-agent", "title")], work_shaped.clone());
    assert_eq!((c.kind, c.decided_by.as_str()), (Kind::Meta, "header"));
    // The first configured header present wins.
    let c = run(&[("x-lore-agent", "title"), ("x-mneme-agent", "code")], work_shaped.clone());
    assert_eq!(c.kind, Kind::Normal);
    // An unknown agent falls through to the score.
    let c = run(&[("x-mneme-agent", "explorer")], meta_shaped);
    assert_eq!((c.kind, c.decided_by.as_str()), (Kind::Meta, "score"));
    assert_eq!(classify_agent(&ClassifySettings::default(), "Summary"), Some(Kind::Meta));
    assert_eq!(classify_agent(&ClassifySettings::default(), "other"), None);
}

/// Requests in the shapes the real clients sent (Claude Code 2.1.332, opencode 1.18.33), cut down.
#[test]
fn the_real_clients_side_requests_are_recognised() {
    // Claude Code's /compact: the same system and tools as a work request.
    let claude_compact = json!({
        "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."}],
        "tools": tools(13),
        "max_tokens": 128000,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix the build"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            {"role": "user", "content": [{"type": "text", "text": "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests"}]}
        ]
    });
    let c = run(&[], claude_compact);
    assert_eq!((c.kind, c.decided_by.as_str()), (Kind::Compaction, "compaction-pattern"), "{c:?}");
    // opencode's title generator: its system prompt says what it is, at 2 kB.
    let title_system = format!(
        "You are a title generator. You output ONLY a thread title. Nothing else.\n\n<task>{}</task>",
        "x".repeat(2100)
    );
    let opencode_title = json!({
        "model": "stub-model", "max_tokens": 8192, "stream": true,
        "messages": [
            {"role": "system", "content": title_system},
            {"role": "user", "content": "Generate a title for this conversation:\n"},
            {"role": "user", "content": "fix the flaky test"}
        ]
    });
    let c = run(&[], opencode_title);
    assert_eq!(
        (c.kind, c.decided_by.as_str(), c.pattern.as_deref()),
        (Kind::Meta, "meta-pattern", Some("you are a title generator"))
    );
    // opencode's compaction.
    let opencode_compact = json!({
        "messages": [
            {"role": "system", "content": "You are a context summarization agent. You are given a conversation between a user and an agent."},
            {"role": "user", "content": "Here is the conversation so far:\n\n<conversation>\n[User]: hi\n</conversation>\n\nCreate a new anchored summary from the conversation history in the <conversation> tags above."}
        ]
    });
    assert_eq!(run(&[], opencode_compact).kind, Kind::Compaction);
    // Their work requests stay normal.
    let work = json!({"system": "You are opencode, an interactive CLI tool. ".repeat(200), "tools": tools(12), "messages": msgs(3)});
    assert_eq!(run(&[], work).kind, Kind::Normal);
}

/// A body of a system prompt alone (the opencode plugin's) is judged by the patterns: a custom
/// agent's short prompt is the agent's work, not a title request by its score.
#[test]
fn a_system_prompt_alone_is_judged_by_the_patterns() {
    let settings = ClassifySettings::default();
    let system = |text: &str| json!({"messages": [{"role": "system", "content": text}]});
    let reviewer = system("You are a code reviewer. Point out bugs in the diff.");
    assert_eq!(classify(&settings, &[], &reviewer).kind, Kind::Meta, "scored as a whole request: 8");
    let judged = classify_system(&settings, &reviewer);
    assert_eq!((judged.kind, judged.decided_by.as_str()), (Kind::Normal, "system-prompt"));
    let title = system("You are a title generator. You output ONLY a thread title.");
    assert_eq!(classify_system(&settings, &title).kind, Kind::Meta);
    let asks_a_title = system("Generate a title for this conversation.");
    assert_eq!(classify_system(&settings, &asks_a_title).kind, Kind::Meta, "short and asking for a title");
    let triage = system(&format!("You triage issues: categorize each one. {}", "Read it closely. ".repeat(40)));
    assert_eq!(classify_system(&settings, &triage).kind, Kind::Normal, "a long prompt that mentions it");
    let compaction = system("You are an anchored context summarization assistant.");
    assert_eq!(classify_system(&settings, &compaction).kind, Kind::Compaction);
}
