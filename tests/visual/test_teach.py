"""Issue 28: what a teacher and a researcher read. The blocked verifier's row at a round's first token, one E/T
format, labels of the decisions a method can produce, plain first sentences, the CLI's legend and caret line."""

from __future__ import annotations

import pytest

import visual
from ensemble.methods import generate
from ensemble.settings import Settings
from tests.conftest import FIXTURES, ROOT

GERMAN = "Franz fuhr nach Frankfurt und dann nach Bremen."


@pytest.fixture(scope="module")
def blocked_run(tiny):
    """SAFE with gemma3 drafting and qwen verifying, short rounds: many draft tokens start inside one of qwen's
    tokens that began before the round (its "Fra" over a committed "F" and a drafted "ra")."""
    return generate([tiny["gemma3"], tiny["qwen"]], GERMAN, "safe", Settings(max_new_tokens=24, stop_strings=[], lookahead=3))


def test_a_blocked_verifier_has_its_row_where_its_token_starts_before_the_round(blocked_run):
    trace = blocked_run
    blocked = [t for t in trace.tokens if t.decision == "oov_blocked" and t.condition == "misaligned"]
    assert blocked
    for record in blocked:
        assert set(record.details.verifier_from) == set(record.details.blocked_by), record.index
        assert list(record.details.per_model_top) == ["tiny-gemma3", "tiny-qwen"]
    # the case the issue saw: the first token of a round, whose verifier token started in an earlier round
    starts = {r.start for r in trace.rounds}
    first = [t for t in blocked if t.start in starts and t.details.verifier_from["tiny-qwen"] < t.start]
    assert first, "no blocked round-opening token in this run"
    record = first[0]
    text = visual.explain(trace, record.index)
    assert "Where its own token starts" in text and "tiny-qwen" in text
    fig = visual.topk_figure(trace, record.index)
    assert [a.text for a in fig.layout.annotations][:2] == ["tiny-gemma3", "tiny-qwen"]


BULGARIAN_PROMPT = "Какво прави тя?"
BULGARIAN = "Тя пее песен."
"""" пее" (sings) in the real tokenizers: gemma3 " пе|е", qwen " п|ее", smollm2 " п|е|е"."""


def test_a_bulgarian_blocked_token_shows_the_blocked_verifiers_panel(tiny):
    """Item 6's "ее": gemma3 drafts " пе" and then "е", the first token of a round; qwen has no edge there (its "ее"
    began in the round before) while smollm2 has one. The inspector shows qwen's panel, read where its "ее" starts,
    beside the drafter's and smollm2's, and says what qwen wanted; the models are scripted to write the sentence."""
    from tests.conftest import scripted_model

    cuts = {name: [tiny[name].keys.key(i) for i in tiny[name].keys.encode(" пее")] for name in ("gemma3", "qwen", "smollm2")}
    assert cuts == {"gemma3": [" пе", "е"], "qwen": [" п", "ее"], "smollm2": [" п", "е", "е"]}
    members = [scripted_model(tiny[name], f"tiny-{name}", BULGARIAN, BULGARIAN_PROMPT)[0] for name in ("gemma3", "qwen", "smollm2")]
    trace = generate(members, BULGARIAN_PROMPT, "safe", Settings(max_new_tokens=12, stop_strings=[], lookahead=3))
    assert trace.text == BULGARIAN
    at = BULGARIAN.index("пее") + 2  # the second "е"
    record = next(t for t in trace.tokens if t.start == at)
    assert (record.text, record.decision, record.condition) == ("е", "oov_blocked", "misaligned")
    assert record.details.blocked_by == ["tiny-qwen"] and record.start in {r.start for r in trace.rounds}
    # qwen's row where its "ее" starts, in the round before; smollm2's at the boundary itself
    assert record.details.verifier_from == {"tiny-qwen": at - 1, "tiny-smollm2": at}
    assert record.details.verifier_tokens == {"tiny-qwen": "ее", "tiny-smollm2": "е"}
    assert list(record.details.per_model_top) == ["tiny-gemma3", "tiny-qwen", "tiny-smollm2"]
    fig = visual.topk_figure(trace, record.index)
    assert [a.text for a in fig.layout.annotations][:3] == ["tiny-gemma3", "tiny-qwen", "tiny-smollm2"]
    text = visual.explain_text(trace, record.index)
    assert "tiny-qwen cuts the text differently here" in text
    assert "Where its own token starts (character 4), tiny-qwen's top choice is ее" in text
    assert "tiny-smollm2 has a token edge here too" in text


def test_a_forced_key_is_the_forks_first_token_and_the_method_goes_on(tiny, blocked_run):
    """"What if it had chosen this?": a key that is no token of the drafter, put at token N as text; every model
    re-syncs and SAFE continues with the run's models and settings."""
    from ensemble.fork import check_force, compare_continuations, fork_method_for, run_fork
    from ensemble.trace import RunTrace

    trace, at, force = blocked_run, 5, " Zugspitzbahnhof"
    assert tiny["gemma3"].keys.encode(force) != [] and len(tiny["gemma3"].keys.encode(force)) > 1  # not one token
    method = fork_method_for(trace, None, force)
    assert method == "safe"
    forked, comparison = run_fork([tiny["gemma3"], tiny["qwen"]], trace, at, method, force=force)
    chars = trace.tokens[at].start
    assert forked.fork == {"at": at, "chars": chars, "method": "safe", "models": trace.models, "force": force}
    first = forked.tokens[0]
    assert (first.text, first.start, first.end) == (force, chars, chars + len(force)) and first.details.forced
    assert forked.text[chars:].startswith(force) and len(forked.tokens) > 3  # the method went on after it
    assert forked.method == "safe" and forked.models == trace.models and forked.settings["lookahead"] == 3
    assert {t.decision for t in forked.tokens[1:]} - {"drafter"}  # SAFE's decisions, not a plain continuation
    assert comparison.forked.startswith(force) and comparison.divergence == 0
    RunTrace.from_json(forked.to_json())  # the checks an uploaded trace passes
    html = visual.fork_html(trace, forked, compare_continuations(trace, forked).to_dict())
    assert "forced there" in html and "Zugspitzbahnhof" in html and "They differ from their first character" in html
    assert "You chose" in visual.explain(forked, 0)
    for bad, message in (("<eos>", "stop"), ("<0xE4>", "byte"), ("x" * 300, "at most")):
        with pytest.raises(Exception, match=message):
            check_force(bad)


def test_parting_sentences_count_in_words():
    from visual.forks import parting_sentence

    assert parting_sentence(0, 16).startswith("They differ from their first character; 16 stretches of words differ")
    assert parting_sentence(1, 1).startswith("They part after 1 character of the continuation; 1 stretch of words differs")
    assert "(s)" not in parting_sentence(12, 2) and "12 characters" in parting_sentence(12, 2)


def _fixture(name: str):

    from ensemble.trace import RunTrace

    return RunTrace.from_json((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def test_the_legend_lists_only_what_this_run_can_produce_and_the_end_only_when_it_ended():
    import re

    def classes(html):
        return re.findall(r'el-swatch ([\w ]+)"', html)

    safe = _fixture("safe")
    safe.settings.update(fusion="unite", gac_gate=0.5)  # SAFE-UniTE: no gate
    assert "gated" not in classes(visual.trace_legend(safe))
    safe.settings["fusion"] = "gac"
    assert "gated" in classes(visual.trace_legend(safe))
    gac = _fixture("gac")
    gac.settings["gac_gate"] = None
    assert classes(visual.trace_legend(gac)) == ["fused"]
    budget = _fixture("safe_math")
    assert budget.stats.stop_reason != "eos" and "ended by itself" not in visual.trace_legend(budget)
    assert "ended by itself" not in visual.compare_html({"a": budget})
    from ensemble.trace import Decision, TokenRecord

    ended = _fixture("single")
    n = len(ended.text)
    ended.tokens.append(TokenRecord(index=len(ended.tokens), text="<eos>", start=n, end=n, model=ended.models[0],
                                    decision=Decision.DRAFTER))
    assert "ended by itself" in visual.trace_legend(ended)


def test_one_format_for_e_t_and_specem_says_it_votes():
    from ensemble.trace.readable import et_text

    assert et_text(0.12, "safe") == "12.0%" and et_text(0.0938, "unite") == "9.4%" and et_text(None, "safe") == "–"
    assert et_text(0.0, "specem", 3) == "votes on every segment (3 rounds)"
    assert et_text(0.0, "specem", 1) == "votes on every segment (1 round)"
    for name in ("safe", "specem"):
        trace = _fixture(name)
        expected = et_text(trace.stats.et_ratio, trace.method, trace.stats.rounds)
        assert expected in visual.stats_html(trace) and expected in visual.compare_frame({name: trace}).to_string()


def test_an_ensembled_token_opens_with_one_plain_sentence():
    import re

    math = _fixture("safe_math")
    replaced = next(r for r in math.tokens if r.decision == "ensembled_replaced")
    html = visual.explain(math, replaced.index)
    first = re.sub(r"<[^>]+>", "", re.findall(r"<p>(.*?)</p>", html)[1])
    assert first.startswith("The models disagreed, so they voted: their weighted average picked ")
    assert "which replaced the drafter's" in first and not re.search(r"\d", first)  # the numbers come below
    assert "Why a vote:" in html and "≤ 0.5" in html


def _first_sentence(html: str) -> str:
    """The explanation's first sentence as read: its first paragraph after the header, tags dropped and every quoted
    key (``el-key``: a model's token, which may hold digits or signs) replaced by "KEY"."""
    import html as entities
    import re

    body = re.findall(r"<p>(.*?)</p>", html)[1]
    return entities.unescape(re.sub(r"<[^>]+>", "", re.sub(r'<code class="el-key">.*?</code>', "KEY", body)))


PLAIN_STARTS = ("The ", "All ", "Not every ", "This ", "You ", "A ", "Part ")


def _plain(sentence: str, models: list[str]) -> bool:
    """One sentence in plain words: it starts with a model's name or a plain opening, holds no digit (no probability,
    score, round or character number), no comparison sign, no 'probability', and ends at its only full stop."""
    import re

    words = re.sub("|".join(re.escape(m) for m in sorted(models, key=len, reverse=True)), "MODEL", sentence)
    return (words.startswith(PLAIN_STARTS + ("MODEL ", "MODEL's "))
            and not re.search(r"[0-9=≤≥<>]", words) and "probability" not in words
            and sentence.endswith(".") and ". " not in sentence[:-1] and len(sentence.split()) <= 40)


def test_plain_check_tells_numbers_from_words():
    assert _plain("All models agree with the draft KEY, so it was accepted without a vote.", ["qwen"])
    assert not _plain("qwen wrote KEY on its own (probability 0.82).", ["qwen"])
    assert not _plain("Why a vote: the mean probability 0.22 ≤ 0.5.", ["qwen"])
    assert not _plain("GaC's gate: the primary model qwen puts KEY above the gate.", ["qwen"])
    assert not _plain("Round 3: every drafting model proposed a segment.", ["qwen"])
    assert not _plain("qwen wrote KEY. Then more.", ["qwen"])
    assert _plain("gemma3 cuts the text differently here, so smollm2's token KEY was kept.", ["smollm2", "gemma3"])


def _variants():
    """Every decision the inspector explains, in every form: each token of the six recorded runs, and each end of
    the answer, a blocked token inside a character, a forced key, a finishing byte token and a control token."""
    import copy

    from ensemble.trace import Decision

    out = []
    for name in ("safe", "safe_math", "gac", "unite", "specem", "single"):
        trace = _fixture(name)
        out += [(trace, r.index) for r in trace.tokens]
        firsts = {}
        for record in trace.tokens:
            firsts.setdefault((record.decision, record.condition), record)
        ended = _fixture(name)
        for like in firsts.values():  # the same decisions once more, as the end of the answer
            record = copy.deepcopy(like)
            record.index, record.text, record.start, record.end = len(ended.tokens), "<eos>", len(ended.text), len(ended.text)
            if record.fusion is not None:
                record.fusion.choice = "<eos>"
            if record.decision == Decision.OOV_BLOCKED:
                record.details["boundary"] = len(ended.text)
            if record.decision in (Decision.DRAFTER, Decision.GATED):
                record.topk = [["<eos>", 0.7], [" And", 0.2]]
            ended.tokens.append(record)
            out.append((ended, record.index))
            ended = _fixture(name)
    safe = _fixture("safe")
    blocked = next(r for r in safe.tokens if r.decision == "oov_blocked")
    blocked.condition, blocked.details["boundary"] = "inside_character", None
    out.append((safe, blocked.index))
    single = _fixture("single")
    single.tokens[1].details["forced"] = True
    single.tokens[2].condition = "completes_character"
    single.tokens[3].details["control_token"] = True
    out += [(single, 1), (single, 2), (single, 3)]
    return out


def test_every_explanation_opens_with_one_plain_sentence():
    """Deliver 5: whatever decided a token, its explanation starts with one sentence in plain words, the numbers
    (probabilities, means, gates, scores) below it."""
    seen, bad = set(), []
    for trace, index in _variants():
        record = trace.tokens[index]
        seen.add(record.decision)
        sentence = _first_sentence(visual.explain(trace, index))
        if not _plain(sentence, trace.models):
            bad.append((trace.method, record.decision, record.condition, index, sentence))
    assert not bad, bad
    from ensemble.trace import Decision

    assert seen == set(Decision)  # every decision kind was read


def test_sharpening_says_why_a_prefix_beats_the_draft():
    from ensemble.trace import FusionRecord
    from visual.inspector import _sharpening

    fusion = FusionRecord(fusion="unite", choice=" F", draft=" Fra", before=[[" Fra", 0.4], [" F", 0.2]],
                          after=[[" F", 0.6], [" Fra", 0.3]], sharpened=True, sharpen="heuristic", boundary=3,
                          weights={}, per_model={})
    text = _sharpening(fusion)
    assert "Why a prefix wins" in text and "can still go on to" in text


def test_what_if_keys_are_the_top_k_but_the_chosen_one_and_escaped():
    from ensemble.trace import Decision, TokenRecord

    trace = _fixture("single")
    record = trace.tokens[3]
    record.topk = [[record.text, 0.5], ["<b>x</b>", 0.2], ["<eos>", 0.1], ["<0xE4>", 0.05], [" other", 0.1]]
    assert isinstance(record, TokenRecord) and record.decision == Decision.DRAFTER
    html = visual.whatif_html(trace, 3)
    keys = __import__("re").findall(r'data-key="([^"]*)"', html)
    assert keys == ["&lt;b&gt;x&lt;/b&gt;", " other"] and "<b>x" not in html
    assert "forks at token #3" in html and visual.whatif_html(trace, 999) == ""


def test_the_cli_speaks_words_a_legend_and_carets():
    from ensemble.cli.generate import legend_line
    from ensemble.trace.readable import caret_lines, decisions_text

    assert decisions_text({"consensus": 30, "oov_blocked": 4}) == "consensus 30, blocked: tokenizer mismatch 4"
    line = legend_line("safe", {"fusion": "unite", "gac_gate": 0.5})
    assert "blocked: tokenizer mismatch" in line and "GaC gate" not in line and "plain: drafter only" in line
    lines = caret_lines("Sofia 東京 went", {"smollm2": [1, 3], "gemma3": [7]})
    assert lines[0].endswith("Sofia 東京 went")
    assert lines[1].endswith("  ^ ^") and lines[1].startswith("smollm2")
    start = len(lines[0]) - len("Sofia 東京 went")
    assert lines[2].index("^") == start + 6 + 2  # after the two columns of the wide 東
    assert caret_lines("a\nb", {"m": [2]})[0].endswith("a↵b")


def test_links_carry_the_tokenizers_tab_projector_mode_and_the_ids_switch():
    from urllib.parse import parse_qsl, urlsplit

    from ui import links

    query = links.tokenizer_query("Franz 🇩🇪 <b>", ["gemma3", "qwen"], ids=True, show_whitespace=False, large=True)
    params = dict(parse_qsl(urlsplit(query).query))
    asked = links.form_from_query(params, ["qwen", "smollm2", "gemma3"])
    assert asked["tab"] == "tokenizers" and asked["text"] == "Franz 🇩🇪 <b>" and asked["tok_models"] == ["gemma3", "qwen"]
    assert (asked["ids"], asked["ws"], asked["large"]) == (True, False, True)
    plain = links.form_from_query(dict(parse_qsl(urlsplit(links.tokenizer_query("x", [])).query)), ["qwen"])
    assert "ids" not in plain and "ws" not in plain and "large" not in plain and "tok_models" not in plain
    run = dict(parse_qsl(urlsplit(links.link_query("run", "p", "safe", ["qwen"], {}, large=True)).query))
    assert links.form_from_query(run, ["qwen"])["large"] is True
    bad = links.form_from_query({"large": "maybe", "ids": "1", "tok_models": "nobody"}, ["qwen"])
    assert not {"large", "ids", "tok_models"} & set(bad)


@pytest.mark.embedded
def test_fork_force_on_the_command_line_and_the_api(embedded, app_url, tmp_path):
    import json
    import os
    import subprocess
    import sys

    from gradio_client import Client

    from ensemble.trace import RunTrace

    trace = generate([embedded["smollm2"]], GERMAN, "single", Settings(max_new_tokens=10, stop_strings=[]))
    saved = tmp_path / "run.json"
    saved.write_text(trace.to_json(), encoding="utf-8")
    root = ROOT
    env = dict(os.environ, PYTHONPATH=str(root), ENSEMBLE_LENS_RUNTIME="transformers")
    done = subprocess.run([sys.executable, "-m", "ensemble", "fork", str(saved), "--at", "2", "--force", " Zebra",
                           "--max-new-tokens", "4", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    forked = RunTrace.from_dict(json.loads(done.stdout)["fork"])
    assert forked.tokens[0].text == " Zebra" and forked.fork["force"] == " Zebra" and forked.method == "single"
    assert forked.text.startswith(trace.text[: trace.tokens[2].start] + " Zebra") and len(forked.tokens) > 1
    refused = subprocess.run([sys.executable, "-m", "ensemble", "fork", str(saved), "--at", "2", "--force", "<0xE4>"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "byte token" in refused.stderr and "Traceback" not in refused.stderr
    result = Client(app_url, verbose=False).predict(trace=trace.to_dict(), at=2, method="", force=" Zebra", api_name="/fork")
    api = RunTrace.from_dict(result["fork"])
    assert api.tokens[0].text == " Zebra" and api.method == "single" and result["comparison"]["forked"].startswith(" Zebra")


@pytest.mark.embedded
def test_tokenize_prints_missing_edges_as_carets(tmp_path):
    import os
    import subprocess
    import sys

    root = ROOT
    done = subprocess.run([sys.executable, "-m", "ensemble", "tokenize", "Sofia went to Plovdiv", "--models", "smollm2,gemma3"],
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    text_line = next(i for i, line in enumerate(lines) if line.endswith("Sofia went to Plovdiv"))
    start = len(lines[text_line]) - len("Sofia went to Plovdiv")
    carets = {name: [i - start for i, c in enumerate(line) if c == "^"] for name, line in
              (line.split(" ", 1)[0:1] + [line] for line in lines[text_line + 1:]) if "^" in line}
    assert 1 in carets["gemma3"] and 3 in carets["gemma3"]  # S|of|ia: gemma3 keeps Sofia whole
