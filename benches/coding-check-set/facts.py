"""The facts of the coding-memory recall check set, with their hand-written questions.

The fictional project is "heron", the analytics data platform of a mid-sized company: events
come in through `collector` (Go, HTTP ingest), are scrubbed by `sieve`, go through Kafka to
`skein` (the Rust stream processor) and land in ClickHouse; `loom` (Dagster) runs the nightly
batch work and dbt, `quarry` (Python, FastAPI) serves SQL to the rest of the company and
`beacon` (Superset) holds the dashboards.

Each fact has:
- `lexical`: 3 questions that may reuse the fact's words;
- `paraphrased`: 3 questions sharing no content stem with the fact (see check.py);
- `reworded`: 2 questions keeping one or two of the fact's content stems;
- `conflicts`: lists of lowercase regexes; a generated distractor matching every pattern of
  any one list would also answer the fact (or one of its questions) and is dropped.

The questions were written as a developer would ask them, before any recall system was run
on them, and were not tuned against one.
"""

FACTS = [
    {
        "id": "deploy-quarry",
        "text": "The quarry query API is deployed by Argo CD, which syncs the prod cluster from the main branch of the infra-manifests repo.",
        "lexical": [
            "How is the quarry API deployed?",
            "What does Argo CD sync the prod cluster from?",
            "Which repo and branch does Argo CD deploy quarry from?",
        ],
        "paraphrased": [
            "How does the SQL-serving backend get shipped to production?",
            "What GitOps tool rolls out the SQL service, and where does it read its desired state?",
            "How do new versions of the company's SQL endpoint reach live?",
        ],
        "reworded": [
            "How is quarry shipped to production?",
            "What does Argo CD watch to roll out changes?",
        ],
        "conflicts": [
            [r"quarry", r"\bargo|deploy|\bship|\broll(s|ed)? ?out"],
            [r"\bargo\b"],
            [r"infra-manifests"],
        ],
    },
    {
        "id": "ci-runners",
        "text": "CI runs on Buildkite, with agents on autoscaled c6i.4xlarge spot instances in our own AWS account.",
        "lexical": [
            "Where does CI run?",
            "What instance type are the Buildkite agents?",
            "Are the CI agents on spot instances?",
        ],
        "paraphrased": [
            "Which service executes our pipelines for each pull request, and on what machines?",
            "What hardware do the build workers use?",
            "Are our automated checks executed on preemptible cloud VMs?",
        ],
        "reworded": [
            "Which Buildkite machines execute our checks?",
            "On what hardware does CI execute?",
        ],
        "conflicts": [
            [r"buildkite", r"\bagents?\b|instance|xlarge|\bspot\b|hardware|machine"],
            [r"\bci\b", r"\bspot\b|instance|xlarge|hardware|machines"],
            [r"c6i"],
        ],
    },
    {
        "id": "release-collector",
        "text": "We release the collector by pushing a tag like collector-v1.8.0; goreleaser then builds the binaries and the Docker image.",
        "lexical": [
            "How do we release the collector?",
            "What tag format triggers a collector release?",
            "What builds the collector binaries and Docker image?",
        ],
        "paraphrased": [
            "How do we ship a new version of the event ingestion service?",
            "What do I do to cut a version of the ingest daemon?",
            "Which tool packages the event intake executables and container?",
        ],
        "reworded": [
            "How do I cut a new collector version?",
            "What happens after I push a version label?",
        ],
        "conflicts": [
            [r"collector", r"\btag|releas|deploy|\bship|version|binar|\bimage"],
            [r"goreleaser"],
            [r"\btag", r"releas|\bpush"],
        ],
    },
    {
        "id": "staging-reset",
        "text": "The staging ClickHouse cluster is wiped and reloaded from a 1% sample of production every Saturday at 04:00 UTC.",
        "lexical": [
            "When is the staging ClickHouse cluster wiped?",
            "How much production data is loaded into staging?",
            "What happens to staging every Saturday?",
        ],
        "paraphrased": [
            "When does the pre-prod warehouse get reset?",
            "How often is the test analytics database refreshed, and with how much real data?",
            "On which weekend day is the pre-release data store cleared out?",
        ],
        "reworded": [
            "When does the staging database get reset?",
            "How big a slice of production goes into the test warehouse?",
        ],
        "conflicts": [
            [r"staging", r"saturday|weekend"],
            [r"staging", r"\bwipe|reload|\breset|refresh|\bclear|\bsample"],
            [r"\bwipe|reload|\breset|refresh", r"clickhouse|warehouse|database|postgres|\bdb\b"],
            [r"sample of production|% sample"],
        ],
    },
    {
        "id": "clickhouse-migrations",
        "text": "ClickHouse schema migrations live in warehouse/migrations and are applied with `just migrate`, never by hand in clickhouse-client.",
        "lexical": [
            "Where do ClickHouse schema migrations live?",
            "How are ClickHouse migrations applied?",
            "Can I apply a migration by hand in clickhouse-client?",
        ],
        "paraphrased": [
            "How do I change a table's columns in the analytics store?",
            "Which command alters the DB structure safely?",
            "Is it okay to run ALTER TABLE manually from the console?",
        ],
        "reworded": [
            "What command applies table changes?",
            "Where are the ClickHouse DDL files kept?",
        ],
        "conflicts": [
            [r"migrat"],
            [r"alter table|\bddl\b"],
            [r"clickhouse", r"column|schema"],
        ],
    },
    {
        "id": "just-test-docker",
        "text": "`just test` runs every test suite, but it needs Docker running because it starts ClickHouse and Redpanda containers first.",
        "lexical": [
            "What does just test need?",
            "Why must Docker be running for the tests?",
            "Which containers does just test start?",
        ],
        "paraphrased": [
            "What has to be up on my laptop before I check the whole codebase?",
            "What services get spun up automatically when I execute the checks?",
            "What prerequisite does the full check command have on my machine?",
        ],
        "reworded": [
            "What must be up before running the tests?",
            "Which services does the test command spin up?",
        ],
        "conflicts": [
            [r"just test"],
            [r"\btests?\b", r"docker|container|compose"],
            [r"docker", r"running|\bmust\b|\bneeds?\b|compose|\bstart|redpanda|clickhouse"],
        ],
    },
    {
        "id": "python-lint",
        "text": "Python code is linted and formatted with ruff; `just lint` runs ruff check and ruff format --check, and CI fails on any diff.",
        "lexical": [
            "What lints the Python code?",
            "What does just lint run?",
            "Does CI fail on a ruff format diff?",
        ],
        "paraphrased": [
            "Which style tool do we use for .py files?",
            "How do I make sure my FastAPI changes pass the style gate?",
            "Will the pipeline block a pull request with unreformatted source?",
        ],
        "reworded": [
            "Which tool lints our scripts?",
            "Does CI block a PR over style issues?",
        ],
        "conflicts": [
            [r"\bruff\b"],
            [r"just lint"],
            [r"python|\.py\b|fastapi", r"\blint|format|style"],
            [r"\bci\b", r"style|format|\bdiff\b"],
        ],
    },
    {
        "id": "skein-clippy",
        "text": "For skein, the Rust stream processor, clippy runs with -D warnings in CI, so any new warning breaks the build.",
        "lexical": [
            "How is clippy run for skein?",
            "Does a new clippy warning break the build?",
            "What flags does CI pass to clippy?",
        ],
        "paraphrased": [
            "Will a lint complaint in the Kafka consumer fail the pipeline?",
            "Are lints treated as errors for the event-handling crate?",
            "How strict is our linting of the topic consumer crate?",
        ],
        "reworded": [
            "Do skein lint complaints fail the pipeline?",
            "Is clippy treated as an error gate?",
        ],
        "conflicts": [
            [r"clippy"],
            [r"skein", r"\blint|warning"],
            [r"warnings? (break|fail)|-d warnings"],
        ],
    },
    {
        "id": "local-ports",
        "text": "The collector listens on port 8470 locally and quarry on 8471.",
        "lexical": [
            "What port does the collector listen on?",
            "Which port is quarry on locally?",
            "What is running on port 8471?",
        ],
        "paraphrased": [
            "Where do I point curl to send events to the ingest service on my machine?",
            "What address does the SQL API bind to in dev?",
            "Which socket number does the event intake use on a laptop?",
        ],
        "reworded": [
            "Where does the collector bind on my machine?",
            "What port does the SQL API use?",
        ],
        "conflicts": [
            [r"collector", r"\bports?\b|listen|\bbind|84\d\d"],
            [r"quarry", r"\bports?\b|listen|\bbind|84\d\d"],
            [r"8470|8471"],
        ],
    },
    {
        "id": "grafana-port",
        "text": "Local Grafana runs on port 3300, not 3000, because 3000 is taken by the beacon dev server.",
        "lexical": [
            "What port does local Grafana run on?",
            "Why isn't Grafana on 3000?",
            "What is using port 3000?",
        ],
        "paraphrased": [
            "Where do I open the metrics dashboards on my laptop?",
            "Why did we move the monitoring UI off its default address?",
            "Which frontend clashes with the charting tool's usual listener?",
        ],
        "reworded": [
            "Where does Grafana live on my laptop?",
            "Why does the dashboard UI use 3300?",
        ],
        "conflicts": [
            [r"grafana", r"\bports?\b|3300|\b3000\b|\blocal|laptop|\burl\b|http"],
            [r"3300"],
            [r"\b3000\b", r"\bports?\b|grafana|beacon|dev server|listen"],
            [r"beacon", r"\bports?\b|dev server"],
        ],
    },
    {
        "id": "skein-owner",
        "text": "Tomasz owns skein; page him for consumer lag alerts, and Ines is his backup.",
        "lexical": [
            "Who owns skein?",
            "Who do I page for consumer lag alerts?",
            "Who is Tomasz's backup?",
        ],
        "paraphrased": [
            "Who is responsible for the stream processor?",
            "Whom should I wake up when the Kafka reader falls behind?",
            "If the streaming lead is on holiday, who covers?",
        ],
        "reworded": [
            "Who is on call for skein?",
            "Who handles consumer lag when the lead is away?",
        ],
        "conflicts": [
            [r"skein", r"\bowns?\b|owner|on-call|\bpage|maintain|backup|contact|responsib|\blead\b"],
            [r"\blag\b", r"\bpage|\bowns?\b|owner|wake|on-call|contact|\bwho\b"],
            [r"tomasz|\bines\b", r"\bowns?\b|owner|backup|\bpage|contact|on-call|responsib|\blead\b|away|holiday|covers"],
        ],
    },
    {
        "id": "secrets-location",
        "text": "Secrets live in AWS Secrets Manager under heron/<env>/<service>; never put them in .env files that get committed.",
        "lexical": [
            "Where do secrets live?",
            "What is the Secrets Manager path for a service?",
            "Can I commit secrets in .env files?",
        ],
        "paraphrased": [
            "Where are the credentials stored?",
            "Where do I find the database password for prod?",
            "Is it okay to check API keys into the repo?",
        ],
        "reworded": [
            "Where are secrets kept?",
            "Can API keys go into committed config?",
        ],
        "conflicts": [
            [r"secret", r"\blive|manager|stored|\bkept\b|\bunder\b|\.env|commit|vault|\bin aws|\bpath"],
            [r"credential|password|token|api key", r"stored|\bkept\b|\blive|\bunder\b|in vault|in aws|\bfind|\.env|commit"],
            [r"\bvault\b"],
        ],
    },
    {
        "id": "dbt-nightly",
        "text": "dbt models are in warehouse/models and are built nightly by loom at 02:30 UTC with `dbt build --target prod`.",
        "lexical": [
            "When are dbt models built?",
            "Where are the dbt models?",
            "What dbt command does loom run nightly?",
        ],
        "paraphrased": [
            "What time do the transformation jobs execute each day?",
            "Where do the SQL transforms live?",
            "Which orchestrator kicks off the daily transformation run?",
        ],
        "reworded": [
            "At what time do dbt jobs kick off?",
            "Which folder holds the models?",
        ],
        "conflicts": [
            [r"\bdbt\b", r"night|daily|02:30|warehouse/models|\bbuil|target|loom|folder|\blive|\bruns? at|schedul|\btime\b"],
            [r"02:30"],
            [r"warehouse/models"],
            [r"transform"],
            [r"loom", r"\bnightly\b|\bdaily\b|every day"],
        ],
    },
    {
        "id": "backfill-approval",
        "text": "To backfill a partition, run `loom backfill --job <name> --from <date> --to <date>`; backfills over 30 days need approval in #data-ops.",
        "lexical": [
            "How do I backfill a partition?",
            "Do long backfills need approval?",
            "Where do I get approval for a backfill?",
        ],
        "paraphrased": [
            "How do I re-process a historical range?",
            "Who must sign off before I rebuild a month of history?",
            "What command recomputes old tables for a span of time?",
        ],
        "reworded": [
            "Who signs off on a long backfill?",
            "How do I recompute one partition?",
        ],
        "conflicts": [
            [r"backfill"],
            [r"#data-ops"],
            [r"recomput|reprocess|re-process|rebuild", r"partition|histor|\brange|\bdays?\b|month"],
        ],
    },
    {
        "id": "kafka-retention",
        "text": "Kafka topics keep raw events for 7 days; the archive in S3 (s3://heron-raw) keeps them forever as Parquet.",
        "lexical": [
            "How long do Kafka topics keep raw events?",
            "Where is the raw event archive?",
            "What format is the S3 archive in?",
        ],
        "paraphrased": [
            "What is the retention on the message broker?",
            "Where can I find week-old ingested data?",
            "Are unprocessed hits stored indefinitely somewhere?",
        ],
        "reworded": [
            "What is Kafka's retention?",
            "How long are raw events retained in the broker?",
        ],
        "conflicts": [
            [r"kafka|topic|broker", r"retention|retain|\bkeeps?\b|\bkept\b"],
            [r"\braw\b"],
            [r"archive"],
            [r"parquet"],
        ],
    },
    {
        "id": "sieve-pii",
        "text": "All events pass through sieve before being written anywhere; it hashes emails and drops IP addresses.",
        "lexical": [
            "What does sieve do to emails?",
            "Do events pass through sieve?",
            "Does sieve drop IP addresses?",
        ],
        "paraphrased": [
            "How is personal data scrubbed from incoming traffic?",
            "Do we store user mail in clear text?",
            "Is client location info kept when we ingest?",
        ],
        "reworded": [
            "Where are emails anonymised?",
            "What does sieve strip?",
        ],
        "conflicts": [
            [r"sieve", r"e-?mail|\bmail|\bip\b|pii|hash|strip|\bdrops?\b|scrub|anonymi|personal"],
            [r"e-?mail|\bmail\b"],
            [r"\bip\b"],
            [r"\bpii\b|personal|scrub|anonymi"],
        ],
    },
    {
        "id": "python-uv",
        "text": "Python dependencies are managed with uv; run `uv sync` after pulling and never pip install into the repo's venv.",
        "lexical": [
            "How are Python dependencies managed?",
            "What do I run after pulling?",
            "Can I pip install into the venv?",
        ],
        "paraphrased": [
            "Which package tool do we use for the FastAPI service?",
            "What keeps the libraries in my local environment up to date?",
            "Is it fine to add packages to the virtualenv by hand?",
        ],
        "reworded": [
            "Which tool manages Python packages?",
            "What do I run to update libraries?",
        ],
        "conflicts": [
            [r"\buv\b"],
            [r"\bpip\b|venv|virtualenv"],
            [r"python", r"depend|package|librar"],
            [r"after pulling"],
        ],
    },
    {
        "id": "collector-go-version",
        "text": "The collector is pinned to Go 1.22 in go.mod and the CI image; bump both together.",
        "lexical": [
            "What Go version is the collector pinned to?",
            "Where is the Go version pinned?",
            "What do I bump when upgrading Go?",
        ],
        "paraphrased": [
            "Which Golang toolchain does the ingest service use?",
            "What must change when upgrading the compiler for the event intake?",
            "Where is the toolchain release fixed for the HTTP ingestion daemon?",
        ],
        "reworded": [
            "Which Golang release does the collector need?",
            "Where else must I update the pinned compiler?",
        ],
        "conflicts": [
            [r"\bgo \d|golang|go\.mod", r"collector|ingest|go\.mod|ci image|bump|\bpin|upgrad|toolchain"],
            [r"collector", r"\bpin|version|toolchain|upgrad"],
            [r"toolchain|compiler", r"\bpin|bump|upgrad"],
        ],
    },
    {
        "id": "quarry-timeout",
        "text": "quarry's request timeout is 30 seconds; queries slower than that must go through the async export endpoint instead.",
        "lexical": [
            "What is quarry's request timeout?",
            "What do I use for queries slower than 30 seconds?",
            "What is the async export endpoint for?",
        ],
        "paraphrased": [
            "How long can a SQL lookup run before the server gives up?",
            "What should a heavy report use if it would take minutes?",
            "How do I fetch a big result set without hitting the limit?",
        ],
        "reworded": [
            "When does quarry cut off a call?",
            "Where should long queries go?",
        ],
        "conflicts": [
            [r"quarry", r"timeout|\bslow|limit|cut off|\blong\b"],
            [r"\basync\b", r"export|quer|endpoint|slow"],
            [r"export endpoint"],
            [r"quer(y|ies)", r"timeout|\bslow|\blong\b|minutes"],
            [r"statement timeout|\bsql\b", r"timeout|limit"],
        ],
    },
    {
        "id": "feature-flags",
        "text": "Feature flags live in Unleash (flags.heron.internal); new flags default to off and must name an owner and an expiry date.",
        "lexical": [
            "Where do feature flags live?",
            "What do new flags default to?",
            "What must a new feature flag name?",
        ],
        "paraphrased": [
            "Where are toggles managed?",
            "Are freshly created switches enabled out of the box?",
            "What info is required when adding a toggle?",
        ],
        "reworded": [
            "Where are feature toggles configured?",
            "Must every flag list who is responsible?",
        ],
        "conflicts": [
            [r"unleash"],
            [r"\bflags?\b", r"default|owner|expir|live in|managed|created|new flag"],
            [r"toggle"],
        ],
    },
    {
        "id": "on-call-rotation",
        "text": "On-call rotates weekly on Mondays at 10:00 Lisbon time, managed in PagerDuty's 'heron-primary' schedule.",
        "lexical": [
            "When does on-call rotate?",
            "What PagerDuty schedule is used for on-call?",
            "What timezone is the on-call rotation in?",
        ],
        "paraphrased": [
            "When does the pager handover happen?",
            "Which day is the support shift swapped?",
            "Where do I see who is holding the pager?",
        ],
        "reworded": [
            "What day does on-call change hands?",
            "When does the PagerDuty handover happen?",
        ],
        "conflicts": [
            [r"on-call|pager|\brota\b|rotation|support shift"],
            [r"lisbon"],
            [r"heron-primary"],
        ],
    },
    {
        "id": "priya-tests",
        "text": "Priya prefers table-driven tests in Go and wants every bug fix to come with a regression test.",
        "lexical": [
            "What kind of tests does Priya prefer?",
            "Does every bug fix need a regression test?",
            "How does Priya want Go tests written?",
        ],
        "paraphrased": [
            "Should a patch for a defect include a check that reproduces it?",
            "What unit-check style is expected in Golang code review?",
            "Do I need to add a case that catches the defect when patching something?",
        ],
        "reworded": [
            "What test style does our reviewer like for Golang?",
            "Does a bug patch need a new check?",
        ],
        "conflicts": [
            [r"priya", r"prefer|want|like|style"],
            [r"regression"],
            [r"table-driven"],
            [r"\bbug\b|defect", r"test|check|case"],
            [r"\bgo \d|golang|\bin go\b", r"test|check"],
        ],
    },
    {
        "id": "commit-messages",
        "text": "The user wants commit messages in imperative mood with the component as prefix, e.g. 'skein: retry on broker timeout'.",
        "lexical": [
            "How should commit messages be written?",
            "What prefix goes on a commit message?",
            "What mood should commit messages use?",
        ],
        "paraphrased": [
            "How do I phrase the summary line when saving changes to git?",
            "Should the log entry in version control start with the module name?",
            "What is our convention for describing a change in git?",
        ],
        "reworded": [
            "How should I word commit summaries?",
            "Should messages start with the module?",
        ],
        "conflicts": [
            [r"commit message|commit summar|commit title"],
            [r"imperative"],
            [r"\bgit\b", r"message|summary|convention|prefix|describ"],
        ],
    },
    {
        "id": "no-clickhouse-mocks",
        "text": "Don't mock ClickHouse in tests; the user wants integration tests against a real ClickHouse container.",
        "lexical": [
            "Should I mock ClickHouse in tests?",
            "What does the user want instead of mocking ClickHouse?",
            "Are integration tests run against a real ClickHouse?",
        ],
        "paraphrased": [
            "Is faking the warehouse OK in specs?",
            "Should database calls be stubbed out when verifying code?",
            "How should I exercise SQL on the analytics DB in checks?",
        ],
        "reworded": [
            "Can I stub ClickHouse?",
            "Should tests hit an actual database?",
        ],
        "conflicts": [
            [r"mock|stubb|\bfake"],
            [r"integration test"],
            [r"clickhouse", r"\btests?\b"],
            [r"\btests?\b", r"database|warehouse|\bdb\b|\breal\b"],
        ],
    },
    {
        "id": "clickhouse-timezone",
        "text": "ClickHouse DateTime columns are stored in UTC but clickhouse-client shows them in the server's Europe/Lisbon time zone unless you pass --use_client_time_zone.",
        "lexical": [
            "What time zone does clickhouse-client show DateTime columns in?",
            "Are ClickHouse DateTime columns stored in UTC?",
            "What flag makes clickhouse-client use the client time zone?",
        ],
        "paraphrased": [
            "Why are the timestamps I see in the console an hour off?",
            "Why do dates look shifted when querying the warehouse from a terminal?",
            "How do I get the CLI to print dates without the local offset?",
        ],
        "reworded": [
            "Why does clickhouse-client print shifted timestamps?",
            "What zone are warehouse timestamps saved in?",
        ],
        "conflicts": [
            [r"time ?zone|timezone|utc offset"],
            [r"datetime|timestamp"],
            [r"lisbon"],
            [r"clickhouse-client"],
        ],
    },
    {
        "id": "redpanda-local",
        "text": "Locally we run Redpanda instead of Kafka, and it only auto-creates topics when you set AUTO_CREATE_TOPICS=true in .env.local.",
        "lexical": [
            "Do we run Redpanda locally instead of Kafka?",
            "Why aren't topics auto-created locally?",
            "Where do I set AUTO_CREATE_TOPICS?",
        ],
        "paraphrased": [
            "What message broker do we use on laptops?",
            "Why do new queues not appear automatically in my development setup?",
            "How do I get the dev broker to make missing channels on its own?",
        ],
        "reworded": [
            "Which broker do we use instead of Kafka on laptops?",
            "Why don't topics appear on my machine?",
        ],
        "conflicts": [
            [r"redpanda"],
            [r"auto.?create"],
            [r"\.env\.local"],
            [r"broker|kafka|topic", r"\blocal|laptop|\bdev\b|machine"],
        ],
    },
    {
        "id": "why-clickhouse",
        "text": "We chose ClickHouse over BigQuery for the warehouse because of cost at our query volume and the need to run on-prem for one customer.",
        "lexical": [
            "Why did we choose ClickHouse over BigQuery?",
            "What was the reason for picking ClickHouse for the warehouse?",
            "Does a customer need us to run on-prem?",
        ],
        "paraphrased": [
            "Why aren't we on Google's managed analytics database?",
            "What drove the analytics DB decision?",
            "Why did we self-host our OLAP store?",
        ],
        "reworded": [
            "Why not BigQuery?",
            "What drove the pick of ClickHouse?",
        ],
        "conflicts": [
            [r"bigquery|snowflake|redshift"],
            [r"clickhouse|warehouse|\bolap\b|analytics (db|database)", r"because|\bchose|picked|reason|decid|decision|\bover\b"],
            [r"on-prem", r"customer"],
        ],
    },
    {
        "id": "skein-rust",
        "text": "skein was rewritten from Python to Rust in 2023 because the Python consumer couldn't keep up at peak ingest (about 80k events/s).",
        "lexical": [
            "Why was skein rewritten in Rust?",
            "When was skein rewritten from Python?",
            "What peak ingest rate couldn't the Python consumer keep up with?",
        ],
        "paraphrased": [
            "Why is the stream processor not in its original language anymore?",
            "What throughput forced the move to a compiled language?",
            "Why did we port the Kafka reader?",
        ],
        "reworded": [
            "Why is skein written in a systems language?",
            "What load made the Python version too slow?",
        ],
        "conflicts": [
            [r"skein", r"\brust\b|python|rewr|language|\bported\b"],
            [r"rewr|rewrote|\bported\b|\bport(ed)? to\b"],
            [r"\b80k\b|events/s|throughput"],
        ],
    },
    {
        "id": "prod-clickhouse-access",
        "text": "Production ClickHouse is read-only for humans; write access goes through a PR to warehouse/grants.yaml reviewed by Priya or Kwame.",
        "lexical": [
            "Is production ClickHouse read-only?",
            "How do I get write access to production ClickHouse?",
            "Who reviews warehouse/grants.yaml?",
        ],
        "paraphrased": [
            "Can I insert rows into the live analytics DB myself?",
            "Who approves permission changes for the prod data store?",
            "How do I ask for elevated privileges on the live OLAP cluster?",
        ],
        "reworded": [
            "Who signs off on ClickHouse permission requests?",
            "How do I request write rights?",
        ],
        "conflicts": [
            [r"grants"],
            [r"read-only"],
            [r"write access|write rights"],
            [r"access|permission|privilege|\brole\b|okta|\bsso\b|admin rights", r"clickhouse|warehouse|\bprod\b|production|\bolap\b"],
        ],
    },
    {
        "id": "clickhouse-backups",
        "text": "ClickHouse backups run every night at 01:00 UTC with clickhouse-backup to s3://heron-ch-backups and are kept for 35 days.",
        "lexical": [
            "When do ClickHouse backups run?",
            "Where are ClickHouse backups stored?",
            "How long are ClickHouse backups kept?",
        ],
        "paraphrased": [
            "What time is the warehouse snapshotted?",
            "Where do the analytics DB dumps go?",
            "What is the retention on OLAP snapshots?",
        ],
        "reworded": [
            "When are ClickHouse snapshots taken?",
            "How long do we retain backups?",
        ],
        "conflicts": [
            [r"backup", r"clickhouse|\bnight|01:00|\bs3\b|\bkept\b|retain|retention|stored|\bdays\b|snapshot|restore|warehouse"],
            [r"snapshot|\bdump", r"clickhouse|warehouse|\bolap\b|database|\bdb\b|\bs3\b|night|retain|retention|\bkept\b|\bkeep"],
            [r"01:00"],
        ],
    },
    {
        "id": "alert-routing",
        "text": "Alerts go to #heron-alerts in Slack; only pages (severity P1) go to PagerDuty.",
        "lexical": [
            "Where do alerts go?",
            "Which alerts go to PagerDuty?",
            "What Slack channel gets alerts?",
        ],
        "paraphrased": [
            "Where are monitoring notifications posted?",
            "Which incidents wake someone up?",
            "What chat room gets warnings?",
        ],
        "reworded": [
            "Where do alerts show up in chat?",
            "Which severity gets escalated to a phone?",
        ],
        "conflicts": [
            [r"#heron-alerts"],
            [r"alert", r"slack|pagerduty|channel|#|go to|sent to|posted"],
            [r"severity|\bp1\b|\bp2\b"],
            [r"notif|warning", r"slack|#|channel|posted|go to"],
        ],
    },
    {
        "id": "log-shipping",
        "text": "Service logs are shipped by Vector to Loki and kept 14 days; search them in Grafana Explore.",
        "lexical": [
            "Where are service logs shipped?",
            "How long does Loki keep logs?",
            "Where do I search logs?",
        ],
        "paraphrased": [
            "How long is application output retained?",
            "Which agent forwards container stdout?",
            "Where can I look up what the API printed yesterday?",
        ],
        "reworded": [
            "Where do logs end up?",
            "What does Loki retain and for how long?",
        ],
        "conflicts": [
            [r"\bloki\b"],
            [r"\bvector\b", r"\blogs?\b|\bship|agent|forward"],
            [r"\blogs?\b", r"\bkept\b|retain|retention|\bship|search|\bsent\b|go to|end up|forward|stored|\bdays\b"],
            [r"stdout|grafana explore"],
        ],
    },
    {
        "id": "quarry-release-days",
        "text": "quarry is released every Tuesday and Thursday after the 11:00 standup; no releases on Fridays.",
        "lexical": [
            "When is quarry released?",
            "Are there releases on Fridays?",
            "What days do we release quarry?",
        ],
        "paraphrased": [
            "Which weekdays do we ship the SQL API?",
            "Can I push the SQL service to prod at the end of the week?",
            "How often do new versions of the API go out?",
        ],
        "reworded": [
            "Can I release before the weekend?",
            "Which days does quarry ship?",
        ],
        "conflicts": [
            [r"quarry", r"releas|\bship|deploy|version"],
            [r"friday|weekend|end of the week"],
            [r"releas", r"tuesday|thursday|\bdays?\b|\bweek|standup"],
            [r"\bapi\b", r"releas|\bship|version|go out"],
        ],
    },
    {
        "id": "dashboards-as-code",
        "text": "Superset dashboards (beacon) are defined as code in dashboards/ and synced with `just dashboards-push`; edits made in the UI are overwritten.",
        "lexical": [
            "Where are Superset dashboards defined?",
            "How are dashboards synced?",
            "What happens to dashboard edits made in the UI?",
        ],
        "paraphrased": [
            "Why did my chart changes vanish?",
            "How do I publish a new BI report?",
            "Where do the business intelligence views live in the repo?",
        ],
        "reworded": [
            "Why did my Superset changes disappear?",
            "How do I publish dashboards?",
        ],
        "conflicts": [
            [r"superset"],
            [r"beacon", r"dashboard|chart|report|sync|\bpush|edit|overwrit|defin|publish|\bui\b"],
            [r"dashboard", r"overwrit|sync|defin|as code|publish|\bpush|edit|\bui\b"],
            [r"chart|report", r"publish|vanish|\blost\b|overwrit"],
        ],
    },
    {
        "id": "terraform-atlantis",
        "text": "Infrastructure is Terraform in infra/; apply only through Atlantis by commenting `atlantis apply` on the PR, never from a laptop.",
        "lexical": [
            "How is Terraform applied?",
            "Can I apply Terraform from my laptop?",
            "Where is the infrastructure code?",
        ],
        "paraphrased": [
            "How do cloud resource changes get rolled out?",
            "Is it OK to run tf locally against our AWS account?",
            "Where does the IaC live?",
        ],
        "reworded": [
            "How do I roll out Terraform changes?",
            "Where is infrastructure described?",
        ],
        "conflicts": [
            [r"terraform|\btf\b|\biac\b", r"appl|laptop|infra/|\bcode|plan\b|comment|\bpr\b|\broll|locally"],
            [r"atlantis"],
            [r"infra/|infrastructure"],
        ],
    },
    {
        "id": "prod-region-onprem",
        "text": "Prod runs in AWS eu-west-1 (Ireland); the on-prem customer install runs the same Helm chart with values-onprem.yaml.",
        "lexical": [
            "Which AWS region is prod in?",
            "What values file does the on-prem install use?",
            "Does the on-prem install use the same Helm chart?",
        ],
        "paraphrased": [
            "Where are our production servers hosted?",
            "How is the self-hosted client deployment configured?",
            "Which Amazon datacenter do we live in?",
        ],
        "reworded": [
            "What region hosts prod?",
            "How is the on-prem deployment configured?",
        ],
        "conflicts": [
            [r"eu-west|eu-central|us-east|\bregion|ireland|frankfurt|datacenter"],
            [r"on-?prem"],
            [r"\bhelm\b", r"on-?prem|values|chart|same"],
            [r"self-host"],
        ],
    },
    {
        "id": "collector-batching",
        "text": "The collector batches events for up to 500 ms or 1,000 events before producing to Kafka, so a single test event can seem delayed.",
        "lexical": [
            "How does the collector batch events?",
            "Why does a single test event seem delayed?",
            "What are the collector's batch limits?",
        ],
        "paraphrased": [
            "Why doesn't my one hit appear instantly?",
            "How long does ingest buffer until it flushes?",
            "Why is there a lag between posting a tracking call and seeing it in the topic?",
        ],
        "reworded": [
            "How long does the collector buffer?",
            "Why do events show up late?",
        ],
        "conflicts": [
            [r"collector", r"batch|buffer|flush|delay|\blate\b|\blag\b|limit"],
            [r"batch|buffer|flush", r"\bevents?\b|ingest|kafka"],
            [r"delay|\blate\b|\blag\b", r"\bevents?\b|topic|ingest"],
            [r"\b500 ?ms\b", r"collector|batch|buffer|\bevents?\b"],
        ],
    },
    {
        "id": "event-schemas",
        "text": "Event schemas are JSON Schema files in schemas/events/; a new field must be optional and bump the minor version.",
        "lexical": [
            "Where are event schemas?",
            "Must a new field be optional?",
            "What version do I bump when adding a field?",
        ],
        "paraphrased": [
            "How do I add a property to a tracking payload?",
            "Can I make an added attribute required?",
            "Where are the message contracts defined?",
        ],
        "reworded": [
            "How do I add a field to an event?",
            "Where are schemas kept?",
        ],
        "conflicts": [
            [r"schema", r"\bevents?\b|json|field|optional|minor|contract|tracking|payload|kept|\blive|where"],
            [r"schemas/events"],
            [r"field|attribute|property|column", r"optional|required|\badd|\bnew\b"],
            [r"contract"],
            [r"minor version"],
        ],
    },
    {
        "id": "pr-approvals",
        "text": "Every PR needs one approval from CODEOWNERS; PRs touching warehouse/ also need a data-eng reviewer.",
        "lexical": [
            "How many approvals does a PR need?",
            "Who must review PRs touching warehouse/?",
            "Do PRs need CODEOWNERS approval?",
        ],
        "paraphrased": [
            "How many sign-offs before I can merge?",
            "Who has to look at changes to the dbt and ClickHouse folder?",
            "What is required to land a pull request?",
        ],
        "reworded": [
            "How many approvals before merging?",
            "Who needs to sign off on warehouse changes?",
        ],
        "conflicts": [
            [r"codeowners"],
            [r"approv|sign-off|sign off|signs off"],
            [r"\bprs?\b|pull request", r"\breview|need|merge|\bland"],
            [r"\breview", r"\bprs?\b|pull request|warehouse|codeowners|approv|merge|\bneeds?\b|\bmust\b|data-eng"],
        ],
    },
    {
        "id": "trunk-based",
        "text": "We use trunk-based development: short-lived branches off main, squash-merged, and no long-running release branches.",
        "lexical": [
            "Do we use trunk-based development?",
            "How are branches merged?",
            "Do we have release branches?",
        ],
        "paraphrased": [
            "What is our git workflow?",
            "Should I keep a feature line open for weeks?",
            "Do we combine commits into one when landing a PR?",
        ],
        "reworded": [
            "What is our branching model?",
            "How many days should a feature branch stay open?",
        ],
        "conflicts": [
            [r"trunk"],
            [r"squash"],
            [r"branch", r"short|\blong|release|merg|\bmain\b|open|workflow"],
            [r"git workflow|branching"],
        ],
    },
    {
        "id": "just-bootstrap",
        "text": "New laptops are set up with `just bootstrap`, which installs the toolchains via mise and seeds a local ClickHouse with fixtures.",
        "lexical": [
            "How are new laptops set up?",
            "What does just bootstrap install?",
            "How is the local ClickHouse seeded?",
        ],
        "paraphrased": [
            "How do I get a fresh machine ready for development?",
            "What command should someone joining the team run first?",
            "Where does sample data for the dev warehouse come from?",
        ],
        "reworded": [
            "How do I set up a fresh machine?",
            "What populates the local warehouse?",
        ],
        "conflicts": [
            [r"bootstrap"],
            [r"\bmise\b"],
            [r"laptop|machine", r"set up|setup|fresh|\bnew\b"],
            [r"\bseed|fixture|sample data|demo data"],
            [r"onboard|joining|new hire"],
        ],
    },
    {
        "id": "answer-style",
        "text": "The user prefers short answers with the command first and explanation after, and no emoji.",
        "lexical": [
            "Does the user prefer short answers?",
            "Should the command come first in answers?",
            "Does the user want emoji?",
        ],
        "paraphrased": [
            "How should I format my replies?",
            "How verbose should responses be?",
            "Can I use smileys in chat?",
        ],
        "reworded": [
            "How should answers be structured?",
            "Does the user like icons and pictographs?",
        ],
        "conflicts": [
            [r"emoji|smiley"],
            [r"answer|repl(y|ies)\b|response|verbose"],
            [r"\buser\b", r"prefer|want|like"],
        ],
    },
    {
        "id": "event-id-uuidv7",
        "text": "Event IDs are UUIDv7, so they sort by time; don't replace them with uuid4 or dedup in skein breaks.",
        "lexical": [
            "What kind of UUID are event IDs?",
            "Why can't I use uuid4 for event IDs?",
            "What breaks skein dedup?",
        ],
        "paraphrased": [
            "What identifier format do tracking hits use?",
            "Why must identifiers be chronologically ordered?",
            "Could switching to random GUIDs cause duplicates downstream?",
        ],
        "reworded": [
            "Why do event identifiers need to be ordered?",
            "Will random GUIDs break deduplication?",
        ],
        "conflicts": [
            [r"uuid|guid"],
            [r"dedup|duplicate"],
            [r"\bids?\b|identifier", r"\bevents?\b|\bsort|order|format"],
        ],
    },
    {
        "id": "collector-limits",
        "text": "The collector rejects payloads over 64 KB with HTTP 413 and rate-limits each API key to 2,000 requests per second.",
        "lexical": [
            "What is the collector's payload limit?",
            "What does the collector return for payloads over 64 KB?",
            "What is the rate limit per API key?",
        ],
        "paraphrased": [
            "How big can a tracking body be?",
            "How many calls can one client make to ingest before getting throttled?",
            "What status code comes back when a POST is too large?",
        ],
        "reworded": [
            "How large can a collector body be?",
            "How is each API client throttled?",
        ],
        "conflicts": [
            [r"\b413\b|\b429\b"],
            [r"\d+ ?kb\b"],
            [r"rate.?limit|throttl|requests per|per second|/s\b"],
            [r"payload|\bbody\b", r"size|large|\bbig\b|limit|reject|\bcap"],
            [r"collector", r"reject|limit|\bcap(s|ped)?\b|\bmax"],
        ],
    },
    {
        "id": "cost-tags",
        "text": "Every AWS resource must carry the tags team, service and cost-center; Terraform CI fails without them.",
        "lexical": [
            "What tags must every AWS resource have?",
            "Does Terraform CI fail without cost-center tags?",
            "Which tags are required on resources?",
        ],
        "paraphrased": [
            "How do we attribute cloud spend?",
            "What labels are mandatory on infrastructure?",
            "Why was my infra plan rejected for missing metadata?",
        ],
        "reworded": [
            "What labels does Terraform require?",
            "Which tags are mandatory?",
        ],
        "conflicts": [
            [r"cost-center|cost center"],
            [r"\btags?\b", r"must|required|mandator|every|resource|\baws\b|\binfra"],
            [r"\blabels?\b", r"must|required|mandator|every|resource|\baws\b|\binfra"],
            [r"terraform|\binfra\b", r"\btags?\b|label|fail|\bcost|resource"],
            [r"spend|\bcost", r"attribut|\btags?\b|label|\bteam\b"],
        ],
    },
    {
        "id": "kwame-sql-style",
        "text": "Kwame wants SQL in dbt models lowercase with leading commas, enforced by sqlfluff.",
        "lexical": [
            "How does Kwame want SQL formatted?",
            "Do we use leading commas in dbt models?",
            "What enforces SQL style?",
        ],
        "paraphrased": [
            "What style rules apply to warehouse transforms?",
            "Should keywords be in capitals in the transformation files?",
            "Which linter checks our query code?",
        ],
        "reworded": [
            "What SQL style is required?",
            "Which linter does Kwame run?",
        ],
        "conflicts": [
            [r"sqlfluff"],
            [r"comma"],
            [r"\bsql\b|\bdbt\b|transform|quer(y|ies)", r"style|lowercase|uppercase|capital|keyword|format|\blint"],
            [r"kwame", r"want|prefer|like|style"],
            [r"quarry", r"\blint|mypy|pyright|bandit"],
        ],
    },
    {
        "id": "incident-process",
        "text": "For a P1 incident, open a channel with /incident in Slack; the postmortem is due within 5 business days.",
        "lexical": [
            "How do I open an incident channel?",
            "When is a postmortem due?",
            "What do I do for a P1 incident?",
        ],
        "paraphrased": [
            "What is the first step when prod is down?",
            "How soon must the retro be written after an outage?",
            "How do we coordinate a major outage?",
        ],
        "reworded": [
            "When must the incident review be written?",
            "How do I start an outage room in Slack?",
        ],
        "conflicts": [
            [r"incident|postmortem|post-mortem|\bretro\b|outage"],
            [r"\bp1\b"],
            [r"\bprod\b", r"\bdown\b"],
        ],
    },
    {
        "id": "quarry-cache",
        "text": "quarry caches query results in Redis for 5 minutes keyed by the SQL hash; pass `?fresh=1` to bypass the cache.",
        "lexical": [
            "How long does quarry cache query results?",
            "How do I bypass the quarry cache?",
            "What is the cache keyed by?",
        ],
        "paraphrased": [
            "Why am I getting stale numbers from the API?",
            "How do I force a recomputation instead of the memoized answer?",
            "What is the TTL on stored responses?",
        ],
        "reworded": [
            "How do I skip quarry's memoized responses?",
            "What is the cache TTL?",
        ],
        "conflicts": [
            [r"redis"],
            [r"\bcach|memoi|\bttl\b", r"quarry|quer|result|respons|\bapi\b|bypass|minutes|\bkey"],
            [r"\bstale\b"],
            [r"fresh=1"],
        ],
    },
    {
        "id": "loom-deadline",
        "text": "The loom nightly run must finish by 07:00 UTC, when the EU sales team's dashboards refresh; a late run pages the data on-call.",
        "lexical": [
            "When must the loom nightly run finish?",
            "What happens if the nightly run is late?",
            "When do the EU sales dashboards refresh?",
        ],
        "paraphrased": [
            "What is the deadline for the overnight batch?",
            "Who gets woken up if the orchestrator jobs overrun?",
            "Why does the morning schedule matter for European reports?",
        ],
        "reworded": [
            "What is the deadline for loom?",
            "Why must the jobs be complete early?",
        ],
        "conflicts": [
            [r"loom", r"finish|deadline|07:00|\blate\b|overrun|nightly|\bnight\b"],
            [r"07:00"],
            [r"deadline|must finish|finish by|must be done|complete by"],
            [r"overnight|nightly", r"batch|\bruns?\b|\bjobs?\b"],
            [r"\beu\b|europe", r"sales|dashboard|report"],
        ],
    },
    {
        "id": "no-force-push",
        "text": "Never force-push to main; if main is broken, revert the commit with a new PR instead.",
        "lexical": [
            "Can I force-push to main?",
            "What do I do if main is broken?",
            "Should a bad commit on main be reverted?",
        ],
        "paraphrased": [
            "How do I undo a bad merge on trunk?",
            "Is rewriting history on the default branch allowed?",
            "What is the fix when the primary line fails after my merge?",
        ],
        "reworded": [
            "Is force-pushing allowed?",
            "How do I fix a broken trunk?",
        ],
        "conflicts": [
            [r"force.?push"],
            [r"revert|\bundo\b"],
            [r"\bmain\b|trunk|default branch", r"broken|\bred\b|\bfail"],
        ],
    },
    {
        "id": "loom-ui",
        "text": "The loom (Dagster) UI is at loom.heron.internal and needs the VPN; locally it runs with `just loom-dev` on port 3001.",
        "lexical": [
            "Where is the loom UI?",
            "Does the loom UI need the VPN?",
            "How do I run loom locally?",
        ],
        "paraphrased": [
            "Where can I see the orchestrator's job graph?",
            "How do I start the pipeline scheduler on my laptop?",
            "Why can't I reach the batch jobs web page from home?",
        ],
        "reworded": [
            "What is the address of the Dagster web page?",
            "Why can't I open loom from home?",
        ],
        "conflicts": [
            [r"loom", r"\bui\b|\bvpn\b|3001|loom-dev|\.internal|\blocal|laptop|\burl\b|\bweb\b"],
            [r"dagster"],
            [r"3001"],
            [r"\bvpn\b"],
            [r"orchestrat|scheduler", r"\bui\b|\bweb\b|\burl\b|\blocal|laptop|graph"],
        ],
    },
]
