// Smoke test: the plugin fails open against a daemon that is down, and talks to a live one
// (MNEME_URL + MNEME_TOKEN set by the caller).
import { test } from "node:test"
import assert from "node:assert/strict"

const MODULE: string = "./mneme.js"
const fakeClient = { session: { messages: async () => ({ data: [{ info: { role: "user" }, parts: [{ type: "text", text: "earlier question" }] }] }) } }

test("hooks return quickly and do nothing when the daemon is down", async () => {
  process.env.MNEME_URL = process.env.MNEME_DOWN_URL ?? "http://127.0.0.1:9"
  process.env.MNEME_TIMEOUT_MS = "500"
  const { MnemePlugin } = await import(MODULE + "?down")
  const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
  const started = Date.now()
  const system = { system: [] as string[] }
  await hooks["experimental.chat.system.transform"]({ sessionID: "s1" }, system)
  const ctx = { context: [] as string[] }
  await hooks["experimental.session.compacting"]({ sessionID: "s1" }, ctx)
  await hooks["chat.message"]({ sessionID: "s1" }, { parts: [{ type: "text", text: "hi" }] })
  await hooks.event({ event: { type: "session.idle", properties: { sessionID: "s1" } } })
  const answer = await hooks.tool.mneme_recall.execute({ query: "x" }, { sessionID: "s1" })
  assert.deepEqual(system.system, [])
  assert.deepEqual(ctx.context, [])
  assert.match(answer, /unavailable/)
  assert.ok(Date.now() - started < 5000)
})

test("with a live daemon the instructions reach the system prompt", { skip: !process.env.MNEME_LIVE_URL }, async () => {
  process.env.MNEME_URL = process.env.MNEME_LIVE_URL
  process.env.MNEME_TIMEOUT_MS = "3000"
  const { MnemePlugin } = await import(MODULE + "?live")
  const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/opencode-proj" } as any)
  await hooks.event({ event: { type: "session.created", properties: { info: { id: "oc-1" } } } })
  const said = await hooks.tool.mneme_retain.execute({ content: "opencode smoke memory" }, { sessionID: "oc-1" })
  assert.equal(said, "1 memory queued.")
  // What the daemon refuses is said as such, not as memory being down.
  const refused = await hooks.tool.mneme_recall.execute({ query: " " }, { sessionID: "oc-1" })
  assert.match(refused, /^mneme refused this: .*query/)
  // The agent's own system prompt (long, as opencode's is); a title generator's short one is not.
  const prompt = "You are opencode, an agent that helps with software engineering tasks. ".repeat(10)
  const system = { system: [prompt] }
  await hooks["experimental.chat.system.transform"]({ sessionID: "oc-1" }, system)
  assert.match(system.system[1], /# Memory/)
  const title = { system: ["Generate a title for this conversation."] }
  await hooks["experimental.chat.system.transform"]({ sessionID: "oc-1" }, title)
  assert.equal(title.system.length, 1)
})

/** More of the fake daemon's health answer (its `max_body_bytes`, say). */
let fakeHealth: object = {}

/** A request the fake daemon got: its path and its JSON body. */
type Got = { url: string; body: any }

/**
 * Runs `body` with the plugin's settings pointed at a fake daemon on 127.0.0.1 (`answer` says what
 * it answers, `null` for `{}`, after `delayMs`) and a fresh token folder; restores the environment.
 */
async function withFakeDaemon(
  answer: (got: Got) => { json: object; delayMs?: number; status?: number } | null,
  body: (dir: string, got: Got[]) => Promise<void>,
) {
  const { createServer } = await import("node:http")
  const { mkdtempSync } = await import("node:fs")
  const { tmpdir } = await import("node:os")
  const { join } = await import("node:path")
  const got: Got[] = []
  const { createHmac } = await import("node:crypto")
  const server = createServer((req: any, res: any) => {
    let data = ""
    req.on("data", (c: any) => (data += c))
    req.on("end", () => {
      // It holds the token "t", and proves it as mneme's daemon does.
      const health = String(req.url).match(/^\/v1\/health\?challenge=(\w+)$/)
      if (health) {
        const proof = createHmac("sha256", "t").update(`mneme-health:${health[1]}`).digest("hex")
        const at = `127.0.0.1:${(server.address() as any).port}`
        const address_proof = createHmac("sha256", "t").update(`mneme-health:${health[1]}@${at}`).digest("hex")
        res.setHeader("content-type", "application/json")
        res.end(JSON.stringify({ status: "ok", version: "0.1.0", protocol: 1, proof, address_proof, ...fakeHealth }))
        return
      }
      const request = { url: String(req.url), body: data ? JSON.parse(data) : null }
      got.push(request)
      const reply = answer(request) ?? { json: {} }
      setTimeout(() => {
        res.statusCode = reply.status ?? 200
        res.setHeader("content-type", "application/json")
        res.end(JSON.stringify(reply.json))
      }, reply.delayMs ?? 0)
    })
  })
  await new Promise<void>((ready) => server.listen(0, "127.0.0.1", () => ready()))
  const saved = { ...process.env }
  const dir = mkdtempSync(join(tmpdir(), "mneme-plugin-"))
  try {
    process.env.MNEME_URL = `http://127.0.0.1:${(server.address() as any).port}`
    // With a newline, as `export MNEME_TOKEN=$(cat token)` may leave one: trimmed, as the daemon does.
    process.env.MNEME_TOKEN = "t\n"
    process.env.MNEME_TOKEN_FILE = join(dir, "token")
    delete process.env.MNEME_TIMEOUT_MS
    delete process.env.MNEME_HOOK_TIMEOUT_MS
    await body(dir, got)
  } finally {
    server.close()
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key]
    Object.assign(process.env, saved)
  }
}

test("a recall waits for a daemon that gives a slow backend its recall.timeout", async () => {
  // A daemon whose recall.timeout is 3.5 s answers the prompt's recall after 3.4 s (its backend
  // was slow). The plugin waits that (the timeout the session start said, plus the hook bound)
  // instead of giving up at a fixed 3 s and taking the daemon for a hung one (the breaker file,
  // which would skip the next hooks and the turn's retains with them).
  const { existsSync } = await import("node:fs")
  const { join } = await import("node:path")
  const answer = (got: Got) => {
    if (got.url === "/v1/sessions") return { json: { session_id: "slow", max_body_bytes: 4194304, recall_timeout_ms: 3500 } }
    if (got.url.endsWith("/agent-start")) return { json: { inject: null }, delayMs: 3400 }
    return null
  }
  await withFakeDaemon(answer, async (dir) => {
    const { MnemePlugin } = await import(MODULE + "?slow")
    const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
    await hooks.event({ event: { type: "session.created", properties: { info: { id: "slow" } } } })
    const started = Date.now()
    await hooks["chat.message"]({ sessionID: "slow" }, { parts: [{ type: "text", text: "hi" }] })
    assert.ok(Date.now() - started >= 3300, "it waited for the answer")
    assert.ok(!existsSync(join(dir, "hooks-breaker")), "the daemon was not taken for a hung one")
  })
})

test("a clock set back after a timeout does not keep the plugin off the daemon", async () => {
  // The cooldown after a timeout runs on the monotonic clock: on the wall clock, one set back two
  // hours kept the plugin off a healthy daemon for two hours (review63 #6).
  let first = true
  const answer = (got: Got) => {
    if (got.url !== "/v1/sessions") return null
    const delayMs = first ? 1500 : 0
    first = false
    return { json: { session_id: got.body?.session_id }, delayMs }
  }
  await withFakeDaemon(answer, async (_dir, got) => {
    process.env.MNEME_HOOK_TIMEOUT_MS = "300"
    process.env.MNEME_COOLDOWN_MS = "400"
    const realNow = Date.now
    try {
      const { MnemePlugin } = await import(MODULE + "?clock")
      const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
      await hooks.event({ event: { type: "session.created", properties: { info: { id: "timed-out" } } } })
      Date.now = () => realNow() - 2 * 3600 * 1000
      await new Promise((r) => setTimeout(r, 600))
      await hooks.event({ event: { type: "session.created", properties: { info: { id: "after" } } } })
      assert.ok(got.some((g) => g.body?.session_id === "after"), JSON.stringify(got))
    } finally {
      Date.now = realNow
      delete process.env.MNEME_COOLDOWN_MS
    }
  })
})

test("a session the daemon ended is started again, and the turn goes on", async () => {
  // The daemon ended the session (idle for 30 days, or past its most live sessions): its
  // routes answer 404 unknown_session until it is started again (review68 #1).
  let known = false
  const answer = (got: Got) => {
    if (got.url === "/v1/sessions") {
      known = true
      return { json: { session_id: "ended" } }
    }
    if (got.url.startsWith("/v1/sessions/ended/") && !known) {
      return { json: { error: { code: "unknown_session", message: "unknown session" } }, status: 404 }
    }
    if (got.url.endsWith("/retain")) return { json: { queued: 1, message: "1 memory queued." } }
    return null
  }
  await withFakeDaemon(answer, async (_dir, got) => {
    const { MnemePlugin } = await import(MODULE + "?ended")
    const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
    await hooks.event({ event: { type: "session.created", properties: { info: { id: "ended" } } } })
    known = false // the daemon ends it
    const said = await hooks.tool.mneme_retain.execute({ content: "kept after the end" }, { sessionID: "ended" })
    assert.equal(said, "1 memory queued.")
    assert.equal(got.filter((g) => g.url === "/v1/sessions").length, 2, JSON.stringify(got))
    assert.equal(got.filter((g) => g.url.endsWith("/retain")).length, 2, JSON.stringify(got))
  })
})

test("a daemon restarted with a lower body limit gets the turn cut to it", async () => {
  // The session started under 4 MiB; the daemon runs with 3000 bytes since (restarted): the
  // turn sized by the first is refused (413), and sent again cut to the limit the daemon's
  // proof said (review69 #7).
  const limit = 3000
  const long = { session: { messages: async () => ({ data: Array.from({ length: 20 }, (_, i) => ({
    info: { role: i % 2 ? "assistant" : "user", id: `m${i}` },
    parts: [{ type: "text", text: `message ${i} `.repeat(60) }],
  })) }) } }
  const answer = (got: Got) => {
    if (got.url === "/v1/sessions") return { json: { session_id: "cut", max_body_bytes: 4194304 } }
    if (got.url.endsWith("/agent-end") && JSON.stringify(got.body).length > limit) {
      return { json: { error: { code: "too_large", message: "too large" } }, status: 413 }
    }
    return null
  }
  fakeHealth = { max_body_bytes: limit }
  try {
    await withFakeDaemon(answer, async (_dir, got) => {
      const { MnemePlugin } = await import(MODULE + "?cut")
      const hooks: any = await MnemePlugin({ client: long, directory: "/tmp/x" } as any)
      await hooks.event({ event: { type: "session.created", properties: { info: { id: "cut" } } } })
      await hooks.event({ event: { type: "session.idle", properties: { sessionID: "cut" } } })
      const ends = got.filter((g) => g.url.endsWith("/agent-end"))
      assert.ok(ends.length > 0 && JSON.stringify(ends[ends.length - 1].body).length <= limit, JSON.stringify(ends.map((e) => JSON.stringify(e.body).length)))
    })
  } finally {
    fakeHealth = {}
  }
})

test("what the plugin sends: the parent asked of opencode, the user's words only, private spans kept closed, history off the budget", async () => {
  const { existsSync, readFileSync, writeFileSync } = await import("node:fs")
  const { join } = await import("node:path")
  const secret = "<private>" + "x".repeat(3000) + "SECRET</private> and the rest"
  const client = {
    session: {
      // opencode's own history, slow to read (a long session): longer than the hook's bound.
      messages: async () => {
        await new Promise((done) => setTimeout(done, 1200))
        return { data: [{ info: { role: "user" }, parts: [{ type: "text", text: secret }] }] }
      },
      get: async ({ path }: any) => ({ data: { id: path.id, parentID: path.id === "child" ? "parent" : undefined } }),
    },
  }
  // A small body limit, so the session below is cut.
  const answer = (got: Got) => (got.url === "/v1/sessions" ? { json: { max_body_bytes: 4000, recall_timeout_ms: 100 } } : null)
  await withFakeDaemon(answer, async (dir, bodies) => {
    // A breaker tripped "an hour from now" (the clock was set back since) is not believed.
    const future = String(Date.now() + 3600000)
    writeFileSync(join(dir, "hooks-breaker"), future)
    const { MnemePlugin } = await import(MODULE + "?sends")
    const hooks: any = await MnemePlugin({ client, directory: "/tmp/x" } as any)
    // A subagent's first message before its session.created (opencode does not wait for events).
    const parts = [{ type: "text", text: "what next?" }, { type: "text", text: "FILE BODY", synthetic: true }]
    const prompt = hooks["chat.message"]({ sessionID: "child" }, { parts })
    await hooks.event({ event: { type: "session.created", properties: { info: { id: "child", parentID: "parent" } } } })
    await prompt
    const starts = bodies.filter((b) => b.url === "/v1/sessions")
    assert.ok(starts.length >= 1)
    for (const s of starts) assert.equal(s.body.parent_session_id, "parent", JSON.stringify(s.body))
    const start = bodies.find((b) => b.url.endsWith("/agent-start"))
    assert.equal(start?.body.prompt, "what next?")
    await hooks.event({ event: { type: "session.idle", properties: { sessionID: "child" } } })
    const end = bodies.find((b) => b.url.endsWith("/agent-end"))
    assert.ok(end, "the turn reached the daemon although reading the history took longer than the bound")
    const breaker = join(dir, "hooks-breaker")
    assert.ok(!existsSync(breaker) || readFileSync(breaker, "utf8") === future, "the daemon was not taken for a hung one")
    const kept = end.body.messages[0].content as string
    assert.ok(kept.startsWith("<private>") && kept.endsWith("SECRET</private> and the rest"), kept.slice(0, 40))
  })
})

/**
 * The first `agent-end` body the plugin sends for session `id` when opencode's history is
 * `history` and the daemon takes `maxBody` bytes (`tag` loads a fresh copy of the plugin).
 */
async function firstAgentEnd(history: any[], maxBody: number, tag: string, id: string): Promise<any> {
  const client = { session: { messages: async () => ({ data: history }), get: async () => ({ data: {} }) } }
  const answer = (got: Got) => (got.url === "/v1/sessions" ? { json: { max_body_bytes: maxBody, recall_timeout_ms: 100 } } : null)
  let body: any
  await withFakeDaemon(answer, async (_dir, bodies) => {
    const { MnemePlugin } = await import(MODULE + "?" + tag)
    const hooks: any = await MnemePlugin({ client, directory: "/tmp/x" } as any)
    await hooks.event({ event: { type: "session.created", properties: { info: { id } } } })
    await hooks.event({ event: { type: "session.idle", properties: { sessionID: id } } })
    body = bodies.find((b) => b.url.endsWith("/agent-end"))?.body
  })
  assert.ok(body, "the turn reached the daemon")
  return body
}

test("a compaction's summary is not retained, and nested spans the cut left open stay open", async () => {
  const history = [
    { info: { role: "user" }, parts: [{ type: "text", text: "<private><private>" + "x".repeat(5000) }] },
    { info: { role: "assistant" }, parts: [{ type: "text", text: "inner</private> OUTER-SECRET" }] },
    { info: { role: "user" }, parts: [{ type: "text", text: "b</private> public" }] },
    { info: { role: "assistant", summary: true, mode: "compaction" }, parts: [{ type: "text", text: "SUMMARY-MARK of it all" }] },
    { info: { role: "user" }, parts: [{ type: "text", text: "and now?" }] },
  ]
  const end = await firstAgentEnd(history, 4000, "summary", "sum")
  const sent = JSON.stringify(end.messages)
  assert.ok(!sent.includes("SUMMARY-MARK"), sent.slice(0, 200))
  const first = end.messages[0].content as string
  assert.ok(first.startsWith("<private><private>inner</private>"), first.slice(0, 60))
})

test("a cut that falls inside an opening tag's name keeps the tag whole", async () => {
  // 280 bytes of history: the newest message alone keeps its last 23 characters, which begin
  // three characters into the tag.
  const history = [{ info: { role: "user" }, parts: [{ type: "text", text: "x".repeat(5000) + "<private>SECRET-T and more" }] }]
  const end = await firstAgentEnd(history, 560, "tagcut", "cut")
  const kept = end.messages[0].content as string
  assert.ok(kept.startsWith("<private>SECRET-T"), kept)
})

test("the newest prompt is sent, cut to its end, when it does not fit beside its reply", async () => {
  // A paste over the bound, then its reply: left out whole, the prompt was counted as a turn
  // already there and never stored.
  const history = [
    { info: { role: "user" }, parts: [{ type: "text", text: "first question" }] },
    { info: { role: "assistant" }, parts: [{ type: "text", text: "first answer" }] },
    { info: { role: "user" }, parts: [{ type: "text", text: "x".repeat(5000) + " PROMPT-END" }] },
    { info: { role: "assistant" }, parts: [{ type: "text", text: "REPLY-BIG" }] },
  ]
  const end = await firstAgentEnd(history, 4000, "bigprompt", "big")
  const roles = end.messages.map((m: any) => m.role)
  assert.deepEqual(roles, ["user", "assistant"], JSON.stringify(end).slice(0, 300))
  assert.ok(end.messages[0].content.endsWith(" PROMPT-END") && end.messages[1].content === "REPLY-BIG")
  assert.equal(end.omitted_user_turns, 1)
})

test("half an emoji is sent as U+FFFD, and the session's turns go on", async () => {
  const history = [
    { info: { role: "user" }, parts: [{ type: "text", text: "launch " + "🚀".slice(0, 1) + " now" }] },
    { info: { role: "assistant" }, parts: [{ type: "text", text: "launched" }] },
  ]
  const end = await firstAgentEnd(history, 100000, "surrogate", "emoji")
  assert.equal(end.messages[0].content, "launch \uFFFD now")
})

test("the token goes only to a daemon that proves it holds it", async () => {
  // Another user's process on the daemon's port answers health like mneme, without the proof.
  const { createServer } = await import("node:http")
  const heard: string[] = []
  const server = createServer((req: any, res: any) => {
    heard.push(`${req.url} ${req.headers.authorization ?? ""}`)
    res.setHeader("content-type", "application/json")
    res.end(JSON.stringify({ status: "ok", version: "0.1.0", protocol: 1 }))
  })
  await new Promise<void>((ready) => server.listen(0, "127.0.0.1", () => ready()))
  try {
    await withDaemonAt((server.address() as any).port, "the-users-own-token", async () => {
      const { MnemePlugin } = await import(MODULE + "?squatted")
      const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
      const answer = await hooks.tool.mneme_retain.execute({ content: "a secret plan" }, { sessionID: "sq" })
      assert.match(answer, /unavailable/)
      // Each request proves the daemon afresh: none of them carried the token.
      assert.ok(heard.length > 0 && heard.every((h) => h.startsWith("/v1/health?challenge=")), heard.join("\n"))
      assert.ok(!heard.some((h) => h.includes("the-users-own-token")))
    })
  } finally {
    server.close()
  }
})

/** Runs `body` with the plugin pointed at `port` with `token`, then puts the environment back. */
async function withDaemonAt(port: number, token: string, body: () => Promise<void>) {
  const saved = { ...process.env }
  try {
    process.env.MNEME_URL = `http://127.0.0.1:${port}`
    process.env.MNEME_TOKEN = token
    await body()
  } finally {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key]
    Object.assign(process.env, saved)
  }
}

/** A daemon on 127.0.0.1 that holds the token "tok", proves it, and queues whatever it is sent. */
async function provingDaemon(): Promise<any> {
  const { createServer } = await import("node:http")
  const { createHmac } = await import("node:crypto")
  const proving = createServer((req: any, res: any) => {
    const health = String(req.url).match(/^\/v1\/health\?challenge=(\w+)$/)
    const at = `127.0.0.1:${(proving.address() as any).port}`
    const proof = health ? createHmac("sha256", "tok").update(`mneme-health:${health[1]}`).digest("hex") : undefined
    const address_proof = health
      ? createHmac("sha256", "tok").update(`mneme-health:${health[1]}@${at}`).digest("hex")
      : undefined
    res.setHeader("content-type", "application/json")
    res.end(
      JSON.stringify(health ? { status: "ok", version: "0.1.0", protocol: 1, proof, address_proof } : { message: "1 memory queued." }),
    )
  })
  await new Promise<void>((ready) => proving.listen(0, "127.0.0.1", () => ready()))
  return proving
}

test("the token goes not to a process that redirects the proof to a daemon holding it", async () => {
  const { createServer } = await import("node:http")
  const proving = await provingDaemon()
  const heard: string[] = []
  const redirecting = createServer((req: any, res: any) => {
    heard.push(`${req.url} ${req.headers.authorization ?? ""}`)
    res.writeHead(307, { location: `http://127.0.0.1:${(proving.address() as any).port}${req.url}` })
    res.end()
  })
  await new Promise<void>((ready) => redirecting.listen(0, "127.0.0.1", () => ready()))
  try {
    await withDaemonAt((redirecting.address() as any).port, "tok", async () => {
      const { MnemePlugin } = await import(MODULE + "?redirected")
      const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
      const answer = await hooks.tool.mneme_retain.execute({ content: "a secret plan" }, { sessionID: "rd" })
      assert.match(answer, /unavailable/)
      assert.ok(heard.length > 0 && !heard.some((h) => h.includes("tok")), heard.join("\n"))
    })
  } finally {
    redirecting.close()
    proving.close()
  }
})

test("the token goes not to a relay that passes the proof on from a daemon holding it", async () => {
  const { createServer, connect } = await import("node:net")
  const proving = await provingDaemon()
  let heard = ""
  // Another user's relay on another port (the daemon's old one): bytes passed on both ways.
  const relay = createServer((client: any) => {
    const daemon = connect((proving.address() as any).port, "127.0.0.1")
    client.on("data", (b: any) => (heard += b.toString()))
    client.pipe(daemon)
    daemon.pipe(client)
    client.on("error", () => daemon.destroy())
    daemon.on("error", () => client.destroy())
  })
  await new Promise<void>((ready) => relay.listen(0, "127.0.0.1", () => ready()))
  try {
    await withDaemonAt((relay.address() as any).port, "tok", async () => {
      const { MnemePlugin } = await import(MODULE + "?relayed")
      const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
      const answer = await hooks.tool.mneme_retain.execute({ content: "a secret plan" }, { sessionID: "rl" })
      assert.match(answer, /unavailable/)
      assert.ok(heard.includes("/v1/health?challenge="), heard)
      assert.ok(!heard.includes("tok") && !heard.includes("secret plan"), heard)
    })
  } finally {
    relay.close()
    proving.close()
  }
})

test("a daemon proven once is not trusted after another process takes its port", async () => {
  const { createServer } = await import("node:http")
  const heard: string[] = []
  const proving = await provingDaemon()
  const port = (proving.address() as any).port
  const saved = { ...process.env }
  try {
    process.env.MNEME_URL = `http://127.0.0.1:${port}`
    process.env.MNEME_TOKEN = "tok"
    const { MnemePlugin } = await import(MODULE + "?retaken")
    const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
    assert.equal(await hooks.tool.mneme_retain.execute({ content: "first" }, { sessionID: "rt" }), "1 memory queued.")
    await new Promise<void>((done) => proving.close(() => done()))
    // Another process takes the port; it answers health without the proof.
    const squatter = createServer((req: any, res: any) => {
      heard.push(`${req.url} ${req.headers.authorization ?? ""}`)
      res.setHeader("content-type", "application/json")
      res.end(JSON.stringify({ status: "ok", version: "0.1.0", protocol: 1 }))
    })
    await new Promise<void>((ready) => squatter.listen(port, "127.0.0.1", () => ready()))
    try {
      const answer = await hooks.tool.mneme_retain.execute({ content: "a secret plan" }, { sessionID: "rt" })
      assert.match(answer, /unavailable/)
      assert.ok(heard.length > 0 && !heard.some((h) => h.includes("tok")), heard.join("\n"))
    } finally {
      squatter.close()
    }
  } finally {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key]
    Object.assign(process.env, saved)
  }
})

test("an undo (the messages after the one reverted to gone) is told as a rewind; nothing else is", async () => {
  const msg = (id: string, role: string, text: string) => ({ info: { id, role }, parts: [{ type: "text", text }] })
  let history = [msg("m1", "user", "set up the heron parser"), msg("m2", "assistant", "done"), msg("m3", "user", "the key is sk-OOPS"), msg("m4", "assistant", "noted")]
  const client = { session: { messages: async () => ({ data: history }), get: async () => ({ data: {} }) } }
  const answer = (got: Got) => (got.url === "/v1/sessions" ? { json: { max_body_bytes: 100000, recall_timeout_ms: 100 } } : null)
  await withFakeDaemon(answer, async (_dir, bodies) => {
    const { MnemePlugin } = await import(MODULE + "?undo")
    const hooks: any = await MnemePlugin({ client, directory: "/tmp/x" } as any)
    const idle = async () => {
      await hooks.event({ event: { type: "session.idle", properties: { sessionID: "u" } } })
      return bodies.filter((b) => b.url.endsWith("/agent-end")).at(-1)!.body
    }
    assert.equal((await idle()).rewound, undefined, "a first turn")
    history = [...history, msg("m5", "user", "more"), msg("m6", "assistant", "more")]
    assert.equal((await idle()).rewound, undefined, "a turn added")
    // /undo back to m2, and a new prompt: m3..m6 deleted.
    history = [history[0], history[1], msg("m7", "user", "add docs"), msg("m8", "assistant", "added")]
    const undone = await idle()
    assert.equal(undone.rewound, true)
    assert.ok(!JSON.stringify(undone.messages).includes("sk-OOPS"))
    // Told on every later turn of that session.
    history = [...history, msg("m9", "user", "and tests"), msg("m10", "assistant", "ok")]
    assert.equal((await idle()).rewound, true)
    // In another session, messages gone from the start or the middle (not an undo): not told.
    const other = async (id: string) => {
      await hooks.event({ event: { type: "session.idle", properties: { sessionID: id } } })
      return bodies.filter((b) => b.url.endsWith("/agent-end")).at(-1)!.body
    }
    history = [msg("a1", "user", "one"), msg("a2", "assistant", "two"), msg("a3", "user", "three"), msg("a4", "assistant", "four")]
    await other("v")
    history = [history[1], history[2], history[3]]
    assert.equal((await other("v")).rewound, undefined, "the start gone")
    history = [msg("b1", "user", "one"), msg("b2", "assistant", "two"), msg("b3", "user", "three"), msg("b4", "assistant", "four")]
    await other("w")
    history = [history[0], history[2], history[3]]
    assert.equal((await other("w")).rewound, undefined, "the middle gone")
    // An undo back to before the first prompt: every message sent is gone.
    history = [msg("c1", "user", "the key is sk-FIRST"), msg("c2", "assistant", "noted")]
    await other("x")
    history = [msg("c3", "user", "start over"), msg("c4", "assistant", "ok")]
    assert.equal((await other("x")).rewound, true, "back to before the first prompt")
  })
})

test("without MNEME_URL the daemon is found where mneme's config and pidfile say", async () => {
  const { mkdirSync, rmSync, writeFileSync } = await import("node:fs")
  const { join } = await import("node:path")
  const answer = (got: Got) => (got.url === "/v1/sessions" ? { json: { session_id: "found" } } : null)
  await withFakeDaemon(answer, async (dir, got) => {
    const port = new URL(process.env.MNEME_URL!).port
    for (const key of ["MNEME_URL", "MNEME_TOKEN", "MNEME_TOKEN_FILE", "MNEME_SERVER__LISTEN", "MNEME_STORAGE__DIR"]) {
      delete process.env[key]
    }
    // storage.dir through a variable; the token there; no pidfile: the config's address.
    const config = join(dir, "config.toml")
    mkdirSync(join(dir, "data"))
    writeFileSync(join(dir, "data", "token"), "t\n")
    process.env.MNEME_PLUGIN_TEST_DIR = dir
    writeFileSync(config, `[server]\nlisten = "0.0.0.0:${port}"\n\n[storage]\ndir = "\${MNEME_PLUGIN_TEST_DIR}/data"\n`)
    process.env.MNEME_CONFIG = config
    const created = async (tag: string, id: string) => {
      const { MnemePlugin } = await import(MODULE + tag)
      const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
      await hooks.event({ event: { type: "session.created", properties: { info: { id } } } })
    }
    await created("?config", "by-config")
    assert.ok(got.some((g) => g.url === "/v1/sessions" && g.body?.session_id === "by-config"), JSON.stringify(got))
    // Relative to the config's folder. The config moved on to another port since the daemon
    // started: the running daemon's pidfile wins.
    writeFileSync(config, `[server]\nlisten = "127.0.0.1:9"\n\n[storage]\ndir = "data"\n`)
    writeFileSync(join(dir, "data", "mneme.pid"), `${process.pid}\n127.0.0.1:${port}\n`)
    await created("?pidfile", "by-pidfile")
    assert.ok(got.some((g) => g.body?.session_id === "by-pidfile"), JSON.stringify(got))
    // A pidfile left by a daemon that is gone is not believed.
    writeFileSync(config, `[storage]\ndir = "data"\n`)
    writeFileSync(join(dir, "data", "mneme.pid"), `999999999\n127.0.0.1:${port}\n`)
    await created("?stale", "by-stale")
    assert.ok(!got.some((g) => g.body?.session_id === "by-stale"), "went to the address of a daemon that is gone")
    // A syntax error elsewhere in the file leaves its [server] and [storage] read, as mneme's
    // CLI reads them: the whole file was ignored (review64 #13).
    writeFileSync(config, `[server]\nlisten = "127.0.0.1:${port}"\n\n[storage]\ndir = "data"\n\n[recall]\ntimeout = "2s\n`)
    await created("?broken", "by-broken")
    assert.ok(got.some((g) => g.body?.session_id === "by-broken"), JSON.stringify(got))
    // A path through a link and `..` goes where the system takes it, for the config and the
    // relative storage.dir in it, as mneme goes (review69 #2, review70 #1).
    {
      const { symlinkSync } = await import("node:fs")
      mkdirSync(join(dir, "real", "deep", "x"), { recursive: true })
      mkdirSync(join(dir, "real", "deep", "data2"))
      writeFileSync(join(dir, "real", "deep", "data2", "token"), "t\n")
      writeFileSync(join(dir, "real", "deep", "config.toml"), `[server]\nlisten = "127.0.0.1:${port}"\n\n[storage]\ndir = "data2"\n`)
      symlinkSync(join(dir, "real", "deep", "x"), join(dir, "lnk"))
      process.env.MNEME_CONFIG = `${dir}/lnk/../config.toml`
      await created("?dotdot", "by-dotdot")
      assert.ok(got.some((g) => g.body?.session_id === "by-dotdot"), JSON.stringify(got))
      process.env.MNEME_CONFIG = config
    }
    // A config file another user may change is not read, as mneme reads it not: its address and
    // storage.dir chose the daemon the conversation went to (review64 #1). The defaults stand.
    const { chmodSync, chownSync } = await import("node:fs")
    writeFileSync(config, `[server]\nlisten = "127.0.0.1:${port}"\n\n[storage]\ndir = "data"\n`)
    rmSync(join(dir, "data", "mneme.pid"), { force: true })
    await created("?own", "by-own")
    assert.ok(got.some((g) => g.body?.session_id === "by-own"), JSON.stringify(got))
    chmodSync(config, 0o666)
    await created("?writable", "by-writable")
    assert.ok(!got.some((g) => g.body?.session_id === "by-writable"), "read a config file every user may write")
    chmodSync(config, 0o644)
    if (process.geteuid?.() === 0) {
      chownSync(config, 65534, 65534)
      await created("?foreign", "by-foreign")
      assert.ok(!got.some((g) => g.body?.session_id === "by-foreign"), "read another user's config file")
      chownSync(config, 0, 0)
    }
    if (process.geteuid?.() === 0) {
      // Nor one reached through another user's link inside the target of one's own link: it
      // could point elsewhere between the check and the read (review67 #3, #4).
      const { lchownSync, symlinkSync } = await import("node:fs")
      symlinkSync(config, join(dir, "planted.toml"))
      lchownSync(join(dir, "planted.toml"), 65534, 65534)
      symlinkSync(join(dir, "planted.toml"), join(dir, "mine.toml"))
      process.env.MNEME_CONFIG = join(dir, "mine.toml")
      await created("?planted", "by-planted")
      assert.ok(!got.some((g) => g.body?.session_id === "by-planted"), "read a config file through another user's link")
      // One's own links are followed.
      lchownSync(join(dir, "planted.toml"), 0, 0)
      await created("?linked", "by-linked")
      assert.ok(got.some((g) => g.body?.session_id === "by-linked"), JSON.stringify(got))
      process.env.MNEME_CONFIG = config
    }
    chmodSync(dir, 0o777)
    await created("?folder", "by-folder")
    assert.ok(!got.some((g) => g.body?.session_id === "by-folder"), "read a config file in a folder every user may write in")
    chmodSync(dir, 0o700)
  })
})

test("a token file that is a link, or another user's, is not read: nothing is sent", async () => {
  // Whoever placed it chose the token; a process of theirs on the port answering with its proof
  // was sent the turns (review81 #1). The daemon and mneme's CLI refuse such a file too.
  const { chownSync, rmSync, symlinkSync, writeFileSync } = await import("node:fs")
  const { join } = await import("node:path")
  const answer = (got: Got) => (got.url === "/v1/sessions" ? { json: { session_id: "tok" } } : null)
  await withFakeDaemon(answer, async (dir, got) => {
    delete process.env.MNEME_TOKEN
    const token = join(dir, "token")
    const created = async (tag: string, id: string) => {
      const { MnemePlugin } = await import(MODULE + tag)
      const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
      await hooks.event({ event: { type: "session.created", properties: { info: { id } } } })
      return got.some((g) => g.body?.session_id === id)
    }
    writeFileSync(join(dir, "elsewhere"), "t\n")
    symlinkSync(join(dir, "elsewhere"), token)
    assert.ok(!(await created("?linked-token", "by-link")), JSON.stringify(got))
    rmSync(token)
    writeFileSync(token, "t\n")
    if (process.geteuid?.() === 0) {
      chownSync(token, 65534, 65534)
      assert.ok(!(await created("?foreign-token", "by-foreign")), JSON.stringify(got))
      chownSync(token, 0, 0)
    }
    assert.ok(await created("?own-token", "by-own-token"), JSON.stringify(got))
  })
})

test("a breaker another process trips after the plugin loaded is honoured at once", async () => {
  // A hung daemon (its agent-start never answered within the bound), found hung by a Claude Code
  // hook that wrote the shared breaker after this plugin loaded: the plugin skips the daemon
  // instead of waiting out its own bound (review113 #3).
  const { writeFileSync } = await import("node:fs")
  const { join } = await import("node:path")
  const answer = (got: Got) => {
    if (got.url === "/v1/sessions") return { json: { session_id: "hung", max_body_bytes: 4194304, recall_timeout_ms: 1000 } }
    if (got.url.endsWith("/agent-start")) return { json: { inject: null }, delayMs: 4000 }
    return null
  }
  await withFakeDaemon(answer, async (dir, got) => {
    const { MnemePlugin } = await import(MODULE + "?tripped-elsewhere")
    const hooks: any = await MnemePlugin({ client: fakeClient, directory: "/tmp/x" } as any)
    await hooks.event({ event: { type: "session.created", properties: { info: { id: "hung" } } } })
    writeFileSync(join(dir, "hooks-breaker"), String(Date.now()))
    const started = Date.now()
    await hooks["chat.message"]({ sessionID: "hung" }, { parts: [{ type: "text", text: "hi" }] })
    assert.ok(Date.now() - started < 1000, `it skipped the daemon (${Date.now() - started} ms)`)
    assert.ok(!got.some((g) => g.url.endsWith("/agent-start")), JSON.stringify(got.map((g) => g.url)))
  })
})
