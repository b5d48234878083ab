"""The Results tab, a fork and the exports, below the browser: what each handler puts where (issue 39, items 4-5)."""

from __future__ import annotations

import threading

from ensemble.trace import RunTrace
from tests.conftest import FIXTURES


def test_a_fork_says_it_is_done_in_its_own_view_and_leaves_the_runs_status_alone(tiny):
    """The status line sits above the original run's strip: the fork's "done" belongs beside the fork."""
    from ui.forking import fork_stream
    from ui.view_tuples import KEEP

    trace = RunTrace.from_json((FIXTURES / "golden" / "single.json").read_bytes())
    models = {f"tiny-{name}": model for name, model in tiny.items()}
    views = list(fork_stream(trace, 10, "drafter", lambda names: list(names), lambda names: [models[n] for n in names],
                             lambda loaded: None, threading.Event()))
    last = views[-1]
    assert "Fork done" in last.fork_view and "Forked at token #10" in last.fork_view
    assert last.fork_view.index("Fork done") < last.fork_view.index("Forked at token #10")
    assert all(view.status is KEEP for view in views)
