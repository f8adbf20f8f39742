"""Implicit episodes: what `runner serve` starts for a client that sends no runner episode_start (openpi's clients
send no episode boundaries at all; vla-eval's EPISODE_START carries no seed or action space).

The rule (docs/remote-policies.md): the n-th implicit episode the server starts (n = 0, 1, ... over its life, in
order) is seeded `eval.seed + n`; its task is the spec's task whose name or text is what the client said (the
prompt, vla-eval's task name or description; case and spacing aside), else a task of that name; its action space,
when the policy needs one (`PolicyType.needs_action_space`: random), is the spec env's for that task (one env made
once per task, on the policy's thread, then closed). An openpi client therefore gets one episode per connection,
seeded `eval.seed + <connection index>` when its connections come one after the other, and a new one whenever its
prompt changes (openpi's LIBERO loop keeps one connection for every task).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner.errors import RunnerError
from runner.policies.base import EpisodeStart
from runner.spec import Spec
from runner.tasks import TaskRef
from runner.text import one_line, visible


class ImplicitEpisodes:
    """Counts implicit episodes and finds their task and action space from the spec (lazily: only a server that
    gets such clients imports the simulator)."""

    def __init__(self, spec: Spec, *, needs_action_space: bool, log: Callable[[str], None]) -> None:
        self.spec = spec
        self.needs_action_space = needs_action_space
        self.log = log
        self.started = 0
        self._tasks: list[TaskRef] | None = None
        self._spaces: dict[str, Any] = {}
        self._adapter: Any = None

    def next_seed(self) -> tuple[int, int]:
        """The next implicit episode's number and seed (called on the event loop: numbered in arrival order)."""
        n = self.started
        self.started += 1
        return n, self.spec.eval.seed + n

    def start(self, slot: int, number: int, seed: int, said: tuple[str, ...], action_space: Any = None) -> EpisodeStart:
        """The EpisodeStart of implicit episode `number` for what the client said of its task (candidates: the first
        the spec knows wins, else the first; on the policy's thread: it may import the simulator and make an env)."""
        task = self.task(said)
        if action_space is None and self.needs_action_space:
            action_space = self.action_space(task)
        return EpisodeStart(slot, task, number, seed, action_space, 1)

    def task(self, said: tuple[str, ...]) -> TaskRef:
        """The spec's task a client names: its name (also as `<env type>-<name>`) or its text, whatever the case and
        spacing; else a task of that name."""
        for candidate in said:
            wanted = _normal(candidate)
            for task in self.tasks():
                if wanted in (_normal(task.name), _normal(task.text), _normal(f"{self.spec.env.type}-{task.name}")):
                    return task
        first = said[0] if said else ""
        return TaskRef("remote", 0, first, first)

    def tasks(self) -> list[TaskRef]:
        if self._tasks is None:
            self._tasks = []
            try:
                self._tasks = list(self._env_adapter().tasks(self.spec.env))
            except Exception as exc:  # noqa: BLE001 - the simulator may be missing or broken where the policy is served
                self.log(f"cannot list the spec's tasks here ({_why(exc)}); a prompt is taken as a task name")
        return self._tasks

    def known(self) -> str:
        """The spec's tasks, for a message ("" when they cannot be listed here)."""
        names = [t.name for t in self.tasks()]
        return visible(", ".join(names[:8]) + (" ..." if len(names) > 8 else ""), 300)

    def action_space(self, task: TaskRef) -> Any:
        """The spec env's action space for `task` (the spec's first task when the client named none of them);
        None when no env of the spec can be made here."""
        tasks = self.tasks()
        if task not in tasks:
            if not tasks:
                return None
            task = tasks[0]
        if task.name not in self._spaces:
            self._spaces[task.name] = None
            try:
                env = self._env_adapter().make(task, self.spec.env, obs_keys=frozenset(), video=False)
                try:
                    self._spaces[task.name] = env.action_space
                finally:
                    env.close()
                self.log(f"made one {self.spec.env.type} env for {task.name}'s action space "
                         f"({self._spaces[task.name]}): clients that send none get it")
            except Exception as exc:  # noqa: BLE001 - as above
                self.log(f"cannot make the spec's env here for its action space ({_why(exc)})")
        return self._spaces[task.name]

    def _env_adapter(self) -> Any:
        if self._adapter is None:
            from runner.envs import get_adapter

            adapter = get_adapter(self.spec.env.type)
            adapter.check()
            self._adapter = adapter
        return self._adapter


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, RunnerError) else f"{type(exc).__name__}: {one_line(exc, 300)}"


__all__ = ["ImplicitEpisodes"]
