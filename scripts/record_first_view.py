"""Record the run the app replays on load (``assets/first-view.json``): its first example, as the app would run it.

    python scripts/record_first_view.py [--runtime auto|transformers|llamacpp]

The app's first example (``ui.tabs.EXAMPLES[0]``: its prompt, method and models) at the engine settings' starting
values, on the embedded models. Rerun it after a change that alters what a run records; the app labels
the replay as a recorded run with the date stored here (and the runtime a live run uses where it is served), and ``tests/ui/test_first_view.py`` checks that
the file still matches the app's first example and defaults.

Its timings are shown to every visitor (as recorded ones), so record on a quiet machine: the example runs once to
warm the models and the caches, then once for the file; a run whose timings no idle two-core CPU would give
(``ui.recording.implausible_timings``: the machine was busy), during which other processes took more than a fifth
of the CPUs (read from /proc), or that the token budget cut is not written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


OTHERS_MAX = 0.2
"""The largest share of the machine's CPU time other processes may take while the recorded run goes (beyond it,
the recording's timings are the load's, not the app's)."""


def cpu_ticks() -> tuple[int, int, int] | None:
    """(every CPU's busy ticks, every CPU's ticks, this process's ticks) from /proc; None where there is no /proc."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total, int(own[11]) + int(own[12])  # utime + stime (every thread of this process)


def others_share(before, after) -> float:
    """The share of all CPUs' time that other processes took between two :func:`cpu_ticks` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return 0.0
    busy, total, own = (a - b for a, b in zip(after, before, strict=True))
    return max(0.0, (busy - own) / total)


def main() -> int:
    from ensemble.methods import generate
    from ensemble.models import ModelPool, quiet_progress
    from ui.controls import control_names, initial_value, settings_from_controls
    from ui.recording import implausible_timings
    from ui.tabs import EXAMPLES, FIRST_VIEW

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", default="auto")
    args = parser.parse_args()
    prompt, method, names = EXAMPLES[0]
    settings = settings_from_controls({name: initial_value(name) for name in control_names()})
    pool = ModelPool(runtime=args.runtime)
    models = pool.get_many(names, quiet_progress)
    generate(models, prompt, method, settings)  # warm-up: the file's timings are not a cold start's
    before = cpu_ticks()
    trace = generate(models, prompt, method, settings)
    others = others_share(before, cpu_ticks())
    s = trace.stats
    refused = implausible_timings(trace)
    if others > OTHERS_MAX:
        refused.append(f"other processes took {others:.0%} of the CPUs while it ran (at most {OTHERS_MAX:.0%})")
    if s.stop_reason == "budget":
        refused.append(f"the answer was cut by the token budget ({s.generated_tokens} tokens)")
    if refused:
        print(f"not written: {'; '.join(refused)}. Record again when the machine is quiet.", file=sys.stderr)
        return 1
    FIRST_VIEW.write_text(trace.to_json(indent=1) + "\n", encoding="utf-8")
    print(f"{FIRST_VIEW.relative_to(ROOT)}: {method} on {', '.join(trace.models)}, {s.generated_tokens} tokens in "
          f"{s.latency_s:.2f} s (first token {s.first_token_s or 0:.2f} s), decisions {s.decisions}, "
          f"runtimes {sorted({m.runtime for m in models})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
