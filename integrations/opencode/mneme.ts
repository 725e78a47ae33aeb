// mneme for opencode: long-term memory from the local mneme daemon.
//
// - session.created      → start the mneme session (a subagent session aliases its parent),
//                          naming the tools below so the instructions name them
// - chat.message         → first-turn automatic recall for the user's prompt
// - system transform     → the memory guide, recent memories and the recalled block — not for
//                          side requests (the title generator), which the daemon classifies
// - session.idle         → automatic retain of the conversation on its cadence
// - session compacting   → the memory context spliced into the compaction prompt
// - session.deleted      → end the session: the turns not retained yet are retained
// - tools mneme_retain / mneme_recall
//
// A session is sent as its newest messages within half the daemon's body limit, with the number
// of user turns left out, so a long session is not refused (413) and no turn is lost.
//
// It fails open and stays quick: every hook gives up within its bound in total (every hook
// MNEME_HOOK_TIMEOUT_MS, default 1000; automatic recall MNEME_TIMEOUT_MS, by default the daemon's
// `recall.timeout` (which its session start says) plus the hook bound, 6000 with the defaults, as
// mneme's Claude Code hooks wait: a daemon that gave up on a slow backend answers without
// memories in time, instead of being taken for a hung one), and once a call has timed out the plugin leaves the daemon alone for MNEME_COOLDOWN_MS
// (default 30000), so a hung daemon costs one timeout, not one per hook. The breaker is the file
// `hooks-breaker` beside the token, which mneme's Claude Code hooks share: a second opencode
// process (the next `opencode run`) skips a hung daemon too.
// Settings: MNEME_URL (by default where the daemon listens: the address its pidfile records
// while it runs, else mneme's config's `server.listen`, else http://127.0.0.1:6366), MNEME_TOKEN
// or the token file (MNEME_TOKEN_FILE, by default `token` in mneme's storage dir: the config's
// `storage.dir`, else $XDG_DATA_HOME/mneme). mneme's config is found as mneme finds it
// (MNEME_CONFIG, else $XDG_CONFIG_HOME/mneme/config.toml), and MNEME_SERVER__LISTEN and
// MNEME_STORAGE__DIR override it as they do the daemon's. MNEME_PLUGIN_LOG names a file that
// gets one JSON line per hook with how long it took (to see what memory costs a prompt).
import type { Plugin } from "@opencode-ai/plugin"
import { tool } from "@opencode-ai/plugin"
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import { lookup } from "node:dns/promises"
import { isIP } from "node:net"
import {
  appendFileSync,
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs"
import { homedir } from "node:os"
import { dirname, isAbsolute, join } from "node:path"

/** What mneme's config says of where the daemon keeps its files and listens. */
const SETUP = mnemeSetup()
const URL_SET = process.env.MNEME_URL
const HOOK_MS = Number(process.env.MNEME_HOOK_TIMEOUT_MS ?? 1000)
/** The bound of a hook that recalls: set, or the daemon's recall.timeout plus HOOK_MS once known. */
const RECALL_SET = process.env.MNEME_TIMEOUT_MS
let recallMs = Number(RECALL_SET ?? 5000 + HOOK_MS)
const COOLDOWN_MS = Number(process.env.MNEME_COOLDOWN_MS ?? 30000)
const TOOLS = { recall: "mneme_recall", retain: "mneme_retain" }

function mnemeSetup(): { dir: string; listen: string } {
  const home = homedir()
  const xdg = (name: string, fallback: string) => {
    const v = process.env[name]
    return v && isAbsolute(v) ? v : join(home, fallback)
  }
  // Made absolute as mneme makes it, not normalized: `resolve` took `link/..` for the folder the
  // path names, where the system (and mneme) goes to the link's target's parent (review69 #2).
  const named = process.env.MNEME_CONFIG || join(xdg("XDG_CONFIG_HOME", ".config"), "mneme", "config.toml")
  const configPath = isAbsolute(named) ? named : `${process.cwd()}/${named}`
  let file: any = {}
  try {
    // opencode runs plugins on Bun, which reads TOML; a file that is missing or invalid is the
    // daemon's to report: the defaults stand here. So do they for a file another user may
    // change, which mneme's CLI and daemon refuse too: its storage.dir and server.listen chose
    // the daemon (and the token) the conversation went to, and another user's daemon holding
    // the token that user's folder held passed the proof.
    const text = ownConfigText(configPath)
    if (text !== undefined) file = readConfig(text)
  } catch {}
  // As mneme resolves a path: $NAME and ${NAME} from the environment, a leading ~/ is the home,
  // a relative one is from the config's folder.
  const path = (written: string) => {
    const p = written.replace(/\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)/g, (_, a, b) => process.env[a ?? b] ?? "")
    const expanded = p === "~" ? home : p.startsWith("~/") ? join(home, p.slice(2)) : p
    // Joined as written, not normalized: `link/..` goes where the system takes it (review70 #1).
    return isAbsolute(expanded) ? expanded : `${dirname(configPath)}/${expanded}`
  }
  const dirSet = process.env.MNEME_STORAGE__DIR || (typeof file?.storage?.dir === "string" ? file.storage.dir : "")
  const dir = dirSet.trim() ? path(dirSet) : join(xdg("XDG_DATA_HOME", join(".local", "share")), "mneme")
  const listen = process.env.MNEME_SERVER__LISTEN || (typeof file?.server?.listen === "string" ? file.server.listen : "")
  return { dir, listen: listen || "127.0.0.1:6366" }
}

/**
 * The config's TOML; with a syntax error elsewhere (an edit in progress), its `[server]` and
 * `[storage]` sections read alone, as mneme's CLI and hooks read them: the whole file was
 * ignored, and a daemon on another port or folder was not found.
 */
function readConfig(text: string): any {
  const toml = (globalThis as any).Bun?.TOML
  if (!toml) return {}
  try {
    return toml.parse(text) ?? {}
  } catch {}
  let inside = false
  const kept: string[] = []
  for (const line of text.split("\n")) {
    const header = line.trim().match(/^\[\s*([^\]]*?)\s*\]/)
    if (header) inside = header[1] === "server" || header[1] === "storage"
    if (inside) kept.push(line)
  }
  try {
    return toml.parse(kept.join("\n")) ?? {}
  } catch {
    return {}
  }
}

/**
 * The config file's text, unless another user may change it, as mneme judges it (its
 * `config::read`): a symbolic link of that user's on the way (in a link's target too), a folder
 * on the way theirs or one every user may write in that is not sticky, or the file theirs or one
 * every user may write. Root's are trusted. `undefined` then, or when there is none. The path is
 * walked a part at a time, each link read by hand, and the file is opened where the walk ended
 * (not following a link) and judged as opened: checked by name and read by name again, a link
 * another user swapped in between was read (review67 #4).
 */
function ownConfigText(configPath: string): string | undefined {
  const me = process.geteuid?.() ?? -1
  const foreign = (uid: number) => uid !== me && uid !== 0
  const pending = configPath.split("/").filter(Boolean).reverse()
  let at = "/"
  let hops = 0
  while (pending.length > 0) {
    const part = pending.pop()!
    if (part === ".") continue
    if (part === "..") {
      at = dirname(at)
      continue
    }
    const next = join(at, part)
    let st
    try {
      st = lstatSync(next)
    } catch {
      return undefined
    }
    if (st.isSymbolicLink()) {
      if (foreign(st.uid) || ++hops > 40) return undefined
      const target = readlinkSync(next)
      if (isAbsolute(target)) at = "/"
      pending.push(...target.split("/").filter(Boolean).reverse())
      continue
    }
    if (pending.length > 0) {
      // A folder on the way: theirs, or one another user may replace entries in.
      if (foreign(st.uid) || (st.mode & 0o002 && !(st.mode & 0o1000))) return undefined
    }
    at = next
  }
  // The file's own folder is on the way; so are those above it (checked as walked).
  let fd: number
  try {
    fd = openSync(at, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch {
    return undefined
  }
  try {
    const st = fstatSync(fd)
    if (!st.isFile() || foreign(st.uid) || st.mode & 0o002) return undefined
    return readFileSync(fd, "utf8")
  } finally {
    closeSync(fd)
  }
}

/**
 * Where the daemon answers: MNEME_URL, else the address a running daemon recorded in its pidfile
 * (it listens where it started, whatever the config says since), else the config's. Looked up
 * for each request, so a daemon started (or moved) after opencode is found.
 */
function base(): string {
  if (URL_SET) return URL_SET.replace(/\/$/, "")
  let addr = SETUP.listen
  try {
    const [pid, recorded] = readFileSync(`${SETUP.dir}/mneme.pid`, "utf8").split("\n")
    if (recorded?.trim() && running(Number(pid))) addr = recorded.trim()
  } catch {}
  // A daemon listening on every address is reached on loopback, as mneme's CLI reaches it.
  addr = addr.replace(/^0\.0\.0\.0:/, "127.0.0.1:").replace(/^\[::\]:/, "[::1]:")
  return `http://${addr}`
}

/** Whether a process with this pid runs (one of another user's counts: it cannot be signalled). */
function running(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false
  try {
    process.kill(pid, 0)
    return true
  } catch (e: any) {
    return e?.code === "EPERM"
  }
}

function tokenFile(): string {
  return process.env.MNEME_TOKEN_FILE ?? `${SETUP.dir}/token`
}

function token(): string | undefined {
  // Trimmed as the daemon trims its token file: the proof is keyed with the exact bytes.
  if (process.env.MNEME_TOKEN?.trim()) return process.env.MNEME_TOKEN.trim()
  // Read as the daemon reads it: not through a link, and only a file of this user's. Whoever
  // placed another there chose the token, and a process of theirs answering with its proof was
  // sent the turns (review81 #1).
  let fd: number
  try {
    fd = openSync(tokenFile(), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
  } catch {
    return undefined
  }
  try {
    const st = fstatSync(fd)
    const me = process.geteuid?.() ?? st.uid
    if (!st.isFile() || st.uid !== me) return undefined
    return readFileSync(fd, "utf8").trim()
  } catch {
    return undefined
  } finally {
    closeSync(fd)
  }
}

/** The breaker shared with the other hook processes: the time (ms) a call last timed out. */
const BREAKER = `${dirname(tokenFile())}/hooks-breaker`

function breakerOpen(): boolean {
  try {
    // A trip in the future (the clock was set back since) is not believed.
    const since = Date.now() - Number(readFileSync(BREAKER, "utf8").trim())
    return since >= 0 && since < COOLDOWN_MS
  } catch {
    return false
  }
}

function trip() {
  try {
    writeFileSync(BREAKER + ".tmp", String(Date.now()))
    renameSync(BREAKER + ".tmp", BREAKER)
  } catch {
    // No storage dir here: the breaker only lives in this process.
  }
  skipUntil = performance.now() + COOLDOWN_MS
}

function closeBreaker() {
  if (skipUntil === 0 && !tripped) return
  skipUntil = 0
  tripped = false
  rmSync(BREAKER, { force: true })
}

/**
 * When this process may talk to the daemon again after a timeout (0: now), on the monotonic
 * clock: on the wall clock, one set back two hours kept the plugin off a healthy daemon for two
 * hours, every recall and retain skipped without a word (review63 #6).
 */
let skipUntil = 0
/** Whether the shared breaker file was seen set, by this process or another (to remove it). */
let tripped = false

/** A hook's budget: every call it makes shares it. */
class Budget {
  private readonly end: number
  constructor(ms: number) {
    this.end = performance.now() + ms
  }
  left(): number {
    return this.end - performance.now()
  }
}

/** One request to the daemon; any failure (down, slow, refused) is `null`, never a throw. */
async function call(budget: Budget, method: string, path: string, body?: unknown): Promise<any | null> {
  const res = await send(budget, method, path, body)
  return res?.ok ? res.json : null
}

const UNAVAILABLE = "Memory is unavailable right now (is `mneme serve` running?)."

/**
 * A tool's answer: the daemon's, or why it refused the request (too long, bad input), so the
 * agent is not told memory is down when it was its own input.
 */
function toolAnswer(res: { ok: boolean; json: any } | null): string {
  if (res?.ok && typeof res.json?.message === "string") return res.json.message
  const refused = res?.json?.error?.message
  return typeof refused === "string" ? `mneme refused this: ${refused}` : UNAVAILABLE
}

/**
 * `at` with its host written as each address it is (a name such as `localhost` looked up here,
 * every address it gives, in the order the system gives them), and that address as the daemon's
 * proof names it (`127.0.0.1:6366`, `[::1]:6366`): the proof and the request then go to the one
 * address proven (looked up twice, `localhost` could give ::1, where another user's process may
 * listen, for one and 127.0.0.1 for the other).
 */
async function pinned(at: string): Promise<{ url: string; address: string }[]> {
  const url = new URL(at)
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1")
  const ips = isIP(host) ? [host] : (await lookup(host, { all: true })).map((a) => a.address)
  const port = url.port || (url.protocol === "https:" ? "443" : "80")
  return [...new Set(ips)].map((ip) => {
    const shown = ip.includes(":") ? `[${ip}]` : ip
    const each = new URL(at)
    each.hostname = shown
    return { url: each.toString().replace(/\/$/, ""), address: `${shown}:${port}` }
  })
}

/**
 * One of `at`'s addresses (see `pinned`) where the daemon proves it holds `tok`. Every address
 * is asked at once (the question gives nothing away): asked in turn, one that took the
 * connection and never answered (another user's listener on ::1, a firewall dropping packets)
 * spent the whole budget, and the daemon on the next was never reached. None proving, a timeout
 * among them is the caller's (it trips the breaker).
 */
async function provenAt(at: string, tok: string, budget: Budget): Promise<string | null> {
  const candidates = await pinned(at)
  const left = budget.left()
  if (left <= 0) return null
  const asked = candidates.map(({ url, address }) =>
    proven(url, address, tok, left).then((ok) => (ok ? url : Promise.reject(new Error("not proven")))),
  )
  try {
    return await Promise.any(asked)
  } catch (e: any) {
    const timedOut = (e?.errors ?? []).find((x: any) => x?.name === "TimeoutError" || x?.name === "AbortError")
    if (timedOut) throw timedOut
    return null
  }
}

/**
 * Whether what answers at `at` (the address `address`) holds `tok`: the token goes only to a
 * daemon that proves it (an HMAC-SHA256 of a random challenge and the address the question came
 * in at, keyed with the token, as mneme's CLI checks), since what answers on the port may be
 * another user's process that took it while the daemon was down, or a relay of that user's that
 * passes the question on to the daemon at another address, which proves that address.
 * Asked before every request (one loopback round trip): a proof kept for the process would
 * still stand after the daemon restarted and another process took its port meanwhile.
 */
async function proven(at: string, address: string, tok: string, left: number): Promise<boolean> {
  const challenge = randomBytes(16).toString("hex")
  // The daemon never redirects: a process that redirected the challenge to a daemon holding the
  // token would pass for it, and be sent the token.
  const res = await fetch(`${at}/v1/health?challenge=${challenge}`, { redirect: "error", signal: AbortSignal.timeout(left) })
  const health: any = await res.json().catch(() => null)
  const want = Buffer.from(createHmac("sha256", tok).update(`mneme-health:${challenge}@${address}`).digest("hex"))
  const got = Buffer.from(typeof health?.address_proof === "string" ? health.address_proof : "")
  const ok = got.length === want.length && timingSafeEqual(got, want)
  // The running daemon's body limit, from the daemon proven: one restarted with a lower limit
  // since the session started refused every later turn of a long session (review69 #7).
  if (ok && Number(health?.max_body_bytes) > 0) maxBody = Number(health.max_body_bytes)
  return ok
}

/** One request and its JSON answer (null when it had none); `null` when it did not get one. */
async function send(
  budget: Budget,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ ok: boolean; status: number; json: any } | null> {
  const left = budget.left()
  if (left <= 0 || performance.now() < skipUntil) return null
  // Read at every call (a small file, or none): another process (a Claude Code hook, another
  // opencode) may trip it after this one loaded, and a long-running opencode then waited out its
  // full bound on the hung daemon (review113 #3).
  if (breakerOpen()) {
    tripped = true
    return null
  }
  try {
    const tok = token() ?? ""
    const at = await provenAt(base(), tok, budget)
    if (!at) return null
    // The proof came out of the same budget: what is left of it bounds the request.
    const rest = budget.left()
    if (rest <= 0) return null
    const res = await fetch(at + path, {
      method,
      headers: { "content-type": "application/json", authorization: `Bearer ${tok}` },
      body: body === undefined ? undefined : JSON.stringify(body, wellFormed),
      redirect: "error",
      signal: AbortSignal.timeout(rest),
    })
    closeBreaker()
    return { ok: res.ok, status: res.status, json: await res.json().catch(() => null) }
  } catch (e: any) {
    // Only a daemon that does not answer trips the breaker; one that is down fails at once.
    if (e?.name === "TimeoutError" || e?.name === "AbortError") {
      trip()
      tripped = true
    }
    return null
  }
}

/** Runs a hook, noting how long it took in MNEME_PLUGIN_LOG when that is set. */
async function timed<T>(hook: string, logged: boolean, run: () => Promise<T>): Promise<T> {
  const log = process.env.MNEME_PLUGIN_LOG
  if (!log || !logged) return run()
  const started = Date.now()
  try {
    return await run()
  } finally {
    try {
      appendFileSync(log, JSON.stringify({ hook, ms: Date.now() - started }) + "\n")
    } catch {
      // Timing is a diagnostic: never a failure.
    }
  }
}

/** The events the plugin acts on (the others are not worth a line in the timing log). */
const HANDLED = new Set(["session.created", "session.idle", "session.deleted"])

type Msg = { role: string; content: string }

/** The largest body the daemon takes (its session start says; 4 MiB, its default, until then). */
let maxBody = 4 * 1024 * 1024

/**
 * A JSON replacer that puts U+FFFD in place of an unpaired UTF-16 surrogate (half an emoji cut by
 * a paste, a tool or another plugin): JSON.stringify writes one as `\ud83d`, which the daemon
 * refuses, and every later turn of the session, sent with it, was refused too.
 */
function wellFormed(_key: string, value: unknown): unknown {
  return typeof value === "string" ? value.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD") : value
}

/** A user message the daemon counts as a turn (it skips those with no letter or digit). */
const hasSubstance = (text: string) => /[\p{L}\p{N}]/u.test(text)

/**
 * The newest messages whose JSON fits in `maxBytes`, and how many user turns were left out before
 * them: a session too long for one request goes without its start rather than be refused (413),
 * which would lose every later turn. The message at the cut keeps its end when it is the newest
 * alone, or the newest turn's prompt: left out whole, a long paste was counted as a turn already
 * there and never stored, its reply stored with no prompt.
 */
function tail(messages: Msg[], maxBytes: number): { messages: Msg[]; omitted: number } {
  let start = messages.length
  let size = 0
  while (start > 0) {
    const len = Buffer.byteLength(JSON.stringify(messages[start - 1])) + 1
    if (size + len > maxBytes) break
    size += len
    start -= 1
  }
  const kept = messages.slice(start)
  let cutOff = ""
  const newestPrompt = messages.map((m) => m.role).lastIndexOf("user")
  if (start > 0 && (kept.length === 0 || newestPrompt === start - 1)) {
    start -= 1
    const at = messages[start]
    // Escaping can double a text's length: a quarter of the room left always fits.
    const cut = endOf(at.content, Math.floor((maxBytes - size) / 4))
    cutOff = cut.cutOff
    kept.unshift({ role: at.role, content: cut.end })
  }
  const left = messages.slice(0, start).map((m) => m.content).concat(cutOff)
  // What is kept may begin inside a span the left-out part opened: it stays private (the daemon
  // sees only the kept part, and would take its close tag for a stray one).
  const open = privateDepth(left.join("\n"))
  if (kept.length > 0 && open > 0) kept[0] = { ...kept[0], content: "<private>".repeat(open) + kept[0].content }
  const omitted = messages.slice(0, start).filter((m) => m.role === "user" && hasSubstance(m.content)).length
  return { messages: kept, omitted }
}

/** `content`'s end within `keep` bytes of UTF-8, and what is cut off before it. */
function endOf(content: string, keep: number): { end: string; cutOff: string } {
  if (Buffer.byteLength(content) <= keep) return { end: content, cutOff: "" }
  // A UTF-16 unit is at most 3 bytes of UTF-8; a surrogate pair is not cut in half.
  let at = content.length - Math.floor(keep / 3)
  if (/^[\uDC00-\uDFFF]/.test(content.slice(at))) at += 1
  // Not inside a tag's name: `…<priv` cut off and `ate>…` kept would each be no tag.
  const partial = /<\/?[a-z]{0,7}$/i.exec(content.slice(Math.max(0, at - 9), at))?.[0].toLowerCase()
  if (partial && ("<private".startsWith(partial) || "</private".startsWith(partial))) at -= partial.length
  return { end: content.slice(at), cutOff: content.slice(0, at) }
}

/** A `<private>` or `</private>` tag as the daemon reads one: any case, attributes allowed. */
const PRIVATE_TAG = /<(\/?)private(?:$|>|[\s/][^>]*(?:>|$))/gi

/** How many `<private>` spans `text` leaves open at its end (nested ones each count). */
function privateDepth(text: string): number {
  let depth = 0
  for (const tag of text.matchAll(PRIVATE_TAG)) depth = tag[1] ? Math.max(0, depth - 1) : depth + 1
  return depth
}

/**
 * opencode messages → `[{role, content}]`, text parts only. A compaction's summary (an assistant
 * message marked `summary`) is left out: it restates the conversation before it, which is stored
 * already, and may restate what `<private>` spans hid there without the tags.
 */
function flatten(messages: any[] | undefined): Msg[] {
  return (messages ?? [])
    .filter((m: any) => !(m?.info?.role === "assistant" && (m?.info?.summary === true || m?.info?.mode === "compaction")))
    .map((m: any) => ({
      role: m?.info?.role ?? "",
      content: (m?.parts ?? [])
        .filter((p: any) => p?.type === "text" && !p?.synthetic)
        .map((p: any) => p.text)
        .join("\n"),
    }))
    .filter((m: Msg) => (m.role === "user" || m.role === "assistant") && m.content.trim() !== "")
}

export const MnemePlugin: Plugin = async ({ client, directory }) => {
  const started = new Set<string>()
  /** System prompts already classified (the title generator's and the agent's repeat). */
  const kinds = new Map<string, string>()
  const sid = (id: string) => encodeURIComponent(id)

  /** Sessions' parents, as `session.created` told them (a subagent's session has one). */
  const parents = new Map<string, string>()
  /** Session starts under way: a second hook for the same session waits for the first's. */
  const starting = new Map<string, Promise<void>>()

  /**
   * Starts the session with the daemon once. opencode does not wait for its event hooks, so a
   * subagent's first `chat.message` can come before its `session.created`: the parent is then
   * asked of opencode, since a start without it would make the subagent a session of its own
   * (its own recall, its transcript retained apart).
   */
  async function ensure(budget: Budget, id: string, parent?: string) {
    if (parent) parents.set(id, parent)
    if (started.has(id)) return
    const running = starting.get(id)
    if (running) return running
    const start = (async () => {
      const parentId = parents.get(id) ?? (await parentOf(id))
      const body = { session_id: id, cwd: directory, agent: "opencode", parent_session_id: parentId, tools: TOOLS }
      const res = await call(budget, "POST", "/v1/sessions", body)
      if (!res) return
      started.add(id)
      if (Number(res.max_body_bytes) > 0) maxBody = Number(res.max_body_bytes)
      if (RECALL_SET === undefined && Number(res.recall_timeout_ms) > 0) recallMs = Number(res.recall_timeout_ms) + HOOK_MS
    })()
    starting.set(id, start)
    try {
      await start
    } finally {
      starting.delete(id)
    }
  }

  /**
   * A request to one of the session's routes. A session the daemon does not know (it ended it:
   * idle for 30 days, or past its most live sessions) is started again, and asked again: the
   * plugin started a session once a process, and every later turn of one the daemon had ended
   * was refused, not stored, and recalled nothing (review68 #1). Started again, it goes on
   * where it stopped.
   */
  async function onSession(budget: Budget, id: string, method: string, rest: string, body?: unknown) {
    const path = `/v1/sessions/${sid(id)}${rest}`
    const res = await send(budget, method, path, body)
    if (res?.status !== 404 || res.json?.error?.code !== "unknown_session") return res
    started.delete(id)
    await ensure(budget, id)
    return started.has(id) ? send(budget, method, path, body) : res
  }

  /** The session's parent as opencode has it (none when it cannot say). */
  async function parentOf(id: string): Promise<string | undefined> {
    try {
      const res: any = await client.session.get({ path: { id } })
      const parent = (res?.data ?? res)?.parentID
      if (typeof parent === "string" && parent !== "") {
        parents.set(id, parent)
        return parent
      }
    } catch {
      // An older opencode, or none to ask: the session starts as its own.
    }
    return undefined
  }

  /** The session's messages that fit in half a request (the rest is room for the prompt), and
   * the ids of all of its messages. */
  async function history(id: string): Promise<{ messages: Msg[]; omitted: number; ids: string[] }> {
    try {
      const res: any = await client.session.messages({ path: { id } })
      const all: any[] = res?.data ?? res ?? []
      const ids = all.map((m: any) => m?.info?.id).filter((x: any): x is string => typeof x === "string")
      return { ...tail(flatten(all), Math.floor(maxBody / 2)), ids }
    } catch {
      return { messages: [], omitted: 0, ids: [] }
    }
  }

  /** Each session's message ids as its last turn sent them. */
  const sentIds = new Map<string, string[]>()
  /** Sessions an undo was seen in: told on every later turn (as the Claude Code hooks tell a
   * rewind the transcript holds), since the daemon acts on it only when a history has left the
   * turns it knows, which may be a later turn than the one the undo was seen at (an undo then
   * the same prompt again). */
  const undone = new Set<string>()

  /**
   * Whether the user undid turns since the last turn sent (`/undo`: opencode deletes the messages
   * after the one reverted to once the next prompt is sent): the messages that went are the last
   * ones sent (all of them, back to before the first prompt), and those before them are all
   * still there. Told so, the daemon replaces the
   * session's stored document with the branch now taken, without the turns undone; anything else
   * that drops messages is not called an undo (the daemon then keeps what it stored).
   */
  function undoneSince(id: string, ids: string[]): boolean {
    if (ids.length === 0) return false // opencode did not answer: the ids last sent stay
    const before = sentIds.get(id)
    sentIds.delete(id)
    sentIds.set(id, ids)
    if (sentIds.size > 256) sentIds.delete(sentIds.keys().next().value as string)
    if (!before || ids.length === 0) return false
    const now = new Set(ids)
    // From the first message on (an undo to before the first prompt) too: its turns, a key pasted
    // by mistake among them, stayed stored, and the new conversation went to a part of its own.
    const firstGone = before.findIndex((x) => !now.has(x))
    return firstGone >= 0 && before.slice(firstGone).every((x) => !now.has(x))
  }

  /** Whether a model call with this system prompt is the agent's work (not a title or summary). */
  async function isWork(budget: Budget, system: string[]): Promise<boolean> {
    const key = system.join("\n\n")
    let kind = kinds.get(key)
    if (kind === undefined) {
      // Only the system prompt is known here: judged by the patterns alone (the score counts
      // messages and tools, and a custom agent's short prompt scored as a title request).
      const body = { headers: {}, body: { messages: system.map((content) => ({ role: "system", content })) }, system_only: true }
      const res = await call(budget, "POST", "/v1/classify", body)
      if (!res?.kind) return false
      kind = res.kind as string
      if (kinds.size > 64) kinds.clear()
      kinds.set(key, kind)
    }
    return kind === "normal"
  }

  return {
    event: ({ event }: any) => timed(`event:${event?.type}`, HANDLED.has(event?.type), async () => {
      const info = event?.properties?.info
      const id: string | undefined = event?.properties?.sessionID ?? info?.id
      if (!id) return
      const budget = new Budget(HOOK_MS)
      if (event.type === "session.created") await ensure(budget, id, info?.parentID)
      if (event.type === "session.idle") {
        // The bound is for the daemon: reading opencode's own history does not use it up (on a
        // long session it did, and the daemon was then taken for a hung one).
        const { messages, omitted, ids } = await history(id)
        const budget = new Budget(HOOK_MS)
        await ensure(budget, id)
        if (undoneSince(id, ids)) undone.add(id)
        const rewound = undone.has(id)
        const body = { messages, omitted_user_turns: omitted, agent: "opencode", wait: false, ...(rewound ? { rewound } : {}) }
        const sent = await onSession(budget, id, "POST", "/agent-end", body)
        if (sent?.status === 413) {
          // Too long for the daemon as it runs now (restarted with a lower limit): its proof
          // just said its limit, and the history cut to it goes again.
          const again = await history(id)
          const cut = { ...body, messages: again.messages, omitted_user_turns: again.omitted }
          await onSession(budget, id, "POST", "/agent-end", cut)
        }
      }
      if (event.type === "session.deleted") {
        await call(budget, "DELETE", `/v1/sessions/${sid(id)}?wait=false`)
        started.delete(id)
        parents.delete(id)
        sentIds.delete(id)
        undone.delete(id)
      }
    }),

    "chat.message": (input: any, output: any) => timed("chat.message", true, async () => {
      // The user's words: not the parts opencode adds (an attached file's whole text).
      const prompt = (output?.parts ?? [])
        .filter((p: any) => p?.type === "text" && !p?.synthetic)
        .map((p: any) => p.text)
        .join("\n")
      if (!input?.sessionID || !prompt.trim()) return
      const messages = (await history(input.sessionID)).messages
      const budget = new Budget(recallMs)
      await ensure(budget, input.sessionID)
      // The block is cached by the daemon and comes back with the instructions below.
      await onSession(budget, input.sessionID, "POST", "/agent-start", {
        prompt,
        messages,
        agent: input.agent ?? "opencode",
      })
    }),

    "experimental.chat.system.transform": (input: any, output: any) => timed("system.transform", true, async () => {
      if (!input?.sessionID) return
      const budget = new Budget(HOOK_MS)
      if (!(await isWork(budget, output.system ?? []))) return
      await ensure(budget, input.sessionID)
      const res = await onSession(budget, input.sessionID, "GET", "/instructions")
      if (res?.ok && res.json?.markdown) output.system.push(res.json.markdown)
    }),

    "experimental.session.compacting": (input: any, output: any) => timed("session.compacting", true, async () => {
      if (!input?.sessionID) return
      const messages = (await history(input.sessionID)).messages
      const budget = new Budget(recallMs)
      const res = await onSession(budget, input.sessionID, "POST", "/compaction", { messages })
      if (res?.ok && res.json?.context) output.context.push(res.json.context)
    }),

    tool: {
      mneme_retain: tool({
        description: "Remember a durable fact across sessions (decisions, conventions, how to build and test, preferences).",
        args: { content: tool.schema.string().describe("The fact to remember") },
        async execute(args: { content: string }, ctx: any) {
          const budget = new Budget(HOOK_MS)
          await ensure(budget, ctx.sessionID)
          return toolAnswer(await onSession(budget, ctx.sessionID, "POST", "/retain", { items: [{ content: args.content }] }))
        },
      }),
      mneme_recall: tool({
        description: "Search long-term memory for what earlier sessions learned about the current work.",
        args: { query: tool.schema.string().describe("What to look for") },
        async execute(args: { query: string }, ctx: any) {
          const budget = new Budget(recallMs)
          await ensure(budget, ctx.sessionID)
          return toolAnswer(await onSession(budget, ctx.sessionID, "POST", "/recall", { query: args.query }))
        },
      }),
    },
  }
}

export default MnemePlugin
