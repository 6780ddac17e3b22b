"""The daemon's agents: registry, overrides, runs, remote requests, status."""
