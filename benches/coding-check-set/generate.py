#!/usr/bin/env python3
"""Writes coding-check-set.json next to this file: the facts of facts.py, their questions, and
3,000 generated distractors about the same fictional project ("heron", an analytics data
platform). Standard library only; seeded, so the output is the same byte for byte.

    python3 generate.py          # 3,000 distractors
    python3 generate.py 5000     # another bank size (same seed)

Distractors come from the templates below, filled from the project's services, environments,
tools, people and values. A distractor is dropped when it matches every pattern of one of a
fact's `conflicts` lists (it would answer that fact too), when it repeats another one, or when
3 distractors already share its template and its non-nominal choices (so they would differ
only in people, teams, numbers, days or times), or 8 already say the same thing about other
services.
"""

import importlib.util
import json
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20250611
N_DISTRACTORS = 3000
MAX_PER_SHAPE = 3
MAX_PER_CORE = 8

_spec = importlib.util.spec_from_file_location("heron_facts", os.path.join(HERE, "facts.py"))
_facts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_facts)
FACTS = _facts.FACTS

# --- the project's vocabulary ---------------------------------------------------------------

# service -> language
SERVICES = {
    "collector": "Go", "skein": "Rust", "quarry": "Python", "loom": "Python", "sieve": "Go",
    "beacon": "Python", "atlas": "Python", "ferry": "Python", "lumen": "Go", "tally": "Rust",
    "osprey": "Python", "kestrel": "Rust", "wren": "Python", "marten": "Python", "finch": "Go",
    "plover": "Rust",
}
SVCS = list(SERVICES)
PEOPLE = [
    "Priya", "Tomasz", "Ines", "Kwame", "Yuki", "Dmitri", "Sofia", "Rafael", "Amara", "Lars",
    "Noor", "Mateo", "Elif", "Chidi", "Greta", "Oskar", "Leila", "Bruno",
]
TEAMS = ["data-eng", "platform", "analytics", "growth", "sre", "ml", "finance-data"]
ENVS = ["dev", "staging", "perf", "sandbox", "prod"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TABLES = [
    "sessions", "pageviews", "identities", "invoices_daily", "feature_values", "anomalies",
    "exports_log", "geo_lookups", "crawl_results", "usage_hourly",
]
TOPICS = [
    "events.clean", "events.sessions", "usage.metered", "identity.merges", "geo.enriched",
    "exports.requests", "features.updates", "anomalies.scored",
]

# --- helpers -------------------------------------------------------------------------------


def hhmm(r):
    return f"{r.randrange(0, 24):02d}:{r.choice(['00', '15', '30', '45'])}"


def two(r, pool):
    a, b = r.sample(pool, 2)
    return a, b


def pronoun(person):
    return "she" if person in {"Priya", "Ines", "Yuki", "Sofia", "Amara", "Noor", "Elif", "Greta", "Leila"} else "he"


# Each template takes the random generator and returns (text, shape): `shape` holds the
# choices that are not people, teams, numbers, days or times; at most MAX_PER_SHAPE distractors
# share a template and a shape.


def t_deploy(r):
    svc = r.choice(SVCS)
    tool = r.choice(["Helm", "Kustomize", "a plain kubectl apply", "Nomad", "ECS task definitions"])
    trig = r.choice(["a merge to main", "a manual Buildkite step", "a green nightly build", "a git tag"])
    env = r.choice(ENVS)
    return f"{svc} is deployed to {env} with {tool}, triggered by {trig}.", (svc, tool, trig, env)


def t_ci_step(r):
    svc = r.choice(SVCS)
    job = r.choice(["unit test", "e2e", "benchmark", "license scan", "SBOM", "coverage", "API contract"])
    queue = r.choice(["default", "heavy", "arm64", "gpu", "long-running"])
    return (f"The {svc} {job} step runs on the '{queue}' Buildkite queue and takes about "
            f"{r.randrange(3, 40)} minutes.", (svc, job, queue))


def t_schedule(r):
    svc = r.choice(SVCS)
    job = r.choice(["catalog crawl", "usage export", "model retrain", "partition compaction",
                    "cost report", "orphaned-file sweep", "identity graph rebuild",
                    "certificate check", "dependency audit", "sitemap scrape"])
    return f"The {svc} {job} runs every {r.choice(DAYS)} at {hhmm(r)} UTC.", (svc, job)


def t_daily(r):
    svc = r.choice(SVCS)
    job = r.choice(["usage rollup", "invoice draft", "anomaly scoring pass", "CRM sync",
                    "geo IP refresh", "crawl of the S3 inventory", "feature materialisation"])
    return (f"The {svc} {job} starts at {hhmm(r)} UTC each day and usually takes "
            f"{r.randrange(4, 90)} minutes.", (svc, job))


def t_ports(r):
    svc = r.choice(SVCS)
    p = r.randrange(8000, 9900)
    return (f"Locally {svc} listens on port {p} and serves its Prometheus metrics on "
            f"{p + r.randrange(1, 90)}.", (svc,))


def t_owner(r):
    svc = r.choice(SVCS)
    person = r.choice(PEOPLE)
    where = r.choice([f"#{svc}-dev in Slack", "the #data-platform channel", "the weekly office hours"])
    return f"{person} owns {svc}; questions about it go to {where}.", (svc, where.replace(svc, "<svc>"))


def t_contact(r):
    area = r.choice(["the lumen feature registry", "ferry's Salesforce sync", "tally invoices",
                     "the atlas search index", "osprey anomaly thresholds", "finch customer exports",
                     "marten identity merges", "plover geo lookups", "the wren notebook images"])
    a, b = two(r, PEOPLE)
    return f"{a} is the contact for {area}; {b} is the backup when {pronoun(a)} is away.", (area,)


def t_log_level(r):
    svc = r.choice(SVCS)
    level = r.choice(["info", "warn"])
    env = r.choice(ENVS)
    detail = r.choice(["every Kafka offset commit", "the SQL it generates", "retry attempts",
                       "each HTTP request", "cache decisions", "partition assignments"])
    return (f"{svc} logs at {level} by default in {env}; set {svc.upper()}_LOG_LEVEL=debug to see "
            f"{detail}.", (svc, level, env, detail))


def t_timeout(r):
    svc = r.choice(SVCS)
    thing = r.choice(["Kafka session", "S3 upload", "OIDC token refresh", "gRPC call to lumen",
                      "health check", "graceful shutdown", "Salesforce API", "HubSpot API"])
    return f"{svc}'s {thing} timeout is {r.choice([2, 5, 10, 15, 20, 45, 60, 90, 120])} seconds.", (svc, thing)


FLAGS = ["atlas.semantic_search", "ferry.hubspot_sync", "lumen.online_store", "tally.hourly_rollups",
         "osprey.seasonal_model", "marten.fuzzy_match", "kestrel.idle_timeout_30m",
         "plover.city_level", "wren.gpu_kernels", "finch.csv_gzip"]


def t_flag(r):
    flag = r.choice(FLAGS)
    env = r.choice(["dev", "staging", "perf", "sandbox"])
    task = r.choice(["the load test", "the cost review", "the rollout doc", "the shadow comparison",
                     "the accuracy report", "the customer pilot"])
    return (f"The {flag} flag is on in {env} and off in prod until {r.choice(PEOPLE)} finishes "
            f"{task}.", (flag, env, task))


def t_decision(r):
    a, b = r.choice([("Postgres", "MySQL"), ("gRPC", "REST"), ("Helm", "Kustomize"), ("Polars", "pandas"),
                     ("Temporal", "Celery"), ("NATS", "RabbitMQ"), ("OpenSearch", "Typesense"),
                     ("DuckDB", "SQLite"), ("Protobuf", "Avro"), ("Tokio", "async-std"),
                     ("httpx", "requests"), ("sqlx", "diesel")])
    svc = r.choice(SVCS)
    reason = r.choice(["the team already knew it", "it handles our write volume",
                       "its licence is simpler", "it has better Rust bindings", "it was cheaper to run",
                       "it needs less memory per pod", "its async support is mature"])
    return f"We picked {a} over {b} for {svc} because {reason}.", (a, svc, reason)


def t_convention(r):
    svc = r.choice(SVCS)
    conv = r.choice([
        "metric names use the heron_<service>_ prefix",
        "HTTP handlers return problem+json errors",
        "config is read once at startup into a frozen dataclass",
        "every Kafka consumer group is named after the service and environment",
        "CLI flags use kebab-case",
        "public functions carry doc comments with an example",
        "error types derive thiserror",
        "environment variables are prefixed with HERON_",
        "SQL lives in .sql files next to the code that runs it",
        "every module has a README with its owner and purpose",
    ])
    return f"In {svc}, {conv}.", (svc, conv)


def t_pref(r):
    person = r.choice(PEOPLE)
    pref = r.choice([
        "small PRs under 400 lines", "pairing on anything that touches Kafka offsets",
        "Grafana panels with units in the title", "explicit error enums over anyhow in libraries",
        "pathlib over os.path", "keyword-only arguments for functions with more than three parameters",
        "structured logs with key=value fields", "design docs before any new service",
        "Polars over pandas for new jobs", "early returns over nested ifs",
        "dataclasses over plain dicts", "one Kafka consumer per process",
    ])
    svc = r.choice(SVCS)
    return f"{person} prefers {pref} in {svc}.", (pref, svc)


def t_gotcha(r):
    svc = r.choice(SVCS)
    g = r.choice([
        "the health check returns 200 before the Kafka consumer has joined its group",
        "config changes need a restart because environment variables are read once",
        f"the Postgres connection pool is capped at {r.randrange(5, 40)} per pod",
        "the retry loop swallows 4xx errors silently",
        "protobuf field numbers must never be reused",
        "the sessions table uses ReplacingMergeTree, so counts before OPTIMIZE are too high",
        "the S3 client ignores AWS_PROFILE and needs AWS_REGION set explicitly",
        "SIGTERM is only handled after the current poll returns",
    ])
    shape = re.sub(r"\d+", "#", g)
    return f"Gotcha in {svc}: {g}.", (svc, shape)


def t_session(r):
    svc = r.choice(SVCS)
    did = r.choice(["profiled the slow sessionization query", "fixed the flaky offset-commit test",
                    "renamed the feature tables", "split the settings module",
                    "added tracing spans around the S3 calls", "moved the cron jobs into loom",
                    "cut the image size by switching to distroless", "reproduced the OOM with a 2 GB export"])
    nxt = r.choice(["a load test in perf", "writing the runbook", "asking Tomasz for a review",
                    "removing the old code path", "measuring the memory again", "a demo at Thursday's sync"])
    return (f"Session note {r.randrange(1, 29)}/{r.randrange(1, 13)}: {r.choice(PEOPLE)} and I {did} "
            f"in {svc}; next step is {nxt}.", (svc, did, nxt))


def t_command(r):
    svc = r.choice(SVCS)
    cmd, purpose = r.choice([
        ("proto", "regenerate the protobuf stubs"), ("docs", "build its docs site"),
        ("snap", "refresh the snapshot files"), ("shell", "open a REPL with its config loaded"),
        ("bench", "run the micro-benchmarks"), ("openapi", "regenerate the OpenAPI client"),
        ("tail", "follow its Kafka consumer offsets"), ("profile", "record a CPU flame graph"),
    ])
    return f"Run `just {svc}-{cmd}` to {purpose}.", (svc, cmd)


def t_envvar(r):
    svc = r.choice(SVCS)
    var, val = r.choice([
        ("MAX_WORKERS", str(r.choice([2, 4, 8, 16]))), ("BATCH_ROWS", str(r.choice([500, 5000, 20000]))),
        ("KAFKA_GROUP", f"{svc}-local"), ("S3_BUCKET", f"heron-{svc}-scratch"),
        ("RETRY_LIMIT", str(r.choice([3, 5, 8]))), ("OTEL_SAMPLE_RATIO", r.choice(["0.05", "0.1", "0.25"])),
    ])
    return (f"{svc} reads HERON_{svc.upper()}_{var} from the environment; the default is {val}.",
            (svc, var))


def t_retention(r):
    svc = r.choice(SVCS)
    data = r.choice(["feature vectors", "experiment assignments", "invoice drafts", "anomaly scores",
                     "identity merge history", "export manifests", "crawl results", "notebook checkpoints"])
    store = r.choice(["Postgres", "S3", "an EFS volume", "DynamoDB"])
    return f"{svc} keeps its {data} for {r.choice([7, 14, 30, 60, 90, 180, 365])} days in {store}.", (svc, data, store)


def t_pin(r):
    svc = r.choice(SVCS)
    lang = SERVICES[svc]
    ver = {"Go": ["1.21", "1.23"], "Rust": ["1.78", "1.79", "1.81"], "Python": ["3.11", "3.12"]}[lang]
    reason = r.choice(["the base image has not caught up yet", "we move everything together once a quarter",
                       "the on-call team asked for one change at a time", "a crash in the newer runtime is unresolved"])
    return f"{svc} stays on {lang} {r.choice(ver)} for now; {reason}.", (svc, reason)


def t_panel(r):
    svc = r.choice(SVCS)
    metric = r.choice(["consumer lag", "p99 latency", "rows written per second", "error ratio",
                       "memory per pod", "queue depth", "GC pause time", "open connections"])
    note = r.choice(["it is the first thing to check after a rollout", "its y-axis is in milliseconds",
                     "it reads from Prometheus, not ClickHouse", "the red line is the SLO"])
    return f"The {svc} Grafana dashboard has a panel for {metric}; {note}.", (svc, metric, note)


def t_alert(r):
    svc = r.choice(SVCS)
    metric = r.choice(["p99 latency", "error ratio", "memory per pod", "queue depth", "disk usage",
                       "failed runs", "open connections"])
    return (f"The {svc} {metric} alert fires when it stays above {r.randrange(2, 95)} for "
            f"{r.choice([5, 10, 15, 30])} minutes.", (svc, metric))


def t_rotation(r):
    svc = r.choice(SVCS)
    cred = r.choice(["Salesforce OAuth client", "Kafka SASL password", "HubSpot private app token",
                     "Postgres service user password", "GitHub deploy key", "Snowplow webhook signing key"])
    return f"The {svc} {cred} is rotated every {r.choice([30, 60, 90, 180])} days by {r.choice(PEOPLE)}.", (svc, cred)


def t_table(r):
    table = r.choice(TABLES)
    part = r.choice(["toYYYYMM(event_date)", "toMonday(event_date)", "tenant_id % 16", "toYYYYMMDD(ts)"])
    order = r.choice(["(tenant_id, ts)", "(tenant_id, user_id, ts)", "(ts, tenant_id)", "(site_id, ts)"])
    eng = r.choice(["MergeTree", "ReplacingMergeTree", "SummingMergeTree"])
    return f"The {table} table is a {eng} partitioned by {part} and ordered by {order}.", (table, part, order, eng)


def t_topic(r):
    svc = r.choice(SVCS)
    topic = r.choice(TOPICS)
    env = r.choice(["staging", "perf", "prod"])
    return (f"{svc} consumes the {topic} topic with {r.choice([6, 12, 24, 48])} partitions as group "
            f"{svc}-{env}.", (svc, topic, env))


def t_runbook(r):
    svc = r.choice(SVCS)
    prob = r.choice(["disk pressure", "a stuck consumer group", "certificate expiry", "OOM kills",
                     "a poisoned message", "slow crawls", "Postgres connection exhaustion"])
    slug = re.sub(r"[^a-z]+", "-", prob.lower()).strip("-")
    return f"The runbook for {svc} {prob} is docs/runbooks/{svc}-{slug}.md.", (svc, prob)


def t_todo(r):
    svc = r.choice(SVCS)
    task = r.choice(["drop the legacy v1 endpoints", "remove the pandas fallback", "split the settings module",
                     "replace the hand-rolled retry with tenacity", "add tracing spans around the S3 calls",
                     "delete the unused HubSpot fields", "move the cron jobs into loom"])
    when = r.choice(["the Q3 planning", "end of sprint 42", "the audit in November", "the next minor release"])
    return f"TODO ({r.choice(PEOPLE)}): {task} in {svc} before {when}.", (svc, task, when)


def t_changelog(r):
    svc = r.choice(SVCS)
    change = r.choice(["switched its HTTP client to reqwest", "added a /healthz/ready endpoint",
                       "dropped support for the v1 config file", "moved its cron to loom",
                       "now emits OpenTelemetry traces", "halved its memory use by streaming rows",
                       "started reading config from HERON_ variables"])
    ver = f"{r.randrange(0, 4)}.{r.randrange(0, 20)}.{r.randrange(0, 9)}"
    return f"The {svc} {ver} release {change}.", (svc, change)


def t_cost(r):
    svc = r.choice(SVCS)
    item = r.choice(["S3 storage", "NAT gateway traffic", "the Postgres RDS instance", "GPU hours for retraining",
                     "cross-AZ Kafka traffic", "CloudWatch ingestion", "EBS volumes"])
    return f"{svc} costs about ${r.randrange(2, 90) * 100} a month, mostly {item}.", (svc, item)


def t_tests_where(r):
    svc = r.choice(SVCS)
    kind = r.choice(["unit", "property", "snapshot", "load", "end-to-end"])
    path = r.choice([f"{svc}/tests", f"{svc}/src", f"tests/{svc}", f"{svc}/e2e"])
    return f"{svc}'s {kind} tests live in {path} and take about {r.randrange(1, 25)} minutes.", (svc, kind, path.replace(svc, "<svc>"))


def t_linter(r):
    svc = r.choice(SVCS)
    lang = SERVICES[svc]
    tool = r.choice({"Go": ["golangci-lint with errcheck enabled", "staticcheck", "govulncheck"],
                     "Rust": ["cargo deny", "cargo machete", "cargo audit"],
                     "Python": ["mypy --strict", "pyright in basic mode", "bandit"]}[lang])
    where = r.choice(["on every PR", "in the nightly pipeline", "only on main", "as a pre-push hook"])
    return f"{svc} runs {tool} {where}.", (svc, tool, where)


def t_slo(r):
    svc = r.choice(SVCS)
    what = r.choice(["requests", "lookups", "exports", "crawls", "merges"])
    return (f"{svc}'s SLO is {r.choice(['99', '99.5', '99.9'])}% of {what} under "
            f"{r.choice([50, 100, 250, 500, 1000])} ms over 28 days.", (svc, what))


def t_url(r):
    svc = r.choice(SVCS)
    env = r.choice(ENVS)
    return f"{svc} in {env} is at https://{svc}.{env}.heron.internal.", (svc, env)


def t_flaky(r):
    svc = r.choice(SVCS)
    test = r.choice(["test_rebalance", "test_export_roundtrip", "test_merge_identities",
                     "test_crawl_pagination", "test_hourly_rollup", "test_shutdown_drains"])
    cond = r.choice(["the machine is under load", "two runs share a Kafka topic",
                     "the clock crosses midnight UTC", "DNS is slow on the runner"])
    return f"The {test} test in {svc} is flaky when {cond}; rerun it once before debugging.", (svc, test, cond)


def t_postponed(r):
    svc = r.choice(SVCS)
    thing = r.choice(["moving to Kafka KRaft mode", "the Python 3.13 upgrade", "sharding the Postgres database",
                      "replacing cron with loom schedules", "dropping the v1 endpoints",
                      "switching to OpenTelemetry metrics"])
    quarter = r.choice(["Q1", "Q2", "Q3", "Q4"])
    reason = r.choice(["nobody has capacity this quarter", "the customer pilot comes first",
                       "we want a month of clean metrics first", "the vendor SDK is still in beta"])
    return f"We postponed {thing} in {svc} until {quarter} because {reason}.", (svc, thing, reason)


def t_admin(r):
    svc = r.choice(SVCS)
    env = r.choice(["dev", "staging", "perf", "sandbox"])
    group = r.choice([f"{svc}-admins", f"{svc}-{env}-ops", "platform-ops"])
    return f"Admin rights on {svc} in {env} come from the {group} Okta group.", (svc, env, group)


def t_meeting(r):
    team = r.choice(TEAMS)
    doc = r.choice(["Notion", "Google", "Confluence"])
    return f"The {team} sync is on {r.choice(DAYS)}s at {hhmm(r)} UTC; the agenda is in the {doc} doc.", (doc,)


def t_dq(r):
    table = r.choice(TABLES)
    check = r.choice(["row count", "null ratio", "freshness", "uniqueness", "referential"])
    cond = r.choice(["it drops more than 20% day over day", "any key column is empty",
                     "the newest row is older than six hours", "two rows share a primary key"])
    return f"loom runs a {check} check on {table} after each load and fails the asset if {cond}.", (table, check, cond)


def t_calls(r):
    a, b = two(r, SVCS)
    proto = r.choice(["gRPC", "HTTP/JSON", "Kafka request topics"])
    return (f"{a} calls {b} over {proto} and retries {r.choice([2, 3, 5])} times with exponential "
            f"backoff.", (a, b, proto))


def t_image(r):
    svc = r.choice(SVCS)
    base = r.choice(["distroless/cc", "python:3.12-slim", "alpine:3.20", "ubuntu:24.04", "distroless/static"])
    return f"The {svc} Docker image is built from {base} and is about {r.randrange(20, 900)} MB.", (svc, base)


def t_ci_cache(r):
    svc = r.choice(SVCS)
    what = {"Go": "Go module cache", "Rust": "cargo target directory",
            "Python": "pre-commit environments"}[SERVICES[svc]]
    tail = r.choice([f"a cold build is about {r.randrange(2, 6)}x longer",
                     "it is keyed by the lockfile hash", "it is wiped every Monday night"])
    return f"CI keeps the {svc} {what} between builds; {tail}.", (svc, re.sub(r"\d+", "#", tail))


def t_preview(r):
    svc = r.choice(SVCS)
    path = r.choice([f"{svc}/", "proto/", f"deploy/{svc}/", "libs/common/"])
    ttl = r.choice(["they are torn down on merge", "they share the staging Kafka", "they get a random subdomain"])
    return f"Preview environments for {svc} are built for every branch that touches {path}; {ttl}.", (svc, path.replace(svc, "<svc>"), ttl)


def t_k8s(r):
    svc = r.choice(SVCS)
    env = r.choice(["dev", "staging", "perf", "production"])
    return (f"The {env} cluster runs {svc} with {r.randrange(1, 13)} replicas and a "
            f"{r.choice([256, 512, 1024, 2048, 4096])} MiB memory limit.", (svc, env))


def t_wh_table(r):
    table = r.choice(TABLES)
    svc = r.choice(SVCS)
    note = r.choice(["it is about %d GB compressed" % r.randrange(3, 900), "most queries filter on tenant_id first",
                     "the weekly churn report is its biggest reader", "its rows are immutable once written"])
    return f"The {table} table in the warehouse is read mostly by {svc}; {note}.", (table, svc, re.sub(r"\d+", "#", note))


def t_pg_schema(r):
    svc = r.choice(SVCS)
    tbl = r.choice(["jobs", "tenants", "audit_events", "exports", "api_tokens", "crawl_state"])
    return f"The {svc} Postgres schema has {r.randrange(4, 60)} tables; the largest is {tbl}.", (svc, tbl)


def t_dbt_model(r):
    model = r.choice(["fct_sessions", "dim_tenants", "fct_usage_daily", "int_identity_links",
                      "fct_invoices", "dim_sites", "int_geo_enriched"])
    table = r.choice(TABLES)
    return (f"The dbt model {model} depends on {table} and has {r.randrange(2, 30)} tests attached.",
            (model, table))


def t_laptop(r):
    svc = r.choice(SVCS)
    when = r.choice(["if it swaps", "when the fans spin up", "before a long e2e session"])
    return (f"On a laptop {svc} needs about {r.randrange(1, 9)} GB of RAM; lower "
            f"HERON_{svc.upper()}_MAX_WORKERS {when}.", (svc, when))


def t_tfstate(r):
    svc = r.choice(SVCS)
    env = r.choice(ENVS)
    return f"Terraform state for {svc} lives in the heron-tfstate bucket under {svc}/{env}.", (svc, env)


def t_renovate(r):
    svc = r.choice(SVCS)
    what = r.choice(["dependency bumps", "base image bumps", "lockfile maintenance PRs"])
    return (f"Renovate opens {what} for {svc} every {r.choice(DAYS)}; {r.choice(PEOPLE)} "
            f"triages them.", (svc, what))


def t_lead(r):
    svc = r.choice(SVCS)
    when = r.choice(["this quarter", "until the rewrite ships", "while the team is hiring"])
    return f"{r.choice(PEOPLE)} is the tech lead for {svc} {when}.", (svc, when)


def t_docs(r):
    svc = r.choice(SVCS)
    topic = r.choice(["the retry policy", "every config key", "the data model", "the failure modes",
                      "how tenants are isolated"])
    return f"The {svc} design doc is docs/design/{svc}.md; its README page explains {topic}.", (svc, topic)


def t_grpc(r):
    svc = r.choice(SVCS)
    second = r.choice([f"a {r.choice([4, 8, 16])} MB message limit", f"a {r.choice([10, 30, 60])} s keepalive",
                       "reflection turned on"])
    return (f"{svc}'s gRPC server uses {r.choice([4, 8, 16, 32])} worker threads and "
            f"{second}.", (svc, re.sub(r"\d+", "#", second)))


def t_pull_config(r):
    svc = r.choice(SVCS)
    src = r.choice(["SSM Parameter Store", "a Kubernetes ConfigMap", "the atlas API", "a YAML file baked into the image"])
    return f"{svc} pulls its config from {src} at startup and never reloads it.", (svc, src)


def t_vendor(r):
    lib = r.choice(["a patched librdkafka", "the GeoLite2 files", "a fork of clickhouse-connect",
                    "the OpenAPI generator jar", "a trimmed copy of the ICU data"])
    reason = r.choice(["upstream rejected our patch", "pinning by hash was simpler",
                       "the download mirror was unreliable", "we only need a tenth of it"])
    svc = r.choice(SVCS)
    return f"We vendor {lib} for {svc} in the repo instead of installing it because {reason}.", (lib, reason, svc)


def t_sampling(r):
    svc = r.choice(SVCS)
    what = r.choice(["requests", "Kafka messages", "SQL statements", "background jobs"])
    env = r.choice(ENVS)
    return f"{svc} samples {r.choice([1, 5, 10, 25, 100])}% of {what} for tracing in {env}.", (svc, what, env)


def t_retry(r):
    svc = r.choice(SVCS)
    what = r.choice(["S3 writes", "webhook calls", "CRM updates", "Postgres transactions", "gRPC calls"])
    return (f"{svc} retries failed {what} with a {r.choice([1, 2, 5, 10])} second delay, up to "
            f"{r.choice([3, 5, 8])} times.", (svc, what))


def t_arm_broken(r):
    svc = r.choice(SVCS)
    test = r.choice(["test_simd_parse", "test_mmap_reader", "test_float_rounding", "test_tz_database"])
    return (f"The {test} test in {svc} has been broken on arm64 since {r.randrange(0, 4)}.{r.randrange(0, 20)}, "
            f"so it is skipped there.", (svc, test))


def t_read_access(r):
    svc = r.choice(SVCS)
    env = r.choice(["dev", "staging", "perf", "sandbox"])
    return f"Read access to the {svc} S3 bucket in {env} comes from the {svc}-readers group.", (svc, env)


def t_alert_rules(r):
    svc = r.choice(SVCS)
    where = r.choice([f"monitoring/{svc}.yaml", f"{svc}/ops/alerts.yaml", "the shared jsonnet library"])
    return (f"Alert rules for {svc} are defined in {where} and were last reviewed by "
            f"{r.choice(PEOPLE)}.", (svc, where.replace(svc, "<svc>")))


def t_finding(r):
    svc = r.choice(SVCS)
    f = r.choice(["the consumer showed zero lag because it read the wrong group",
                  "the S3 client made one request per row",
                  "the health endpoint was served before config loaded",
                  "the retry budget was shared across tenants",
                  "the planner ignored the skip index on tenant_id",
                  "a single tenant made up 40% of the rows"])
    return f"Found while debugging {svc}: {f}.", (svc, f)


TEMPLATES = [
    t_deploy, t_ci_step, t_schedule, t_daily, t_ports, t_owner, t_contact, t_log_level, t_timeout,
    t_flag, t_decision, t_convention, t_pref, t_gotcha, t_session, t_command, t_envvar, t_retention,
    t_pin, t_panel, t_alert, t_rotation, t_table, t_topic, t_runbook, t_todo, t_changelog, t_cost,
    t_tests_where, t_linter, t_slo, t_url, t_flaky, t_postponed, t_admin, t_meeting, t_dq, t_calls,
    t_image, t_ci_cache, t_preview, t_k8s, t_wh_table, t_pg_schema, t_dbt_model, t_laptop, t_tfstate,
    t_renovate, t_lead, t_docs, t_grpc, t_pull_config, t_vendor, t_sampling, t_retry, t_arm_broken,
    t_read_access, t_alert_rules, t_finding,
]

# --- assembly ------------------------------------------------------------------------------

CONFLICTS = [
    (f["id"], [re.compile(p) for p in group]) for f in FACTS for group in f["conflicts"]
]


def conflicting(text):
    low = text.lower()
    for fid, group in CONFLICTS:
        if all(p.search(low) for p in group):
            return fid
    return None


def distractors(r, n=N_DISTRACTORS):
    fact_texts = {f["text"] for f in FACTS}
    seen, shapes, out = set(), {}, []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 2_000_000:
            raise SystemExit(f"only {len(out)} distractors after {attempts} attempts")
        t = r.choice(TEMPLATES)
        text, shape = t(r)
        key = (t.__name__, shape)
        # the same statement about another service: allowed, but not for every service
        core = tuple(x for x in shape if x not in SERVICES)
        core_key = (t.__name__, "core", core)
        core_max = MAX_PER_CORE if core else 2 * MAX_PER_CORE
        if text in seen or text in fact_texts or shapes.get(key, 0) >= MAX_PER_SHAPE:
            continue
        if shapes.get(core_key, 0) >= core_max:
            continue
        if conflicting(text):
            continue
        seen.add(text)
        shapes[key] = shapes.get(key, 0) + 1
        shapes[core_key] = shapes.get(core_key, 0) + 1
        out.append(text)
    return out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else N_DISTRACTORS
    r = random.Random(SEED)
    facts = [{"id": f["id"], "text": f["text"]} for f in FACTS]
    questions, reworded = [], []
    for f in FACTS:
        for q in f["lexical"]:
            questions.append({"q": q, "fact_id": f["id"], "paraphrased": False})
        for q in f["paraphrased"]:
            questions.append({"q": q, "fact_id": f["id"], "paraphrased": True})
        for q in f["reworded"]:
            reworded.append({"q": q, "fact_id": f["id"], "paraphrased": False})
    data = {
        "seed": SEED,
        "facts": facts,
        "distractors": distractors(r, n),
        "questions": questions,
        "reworded_questions": reworded,
    }
    path = os.path.join(HERE, "coding-check-set.json")
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=1, ensure_ascii=False)
        out.write("\n")
    print(f"wrote {path}: {len(facts)} facts, {len(data['distractors'])} distractors, "
          f"{len(questions)} questions, {len(reworded)} reworded")


if __name__ == "__main__":
    main()
