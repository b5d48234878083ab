"""Links: the form written into a URL and read back, with whatever a URL holds treated as untrusted."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from ui.controls import control_names, initial_value
from ui.links import MAX_LINK_TEXT, form_from_query, link_query

CHOICES = ["qwen", "smollm2", "gemma3"]


def test_a_link_round_trips_the_form_and_names_only_changed_settings():
    controls = {name: initial_value(name) for name in control_names()} | {"lookahead": 3, "sharpen": "geometric",
                                                                          "sample_drafts": True, "gac_gate": 0}
    query = link_query("run", "Sofia & <b>Plovdiv</b> 🇧🇬", "safe", ["gemma3", "qwen"], controls)
    params = dict(parse_qsl(urlsplit(query).query))
    assert set(params) == {"tab", "prompt", "method", "models", "lookahead", "sharpen", "sample_drafts", "gac_gate"}
    form = form_from_query(params, CHOICES)
    assert form["prompt"] == "Sofia & <b>Plovdiv</b> 🇧🇬" and form["method"] == "safe" and form["models"] == ["gemma3", "qwen"]
    assert form["settings"] == {"lookahead": 3, "sharpen": "geometric", "sample_drafts": True, "gac_gate": 0}


def test_what_a_link_holds_wrongly_is_ignored():
    form = form_from_query({"tab": "admin", "method": "magic", "models": "qwen,../etc,nobody,qwen", "lookahead": "999",
                            "top_p": "nan-ish", "sharpen": "<script>", "prompt": "x" * (MAX_LINK_TEXT + 1),
                            "text": "   ", "temperature": "0.5", "unknown": "1"}, CHOICES)
    assert form == {"models": ["qwen"], "settings": {"temperature": 0.5}}
