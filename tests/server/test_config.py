"""The config: defaults, every key of the contract, and one-line errors naming file and key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from oma_bridge.paths import default_socket_path
from oma_bridge.server.config import (
    EMBEDDED_SOURCE,
    AcpProfile,
    ConfigError,
    LlmProfile,
    ProcessProfile,
    default_config_path,
    load_config,
    parse_config,
)


def _error(text: str, tmp_path: Path) -> ConfigError:
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return caught.value


def test_default_config_loads_when_no_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    config = load_config()
    assert config.source == EMBEDDED_SOURCE
    assert config.server.socket == default_socket_path()
    echo, wordcount, demo = config.agents["echo"], config.agents["wordcount"], config.agents["demo"]
    assert isinstance(echo, LlmProfile)
    assert (echo.provider, echo.model) == ("echo", "echo-1")
    assert isinstance(wordcount, ProcessProfile)
    assert (wordcount.command, wordcount.args, wordcount.input) == ("wc", ("-w",), "stdin")
    assert isinstance(demo, AcpProfile)
    assert demo.command == sys.executable
    assert demo.args == ("-m", "oma_bridge.demo.acp_agent")


def test_user_config_file_is_preferred(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = default_config_path()
    assert path == tmp_path / "oma-bridge" / "config.toml"
    path.parent.mkdir()
    path.write_text('[agents.only]\nkind = "llm"\nprovider = "echo"\nmodel = "echo-1"\n')
    config = load_config()
    assert config.source == str(path)
    assert list(config.agents) == ["only"]


def test_every_server_key_and_its_default(tmp_path: Path) -> None:
    config = parse_config("", source="x", base_dir=tmp_path)
    s = config.server
    assert s.tcp is None and s.token_file is None and not s.allow_remote
    assert not s.require_token_on_unix
    assert s.allowed_origins == () and s.allowed_hosts == ()
    assert s.max_message_bytes == 16 * 1024 * 1024
    assert (s.max_connections, s.max_concurrent_runs, s.max_queued_runs) == (64, 32, 256)
    assert (s.agent_idle_ttl_s, s.hook_timeout_s, s.permission_timeout_s) == (900, 30, 300)
    assert (s.send_timeout_s, s.stop_grace_s) == (30, 5)


def test_paths_are_resolved_against_the_config_folder(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "bridge.toml"
    path.parent.mkdir()
    path.write_text(
        '[server]\nsocket = "run/b.sock"\ntoken_file = "tok"\ntcp = "[::1]:0"\n'
        '[agents.p]\nkind = "process"\ncommand = "@python"\ncwd = "../work"\n'
        'env = { A = "1" }\ntimeout_s = 2\n'
    )
    config = load_config(path)
    assert config.server.socket == tmp_path / "conf" / "run" / "b.sock"
    assert config.server.token_file == tmp_path / "conf" / "tok"
    assert config.server.tcp is not None and config.server.tcp.host == "::1"
    profile = config.agents["p"]
    assert isinstance(profile, ProcessProfile)
    assert profile.cwd == tmp_path / "work"
    assert profile.command == sys.executable
    assert profile.env == {"A": "1"} and profile.timeout_s == 2


def test_every_acp_and_llm_key_is_accepted(tmp_path: Path) -> None:
    config = parse_config(
        '[agents.coder]\nkind = "acp"\ncommand = "npx"\nargs = ["-y", "x"]\nenv = {}\n'
        'cwd = "."\npermission = "reject"\nfs = "none"\nterminal = true\nmodel = "m"\n'
        'auth_method = "key"\nmcp_servers = [{ name = "n", command = "c" }]\n'
        'cancel_grace_s = 1.5\nsystem_prompt = "s"\ndescription = "d"\ntimeout_s = 9\n'
        '[agents.claude]\nkind = "llm"\nprovider = "anthropic"\nmodel = "c"\n'
        'api_key_env = "K"\nbase_url = "http://x"\nsystem_prompt = "s"\nmax_turns = 3\n'
        "max_tokens = 10\nmax_token_budget = 100\ntemperature = 0.5\n",
        source="x",
        base_dir=tmp_path,
    )
    coder = config.agents["coder"]
    assert isinstance(coder, AcpProfile)
    assert (coder.permission, coder.fs, coder.terminal) == ("reject", "none", True)
    assert coder.cwd == tmp_path


def test_fs_and_terminal_may_be_served_by_the_client(tmp_path: Path) -> None:
    config = parse_config(
        '[agents.coder]\nkind = "acp"\ncommand = "x"\nfs = "client"\nterminal = "client"\n',
        source="x",
        base_dir=tmp_path,
    )
    coder = config.agents["coder"]
    assert isinstance(coder, AcpProfile)
    assert (coder.fs, coder.terminal) == ("client", "client")


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        (
            '[agents.coder]\nkind = "acp"\ncommand = "x"\npermission = "yes"',
            "agents.coder.permission",
            "'client'",
        ),
        ('[agents.coder]\nkind = "acp"', "agents.coder.command", "missing"),
        (
            '[agents.coder]\nkind = "acp"\ncommand = "x"\nterminal = "editor"',
            "agents.coder.terminal",
            "must be true, false or 'client'",
        ),
        (
            '[agents.coder]\nkind = "acp"\ncommand = "x"\nterminal = 1',
            "agents.coder.terminal",
            "'client'",
        ),
        ('[agents.coder]\nkind = "acp"\ncommand = "x"\nfs = "disk"', "agents.coder.fs", "'client'"),
        ('[agents.x]\nkind = "robot"', "agents.x.kind", "'llm', 'process', 'acp'"),
        ('[agents.x]\ncommand = "wc"', "agents.x.kind", "missing"),
        (
            '[agents.x]\nkind = "process"\ncommand = "wc"\nmodel = "m"',
            "agents.x.model",
            "unknown key",
        ),
        (
            '[agents.x]\nkind = "llm"\nprovider = "echo"\nmodel = "e"\ncommand = "c"',
            "agents.x.command",
            "unknown key",
        ),
        ('[server]\nmax_connections = "3"', "server.max_connections", "integer"),
        ("[server]\nsocket = true", "server.socket", '"auto", a path, or false'),
        ("[server]\nsocket = false", "server.tcp", "at least one"),
        ('[server]\ntcp = "0.0.0.0:7878"', "server.tcp", "allow_remote"),
        ('[server]\ntcp = "7878"', "server.tcp", "host:port"),
        ('[server]\nallowed_hosts = ["a.test:80"]', "server.allowed_hosts", "without a port"),
        ("[server]\nsurprise = 1", "server.surprise", "unknown key"),
        # Backend keys: the library's own, strict; what the daemon sets is no profile's.
        (
            '[agents.a]\nkind = "acp"\ncommand = "x"\nterminal = "yes"',
            "agents.a.terminal",
            "must be true, false or 'client'",
        ),
        (
            '[agents.a]\nkind = "process"\ncommand = "x"\ntimeout_s = "5"',
            "agents.a.timeout_s",
            "number",
        ),
        (
            '[agents.a]\nkind = "process"\ncommand = "x"\nmax_output_bytes = "9"',
            "agents.a.max_output_bytes",
            "integer",
        ),
        (
            '[agents.a]\nkind = "llm"\nprovider = "echo"\nmodel = "e"\ntemperature = "0.5"',
            "agents.a.temperature",
            "number",
        ),
        (
            '[agents.a]\nkind = "llm"\nprovider = "robot"\nmodel = "e"',
            "agents.a.provider",
            "'echo'",
        ),
        ('[agents.a]\nkind = "llm"\nprovider = "echo"', "agents.a.model", "missing"),
        (
            '[agents.a]\nkind = "acp"\ncommand = "x"\nlabels = { a = "b" }',
            "agents.a.labels",
            "unknown key",
        ),
        (
            '[agents.a]\nkind = "acp"\ncommand = "x"\nresume_session = "s"',
            "agents.a.resume_session",
            "unknown key",
        ),
        (
            '[agents.a]\nkind = "process"\ncommand = "x"\nlabels = {}',
            "agents.a.labels",
            "unknown key",
        ),
        (
            '[agents.a]\nkind = "llm"\nprovider = "echo"\nmodel = "e"\ntools = []',
            "agents.a.tools",
            "unknown key",
        ),
        ('[agents.a]\nkind = "acp"\ncommand = ""', "agents.a.command", "at least 1"),
        (
            '[agents.a]\nkind = "acp"\ncommand = "x"\nstop_grace_s = -1',
            "agents.a.stop_grace_s",
            "0",
        ),
    ],
)
def test_errors_name_file_key_and_problem(
    text: str, key: str, problem: str, tmp_path: Path
) -> None:
    error = _error(text, tmp_path)
    assert error.key == key
    assert problem in error.problem


def test_remote_tcp_needs_allow_remote(tmp_path: Path) -> None:
    config = parse_config(
        '[server]\nallow_remote = true\ntcp = "0.0.0.0:0"', source="x", base_dir=tmp_path
    )
    assert config.server.tcp is not None and not config.server.tcp.is_loopback


def test_values_are_not_echoed_in_errors(tmp_path: Path) -> None:
    error = _error('[server]\nmax_connections = "hunter2-secret"', tmp_path)
    assert "hunter2" not in str(error)
    error = _error('[agents.a]\nkind = "acp"\ncommand = "x"\nterminal = "hunter2"', tmp_path)
    assert error.key == "agents.a.terminal" and "hunter2" not in str(error)


def test_invalid_toml_and_unreadable_file(tmp_path: Path) -> None:
    error = _error("x = ", tmp_path)
    assert "not valid TOML" in error.problem
    with pytest.raises(ConfigError, match="cannot read the config"):
        load_config(tmp_path / "missing.toml")


def test_profiles_become_agent_configs(tmp_path: Path) -> None:
    from oma_bridge.backends.acp.config import AcpConfig
    from oma_bridge.backends.llm.config import LlmConfig
    from oma_bridge.backends.process.config import ProcessConfig
    from oma_bridge.server.profiles import profile_agent_config

    config = parse_config(
        "[server]\nstop_grace_s = 2\n"
        '[agents.echo]\nkind = "llm"\nprovider = "echo"\nmodel = "echo-1"\ntimeout_s = 1.5\n'
        'system_prompt = "be brief"\n'
        '[agents.wc]\nkind = "process"\ncommand = "wc"\nargs = ["-w"]\ncwd = "."\n'
        'input = "argument"\nmax_output_bytes = 100\n'
        '[agents.demo]\nkind = "acp"\ncommand = "@python"\npermission = "reject"\n',
        source="x",
        base_dir=tmp_path,
    )
    echo = profile_agent_config("echo", config.agents["echo"], config.server)
    assert isinstance(echo.backend, LlmConfig)
    assert (echo.name, echo.backend.provider, echo.backend.model, echo.timeout_ms) == (
        "echo",
        "echo",
        "echo-1",
        1500,
    )
    assert echo.system_prompt == "be brief" and echo.kind == "llm"
    wc = profile_agent_config("wc", config.agents["wc"], config.server)
    assert isinstance(wc.backend, ProcessConfig)
    assert (wc.backend.command, wc.backend.args, wc.backend.input) == ("wc", ("-w",), "argument")
    assert (wc.backend.cwd, wc.backend.max_output_bytes, wc.backend.stop_grace_s) == (
        str(tmp_path),
        100,
        2,
    )
    demo = profile_agent_config("demo", config.agents["demo"], config.server)
    assert isinstance(demo.backend, AcpConfig)
    assert (demo.backend.command, demo.backend.permission) == (sys.executable, "reject")


def test_stop_grace_falls_back_to_the_servers_for_both_command_kinds(tmp_path: Path) -> None:
    from oma_bridge.backends.acp.config import AcpConfig
    from oma_bridge.backends.llm.config import LlmConfig
    from oma_bridge.backends.process.config import ProcessConfig
    from oma_bridge.server.profiles import profile_agent_config

    config = parse_config(
        "[server]\nstop_grace_s = 2\n"
        '[agents.p]\nkind = "process"\ncommand = "wc"\n'
        '[agents.p1]\nkind = "process"\ncommand = "wc"\nstop_grace_s = 0.5\n'
        '[agents.a]\nkind = "acp"\ncommand = "x"\ncwd = "sub"\nmax_line_bytes = 4096\n'
        '[agents.a1]\nkind = "acp"\ncommand = "x"\nstop_grace_s = 0\ncwd = "client"\n'
        '[agents.l]\nkind = "llm"\nprovider = "echo"\nmodel = "e"\ncall_timeout_ms = 50\n',
        source="x",
        base_dir=tmp_path,
    )
    graces = {}
    for name in ("p", "p1", "a", "a1"):
        backend = profile_agent_config(name, config.agents[name], config.server).backend
        assert isinstance(backend, ProcessConfig | AcpConfig)
        graces[name] = backend.stop_grace_s
    assert graces == {"p": 2, "p1": 0.5, "a": 2, "a1": 0}
    acp = profile_agent_config("a", config.agents["a"], config.server).backend
    assert isinstance(acp, AcpConfig)
    assert (acp.cwd, acp.max_line_bytes, acp.labels) == (tmp_path / "sub", 4096, {})
    client = profile_agent_config("a1", config.agents["a1"], config.server).backend
    assert isinstance(client, AcpConfig) and client.cwd is None
    llm = profile_agent_config("l", config.agents["l"], config.server)
    assert isinstance(llm.backend, LlmConfig)
    assert (llm.backend.call_timeout_ms, llm.max_turns, llm.max_token_budget) == (50, 10, None)
