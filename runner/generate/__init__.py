"""CI generation: Dockerfiles and the benchmark workflow rendered from specs. Imports only runner.spec.

`render(specs, root)` gives {relative path: text}; `changes(root, files, prune=...)` compares with disk.
"""

from runner.generate.render import DOCKERFILE_PREFIX, WORKFLOW_PATH, dockerfile_path, render, templates_dir
from runner.generate.sync import Change, apply, changes, generated_on_disk

__all__ = [
    "DOCKERFILE_PREFIX", "WORKFLOW_PATH", "Change", "apply", "changes", "dockerfile_path", "generated_on_disk",
    "render", "templates_dir",
]
