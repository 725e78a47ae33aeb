#!/usr/bin/env python3
"""Generates coding-set.json: a coding-agent memory bank (the facts of facts.py hidden among
generated distractors) and the questions that recall must answer.

Standard library only and deterministic (one seeded random.Random): the same script writes the
same file byte for byte.

    python3 generate.py [-o coding-set.json] [--distractors 6000]

The distractors are the other things an agent retains about the same project: the same kinds
of statement (deploys, CI, schedules, commands, conventions, decisions, preferences, gotchas,
session notes) about the project's other services, environments and tools, so they share many
words with the facts and questions. A distractor that would also answer a fact's questions (it
matches every pattern of one of the fact's `conflicts` entries) is dropped.
"""

import argparse
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from facts import FACTS  # noqa: E402

SEED = 20261201
# At most this many distractors differ only in people, teams and numbers ("Hannah prefers
# table-driven tests", "Marco prefers ..."): a real memory bank repeats itself, but not 18 times.
MAX_PER_SKELETON = 3

SERVICES = [
    "auth service", "search service", "notification worker", "API gateway", "web dashboard",
    "admin console", "analytics pipeline", "image resizer", "email renderer", "inventory service",
    "shipping service", "recommendation engine", "pricing service", "catalog importer",
    "audit log service", "report generator", "webhook relay", "metrics collector", "session service",
    "upload service", "geo service", "tax calculator", "fraud scorer", "loyalty service",
    "coupon service", "chat backend", "returns service", "warehouse sync", "feed builder",
    "scheduler", "rate limiter", "config service", "sitemap generator", "PDF exporter",
]
SLUGS = {s: re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-") for s in SERVICES}
LANGS = ["Rust", "Go", "TypeScript", "Python", "Kotlin", "Elixir", "Ruby"]
ENVS = ["production", "staging", "dev", "QA", "preview", "sandbox", "demo", "load-test"]
PEOPLE = ["Priya", "Marco", "Jonas", "Aiko", "Fatima", "Liam", "Sofia", "Dmitri", "Chen", "Olu",
          "Greta", "Rafael", "Hannah", "Tomasz", "Yara", "Ben", "Ines", "Kwame"]
TEAMS = ["platform", "growth", "storefront", "data", "mobile", "infra", "checkout", "search",
         "fulfilment", "identity", "risk", "catalog"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
DEPLOY_TOOLS = ["Helm", "Argo CD", "kustomize", "Nomad", "Fly.io", "Docker Compose", "Ansible",
                "Pulumi", "a plain kubectl apply", "Capistrano", "Skaffold"]
RUNNERS = ["GitHub-hosted ubuntu-latest runners", "Buildkite agents on spot instances",
           "self-hosted runners tagged arm64", "self-hosted runners tagged large",
           "GitLab shared runners", "the CircleCI medium resource class",
           "self-hosted runners tagged windows", "macOS runners", "the ephemeral runners in the ci-pool"]
STORES = ["database", "Redis cluster", "Elasticsearch cluster", "S3 bucket", "Kafka cluster",
          "ClickHouse instance", "read cache", "blob store", "message queue"]
ACTIONS = ["backed up", "snapshotted", "vacuumed", "reindexed", "compacted", "rotated",
           "checked for drift", "restarted", "scaled down", "audited"]
DEPS = ["serde", "tokio", "axum", "sqlx", "reqwest", "clap", "React", "Next.js", "Vite", "eslint",
        "Django", "celery", "pydantic", "gin", "zap", "gorm", "Jest", "Playwright", "Tailwind",
        "OpenSSL", "protobuf", "rustls", "hyper", "tonic", "pytest", "mypy", "Storybook", "Redux"]
CMD_STYLES = [
    "cargo test -p {slug}", "go test ./services/{slug}/...", "pnpm --filter {slug} test",
    "pytest services/{slug}", "make test-{slug}", "just test {slug}", "bazel test //{slug}:all",
    "cargo nextest run -p {slug}", "mix test apps/{slug}", "./gradlew :{slug}:test",
]
BUILD_STYLES = [
    "cargo build -p {slug} --release", "go build ./cmd/{slug}", "pnpm --filter {slug} build",
    "make build-{slug}", "just build {slug}", "docker build -f services/{slug}/Dockerfile .",
    "bazel build //{slug}", "./gradlew :{slug}:assemble",
]
SINKS = ["Datadog", "CloudWatch", "Sentry", "Honeycomb", "a local file under /var/log/orchard",
         "Elasticsearch", "Splunk", "the syslog collector"]
FLAGS = ["new-checkout", "fast-search", "dark-mode", "bulk-edit", "smart-reorder", "gift-cards",
         "split-payments", "wishlist-v2", "instant-refunds", "ai-descriptions", "one-click-reorder",
         "store-pickup", "multi-currency", "saved-carts"]
GOTCHAS = [
    "breaks if TZ is not set to UTC in the container",
    "needs OpenSSL 3 headers installed to build",
    "leaks file descriptors when the upstream closes the connection early",
    "must be restarted after the TLS certificate is rotated",
    "silently drops messages larger than 1 MB",
    "caches DNS forever, so a failover needs a restart",
    "fails its health check for the first 30 seconds while it warms the cache",
    "cannot run two instances against the same lock table",
    "reads the locale from LANG and crashes when it is empty",
    "uses a lot of memory during the weekly full sync",
    "needs the protobuf compiler on PATH for its build script",
    "times out in CI unless the fixture server is started first",
    "returns stale prices for up to five minutes after an update",
    "depends on the system clock being in sync, or tokens look expired",
    "segfaults on Alpine because of musl; use the Debian image",
]
REASONS = [
    "it was the only option with a maintained Rust client",
    "the team already knew it",
    "it halved the p99 latency in the load test",
    "licensing of the alternative changed",
    "it runs on a single binary with no extra services",
    "the old one could not handle the Black Friday traffic",
    "it keeps the cloud bill under budget",
    "it supports streaming responses",
    "the vendor offered an EU data residency option",
    "it needs no JVM on the hosts",
]
REVERTS = [
    "it doubled the bundle size", "its build times were too slow", "it broke on the arm64 runners",
    "it conflicted with the tracing setup", "the migration was too risky before the holidays",
    "it needed a newer glibc than the base image has", "its memory use grew without bound",
    "the upgrade changed serialization of dates",
]
ALTERNATIVES = [("gRPC", "REST"), ("NATS", "RabbitMQ"), ("ClickHouse", "Druid"),
                ("Meilisearch", "Elasticsearch"), ("Temporal", "a cron table"), ("axum", "actix-web"),
                ("Vite", "webpack"), ("Playwright", "Cypress"), ("SQLite", "LevelDB"),
                ("OpenTelemetry", "a custom metrics library"), ("Caddy", "Traefik"), ("htmx", "a SPA"),
                ("Kotlin Multiplatform", "Flutter"), ("Go", "Node.js"), ("zstd", "gzip")]
CONVENTIONS = [
    "every public function needs a doc comment",
    "handlers live in handlers/ and never touch the database directly",
    "test files sit next to the code they test",
    "module names are singular nouns",
    "we prefer composition over inheritance",
    "constants are SCREAMING_SNAKE_CASE in a consts module",
    "new endpoints need an OpenAPI entry before review",
    "SQL lives in .sql files, not in string literals",
    "each change needs an entry in the service's NOTES.md",
    "metrics names are prefixed with the service slug",
    "every background task must have a timeout",
    "HTTP clients are created once and shared",
    "integration points are hidden behind a trait so tests can fake them",
    "we avoid macros unless they remove real boilerplate",
]
PREFS = [
    "likes short functions and early returns",
    "wants benchmarks attached to performance pull requests",
    "prefers explicit types over inference in public signatures",
    "asks for screenshots in UI pull requests",
    "wants TODO comments to carry an issue number",
    "prefers table-driven tests",
    "does not like abbreviations in variable names",
    "prefers one assertion per test",
    "wants the README updated with every new command",
    "prefers squash merges for feature branches",
    "likes a summary comment at the top of long files",
    "wants log messages to start with a lowercase verb",
]
CAUSES = [
    "a missing index on the join column", "an N+1 query in the serializer",
    "a retry storm after a deploy", "an expired service-account token",
    "a race between the cache fill and the invalidation", "a wrong default timeout of 1 second",
    "a leaked database connection in the error path", "DNS resolution inside a hot loop",
    "an unbounded channel filling up", "a regex compiled on every request",
    "clock skew between two hosts", "a full disk on the build agent",
]
TICKETS = ["ORC-%d" % n for n in range(1100, 1999, 7)]
PORTS = list(range(3000, 3100)) + list(range(8000, 8100)) + [5432, 6379, 9090, 9200, 4317, 50051]
TIMES = ["%02d:%s" % (h, m) for h in range(24) for m in ("00", "15", "30", "45")]


def pick(rng, xs):
    return xs[rng.randrange(len(xs))]


def distractor(rng):
    s = pick(rng, SERVICES)
    slug = SLUGS[s]
    s2 = pick(rng, [x for x in SERVICES if x != s])
    env = pick(rng, ENVS)
    kind = rng.randrange(40)
    if kind == 0:
        return f"The {s} is deployed to {env} with {pick(rng, DEPLOY_TOOLS)}."
    if kind == 1:
        return f"CI for the {s} runs on {pick(rng, RUNNERS)} and takes about {rng.randint(3, 40)} minutes."
    if kind == 2:
        return f"The {env} {pick(rng, STORES)} of the {s} is {pick(rng, ACTIONS)} every {pick(rng, DAYS)} at {pick(rng, TIMES)} UTC."
    if kind == 3:
        return f"Run the {s} tests with `{pick(rng, CMD_STYLES).format(slug=slug)}`."
    if kind == 4:
        return f"Build the {s} with `{pick(rng, BUILD_STYLES).format(slug=slug)}`; the output goes to target/{slug}."
    if kind == 5:
        return f"The {s} listens on port {pick(rng, PORTS)} in local development."
    if kind == 6:
        return f"{pick(rng, PEOPLE)} from the {pick(rng, TEAMS)} team owns the {s}; ask them before changing its schema."
    if kind == 7:
        return f"Logs from the {s} in {env} end up in {pick(rng, SINKS)}."
    if kind == 8:
        return f"The {s} reads its settings from config/{slug}.{pick(rng, ['toml', 'yaml', 'json'])}."
    if kind == 9:
        return f"Requests from the {s} to the {s2} time out after {rng.choice([1, 2, 3, 5, 10, 15, 30, 60])} seconds."
    if kind == 10:
        return f"The feature flag {pick(rng, FLAGS)} gates the new {s} flow; it is on for internal users only."
    if kind == 11:
        a, b = pick(rng, ALTERNATIVES)
        return f"We chose {a} over {b} for the {s} because {pick(rng, REASONS)}."
    if kind == 12:
        return f"Gotcha: the {s} {pick(rng, GOTCHAS)}."
    if kind == 13:
        return f"{pick(rng, PEOPLE)} {pick(rng, PREFS)}."
    if kind == 14:
        return f"In the {s}, {pick(rng, CONVENTIONS)}."
    if kind == 15:
        return f"Fixed a flaky test in the {s}: the cause was {pick(rng, CAUSES)}."
    if kind == 16:
        return f"Bumped {pick(rng, DEPS)} to {rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)} in the {s} ({pick(rng, TICKETS)})."
    if kind == 17:
        return f"The {s} slowed down in {env} last week because of {pick(rng, CAUSES)}."
    if kind == 18:
        return f"The {s} is written in {pick(rng, LANGS)} and talks to the {s2} over {pick(rng, ['gRPC', 'HTTP', 'NATS', 'Kafka', 'a Unix socket'])}."
    if kind == 19:
        return f"The {s} keeps its data in the {pick(rng, STORES)} named {slug}-{env.lower()}."
    if kind == 20:
        return f"Deploys of the {s} to {env} are frozen on {pick(rng, DAYS)}s after {pick(rng, TIMES)} UTC."
    if kind == 21:
        return f"The {s} dashboard in Grafana is called '{s.title()} overview'; its alert fires when errors exceed {rng.randint(1, 10)}%."
    if kind == 22:
        return f"The {s} exposes metrics on /metrics at port {pick(rng, PORTS)}."
    if kind == 23:
        return f"Session note {pick(rng, TICKETS)}: moved the {s} cron job from {pick(rng, TIMES)} to {pick(rng, TIMES)} UTC."
    if kind == 24:
        return f"The {env} environment of the {s} is recreated from Terraform when {pick(rng, ['the module changes', 'a new region is added', 'the VPC is rebuilt'])}."
    if kind == 25:
        return f"The {s} publishes its Docker image to ghcr.io/orchard/{slug} on every tag."
    if kind == 26:
        return f"Lint the {s} with `{pick(rng, ['cargo clippy -p ' + slug, 'golangci-lint run ./' + slug + '/...', 'pnpm --filter ' + slug + ' lint', 'ruff check ' + slug, 'make lint-' + slug])}` before pushing."
    if kind == 27:
        return f"The {s} retries calls to the {s2} {rng.randint(2, 6)} times with exponential backoff."
    if kind == 28:
        return f"The {s} caches {pick(rng, ['prices', 'sessions of anonymous carts', 'search results', 'user profiles', 'shipping quotes', 'tax rates'])} for {rng.choice([30, 60, 120, 300, 600, 3600])} seconds."
    if kind == 29:
        return f"Nightly, the {s} exports a CSV report to the {pick(rng, TEAMS)} team's shared drive at {pick(rng, TIMES)} UTC."
    if kind == 30:
        return f"We tried {pick(rng, DEPS)} in the {s} but reverted it because {pick(rng, REVERTS)}."
    if kind == 31:
        return f"The {s} API returns {pick(rng, ['XML for the legacy partners', 'plain text errors', 'paginated lists of 50 items', 'ETags on every GET', 'gzip-compressed bodies'])}."
    if kind == 32:
        return f"The {s} uses the {pick(rng, ['main', 'replica', 'analytics', 'archive'])} connection pool with {rng.choice([5, 10, 20, 50])} connections."
    if kind == 33:
        return f"To debug the {s} locally, start it with RUST_LOG=debug and point it at the {env} {pick(rng, STORES)}."
    if kind == 34:
        return f"The {s} has a runbook at docs/runbooks/{slug}.md; {pick(rng, PEOPLE)} last updated it."
    if kind == 35:
        return f"Schema changes to the {s} need a design doc reviewed by the {pick(rng, TEAMS)} team."
    if kind == 36:
        return f"The {s} is scaled to {rng.randint(2, 24)} replicas in {env} and {rng.randint(1, 3)} elsewhere."
    if kind == 37:
        return f"Alerts for the {s} go to the #{pick(rng, TEAMS)}-alerts channel, not to the pager."
    if kind == 38:
        return f"The {s} was migrated from {pick(rng, LANGS)} to {pick(rng, LANGS)} in {rng.randint(2019, 2026)}."
    return f"{pick(rng, PEOPLE)} asked that the {s} keep backwards compatibility with the {s2} for one release."


_NAME_RE = re.compile(r"\b(%s)\b" % "|".join(re.escape(n) for n in PEOPLE + TEAMS))


def skeleton(text):
    """The text with people, teams and numbers blanked: distractors sharing one are near-copies."""
    return re.sub(r"\d+", "#", _NAME_RE.sub("_", text))


def conflicts(text):
    low = text.lower()
    for f in FACTS:
        for patterns in f["conflicts"]:
            if all(re.search(p, low) for p in patterns):
                return f["id"]
    return None


def build(n_distractors):
    rng = random.Random(SEED)
    facts = [{"id": f["id"], "text": f["text"]} for f in FACTS]
    fact_texts = {f["text"] for f in facts}
    seen, distractors, dropped = set(), [], 0
    skeletons = {}
    attempts = 0
    while len(distractors) < n_distractors:
        attempts += 1
        if attempts > n_distractors * 400:
            raise SystemExit("could not generate enough distinct distractors")
        d = distractor(rng)
        if d in seen or d in fact_texts:
            continue
        seen.add(d)
        if conflicts(d):
            dropped += 1
            continue
        sk = skeleton(d)
        if skeletons.get(sk, 0) >= MAX_PER_SKELETON:
            continue
        skeletons[sk] = skeletons.get(sk, 0) + 1
        distractors.append(d)
    questions = []
    for f in FACTS:
        for q in f["lexical"]:
            questions.append({"q": q, "fact_id": f["id"], "paraphrased": False})
        for q in f["paraphrased"]:
            questions.append({"q": q, "fact_id": f["id"], "paraphrased": True})
    reworded = [{"q": q, "fact_id": f["id"], "paraphrased": False} for f in FACTS for q in f["reworded"]]
    return {"seed": SEED, "facts": facts, "distractors": distractors, "questions": questions,
            "reworded_questions": reworded}, dropped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("-o", "--output", default=os.path.join(here, "coding-set.json"))
    ap.add_argument("--distractors", type=int, default=6000)
    args = ap.parse_args()
    data, dropped = build(args.distractors)
    with open(args.output, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=1, ensure_ascii=False)
        out.write("\n")
    print(f"{len(data['facts'])} facts, {len(data['distractors'])} distractors "
          f"({dropped} dropped as conflicting), {len(data['questions'])} questions "
          f"(+{len(data['reworded_questions'])} reworded) -> {args.output}")


if __name__ == "__main__":
    main()
