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
// It fails open and stays quick: every hook gives up within its bound in total (automatic
// recall MNEME_TIMEOUT_MS, default 3000; every other hook MNEME_HOOK_TIMEOUT_MS, default 1000),
// and once a call has timed out the plugin leaves the daemon alone for MNEME_COOLDOWN_MS
// (default 30000), so a hung daemon costs one timeout, not one per hook. The breaker is the file
// `hooks-breaker` beside the token, which mneme's Claude Code hooks share: a second opencode
// process (the next `opencode run`) skips a hung daemon too.
// Settings: MNEME_URL (default http://127.0.0.1:6366), MNEME_TOKEN or the token file
// (MNEME_TOKEN_FILE, default $XDG_DATA_HOME/mneme/token); MNEME_PLUGIN_LOG names a file that
// gets one JSON line per hook with how long it took (to see what memory costs a prompt).
import type { Plugin } from "@opencode-ai/plugin"
import { tool } from "@opencode-ai/plugin"
import { appendFileSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { homedir } from "node:os"
import { dirname, join } from "node:path"

const BASE = (process.env.MNEME_URL ?? "http://127.0.0.1:6366").replace(/\/$/, "")
const RECALL_MS = Number(process.env.MNEME_TIMEOUT_MS ?? 3000)
const HOOK_MS = Number(process.env.MNEME_HOOK_TIMEOUT_MS ?? 1000)
const COOLDOWN_MS = Number(process.env.MNEME_COOLDOWN_MS ?? 30000)
const TOOLS = { recall: "mneme_recall", retain: "mneme_retain" }

function tokenFile(): string {
  const data = process.env.XDG_DATA_HOME || join(homedir(), ".local", "share")
  return process.env.MNEME_TOKEN_FILE ?? join(data, "mneme", "token")
}

function token(): string | undefined {
  if (process.env.MNEME_TOKEN) return process.env.MNEME_TOKEN
  try {
    return readFileSync(tokenFile(), "utf8").trim()
  } catch {
    return undefined
  }
}

/** The breaker shared with the other hook processes: the time (ms) a call last timed out. */
const BREAKER = join(dirname(tokenFile()), "hooks-breaker")

function breakerOpen(): boolean {
  try {
    return Date.now() - Number(readFileSync(BREAKER, "utf8").trim()) < COOLDOWN_MS
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
  skipUntil = Date.now() + COOLDOWN_MS
}

function closeBreaker() {
  if (skipUntil === 0 && !tripped) return
  skipUntil = 0
  tripped = false
  rmSync(BREAKER, { force: true })
}

/** When this process may talk to the daemon again after a timeout (0: now). */
let skipUntil = 0
/** Whether the shared breaker file may be set (checked once a process, then kept up to date). */
let tripped = breakerOpen()

/** A hook's budget: every call it makes shares it. */
class Budget {
  private readonly end: number
  constructor(ms: number) {
    this.end = Date.now() + ms
  }
  left(): number {
    return this.end - Date.now()
  }
}

/** One request to the daemon; any failure (down, slow, refused) is `null`, never a throw. */
async function call(budget: Budget, method: string, path: string, body?: unknown): Promise<any | null> {
  const left = budget.left()
  if (left <= 0 || Date.now() < skipUntil) return null
  if (tripped && breakerOpen()) return null
  try {
    const res = await fetch(BASE + path, {
      method,
      headers: { "content-type": "application/json", authorization: `Bearer ${token() ?? ""}` },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(left),
    })
    closeBreaker()
    return res.ok ? await res.json() : null
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

/** opencode messages → `[{role, content}]`, text parts only. */
function flatten(messages: any[] | undefined): Msg[] {
  return (messages ?? [])
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

  async function ensure(budget: Budget, id: string, parent?: string) {
    if (started.has(id)) return
    const body = { session_id: id, cwd: directory, agent: "opencode", parent_session_id: parent, tools: TOOLS }
    if (await call(budget, "POST", "/v1/sessions", body)) started.add(id)
  }

  async function history(id: string): Promise<Msg[]> {
    try {
      const res: any = await client.session.messages({ path: { id } })
      return flatten(res?.data ?? res)
    } catch {
      return []
    }
  }

  /** Whether a model call with this system prompt is the agent's work (not a title or summary). */
  async function isWork(budget: Budget, system: string[]): Promise<boolean> {
    const key = system.join("\n\n")
    let kind = kinds.get(key)
    if (kind === undefined) {
      const body = { headers: {}, body: { messages: system.map((content) => ({ role: "system", content })) } }
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
        await ensure(budget, id)
        const body = { messages: await history(id), agent: "opencode", wait: false }
        await call(budget, "POST", `/v1/sessions/${sid(id)}/agent-end`, body)
      }
      if (event.type === "session.deleted") {
        await call(budget, "DELETE", `/v1/sessions/${sid(id)}?wait=false`)
        started.delete(id)
      }
    }),

    "chat.message": (input: any, output: any) => timed("chat.message", true, async () => {
      const prompt = (output?.parts ?? []).filter((p: any) => p?.type === "text").map((p: any) => p.text).join("\n")
      if (!input?.sessionID || !prompt.trim()) return
      const budget = new Budget(RECALL_MS)
      await ensure(budget, input.sessionID)
      // The block is cached by the daemon and comes back with the instructions below.
      await call(budget, "POST", `/v1/sessions/${sid(input.sessionID)}/agent-start`, {
        prompt,
        messages: await history(input.sessionID),
        agent: input.agent ?? "opencode",
      })
    }),

    "experimental.chat.system.transform": (input: any, output: any) => timed("system.transform", true, async () => {
      if (!input?.sessionID) return
      const budget = new Budget(HOOK_MS)
      if (!(await isWork(budget, output.system ?? []))) return
      await ensure(budget, input.sessionID)
      const res = await call(budget, "GET", `/v1/sessions/${sid(input.sessionID)}/instructions`)
      if (res?.markdown) output.system.push(res.markdown)
    }),

    "experimental.session.compacting": (input: any, output: any) => timed("session.compacting", true, async () => {
      if (!input?.sessionID) return
      const budget = new Budget(RECALL_MS)
      const res = await call(budget, "POST", `/v1/sessions/${sid(input.sessionID)}/compaction`, {
        messages: await history(input.sessionID),
      })
      if (res?.context) output.context.push(res.context)
    }),

    tool: {
      mneme_retain: tool({
        description: "Remember a durable fact across sessions (decisions, conventions, how to build and test, preferences).",
        args: { content: tool.schema.string().describe("The fact to remember") },
        async execute(args: { content: string }, ctx: any) {
          const budget = new Budget(HOOK_MS)
          await ensure(budget, ctx.sessionID)
          const res = await call(budget, "POST", `/v1/sessions/${sid(ctx.sessionID)}/retain`, {
            items: [{ content: args.content }],
          })
          return res?.message ?? "Memory is unavailable right now (is `mneme serve` running?)."
        },
      }),
      mneme_recall: tool({
        description: "Search long-term memory for what earlier sessions learned about the current work.",
        args: { query: tool.schema.string().describe("What to look for") },
        async execute(args: { query: string }, ctx: any) {
          const budget = new Budget(RECALL_MS)
          await ensure(budget, ctx.sessionID)
          const res = await call(budget, "POST", `/v1/sessions/${sid(ctx.sessionID)}/recall`, { query: args.query })
          return res?.message ?? "Memory is unavailable right now (is `mneme serve` running?)."
        },
      }),
    },
  }
}

export default MnemePlugin
