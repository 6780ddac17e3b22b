"""One root for what the client raises: the tree its docstring draws, and what an answer maps to."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon.conftest import daemon, short_dir

from oma_bridge.client import (
    ClientError,
    ConnectOptionError,
    DaemonError,
    DaemonNotRunningError,
    DaemonTLSError,
    DaemonUnavailableError,
    RemoteInvalidMessageError,
    connect,
)
from oma_bridge.client.errors import client_error
from oma_bridge.errors import InvalidMessageError, WireError

__all__ = ["short_dir"]

pytestmark = pytest.mark.anyio


def test_the_tree_is_the_one_drawn() -> None:
    tree = {
        ConnectOptionError: (ClientError, ValueError),
        DaemonNotRunningError: (ClientError, RuntimeError),
        DaemonUnavailableError: (DaemonNotRunningError,),
        DaemonTLSError: (DaemonNotRunningError,),
        DaemonError: (ClientError, WireError),
        RemoteInvalidMessageError: (ClientError, InvalidMessageError),
    }
    for error, parents in tree.items():
        assert all(issubclass(error, parent) for parent in parents), error
        assert error.__name__ in (ClientError.__doc__ or "")


def test_an_answer_maps_to_its_error() -> None:
    invalid = client_error(WireError(-32010, "Invalid message", {"message": "bad role"}))
    assert isinstance(invalid, RemoteInvalidMessageError) and str(invalid) == "bad role"
    other = client_error(WireError(-32011, "no agent", {"name": "NotFound"}))
    assert isinstance(other, DaemonError)
    assert (other.rpc_code, other.message, other.data) == (-32011, "no agent", {"name": "NotFound"})
    assert client_error(other) is other


async def test_what_a_real_daemon_answers_is_caught_by_the_root(short_dir: Path) -> None:
    async with daemon(short_dir), connect(discovery_dir=short_dir) as client:
        agent = await client.open("echo")
        with pytest.raises(ClientError) as bad_input:
            await agent.run([{"role": "robot", "content": "hi"}])
        assert isinstance(bad_input.value, InvalidMessageError)  # as a local Agent raises
        with pytest.raises(ClientError) as unknown:
            await client.open("nope")
        assert isinstance(unknown.value, DaemonError) and unknown.value.rpc_code == -32011
    with pytest.raises(ClientError) as gone:
        async with connect(discovery_dir=short_dir):
            pass
    assert isinstance(gone.value, DaemonNotRunningError)
    with pytest.raises(ClientError) as option:
        async with connect(url="http://localhost/"):
            pass
    assert isinstance(option.value, ConnectOptionError)
