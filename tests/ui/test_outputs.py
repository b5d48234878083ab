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


def test_the_projects_run_opens_its_grid_without_reading_a_trace(monkeypatch):
    """Opening the project's GSM8K run showed only Gradio's "processing 12.1/28.3s" for ~30 s: the decision
    statistics parsed all 240 traces before the grid could show. The grid now comes from rows.jsonl alone, with a
    line saying what is being read; the statistics follow (ui.results.stats_view), once per process for this run."""
    from ui import results

    def no_traces(*args, **kwargs):
        raise AssertionError("the grid must not wait for the traces")

    monkeypatch.setattr(results, "decision_stats", no_traces)
    monkeypatch.setattr(results, "_SHIPPED_STATS", {})
    _, view, folder = results.open_evaluation(results.COMMITTED_RUN)
    assert folder is not None and view.grid.count('class="el-cell') == 240
    assert "Reading the 240 kept traces" in view.stats_view

    calls = []
    monkeypatch.setattr(results, "decision_stats", lambda f: calls.append(f) or {"decisions": {}, "counted": {"complete": True}})
    first, again = results.stats_view(folder), results.stats_view(folder)
    assert len(calls) == 1 and "<h3>Decisions per 100 tokens</h3>" in first.stats_view == again.stats_view
    assert results.stats_view(None) == results.ExplorerView()  # nothing opened: nothing changes
