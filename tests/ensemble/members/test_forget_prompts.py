"""bench's whole answers start every run as a new question does (issue 37): on llama.cpp, whose contexts are handed
from run to run with the last prompt's cells, ``forget_prompts`` keeps only the template head, so the next run's
first pass reads the prompt again; its time is that run's prompt read (``ForwardStats.first_s``)."""

from __future__ import annotations

import pytest

from ensemble import models
from ensemble.members.factory import forget_prompts
from ensemble.methods import generate
from ensemble.settings import Settings

pytestmark = [pytest.mark.embedded, pytest.mark.llamacpp]

PROMPT = "Janet has 16 eggs a day. She eats three and bakes with four. How many eggs are left to sell each day?"


def first_pass(qwen) -> tuple[int, float | None]:
    from ensemble.methods import EnsembleRun

    job = EnsembleRun([qwen], PROMPT, "single", Settings(max_new_tokens=2))
    for _ in job.events():
        pass
    stats = job.adapters[0].stats
    return stats.first_tokens, stats.first_s


def test_forget_prompts_makes_the_next_run_read_its_prompt_again(llama_pool):
    qwen = llama_pool.get("qwen", models.quiet_progress)
    generate([qwen], PROMPT, "single", Settings(max_new_tokens=2))  # the kept context now holds this prompt
    reused, _ = first_pass(qwen)
    forget_prompts(qwen)
    read, seconds = first_pass(qwen)
    prompt, head = len(qwen.prompt_ids(PROMPT)), len(qwen.template_head())
    assert reused < prompt - head  # handed on: the prompt's cells were reused
    assert read >= prompt - head and seconds is not None and seconds > 0  # forgotten: read again past the head
    assert read < prompt  # the template head stays read
