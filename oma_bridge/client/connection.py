"""One connection to the daemon: :func:`connect` and the :class:`Client` it gives."""

from __future__ import annotations

import contextlib
import math
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from oma_bridge._version import __version__
from oma_bridge.callbacks import invoke
from oma_bridge.client.discovery import find_daemon
from oma_bridge.client.errors import (
    ConnectOptionError,
    DaemonNotRunningError,
    DaemonTLSError,
    DaemonUnavailableError,
    raise_for,
)
from oma_bridge.client.handles import JournalEntry, RemoteAgent, new_run_id
from oma_bridge.client.teams import (
    OnDisconnect,
    RemoteTeamRun,
    TaskLike,
    TeamResult,
    tasks_params,
    team_params,
)
from oma_bridge.errors import WireError
from oma_bridge.results import AgentRunResult, StreamEvent
from oma_bridge.rpc import ConnectionClosedError, Peer, unwrap_single_error
from oma_bridge.wire.codes import PROTOCOL_VERSION

if TYPE_CHECKING:  # the backends package (and the messages it brings) is not for clients
    from oma_bridge.backends import ElicitationHandler, PermissionHandler

__all__ = ["Client", "client_ssl_context", "connect", "read_token_file"]


class Client:
    """One initialized connection to the daemon (use :func:`connect`)."""

    def __init__(
        self,
        peer: Peer,
        permission_handler: PermissionHandler | None,
        declare_hooks: Sequence[str] = ("beforeRun", "afterRun"),
        elicitation_handler: ElicitationHandler | None = None,
    ) -> None:
        self.peer = peer
        self.permission_handler = permission_handler
        self.elicitation_handler = elicitation_handler
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
            raise_for(error)
            raise  # unreachable: _raise_for always raises

    async def _initialize(self, client_name: str) -> None:
        capabilities: dict[str, Any] = {"hooks": list(self.declare_hooks)}
        if self.permission_handler is not None:
            capabilities["permissions"] = True
        if self.elicitation_handler is not None:
            capabilities["elicitation"] = True
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
        run_id = run_id or new_run_id()
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
                    raise_for(error)
                if cursor[0] is None:
                    cursor[0] = int(answer["seq"])
                async for item in receive:
                    yield item
                tg.cancel_scope.cancel()
        finally:
            self._watches.pop(agent_id, None)
        raise ConnectionClosedError("the watch connection closed")

    # -- team runs (docs/contract.md §15) -------------------------------------

    async def run_tasks(
        self,
        tasks: Sequence[TaskLike],
        *,
        max_concurrency: int | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_progress: Callable[[dict[str, Any]], Any] | None = None,
        on_disconnect: OnDisconnect = "cancel",
    ) -> TeamResult:
        """``oma/runTasks``: a DAG of tasks whose assignees are daemon profiles.

        Raises :class:`InvalidMessageError` for a ``description`` that is not
        a string and :class:`DaemonError` (-32602) for bad tasks (duplicate
        titles, unknown ``dependsOn`` or assignee, cycles), before anything
        runs.  Failed runs come back in the result (``success`` false).
        """
        params = tasks_params(tasks, max_concurrency, run_id, metadata, on_disconnect)
        return await self._team_request("oma/runTasks", params, on_progress)

    async def run_team(
        self,
        agents: Sequence[str],
        coordinator: str,
        goal: str,
        *,
        run_id: str | None = None,
        on_progress: Callable[[dict[str, Any]], Any] | None = None,
        on_disconnect: OnDisconnect = "cancel",
    ) -> TeamResult:
        """``oma/runTeam``: the ``coordinator`` profile (llm) plans ``goal`` for ``agents``.

        A ``goal`` that is not a string raises :class:`InvalidMessageError`;
        an unknown profile or a coordinator that is not an llm profile raise
        :class:`DaemonError` (-32011, -32602).  A plan the coordinator cannot
        make comes back as a failed result whose ``output`` says why.
        """
        params = team_params(agents, coordinator, goal, run_id, on_disconnect)
        return await self._team_request("oma/runTeam", params, on_progress)

    def tasks_run(
        self,
        tasks: Sequence[TaskLike],
        *,
        max_concurrency: int | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_disconnect: OnDisconnect = "cancel",
    ) -> contextlib.AbstractAsyncContextManager[RemoteTeamRun]:
        """:meth:`run_tasks` as a :class:`RemoteTeamRun` whose progress you iterate."""
        params = tasks_params(tasks, max_concurrency, run_id, metadata, on_disconnect)
        return self._team_run("oma/runTasks", params)

    def team_run(
        self,
        agents: Sequence[str],
        coordinator: str,
        goal: str,
        *,
        run_id: str | None = None,
        on_disconnect: OnDisconnect = "cancel",
    ) -> contextlib.AbstractAsyncContextManager[RemoteTeamRun]:
        """:meth:`run_team` as a :class:`RemoteTeamRun` whose progress you iterate."""
        params = team_params(agents, coordinator, goal, run_id, on_disconnect)
        return self._team_run("oma/runTeam", params)

    async def _team_request(
        self,
        method: str,
        params: dict[str, Any],
        on_progress: Callable[[dict[str, Any]], Any] | None,
    ) -> TeamResult:
        run_id = params["runId"]
        if on_progress is not None:
            self._progress[run_id] = on_progress
        try:
            return TeamResult.from_wire(await self.request(method, params))
        finally:
            self._progress.pop(run_id, None)

    @contextlib.asynccontextmanager
    async def _team_run(self, method: str, params: dict[str, Any]) -> AsyncIterator[RemoteTeamRun]:
        run = RemoteTeamRun(self, params["runId"])
        self._progress[run.run_id] = run._send.send_nowait
        try:
            call = await self.peer.start_request(method, params)
            with unwrap_single_error():
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run._settle, call)
                    try:
                        yield run
                    except BaseException:
                        if not call.settled:
                            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                                with contextlib.suppress(Exception):
                                    await self.cancel(run.run_id)
                                await call.withdraw()
                        raise
        finally:
            self._progress.pop(run.run_id, None)
            run._receive.close()
        if run._error is not None and not run._asked:
            raise run._error

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
        if method == "elicitation/request" and self.elicitation_handler is not None:
            from oma_bridge.backends import ElicitationRequest

            asked = {k: v for k, v in params.items() if k not in ("agentId", "runId")}
            run_id = params.get("runId")
            request = ElicitationRequest(
                str(params.get("agentId", "")), run_id if isinstance(run_id, str) else None, asked
            )
            return dict(await self.elicitation_handler(request))
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
        from oma_bridge.backends import PermissionOption, PermissionRequest

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


def read_token_file(path: Path | str) -> str:
    """The token in ``path``: its content, stripped of surrounding whitespace (§11.29)."""
    try:
        token = Path(path).read_text(encoding="ascii").strip()
    except OSError as error:
        raise ConnectOptionError(
            f"cannot read the token file {path}: {error.strerror or error}"
        ) from None
    except UnicodeDecodeError:
        raise ConnectOptionError(f"the token file {path} is not ASCII") from None
    if not token:
        raise ConnectOptionError(f"the token file {path} is empty")
    return token


def client_ssl_context(ca_file: Path | str | None = None) -> ssl.SSLContext:
    """The TLS context of a ``wss://`` connection: it trusts ``ca_file``, else the system's CAs.

    The daemon's certificate is verified and must name the URL's host.
    """
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except ssl.SSLError:
        raise ConnectOptionError(f"the CA file {ca_file} holds no PEM certificate") from None
    except OSError as error:
        raise ConnectOptionError(
            f"cannot read the CA file {ca_file}: {error.strerror or error}"
        ) from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _uses_tls(url: str) -> bool:
    return url[:6].lower() == "wss://"


def _check_url(url: str, ca_file: Path | str | None) -> None:
    if not (_uses_tls(url) or url[:5].lower() == "ws://"):
        raise ConnectOptionError(f"not a ws:// or wss:// URL: {url}")
    if ca_file is not None and not _uses_tls(url):
        raise ConnectOptionError(f"ca_file is for wss:// URLs; {url} does not use TLS")


def _tls_failure(url: str, error: ssl.SSLError) -> DaemonTLSError:
    if isinstance(error, ssl.SSLCertVerificationError):
        return DaemonTLSError(
            f"cannot verify the TLS certificate of the daemon at {url}: "
            f"{error.verify_message or error.reason}; trust the CA that signed it "
            "with ca_file (the CLI's --ca-file)"
        )
    return DaemonTLSError(
        f"the TLS handshake with the daemon at {url} failed: {error.reason or error} "
        "(is it a ws:// listener, without TLS?)"
    )


@contextlib.asynccontextmanager
async def connect(
    *,
    socket: Path | str | None = None,
    url: str | None = None,
    token: str | None = None,
    token_file: Path | str | None = None,
    ca_file: Path | str | None = None,
    discovery_dir: Path | str | None = None,
    permission_handler: PermissionHandler | None = None,
    client_name: str = "oma-bridge-client",
    declare_hooks: Sequence[str] = ("beforeRun", "afterRun"),
    elicitation_handler: ElicitationHandler | None = None,
) -> AsyncIterator[Client]:
    """Connect and ``initialize``.  With neither ``socket`` nor ``url``, the
    discovery file says where the daemon is (and gives its token).

    ``url`` is the daemon's TCP listener, ``ws://`` or ``wss://`` (TLS); the
    token comes from ``token`` or ``token_file`` (its content, stripped),
    else from the discovery file when that is used.  A ``wss://`` connection
    trusts ``ca_file`` (PEM), else the system's CAs.  Bad arguments raise
    :class:`ConnectOptionError`; a failed TLS handshake
    :class:`DaemonTLSError`.  No message carries the token.

    ``declare_hooks`` are the hooks this connection offers to serve
    (both by default); permission prompts are declared when a
    ``permission_handler`` is given, elicitations (an ACP agent asking the
    user for input, ``docs/acp.md``) when an ``elicitation_handler`` is."""
    if token is not None and token_file is not None:
        raise ConnectOptionError("give token or token_file, not both")
    if token_file is not None:
        token = read_token_file(token_file)
    if url is not None:
        _check_url(url, ca_file)
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
    if socket is None and url is not None and _uses_tls(url):
        options["ssl"] = client_ssl_context(ca_file)
    where = str(socket or url)
    try:
        if socket is not None:
            websocket = await unix_connect(str(socket), "ws://localhost/", **options)
        else:
            assert url is not None
            websocket = await ws_connect(url, **options)
    except InvalidURI as error:
        raise ConnectOptionError(f"not a ws:// or wss:// URL: {error.uri}") from None
    except InvalidStatus as error:  # it runs, but said no (503: out of file descriptors)
        body = error.response.body.decode("utf-8", "replace").strip() if error.response.body else ""
        raise DaemonUnavailableError(
            f"the daemon at {where} refused the connection: "
            f"HTTP {error.response.status_code}" + (f": {body}" if body else "")
        ) from None
    except ssl.SSLError as error:  # before OSError, which it is
        raise _tls_failure(where, error) from None
    except InvalidHandshake as error:  # an answer that is not HTTP: a TLS listener, say
        hint = "" if _uses_tls(where) or socket is not None else "; a TLS listener needs wss://"
        raise DaemonNotRunningError(
            f"cannot connect to the daemon at {where}: {error}{hint}"
        ) from None
    except (OSError, ConnectionClosed) as error:
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
        client = Client(peer, permission_handler, declare_hooks, elicitation_handler)
        client.connect_options = {
            "socket": socket,
            "url": url,
            "token": token,
            "permission_handler": permission_handler,
            "elicitation_handler": elicitation_handler,
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
