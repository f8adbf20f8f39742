"""CI generation: per benchmark spec, its Dockerfile and its workflow. Imports runner.spec and the install plan.

`render(specs, root)` gives {relative path: text}; `changes(root, files, prune=...)` compares with disk.
"""

from runner.generate.render import (
    DOCKERFILE_PREFIX,
    WORKFLOW_PREFIX,
    dockerfile_path,
    render,
    templates_dir,
    workflow_path,
)
from runner.generate.sync import Change, apply, changes, generated_on_disk

__all__ = [
    "DOCKERFILE_PREFIX", "WORKFLOW_PREFIX", "Change", "apply", "changes", "dockerfile_path", "generated_on_disk",
    "render", "templates_dir", "workflow_path",
]
