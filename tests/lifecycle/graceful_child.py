"""A process agent that cleans up on SIGTERM: it needs a moment, then says so in a file.

Usage: ``python graceful_child.py <marker>``; the marker says ``ready`` once SIGTERM
is handled, ``cleaned up`` after the clean-up.
"""

import signal
import sys
import time
from pathlib import Path


def leave(signum: int, frame: object) -> None:
    time.sleep(0.3)  # saving its work
    Path(sys.argv[1]).write_text("cleaned up")
    sys.exit(0)


signal.signal(signal.SIGTERM, leave)
Path(sys.argv[1]).write_text("ready")
print("started", flush=True)
time.sleep(60)
