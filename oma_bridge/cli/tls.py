"""``oma-bridge tls init``: a certificate for the daemon's TCP listener."""

from __future__ import annotations

import argparse
import sys

from oma_bridge.cli_exits import EXIT_FAILED, EXIT_INVALID


def tls_init_command(args: argparse.Namespace) -> int:
    """``tls init``: the CA and the pair in the state folder, the ``[server]`` lines, the CA."""
    from oma_bridge.certificates import CertificateError, HostError, init_tls
    from oma_bridge.paths import default_config_path, default_state_dir
    from oma_bridge.private_files import NotPrivateError
    from oma_bridge.server.config import ConfigError
    from oma_bridge.server.config_append import NEW_CONFIG, ConfigAppendError, add_server_keys

    folder = default_state_dir() / "tls"
    try:
        made = init_tls(folder, args.host)
    except CertificateError as error:
        print(f"oma-bridge: {error}", file=sys.stderr)
        return EXIT_INVALID if isinstance(error, HostError) else EXIT_FAILED
    except (NotPrivateError, OSError) as error:
        print(f"oma-bridge: cannot make {folder}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{'kept' if made.ca_kept else 'made'} the local CA {made.ca} (its key {made.ca_key})")
    print(f"made a server certificate for {', '.join(made.hosts)}: {made.cert} (key {made.key})")
    keys = {"tls_cert": str(made.cert), "tls_key": str(made.key)}
    lines = [f'{key} = "{value}"' for key, value in keys.items()]
    path = (args.config or default_config_path()).expanduser()
    problem = "--no-config" if args.no_config else None
    if problem is None:
        try:
            made_by = NEW_CONFIG.replace("`oma-bridge agents add`", "`oma-bridge tls init`")
            added = add_server_keys(path, keys, new_text=made_by)
        except (ConfigAppendError, ConfigError, OSError) as error:
            problem = str(error)
        else:
            said = "wrote to" if added else "already in"
            print(f"{said} [server] of {path}: " + "; ".join(lines))
            print(
                "the daemon uses them from its next start (a reload keeps its listeners): "
                "`systemctl --user restart oma-bridge`, or stop and start `oma-bridge serve`"
            )
    if problem is not None:
        if not args.no_config:
            print(f"oma-bridge: the config is not changed: {problem}", file=sys.stderr)
        print("put these lines in [server] of the config the daemon reads:")
        print("[server]\n" + "\n".join(lines))
    print(f"clients of its TCP listener trust it with: --ca-file {made.ca}")
    return 0
