"""An async Python client of the daemon's wire protocol (docs/contract.md).

::

    async with connect() as client:                 # finds the daemon by its discovery file
        agent = await client.open("echo")
        result = await agent.run("hello")
        async for event in agent.stream("hello again"):
            print(event.type, event.data)

A daemon that is not local (docs/contract.md §17) is reached by its TCP listener::

    async with connect(url="wss://bridge.example:7878/", token_file="token",
                       ca_file="ca.pem") as client:   # ca_file: else the system's CAs
        ...

Team runs (docs/contract.md §15, docs/teams.md) name daemon profiles::

        result = await client.run_tasks([
            {"title": "Draft", "description": "Write it.", "assignee": "echo"},
            {"title": "Count", "description": "Count it.", "assignee": "wordcount",
             "dependsOn": ["Draft"]},
        ])
        async with client.team_run(["wordcount"], "echo", "Plan a note.") as run:
            async for event in run.progress():
                print(event["type"], event["agent"])
            result = await run.result()

Hooks and permission prompts are plain callables: ``client.open(profile,
before_run=fn, after_run=fn)`` and ``connect(permission_handler=fn)``; the
client answers the daemon's ``hook/*`` and ``permission/request`` requests
with them.  Everything the client raises is a :class:`ClientError` (its docstring draws
the tree): JSON-RPC errors raise ``-32010`` as
:class:`RemoteInvalidMessageError` (an
:class:`~oma_bridge.errors.InvalidMessageError`), every other code as
:class:`DaemonError` carrying ``code`` and ``data``.

The modules: ``discovery`` (where the daemon is), ``errors``, ``routes``
(where the daemon's messages to a connection go), ``connection``
(:func:`connect`, :class:`Client`), ``handles`` (:class:`RemoteAgent`,
:class:`RemoteStream`, :class:`Watch`), ``teams``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oma_bridge._lazy import lazy_attributes

if TYPE_CHECKING:
    from oma_bridge.client.connection import (
        Client,
        client_ssl_context,
        connect,
        read_token_file,
    )
    from oma_bridge.client.discovery import (
        Discovery,
        find_daemon,
    )
    from oma_bridge.client.errors import (
        ClientError,
        ConnectOptionError,
        DaemonError,
        DaemonNotRunningError,
        DaemonTLSError,
        DaemonUnavailableError,
        RemoteInvalidMessageError,
    )
    from oma_bridge.client.handles import (
        JournalEntry,
        RemoteAgent,
        RemoteStream,
        Watch,
    )
    from oma_bridge.client.teams import (
        RemoteTeamRun,
        TeamResult,
        TeamTaskResult,
    )

__all__ = [
    "Client",
    "ClientError",
    "ConnectOptionError",
    "DaemonError",
    "DaemonNotRunningError",
    "DaemonTLSError",
    "DaemonUnavailableError",
    "Discovery",
    "JournalEntry",
    "RemoteAgent",
    "RemoteInvalidMessageError",
    "RemoteStream",
    "RemoteTeamRun",
    "TeamResult",
    "TeamTaskResult",
    "Watch",
    "client_ssl_context",
    "connect",
    "find_daemon",
    "read_token_file",
]

# Resolved on first use: the shim and the command line import
# ``oma_bridge.client.discovery`` without the connection (anyio, websockets).
__getattr__ = lazy_attributes(
    __name__,
    {
        "Client": "oma_bridge.client.connection",
        "ClientError": "oma_bridge.client.errors",
        "ConnectOptionError": "oma_bridge.client.errors",
        "DaemonError": "oma_bridge.client.errors",
        "DaemonNotRunningError": "oma_bridge.client.errors",
        "DaemonTLSError": "oma_bridge.client.errors",
        "DaemonUnavailableError": "oma_bridge.client.errors",
        "Discovery": "oma_bridge.client.discovery",
        "JournalEntry": "oma_bridge.client.handles",
        "RemoteAgent": "oma_bridge.client.handles",
        "RemoteInvalidMessageError": "oma_bridge.client.errors",
        "RemoteStream": "oma_bridge.client.handles",
        "RemoteTeamRun": "oma_bridge.client.teams",
        "TeamResult": "oma_bridge.client.teams",
        "TeamTaskResult": "oma_bridge.client.teams",
        "Watch": "oma_bridge.client.handles",
        "client_ssl_context": "oma_bridge.client.connection",
        "connect": "oma_bridge.client.connection",
        "find_daemon": "oma_bridge.client.discovery",
        "read_token_file": "oma_bridge.client.connection",
    },
)
