// A real ACP agent on the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0).
// Scenarios by the first word of the prompt's last paragraph: "echo ...", "tools", "slow",
// "peek PATH" (says peek:ok:<text> or peek:<error code>: what the agent itself can read),
// "terminal SHELL-COMMAND" (runs it with terminal/create, says its exit code and output),
// "meta" (says meta:<the session/prompt's _meta as JSON>), "toolcall" (two tool calls:
// "Read notes" completed, "Run tests" failed).
// The SDK is resolved from OMA_ACP_TS_SDK_DIR (a folder holding node_modules).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const require = createRequire(pathToFileURL(process.env.OMA_ACP_TS_SDK_DIR + "/"));
const acp = await import(pathToFileURL(require.resolve("@agentclientprotocol/sdk")).href);

let sessions = 0;
const cancels = new Map();

const say = (client, sessionId, text) =>
  client.notify("session/update", {
    sessionId,
    update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } },
  });

const app = acp
  .agent({ name: "ts-scenario-agent" })
  .onRequest("initialize", () => ({
    protocolVersion: 1,
    agentCapabilities: { loadSession: false },
    agentInfo: { name: "ts-scenario-agent", version: "1.0" },
  }))
  .onRequest("session/new", () => ({ sessionId: `ts-${++sessions}` }))
  .onNotification("session/cancel", ({ params }) => {
    cancels.get(params.sessionId)?.();
  })
  .onRequest("session/prompt", async ({ params, client }) => {
    const text = params.prompt.map((b) => b.text ?? "").join("");
    const last = text.split("\n\n").at(-1);
    const word = last.split(" ")[0];
    const sid = params.sessionId;
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

app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
