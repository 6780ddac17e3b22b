"""One function that blanks secrets out of free text: :func:`redact`.

Everything that may carry a secret to a log line, an error message or a
result (an agent's stderr, a provider's error body, a config value) goes
through here, so there is one list of patterns to keep right.  It follows
OMA's ``redactSensitiveText``: private-key blocks, ``Authorization`` and
``Bearer`` values, assignments whose key looks sensitive (``k=v``, ``k: v``,
quoted JSON-style pairs), and well-known token literals.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "redact"]

REDACTED = "[redacted]"

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
    # key=value, key: value, key = "value" (env dumps, logs, query strings).
    (
        re.compile(
            rf"(?i)(?<!{_KEY_CHAR})({_SENSITIVE_KEY})(\s*[:=]\s*)"
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


def redact(text: str) -> str:
    """Return ``text`` with every secret it recognises replaced by ``[redacted]``.

    >>> redact("api_key=super-secret")
    'api_key=[redacted]'
    """
    if not text:
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
