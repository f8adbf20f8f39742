"""Third-party versions the generated files pin: GitHub actions by commit SHA, the uv image by tag.

Each SHA was read from the action's repository (`git rev-parse refs/tags/<tag>^{commit}`). To bump one:
look up the new tag's commit the same way, edit it here and in `.github/workflows/ci.yml`, run `runner gen-ci`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Action:
    repo: str
    sha: str
    tag: str

    @property
    def uses(self) -> str:
        """`uses:` value with the tag as a trailing comment (how pinning tools expect it)."""
        return f"{self.repo}@{self.sha} # {self.tag}"


ACTIONS = {
    "checkout": Action("actions/checkout", "3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "setup_buildx": Action("docker/setup-buildx-action", "37fe631027851001ddb9b187196cc803df7f5f0e", "v4.3.0"),
    "build_push": Action("docker/build-push-action", "53b7df96c91f9c12dcc8a07bcb9ccacbed38856a", "v7.3.0"),
    "upload_artifact": Action("actions/upload-artifact", "bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0"),
    "download_artifact": Action("actions/download-artifact", "3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "v8.0.1"),
    "setup_python": Action("actions/setup-python", "5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
}

# uv provides the image's Python (python-build-standalone builds): any glibc base image works, no PPA.
UV_IMAGE = "ghcr.io/astral-sh/uv:0.12.5"
