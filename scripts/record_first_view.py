"""Record the run the app replays on load (``assets/first-view.json``): its first example, as the app would run it.

    python scripts/record_first_view.py [--runtime auto|transformers|llamacpp]

The app's first example (``ui.tabs.EXAMPLES[0]``: its prompt, method and models) at the engine settings' starting
values, on the embedded models. Rerun it after a change that alters what a run records; the app labels
the replay as a recorded run with the date stored here (and the runtime a live run uses where it is served), and ``tests/ui/test_first_view.py`` checks that
the file still matches the app's first example and defaults.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from ensemble.methods import generate
    from ensemble.models import ModelPool, quiet_progress
    from ui.controls import control_names, initial_value, settings_from_controls
    from ui.tabs import EXAMPLES, FIRST_VIEW

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", default="auto")
    args = parser.parse_args()
    prompt, method, names = EXAMPLES[0]
    settings = settings_from_controls({name: initial_value(name) for name in control_names()})
    pool = ModelPool(runtime=args.runtime)
    models = pool.get_many(names, quiet_progress)
    trace = generate(models, prompt, method, settings)
    FIRST_VIEW.write_text(trace.to_json(indent=1) + "\n", encoding="utf-8")
    s = trace.stats
    print(f"{FIRST_VIEW.relative_to(ROOT)}: {method} on {', '.join(trace.models)}, {s.generated_tokens} tokens, "
          f"decisions {s.decisions}, runtimes {sorted({m.runtime for m in models})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
