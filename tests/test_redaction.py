"""``redact``: the secrets it blanks, the text it leaves alone, and its cost on hostile text."""

from __future__ import annotations

import pytest

from oma_bridge.redaction import REDACTED, add_secrets, holding_secret, redact


def test_the_reference_case() -> None:
    assert redact("api_key=super-secret") == "api_key=[redacted]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # assignments whose key looks sensitive
        ("token=abc123", "token=[redacted]"),
        ("password=hunter2", "password=[redacted]"),
        ("PASSWORD: hunter2", "PASSWORD: [redacted]"),
        ("passwd = hunter2 next", "passwd = [redacted] next"),
        ("client_secret=s3cr3t", "client_secret=[redacted]"),
        ("X-Api-Key: zzz", "X-Api-Key: [redacted]"),
        ("OPENAI_API_KEY=abc", "OPENAI_API_KEY=[redacted]"),
        ("export GITHUB_TOKEN=abc", "export GITHUB_TOKEN=[redacted]"),
        ("session_id=abc;path=/", "session_id=[redacted];path=/"),
        ("refreshToken=abc, next", "refreshToken=[redacted], next"),
        ("--password=hunter2 --user bob", "--password=[redacted] --user bob"),
        ('password="two words" rest', "password=[redacted] rest"),
        ("password='two words' rest", "password=[redacted] rest"),
        ('password="with \\"escaped\\" quotes" rest', "password=[redacted] rest"),
        (
            "https://x.test/cb?access_token=abc&state=1",
            "https://x.test/cb?access_token=[redacted]&state=1",
        ),
        # JSON-quoted and Python-repr secrets
        ('{"api_key": "sk-1", "user": "bob"}', '{"api_key": "[redacted]", "user": "bob"}'),
        ('{"password":"a\\"b","n":1}', '{"password":"[redacted]","n":1}'),
        ("{'token': 'abc', 'x': 1}", "{'token': '[redacted]', 'x': 1}"),
        ('{"Authorization": "Bearer abcdefghij"}', '{"Authorization": "Bearer [redacted]"}'),
        # Authorization headers and Bearer values
        ("Authorization: Bearer abc.def.ghi", "Authorization: Bearer [redacted]"),
        ("authorization: Basic dXNlcjpwYXNz", "authorization: Basic [redacted]"),
        ("Authorization: token123456", "Authorization: [redacted]"),
        (
            "curl -H 'Authorization: Bearer eyJhbGciOi'",
            "curl -H 'Authorization: Bearer [redacted]'",
        ),
        ("sent bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "sent bearer [redacted]"),
        # token literals
        ("key sk-abcdefghijklmnop used", "key [redacted] used"),
        ("sk-ant-api03-abcdefghijkl", REDACTED),
        ("sk-proj-abcdefghijkl", REDACTED),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", REDACTED),
        ("gho_abcdefghijklmnop1234", REDACTED),
        ("github_pat_11ABCDEFG0abcdefghijkl_mnop", REDACTED),
        ("id AKIAIOSFODNN7EXAMPLE", "id [redacted]"),
        ("xoxb-1234567890-abcdefghij", REDACTED),
        ("xoxp-1234567890-abcdefghij", REDACTED),
    ],
)
def test_secrets_are_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_a_pem_private_key_block() -> None:
    pem = (
        "-----BEGIN RSA PRIVATE KEY-----\n"
        "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
        "-----END RSA PRIVATE KEY-----"
    )
    assert redact(f"before\n{pem}\nafter") == f"before\n{REDACTED}\nafter"
    openssh = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----"
    )
    assert redact(openssh) == REDACTED
    assert redact("-----BEGIN PRIVATE KEY-----\ncut off here") == REDACTED


def test_process_stderr_as_in_the_reference_checklist() -> None:
    stderr = "Traceback (most recent call last):\nValueError: bad config api_key=super-secret\n"
    assert redact(stderr) == (
        "Traceback (most recent call last):\nValueError: bad config api_key=[redacted]\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Hello, world.",
        "exit code 7",
        'Process backend "wc" exited with code 1',
        "He was the bearer of bad news.",
        "The bearer token goes in a header.",
        "user=alice path=/tmp/x mode=fast",
        "see https://example.com/docs?page=2&lang=en",
        "def f(x): return x + 1",
        "task-management risk-assessment desk-lamp",
        "sk-short and gh_token",
        "a - b = c; d: e",
        "数据 données αβγ",
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        '{"name": "read_file", "input": {"path": "a.txt"}}',
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert redact(text) == text


def test_redaction_is_idempotent() -> None:
    text = 'api_key=x Authorization: Bearer abcdefghij {"token": "t"} sk-abcdefghijklmnop'
    once = redact(text)
    assert redact(once) == once


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text",
    [
        # An unterminated quoted value of backslashes: each pair could be read
        # two ways, which made the old patterns exponential in the count.
        'password="' + "\\" * 5_000,
        '"password": "' + "\\" * 5_000,
        "{'token': '" + "\\" * 5_000,
        # Long runs of key characters with a word boundary at every other
        # character: the old key pattern rescanned the run from each of them.
        "a-" * 200_000,
        "a." * 200_000,
        "key" * 200_000,
        '"' + "key-" * 100_000,
        "password=" * 100_000,
        "'password': " * 50_000,
        "Authorization: " * 50_000,
        "bearer " * 100_000,
        "sk-" * 100_000,
        "-----BEGIN A" * 50_000,
    ],
    ids=lambda text: repr(text[:14]) + f"...({len(text)})",
)
def test_hostile_text_is_handled_in_linear_time(text: str) -> None:
    # Bounded by the timeout: the old patterns took hours here (exponential)
    # or minutes (quadratic); these finish in well under a second each.
    result = redact(text)
    assert isinstance(result, str)


def test_hostile_quoted_values_are_still_redacted() -> None:
    assert redact('password="' + "\\" * 40) == 'password="' + "\\" * 40  # unterminated: no value
    assert redact('password="' + "\\" * 40 + '"') == "password=[redacted]"
    assert redact('password="abc\\"') == "password=[redacted]"  # a stray final backslash
    assert redact('"password": "' + "\\" * 40 + '"') == '"password": "[redacted]"'


# --- the daemon's own words, and the literal values of its secrets (issue 22, 23) ----


@pytest.mark.parametrize(
    "text",
    [
        "no API key: the environment variable X is not set",
        'Agent "claude": no API key: the environment variable ANTHROPIC_API_KEY '
        "(api_key_env) is not set",
        "password: is wrong",
        "Password:  Is wrong",
        "config.toml: agents.claude.api_key_env: expected a string, got an integer",
        "secret: Hunter two words",
    ],
)
def test_a_sentence_after_a_colon_is_the_daemons_words(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token: expired", "token: [redacted]"),  # one word is a value, not a sentence
        ("password: hunter2 is mine", "password: [redacted] is mine"),
        ("api_key: abcdefgh", "api_key: [redacted]"),
        ('password: "two words"', "password: [redacted]"),
    ],
)
def test_a_value_after_a_colon_is_still_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


KEY = "Zq7vN2pL9wXc4RtY8mKd"  # no prefix any pattern knows


def test_the_value_of_a_known_key_variable_is_blanked_whatever_its_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert redact(f"using {KEY}") == f"using {KEY}"
    monkeypatch.setenv("GEMINI_API_KEY", KEY)  # known, though no profile names it
    assert redact(f"using {KEY}, again {KEY}.") == "using [redacted], again [redacted]."
    monkeypatch.setenv("GEMINI_API_KEY", "short")  # too short to be told from a word
    assert redact("a short story") == "a short story"


def test_added_variables_and_held_values_are_blanked(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "OMAB_TEST_REDACTION_VARIABLE"
    monkeypatch.setenv(name, KEY)
    assert redact(KEY) == KEY
    add_secrets(variables=[name])
    assert redact(f"x{KEY}y") == "x[redacted]y"
    token = "t" * 20 + "Q" * 20
    with holding_secret(token):
        assert redact(f"token {token}") == "token [redacted]"
    assert redact(f"token {token}") == f"token {token}"  # the daemon stopped
    # One value inside another: the longer goes first, leaving no tail behind.
    add_secrets(values=[KEY + "-suffix-part"])
    assert redact(f"{KEY}-suffix-part") == REDACTED
