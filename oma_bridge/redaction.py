"""One function that blanks secrets out of free text: :func:`redact`.

Everything that may carry a secret to a log line, an error message, a
status message, the journal, a session file or the audit log (an agent's
stderr, a provider's error body, a config value) goes through here, so
there is one idea of a secret to keep right.  Two kinds:

* **The literal values of the secrets the process knows**: the daemon's
  token, and the value of every variable that holds a provider's key (the
  known names of :mod:`oma_bridge.provider_keys`, and those the daemon or an
  LLM agent adds with :func:`add_secrets`: each profile's
  ``api_key_env``, each name of a ``pass_env``).  Blanked wherever they
  appear, whatever their shape, so a key with no recognisable prefix is
  caught too.  A value shorter than :data:`MIN_SECRET_LENGTH` is no secret
  worth the name and would blank ordinary words: it is left alone.
* **Shapes**, following OMA's ``redactSensitiveText``: private-key blocks,
  ``Authorization`` and ``Bearer`` values, assignments whose key looks
  sensitive (``k=v``, ``k: v``, quoted JSON-style pairs), and well-known
  token literals.

It never rewrites a sentence (PROTOCOL §18.3): after ``key:`` a word
followed by another word is prose, not a value, so ``"no API key: the
environment variable X is not set"`` and ``"password: is wrong"`` pass
unchanged, while ``password: hunter2`` and ``X-Api-Key: zzz`` do not.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterable, Iterator

from oma_bridge.provider_keys import KNOWN_KEY_VARIABLES

__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "add_secrets",
    "holding_secret",
    "redact",
]

REDACTED = "[redacted]"
#: Shorter literal values are not blanked (see the module docstring).
MIN_SECRET_LENGTH = 8

# A key "looks sensitive" when one of these words appears in it, in any case,
# as in api_key, X-Api-Key, client_secret, PASSWORD, session_id, refreshToken.
_SENSITIVE_WORD = r"(?:key|secret|passw(?:or)?d|passwd|token|cookie|session|credential)"
# The key is one whole run of key characters holding such a word.  The
# lookahead (atomic in Python) finds the word, the possessive run takes the
# key whole: no backtracking, so each start costs one scan of its run, and a
# start is only where a run begins.  (``\b`` plus greedy runs cost a scan per
# word boundary inside a run: quadratic on text like ``a-a-a-a-...``.)
_KEY_CHAR = r"[A-Za-z0-9_.\-]"
_SENSITIVE_KEY = rf"(?={_KEY_CHAR}*?{_SENSITIVE_WORD}){_KEY_CHAR}++"
# Quoted values: an escape takes the next character and nothing else takes a
# backslash, so a value has one reading (letting both take a backslash made an
# unterminated value of many backslashes exponential).  Should that reading
# find no closing quote, the value runs to the next quote, backslashes and all.
_DOUBLE_QUOTED = r'"(?:\\[\s\S]|[^"\\])*+"|"[^"]*"'
# Prose after a colon: a word (a capital at most at its start), blanks, and
# the first letter of the next word.  Case-sensitive inside the (?i) pattern.
_SENTENCE = r"(?-i:[A-Za-z][a-z]*+[ \t]++[A-Za-z])"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys, whole block.
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # Authorization headers (the scheme word is kept) and bare Bearer values
    # (of 8 characters or more, as in OMA, so that prose such as "the bearer
    # of bad news" is left alone).
    (
        re.compile(
            r"(?i)(\bauthorization\s*[:=]\s*[\"']?(?:(?:bearer|basic|token)\s+)?)[^\s\"',;]+"
        ),
        r"\1" + REDACTED,
    ),
    (
        re.compile(r"(?i)(\bbearer\s+)(?!\[redacted\])[A-Za-z0-9\-._~+/]{8,}=*"),
        r"\1" + REDACTED,
    ),
    # "key": "value" and 'key': 'value' (JSON and Python reprs).
    (
        re.compile(
            r"(?i)([\"']" + _SENSITIVE_KEY + r"[\"']\s*:\s*)"
            r"([\"'])(?:(?:\\.|(?!\2)[^\\\n])*+|(?:(?!\2).)*+)\2"
        ),
        r"\1\2" + REDACTED + r"\2",
    ),
    # key=value, key = "value" (env dumps, logs, query strings) and key: value
    # (headers, YAML), unless what follows the colon is a sentence: a word,
    # then another (the lookahead is bounded by the one word it reads).
    (
        re.compile(
            rf"(?i)(?<!{_KEY_CHAR})({_SENSITIVE_KEY})(\s*=\s*|\s*:\s*(?!{_SENTENCE}))"
            rf"(?:{_DOUBLE_QUOTED}|'[^']*'|[^\s&,;\"']+)"
        ),
        r"\1\2" + REDACTED,
    ),
    # Token literals of well-known services.
    (
        re.compile(
            r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{8,}"
            r"|gh[pousr]_[A-Za-z0-9]{16,}"
            r"|github_pat_[A-Za-z0-9_]{16,}"
            r"|AKIA[0-9A-Z]{16}"
            r"|xox[abposr]-[A-Za-z0-9\-]{8,})"
        ),
        REDACTED,
    ),
)


class _Secrets:
    """The literal secrets :func:`redact` blanks: variables to read, values held.

    Process-wide, as ``redact`` is.  Changed rarely (a daemon's start and
    reload, an LLM agent's first use) and read on every call, so each change
    builds new tuples under a lock and a reader takes them as they are.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.variables: tuple[str, ...] = ()
        #: The names encoded as ``os.environ`` keeps them (see :meth:`values`).
        self._encoded: tuple[bytes, ...] = ()
        self.held: tuple[str, ...] = ()
        self.add_variables(KNOWN_KEY_VARIABLES | {"OMA_BRIDGE_TOKEN"})

    def add_variables(self, names: Iterable[str]) -> None:
        with self._lock:
            merged = tuple(sorted(set(self.variables).union(names)))
            self._encoded = tuple(os.fsencode(name) for name in merged)
            self.variables = merged

    def hold(self, value: str) -> None:
        with self._lock:
            self.held = (*self.held, value)

    def release(self, value: str) -> None:
        with self._lock:
            held = list(self.held)
            held.remove(value)
            self.held = tuple(held)

    def values(self) -> list[str]:
        """Every literal to blank now, longest first (one may contain another).

        The variables are read at each call, so a key set after start is
        caught too.  CPython keeps ``os.environ`` as a ``bytes`` dict
        (``_data``); looking the encoded names up there costs a fraction of
        ``os.environ.get`` on a missing name, which raises inside.
        """
        found = [value for value in self.held if len(value) >= MIN_SECRET_LENGTH]
        raw = getattr(os.environ, "_data", None)
        if isinstance(raw, dict):
            for key in self._encoded:
                value = raw.get(key)
                if value is not None and len(value) >= MIN_SECRET_LENGTH:
                    found.append(os.fsdecode(value))
        else:  # pragma: no cover (another Python's os.environ)
            for name in self.variables:
                text = os.environ.get(name)
                if text is not None and len(text) >= MIN_SECRET_LENGTH:
                    found.append(text)
        if len(found) > 1:
            found.sort(key=len, reverse=True)
        return found


_SECRETS = _Secrets()


def add_secrets(*, variables: Iterable[str] = (), values: Iterable[str] = ()) -> None:
    """Blank, from now on and wherever they appear, the values of ``variables`` and ``values``.

    The daemon adds every profile's key variable and ``pass_env`` names (and
    the literal value a profile's ``env`` gives such a variable) at start and
    at each reload, an LLM agent its ``api_key_env``.  Nothing is taken away:
    blanking a value too many does no harm.
    """
    _SECRETS.add_variables(variables)
    for value in values:
        if value not in _SECRETS.held:
            _SECRETS.hold(value)


@contextlib.contextmanager
def holding_secret(value: str) -> Iterator[None]:
    """Blank the literal ``value`` (the daemon's token, say) for as long as the block runs."""
    _SECRETS.hold(value)
    try:
        yield
    finally:
        _SECRETS.release(value)


def redact(text: str) -> str:
    """Return ``text`` with every secret it recognises replaced by ``[redacted]``.

    >>> redact("api_key=super-secret")
    'api_key=[redacted]'
    """
    if not text:
        return text
    for value in _SECRETS.values():
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
