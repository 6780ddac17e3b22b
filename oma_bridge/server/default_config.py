"""The config the daemon uses when there is no ``--config`` and no user config file.

It listens on the unix socket and on loopback TCP (port 47683, or the next
free one: PROTOCOL §18.5, so that ``oma-bridge ui`` works under ``make
serve``), and declares one agent of each kind, all of them offline: the ``echo`` LLM
provider, ``wc -w`` as a process agent, and the demo ACP agent that ships with
oma-bridge, started with the Python interpreter that runs the daemon
(``command = "@python"``, see :data:`~oma_bridge.server.config.PYTHON_COMMAND`).
"""

from __future__ import annotations

__all__ = ["DEFAULT_CONFIG_TOML"]

DEFAULT_CONFIG_TOML = """\
# The embedded default config of oma-bridge.

[server]
socket = "auto"
# Also loopback TCP, so that `oma-bridge ui` opens the status page (PROTOCOL
# §18.5): the token is required there as everywhere, Host and Origin checked.
# 47683, or the next free port of the 100 after it when another daemon has it.
tcp = "127.0.0.1:47683"
tcp_port_retries = 100

[agents.echo]
kind = "llm"
description = "Offline, deterministic: answers with what reached the model"
provider = "echo"
model = "echo-1"

[agents.wordcount]
kind = "process"
description = "Counts the words of the prompt (wc -w)"
command = "wc"
args = ["-w"]
input = "stdin"
env = { LC_ALL = "C" }

[agents.demo]
kind = "acp"
description = "A small offline ACP agent shipped with oma-bridge"
command = "@python"
args = ["-m", "oma_bridge.demo.acp_agent"]
cwd = "client"
"""
