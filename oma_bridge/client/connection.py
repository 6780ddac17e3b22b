"""One connection to the daemon: :func:`connect` and the :class:`Client` it gives."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from oma_bridge._version import __version__
from oma_bridge.client.discovery import find_daemon, url_from_environment
from oma_bridge.client.errors import (
    ConnectOptionError,
    DaemonError,
    DaemonNotRunningError,
    DaemonTLSError,
    DaemonUnavailableError,
    client_error,
)
from oma_bridge.client.handles import JournalEntry, RemoteAgent, Watch, new_run_id
from oma_bridge.client.routes import Routes
from oma_bridge.errors import WireError
from oma_bridge.results import AgentRunResult
from oma_bridge.rpc import ConnectionClosedError, Peer, PendingCall, unwrap_single_error
from oma_bridge.wire.codes import PROTOCOL_VERSION

# The backends package (and the messages it brings) is not for clients; team runs import
# their module when one starts (`oma-bridge run` and the rest have no use for it).
if TYPE_CHECKING:
    from oma_bridge.backends import ElicitationHandler, PermissionHandler
    from oma_bridge.client.teams import OnDisconnect, RemoteTeamRun, TaskLike, TeamResult

__all__ = ["Client", "client_ssl_context", "connect", "read_token_file"]


class Client:
    """One initialized connection to the daemon (use :func:`connect`).

    It is the :class:`~oma_bridge.client.routes.Channel` of the handles it
    makes (:class:`RemoteAgent`, :class:`RemoteStream`, :class:`Watch`,
    :class:`RemoteTeamRun`): they send through it and register in its
    :attr:`routes` what they wait for.
    """

    def __init__(
        self,
        peer: Peer,
        routes: Routes,
        background: TaskGroup,
        *,
        declare_hooks: Sequence[str] = ("beforeRun", "afterRun"),
        connect_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.peer = peer
        self.routes = routes
        self.declare_hooks = tuple(declare_hooks)
        self.server_info: dict[str, Any] = {}
        self.profiles: list[dict[str, Any]] = []
        #: How :func:`connect` reached the daemon: what :meth:`reconnect` uses.
        self.connect_options: dict[str, Any] = dict(connect_options or {})
        self._background = background

    @property
    def permission_handler(self) -> PermissionHandler | None:
        return self.routes.permission_handler

    @property
    def elicitation_handler(self) -> ElicitationHandler | None:
        return self.routes.elicitation_handler

    @property
    def closed(self) -> anyio.Event:
        """Set once the connection has ended."""
        return self.peer.closed

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result; an error answer raises a :class:`ClientError`."""
        try:
            return await self.peer.request(method, params)
        except WireError as error:
            raise client_error(error) from None

    async def start_request(self, method: str, params: Any = None) -> PendingCall:
        """Send a request; its answer comes through the :class:`PendingCall` returned."""
        return await self.peer.start_request(method, params)

    def start_soon(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work`` in the background of the :func:`connect` block; it ends with the block."""
        self._background.start_soon(work)

    @contextlib.asynccontextmanager
    async def reconnect(self) -> AsyncIterator[Client]:
        """A connection of its own to the same daemon, made with :attr:`connect_options`."""
        try:
            async with connect(**self.connect_options) as client:
                yield client
        except ConnectionClosed as error:  # a send into a connection that just ended
            raise ConnectionClosedError(str(error)) from None

    async def list_agents(self) -> list[dict[str, Any]]:
        return list((await self.request("agents/list"))["agents"])

    async def probe_agents(self, profiles: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """``agents/probe`` (PROTOCOL §22.2): the profiles, once each acp agent (or each of
        ``profiles``) was started to say what it can do (``capabilities``, else ``probeError``)."""
        params = {} if profiles is None else {"profiles": list(profiles)}
        return list((await self.request("agents/probe", params))["agents"])

    async def open(
        self,
        profile: str,
        *,
        before_run: Callable[..., Any] | None = None,
        after_run: Callable[..., Any] | None = None,
        cwd: str | None = None,
        resume: str | None = None,
        **overrides: Any,
    ) -> RemoteAgent:
        """Open an agent of a declared profile; ``overrides`` use the wire's camelCase keys.

        ``cwd``: the client's folder, for a ``cwd = "client"`` or
        ``"worktree"`` profile (the agent's worktree is then in
        :attr:`RemoteAgent.worktree`); ``resume``: an agent persisted before
        a restart, reattached.
        """
        config = dict(overrides)
        hooks = {"beforeRun": before_run is not None, "afterRun": after_run is not None}
        if any(hooks.values()):
            config["hooks"] = hooks
        params: dict[str, Any] = {"profile": profile}
        if config:
            params["config"] = config
        if cwd is not None:
            params["cwd"] = cwd
        if resume is not None:
            params["resume"] = resume
        answer = await self.request("agent/open", params)
        worktree = answer.get("worktree")
        return RemoteAgent(
            self, answer["agentId"], profile, before_run, after_run, worktree=worktree
        )

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
        return RemoteAgent(self, agent_id, profile, before_run, after_run)

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
        with self.routes.progress(run_id, on_progress) if on_progress else nullcontext():
            return AgentRunResult.from_wire(await self.request("oma/runAgent", params))

    async def result(self, run_id: str) -> AgentRunResult:
        """``run/result``: the result of a finished run still in its agent's journal (or of a
        one-off run).  A run still going raises :class:`DaemonError` -32014 (``RunInProgress``);
        an unknown one -32011."""
        return AgentRunResult.from_wire(await self.request("run/result", {"runId": run_id}))

    async def journal(self, agent_id: str, *, after_seq: int | None = None) -> list[JournalEntry]:
        """What ``agent_id``'s journal holds now, after ``after_seq`` (``None``: all it still
        holds, its oldest entries being dropped first), read on this connection with
        ``agent/watch`` and ``agent/unwatch``; :meth:`watch` follows it instead.

        An ``after_seq`` the daemon no longer holds raises :class:`DaemonError`
        (``CursorExpired``, with ``oldestSeq`` in its data).
        """
        entries: list[JournalEntry] = []

        async def keep(seq: int, entry: dict[str, Any]) -> None:
            entries.append(JournalEntry(agent_id, seq, entry))

        with self.routes.journal(agent_id, keep):
            try:
                answer = await self.request(
                    "agent/watch", {"agentId": agent_id, "afterSeq": after_seq or 0}
                )
            except DaemonError as error:
                data = error.data if isinstance(error.data, Mapping) else {}
                if after_seq is not None or data.get("name") != "CursorExpired":
                    raise
                entries.clear()
                oldest = int(data["oldestSeq"])
                answer = await self.request(
                    "agent/watch", {"agentId": agent_id, "afterSeq": oldest - 1}
                )
            await self.request("agent/unwatch", {"agentId": agent_id})
        # Live entries may come between the answer and the unwatch: they are not "now".
        return [entry for entry in entries if entry.seq <= int(answer["seq"])]

    def watch(self, agent_id: str, *, after_seq: int | None = None, retry_s: float = 0.2) -> Watch:
        """Follow ``agent_id``'s journal; see :class:`Watch` (and :meth:`RemoteAgent.watch`)."""
        return Watch(self, agent_id, after_seq=after_seq, retry_s=retry_s)

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
        from oma_bridge.client.teams import tasks_params, team_request

        params = tasks_params(tasks, max_concurrency, run_id, metadata, on_disconnect)
        return await team_request(self, "oma/runTasks", params, on_progress)

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
        from oma_bridge.client.teams import team_params, team_request

        params = team_params(agents, coordinator, goal, run_id, on_disconnect)
        return await team_request(self, "oma/runTeam", params, on_progress)

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
        from oma_bridge.client.teams import RemoteTeamRun, tasks_params

        params = tasks_params(tasks, max_concurrency, run_id, metadata, on_disconnect)
        return RemoteTeamRun(self, "oma/runTasks", params)

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
        from oma_bridge.client.teams import RemoteTeamRun, team_params

        params = team_params(agents, coordinator, goal, run_id, on_disconnect)
        return RemoteTeamRun(self, "oma/runTeam", params)


async def _initialize(client: Client, client_name: str) -> None:
    capabilities: dict[str, Any] = {"hooks": list(client.declare_hooks)}
    if client.permission_handler is not None:
        capabilities["permissions"] = True
    if client.elicitation_handler is not None:
        capabilities["elicitation"] = True
    answer = await client.request(
        "initialize",
        {
            "protocolVersion": PROTOCOL_VERSION,
            "clientInfo": {"name": client_name, "version": __version__},
            "capabilities": capabilities,
        },
    )
    client.server_info = dict(answer.get("serverInfo", {}))
    client.profiles = list(answer.get("agents", []))


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
    """Connect and ``initialize``.  With neither ``socket`` nor ``url`` (nor
    ``$OMA_BRIDGE_URL``), the first live discovery file of PROTOCOL §18.2
    says where the daemon is and gives its token (only ``discovery_dir``'s
    when given; :mod:`oma_bridge.client.discovery`).

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
    if socket is None and url is None and discovery_dir is None:
        url = url_from_environment()
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
            f"HTTP {error.response.status_code}" + (f": {body}" if body else ""),
            status=error.response.status_code,
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

        async def send(data: bytes) -> None:
            await websocket.send(data, text=True)  # the protocol is text frames only

        routes = Routes(permission_handler, elicitation_handler)
        peer = Peer(
            send,
            _receiver(websocket),
            on_request=routes.request,
            on_notification=routes.notification,
            cancel_param="id",
        )
        options = {
            "socket": socket,
            "url": url,
            "token": token,
            "permission_handler": permission_handler,
            "elicitation_handler": elicitation_handler,
            "client_name": client_name,
            "declare_hooks": declare_hooks,
        }
        async with peer:
            with unwrap_single_error():
                async with anyio.create_task_group() as background:
                    client = Client(
                        peer,
                        routes,
                        background,
                        declare_hooks=declare_hooks,
                        connect_options=options,
                    )
                    await _initialize(client, client_name)
                    try:
                        yield client
                    finally:
                        background.cancel_scope.cancel()  # the watches end with the block


def _receiver(websocket: ClientConnection) -> Callable[[], Any]:
    async def receive() -> str | bytes | None:
        try:
            return await websocket.recv()
        except ConnectionClosed:
            return None

    return receive
