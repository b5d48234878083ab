"""Colours, labels, the app's stylesheet and the legend.

The palette is Okabe-Ito (distinguishable with the common colour-vision deficiencies). Decisions are also
told apart by the style of their underline, so colour is never the only cue. Backgrounds are translucent
tints, so text keeps the theme's own colour on light and dark themes alike.
"""

from __future__ import annotations

from ensemble.capabilities import is_segments
from ensemble.trace.readable import method_decisions

from .escape import safe

# decision -> (solid colour, underline style, short label, one-line description)
DECISION_STYLE: dict[str, tuple[str, str, str, str]] = {
    "drafter": ("#8C8C8C", "dotted", "drafter only", "the drafter's (or single model's) own token, nothing checked"),
    "consensus": ("#56B4E9", "solid", "consensus", "the verifiers agree with the draft (unanimous or confident): no fusion"),
    "oov_blocked": ("#E69F00", "dashed", "blocked: tokenizer mismatch", "a verifier has no token edge here: fusing would feed it a prefix it never produces"),
    "ensembled_kept": ("#009E73", "solid", "ensembled, draft kept", "the models disagreed, were fused, and the fused choice is the draft token"),
    "ensembled_replaced": ("#D55E00", "double", "ensembled, draft replaced", "the models disagreed and the fused choice replaced the draft token"),
    "fused": ("#CC79A7", "solid", "fused (every token)", "every-token fusion (UniTE / GaC) chose this token"),
    "gated": ("#0072B2", "dotted", "main model sure: no vote (GaC gate)", "the main model's top probability is at or above GaC's gate: no fusion"),
    "segment": ("#999999", "solid", "SpecEM segment", "part of the winning segment of a round"),
}
DECISION_LABELS = {d: style[2] for d, style in DECISION_STYLE.items()}
# SAFE's consensus has two conditions, drawn apart (class ``confident`` beside ``consensus``): a unanimous
# consensus is the verifiers agreeing; a confident one is only their weighted mean, which may hide a verifier
# that wanted something else.
CONSENSUS_KINDS: dict[str, tuple[str, str, str]] = {
    "unanimous": ("consensus", "consensus: unanimous", "every verifier's top choice is the draft token: no fusion"),
    "confident": ("consensus confident", "consensus: confident on average",
                  "not every verifier's top choice is the draft, but the weighted mean of their probabilities for it is above 0.5: no fusion"),
}
DRAFT_LABEL = "being checked"
DRAFT_DESCRIPTION = ("the drafter's token, shown as soon as it is drafted; the verifiers have not checked it yet, and it "
                     "turns into its decision when they have")
END_MARKER = "⏹ end"  # how the strip draws the end-of-sequence record

# One colour per model for SpecEM's winning segments and the weights chart (classes model-0, model-1, ... in the
# order of trace.models): a palette of its own, apart from every decision colour above ("a colour means one thing";
# smollm2 in the blocked colour read as blocked). Picked for the distance (CIE Lab) of their tints, on light and
# dark backgrounds, from each decision's tint and from each other (tests/visual/test_style.py measures it).
MODEL_COLOURS = ("#3C2EB8", "#65B82E", "#B82EAA", "#918830", "#7A281F", "#262E73")
MODEL_CLASSES = 16  # CSS exists for model-0 .. model-15; colours repeat with another underline after 6
MODEL_UNDERLINES = ("solid", "groove", "ridge")  # none of the decisions' (solid is theirs too, but not these colours)

def model_colour(i: int) -> str:
    return MODEL_COLOURS[i % len(MODEL_COLOURS)]


def model_class(models: list[str], name: str) -> str:
    """``model-N`` for a model of the trace, "" for a name that is not one (e.g. ``ensemble``)."""
    return f"model-{models.index(name)}" if name in models else ""


def _tint(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"


def _mark_rules(cls: str, colour: str, underline: str) -> str:
    width = "3px" if underline == "double" else "2px"
    return (
        f".el-tok.{cls}, .el-swatch.{cls}, .el-chip.{cls} "
        f"{{ background: {_tint(colour, 0.24)}; border-bottom: {width} {underline} {colour}; }}\n"
        f".el-box.{cls} {{ background-color: {_tint(colour, 0.22)}; }}\n"
    )


_BASE_CSS = """/* Ensemble Lens: pass to launch(css=...). */
:root {
  --el-line: rgba(128, 128, 128, 0.45);
  --el-faint: rgba(128, 128, 128, 0.12);
  --el-sep: rgba(128, 128, 128, 0.5);
  --el-shared: #009E73;
  --el-missing: #D55E00;
  --el-decision: #CC79A7;
  /* Every font stack ends with the colour emoji fonts of the common systems, so an emoji in an answer or a
     tokenizer's text is drawn as itself where the text font lacks it (Debian: fonts-noto-color-emoji). */
  --el-emoji: "Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol", "Noto Color Emoji";
  --el-mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace, var(--el-emoji);
}
.gradio-container { font-family: var(--font, system-ui, sans-serif), var(--el-emoji); }
.el-strip { line-height: 2.0; font-size: 17px; overflow-wrap: anywhere; }
/* Every glyph in its own token's box: fonts shape text across inline boxes, so a ligature ("fi", "fl", "ff") or a
   kerning pair would paint a character inside the neighbouring token's box (S|of|ia drawn as S|ofi|a). Token views
   turn both off, and contextual alternates with them. */
.el-strip, .el-tok, .el-grid-block, .el-fork-side, .el-compare, .el-cand-text, .el-key, .el-kept, .el-table,
.el-chip, .el-swatch, .el-piece, #token-table, #tok-counts, #cmp-table {
  font-variant-ligatures: none; font-kerning: none;
  font-feature-settings: "liga" 0, "clig" 0, "dlig" 0, "calt" 0, "kern" 0; }
/* Code (the text inside ``` fences) in a monospace face, as an editor shows it. */
.el-tok.code { font-family: var(--el-mono); font-size: 0.92em; }
.el-tok { white-space: pre-wrap; border-radius: 3px; padding: 1px 0; cursor: pointer;
  box-shadow: inset -1px 0 0 var(--el-sep);
  -webkit-box-decoration-break: clone; box-decoration-break: clone; }
/* Hover and selection read apart, and neither covers a glyph: hover darkens the token's tint (no line); the selected
   token gets room of its own (4px margins) and its ring is drawn there, 1px off its box, never over its first or last
   letter nor over a neighbour's (a ring at offset 0 covered 2px of the letters on each side). */
.el-tok:hover:not(.el-selected):not(.selected) {  /* (weighs more than a decision's background shorthand) */
  background-image: linear-gradient(rgba(128, 128, 128, 0.3), rgba(128, 128, 128, 0.3)); }
.el-tok.selected, .el-tok.el-selected { outline: 2px solid currentColor; outline-offset: 1px; margin: 0 4px; }
.el-tok.round-start { box-shadow: inset -1px 0 0 var(--el-sep), inset 2px 0 0 var(--el-line); }
.el-tok.zw { font-size: 0.7em; vertical-align: super; padding: 0 1px; opacity: 0.85; }
.el-tok.eos { vertical-align: baseline; white-space: nowrap; padding: 0 5px; margin-left: 4px; border-radius: 8px;
  font-weight: 600; letter-spacing: 0.02em; opacity: 1; }
.el-tok.bytes { text-decoration: underline wavy var(--el-line); }
/* A drafted token being checked (SAFE, live): quiet and apart from every decision by its shape, not a colour: no
   fill, italic, a dashed box all round (decisions are tinted, with an underline only). A verified token appended
   after it hides it (the round's decisions take its place), so the streamed strip stays append-only; while the run
   streams, a replaced draft is drawn struck before the key that replaced it (data-draft). */
.el-draft { white-space: pre-wrap; font-style: italic; opacity: 0.75; border-radius: 3px; cursor: progress;
  outline: 2px dashed color-mix(in srgb, currentColor 60%, transparent); outline-offset: -2px; padding: 1px 2px;
  -webkit-box-decoration-break: clone; box-decoration-break: clone; }
.el-draft.code { font-family: var(--el-mono); font-size: 0.92em; }
.el-draft:has(~ .el-tok) { display: none; }
.el-draft ~ .el-tok.ensembled_replaced[data-draft]::before { content: attr(data-draft); font-style: italic;
  text-decoration: line-through 2px; opacity: 0.6; margin-right: 0.2em; }
.el-large .el-draft { outline-width: 3px; outline-offset: -3px; }
.el-swatch.el-draft { opacity: 0.85; }
.ws { opacity: 0.45; }
.el-legend { display: flex; flex-wrap: wrap; gap: 6px 16px; align-items: center; font-size: 13px; margin: 4px 0; }
.el-legend-item { display: inline-flex; gap: 6px; align-items: center; }
.el-legend-head { font-weight: 600; }
.el-swatch { display: inline-block; min-width: 2.2em; text-align: center; border-radius: 3px;
  font-family: var(--el-mono); font-size: 12px; line-height: 1.5; }
.el-chip { display: inline-block; border-radius: 3px; padding: 0 6px; margin: 2px 4px 2px 0; font-size: 13px; }
.el-explain { line-height: 1.6; }
.el-explain p { margin: 0.35em 0; }
.el-explain .el-muted, .el-muted { opacity: 0.7; font-size: 0.92em; }
.el-key { font-family: var(--el-mono); background: var(--el-faint); border-radius: 3px; padding: 0 3px;
  white-space: pre-wrap; }
/* Blocks flow like words: as many per line as the container holds, each with its own row labels. */
.el-grid-wrap { display: flex; flex-wrap: wrap; align-items: flex-start; column-gap: 26px; overflow-x: auto;
  padding-bottom: 4px; max-width: 100%; }
.el-grid-break { flex-basis: 100%; height: 0; }
.el-grid-block { display: grid; row-gap: 3px; column-gap: 7px; margin: 0 0 10px 0; font-family: var(--el-mono);
  font-size: 14px; line-height: 1.6; width: max-content; }
/* The ids view: a token's id under its text; a byte group's byte tokens as small boxes of their own. */
.el-piece { display: inline-flex; flex-direction: column; align-items: center; line-height: 1.3; padding: 0 1px; }
.el-id { font-size: 0.68em; opacity: 0.75; font-variant-numeric: tabular-nums; }
.el-byte-group { display: inline-flex; gap: 2px; padding: 1px; }
.el-piece.el-byte { box-shadow: inset 0 0 0 1px var(--el-line); border-radius: 2px; font-size: 0.8em; padding: 0 2px; }
.el-grid-label { grid-column: 1; padding-right: 10px; font-size: 12px; opacity: 0.8; white-space: nowrap;
  align-self: center; }
.el-axis { white-space: pre; opacity: 0.75; border-bottom: 1px solid var(--el-line); }
.el-box { white-space: pre; box-shadow: inset 0 0 0 1px var(--el-sep); border-radius: 3px;
  background-color: var(--el-faint); min-height: 1.6em; }
.el-box.alt { background-image: linear-gradient(rgba(128, 128, 128, 0.2), rgba(128, 128, 128, 0.2)); }
.el-box.unknown { background: none; box-shadow: none; border-bottom: 1px dotted var(--el-line); }
.el-box.bytes { text-decoration: underline wavy var(--el-line); }
.el-box.el-current { outline: 2px solid currentColor; outline-offset: -1px; }
/* A replaced token's draft: the text row shows what the models checked, struck through (it was discarded); the
   response row shows the token that replaced it in its place. */
.el-axis.struck { text-decoration: line-through 2px; text-decoration-color: var(--el-missing); opacity: 0.75; }
.el-box.el-replacement { font-weight: 600; padding: 0 2px; }
.el-box.incomplete { background-image: repeating-linear-gradient(135deg, transparent 0 4px, var(--el-faint) 4px 8px); }
/* Edges sit in the middle of the 7px column gap after the segment they close: a gutter, never through a glyph. */
.el-edge { pointer-events: none; justify-self: end; width: 2px; margin-right: -4.5px; z-index: 1; }
.el-edge.shared { background: var(--el-shared); opacity: 0.6; width: 1px; margin-right: -4px; }
.el-edge.missing { background: repeating-linear-gradient(to bottom, var(--el-missing) 0 4px, transparent 4px 7px); }
.el-edge.decision { background: var(--el-decision); width: 3px; margin-right: -5px; }
.el-edge.start { justify-self: start; margin-right: 0; margin-left: -5px; }
.el-grid-key { font-size: 12px; opacity: 0.85; margin: 4px 0; }
.el-grid-key .el-edge-sample { display: inline-block; width: 3px; height: 1em; vertical-align: middle; margin: 0 4px 0 10px; }
.el-edge-sample.shared { background: var(--el-shared); }
.el-edge-sample.missing { background: repeating-linear-gradient(to bottom, var(--el-missing) 0 3px, transparent 3px 5px); }
.el-edge-sample.decision { background: var(--el-decision); }
.el-header { display: flex; flex-wrap: wrap; gap: 8px 18px; align-items: baseline; margin: 4px 0 8px; }
.el-big { font-size: 1.4em; font-weight: 600; }
.el-rounds { display: flex; flex-direction: column; gap: 10px; }
.el-round { border: 1px solid var(--el-line); border-radius: 6px; padding: 6px 10px; }
.el-round-head { display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 13px; margin-bottom: 4px; cursor: pointer; }
.el-round-head::before { content: "▸"; } details[open] > .el-round-head::before { content: "▾"; }
.el-help { cursor: help; text-decoration: underline dotted; }
.el-cand { display: grid; grid-template-columns: minmax(7em, max-content) 1fr repeat(3, max-content); gap: 2px 12px;
  align-items: baseline; padding: 2px 4px; border-radius: 4px; }
.el-cand.winner { outline: 2px solid var(--el-shared); background: var(--el-faint); }
.el-cand-text { white-space: pre-wrap; font-family: var(--el-mono); font-size: 13px; overflow-wrap: anywhere; }
.el-num { font-variant-numeric: tabular-nums; font-size: 13px; white-space: nowrap; }
.el-stats { display: flex; flex-direction: column; align-items: flex-start; gap: 8px; }
.el-kpis { display: flex; flex-wrap: wrap; gap: 8px 22px; }
.el-kpi { display: flex; flex-direction: column; }
.el-kpi-label { font-size: 12px; opacity: 0.75; }
.el-table { border-collapse: collapse; font-size: 13px; }
.el-table th, .el-table td { border-bottom: 1px solid var(--el-line); padding: 3px 10px; text-align: left; }
.el-table td.el-num, .el-table th.el-num { text-align: right; }
.el-error { border: 1px solid #D55E00; border-left-width: 4px; border-radius: 4px; padding: 6px 10px; margin: 4px 0; }
.el-compare { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 10px; }
/* A card spans three rows of the cards' grid (head, legend, strip) and shares them with the cards beside it, so
   every strip of a row starts at one height: a longer legend does not push its strip (and the bar where the runs
   part) lower than its neighbour's. */
.el-compare-card { border: 1px solid var(--el-line); border-radius: 6px; padding: 6px 10px; min-width: 0;
  display: grid; grid-row: span 3; grid-template-rows: subgrid; row-gap: 4px; align-content: start; }
.el-compare-card > * { min-width: 0; }
.el-compare-card > .el-legend { margin: 0; align-self: start; }
.el-compare-card h4 { margin: 2px 0 4px; }
.el-compare-same { margin: 0 0 2px; font-size: 13px; font-weight: 600; }
/* Projector mode (the app's large-text switch puts el-large on its container): read from the back of a room.
   Gradio scopes these rules inside its container, where the base rules weigh more: hence !important. */
.el-large .el-strip { font-size: 30px !important; line-height: 2.1 !important; }
.el-large .el-grid-block { font-size: 22px !important; }
.el-large .el-explain, .el-large .el-legend, .el-large .el-fork-side { font-size: 20px !important; }
.el-large .el-swatch, .el-large .el-grid-label, .el-large .el-grid-key { font-size: 16px !important; }
/* A download's name is read whole: Gradio cuts a long one to "trace-s….json"; here it is one line of text that
   wraps after a hyphen when the box is narrow ("trace-safe-" / "20261203-1740.json"). */
.el-when-filled .filename { display: block !important; overflow: visible !important; font-size: 0; }  /* (no gap) */
.el-when-filled .filename .stem, .el-when-filled .filename .ext { display: inline; font-size: 14px; white-space: normal !important;
  overflow: visible !important; text-overflow: clip !important; overflow-wrap: break-word; }
/* An output box that holds nothing yet (no file to download, no chart) takes no room (ui.tabs.FILLED). */
.el-when-filled:not(:has(a[href], .js-plotly-plot)) { display: none !important; }
/* A token id sits above the boundary lines of the aligned view: a line through "35147" would read "35|147". */
.el-id { position: relative; z-index: 2; padding: 0 2px; border-radius: 2px;
  background: var(--background-fill-primary, Canvas); }
/* Phones: wide tables and grids scroll sideways inside their box, with a fading edge as the cue. */
@media (max-width: 600px) {
  .el-strip { font-size: 16px; }
  /* The result first, then the form (beside each other on wider screens); no keys hint without a keyboard. */
  #run-output { order: -1; }
  /* The legend packs its items (two to a line where they fit), so the first view's explanation begins on screen. */
  .el-legend { font-size: 12px; gap: 2px 10px; }
  /* While the strip grows, the page stays where Run put it: Chromium anchors the scroll on the first visible element
     in the page's order, which is the form (it comes first in the page, below the result on a phone), so each new
     line of the strip pushed the status up and out of view (issue 39). */
  #run-form { overflow-anchor: none; }
  .el-keys { display: none; }
  /* Row labels wrap ("smollm2 (verifier)" on two lines) so the inspector's rows fit; no chart toolbar over the
     chart's title (a phone zooms and pans by touch). */
  .el-grid-label { white-space: normal; max-width: 5.5em; line-height: 1.2; }
  .js-plotly-plot .modebar-container { display: none !important; }
  .el-table { display: block; }
  .el-table, .el-grid-wrap { overflow-x: auto; max-width: 100%;
    background: linear-gradient(to left, var(--el-faint), transparent 24px) right / 24px 100% no-repeat local; }
  .el-cand { grid-template-columns: 1fr; }
  /* Gradio moves tabs that do not fit into a "…" menu (it measures a hidden copy of the buttons, which these
     rules shrink too): tighter tab buttons let all five labels fit a 390 px phone. */
  .tab-wrapper .tab-container button { padding-left: 6px !important; padding-right: 6px !important; font-size: 13px !important; }
}
.el-kept { white-space: pre-wrap; opacity: 0.6; border-bottom: 2px dotted var(--el-line); }
.el-fork { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 10px; margin-top: 6px; }
.el-fork-side { border: 1px solid var(--el-line); border-radius: 6px; padding: 6px 10px; min-width: 0;
  white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.7; }
.el-fork-side h4 { margin: 2px 0 4px; white-space: normal; }
.el-fork-split { display: inline-block; width: 0; border-left: 3px solid currentColor; height: 1.2em;
  vertical-align: text-bottom; margin: 0 2px; }
.el-fork-side del { text-decoration: line-through; text-decoration-thickness: 2px; background: var(--el-faint); }
.el-fork-side ins { text-decoration: none; font-weight: 600; box-shadow: inset 0 -2px 0 currentColor;
  background: var(--el-faint); }
.el-whatif-keys { display: flex; flex-wrap: wrap; gap: 6px; margin: 4px 0; }
.el-whatif-key { font-family: var(--el-mono); white-space: pre; border: 1px solid var(--el-line); border-radius: 4px;
  padding: 2px 8px; min-height: 32px; cursor: pointer; background: var(--el-faint); }
.el-whatif-key:hover, .el-whatif-key:focus-visible { outline: 2px solid currentColor; }
/* Stop reads as off (faint, disabled) while nothing streams and as on (a solid red, not a decision colour) while a
   run, fork or comparison streams: the theme's stop variant is a pale grey either way. */
#stop-button:disabled, #cmp-stop:disabled { opacity: 0.45; cursor: not-allowed; }
#stop-button:not(:disabled), #cmp-stop:not(:disabled) { background: #B4232A !important; color: #fff !important;
  border-color: #B4232A !important; }
"""
"""Layout of every view; the decision and model colour rules are generated after it."""


def _build_css() -> str:
    rules = [_BASE_CSS]
    for decision, (colour, underline, _, _) in DECISION_STYLE.items():
        if decision != "segment":
            rules.append(_mark_rules(decision, colour, underline))
    rules.append(_mark_rules("segment", DECISION_STYLE["segment"][0], "solid"))
    blue = DECISION_STYLE["consensus"][0]
    rules.append(f".el-tok.consensus.confident, .el-swatch.consensus.confident, .el-chip.consensus.confident "
                 f"{{ background: {_tint(blue, 0.1)}; border-bottom: 2px dotted {blue}; }}\n")
    for i in range(MODEL_CLASSES):
        # model-N after the decision rules: a SpecEM token shows its winning model's colour
        underline = MODEL_UNDERLINES[(i // len(MODEL_COLOURS)) % len(MODEL_UNDERLINES)]
        rules.append(_mark_rules(f"model-{i}", model_colour(i), underline))
    rules.append(".dark .ws, .dark .el-axis { opacity: 0.6; }\n")
    return "".join(rules)


CSS: str = _build_css()
"""The stylesheet for ``launch(css=CSS)`` (also inlined in the evaluation report)."""


def swatch(cls: str, sample: str = "Ab") -> str:
    return f'<span class="el-swatch {safe(cls)}">{safe(sample)}</span>'


def legend_html(method: str, models: list[str], settings: dict | None = None, ended: bool = False,
                drafts: bool = False) -> str:
    """One swatch per decision ``method`` (with ``settings``) can produce; for SpecEM one per model (``model-N``);
    the end marker only for an answer that ended by itself (``ended``), not one that hit its token budget; with
    ``drafts`` (a SAFE run streaming) first the style of a drafted token being checked."""
    items = []
    head = ""
    if is_segments(method):
        # model colours, not decisions: the legend says so before the names
        head = ('<span class="el-legend-head" title="SpecEM colours each token by the model whose segment won its round; '
                'these colours name models, not decisions">Winning model of each round:</span>')
        for i, name in enumerate(models):
            items.append((f"model-{i}", name, f"{name}'s segment won the round"))
    else:
        if drafts:
            items.append(("el-draft", DRAFT_LABEL, DRAFT_DESCRIPTION))
        for decision in method_decisions(method, settings):
            if decision == "consensus":
                items.extend(CONSENSUS_KINDS.values())
                continue
            _, _, label, description = DECISION_STYLE[decision]
            items.append((decision, label, description))
    parts = [
        f'<span class="el-legend-item" title="{safe(description)}">{swatch(cls)}<span>{safe(label)}</span></span>'
        for cls, label, description in items
    ]
    if ended:
        parts.append(
            '<span class="el-legend-item el-muted" title="the end-of-sequence token, coloured by the decision that '
            f'accepted it">{safe(END_MARKER)}: the answer ended by itself</span>'
        )
    return f'<div class="el-legend">{head}{"".join(parts)}</div>'
