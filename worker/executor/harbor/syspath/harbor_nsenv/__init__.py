"""A Harbor environment without a container engine: the task's commands run over the host
system in a private mount and PID namespace (see environment.py).

Harbor loads it with `EnvironmentConfig.import_path = "harbor_nsenv:NamespaceEnvironment"`
(this directory's parent on the Harbor interpreter's sys.path). The class is imported lazily
so that the stdlib-only parts (plan.py, holder.py) can be read and tested without Harbor.
"""
from __future__ import annotations

from typing import Any

__all__ = ["NamespaceEnvironment", "NamespaceEnvironmentUnsupported", "NamespaceBuildError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import environment  # needs Harbor

        return getattr(environment, name)
    raise AttributeError(name)
