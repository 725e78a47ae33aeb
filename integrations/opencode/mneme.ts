// mneme for opencode: long-term memory from the local mneme daemon.
//
// - session.created      → start the mneme session (a subagent session aliases its parent)
// - chat.message         → first-turn automatic recall for the user's prompt
// - system transform     → the memory guide, recent memories and the recalled block
// - session.idle         → automatic retain of the conversation, then a flush
// - session compacting   → the memory context spliced into the compaction prompt
// - session.deleted      → end the session (flush)
// - tools mneme_retain / mneme_recall
//
// It fails open: when the daemon is down or slow, every hook returns within the timeout and
// opencode goes on without memory. Settings: MNEME_URL (default http://127.0.0.1:6366),
// MNEME_TOKEN or the token file (MNEME_TOKEN_FILE, default $XDG_DATA_HOME/mneme/token),
// MNEME_TIMEOUT_MS (default 3000).
import type { Plugin } from "@opencode-ai/plugin"
import { tool } from "@opencode-ai/plugin"
import { readFileSync } from "node:fs"
import { homedir } from "node:os"
import { join } from "node:path"

const BASE = (process.env.MNEME_URL ?? "http://127.0.0.1:6366").replace(/\/$/, "")
const TIMEOUT_MS = Number(process.env.MNEME_TIMEOUT_MS ?? 3000)

function token(): string | undefined {
  if (process.env.MNEME_TOKEN) return process.env.MNEME_TOKEN
  const data = process.env.XDG_DATA_HOME || join(homedir(), ".local", "share")
  try {
    return readFileSync(process.env.MNEME_TOKEN_FILE ?? join(data, "mneme", "token"), "utf8").trim()
  } catch {
    return undefined
  }
}

/** One request to the daemon; any failure (down, slow, refused) is `null`, never a throw. */
async function call(method: string, path: string, body?: unknown): Promise<any | null> {
  try {
    const res = await fetch(BASE + path, {
      method,
      headers: { "content-type": "application/json", authorization: `Bearer ${token() ?? ""}` },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(TIMEOUT_MS),
    })
    return res.ok ? await res.json() : null
  } catch {
    return null
  }
}

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
  const sid = (id: string) => encodeURIComponent(id)

  async function ensure(id: string, parent?: string) {
    if (started.has(id)) return
    const ok = await call("POST", "/v1/sessions", { session_id: id, cwd: directory, agent: "opencode", parent_session_id: parent })
    if (ok) started.add(id)
  }

  async function history(id: string): Promise<Msg[]> {
    try {
      const res: any = await client.session.messages({ path: { id } })
      return flatten(res?.data ?? res)
    } catch {
      return []
    }
  }

  return {
    event: async ({ event }: any) => {
      const info = event?.properties?.info
      const id: string | undefined = event?.properties?.sessionID ?? info?.id
      if (!id) return
      if (event.type === "session.created") await ensure(id, info?.parentID)
      if (event.type === "session.idle") {
        await ensure(id)
        await call("POST", `/v1/sessions/${sid(id)}/agent-end`, { messages: await history(id), agent: "opencode" })
      }
      if (event.type === "session.deleted") {
        await call("DELETE", `/v1/sessions/${sid(id)}`)
        started.delete(id)
      }
    },

    "chat.message": async (input: any, output: any) => {
      const prompt = (output?.parts ?? []).filter((p: any) => p?.type === "text").map((p: any) => p.text).join("\n")
      if (!input?.sessionID || !prompt.trim()) return
      await ensure(input.sessionID)
      // The block is cached by the daemon and comes back with the instructions below.
      await call("POST", `/v1/sessions/${sid(input.sessionID)}/agent-start`, {
        prompt,
        messages: await history(input.sessionID),
        agent: input.agent ?? "opencode",
      })
    },

    "experimental.chat.system.transform": async (input: any, output: any) => {
      if (!input?.sessionID) return
      await ensure(input.sessionID)
      const res = await call("GET", `/v1/sessions/${sid(input.sessionID)}/instructions`)
      if (res?.markdown) output.system.push(res.markdown)
    },

    "experimental.session.compacting": async (input: any, output: any) => {
      if (!input?.sessionID) return
      const res = await call("POST", `/v1/sessions/${sid(input.sessionID)}/compaction`, {
        messages: await history(input.sessionID),
      })
      if (res?.context) output.context.push(res.context)
    },

    tool: {
      mneme_retain: tool({
        description: "Remember a durable fact across sessions (decisions, conventions, how to build and test, preferences).",
        args: { content: tool.schema.string().describe("The fact to remember") },
        async execute(args: { content: string }, ctx: any) {
          await ensure(ctx.sessionID)
          const res = await call("POST", `/v1/sessions/${sid(ctx.sessionID)}/retain`, { items: [{ content: args.content }] })
          return res?.message ?? "Memory is unavailable right now (is `mneme serve` running?)."
        },
      }),
      mneme_recall: tool({
        description: "Search long-term memory for what earlier sessions learned about the current work.",
        args: { query: tool.schema.string().describe("What to look for") },
        async execute(args: { query: string }, ctx: any) {
          await ensure(ctx.sessionID)
          const res = await call("POST", `/v1/sessions/${sid(ctx.sessionID)}/recall`, { query: args.query })
          return res?.message ?? "Memory is unavailable right now (is `mneme serve` running?)."
        },
      }),
    },
  }
}

export default MnemePlugin
