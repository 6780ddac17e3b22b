"""Process trees for every component that spawns: spawn, stop, crash watchdog, leftover reaper."""
