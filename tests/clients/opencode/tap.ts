// A recording opencode plugin for the client harness: appends one JSON line per hook call to
// $MC_PLUGIN_TAP ({ts, hook, input, output}), strings cut to 2000 characters. Imports nothing
// from @opencode-ai/plugin, so it loads even when opencode could not install that package.
import { appendFileSync } from "node:fs"

const FILE = process.env.MC_PLUGIN_TAP ?? "/tmp/opencode-plugin-tap.jsonl"

function cut(v: any, depth = 0): any {
  if (typeof v === "string") return v.length > 2000 ? v.slice(0, 2000) + `...<${v.length} chars>` : v
  if (depth > 8 || v === null || typeof v !== "object") return v
  if (Array.isArray(v)) return v.slice(0, 50).map((x) => cut(x, depth + 1))
  const o: any = {}
  for (const [k, x] of Object.entries(v)) if (typeof x !== "function") o[k] = cut(x, depth + 1)
  return o
}

function log(hook: string, input: any, output?: any) {
  try {
    appendFileSync(FILE, JSON.stringify({ ts: Date.now(), hook, input: cut(input), output: cut(output) }) + "\n")
  } catch {}
}

export const TapPlugin = async (ctx: any) => {
  log("init", { directory: ctx?.directory, worktree: ctx?.worktree, project: ctx?.project })
  const hook = (name: string) => async (input: any, output: any) => log(name, input, output)
  return {
    event: async ({ event }: any) => log("event", event),
    "chat.message": hook("chat.message"),
    "chat.params": hook("chat.params"),
    "chat.headers": hook("chat.headers"),
    "experimental.chat.system.transform": hook("experimental.chat.system.transform"),
    "experimental.chat.messages.transform": async (input: any, output: any) =>
      log("experimental.chat.messages.transform", input, { messages: (output?.messages ?? []).length }),
    "experimental.session.compacting": hook("experimental.session.compacting"),
    "experimental.compaction.autocontinue": hook("experimental.compaction.autocontinue"),
    "experimental.text.complete": hook("experimental.text.complete"),
    "tool.execute.before": hook("tool.execute.before"),
    "tool.execute.after": hook("tool.execute.after"),
    "shell.env": hook("shell.env"),
  }
}

export default TapPlugin
