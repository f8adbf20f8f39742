"""A benchmark fingerprint (run.json "fingerprint"): what decides whether two results are comparable, as named parts,
each with a hash and a readable summary. Collected by runner.engine.fingerprint; here it is only data: hashed,
shown and compared.

Parts (docs/trust.md says what each covers and what it cannot see):

  spec       the resolved spec fields that decide the results (env, policy but where it lives, episodes, seed)
  stack      the versions of what the env family and policy import, runner, Python, CPU architecture and
             instruction-set level, C library, the image digest when known
  assets     the files the family loads (scenes, meshes, task files), content-hashed
  rendering  the OpenGL renderer and the camera settings, and whether images reach the policy
  policy     the policy's identity: weights digest, hub revision, module file digest, server's account

Per episode, the ledger holds the initial state's hash (runner.envs.state: `<kind>:<hash>`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

FORMAT = 1
PARTS = ("spec", "stack", "assets", "rendering", "policy")
HEX_DIGITS = 16


def digest(data: Any) -> str:
    """16 hex digits of the sha256 of `data` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HEX_DIGITS]


def part(summary: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """One part: the hash of `data`, its summary and the data itself."""
    return {"hash": digest(data), "summary": summary, "data": dict(data)}


def fingerprint(parts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The whole fingerprint: its parts, and a hash of their hashes."""
    return {"format": FORMAT, "hash": digest({name: p["hash"] for name, p in parts.items()}),
            "parts": {name: dict(p) for name, p in parts.items()}}


def differing(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """The names of the parts whose hashes differ (a part only one side has counts as differing); [] when either
    fingerprint is missing (nothing to compare)."""
    if not a or not b:
        return []
    pa, pb = a.get("parts") or {}, b.get("parts") or {}
    return [name for name in _ordered(set(pa) | set(pb))
            if (pa.get(name) or {}).get("hash") != (pb.get(name) or {}).get("hash")]


def changes(a: Mapping[str, Any], b: Mapping[str, Any], name: str, limit: int = 6,
            ignore: tuple[str, ...] = ()) -> list[str]:
    """What differs in part `name`: `key: old -> new` for its data's leaves (at most `limit`, then a count), leaving
    out the data's top-level keys in `ignore`."""
    from runner.results.runfile import spec_changes

    def data(fp: Mapping[str, Any]) -> dict[str, Any]:
        found = ((fp.get("parts") or {}).get(name) or {}).get("data") or {}
        return {k: v for k, v in found.items() if k not in ignore}

    found = spec_changes(data(a), data(b))
    return found[:limit] + ([f"and {len(found) - limit} more"] if len(found) > limit else [])


BENCHMARK_ONLY = ("policy",)  # comparing two policies on one benchmark: what is the benchmark's


def described_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None,
                          ignore: tuple[str, ...] = ()) -> list[str]:
    """One line per differing part: `stack: packages.mujoco: "3.8.1" -> "3.3.7"; ...`. `ignore`: part names, and
    top-level data keys, left out (BENCHMARK_ONLY: the policy, as in the spec part's `policy`)."""
    out = []
    for name in differing(a, b):
        if name in ignore:
            continue
        found = changes(a, b, name, ignore=ignore)  # type: ignore[arg-type]
        if found or not ignore:
            out.append(f"{name}: " + ("; ".join(found) or "changed"))
    return out


def lines(fp: Mapping[str, Any]) -> list[str]:
    """How `runner show --fingerprint` and reports print it: the whole hash, then one line per part."""
    out = [f"fingerprint {fp.get('hash', '?')}"]
    for name, p in _parts(fp):
        out.append(f"  {name:<10} {p.get('hash', '?')}  {p.get('summary', '')}")
    return out


def _parts(fp: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    parts = fp.get("parts") or {}
    return [(name, parts[name]) for name in _ordered(parts)]


def _ordered(names: Any) -> list[str]:
    return sorted(names, key=lambda n: (PARTS.index(n) if n in PARTS else len(PARTS), n))


def initial_states_line(records: list[Any]) -> str:
    """How many episodes recorded their initial state, and of which kind: "24 of 24 episodes (physics)"."""
    kinds = sorted({r.init_state.split(":", 1)[0] for r in records if r.init_state})
    known = sum(1 for r in records if r.init_state)
    return f"{known} of {len(records)} episodes" + (f" ({', '.join(kinds)} state)" if kinds else "")


def initial_state_mismatches(pairs: list[tuple[Any, Any]]) -> tuple[int, int, list[tuple[Any, Any]]]:
    """Of episode pairs (records of two runs), (pairs both recorded an initial state for, how many differ, the
    differing pairs)."""
    known = [(x, y) for x, y in pairs if x.init_state and y.init_state]
    differ = [(x, y) for x, y in known if x.init_state != y.init_state]
    return len(known), len(differ), differ


__all__ = ["BENCHMARK_ONLY", "FORMAT", "PARTS", "changes", "described_differences", "differing", "digest",
           "fingerprint", "initial_state_mismatches", "initial_states_line", "lines", "part"]
