"""[evaluation] in the config: oma/runAgent runs are scored and stored; stats in daemon/status."""

from __future__ import annotations

from pathlib import Path

import anyio
import orjson
import pytest

from oma_bridge.client import connect
from oma_bridge.server.config import ConfigError, parse_config

from .conftest import daemon
from .test_agent_methods import STRUCTURED

pytestmark = pytest.mark.anyio


async def test_run_agent_is_evaluated_and_stored(short_dir: Path) -> None:
    store = short_dir / "eval.jsonl"
    evaluation = f"""
[evaluation]
scorers = ["success", "non_empty"]
store = "{store}"
store_payloads = "full"
"""
    async with (
        daemon(short_dir, agents=evaluation + _ECHO),
        connect(discovery_dir=short_dir) as client,
    ):
        result = await client.run_agent("echo", STRUCTURED)
        assert result.success
        with anyio.fail_after(10):
            while (await client.status())["evaluation"]["completed"] < 1:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        stats = (await client.status())["evaluation"]
        assert stats == {
            "sampled": 1,
            "enqueued": 1,
            "completed": 1,
            "dropped": 0,
            "failed": 0,
            "storeFailed": 0,
        }
    [line] = store.read_bytes().splitlines()
    record = orjson.loads(line)
    assert [s["scorer"] for s in record["scores"]] == ["success_scorer", "non_empty_scorer"]
    assert all(s["pass"] for s in record["scores"])
    assert orjson.loads(record["payload"]["input"]) == STRUCTURED
    assert record["runId"] == result.run_id


_ECHO = """
[agents.echo]
kind = "llm"
provider = "echo"
model = "echo-1"
"""


def test_unknown_scorer_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(
            '[evaluation]\nscorers = ["no.such.module:f"]\n', source="c.toml", base_dir=tmp_path
        )
    assert "c.toml" in str(caught.value) and "evaluation.scorers" in str(caught.value)
    with pytest.raises(ConfigError, match=r"evaluation\.sample"):
        parse_config(
            '[evaluation]\nscorers = ["success"]\nsample = 2\n', source="c.toml", base_dir=tmp_path
        )
