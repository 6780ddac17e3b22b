// An ACP agent on the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0, its app API:
// agent().onRequest(...).connect(ndJsonStream(...)), which replaced AgentSideConnection).
// For benchmarks and facade tests. Each update is one message per write, and the agent awaits
// every notification before the next, as real SDK agents (claude-agent-acp, ...) do.
//
// Turns, by the prompt's first word:
//   chunks [N] [BYTES]  N agent_message_chunk updates (N defaults to $OMA_TS_CHUNKS, else 10);
//                       chunk i (0-based) is the text `${i}\n`, space-padded to BYTES if given
//   ask                 a tool_call, then session/request_permission (allow_once, allow_always,
//                       reject_once, reject_always); reports `permission: <optionId>` (or
//                       `permission: cancelled`)
//   slow [N] [MS]       N chunks (default 50), MS ms apart (default 50); session/cancel ends the
//                       turn with stopReason "cancelled"
//   anything else       echoed back as one chunk (image blocks noted as `[image <mime> <n>b]`)
// A session/cancel during any turn stops it between two chunks (stopReason "cancelled").
// Sessions: session/new, session/load (replays the turns as user/agent message chunks),
// session/list, session/close. The SDK is resolved from OMA_ACP_TS_SDK_DIR.
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const require = createRequire(pathToFileURL(process.env.OMA_ACP_TS_SDK_DIR + "/"));
const acp = await import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);

const sessions = new Map(); // sessionId -> {cwd, history: [{user, agent}], cancel, updatedAt}
let counter = 0;

const chunk = (text) => ({ sessionUpdate: "agent_message_chunk", content: { type: "text", text } });
const send = (client, sessionId, update) => client.notify("session/update", { sessionId, update });
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });
const int = (word, fallback) => (word !== undefined && /^\d+$/.test(word) ? Number(word) : fallback);

function session(sessionId) {
  const found = sessions.get(sessionId);
  if (!found) throw acp.RequestError.invalidParams({ name: "NotFound", sessionId });
  return found;
}

function promptText(blocks) {
  return blocks
    .map((b) => {
      if (b.type === "text") return b.text;
      if (b.type === "image") return `[image ${b.mimeType} ${b.data.length}b]`;
      return `[${b.type}]`;
    })
    .join("");
}

// Sends `texts` one chunk at a time, each pushed onto `sent`, until a cancel stops it.
async function stream(client, sid, texts, sent, { signal, delayMs = 0 }) {
  for (const text of texts) {
    if (signal.aborted) return;
    await send(client, sid, chunk(text));
    sent.push(text);
    if (delayMs > 0) await sleep(delayMs, signal);
  }
}

async function ask(client, sid, signal) {
  await send(client, sid, {
    sessionUpdate: "tool_call",
    toolCallId: "ask-1",
    title: "Write a file",
    kind: "edit",
    status: "pending",
  });
  const answer = await client.request(
    "session/request_permission",
    {
      sessionId: sid,
      toolCall: { toolCallId: "ask-1", title: "Write a file", kind: "edit" },
      options: [
        { optionId: "allow-once", name: "Allow once", kind: "allow_once" },
        { optionId: "allow-always", name: "Always allow", kind: "allow_always" },
        { optionId: "reject-once", name: "Reject", kind: "reject_once" },
        { optionId: "reject-always", name: "Never", kind: "reject_always" },
      ],
    },
    { cancellationSignal: signal }, // a cancel withdraws it ($/cancel_request)
  );
  const o = answer.outcome;
  return `permission: ${o.outcome === "selected" ? o.optionId : o.outcome}`;
}

const app = acp
  .agent({ name: "ts-chunk-agent" })
  .onRequest("initialize", () => ({
    protocolVersion: 1,
    agentCapabilities: {
      loadSession: true,
      promptCapabilities: { image: true, audio: false, embeddedContext: false },
      sessionCapabilities: { list: {}, close: {} },
    },
    authMethods: [],
    agentInfo: { name: "ts-chunk-agent", version: "1.0" },
  }))
  .onRequest("session/new", ({ params }) => {
    const sessionId = `chunk-${++counter}`;
    sessions.set(sessionId, { cwd: params.cwd, history: [], cancel: null, updatedAt: new Date() });
    return { sessionId };
  })
  .onRequest("session/load", async ({ params, client }) => {
    const found = session(params.sessionId);
    for (const turn of found.history) {
      const user = { sessionUpdate: "user_message_chunk", content: { type: "text", text: turn.user } };
      await send(client, params.sessionId, user);
      await send(client, params.sessionId, chunk(turn.agent));
    }
    return {};
  })
  .onRequest("session/list", ({ params }) => ({
    sessions: [...sessions.entries()]
      .filter(([, s]) => !params.cwd || s.cwd === params.cwd)
      .reverse()
      .map(([sessionId, s]) => ({ sessionId, cwd: s.cwd, updatedAt: s.updatedAt.toISOString() })),
  }))
  .onRequest("session/close", ({ params }) => {
    session(params.sessionId).cancel?.abort();
    sessions.delete(params.sessionId);
    return {};
  })
  .onNotification("session/cancel", ({ params }) => {
    sessions.get(params.sessionId)?.cancel?.abort();
  })
  .onRequest("session/prompt", async ({ params, client }) => {
    const sid = params.sessionId;
    const found = session(sid);
    if (found.cancel) throw acp.RequestError.invalidRequest({ sessionId: sid }, "a turn is running");
    const controller = new AbortController();
    found.cancel = controller;
    const { signal } = controller;
    const text = promptText(params.prompt);
    const [word, a, b] = text.trim().split(/\s+/);
    const sent = [];
    try {
      if (word === "chunks") {
        const n = int(a, int(process.env.OMA_TS_CHUNKS, 10));
        const pad = Math.max(int(b, 0) - 1, 0);
        const texts = Array.from({ length: n }, (_, i) => `${i}`.padEnd(pad) + "\n");
        await stream(client, sid, texts, sent, { signal });
      } else if (word === "slow") {
        const texts = Array.from({ length: int(a, 50) }, (_, i) => `${i}\n`);
        await stream(client, sid, texts, sent, { signal, delayMs: int(b, 50) });
      } else if (word === "ask") {
        await stream(client, sid, [await ask(client, sid, signal)], sent, { signal });
      } else {
        await stream(client, sid, [text], sent, { signal });
      }
    } catch (error) {
      if (!signal.aborted) throw error;
    } finally {
      found.cancel = null;
    }
    found.history.push({ user: text, agent: sent.join("") });
    found.updatedAt = new Date();
    return { stopReason: signal.aborted ? "cancelled" : "end_turn" };
  });

const connection = app.connect(
  acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)),
);
await connection.closed;
process.exit(0);
