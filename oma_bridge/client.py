"""An async Python client of the daemon's wire protocol (PROTOCOL.md).

::

    async with connect() as client:                 # finds the daemon by its discovery file
        agent = await client.open("echo")
        result = await agent.run("hello")
        async for event in agent.stream("hello again"):
            print(event.type, event.data)

Hooks and permission prompts are plain callables: ``client.open(profile,
before_run=fn, after_run=fn)`` and ``connect(permission_handler=fn)``; the
client answers the daemon's ``hook/*`` and ``permission/request`` requests
with them.  JSON-RPC errors raise: ``-32010`` as
:class:`~oma_bridge.errors.InvalidMessageError`, every other code as
:class:`DaemonError` carrying ``code`` and ``data``.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from oma_bridge._version import __version__
from oma_bridge.backends import PermissionHandler, PermissionOption, PermissionRequest
from oma_bridge.callbacks import invoke
from oma_bridge.errors import InvalidMessageError, WireError
from oma_bridge.paths import DISCOVERY_NAME, default_runtime_dir
from oma_bridge.results import AgentRunResult, StreamEvent
from oma_bridge.rpc import ConnectionClosedError, Peer, unwrap_single_error
from oma_bridge.wire.codes import INVALID_MESSAGE, PROTOCOL_VERSION

__all__ = [
    "Client",
    "DaemonError",
    "DaemonNotRunningError",
    "DaemonUnavailableError",
    "Discovery",
    "JournalEntry",
    "RemoteAgent",
    "connect",
    "find_daemon",
]


class DaemonNotRunningError(RuntimeError):
    """No daemon answers where the discovery file says (or there is none)."""


class DaemonUnavailableError(DaemonNotRunningError):
    """The daemon answered the connection with an HTTP error (a 503, say)."""


class DaemonError(WireError):
    """A JSON-RPC error answer from the daemon (see PROTOCOL.md §7)."""


@dataclass(frozen=True)
class Discovery:
    """The daemon's ``bridge.json``."""

    pid: int
    version: str
    protocol_version: int
    socket: str | None
    url: str | None
    token: str
    path: Path


def find_daemon(discovery_dir: Path | str | None = None) -> Discovery:
    """Read the discovery file and check that its daemon is alive."""
    folder = Path(discovery_dir) if discovery_dir is not None else default_runtime_dir()
    path = folder / DISCOVERY_NAME
    hint = "start one with `oma-bridge serve`"
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise DaemonNotRunningError(
            f"no oma-bridge daemon is running (no discovery file at {path}); {hint}"
        ) from None
    except (OSError, orjson.JSONDecodeError) as error:
        raise DaemonNotRunningError(f"cannot read the discovery file {path}: {error}") from None
    try:
        discovery = Discovery(
            pid=int(data["pid"]),
            version=str(data["version"]),
            protocol_version=int(data["protocolVersion"]),
            socket=data.get("socket"),
            url=data.get("url"),
            token=str(data["token"]),
            path=path,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise DaemonNotRunningError(f"the discovery file {path} is malformed: {error}") from None
    try:
        os.kill(discovery.pid, 0)
    except ProcessLookupError:
        raise DaemonNotRunningError(
            f"no oma-bridge daemon is running (the discovery file {path} names pid "
            f"{discovery.pid}, which is gone); {hint}"
        ) from None
    except PermissionError:
        pass  # alive, owned by someone else: the socket's permissions decide
    return discovery


def _raise_for(error: WireError) -> None:
    if isinstance(error, DaemonError | InvalidMessageError):
        raise error
    if error.rpc_code == INVALID_MESSAGE:
        data = error.data if isinstance(error.data, Mapping) else {}
        raise InvalidMessageError(str(data.get("message") or error.message)) from None
    raise DaemonError(error.rpc_code, error.message, error.data) from None


class RemoteAgent:
    """An agent opened on the daemon; the methods mirror :class:`~oma_bridge.Agent`."""

    def __init__(
        self,
        client: Client,
        agent_id: str,
        profile: str,
        before_run: Callable[..., Any] | None,
        after_run: Callable[..., Any] | None,
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.profile = profile
        self.before_run = before_run
        self.after_run = after_run

    async def run(
        self, run_input: str | Sequence[Any], *, run_id: str | None = None
    ) -> AgentRunResult:
        params = {"agentId": self.agent_id, "input": run_input, "runId": run_id or _run_id()}
        return AgentRunResult.from_wire(await self.client.request("agent/run", params))

    async def prompt(
        self, prompt_input: str | Sequence[Any], *, run_id: str | None = None
    ) -> AgentRunResult:
        params = {"agentId": self.agent_id, "input": prompt_input, "runId": run_id or _run_id()}
        return AgentRunResult.from_wire(await self.client.request("agent/prompt", params))

    def stream(self, run_input: str | Sequence[Any], *, run_id: str | None = None) -> RemoteStream:
        """Events as the daemon relays them; ``result`` is set once the stream ends."""
        return RemoteStream(self.client, self.agent_id, run_input, run_id or _run_id())

    async def history(self) -> list[Any]:
        answer = await self.client.request("agent/history", {"agentId": self.agent_id})
        return list(answer["messages"])

    async def reset(self) -> None:
        await self.client.request("agent/reset", {"agentId": self.agent_id})

    async def close(self) -> None:
        await self.client.request("agent/close", {"agentId": self.agent_id})
        self.client._agents.pop(self.agent_id, None)

    async def cancel(self, run_id: str) -> bool:
        return await self.client.cancel(run_id)

    def watch(
        self, *, after_seq: int | None = None, retry_s: float = 0.2
    ) -> AsyncIterator[JournalEntry]:
        """The agent's journal entries after ``after_seq`` (default: from now), then live ones.

        It reconnects by itself when the connection drops (after ``retry_s``)
        and resumes after the last ``seq`` it yielded, so a dropped connection
        costs no entry.  Close it when done (``contextlib.aclosing``, or
        ``break`` inside ``async with aclosing(agent.watch()) as entries``):
        it holds a connection of its own.
        """
        return self.client.watch(self.agent_id, after_seq=after_seq, retry_s=retry_s)


@dataclass(frozen=True)
class JournalEntry:
    """One ``agent/event``: an entry of an agent's journal (``docs/sessions.md``)."""

    agent_id: str
    seq: int
    #: ``{"type": "run_start" | "event" | "run_end" | "update" | "note", ...}``
    entry: dict[str, Any]

    @property
    def text(self) -> str | None:
        """The text of a ``text`` stream event, else ``None``."""
        event = self.entry.get("event")
        if (
            self.entry.get("type") == "event"
            and isinstance(event, dict)
            and event.get("type") == "text"
            and isinstance(event.get("data"), str)
        ):
            return str(event["data"])
        return None


class RemoteStream:
    """The events of one ``agent/stream`` call, in wire order."""

    def __init__(
        self, client: Client, agent_id: str, run_input: str | Sequence[Any], run_id: str
    ) -> None:
        self.client = client
        self.agent_id = agent_id
        self.run_id = run_id
        self.result: AgentRunResult | None = None
        self._input = run_input
        self._events: MemoryObjectReceiveStream[StreamEvent] | None = None

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[StreamEvent]:
        # Unbounded on purpose: the reader must never block on a slow
        # consumer, and the daemon bounds what it sends per connection.
        send, receive = anyio.create_memory_object_stream[StreamEvent](math.inf)
        self.client._streams[self.run_id] = send
        params = {"agentId": self.agent_id, "input": self._input, "runId": self.run_id}
        failure: BaseException | None = None
        try:
            call = await self.client.peer.start_request("agent/stream", params)

            async def settle() -> None:
                nonlocal failure
                try:
                    self.result = AgentRunResult.from_wire(await call.wait())
                except Exception as error:  # re-raised below, outside the task group
                    failure = error
                finally:
                    send.close()

            async with anyio.create_task_group() as tg, receive:
                tg.start_soon(settle)
                async for event in receive:
                    yield event
        finally:
            self.client._streams.pop(self.run_id, None)
        if isinstance(failure, WireError):
            _raise_for(failure)
        if failure is not None:
            raise failure

    async def cancel(self) -> bool:
        return await self.client.cancel(self.run_id)


def _run_id() -> str:
    return uuid.uuid4().hex


class Client:
    """One initialized connection to the daemon (use :func:`connect`)."""

    def __init__(
        self,
        peer: Peer,
        permission_handler: PermissionHandler | None,
        declare_hooks: Sequence[str] = ("beforeRun", "afterRun"),
    ) -> None:
        self.peer = peer
        self.permission_handler = permission_handler
        self.declare_hooks = tuple(declare_hooks)
        self.server_info: dict[str, Any] = {}
        self.profiles: list[dict[str, Any]] = []
        self._agents: dict[str, RemoteAgent] = {}
        self._streams: dict[str, MemoryObjectSendStream[StreamEvent]] = {}
        self._progress: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self._watches: dict[str, MemoryObjectSendStream[JournalEntry]] = {}
        #: How :func:`connect` reached the daemon: what :meth:`watch` reconnects with.
        self.connect_options: dict[str, Any] = {}

    async def request(self, method: str, params: Any = None) -> Any:
        try:
            return await self.peer.request(method, params)
        except WireError as error:
            _raise_for(error)
            raise  # unreachable: _raise_for always raises

    async def _initialize(self, client_name: str) -> None:
        capabilities: dict[str, Any] = {"hooks": list(self.declare_hooks)}
        if self.permission_handler is not None:
            capabilities["permissions"] = True
        answer = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientInfo": {"name": client_name, "version": __version__},
                "capabilities": capabilities,
            },
        )
        self.server_info = dict(answer.get("serverInfo", {}))
        self.profiles = list(answer.get("agents", []))

    async def list_agents(self) -> list[dict[str, Any]]:
        return list((await self.request("agents/list"))["agents"])

    async def open(
        self,
        profile: str,
        *,
        before_run: Callable[..., Any] | None = None,
        after_run: Callable[..., Any] | None = None,
        **overrides: Any,
    ) -> RemoteAgent:
        """Open an agent of a declared profile; ``overrides`` use the wire's camelCase keys."""
        config = dict(overrides)
        hooks = {"beforeRun": before_run is not None, "afterRun": after_run is not None}
        if any(hooks.values()):
            config["hooks"] = hooks
        params: dict[str, Any] = {"profile": profile}
        if config:
            params["config"] = config
        answer = await self.request("agent/open", params)
        agent = RemoteAgent(self, answer["agentId"], profile, before_run, after_run)
        self._agents[agent.agent_id] = agent
        return agent

    async def attach(
        self,
        agent_id: str,
        *,
        before_run: Callable[..., Any] | None = None,
        after_run: Callable[..., Any] | None = None,
        profile: str = "",
    ) -> RemoteAgent:
        """Become the hook owner of an agent opened earlier (after a reconnect)."""
        await self.request("agent/attach", {"agentId": agent_id})
        agent = RemoteAgent(self, agent_id, profile, before_run, after_run)
        self._agents[agent_id] = agent
        return agent

    async def cancel(self, run_id: str) -> bool:
        return bool((await self.request("run/cancel", {"runId": run_id}))["cancelled"])

    async def status(self) -> dict[str, Any]:
        return dict(await self.request("daemon/status"))

    async def run_agent(
        self,
        profile: str,
        run_input: str | Sequence[Any],
        *,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_progress: Callable[[dict[str, Any]], Any] | None = None,
        **overrides: Any,
    ) -> AgentRunResult:
        """``oma/runAgent``: a one-off agent with progress events."""
        run_id = run_id or _run_id()
        params: dict[str, Any] = {
            "config": {"profile": profile, **overrides},
            "input": run_input,
            "runId": run_id,
        }
        if metadata is not None:
            params["metadata"] = dict(metadata)
        if on_progress is not None:
            self._progress[run_id] = on_progress
        try:
            return AgentRunResult.from_wire(await self.request("oma/runAgent", params))
        finally:
            self._progress.pop(run_id, None)

    async def watch(
        self, agent_id: str, *, after_seq: int | None = None, retry_s: float = 0.2
    ) -> AsyncIterator[JournalEntry]:
        """Follow ``agent_id``'s journal; see :meth:`RemoteAgent.watch`.

        Each (re)connection is a connection of its own, made with this
        client's :attr:`connect_options`.  An ``afterSeq`` the daemon no longer
        holds raises :class:`DaemonError` (``CursorExpired``, with
        ``oldestSeq`` in its data).
        """
        # The last seq yielded; from the first answer on, never None again: a
        # reconnect must resume where the first watch began, not from "now".
        cursor = [after_seq]
        while True:
            try:
                with unwrap_single_error():
                    async with (
                        connect(**self.connect_options) as watcher,
                        # Closed here, in this task: it holds a task group.
                        contextlib.aclosing(watcher._watch_here(agent_id, cursor)) as items,
                    ):
                        async for item in items:
                            cursor[0] = item.seq
                            yield item
            except (DaemonNotRunningError, ConnectionClosedError, ConnectionClosed, OSError):
                await anyio.sleep(retry_s)  # the daemon restarts, or the network came back

    async def _watch_here(
        self, agent_id: str, cursor: list[int | None]
    ) -> AsyncGenerator[JournalEntry, None]:
        """One watch connection's entries; a ``None`` cursor becomes the answer's seq."""
        send, receive = anyio.create_memory_object_stream[JournalEntry](math.inf)
        self._watches[agent_id] = send
        params: dict[str, Any] = {"agentId": agent_id}
        if cursor[0] is not None:
            params["afterSeq"] = cursor[0]
        try:
            call = await self.peer.start_request("agent/watch", params)

            async def ended() -> None:
                await self.peer.closed.wait()
                send.close()

            async with anyio.create_task_group() as tg, receive:
                tg.start_soon(ended)
                try:
                    answer = await call.wait()
                except ConnectionClosedError:
                    raise  # dropped before the answer: Client.watch reconnects
                except WireError as error:
                    _raise_for(error)
                if cursor[0] is None:
                    cursor[0] = int(answer["seq"])
                async for item in receive:
                    yield item
                tg.cancel_scope.cancel()
        finally:
            self._watches.pop(agent_id, None)
        raise ConnectionClosedError("the watch connection closed")

    # -- requests and notifications from the daemon -------------------------

    async def _on_notification(self, method: str, params: Any) -> None:
        if not isinstance(params, Mapping):
            return
        run_id = params.get("runId")
        if method == "run/event" and run_id in self._streams:
            event = params.get("event") or {}
            data = event.get("data")
            if event.get("type") == "done":
                data = AgentRunResult.from_wire(data)
            self._streams[run_id].send_nowait(StreamEvent(str(event.get("type")), data))  # type: ignore[arg-type]  # the daemon's word
        elif method == "agent/event" and params.get("agentId") in self._watches:
            watch = self._watches[str(params["agentId"])]
            entry = params.get("entry")
            if isinstance(entry, dict) and isinstance(params.get("seq"), int):
                watch.send_nowait(JournalEntry(str(params["agentId"]), params["seq"], entry))
        elif method == "oma/progress" and run_id in self._progress:
            with contextlib.suppress(Exception):
                await invoke(self._progress[run_id], params.get("event"))

    async def _on_request(self, method: str, params: Any) -> Any:
        if not isinstance(params, Mapping):
            raise WireError(-32602, "params must be an object")
        if method == "permission/request":
            return await self._answer_permission(params)
        agent = self._agents.get(str(params.get("agentId")))
        if method == "hook/beforeRun" and agent is not None and agent.before_run is not None:
            answer = await invoke(agent.before_run, params.get("context"))
            if not isinstance(answer, Mapping):
                raise WireError(-32603, "the beforeRun hook returned no object")
            return {k: answer[k] for k in ("prompt", "messages") if k in answer}
        if method == "hook/afterRun" and agent is not None and agent.after_run is not None:
            result = await invoke(agent.after_run, AgentRunResult.from_wire(params.get("result")))
            return {"result": result.to_wire()}
        raise WireError(-32601, f"this client does not serve {method}")

    async def _answer_permission(self, params: Mapping[str, Any]) -> Any:
        if self.permission_handler is None:
            return {"outcome": {"outcome": "cancelled"}}
        request = PermissionRequest(
            agent_name=str(params.get("agentId", "")),
            run_id=str(params.get("runId", "")),
            tool_call=dict(params.get("toolCall") or {}),
            options=tuple(
                PermissionOption(str(o.get("optionId")), str(o.get("name")), str(o.get("kind")))
                for o in params.get("options") or ()
                if isinstance(o, Mapping)
            ),
        )
        choice = await self.permission_handler(request)
        if choice is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": choice}}


@contextlib.asynccontextmanager
async def connect(
    *,
    socket: Path | str | None = None,
    url: str | None = None,
    token: str | None = None,
    discovery_dir: Path | str | None = None,
    permission_handler: PermissionHandler | None = None,
    client_name: str = "oma-bridge-client",
    declare_hooks: Sequence[str] = ("beforeRun", "afterRun"),
) -> AsyncIterator[Client]:
    """Connect and ``initialize``.  With neither ``socket`` nor ``url``, the
    discovery file says where the daemon is (and gives its token).

    ``declare_hooks`` are the hooks this connection offers to serve
    (both by default); permission prompts are declared when a
    ``permission_handler`` is given."""
    if socket is None and url is None:
        discovery = find_daemon(discovery_dir)
        socket, url = discovery.socket, discovery.url
        token = token or discovery.token
    headers = {"Authorization": f"Bearer {token}"} if token else None
    options: dict[str, Any] = {
        "additional_headers": headers,
        "compression": None,
        "max_size": None,
        "open_timeout": 10,
    }
    try:
        if socket is not None:
            websocket = await unix_connect(str(socket), "ws://localhost/", **options)
        else:
            assert url is not None
            websocket = await ws_connect(url, **options)
    except InvalidStatus as error:  # it runs, but said no (503: out of file descriptors)
        body = error.response.body.decode("utf-8", "replace").strip() if error.response.body else ""
        raise DaemonUnavailableError(
            f"the daemon at {socket or url} refused the connection: "
            f"HTTP {error.response.status_code}" + (f": {body}" if body else "")
        ) from None
    except (OSError, ConnectionClosed) as error:
        where = socket or url
        raise DaemonNotRunningError(f"cannot connect to the daemon at {where}: {error}") from None
    async with websocket:
        client: Client

        async def send(data: bytes) -> None:
            await websocket.send(data, text=True)  # the protocol is text frames only

        peer = Peer(
            send,
            _receiver(websocket),
            on_request=lambda method, params: client._on_request(method, params),
            on_notification=lambda method, params: client._on_notification(method, params),
            cancel_param="id",
        )
        client = Client(peer, permission_handler, declare_hooks)
        client.connect_options = {
            "socket": socket,
            "url": url,
            "token": token,
            "permission_handler": permission_handler,
            "client_name": client_name,
            "declare_hooks": declare_hooks,
        }
        async with peer:
            await client._initialize(client_name)
            yield client


def _receiver(websocket: ClientConnection) -> Callable[[], Any]:
    async def receive() -> str | bytes | None:
        try:
            return await websocket.recv()
        except ConnectionClosed:
            return None

    return receive
