"""The ACP facade: every profile served as an ACP v1 agent on ``/acp/<profile>`` and ``/acp``.

An ACP session is a daemon agent: ``session/new`` opens one (its
``sessionId`` is the ``agentId``), ``session/prompt`` runs a turn of its
history, ``session/load`` attaches and replays the whole journal first,
``session/resume`` attaches without replay, ``session/close`` disposes it.
Every attached connection follows the agent's journal through its own
:class:`Attachment`, so all of them see the same updates in the same order;
a turn is answered once its updates reached the client that asked.  A
connection that closes only detaches: its turn goes on in the daemon's task
group and is journaled, for the next ``session/load``.  The mapping of
blocks, events and results is :mod:`oma_bridge.server.acp.mapping`;
``docs/acp.md`` ("The facade") has its tables and the decisions taken.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from pathlib import Path
from typing import Any

from oma_bridge._version import __version__
from oma_bridge.backends import text_only
from oma_bridge.backends.acp.turn import update_of_event
from oma_bridge.errors import InvalidMessageError, OMAError, WireError
from oma_bridge.redaction import redact
from oma_bridge.results import StreamEvent
from oma_bridge.rpc import ConnectionClosedError
from oma_bridge.rpc.codes import (
    ACP_PROTOCOL_VERSION,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
)
from oma_bridge.server.acp.attachment import Attachment
from oma_bridge.server.acp.forking import fork_advertised, fork_session
from oma_bridge.server.acp.mapping import client_meta, prompt_input, stop_reason
from oma_bridge.server.acp.mcp_servers import session_servers
from oma_bridge.server.agents.host import AgentHost, new_agent_id
from oma_bridge.server.agents.journal import Journal
from oma_bridge.server.agents.registry import HostedAgent
from oma_bridge.server.agents.runs import Runs
from oma_bridge.server.agents.turns import TurnRunner
from oma_bridge.server.client_folder import client_folder
from oma_bridge.server.config import LlmProfile
from oma_bridge.server.fixes import no_such_profile
from oma_bridge.server.gateway import Endpoint
from oma_bridge.server.profiles import Profile
from oma_bridge.server.session import Session
from oma_bridge.server.worktrees import WORKTREE, WORKTREE_META, is_worktree_profile
from oma_bridge.wire.codes import forbidden
from oma_bridge.wire.params import AgentOverrides, ClientInfo, InitializeParams

__all__ = ["AcpFacade", "Attachment"]

logger = logging.getLogger("oma_bridge.server.acp")

PROFILE_META = "oma-bridge/profile"
SANDBOX_META = "oma-bridge/sandbox"
PAGE = 100


def _not_found(session_id: object) -> WireError:
    return WireError(INVALID_PARAMS, f"Unknown session: {session_id}", {"name": "NotFound"})


def _bad(message: str) -> WireError:
    return WireError(INVALID_PARAMS, message)


def _iso(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


class AcpFacade:
    """Builds the endpoint of each ACP connection; see the module docstring."""

    def __init__(self, host: AgentHost, runs: Runs, turns: TurnRunner) -> None:
        self.host = host
        self.runs = runs
        self.turns = turns

    def endpoint(self, profile: str) -> Endpoint:
        connection = _Connection(self, profile or None)
        return Endpoint(
            prefix="a",
            on_request=connection.on_request,
            on_notification=connection.on_notification,
            cancel_param="requestId",
        )


class _Connection:
    """One ACP client: its capabilities and the sessions it is attached to."""

    def __init__(self, facade: AcpFacade, profile: str | None) -> None:
        self.host = facade.host
        self.runs = facade.runs
        self.turns = facade.turns
        self.profile = profile
        self.client_capabilities: dict[str, Any] = {}
        self.attachments: dict[str, Attachment] = {}
        self._closing_hooked = False

    # -- dispatch ------------------------------------------------------------

    async def on_request(self, session: Session, method: str, params: Any) -> Any:
        if method == "initialize":
            return self._initialize(session, params)
        if not session.initialized:
            # -32600, as the ACP SDKs answer: in ACP, -32002 (this daemon's own
            # "not initialized") means "resource not found".
            raise WireError(INVALID_REQUEST, f"Invalid Request: send initialize before {method!r}")
        handler = {
            "authenticate": self._authenticate,
            "session/new": self._new,
            "session/load": self._load,
            "session/resume": self._resume,
            "session/list": self._list,
            "session/close": self._close,
            "session/fork": self._fork,
            "session/prompt": self._prompt,
            "session/set_mode": self._set_mode,
            "session/set_config_option": self._set_config_option,
        }.get(method)
        if handler is None:  # before the params: an unknown method is -32601 whatever they are
            raise WireError(METHOD_NOT_FOUND, f"Method not found: {method}")
        if not isinstance(params, dict):
            raise _bad("params must be an object")
        try:
            return await handler(session, params)
        except WireError:
            raise
        except Exception:
            # As the daemon's own protocol does: logged here, nothing internal told.
            logger.exception("connection %s: %s failed", session.id, method)
            raise WireError(INTERNAL_ERROR, "Internal error") from None

    async def on_notification(self, session: Session, method: str, params: Any) -> None:
        if method == "session/cancel" and isinstance(params, dict):
            self._cancel(params.get("sessionId"))

    # -- initialize ----------------------------------------------------------

    def _initialize(self, session: Session, params: Any) -> dict[str, Any]:
        if session.initialized:
            raise WireError(INVALID_REQUEST, "Invalid Request: already initialized")
        if not isinstance(params, dict) or not isinstance(params.get("protocolVersion"), int):
            raise _bad("initialize needs an integer protocolVersion")
        capabilities = params.get("clientCapabilities")
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        raw_info = params.get("clientInfo")
        info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
        name, version = info.get("name"), info.get("version")
        session.init = InitializeParams(
            protocolVersion=1,
            clientInfo=ClientInfo(
                name=name if isinstance(name, str) and name else "acp-client",
                version=version if isinstance(version, str) else "",
            ),
        )
        if not self._closing_hooked:
            self._closing_hooked = True
            session.on_close(lambda _session: self._detach_all())
        profile = self._profile_or_none(self.profile)
        # Without a profile (/acp), the session's is chosen later: text only until then.
        plain_text = profile is None or text_only(profile.kind)
        sessions: dict[str, Any] = {"list": {}, "resume": {}, "close": {}}
        if fork_advertised(self.host, self.profile):
            sessions["fork"] = {}  # PROTOCOL §22.4 (forking.py)
        answer: dict[str, Any] = {
            "protocolVersion": ACP_PROTOCOL_VERSION,
            "agentInfo": {
                "name": f"oma-bridge/{self.profile}" if self.profile else "oma-bridge",
                "title": (profile.description if profile else None)
                or (self.profile or "oma-bridge"),
                "version": __version__,
            },
            "authMethods": [],
            "agentCapabilities": {
                "loadSession": True,
                "sessionCapabilities": sessions,
                "promptCapabilities": {
                    "image": not plain_text,
                    "audio": False,
                    "embeddedContext": not plain_text,
                },
                "mcpCapabilities": {"http": False, "sse": False},
            },
        }
        if profile is not None and not isinstance(profile, LlmProfile):
            answer["_meta"] = {SANDBOX_META: profile.sandbox_info()}  # PROTOCOL §19.1
        return answer

    async def _authenticate(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        raise _bad("this agent offers no authentication methods (authMethods is empty)")

    # -- sessions ------------------------------------------------------------

    def _profile_or_none(self, name: str | None) -> Profile | None:
        return self.host.config.agents.get(name) if name else None

    def _chosen_profile(self, params: dict[str, Any]) -> tuple[str, Profile]:
        raw_meta = params.get("_meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        asked = meta.get(PROFILE_META)
        name = self.profile or (asked if isinstance(asked, str) else None)
        name = name or self.host.settings.acp_default_profile
        names = ", ".join(sorted(self.host.config.agents))
        if not name:
            raise _bad(
                f'name the profile in session/new\'s _meta["{PROFILE_META}"] '
                f"(one of: {names}), or connect to /acp/<profile>"
            )
        profile = self._profile_or_none(name)
        if profile is None:
            raise _bad(no_such_profile(name, self.host.config.agents))
        return name, profile

    def _folder(self, name: str, profile: Profile, params: dict[str, Any]) -> str | None:
        """The folder a session of ``profile`` runs in, by the rules of ``docs/acp.md``."""
        cwd = params.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise _bad("cwd must be a string (an absolute path)")
        if profile.kind == "llm":
            return cwd
        fixed = getattr(profile, "cwd", None)
        if fixed in ("client", WORKTREE):  # a worktree of the client's repository: worktrees.py
            return client_folder(cwd, self.host.config, name)
        if isinstance(fixed, Path) and cwd and os.path.realpath(cwd) != os.path.realpath(fixed):
            raise forbidden(
                f'profile "{name}" runs in {fixed}, not {cwd}; set cwd = "client" in its '
                "profile to run it in the client's folder"
            )
        return cwd

    async def _new(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        name, profile = self._chosen_profile(params)
        folder = self._folder(name, profile, params)
        backend_update: dict[str, Any] = {}
        if profile.kind != "llm" and getattr(profile, "cwd", None) == "client" and folder:
            backend_update["cwd"] = Path(folder) if profile.kind == "acp" else folder
        forwarded, meta = await session_servers(self.host, name, profile, params)
        if forwarded is not None:
            backend_update["mcp_servers"] = forwarded
        agent_id, worktrees = new_agent_id(), self.host.worktrees
        if is_worktree_profile(profile):
            tree, _ = await worktrees.make(agent_id, name, profile, folder)
            backend_update.update(worktrees.backend_update(profile, tree))
            meta[WORKTREE_META] = tree.to_wire()
        try:
            hosted = self.host.open(
                session,
                name,
                AgentOverrides(),
                backend_update=backend_update,
                meta={"cwd": folder or ""},
                agent_id=agent_id,
            )
        except BaseException:
            await worktrees.discard(agent_id)
            raise
        hosted.meta["updatedAt"] = time.time()
        self._attach(session, hosted, hosted.journal.last_seq)
        logger.info("ACP session %s opened (profile %s) by %s", agent_id, name, session.id)
        answer: dict[str, Any] = {"sessionId": agent_id}
        if meta:
            answer["_meta"] = meta
        return answer

    def _hosted(self, session: Session, session_id: object) -> HostedAgent:
        """A live session, or one persisted before a restart, brought back."""
        if not isinstance(session_id, str):
            raise _bad("sessionId must be a string")
        hosted = self.host.agents.get(session_id)
        if hosted is None or hosted.closed:
            persisted = self.host.restorable.get(session_id)
            if persisted is None or (self.profile and persisted.profile != self.profile):
                raise _not_found(session_id)
            hosted = self.host.resume(session, session_id, persisted.profile)
        if self.profile and hosted.profile_name != self.profile:
            raise _not_found(session_id)
        return hosted

    def _attach(self, session: Session, hosted: HostedAgent, cursor: int) -> Attachment:
        previous = self.attachments.pop(hosted.agent_id, None)
        if previous is not None:
            previous.detach()
        attachment = Attachment(session, hosted, cursor, self.client_capabilities)
        self.attachments[hosted.agent_id] = attachment
        hosted.acp_clients[session] = attachment
        hosted.use(session)
        session.start_soon(attachment.pump)
        return attachment

    async def _load(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        hosted = self._hosted(session, params.get("sessionId"))
        replay = Attachment(session, hosted, 0)
        try:
            # The whole journal first, then live: the registration follows the
            # replay with no await between, so no entry falls in the gap.
            await replay.send_until_caught_up(replay=True)
            self._attach(session, hosted, replay.cursor)
        finally:
            replay.detach()
        return {}

    async def _resume(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        hosted = self._hosted(session, params.get("sessionId"))
        self._attach(session, hosted, hosted.journal.last_seq)
        return {}

    async def _list(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        cwd = params.get("cwd")
        cursor = params.get("cursor")
        start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
        rows: list[dict[str, Any]] = []
        for hosted in self.host.agents.values():
            rows.append({"id": hosted.agent_id, "profile": hosted.profile_name, **hosted.meta})
        for persisted in self.host.restorable.values():
            rows.append(
                {
                    "id": persisted.agent_id,
                    "profile": persisted.profile,
                    "updatedAt": persisted.created_at,
                    **persisted.meta,
                }
            )
        rows = [
            row
            for row in rows
            if (not self.profile or row["profile"] == self.profile)
            and (not isinstance(cwd, str) or _same_folder(row.get("cwd"), cwd))
        ]
        rows.sort(key=lambda row: float(row.get("updatedAt") or 0), reverse=True)
        page = rows[start : start + PAGE]
        sessions = []
        for row in page:
            item: dict[str, Any] = {
                "sessionId": row["id"],
                "cwd": row.get("cwd") or "",
                "updatedAt": _iso(float(row.get("updatedAt") or time.time())),
            }
            if row.get("title"):
                item["title"] = row["title"]
            sessions.append(item)
        answer: dict[str, Any] = {"sessions": sessions}
        if start + PAGE < len(rows):
            answer["nextCursor"] = str(start + PAGE)
        return answer

    async def _fork(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        forked, answer = await fork_session(
            self.host, session, self._hosted(session, params.get("sessionId")), params
        )
        self._attach(session, forked, forked.journal.last_seq)
        return answer

    async def _close(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        hosted = self._hosted(session, params.get("sessionId"))
        for attachment in list(hosted.acp_clients.values()):
            if isinstance(attachment, Attachment):
                attachment.detach()
        self.attachments.pop(hosted.agent_id, None)
        worktree = await self.host.close(hosted, forget=True)
        return {"_meta": {WORKTREE_META: worktree}} if worktree is not None else {}

    # -- turns ---------------------------------------------------------------

    async def _prompt(self, session: Session, params: dict[str, Any]) -> dict[str, Any]:
        hosted = self._hosted(session, params.get("sessionId"))
        attachment = self.attachments.get(hosted.agent_id)
        if attachment is None or attachment.detached or attachment.hosted is not hosted:
            self._attach(session, hosted, hosted.journal.last_seq)
        # Refused before anything is spawned or opened (docs/acp.md, rule F2).
        run_input = prompt_input(params.get("prompt"), hosted.agent.kind, hosted.profile_name)
        meta = client_meta(params.get("_meta"))
        try:
            turn = hosted.agent.prepare_prompt(run_input)
        except InvalidMessageError as error:
            raise WireError(
                INVALID_PARAMS, error.message, {"name": error.name, "code": error.code}
            ) from None
        if not hosted.meta.get("title"):
            title = run_input if isinstance(run_input, str) else _first_text(run_input)
            if title:
                shown = title.strip().splitlines()[0][:80] if title.strip() else ""
                self.host.update_meta(hosted, {"title": shown})
        result = await self.turns.turn(
            session,
            hosted,
            "session/prompt",
            turn,
            journaled_input=run_input,
            detach=True,
            meta=meta,
        )
        end = _run_end_seq(hosted.journal, result.run_id)
        if end is not None:
            await self._delivered(hosted.agent_id, end)
        return stop_reason(result.to_wire())

    async def _delivered(self, agent_id: str, seq: int) -> None:
        """Return once this connection was sent the session's updates up to entry ``seq``.

        A ``session/load`` or ``session/resume`` during the turn replaces the
        attachment: the newer one is followed.  A session closed meanwhile (by
        any client) detaches it: the answer goes out at once, nothing more
        will be sent.
        """
        while (attachment := self.attachments.get(agent_id)) is not None:
            await attachment.delivered(seq)
            if not attachment.detached or self.attachments.get(agent_id) is attachment:
                return

    def _cancel(self, session_id: object) -> None:
        if isinstance(session_id, str):
            self.runs.cancel_agent(session_id)

    async def _set_mode(self, session: Session, params: dict[str, Any]) -> Any:
        return await self._passthrough(session, "session/set_mode", params)

    async def _set_config_option(self, session: Session, params: dict[str, Any]) -> Any:
        return await self._passthrough(session, "session/set_config_option", params)

    async def _passthrough(self, session: Session, method: str, params: dict[str, Any]) -> Any:
        """Forward a session setting to an acp profile's agent; its answer comes back as it is.

        The agent is started (and its session opened) when it is not running
        yet; updates it sends while the request is read are journaled, so
        every attached client sees them (docs/acp.md, "Modes and config options").
        """
        hosted = self._hosted(session, params.get("sessionId"))
        if hosted.agent.kind != "acp":
            raise WireError(
                METHOD_NOT_FOUND,
                f'profile "{hosted.profile_name}" ({hosted.agent.kind}) has no modes or config '
                "options to set: only acp profiles forward them",
            )
        hosted.use(session)

        async def journal(event: StreamEvent) -> None:
            update = update_of_event(event)
            if update is not None:
                await hosted.record({"type": "update", "update": update})

        forwarded = {key: value for key, value in params.items() if key != "sessionId"}
        try:
            return await hosted.agent.session_request(method, forwarded, emit=journal)
        except ConnectionClosedError as error:
            message = f"the agent of session {hosted.agent_id} ended during {method}: {error}"
            raise WireError(INTERNAL_ERROR, redact(message)) from None
        except WireError:
            raise  # the agent's own error answer, relayed as it is
        except OMAError as error:  # it could not be started
            raise WireError(INTERNAL_ERROR, redact(error.message)) from None

    def _detach_all(self) -> None:
        for attachment in list(self.attachments.values()):
            attachment.detach()
        self.attachments.clear()


def _same_folder(theirs: object, asked: str) -> bool:
    """Folders compared resolved: a session of a ``cwd = "client"`` profile keeps its
    realpath, and a client asks with the path it knows (a symlink, maybe)."""
    if not isinstance(theirs, str) or not theirs:
        return False
    return theirs == asked or os.path.realpath(theirs) == os.path.realpath(asked)


def _first_text(blocks: list[dict[str, Any]]) -> str:
    for block in blocks:
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            return str(block["text"])
    return ""


def _run_end_seq(journal: Journal, run_id: str) -> int | None:
    for entry in reversed(journal.entries()):
        if entry.data["type"] == "run_end" and entry.data.get("runId") == run_id:
            return entry.seq
    return None
