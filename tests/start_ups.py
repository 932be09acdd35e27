"""Many start-ups of ``pytest specs`` in one process, for runs that stop before any spec runs.

    python -m tests.start_ups CASES.json RESULTS.json

``CASES.json`` maps a name to ``[args, env]``; each case is ``pytest specs -q -p no:cacheprovider
ARGS`` under this environment updated with ``env``, and ``RESULTS.json`` maps the name to
``[exit code, stdout, stderr]``. ``tests/test_faults.py`` checks its start-up errors this way: each
would otherwise pay a start of Python and torch of its own.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import pytest


def run(cases: dict[str, list]) -> dict[str, list]:
    base = dict(os.environ)
    results = {}
    for name, (args, env) in cases.items():
        os.environ.clear()
        os.environ.update({**base, **env})
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = pytest.main(["specs", "-q", "-p", "no:cacheprovider", *args])
        results[name] = [int(code), out.getvalue(), err.getvalue()]
    os.environ.clear()
    os.environ.update(base)
    return results


if __name__ == "__main__":
    cases_file, results_file = sys.argv[1:]
    with open(cases_file) as cases:
        found = run(json.load(cases))
    with open(results_file, "w") as results:
        json.dump(found, results)
