"""The Harbor executor as a package: executor.py runs a cell attempt as a Harbor trial through
runner.py (which runs in the pinned Harbor interpreter, not fleet's), classify.py says what a
trial's result means (pure), install.py creates the pinned interpreter
(`python -m worker.executor.harbor.install`), and syspath/harbor_nsenv is the namespace
environment Harbor loads by import path from the interpreter's sys.path. The worker's
identity hashes runner.py and syspath/harbor_nsenv (`harbor_manifest`)."""
from worker.executor.harbor.executor import HarborExecutor, harbor_manifest, harbor_python

__all__ = ["HarborExecutor", "harbor_manifest", "harbor_python"]
