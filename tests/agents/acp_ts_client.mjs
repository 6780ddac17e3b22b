// A small ACP client on the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0, its app API:
// client().onRequest(...).connect(stream), which replaced ClientSideConnection), driven by a JSON
// script, so Python tests can run a real third-party client against an agent or the daemon.
//
// Usage: node acp_ts_client.mjs [SCRIPT]   SCRIPT: inline JSON, a file path, or "-"/absent = stdin
// Env:   OMA_ACP_TS_SDK_DIR  folder whose node_modules holds @agentclientprotocol/sdk (required)
//        OMA_WS_DIR          folder whose node_modules holds ws (for "url"; else global WebSocket)
//
// Script: {
//   "agent": ["cmd", "arg", ...]        spawn an agent and speak ACP over its stdio, or
//   "url": "ws://host/acp/p",           connect with the SDK's experimental/ws-client, with
//   "token": "T", "headers": {}, "protocols": ["acp.v1"],   (token -> Authorization: Bearer T)
//   "env": {}, "agentCwd": "/dir",      extra environment / working folder of the agent
//   "cwd": "/abs",                      default cwd of new/load/resume/list (default: ours)
//   "permission": "allow",              default answer to session/request_permission:
//                                       allow | allow_always | reject | reject_always | first |
//                                       cancel | hold (never answer: wait to be withdrawn) |
//                                       {"optionId": "x"}
//   "timeout_s": 60,                    whole-script limit (exit 2)
//   "steps": [ {"op": ...}, ... ]       run in order; each awaited unless "wait": false
// }
// Steps (sessionId defaults to the current session: the last one new/load/resume named):
//   initialize {protocolVersion?, clientCapabilities?, clientInfo?}
//   new {cwd?, mcpServers?, _meta?}       load {sessionId?, cwd?, mcpServers?}   resume {...}
//   prompt {text?, images?: [{data, mimeType}], blocks?, sessionId?, cancelAfter?, permission?}
//          (blocks: raw ContentBlocks, used as given; cancelAfter: K sends session/cancel once
//          the turn has received K agent_message_chunk updates)
//   cancel {sessionId?}   list {cwd?, cursor?}   close {sessionId?}
//   request {method, params}   notify {method, params}   sleep {ms}
//   wait                  (await the steps started with "wait": false)
//   until {type, method?, sessionUpdate?, count?: 1}   (wait until that many such lines were
//                         printed, counting from the start: e.g. a permission request arrived)
//   reconnect             (close the connection, and the agent if spawned; open a new one)
//   touch {path}          (create the file: tells another process a step is done)
//   awaitFile {path}      (wait until the file exists: a barrier between two clients)
//
// Output, one JSON object per line on stdout, in the order things happened:
//   {"type":"update","sessionId","update"}          every session/update, raw as received
//   {"type":"response","method","id","result"|"error"}   every response to our requests, raw
//   {"type":"request","method","id","params"}       every request from the agent, raw (only
//                                                   session/request_permission is served;
//                                                   the rest get -32601)
//   {"type":"permission","toolCallId","outcome"}    how a permission request was answered
//   {"type":"withdrawn","method","id"}              a held request the agent withdrew
//   {"type":"notification","method","params"}      any other notification
//   {"type":"cancel_sent","sessionId","afterChunks"}
//   {"type":"step","index","op","ok","error"?,"code"?}   after each step (code: JSON-RPC)
//   {"type":"agent_exit","code","signal"}           the spawned agent ended
//   {"type":"done","ok"} at the end (exit 0 if every step succeeded, else 1),
//   or {"type":"fatal","error"} (exit 2).
// Agent stderr is copied to our stderr.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const printed = []; // every line so far, for "until"
const waiters = new Set();
const out = (line) => {
  process.stdout.write(JSON.stringify(line) + "\n");
  printed.push(line);
  for (const waiter of waiters) waiter();
};
const fatal = (error) => {
  out({ type: "fatal", error: String(error?.stack ?? error) });
  stopAgent().finally(() => process.exit(2));
};

const sdkRequire = createRequire(pathToFileURL(process.env.OMA_ACP_TS_SDK_DIR + "/"));
const load = (req, name) => import(pathToFileURL(req.resolve(name)).href);
const acp = await load(sdkRequire, "@agentclientprotocol/sdk");

const arg = process.argv[2];
const source = !arg || arg === "-" ? readFileSync(0, "utf8") : arg.trimStart().startsWith("{") ? arg : readFileSync(arg, "utf8");
const script = JSON.parse(source);
const defaultCwd = script.cwd ?? process.cwd();

const state = {
  sessionId: null,
  permission: script.permission ?? "allow",
  turn: null, // {sessionId, chunks, cancelAfter, cancelSent}
  pendingMethods: new Map(), // our request id -> method
};
let connection = null;
let agentProcess = null;

// -- the wire tap: every message, raw, before the SDK parses it ------------------------------

function incoming(message) {
  if (message.method === "session/update") {
    const { sessionId, update } = message.params ?? {};
    out({ type: "update", sessionId, update });
    const turn = state.turn;
    if (turn && update?.sessionUpdate === "agent_message_chunk" && sessionId === turn.sessionId) {
      turn.chunks += 1;
      if (turn.cancelAfter !== undefined && turn.chunks >= turn.cancelAfter && !turn.cancelSent) {
        turn.cancelSent = true;
        out({ type: "cancel_sent", sessionId, afterChunks: turn.chunks });
        void connection.agent.notify("session/cancel", { sessionId });
      }
    }
  } else if (message.method !== undefined && message.id !== undefined) {
    out({ type: "request", method: message.method, id: message.id, params: message.params });
  } else if (message.method !== undefined) {
    out({ type: "notification", method: message.method, params: message.params });
  } else if (message.id !== undefined && state.pendingMethods.has(message.id)) {
    const method = state.pendingMethods.get(message.id);
    state.pendingMethods.delete(message.id);
    const line = { type: "response", method, id: message.id };
    if ("error" in message) line.error = message.error;
    else line.result = message.result;
    out(line);
  }
}

function outgoing(message) {
  if (message.method !== undefined && message.id !== undefined) {
    state.pendingMethods.set(message.id, message.method);
  }
}

function tap(stream) {
  const writer = stream.writable.getWriter();
  return {
    readable: stream.readable.pipeThrough(
      new TransformStream({
        transform(message, controller) {
          incoming(message);
          controller.enqueue(message);
        },
      }),
    ),
    writable: new WritableStream({
      async write(message) {
        outgoing(message);
        await writer.write(message);
      },
      close: () => writer.close(),
      abort: (reason) => writer.abort(reason),
    }),
  };
}

// -- transports ---------------------------------------------------------------------------------

async function webSocketConstructor() {
  if (process.env.OMA_WS_DIR) {
    const ws = await load(createRequire(pathToFileURL(process.env.OMA_WS_DIR + "/")), "ws");
    return ws.default?.WebSocket ?? ws.default ?? ws.WebSocket;
  }
  if (!globalThis.WebSocket) throw new Error("no WebSocket: set OMA_WS_DIR to a folder holding ws");
  // Node's own (undici) WebSocket takes headers in its second argument, not a third.
  return class extends globalThis.WebSocket {
    constructor(url, protocols, options) {
      super(url, { protocols, headers: options?.headers });
    }
  };
}

async function openStream() {
  if (script.url) {
    const { createWebSocketStream } = await load(sdkRequire, "@agentclientprotocol/sdk/experimental/ws-client");
    const headers = { ...script.headers };
    if (script.token) headers.Authorization = `Bearer ${script.token}`;
    return createWebSocketStream(script.url, {
      headers,
      protocols: script.protocols,
      WebSocket: await webSocketConstructor(),
    });
  }
  const [command, ...args] = script.agent;
  const child = spawn(command, args, {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, ...script.env },
    cwd: script.agentCwd,
  });
  child.stderr.on("data", (data) => process.stderr.write(data));
  child.exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => {
      out({ type: "agent_exit", code, signal });
      resolve();
    }),
  );
  child.on("error", (error) => fatal(`cannot start ${command}: ${error.message}`));
  child.stdin.on("error", () => {}); // EPIPE after the agent died: its exit says so
  agentProcess = child;
  return acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
}

function choose(options, policy) {
  if (policy && typeof policy === "object") return { outcome: "selected", optionId: policy.optionId };
  if (policy === "cancel") return { outcome: "cancelled" };
  if (policy === "first") {
    return options.length ? { outcome: "selected", optionId: options[0].optionId } : { outcome: "cancelled" };
  }
  const kinds = {
    allow: ["allow_once", "allow_always"],
    allow_always: ["allow_always", "allow_once"],
    reject: ["reject_once", "reject_always"],
    reject_always: ["reject_always", "reject_once"],
  }[policy];
  if (!kinds) throw new Error(`unknown permission policy ${JSON.stringify(policy)}`);
  for (const kind of kinds) {
    const option = options.find((o) => o.kind === kind);
    if (option) return { outcome: "selected", optionId: option.optionId };
  }
  return { outcome: "cancelled" };
}

const app = acp
  .client({ name: "oma-ts-client" })
  .onNotification("session/update", () => {}) // printed by the tap, in wire order
  .onRequest("session/request_permission", async ({ params, signal, requestId }) => {
    const policy = state.turn?.permission ?? state.permission;
    if (policy === "hold") {
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      out({ type: "withdrawn", method: "session/request_permission", id: requestId });
      return { outcome: { outcome: "cancelled" } };
    }
    const outcome = choose(params.options ?? [], policy);
    out({ type: "permission", toolCallId: params.toolCall?.toolCallId, outcome });
    return { outcome };
  })
  .onRequest("*", ({ method }) => {
    throw acp.RequestError.methodNotFound(method);
  });

async function connect() {
  connection = app.connect(tap(await openStream()));
}

async function stopAgent() {
  connection?.close();
  connection = null;
  const child = agentProcess;
  agentProcess = null;
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  child.stdin.end();
  const exited = (ms) => Promise.race([child.exited.then(() => true), new Promise((r) => setTimeout(() => r(false), ms))]);
  if (await exited(2000)) return;
  child.kill("SIGTERM");
  if (await exited(2000)) return;
  child.kill("SIGKILL");
  await child.exited;
}

// -- steps ---------------------------------------------------------------------------------------

function promptBlocks(step) {
  if (step.blocks) return step.blocks;
  const blocks = [];
  if (step.text !== undefined) blocks.push({ type: "text", text: step.text });
  for (const image of step.images ?? []) blocks.push({ type: "image", data: image.data, mimeType: image.mimeType });
  return blocks;
}

const sid = (step) => step.sessionId ?? state.sessionId;

const ops = {
  initialize: (step) =>
    connection.agent.request("initialize", {
      protocolVersion: step.protocolVersion ?? 1,
      clientCapabilities: step.clientCapabilities ?? script.clientCapabilities ?? {
        fs: { readTextFile: false, writeTextFile: false },
        terminal: false,
      },
      clientInfo: step.clientInfo ?? { name: "oma-ts-client", version: "1.0" },
    }),
  new: async (step) => {
    const params = { cwd: step.cwd ?? defaultCwd, mcpServers: step.mcpServers ?? [] };
    if (step._meta) params._meta = step._meta;
    const result = await connection.agent.request("session/new", params);
    state.sessionId = result.sessionId;
    return result;
  },
  load: (step) => attach("session/load", step),
  resume: (step) => attach("session/resume", step),
  prompt: async (step) => {
    const turn = { sessionId: sid(step), chunks: 0, cancelAfter: step.cancelAfter, permission: step.permission };
    state.turn = turn;
    try {
      return await connection.agent.request("session/prompt", { sessionId: turn.sessionId, prompt: promptBlocks(step) });
    } finally {
      if (state.turn === turn) state.turn = null;
    }
  },
  cancel: (step) => connection.agent.notify("session/cancel", { sessionId: sid(step) }),
  list: (step) => {
    const params = {};
    if (step.cwd !== undefined) params.cwd = step.cwd;
    if (step.cursor !== undefined) params.cursor = step.cursor;
    return connection.agent.request("session/list", params);
  },
  close: (step) => connection.agent.request("session/close", { sessionId: sid(step) }),
  request: (step) => connection.agent.request(step.method, step.params ?? {}),
  notify: (step) => connection.agent.notify(step.method, step.params ?? {}),
  sleep: (step) => new Promise((resolve) => setTimeout(resolve, step.ms ?? 0)),
  until: (step) =>
    new Promise((resolve) => {
      const matches = (line) =>
        line.type === step.type &&
        (step.method === undefined || line.method === step.method) &&
        (step.sessionUpdate === undefined || line.update?.sessionUpdate === step.sessionUpdate);
      const check = () => {
        if (printed.filter(matches).length >= (step.count ?? 1)) {
          waiters.delete(check);
          resolve();
        }
      };
      waiters.add(check);
      check();
    }),
  touch: (step) => writeFileSync(step.path, ""),
  awaitFile: async (step) => {
    while (!existsSync(step.path)) await new Promise((resolve) => setTimeout(resolve, 20));
  },
  reconnect: async () => {
    await stopAgent();
    await connect();
  },
};

async function attach(method, step) {
  const params = { sessionId: sid(step), cwd: step.cwd ?? defaultCwd };
  if (method === "session/load" || step.mcpServers) params.mcpServers = step.mcpServers ?? [];
  const result = await connection.agent.request(method, params);
  state.sessionId = params.sessionId;
  return result;
}

async function main() {
  await connect();
  let ok = true;
  let background = [];
  const run = async (index, step) => {
    try {
      if (!(step.op in ops)) throw new Error(`unknown op ${JSON.stringify(step.op)}`);
      await ops[step.op](step);
      out({ type: "step", index, op: step.op, ok: true });
    } catch (error) {
      ok = false;
      const line = { type: "step", index, op: step.op, ok: false, error: error?.message ?? String(error) };
      if (error?.code !== undefined) line.code = error.code;
      out(line);
    }
  };
  for (const [index, step] of (script.steps ?? []).entries()) {
    if (step.op === "wait") {
      await Promise.all(background);
      background = [];
      out({ type: "step", index, op: "wait", ok: true });
    } else if (step.wait === false) {
      background.push(run(index, step));
    } else {
      await run(index, step);
    }
  }
  await Promise.all(background);
  await stopAgent();
  out({ type: "done", ok });
  process.exit(ok ? 0 : 1);
}

const timeoutS = script.timeout_s ?? 60;
setTimeout(() => fatal(`timeout after ${timeoutS} s`), timeoutS * 1000);
main().catch(fatal);
