// A real ACP agent on the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0).
// Scenarios by the first word of the prompt's last paragraph: "echo ...", "tools", "slow",
// "peek PATH" (says peek:ok:<text> or peek:<error code>: what the agent itself can read),
// "terminal SHELL-COMMAND" (runs it with terminal/create, says its exit code and output),
// "meta" (says meta:<the session/prompt's _meta as JSON>), "toolcall" (two tool calls:
// "Read notes" completed, "Run tests" failed), "mcp" (says mcp:<JSON of the mcpServers its
// session was opened with>), "history" (says history:<this session's earlier prompts,
// joined by |>).
// The SDK is resolved from OMA_ACP_TS_SDK_DIR (a folder holding node_modules).
// Switches: OMA_TS_AGENT_MCP="http,sse" advertises those mcpCapabilities (default: none);
// OMA_TS_AGENT_STATE=DIR keeps each session in DIR/<id>.json and advertises
// sessionCapabilities.resume (another process of the agent resumes it, as real agents do);
// OMA_TS_AGENT_FORK=1 (with a state folder) advertises sessionCapabilities.fork and serves
// session/fork: the new session starts with the parent's prompts and its own mcpServers.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const stateDir = process.env.OMA_TS_AGENT_STATE || null;
const forks = stateDir !== null && process.env.OMA_TS_AGENT_FORK === "1";
// session/fork is unstable in ACP v1: the SDK's "unstable" entry knows it.
const entry = forks ? "@agentclientprotocol/sdk/unstable" : "@agentclientprotocol/sdk";
const require = createRequire(pathToFileURL(process.env.OMA_ACP_TS_SDK_DIR + "/"));
const acp = await import(pathToFileURL(require.resolve(entry)).href);

let sessions = 0;
const cancels = new Map();
const mcpCapabilities = Object.fromEntries(
  (process.env.OMA_TS_AGENT_MCP || "")
    .split(",")
    .filter((name) => name)
    .map((name) => [name, true]),
);
// What each session received: { prompts: [...], mcpServers: [...] }.
const known = new Map();
const fileOf = (id) => `${stateDir}/${id}.json`;
const save = (id) => {
  if (stateDir !== null) writeFileSync(fileOf(id), JSON.stringify(known.get(id)));
};
const open = (mcpServers) => {
  const id = stateDir === null ? `ts-${++sessions}` : `ts-${process.pid}-${++sessions}`;
  known.set(id, { prompts: [], mcpServers: mcpServers ?? [] });
  save(id);
  return id;
};
const recall = (id) => {
  if (!known.has(id) && stateDir !== null && existsSync(fileOf(id))) {
    known.set(id, JSON.parse(readFileSync(fileOf(id), "utf8")));
  }
  return known.get(id);
};
const sessionCapabilities = {};
if (stateDir !== null) sessionCapabilities.resume = {};
if (forks) sessionCapabilities.fork = {};

const say = (client, sessionId, text) =>
  client.notify("session/update", {
    sessionId,
    update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
  });

const app = acp
  .agent({ name: "ts-scenario-agent" })
  .onRequest("initialize", () => ({
    protocolVersion: 1,
    agentCapabilities: { loadSession: false, mcpCapabilities, sessionCapabilities },
    agentInfo: { name: "ts-scenario-agent", version: "1.0" },
  }))
  .onRequest("session/new", ({ params }) => ({ sessionId: open(params.mcpServers) }))
  .onRequest("session/resume", ({ params }) => {
    if (recall(params.sessionId) === undefined) {
      throw acp.RequestError.resourceNotFound(params.sessionId);
    }
    return {};
  })

  .onNotification("session/cancel", ({ params }) => {
    cancels.get(params.sessionId)?.();
  })
  .onRequest("session/prompt", async ({ params, client }) => {
    const text = params.prompt.map((b) => b.text ?? "").join("");
    const last = text.split("\n\n").at(-1);
    const word = last.split(" ")[0];
    const sid = params.sessionId;
    const session = recall(sid) ?? { prompts: [], mcpServers: [] };
    const earlier = [...session.prompts];
    session.prompts.push(last);
    known.set(sid, session);
    save(sid);
    if (word === "mcp") {
      await say(client, sid, `mcp:${JSON.stringify(session.mcpServers)}`);
      return { stopReason: "end_turn" };
    }
    if (word === "history") {
      await say(client, sid, `history:${earlier.join("|")}`);
      return { stopReason: "end_turn" };
    }
    if (word === "tools") {
      const answer = await client.request("session/request_permission", {
        sessionId: sid,
        toolCall: { toolCallId: "t1", title: "Write file", kind: "edit" },
        options: [
          { optionId: "aa", name: "Always", kind: "allow_always" },
          { optionId: "ao", name: "Once", kind: "allow_once" },
          { optionId: "ro", name: "No", kind: "reject_once" },
        ],
      });
      await say(client, sid, `permission:${answer.outcome.optionId ?? answer.outcome.outcome}`);
      return { stopReason: "end_turn" };
    }
    if (word === "peek") {
      const path = last.slice("peek ".length);
      let seen;
      try {
        seen = `peek:ok:${readFileSync(path, "utf8")}`;
      } catch (error) {
        seen = `peek:${error.code}`;
      }
      await say(client, sid, seen);
      return { stopReason: "end_turn" };
    }
    if (word === "terminal") {
      const { terminalId } = await client.request("terminal/create", {
        sessionId: sid,
        command: "sh",
        args: ["-c", last.slice("terminal ".length)],
      });
      const exit = await client.request("terminal/wait_for_exit", { sessionId: sid, terminalId });
      const { output } = await client.request("terminal/output", { sessionId: sid, terminalId });
      await client.request("terminal/release", { sessionId: sid, terminalId });
      await say(client, sid, `exit:${exit.exitCode}\n${output}`);
      return { stopReason: "end_turn" };
    }
    if (word === "meta") {
      await say(client, sid, `meta:${JSON.stringify(params._meta ?? null)}`);
      return { stopReason: "end_turn" };
    }
    if (word === "toolcall") {
      const update = (u) => client.notify("session/update", { sessionId: sid, update: u });
      await update({
        sessionUpdate: "tool_call",
        toolCallId: "tc-read",
        title: "Read notes",
        kind: "read",
        status: "pending",
        rawInput: { path: "secret notes" },
      });
      await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-read", status: "completed" });
      await update({
        sessionUpdate: "tool_call",
        toolCallId: "tc-test",
        title: "Run tests",
        kind: "execute",
        status: "in_progress",
      });
      await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-test", status: "failed" });
      await say(client, sid, "tools done");
      return { stopReason: "end_turn" };
    }
    if (word === "slow") {
      await say(client, sid, "started");
      await new Promise((resolve) => cancels.set(sid, resolve));
      return { stopReason: "cancelled" };
    }
    for (const part of text.match(/.{1,4}/gs) ?? []) await say(client, sid, part);
    return { stopReason: "end_turn" };
  });

if (forks) {
  app.onRequest("session/fork", ({ params }) => {
    const parent = recall(params.sessionId);
    if (parent === undefined) throw acp.RequestError.resourceNotFound(params.sessionId);
    const id = open(params.mcpServers);
    known.get(id).prompts = [...parent.prompts];
    save(id);
    return { sessionId: id };
  });
}

app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
