"""A process agent that streams the words of its stdin one at a time, ``argv[1]`` seconds apart."""

from __future__ import annotations

import sys
import time

pause = float(sys.argv[1]) if len(sys.argv) > 1 else 0.3
for word in sys.stdin.read().split():
    sys.stdout.write(word + " ")
    sys.stdout.flush()
    time.sleep(pause)
