"""Members on llama.cpp (issue 17): the embedded GGUF files as shipped, through ``llama-cpp-python``.

Parity is with llama.cpp's own greedy decoding (``llama_cpp.Llama.generate``), the cache with a fresh
evaluation, the tokenization with the transformers tokenizer of the same GGUF; and the methods' invariants
(one member = greedy, an identical copy never ensembles, the "Sofia" block) hold on this runtime and in
ensembles that mix both runtimes.
"""

from __future__ import annotations

import os

import pytest
import torch

from ensemble import models
from ensemble.errors import ModelLoadError
from ensemble.members import new_runtime, warm
from ensemble.members.local import LOCAL, SEQUENTIAL, THREADS
from ensemble.methods import EnsembleRun, generate
from ensemble.settings import Settings

_STARTED_WITH = dict(os.environ)  # this process's environment before any model loaded

PROMPT = "Sofia went to Plovdiv in 1999. Where did Sofia go, and when? Answer in one sentence that starts with her name."


def _single_text(model, n, prompt=PROMPT):
    return generate([model], prompt, "single", Settings(max_new_tokens=n, stop_strings=[])).text

pytestmark = [pytest.mark.embedded, pytest.mark.llamacpp]

GSM8K = (
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her friends "
    "every day with four. She sells the remainder at the farmers' market daily for $2 per fresh duck egg. How much in "
    "dollars does she make every day at the farmers' market?"
)


@pytest.fixture(scope="module")
def llama(llama_pool) -> dict[str, models.LoadedModel]:
    return {name: llama_pool.get(name, models.quiet_progress) for name in models.EMBEDDED}


def _own_greedy(loaded: models.LoadedModel, prompt: str, n: int) -> list[int]:
    """llama.cpp's own greedy decoding of the same prompt ids (its high-level API, a context of its own)."""
    import llama_cpp
    import llama_cpp.llama_cpp as raw

    def no_repacking():  # as ensemble/models/gguf.py loads it: weight repacking crashes this llama.cpp build
        params = default()
        params.use_extra_bufts = False
        return params

    default, raw.llama_model_default_params = raw.llama_model_default_params, no_repacking
    try:
        llm = llama_cpp.Llama(model_path=loaded.model.path, n_ctx=2048, n_threads=1, verbose=False)
    finally:
        raw.llama_model_default_params = default
    out = []
    for token in llm.generate(loaded.prompt_ids(prompt), top_k=1, temp=0.0, reset=True):
        if token in loaded.keys.eos_ids or len(out) == n:
            break
        out.append(token)
    llm.close()
    return out


@pytest.mark.parametrize("name", ["qwen", "gemma3"])
def test_single_equals_llama_cpp_own_greedy(llama, name):
    model = llama[name]
    trace = generate([model], GSM8K, "single", Settings(max_new_tokens=40, stop_strings=[]))
    own = _own_greedy(model, GSM8K, len(trace.tokens))
    assert len(own) == len(trace.tokens) >= 30  # token for token, and a real answer, not an early stop
    assert trace.text == model.tokenizer.decode(own, clean_up_tokenization_spaces=False)


@pytest.mark.parametrize("method", ["safe", "unite", "gac", "specem"])
def test_every_method_with_one_llama_member_equals_its_greedy(llama, method):
    model = llama["qwen"]
    trace = generate([model], PROMPT, method, Settings(max_new_tokens=24, stop_strings=[]))
    assert trace.text == _single_text(model, 24)


def test_a_cut_back_cache_equals_a_fresh_evaluation(llama):
    model = llama["gemma3"]
    model.model.free_idle()  # contexts made afresh here (a kept one would start with an earlier test's cells)
    prompt = model.prompt_ids(GSM8K)
    answer = model.tokenizer("She has 16 - 3 - 4 = 9 eggs left, so she makes 9 * 2 = $18.", add_special_tokens=False)["input_ids"]
    full, p = prompt + answer, len(prompt)
    wanted = list(range(p - 1, len(full)))
    fresh = new_runtime(model).rows(full, wanted)
    reused = new_runtime(model)
    reused.rows(prompt + [236743, 236770, 236771], [p + 2])  # a different continuation, cut back to the prompt
    assert reused.rows(full, wanted).equal(reused.rows(full, wanted))
    cut = new_runtime(model)
    cut.rows(prompt + [236743], [p])
    rows = cut.rows(full, wanted)
    # the cache was cut back to the prompt less its last id (whose logits are wanted again), not emptied
    assert cut.cache_ids == full and cut.stats.tokens == (len(prompt) + 1) + (len(answer) + 1)
    # split into passes differently, the rows are the same bit for bit (flash attention off, see llamacpp.py)
    torch.testing.assert_close(rows, fresh, atol=0, rtol=0)


def test_a_run_reuses_the_last_runs_batched_cells_and_gets_the_fresh_rows(llama):
    """A context handed on from an ended run: the next run evaluates only what the two prompts do not share (at
    least SHARED_PASS tokens), reuses no cell a short pass wrote, and gets the rows of a fresh context bit for bit."""
    from ensemble.members.llamacpp import SHARED_PASS

    model = llama["qwen"]
    prompt = model.prompt_ids(GSM8K)
    other = model.prompt_ids(GSM8K.replace("16 eggs", "17 eggs"))
    shared = next(i for i, (a, b) in enumerate(zip(prompt, other)) if a != b)
    model.model.free_idle()
    fresh = new_runtime(model)
    assert not fresh.recycled
    expect = fresh.rows(other, [len(other) - 2, len(other) - 1])
    fresh.close()
    first = new_runtime(model)
    assert first.recycled  # the context fresh ended with
    first.rows(prompt, [len(prompt) - 1])
    more = list(range(11, 11 + SHARED_PASS))
    first.rows(prompt + more, [len(prompt) + SHARED_PASS - 1])  # a long pass: cells that can be handed on
    first.rows(prompt + more + [7, 8], [len(prompt) + SHARED_PASS + 1])  # a short pass: these cannot
    assert first.stats.tokens == max(SHARED_PASS, len(prompt) - shared) + SHARED_PASS + 2
    first.close()
    assert model.model.idle and model.model.idle[-1].reusable() == len(prompt) + SHARED_PASS
    second = new_runtime(model)
    rows = second.rows(other, [len(other) - 2, len(other) - 1])
    assert second.stats.tokens == len(other) - shared > SHARED_PASS  # the template head and the question's start kept
    torch.testing.assert_close(rows, expect, atol=0, rtol=0)
    second.close()
    again = new_runtime(model)  # the same prompt again: a long pass still evaluated, the rows unchanged
    assert again.rows(other, [len(other) - 1]).equal(expect[1:]) and again.stats.tokens == SHARED_PASS
    runtimes = [again, new_runtime(model), new_runtime(model)]
    for runtime in runtimes:
        runtime.close()
    assert len(model.model.idle) == 2  # at most IDLE_CONTEXTS are kept, the others freed


def test_warming_reads_the_template_head_that_the_first_run_then_skips(llama, llama_pool):
    from ensemble.members.llamacpp import SHARED_PASS

    model = llama["qwen"]
    for m in (model, llama["gemma3"]):
        m.model.free_idle()
    head = model.template_head()
    assert model.tokenizer.decode(head).endswith("<|im_start|>user\n") and len(head) >= SHARED_PASS
    assert warm(llama_pool, ["qwen", "gemma3"]) == []
    assert [c.ids for c in model.model.idle] == [head]
    assert llama["gemma3"].model.idle[-1].ids == []  # made, but gemma3's head ("<bos>Question:") is too short to reuse
    runtime = new_runtime(model)
    prompt = model.prompt_ids(GSM8K)
    runtime.rows(prompt, [len(prompt) - 1])
    assert runtime.stats.tokens == len(prompt) - len(head)
    runtime.close()


def test_runs_on_handed_on_contexts_equal_runs_on_fresh_ones(llama):
    members = [llama["qwen"], llama["smollm2"], llama["gemma3"]]
    settings = Settings(max_new_tokens=20, stop_strings=[])

    read: list[dict] = []

    def run(prompt):
        trace = generate(members, prompt, "safe", settings)
        read.append(trace.stats.forward_tokens)
        return trace.text, [(t.text, t.decision, t.details.get("mean_prob")) for t in trace.tokens]

    for m in members:
        m.model.free_idle()
    fresh = run(GSM8K)
    assert run(GSM8K) == fresh  # the prompt's cells reused, the drafted ones (one-token passes) not
    prompt = {m.name: len(m.prompt_ids(GSM8K)) for m in members}
    assert all(read[0][n] - read[1][n] >= prompt[n] - 16 for n in ("qwen", "smollm2"))  # a run did reuse the prompt
    run(PROMPT)
    assert run(GSM8K) == fresh


def test_one_token_passes_stay_within_the_kernels_tolerance(llama):
    """A one-token pass uses llama.cpp's vector kernels, a longer pass its matrix kernels: with Q4 weights and
    8-bit activations their logits differ by up to ~2 (of a 50-logit range); the chosen token must not."""
    model = llama["qwen"]
    prompt = model.prompt_ids(GSM8K)
    answer = model.tokenizer("She has 16 - 3 - 4 = 9 eggs left, so she makes 9 * 2 = $18.", add_special_tokens=False)["input_ids"]
    full, p = prompt + answer, len(prompt)
    batch = new_runtime(model).rows(full, list(range(p, len(full))))
    one = new_runtime(model)
    one.rows(full[:p], [p - 1])
    step = torch.stack([one.rows(full[: i + 1], [i])[0] for i in range(p, len(full))])
    assert (step - batch).abs().max() < 2.5
    assert (torch.softmax(step, -1) - torch.softmax(batch, -1)).abs().max() < 0.1
    assert (step.argmax(-1) == batch.argmax(-1)).float().mean() >= 0.9


def test_verify_in_line_equals_scoring_each_draft_alone(llama):
    model = llama["smollm2"]
    ctx = model.prompt_ids(PROMPT)
    blocks = [model.tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("Sofia went to", "She went to Plovdiv", "In 1999")]
    targets = [t for b in blocks for t in b[1:] + [b[0]]]
    runtime = new_runtime(model)
    runtime.rows(ctx, [len(ctx) - 1])
    inline = runtime.branch_scores(len(ctx), blocks, targets)
    assert runtime.cache_ids == ctx  # the drafts' cells are gone again
    at = 0
    for block in blocks:
        alone = new_runtime(model)
        alone.rows(ctx, [len(ctx) - 1])
        rows = alone.rows(ctx + block, range(len(ctx), len(ctx) + len(block)))
        tgt = torch.tensor(targets[at : at + len(block)])[:, None]
        expect = torch.stack([torch.log_softmax(rows, -1).gather(1, tgt)[:, 0], rows.gather(1, tgt)[:, 0]])
        torch.testing.assert_close(inline[:, at : at + len(block)], expect, atol=1e-4, rtol=1e-4)
        at += len(block)


def test_identical_copy_under_safe_never_ensembles(llama):
    model = llama["qwen"]
    safe = generate([model, model], PROMPT, "safe", Settings(max_new_tokens=24, stop_strings=[]))
    assert safe.text == _single_text(model, 24)
    assert safe.stats.et_ratio == 0.0


def test_sofia_split_blocks_fusion_on_llama_cpp(llama):
    trace = generate([llama["smollm2"], llama["gemma3"]], PROMPT, "safe", Settings(max_new_tokens=12))
    assert trace.text.startswith("Sofia")
    by_start = {t.start: t for t in trace.tokens}
    for start, piece in ((1, "of"), (3, "ia")):
        assert by_start[start].text == piece and by_start[start].decision == "oov_blocked"
        assert by_start[start].details["blocked_by"] == ["gemma3"]


@pytest.mark.parametrize("method", ["safe", "unite", "specem"])
def test_mixed_runtimes_make_one_ensemble(llama, embedded, method):
    """qwen and gemma3 on llama.cpp, smollm2 on transformers: every method runs to its budget and its OOV
    decisions, which depend on the tokenizers only, equal those of the all-transformers ensemble."""
    mixed = [llama["qwen"], embedded["smollm2"], llama["gemma3"]]
    settings = Settings(max_new_tokens=16, stop_strings=[])
    job = EnsembleRun(mixed, PROMPT, method, settings)
    assert job.backend is LOCAL  # a transformers member holds the GIL: members take turns
    for _ in job.events():
        pass
    trace = job.trace
    assert trace.stats.stop_reason in ("budget", "eos") and trace.text.strip()
    assert [m["runtime"] for m in trace.model_info.values()] == ["llamacpp", "transformers", "llamacpp"]
    if method == "safe":
        sofia = generate([embedded["smollm2"], llama["gemma3"]], PROMPT, "safe", Settings(max_new_tokens=12))
        assert [t.decision for t in sofia.tokens[:3]][1:] == ["oov_blocked", "oov_blocked"]


@pytest.mark.parametrize("method", ["safe", "specem"])
@pytest.mark.concurrency
def test_llama_members_compute_in_threads_with_the_same_output(llama, method):
    members = [llama["qwen"], llama["smollm2"], llama["gemma3"]]
    settings = Settings(max_new_tokens=24, stop_strings=[])
    default = EnsembleRun(members, GSM8K, method, settings)
    # members compute at once in threads only where each keeps 2 cores (SpecEM included: measured slower in threads
    # on 2 cores, LocalBackend.for_run)
    threads_by_default = (os.cpu_count() or 1) >= 2 * len(members)
    assert (default.backend is THREADS) == threads_by_default
    runs = {}
    for label, backend in (("threads", THREADS), ("turns", SEQUENTIAL)):
        job = EnsembleRun(members, GSM8K, method, settings, backend=backend)
        assert job.backend is backend
        for _ in job.events():
            pass
        runs[label] = job.trace
    assert runs["threads"].text == runs["turns"].text
    assert [t.decision for t in runs["threads"].tokens] == [t.decision for t in runs["turns"].tokens]
    # the member threads end with their calls: a thread that lives on keeps its OpenMP pool, and more pooled threads
    # than cores throttle every later pass of the process (ensemble.members.base.Pooled)
    import threading

    assert not [t.name for t in threading.enumerate() if t.name.startswith("member")]


def test_a_tokenizer_that_disagrees_with_llama_cpp_is_refused(llama, monkeypatch):
    from ensemble.models import gguf

    weights = llama["smollm2"].model
    monkeypatch.setattr(weights, "tokenize", lambda text, special=False: [1, 2, 3])
    with pytest.raises(ModelLoadError, match=r"tokenize .* differently"):
        gguf.check_tokenizer(weights, llama["smollm2"].tokenizer, "smollm2")


def test_runtime_names_and_errors(llama_pool):
    from ensemble.models.runtimes import pick_runtime, split_runtime

    assert split_runtime("qwen@llamacpp") == ("qwen", "llamacpp")
    assert split_runtime("org/model@v2") == ("org/model@v2", None)
    assert pick_runtime(models.resolve("HuggingFaceTB/SmolLM2-135M-Instruct"), "auto") == "transformers"
    assert pick_runtime(models.resolve("qwen"), "auto", "cuda:0") == "transformers"
    with pytest.raises(ModelLoadError, match="hub model"):
        models.load("HuggingFaceTB/SmolLM2-135M-Instruct", runtime="llamacpp")
    assert llama_pool.get("qwen@llamacpp") is llama_pool.get("qwen")


@pytest.mark.slow
def test_llama_members_in_ray_actors_give_the_in_process_output(llama):
    """A llama.cpp member inside a Ray actor (it loads the GGUF by name in its own process) computes what the
    same member computes here."""
    from ensemble.members import make_backend

    members = [llama["smollm2"], llama["gemma3"]]
    backend = make_backend("ray", threads=1)
    try:
        for method, settings in (("safe", Settings(max_new_tokens=20, stop_strings=[], lookahead=4)),
                                 ("specem", Settings(max_new_tokens=16, stop_strings=[]))):
            remote = generate(members, PROMPT, method, settings, backend=backend)
            local = generate(members, PROMPT, method, settings)
            assert remote.error is None and remote.text == local.text
            assert [t.decision for t in remote.tokens] == [t.decision for t in local.tokens]
        # OpenMP's wait policy: this process keeps the one it started with (an earlier version set PASSIVE here,
        # which Ray's members then inherited on a cluster too); members sharing this machine get PASSIVE on purpose,
        # unless the user chose a policy (docs/results.md, "Member backends")
        import psutil

        assert os.environ.get("OMP_WAIT_POLICY") == _STARTED_WITH.get("OMP_WAIT_POLICY")
        wanted = _STARTED_WITH.get("OMP_WAIT_POLICY", "PASSIVE")
        for info in backend.member_info().values():
            assert psutil.Process(info["pid"]).environ().get("OMP_WAIT_POLICY") == wanted
    finally:
        backend.close()


def test_the_app_applies_its_runtime_choice_to_the_model_names(monkeypatch):
    from ensemble.errors import EnsembleError
    from ui import config

    monkeypatch.setattr(config, "RUNTIME", "auto")
    monkeypatch.setattr(config, "RUNTIME_CHOICES", ["auto", "transformers", "llamacpp"])
    assert config.offered(["qwen", "gemma3"], "llamacpp") == ["qwen@llamacpp", "gemma3@llamacpp"]
    assert config.offered("qwen@transformers, smollm2", "llamacpp") == ["qwen@transformers", "smollm2@llamacpp"]
    assert config.offered(["qwen"], "auto") == ["qwen"]  # the server's own choice: the pool's setting
    with pytest.raises(EnsembleError, match="Unknown runtime"):
        config.offered(["qwen"], "onnx")
    monkeypatch.setattr(config, "RUNTIME_CHOICES", ["auto", "transformers"])
    with pytest.raises(EnsembleError, match="llama-cpp-python is not installed"):
        config.offered(["qwen"], "llamacpp")


@pytest.mark.concurrency
def test_stop_while_llama_members_compute_in_threads_ends_cleanly(llama):
    """Stop during SpecEM's drafts (three llama.cpp contexts busy in threads): the run ends as cancelled with a
    valid trace, and closing the contexts waits for the passes in flight instead of freeing them under a thread."""
    import threading

    from ensemble.methods import StatusEvent

    cancel = threading.Event()
    job = EnsembleRun([llama["qwen"], llama["smollm2"], llama["gemma3"]], GSM8K, "specem",
                      Settings(max_new_tokens=64, stop_strings=[]), cancel=cancel, backend=THREADS)
    assert job.backend is THREADS
    for event in job.events():
        if isinstance(event, StatusEvent):
            cancel.set()  # the first draft is in: the other members are still drafting
    assert job.trace.stats.stop_reason == "cancelled"
    assert all(a.runtime._closed for a in job.adapters)
    again = generate([llama["qwen"], llama["smollm2"]], PROMPT, "specem", Settings(max_new_tokens=8, stop_strings=[]))
    assert again.text.strip()  # the shared weights serve the next run
