"""The facts of the coding-memory set and the questions about them.

Each fact is something a coding agent would retain about one project (a monorepo called
"orchard": a web shop with a Rust and Go backend, a React frontend and mobile apps). Each has
three *lexical* questions (they may share words with the fact, as a user who remembers the
wording would ask) and three *paraphrased* questions that share no content word with the fact
once both are stemmed (Snowball English) and the stopwords of backends/local/src/fts.rs are
dropped. `check.py` verifies that. Two more *reworded* questions per fact keep one or two of
the fact's content words (usually its subject) and paraphrase the rest, as most real questions
do; they are scored separately (`reworded_questions` in the JSON), outside the half/half set.

`conflicts`: regular expressions (lowercase text) that together describe what the fact states;
a generated distractor matching all the patterns of any one entry would answer the fact's
questions too, so the generator drops it.
"""

FACTS = [
    dict(
        id="release-cargo-dist",
        text="Release binaries of the orchard command-line tool are built and published with cargo-dist.",
        conflicts=[[r"release|binar", r"cargo-dist|publish"], [r"command-line|\bcli\b", r"release|publish"]],
        lexical=[
            "What do we use to publish the release binaries?",
            "Which tool builds the release binaries for the command-line tool?",
            "How are orchard release binaries built?",
        ],
        paraphrased=[
            "How do we ship new versions of the terminal program to people?",
            "What packages up our downloadable executables?",
            "Which utility produces the installable artifacts when we cut a version?",
        ],
        reworded=[
            "How do we ship the command-line program to users?",
            "What packages our release artifacts?",
        ],
    ),
    dict(
        id="ci-bench-gpu",
        text="Benchmark jobs in CI run on self-hosted runners tagged gpu.",
        conflicts=[[r"benchmark|perf", r"runner|agent|machine"], [r"\bgpu\b"]],
        lexical=[
            "Where do the benchmark jobs run in CI?",
            "Which runners do the benchmark jobs use?",
            "What tag do the self-hosted benchmark runners have?",
        ],
        paraphrased=[
            "On which machines do our performance measurements execute in the pipeline?",
            "Which build agents with graphics cards handle the speed tests?",
            "Do the perf suites get GitHub's machines or our own hardware?",
        ],
        reworded=[
            "What hardware do the benchmark suites get in the pipeline?",
            "Which machines handle CI performance measurements?",
        ],
    ),
    dict(
        id="staging-db-reset",
        text="The staging database is reset every Sunday at 03:00 UTC.",
        conflicts=[[r"staging", r"reset|wipe|clear|truncat|recreat"]],
        lexical=[
            "When is the staging database reset?",
            "How often does the staging database get reset?",
            "At what time on Sunday is staging reset?",
        ],
        paraphrased=[
            "When does the pre-production data store get wiped?",
            "On which weekday is the test-environment DB cleared?",
            "If I put rows into the pre-prod Postgres, how long before they disappear?",
        ],
        reworded=[
            "When is the pre-production database wiped?",
            "How often does staging get cleared out?",
        ],
    ),
    dict(
        id="just-ci",
        text="The whole test suite is run with `just ci`, which also runs clippy and the doc tests.",
        conflicts=[[r"just ci"], [r"whole|full|entire", r"suite"]],
        lexical=[
            "How do I run the whole test suite?",
            "What command runs clippy and the doc tests too?",
            "Which just recipe runs the test suite?",
        ],
        paraphrased=[
            "What should I type to check everything before pushing?",
            "Which command reproduces the complete pipeline locally?",
            "How can I verify all of my changes the way the pipeline will?",
        ],
        reworded=[
            "How do I check everything locally before pushing, lint and docs included?",
            "What single command mirrors the whole pipeline?",
        ],
    ),
    dict(
        id="problem-json",
        text="API handlers must return errors as RFC 7807 problem+json bodies.",
        conflicts=[[r"error", r"problem\+json|7807|body|bodies|format"]],
        lexical=[
            "What format do API handlers use for errors?",
            "Should API errors be returned as problem+json?",
            "How must handlers return errors?",
        ],
        paraphrased=[
            "When an endpoint fails, what should the response payload look like?",
            "Which standard do we follow for reporting failures to HTTP clients?",
            "How should a route tell the caller that something went wrong?",
        ],
        reworded=[
            "What should the response body look like when an endpoint fails?",
            "Which format do we use for HTTP error payloads?",
        ],
    ),
    dict(
        id="sqlx-migrations",
        text="Database migrations live in db/migrations and are applied with `sqlx migrate run`.",
        conflicts=[[r"migration", r"appl|live in|sqlx|run with"]],
        lexical=[
            "Where do database migrations live?",
            "How are migrations applied?",
            "What command applies the db migrations?",
        ],
        paraphrased=[
            "How do I bring my local schema up to date?",
            "Where should I put a new table change script?",
            "Which tool evolves the Postgres schema?",
        ],
        reworded=[
            "How do I bring my local database schema up to date?",
            "Where do database change scripts go?",
        ],
    ),
    dict(
        id="ruff-format",
        text="Python code is formatted with ruff format, line length 100.",
        conflicts=[[r"python", r"format|line length"]],
        lexical=[
            "What formatter do we use for Python code?",
            "What is the line length for Python?",
            "Is Python code formatted with ruff?",
        ],
        paraphrased=[
            "How wide may the rows of text in our .py sources be?",
            "Which auto-styler do the .py files go through?",
            "What tidies the layout of our .py scripts automatically?",
        ],
        reworded=[
            "How wide may lines in .py files be?",
            "Which tool auto-styles our Python?",
        ],
    ),
    dict(
        id="launchdarkly-flags",
        text="Feature flags are stored in LaunchDarkly, not in the config files.",
        conflicts=[[r"feature flag|flags", r"stored|kept|managed|live"]],
        lexical=[
            "Where are feature flags stored?",
            "Do we keep feature flags in the config files?",
            "Which service stores our feature flags?",
        ],
        paraphrased=[
            "Where do I toggle a half-finished capability on for some customers?",
            "What do we use to switch experimental functionality on and off?",
            "Which vendor handles our rollout toggles?",
        ],
        reworded=[
            "Where do I toggle a half-finished feature on for some customers?",
            "Which vendor manages our rollout flags?",
        ],
    ),
    dict(
        id="commit-style",
        text="The user prefers small commits with imperative subject lines under 50 characters.",
        conflicts=[[r"commit", r"subject|small|imperative|message"]],
        lexical=[
            "What style of commits does the user prefer?",
            "How long should commit subject lines be?",
            "Does the user prefer small commits?",
        ],
        paraphrased=[
            "When I check in code, how should I title it and how much should go in each one?",
            "What does the developer like in terms of history granularity and message wording?",
            "How terse ought the summary of a git change to be?",
        ],
        reworded=[
            "How should I title my commits?",
            "What size of commits does the developer like in the git history?",
        ],
    ),
    dict(
        id="env-local-secrets",
        text="Secrets for local development come from `.env.local`, which is git-ignored; never commit it.",
        conflicts=[[r"secret|credential|api key", r"local|laptop"]],
        lexical=[
            "Where do secrets for local development come from?",
            "Is .env.local git-ignored?",
            "Which file holds secrets for local development?",
        ],
        paraphrased=[
            "Where do I put API keys when running things on my laptop?",
            "Which dotfile keeps my private credentials off the repository?",
            "How do I give the app passwords on my own machine without pushing them?",
        ],
        reworded=[
            "Where do I put API keys when developing on my laptop?",
            "Which dotfile keeps my secrets out of git?",
        ],
    ),
    dict(
        id="staging-url-vpn",
        text="The staging environment is at staging.orchard.dev and is behind the company VPN.",
        conflicts=[[r"staging", r"vpn|url|hostname|reachable|orchard\.dev"]],
        lexical=[
            "What is the staging environment's URL?",
            "Is staging behind the VPN?",
            "Where is the staging environment?",
        ],
        paraphrased=[
            "What address do I open to try the pre-production site?",
            "Why can't I reach the test deployment from home without a tunnel?",
            "Which hostname serves the pre-release copy of the app?",
        ],
        reworded=[
            "What address do I open to try staging?",
            "Why can't I reach the pre-production environment from home?",
        ],
    ),
    dict(
        id="postgres-over-mongo",
        text="We chose PostgreSQL over MongoDB because reporting needs joins and transactions.",
        conflicts=[[r"postgres|mongo", r"chose|picked|instead|over"]],
        lexical=[
            "Why did we choose PostgreSQL over MongoDB?",
            "Which database did we choose instead of MongoDB?",
            "Why does reporting need PostgreSQL joins?",
        ],
        paraphrased=[
            "What was the reason for going relational rather than a document store?",
            "Why didn't we pick a NoSQL store for our main data?",
            "What drove the decision about a SQL engine for the primary data?",
        ],
        reworded=[
            "Why did we go relational rather than MongoDB?",
            "What drove the decision to pick PostgreSQL?",
        ],
    ),
    dict(
        id="stripe-idempotent",
        text="The payments webhook handler must be idempotent: Stripe retries events for up to three days.",
        conflicts=[[r"webhook|stripe", r"idempot|retr|twice|duplicate"]],
        lexical=[
            "Why must the payments webhook handler be idempotent?",
            "How long does Stripe retry webhook events?",
            "Does Stripe retry payment events?",
        ],
        paraphrased=[
            "Can the same charge notification arrive twice, and how should our code cope?",
            "How long might the card processor keep resending a callback?",
            "What do I need to guarantee when processing billing callbacks multiple times?",
        ],
        reworded=[
            "Can the same Stripe notification arrive twice?",
            "What must I guarantee when processing billing webhooks more than once?",
        ],
    ),
    dict(
        id="logs-vector-loki",
        text="Log lines are JSON and go to stdout; Vector ships them to Loki.",
        conflicts=[[r"\blog", r"stdout|loki|vector|ship"]],
        lexical=[
            "Where do log lines go?",
            "What ships the logs to Loki?",
            "What format are log lines in?",
        ],
        paraphrased=[
            "How does our application output end up in the observability stack?",
            "Where can I search the service's diagnostic messages after they leave the container?",
            "Which agent forwards the console output to Grafana's storage?",
        ],
        reworded=[
            "How does our application output end up in Loki?",
            "Where do I search the service logs after they leave the container?",
        ],
    ),
    dict(
        id="atlantis-terraform",
        text="Never run `terraform apply` locally; infrastructure changes go through Atlantis on the pull request.",
        conflicts=[[r"terraform|infrastructure", r"apply|atlantis|pull request"]],
        lexical=[
            "Can I run terraform apply locally?",
            "How do infrastructure changes get applied?",
            "What runs terraform on pull requests?",
        ],
        paraphrased=[
            "How should I roll out a cloud resource modification?",
            "Is it okay to provision things from my own laptop?",
            "Where do IaC plans get executed after review?",
        ],
        reworded=[
            "Is it okay to provision infrastructure from my own laptop?",
            "Where do terraform plans get executed after review?",
        ],
    ),
    dict(
        id="ios-min-16",
        text="The mobile app's minimum supported iOS version is 16.",
        conflicts=[[r"\bios\b|iphone", r"minimum|support|oldest"]],
        lexical=[
            "What is the minimum iOS version the mobile app supports?",
            "Does the mobile app support iOS 15?",
            "Which iOS version is the minimum?",
        ],
        paraphrased=[
            "Which iPhone operating system release is the oldest we still target?",
            "Can people on older Apple phones still install our application?",
            "How far back do we go for Apple handset compatibility?",
        ],
        reworded=[
            "Can people on older iPhones still install the mobile app?",
            "Which Apple operating system version is the oldest we target?",
        ],
    ),
    dict(
        id="reindex-nightly",
        text="The search index is rebuilt nightly at 02:00 UTC by the `reindex` cron job.",
        conflicts=[[r"search index|reindex", r"rebuil|nightly|cron|every"]],
        lexical=[
            "When is the search index rebuilt?",
            "What does the reindex cron job do?",
            "How often is the search index rebuilt?",
        ],
        paraphrased=[
            "Why are new products missing from results until the next morning?",
            "Which scheduled task regenerates the full-text lookup tables, and when?",
            "At what hour does the product-finder catalogue get regenerated each day?",
        ],
        reworded=[
            "Why are new products missing from search results until the next morning?",
            "When does the full-text index get regenerated?",
        ],
    ),
    dict(
        id="pnpm-frontend",
        text="Use pnpm, not npm or yarn, in the frontend workspace; the lockfile is pnpm-lock.yaml.",
        conflicts=[[r"frontend|web ui|dashboard", r"pnpm|yarn|\bnpm\b|package manager"]],
        lexical=[
            "Which package manager does the frontend use?",
            "Can I use yarn in the frontend workspace?",
            "What is the frontend lockfile?",
        ],
        paraphrased=[
            "What should I install JavaScript dependencies with for the web UI?",
            "Which Node tool do we standardize on for the browser client?",
            "Adding a React library: which command-line installer do I run?",
        ],
        reworded=[
            "What should I install JavaScript dependencies with for the frontend?",
            "Adding a React library to the frontend: which installer do I run?",
        ],
    ),
    dict(
        id="timestamps-utc",
        text="Timestamps are stored in UTC as timestamptz; convert to the user's zone only in the UI.",
        conflicts=[[r"timestamp|time zone|timezone", r"utc|store|convert"]],
        lexical=[
            "How are timestamps stored?",
            "Where do we convert to the user's time zone?",
            "Are timestamps stored in UTC?",
        ],
        paraphrased=[
            "Which clock offset do datetime columns in Postgres hold?",
            "When should local time be applied for display to people?",
            "Should I save dates in Eastern time or something neutral?",
        ],
        reworded=[
            "Which offset do datetime columns hold, UTC or local?",
            "Should I save dates in Eastern time or convert them in the UI?",
        ],
    ),
    dict(
        id="orders-partitioned",
        text="The orders table is partitioned by month; queries must filter on created_at to hit one partition.",
        conflicts=[[r"orders", r"partition"]],
        lexical=[
            "How is the orders table partitioned?",
            "What must queries on the orders table filter on?",
            "Is the orders table partitioned by month?",
        ],
        paraphrased=[
            "Why is my purchase lookup slow unless I give a date range?",
            "How is the big sales ledger split up in the database?",
            "Which field should every lookup of customer purchases constrain?",
        ],
        reworded=[
            "Why is my lookup on the orders table slow unless I give a date range?",
            "How is the purchases table split up?",
        ],
    ),
    dict(
        id="two-approvals",
        text="Pull requests need two approvals, one of them from a code owner.",
        conflicts=[[r"approv|review", r"pull request|\bpr\b|prs|merge"]],
        lexical=[
            "How many approvals do pull requests need?",
            "Do pull requests need a code owner's approval?",
            "Who needs to approve a pull request?",
        ],
        paraphrased=[
            "How many reviewers must sign off before merging?",
            "Whose consent is required for a change to land on main?",
            "What is the sign-off rule for getting my branch merged?",
        ],
        reworded=[
            "How many reviewers must sign off before a pull request merges?",
            "Whose approval is required for a change to land on main?",
        ],
    ),
    dict(
        id="testcontainers-docker",
        text="Integration tests need Docker running: they start Postgres and Redis with testcontainers.",
        conflicts=[[r"integration test", r"docker|testcontainers|postgres|redis"]],
        lexical=[
            "Why do integration tests need Docker?",
            "How do the integration tests start Postgres?",
            "Do the integration tests use testcontainers?",
        ],
        paraphrased=[
            "The end-to-end checks fail immediately on my laptop: what daemon is missing?",
            "How do the system-level specs get a database and cache to talk to?",
            "What must be installed before the slower suite can spin up its dependencies?",
        ],
        reworded=[
            "The integration suite fails at once on my laptop: what daemon is missing?",
            "How do the integration specs get a database and a cache?",
        ],
    ),
    dict(
        id="rate-limit-600",
        text="The API rate limit is 600 requests per minute per token; exceeding it returns 429.",
        conflicts=[[r"rate limit|throttl|429"]],
        lexical=[
            "What is the API rate limit?",
            "What does the API return when the rate limit is exceeded?",
            "How many requests per minute per token are allowed?",
        ],
        paraphrased=[
            "How often can one client call our endpoints before getting throttled?",
            "What status code means a caller is sending too fast?",
            "What is the throttling ceiling for integrations hitting our HTTP interface?",
        ],
        reworded=[
            "How often can one client call the API before getting throttled?",
            "What status code means a caller is sending requests too fast?",
        ],
    ),
    dict(
        id="british-no-emoji",
        text="The user wants explanations in British English and no emojis.",
        conflicts=[[r"british|emoji|american"]],
        lexical=[
            "Which English does the user want?",
            "Does the user want emojis?",
            "What language does the user want explanations in?",
        ],
        paraphrased=[
            "Should I spell it colour or color when writing to them?",
            "Are smiley pictograms welcome in replies?",
            "What tone and spelling conventions does the developer expect in my answers?",
        ],
        reworded=[
            "Should I spell it colour or color in explanations?",
            "Are emojis welcome in replies?",
        ],
    ),
    dict(
        id="dependabot-monday",
        text="Dependabot PRs are merged on Mondays after the nightly suite passes.",
        conflicts=[[r"dependabot|renovate|dependency update|dependency bump"]],
        lexical=[
            "When are Dependabot PRs merged?",
            "What must pass before Dependabot PRs are merged?",
            "On which day do we merge Dependabot PRs?",
        ],
        paraphrased=[
            "When do automated library upgrade proposals get accepted?",
            "Which weekday do bot-opened version bumps land?",
            "What's our routine for the robot's package update requests?",
        ],
        reworded=[
            "When do automated dependency upgrade PRs get accepted?",
            "Which weekday do the bot's version bumps get merged?",
        ],
    ),
    dict(
        id="media-s3-cloudfront",
        text="Images are uploaded to the orchard-media S3 bucket and served through CloudFront.",
        conflicts=[[r"image|photo|avatar|media", r"bucket|s3|cloudfront|cdn"]],
        lexical=[
            "Which S3 bucket are images uploaded to?",
            "How are images served?",
            "What is the media bucket called?",
        ],
        paraphrased=[
            "Where do user pictures end up, and what CDN delivers them?",
            "Which object storage holds photos people attach?",
            "How do profile avatars reach browsers?",
        ],
        reworded=[
            "Where do user pictures end up, and which CDN delivers images?",
            "Which bucket holds the photos people attach?",
        ],
    ),
    dict(
        id="msrv-180",
        text="The Rust workspace's MSRV is 1.80; don't use features stabilised later.",
        conflicts=[[r"msrv|minimum supported rust|rust-version"]],
        lexical=[
            "What is the MSRV of the Rust workspace?",
            "Can I use features stabilised after 1.80?",
            "Which MSRV does the workspace have?",
        ],
        paraphrased=[
            "What is the oldest compiler release our crates must still build with?",
            "Is it fine to rely on brand-new syntax from the latest toolchain?",
            "How old a cargo toolchain do we promise to support?",
        ],
        reworded=[
            "What is the oldest Rust compiler our crates must build with?",
            "Can I rely on brand-new language features from the latest toolchain?",
        ],
    ),
    dict(
        id="cursor-pagination",
        text="Pagination in the public API is cursor-based; offset pagination was removed in v2.",
        conflicts=[[r"paginat|cursor|offset"]],
        lexical=[
            "Is pagination in the public API cursor-based?",
            "Was offset pagination removed?",
            "How does pagination in the public API work?",
        ],
        paraphrased=[
            "How do I fetch the next page of results from the external endpoints?",
            "Can clients still skip N records with a numeric parameter?",
            "How should integrators walk through long listings?",
        ],
        reworded=[
            "How do I fetch the next page of results from the public endpoints?",
            "Can API clients still skip N records with a numeric parameter?",
        ],
    ),
    dict(
        id="not-null-backfill",
        text="When a migration adds a NOT NULL column, add it nullable first, backfill, then set the constraint in a later release.",
        conflicts=[[r"not null|nullable|backfill"]],
        lexical=[
            "How do we add a NOT NULL column in a migration?",
            "Should a new NOT NULL column be backfilled first?",
            "When is the NOT NULL constraint set?",
        ],
        paraphrased=[
            "What's the safe sequence for introducing a required field to a big table?",
            "How do I avoid locking production when making a field mandatory?",
            "What steps keep a schema change that forbids empty values from breaking deploys?",
        ],
        reworded=[
            "What's the safe sequence for introducing a required column to a big table?",
            "How do I make a field mandatory in a migration without locking production?",
        ],
    ),
    dict(
        id="deploy-flow",
        text="Staging deploys happen automatically on every merge to main; production deploys are manual via the Release workflow.",
        conflicts=[[r"production", r"deploy|release|ship"], [r"staging", r"deploy"]],
        lexical=[
            "How do production deploys happen?",
            "Do staging deploys happen on every merge to main?",
            "Which workflow runs production deploys?",
        ],
        paraphrased=[
            "How does new code get to customers?",
            "Does shipping to the live site occur by itself once a branch lands?",
            "Which GitHub Actions pipeline pushes a version out to real users?",
        ],
        reworded=[
            "How does new code get to production?",
            "Does shipping to staging occur by itself once a branch lands on main?",
        ],
    ),
    dict(
        id="no-unwrap",
        text="The user dislikes unwrap() in library code; use ? or expect with a reason.",
        conflicts=[[r"unwrap|expect\("]],
        lexical=[
            "Does the user allow unwrap() in library code?",
            "What should I use instead of unwrap?",
            "Is expect with a reason OK in library code?",
        ],
        paraphrased=[
            "How should fallible calls be handled in our crates, according to the developer's taste?",
            "What panicking shortcut on Option and Result should I avoid?",
            "How does the maintainer want errors propagated in non-binary modules?",
        ],
        reworded=[
            "How should fallible calls be handled in library crates?",
            "Which panicking shortcut on Option and Result does the user want avoided?",
        ],
    ),
    dict(
        id="redis-cache-only",
        text="Redis is only a cache: anything in it must be safe to lose, so never store sessions there.",
        conflicts=[[r"redis", r"session|cache|lose|persist"]],
        lexical=[
            "Can we store sessions in Redis?",
            "Is Redis only a cache?",
            "What must be true of anything in Redis?",
        ],
        paraphrased=[
            "Can I keep login state in the in-memory key-value database?",
            "What guarantees does our ephemeral data layer give?",
            "Is it okay if the in-memory database gets flushed?",
        ],
        reworded=[
            "Can I keep login sessions in the in-memory key-value database?",
            "What happens if Redis gets flushed?",
        ],
    ),
    dict(
        id="i18n-locales",
        text="Error messages shown to users are translated; add every new string to locales/en.json.",
        conflicts=[[r"translat|locale|i18n|locali"]],
        lexical=[
            "Where do new strings go for translation?",
            "Are error messages shown to users translated?",
            "Which file gets every new string?",
        ],
        paraphrased=[
            "I'm creating a UI label: which catalogue do I register the text in?",
            "How do we support other languages for interface copy?",
            "Where does the English source for the interface wording live?",
        ],
        reworded=[
            "I'm creating a UI label: which file do I register the new string in?",
            "How do we support other languages for error text?",
        ],
    ),
    dict(
        id="billing-owner",
        text="The billing service is written in Go and owned by the payments team; ask in #payments before changing it.",
        conflicts=[[r"billing service", r"own|written in|maintain|ask"]],
        lexical=[
            "Who owns the billing service?",
            "What language is the billing service written in?",
            "Where do I ask before changing the billing service?",
        ],
        paraphrased=[
            "Whom should I consult prior to touching the invoicing code?",
            "Which Slack channel do I ping prior to modifying the invoicing component?",
            "What programming language is the invoicing backend in?",
        ],
        reworded=[
            "Whom should I consult before touching the billing code?",
            "What programming language is the invoicing service in?",
        ],
    ),
    dict(
        id="insta-snapshots",
        text="Snapshot tests use insta; update snapshots with `cargo insta review`.",
        conflicts=[[r"snapshot|insta\b|golden"]],
        lexical=[
            "How do I update snapshot tests?",
            "Which crate do the snapshot tests use?",
            "What command reviews insta snapshots?",
        ],
        paraphrased=[
            "The golden output files changed: how do I accept the new versions?",
            "Which crate handles our expected-output assertions?",
            "How do I approve differences in recorded fixtures?",
        ],
        reworded=[
            "The golden output files changed: how do I accept the new snapshots?",
            "Which crate handles our expected-output tests?",
        ],
    ),
    dict(
        id="cache-tenant-key",
        text="Cache keys must include the tenant id to avoid cross-tenant leaks.",
        conflicts=[[r"cache key|tenant"]],
        lexical=[
            "What must cache keys include?",
            "How do we avoid cross-tenant leaks in the cache?",
            "Do cache keys include the tenant id?",
        ],
        paraphrased=[
            "What identifier has to be part of every memoized lookup name so customers never see each other's data?",
            "How do we keep one organisation's results from showing up for another in memoized responses?",
            "What's the rule for namespacing memoized entries per customer?",
        ],
        reworded=[
            "What identifier has to be part of every cache key?",
            "How do we keep one customer's results from showing up for another in the cache?",
        ],
    ),
    dict(
        id="pagerduty-15min",
        text="The on-call rotation is in PagerDuty; the primary must acknowledge pages within 15 minutes.",
        conflicts=[[r"on-call|pagerduty|pager|acknowledge"]],
        lexical=[
            "Where is the on-call rotation?",
            "How quickly must the on-call primary acknowledge pages?",
            "Which tool holds the on-call rotation?",
        ],
        paraphrased=[
            "How fast do I have to respond when I'm woken up by an alert?",
            "Which service schedules who is responsible for incidents each week?",
            "What's the reply deadline for whoever is handling emergencies this week?",
        ],
        reworded=[
            "How fast do I have to respond when I'm paged?",
            "Which service schedules the on-call engineer each week?",
        ],
    ),
    dict(
        id="tracing-not-log",
        text="Use tracing spans, not log macros, in the Rust services.",
        conflicts=[[r"tracing|log macro|println"]],
        lexical=[
            "Should the Rust services use tracing or log macros?",
            "Are log macros allowed in the Rust services?",
            "What do Rust services use instead of log macros?",
        ],
        paraphrased=[
            "What instrumentation library is standard in our backend crates?",
            "How should I emit diagnostics from our daemons?",
            "Is println-style debugging output acceptable, or is there a structured alternative?",
        ],
        reworded=[
            "What instrumentation library is standard in our Rust crates?",
            "Is println-style debugging output acceptable in services?",
        ],
    ),
    dict(
        id="android-jdk17",
        text="The Android build needs JDK 17; JDK 21 breaks the Gradle plugin.",
        conflicts=[[r"\bjdk\b|\bjava\b"], [r"android", r"build|gradle"]],
        lexical=[
            "Which JDK does the Android build need?",
            "Does JDK 21 break the Gradle plugin?",
            "What JDK version is needed for the Android build?",
        ],
        paraphrased=[
            "Which Java do I install to compile the phone app for Google's platform?",
            "Why does the mobile compile fail with the newest Java?",
            "What toolkit release keeps the Kotlin app's tooling happy?",
        ],
        reworded=[
            "Which Java do I install to build the Android app?",
            "Why does the Gradle compile fail with the newest Java?",
        ],
    ),
    dict(
        id="argon2id",
        text="Password hashes use Argon2id with the parameters in auth/src/hash.rs; bcrypt hashes are upgraded on login.",
        conflicts=[[r"password|argon|bcrypt|hash"]],
        lexical=[
            "What algorithm do password hashes use?",
            "Are bcrypt hashes upgraded?",
            "Where are the Argon2id parameters?",
        ],
        paraphrased=[
            "How are user credentials protected at rest?",
            "What happens to old-style secrets when someone signs in?",
            "Which key-derivation function do we apply to stored secrets?",
        ],
        reworded=[
            "How are user passwords protected at rest?",
            "What happens to old-style bcrypt secrets when someone signs in?",
        ],
    ),
    dict(
        id="sidekiq-bulk",
        text="Background jobs go through the Sidekiq queue default; jobs longer than 5 minutes must use the bulk queue.",
        conflicts=[[r"sidekiq|bulk queue|default queue"], [r"queue", r"long|slow|minutes"]],
        lexical=[
            "Which queue should long jobs use?",
            "What is the Sidekiq queue for background jobs?",
            "When must jobs use the bulk queue?",
        ],
        paraphrased=[
            "Where should I put a slow asynchronous task, like a big export?",
            "How do we separate lengthy worker tasks from quick ones?",
            "Which lane handles work that takes a quarter of an hour?",
        ],
        reworded=[
            "Where should I put a slow background task like a big export?",
            "Which queue handles work that takes a quarter of an hour?",
        ],
    ),
    dict(
        id="iso-dates-ui",
        text="Dates in the UI use the ISO format YYYY-MM-DD, per the user's request.",
        conflicts=[[r"date", r"format|iso|yyyy|display"]],
        lexical=[
            "Which date format does the UI use?",
            "Does the UI use ISO dates?",
            "What format should dates in the UI be in?",
        ],
        paraphrased=[
            "How should the front end display a calendar day?",
            "Day-month-year or year-first: what did they ask for on screen?",
            "Which layout of day, month and year appears in the interface?",
        ],
        reworded=[
            "How should the front end display a date?",
            "Day-month-year or year-first: which date layout appears on screen?",
        ],
    ),
    dict(
        id="env-prefix-config",
        text="Config values are read from environment variables prefixed ORCHARD_; the TOML file only holds defaults.",
        conflicts=[[r"environment variable|env var|orchard_"], [r"toml", r"default"]],
        lexical=[
            "Where are config values read from?",
            "What prefix do the config environment variables have?",
            "What does the TOML config file hold?",
        ],
        paraphrased=[
            "How do I override a setting when launching a container?",
            "What namespace do the process-level settings use?",
            "Can I change options without editing anything on disk?",
        ],
        reworded=[
            "How do I override a config setting when launching a container?",
            "What prefix do the process environment settings use?",
        ],
    ),
    dict(
        id="buf-protos",
        text="The gRPC protos live in proto/ and are compiled by `buf generate`; never edit the generated code.",
        conflicts=[[r"proto|grpc|buf generate"]],
        lexical=[
            "Where do the gRPC protos live?",
            "How are the protos compiled?",
            "Can I edit the generated gRPC code?",
        ],
        paraphrased=[
            "How do I regenerate the RPC stubs after touching an interface definition?",
            "Is it okay to hand-modify the service client bindings?",
            "Which directory holds the wire-format schemas for inter-service calls?",
        ],
        reworded=[
            "How do I regenerate the gRPC stubs after touching an interface definition?",
            "Is it okay to hand-modify the generated client bindings?",
        ],
    ),
    dict(
        id="multi-arch-images",
        text="The user works on macOS on Apple Silicon, so Docker images must be multi-arch (amd64 and arm64).",
        conflicts=[[r"multi-arch|arm64|apple silicon|amd64"]],
        lexical=[
            "Why must Docker images be multi-arch?",
            "Which architectures do the Docker images need?",
            "What machine does the user work on?",
        ],
        paraphrased=[
            "Which CPU platforms should container builds target?",
            "What kind of laptop does the developer have, and why does it matter for containers?",
            "Do our container builds need to run on an M-series Mac?",
        ],
        reworded=[
            "Which CPU platforms should Docker builds target?",
            "Do our container images need to run on an M-series Mac?",
        ],
    ),
    dict(
        id="flaky-checkout-midnight",
        text="The flaky test checkout_flow_spec is quarantined; it fails when the test clock crosses midnight.",
        conflicts=[[r"checkout_flow|midnight|quarantin"]],
        lexical=[
            "Why is checkout_flow_spec flaky?",
            "Which flaky test is quarantined?",
            "When does checkout_flow_spec fail?",
        ],
        paraphrased=[
            "Why does the purchase end-to-end scenario break around 00:00?",
            "Which unreliable check did we sideline, and what triggers it?",
            "The basket scenario went red late at night: is that known?",
        ],
        reworded=[
            "Why does the checkout end-to-end spec break around 00:00?",
            "Which unreliable test did we sideline, and what triggers it?",
        ],
    ),
    dict(
        id="rds-read-replica",
        text="Production Postgres runs on RDS with a read replica; analytics queries must use the replica.",
        conflicts=[[r"replica|\brds\b"]],
        lexical=[
            "Where do analytics queries have to run?",
            "Does production Postgres have a read replica?",
            "Where does production Postgres run?",
        ],
        paraphrased=[
            "Which database copy should reporting dashboards hit?",
            "Is our live SQL server managed by AWS?",
            "Where should heavy BI lookups be pointed so they don't slow the primary?",
        ],
        reworded=[
            "Which database copy should analytics dashboards hit?",
            "Is our production SQL server managed by AWS?",
        ],
    ),
    dict(
        id="git-cliff-changelog",
        text="Releases follow semver, and the changelog is generated from conventional commits by git-cliff.",
        conflicts=[[r"changelog|semver|git-cliff|conventional commit"]],
        lexical=[
            "How is the changelog generated?",
            "Do releases follow semver?",
            "What generates the changelog from conventional commits?",
        ],
        paraphrased=[
            "Which tool writes up what changed in each version?",
            "How do we number new versions?",
            "Why do my messages in version control need a feat: or fix: prefix?",
        ],
        reworded=[
            "Which tool writes up what changed in each release?",
            "How do we number new releases?",
        ],
    ),
    dict(
        id="airflow-bigquery",
        text="The nightly data export to the warehouse runs in Airflow and lands in BigQuery by 06:00 UTC.",
        conflicts=[[r"warehouse|bigquery|airflow"]],
        lexical=[
            "When does the nightly data export land in BigQuery?",
            "What runs the nightly export to the warehouse?",
            "Where does the warehouse export land?",
        ],
        paraphrased=[
            "At what hour is yesterday's information available for analysts?",
            "Which orchestrator schedules the ETL into Google's analytics store?",
            "How do business intelligence tables get refreshed each morning?",
        ],
        reworded=[
            "At what hour is yesterday's data available in the warehouse?",
            "Which orchestrator schedules the ETL into BigQuery?",
        ],
    ),
    dict(
        id="vendored-js-csp",
        text="We vendor third-party JavaScript in static/vendor because the CSP forbids external script hosts.",
        conflicts=[[r"\bcsp\b|content security|static/vendor|vendored"]],
        lexical=[
            "Why do we vendor third-party JavaScript?",
            "Where is vendored JavaScript kept?",
            "What does the CSP forbid?",
        ],
        paraphrased=[
            "Can I load a library from a public CDN in the page?",
            "Why are outside libraries copied into the repository instead of linked?",
            "Which security header blocks remotely served code in the browser?",
        ],
        reworded=[
            "Can I load a JavaScript library from a public CDN in the page?",
            "Why are outside libraries copied into static/ instead of linked?",
        ],
    ),
    dict(
        id="restore-anon",
        text="To reproduce production bugs locally, load the anonymised dump with `make restore-anon`.",
        conflicts=[[r"anonymi|restore-anon|dump"]],
        lexical=[
            "How do I reproduce production bugs locally?",
            "What command loads the anonymised dump?",
            "Is there an anonymised dump to load?",
        ],
        paraphrased=[
            "How can I get realistic data on my machine to debug a live issue?",
            "Is there a scrubbed copy of the real database for investigating problems?",
            "Which build target imports the privacy-safe snapshot?",
        ],
        reworded=[
            "How can I get realistic data on my machine to debug a production issue?",
            "Is there a scrubbed copy of the real database for investigating bugs?",
        ],
    ),
    dict(
        id="postmark-sandbox",
        text="Email is sent through Postmark; staging uses the sandbox server token so no real mail goes out.",
        conflicts=[[r"email|mail|postmark|smtp"]],
        lexical=[
            "What do we send email through?",
            "Does staging send real mail?",
            "Which Postmark token does staging use?",
        ],
        paraphrased=[
            "Which provider delivers our transactional messages to inboxes?",
            "Will testing password-reset flows in pre-prod spam actual customers?",
            "How are outgoing notifications kept from reaching people during QA?",
        ],
        reworded=[
            "Which provider delivers our transactional email?",
            "Will testing password-reset flows in staging spam actual customers?",
        ],
    ),
    dict(
        id="upload-25mb",
        text="The maximum upload size is 25 MB, enforced by nginx client_max_body_size.",
        conflicts=[[r"upload", r"size|limit|mb\b"], [r"client_max_body_size|413"]],
        lexical=[
            "What is the maximum upload size?",
            "What enforces the upload size limit?",
            "Is the upload size enforced by nginx?",
        ],
        paraphrased=[
            "How big a file can people attach before the request is refused?",
            "Why does sending a 40-megabyte video fail with 413?",
            "Where is the cap on request payloads configured in the proxy?",
        ],
        reworded=[
            "How big a file can people upload before the request is refused?",
            "Where is the cap on request payloads configured in nginx?",
        ],
    ),
    dict(
        id="failing-test-first",
        text="The user wants a failing test written before any bug fix.",
        conflicts=[[r"failing test|regression test|test first|before (the|any) fix"]],
        lexical=[
            "What does the user want before any bug fix?",
            "Should a failing test be written before a bug fix?",
            "Does the user want a failing test first?",
        ],
        paraphrased=[
            "What should I do first when I find a defect, per the developer's workflow?",
            "Do they expect a reproduction in the suite ahead of the repair?",
            "Is it fine to patch an issue without a red check showing it?",
        ],
        reworded=[
            "What should I do first when I find a bug, per the developer's workflow?",
            "Is it fine to patch an issue without a red test showing it?",
        ],
    ),
    dict(
        id="kafka-topic-names",
        text="Kafka topics are named <domain>.<entity>.v<N>; bump N for breaking schema changes.",
        conflicts=[[r"kafka|topic"]],
        lexical=[
            "How are Kafka topics named?",
            "When do we bump the version in a Kafka topic name?",
            "What is the Kafka topic naming scheme?",
        ],
        paraphrased=[
            "What convention do event stream channels follow?",
            "If I make an incompatible message layout, what do I call its new stream?",
            "How should I title a fresh broker feed for the inventory area?",
        ],
        reworded=[
            "What convention do event stream topics follow?",
            "If I make an incompatible message layout, what do I call its new Kafka stream?",
        ],
    ),
]
