"""How do SpecEM's Hedge rewards and weights behave on real prompts? (Issue 14, item 3.)

Runs SpecEM on GSM8K questions (evaluate's prompt, 128 new tokens) with the feedback off, records every
round's rewards and winner, then replays the Hedge update of ``ensemble.methods.specem`` on those rewards for
several eta0 (the rewards depend on the verifiers' scores only, not on the weights). With ``--live ETA`` it
also runs SpecEM with that eta0, where the weights do steer the vote, and prints its wins and weights.

    python scripts/specem_feedback_probe.py --limit 3 [--live 4] [--data path/to/gsm8k.jsonl]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ensemble.evaluation import GSM8K_TEST, build_prompt, load_questions, select_questions
from ensemble.methods import generate
from ensemble.methods.specem import hedge_update
from ensemble.models import ModelPool, quiet_progress
from ensemble.settings import Settings

ETAS = (0.5, 1.0, 2.0, 4.0, 8.0)


def _fmt(weights: dict[str, float]) -> str:
    return " ".join(f"{m} {w:.3f}" for m, w in weights.items())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", default=str(GSM8K_TEST))
    p.add_argument("--limit", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--live", type=float, default=None)
    args = p.parse_args()
    pool = ModelPool()
    models = [pool.get(n, quiet_progress) for n in ("qwen", "smollm2", "gemma3")]
    names = [m.name for m in models]
    questions = select_questions(load_questions(args.data), args.limit, args.seed)
    finals: dict[float, list[dict[str, float]]] = {eta: [] for eta in ETAS}
    for q in questions:
        trace = generate(models, build_prompt(q.question), "specem", Settings(max_new_tokens=args.tokens, eta=0.0))
        rounds = [r for r in trace.rounds if r.rewards]
        wins = {n: sum(r.winner == n for r in trace.rounds) for n in names}
        mean_reward = {n: sum(r.rewards.get(n, 0.0) for r in rounds) / max(len(rounds), 1) for n in names}
        print(f"question {q.qid}: {len(trace.rounds)} rounds, {trace.stats.generated_tokens} tokens; wins {wins}")
        print(f"  mean reward {_fmt(mean_reward)}")
        for eta in ETAS:
            w = {n: 1.0 / len(names) for n in names}
            for t, r in enumerate(rounds, 1):
                w = hedge_update(w, r.rewards, eta, t, len(r.candidates))
            finals[eta].append(w)
            print(f"  eta0 {eta:>4}: final weights {_fmt(w)}")
        if args.live is not None:
            live = generate(models, build_prompt(q.question), "specem", Settings(max_new_tokens=args.tokens, eta=args.live))
            wins = {n: sum(r.winner == n for r in live.rounds) for n in names}
            print(f"  live eta0 {args.live}: wins {wins}; final weights {_fmt(live.rounds[-1].weights_after)}")
    for eta in ETAS:
        mean = {n: sum(w[n] for w in finals[eta]) / len(finals[eta]) for n in names}
        print(f"mean final weights at eta0 {eta}: {_fmt(mean)}")


if __name__ == "__main__":
    main()
