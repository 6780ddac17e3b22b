"""HTTP to LLM providers: one client, retries, timeouts and error texts.

Both HTTP adapters (Anthropic, OpenAI-compatible) go through
:class:`ProviderHTTP`, so the rules live in one place:

* **Retries** (OMA's rule, :func:`~oma_bridge.errors.is_retryable`): HTTP
  408, 409, 429 and 5xx, and a connection that could not be opened, are
  retried with bounded exponential backoff; ``retry-after-ms`` /
  ``retry-after`` from the provider wins when present (capped).  Other 4xx
  fail at once.  A stream that already delivered bytes is never retried:
  its tokens were shown to the caller.
* **Timeouts**: ``call_timeout`` bounds every wait for the provider (the
  connection, the headers, each next piece of the body), so a stalled stream
  ends with :class:`~oma_bridge.errors.LLMCallTimeoutError` while a long but
  live stream runs on.
* **Secrets**: the API key is read when a request is made, from the variable
  the config names; it travels only in a header.  Every provider text that
  reaches an error goes through :func:`~oma_bridge.redaction.redact`, which
  knows the key's variable (added when the client is made) and blanks its
  value, whatever its shape.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import os
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import httpx
import orjson

from oma_bridge.backends.llm.sse import SSEEvent, aiter_sse
from oma_bridge.backends.llm.types import StreamDelta
from oma_bridge.errors import LLMCallTimeoutError, ProviderError, is_retryable
from oma_bridge.provider_keys import key_fix, key_not_set
from oma_bridge.redaction import add_secrets, redact

__all__ = ["ApiKey", "ProviderHTTP", "RetryPolicy"]

logger = logging.getLogger(__name__)

#: How much of a provider's error body an error message quotes.
_BODY_SNIPPET = 500
#: Longest wait for a response's connection to be released.
_CLOSE_TIMEOUT_S = 5.0


#: What a provider's JSON of an unexpected shape raises while it is read.
SHAPE_ERRORS = (AttributeError, IndexError, KeyError, TypeError, ValueError)


class StreamDecoder(Protocol):
    """A provider's event sequence, turned into deltas batch by batch."""

    failure: ProviderError | None
    finished: bool

    def batch(self, events: list[SSEEvent]) -> list[StreamDelta]: ...


@dataclass(frozen=True)
class ApiKey:
    """Where an API key comes from: an environment variable, read at call time.

    ``required=False`` serves local OpenAI-compatible servers (Ollama, vLLM,
    llama.cpp) that need no key: without one, no ``Authorization`` is sent.
    """

    env_var: str
    agent_name: str
    required: bool = True

    def get(self) -> str | None:
        value = os.environ.get(self.env_var) or None
        if value is None and self.required:
            # "... is not set in the daemon's environment" in the daemon (PROTOCOL §18.3);
            # "key: the variable" is prose, which redaction leaves alone.
            raise ProviderError(
                f'Agent "{self.agent_name}": no API key: the variable '
                f"{key_not_set(self.env_var)} (api_key_env){key_fix()}"
            )
        return value

    def __repr__(self) -> str:  # never the value
        return f"ApiKey(env_var={self.env_var!r})"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff: ``attempts`` calls at most, in all."""

    attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    #: A provider's ``retry-after`` above this is cut down to it.
    max_retry_after_s: float = 60.0

    def delay(self, attempt: int, headers: Mapping[str, str] | None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        hinted = _retry_after(headers) if headers is not None else None
        if hinted is not None:
            return min(hinted, self.max_retry_after_s)
        backoff: float = self.base_delay_s * 2 ** (attempt - 1)
        return min(backoff, self.max_delay_s)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every provider client of the process.

    Loading the CA bundle costs ~20 ms; built per client, it would be paid
    by the first run of every agent.  An ``SSLContext`` is safe to share.
    """
    return httpx.create_ssl_context()


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` (OpenAI, Anthropic) or ``retry-after`` (seconds or a date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(float(raw_ms) / 1000, 0.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


class ProviderHTTP:
    """One provider's HTTP client, created lazily and closed by :meth:`aclose`."""

    def __init__(
        self,
        provider: str,
        *,
        label: str,
        key: ApiKey,
        call_timeout_s: float,
        retry: RetryPolicy,
    ) -> None:
        self.provider = provider
        self.label = label
        self.key = key
        add_secrets(variables=[key.env_var])
        self.call_timeout_s = call_timeout_s
        self.retry = retry
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.call_timeout_s), verify=_tls_context()
            )
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def api_key(self) -> str | None:
        return self.key.get()

    async def post_json(self, url: str, headers: Mapping[str, str], body: Any) -> Any:
        """One non-streaming call, retried per the policy; the decoded JSON answer."""
        async with self.open(url, headers, body) as response:
            try:
                raw = await response.aread()
            except httpx.TimeoutException:
                raise self._timeout() from None
            except httpx.TransportError as exc:
                raise self.error(f"connection lost while reading the answer: {exc!r}") from None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise self.error(f"answer is not JSON: {self._snippet(raw)}") from None

    @asynccontextmanager
    async def open(
        self, url: str, headers: Mapping[str, str], body: Any
    ) -> AsyncIterator[httpx.Response]:
        """POST ``body`` as JSON and yield the first successful (2xx) response.

        The response body is not read yet: a stream reads it with
        :meth:`aiter_bytes`.  Failures raise :class:`ProviderError` (or
        :class:`LLMCallTimeoutError`).
        """
        content = orjson.dumps(body)
        all_headers = {"content-type": "application/json", **headers}
        attempt = 0
        while True:
            attempt += 1
            retry_headers: Mapping[str, str] | None = None
            try:
                request = self.client.build_request(
                    "POST", url, headers=all_headers, content=content
                )
                response = await self.client.send(request, stream=True)
            except httpx.TimeoutException:
                raise self._timeout() from None
            except httpx.TransportError as exc:
                failure = self.error(f"request failed: {exc!r}")
            else:
                if response.status_code < 400:
                    try:
                        yield response
                    finally:
                        await _close(response)
                    return
                failure = await self._status_error(response)
                retry_headers = response.headers
            if attempt >= self.retry.attempts or not is_retryable(failure):
                raise failure
            delay = self.retry.delay(attempt, retry_headers)
            # The message is already redacted and free of the key (see error()).
            logger.warning(
                "%s; retry %d of %d in %.2f s",
                failure.message,
                attempt,
                self.retry.attempts - 1,
                delay,
            )
            await anyio.sleep(delay)

    async def stream(
        self, url: str, headers: Mapping[str, str], body: Any, decoder: StreamDecoder
    ) -> AsyncGenerator[StreamDelta, None]:
        """POST ``body``, read the answer as SSE and let ``decoder`` turn it into deltas.

        Each network read becomes one batch of events; a decoder failure is
        raised after the deltas of its batch, and the response is closed as
        soon as the decoder says the turn is over.  Whether a stream that
        simply ended was whole is the adapter's call (``decoder.finished``).
        """
        async with self.open(url, {**headers, "accept": "text/event-stream"}, body) as response:
            async for events in aiter_sse(self.aiter_bytes(response)):
                for delta in decoder.batch(events):
                    yield delta
                if decoder.failure is not None:
                    raise decoder.failure
                if decoder.finished:
                    return

    async def aiter_bytes(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """The body of a streaming response; a stall or a broken connection raises."""
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx.TimeoutException:
            raise self._timeout(stalled=True) from None
        except httpx.TransportError as exc:
            raise self.error(f"connection lost mid-stream: {exc!r}") from None

    async def _status_error(self, response: httpx.Response) -> ProviderError:
        try:
            raw = await response.aread()
        except httpx.HTTPError:
            raw = b""
        finally:
            await _close(response)
        status = response.status_code
        return self.error(f"HTTP {status}: {self._provider_message(raw)}", http_status=status)

    def _provider_message(self, raw: bytes) -> str:
        """The provider's own words: ``error.message`` of its JSON, else the body."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return self._snippet(raw) or "(empty body)"
        return error_text(data) or self._snippet(raw)

    def _snippet(self, raw: bytes) -> str:
        return raw[:_BODY_SNIPPET].decode("utf-8", "replace").strip()

    def error(self, detail: str, *, http_status: int | None = None) -> ProviderError:
        """A :class:`ProviderError` with ``detail`` redacted (the key's value included)."""
        return ProviderError(
            redact(f"{self.label} API error: {detail}"),
            http_status=http_status,
            provider=self.provider,
        )

    def _timeout(self, *, stalled: bool = False) -> LLMCallTimeoutError:
        ms = round(self.call_timeout_s * 1000)
        what = "stream stalled for more than" if stalled else "call exceeded"
        return LLMCallTimeoutError(f"{self.label} {what} call_timeout_ms={ms}")


async def _close(response: httpx.Response) -> None:
    """Release a response's connection, also when the run is being cancelled.

    Shielded (a cancelled run must still hand its socket back or close it),
    and bounded, so a wedged peer cannot hold a cancellation up.
    """
    with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S):
        await response.aclose()


def error_text(data: Any) -> str | None:
    """``{"error": {"message": ...}}`` (Anthropic, OpenAI) or ``{"error": "..."}`` (Ollama)."""
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        kind = error.get("type")
        if isinstance(message, str):
            return f"{message} ({kind})" if isinstance(kind, str) and kind else message
    if isinstance(error, str):
        return error
    return None
