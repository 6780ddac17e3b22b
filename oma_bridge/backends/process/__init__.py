"""The process backend: one external command per run, text in, stdout out.

:mod:`oma_bridge.supervision` is the process-tree supervision it stands on,
shared with the ACP backend.
"""

from oma_bridge.backends.process.backend import ProcessBackend, build_prompt
from oma_bridge.backends.process.config import ProcessConfig, ProcessInput
from oma_bridge.supervision.supervisor import (
    SupervisedProcess,
    Supervisor,
    configure_supervisor,
    default_supervisor,
    reap_leftovers,
)

__all__ = [
    "ProcessBackend",
    "ProcessConfig",
    "ProcessInput",
    "SupervisedProcess",
    "Supervisor",
    "build_prompt",
    "configure_supervisor",
    "default_supervisor",
    "reap_leftovers",
]
