"""``oma-bridge ui``: the status page's link, opened in a browser."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from oma_bridge.cli_exits import EXIT_NO_DAEMON


async def ui_command(args: argparse.Namespace) -> int:
    """The status page's link, ``http://127.0.0.1:PORT/ui#token=...``, on stdout; a browser.

    The token rides in the fragment, which a browser never sends.  It is
    printed there and nowhere else; the browser is not given the link on its
    command line (which every local user can read) but a file of the user's
    own (0600) that forwards to it.
    """
    from oma_bridge.client import ConnectOptionError, find_daemon, read_token_file
    from oma_bridge.client.discovery import url_from_environment
    from oma_bridge.paths import default_runtime_dir

    token = read_token_file(args.token_file) if args.token_file is not None else None
    url: str | None = url_from_environment(args.url)
    if url is not None:
        if token is None:
            raise ConnectOptionError("--url needs --token-file: the link carries the token")
        folder = default_runtime_dir()
    else:
        discovery = find_daemon()
        url, folder, token = discovery.url, discovery.path.parent, token or discovery.token
        if url is None:
            print(
                "oma-bridge: the status page is served on the daemon's TCP listener, "
                'and this daemon has none: set [server] tcp = "127.0.0.1:7878" in its config '
                "(or start it with --tcp 127.0.0.1:7878)",
                file=sys.stderr,
            )
            return EXIT_NO_DAEMON
    link = ui_link(url, token)
    print(link, flush=True)
    if not args.no_browser:
        open_browser(link, folder)
    return 0


def ui_link(url: str, token: str) -> str:
    """``ws://HOST:PORT/`` (``wss``) → ``http://HOST:PORT/ui#token=...`` (``https``)."""
    from urllib.parse import quote, urlsplit, urlunsplit

    from oma_bridge.client import ConnectOptionError

    parts = urlsplit(url)
    schemes = {"ws": "http", "wss": "https"}
    if parts.scheme.lower() not in schemes or not parts.netloc:
        raise ConnectOptionError(f"not a ws:// or wss:// URL: {url}")
    fragment = "token=" + quote(token, safe="")
    return urlunsplit((schemes[parts.scheme.lower()], parts.netloc, "/ui", "", fragment))


def open_browser(link: str, folder: Path) -> None:
    """Open ``link`` in a graphical browser, if there is one, through a private redirect file."""
    import html
    import os
    import webbrowser

    from oma_bridge.private_files import make_private_folder, open_private

    graphical = sys.platform in ("darwin", "win32") or any(
        os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")
    )
    if not graphical:
        print("oma-bridge: no browser to open here; open the link above", file=sys.stderr)
        return
    target = html.escape(link, quote=True)
    page = (
        '<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
        f'<meta http-equiv="refresh" content="0;url={target}">'
        f'<title>oma-bridge status</title><a href="{target}">oma-bridge status page</a>\n'
    )
    try:
        make_private_folder(folder, forbidden=0)  # the daemon's folder: it checked the mode
        redirect = folder / "ui-link.html"
        # A new file each time, so it is 0600 whatever an old one's mode was.
        redirect.unlink(missing_ok=True)
        fd = open_private(redirect, os.O_WRONLY | os.O_EXCL)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(page)
        opened = webbrowser.open(redirect.as_uri(), new=2)
    except (OSError, webbrowser.Error) as error:
        print(f"oma-bridge: cannot open a browser ({error}); open the link above", file=sys.stderr)
        return
    if not opened:
        print("oma-bridge: no browser to open here; open the link above", file=sys.stderr)
