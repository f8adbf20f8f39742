"""Options of env families and policy types: documented from the schemas that check them (`runner list --options`,
docs/options.md), every one with a meaning, and the defaults the adapters use are the documented ones."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import REPO, RUNNER, runner_main

from runner.adapters import KINDS, descriptor, option_defaults
from runner.options import document

BUILTINS = [(kind, name) for kind in ("env", "policy") for name in KINDS[kind][1]]


def test_docs_options_is_generated_from_the_schemas(update_goldens):
    path = REPO / "docs" / "options.md"
    if update_goldens:
        path.write_text(document())
    assert path.read_text() == document(), "docs/options.md is stale: run pytest tests/test_options.py --update-goldens"


@pytest.mark.parametrize("kind, name", BUILTINS, ids=lambda x: str(x))
def test_every_option_has_a_meaning(kind, name):
    properties = descriptor(kind, name).kwargs_schema.get("properties") or {}
    assert all(prop.get("description") for prop in properties.values()), name


@pytest.mark.parametrize("kind, name", BUILTINS, ids=lambda x: str(x))
def test_list_options_shows_each_option_with_its_default(kind, name, capsys):
    code, out, err = runner_main(capsys, "list", "--options", name)
    assert code == 0 and err == ""
    defaults = option_defaults(descriptor(kind, name))
    for option in descriptor(kind, name).kwargs_schema.get("properties") or {}:
        line = next(line for line in out.splitlines() if line.split()[:1] == [option])
        if option in defaults:
            assert line.endswith(f"default {json.dumps(defaults[option])}"), line


def test_the_adapters_use_the_documented_defaults():
    from runner.envs.libero.adapter import KWARGS as LIBERO
    from runner.envs.metaworld.adapter import KWARGS as METAWORLD
    from runner.policies.remote.policy import options
    from runner.spec import load_spec

    assert METAWORLD == option_defaults(descriptor("env", "metaworld"))
    assert LIBERO == option_defaults(descriptor("env", "libero"))
    spec = load_spec(REPO / "specs" / "metaworld.yaml", ["policy.type=remote", "policy.url=ws://127.0.0.1:1",
                                                          "policy.path=null"])
    remote = options(spec.policy)
    documented = option_defaults(descriptor("policy", "remote"))
    assert (remote.endpoint.connect_timeout_s, remote.endpoint.connect_retries, remote.actions_key,
            remote.control) == (documented["connect_timeout_s"], documented["connect_retries"],
                                documented["actions_key"], documented["control_messages"])


def test_an_unknown_name_is_one_message_with_a_did_you_mean(capsys):
    code, _, err = runner_main(capsys, "list", "--options", "metawrld")
    assert code == 2 and "did you mean 'metaworld'?" in err


def test_output_to_a_reader_that_goes_away_is_no_traceback():
    """`runner list --options | head -1`, made deterministic: the pipe's reader is gone before runner writes.
    runner stops quietly with 128 + SIGPIPE."""
    import os

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([*RUNNER, "list", "--options"], cwd=REPO, stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr
