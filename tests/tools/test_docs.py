"""The docs' generated tables match the code and configs: a new encoder, option or experiment fails here
until ``make docs`` regenerates its row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from poslab.encoders import registry
from poslab.encoders.base import PositionEncoder
from poslab.tools import docs

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return docs.blocks(docs.read_verdicts(DOCS))


def test_the_committed_pages_are_what_make_docs_generates(generated):
    stale = [p.name for p in docs.pages(DOCS) if docs.render(t := p.read_text(encoding="utf-8"), generated) != t]
    assert not stale, f"stale generated tables in {stale}: run `make docs`"
    assert {"encoders", "experiments", "options:vision", "options:text"} <= set(generated)


def test_every_encoder_and_experiment_has_its_row(generated):
    for name in docs.own_encoders():  # an installed plugin's encoders are the plugin's to document
        assert f"| `{name}` |" in generated["encoders"], name
    for name in docs.experiments():
        assert f"| `{name}` |" in generated["experiments"], name
    assert "| `stickbreaking` | Tan et al. 2025 | `attention_weights` | — |" in generated["encoders"]
    assert (
        "| `needle` | text | `none`, `sinusoidal`, `rope`, `alibi`, `t5`, `rnope`, `rnope/swa` |"
        in generated["experiments"]
    )  # an encoder's own variant beside it
    assert "| `learned`, `sinusoidal`, `rope` × `plain`, `randomized` |" in generated["experiments"]  # shared ones


def test_a_new_encoder_makes_the_encoder_page_stale_until_regenerated(tmp_path, generated, monkeypatch):
    copy = tmp_path / "docs"
    shutil.copytree(DOCS, copy)
    unchanged = {k: v for k, v in generated.items() if k != "encoders"}
    monkeypatch.setattr(docs, "options_block", lambda modality: unchanged[f"options:{modality}"])  # as committed

    @registry.register_encoder("throwaway")
    class Throwaway(PositionEncoder):
        paper = "Nobody 2026"
        reads = "steps"

        def __init__(self, dim: int, num_heads: int, scale: float = 2.0) -> None:
            super().__init__(dim, num_heads)

        def encode_input(self, x, pos):
            return x

    try:
        assert [Path(p).name for p in docs.stale(copy)] == ["encoders.md"]
        docs.write(copy, echo=lambda line: None)
        assert docs.stale(copy) == []
        assert "| `throwaway` | Nobody 2026 | `encode_input` | `steps` |" in (copy / "encoders.md").read_text()
    finally:
        registry._REGISTRY.pop("throwaway", None)


def test_only_the_marked_blocks_are_rewritten():
    page = (
        "# Title\nprose\n<!-- poslab-docs:x -->\nold\n<!-- /poslab-docs:x -->\nmore prose\n"
        "<!-- poslab-docs:y -->\nkept\n<!-- /poslab-docs:y -->\n"
    )
    out = docs.render(page, {"x": "new\n"})
    assert out == page.replace("old\n", "new\n")


def test_every_encoder_names_its_paper():
    """``paper`` is declared in each encoder's own class (an empty one says it is a common construction)."""
    from poslab.encoders import encoder_class

    missing = [name for name in docs.own_encoders() if "paper" not in vars(encoder_class(name))]
    assert not missing, missing


def test_an_experiments_first_sentence_runs_past_a_citation():
    assert docs.first_sentence("Text: xPos (Sun et al. 2022) with blocks. More here.") == (
        "Text: xPos (Sun et al. 2022) with blocks."
    )
    assert docs.first_sentence("One (e.g. two). Three.") == "One (e.g. two)."
    assert all(not row.endswith("et al.") for row in docs.experiments_block({}).split(" | "))


def test_a_generated_block_no_page_marks_is_stale_and_written_to_its_home(tmp_path, generated, monkeypatch):
    """A modality added since the docs were made: its options table has no markers anywhere; `--check`
    says so, and `make docs` adds a section for it to modalities.md."""
    copy = tmp_path / "docs"
    shutil.copytree(DOCS, copy)
    # a name no modality has (the docs' example, audio, is one a fork may add)
    new = "options:not_a_modality_yet"
    monkeypatch.setattr(docs, "blocks", lambda verdicts: {**generated, new: "| key |\n|---|\n"})
    assert [p for p in docs.stale(copy)] == [f"{copy / 'modalities.md'} (no block {new})"]
    docs.write(copy, echo=lambda line: None)
    assert docs.stale(copy) == []
    text = (copy / "modalities.md").read_text()
    assert "## not_a_modality_yet: options" in text and f"<!-- poslab-docs:{new} -->\n| key |\n|---|\n<!--" in text


def test_a_run_made_before_a_key_existed_counts_as_the_run_its_default_makes():
    """A stored config without a key added since (its default is what the run computed) hashes as the config
    composed today; a different value of that key does not."""
    from poslab.config.composition import compose, to_dict
    from poslab.tools.docs import computed_hash

    today = to_dict(compose(["modality=text"]))
    before = {**today, "data": {k: v for k, v in today["data"].items() if k not in ("tokenizer", "vocab_size")}}
    assert computed_hash(before) == computed_hash(today)
    assert computed_hash(to_dict(compose(["modality=text", "data.tokenizer=bpe"]))) != computed_hash(today)
    assert computed_hash({"modality": "gone"}) == computed_hash({"modality": "gone"})  # no longer valid: as stored


def test_verdicts_come_from_a_comparisons_whole_grid_and_name_it(tmp_path, monkeypatch):
    """``make docs`` checks an experiment on runs a comparison trained, its grid whole: a run trained on its own
    (the same config, one seed) neither completes a grid nor replaces a comparison's run; the verdict names the
    comparison and counts only the checks it made."""
    import json

    from poslab.config.composition import to_dict
    from poslab.study.compare import plan

    monkeypatch.chdir(tmp_path)
    grid = plan("text", None, None, ["experiment=rope_extension"])
    assert len(grid) == 9  # rope, drope, rope_clipped × 3 seeds

    def write(cfg, tags, loss, created="2026-12-01T10:00:00"):
        config = to_dict(cfg)
        config["logger"]["tags"] = tags
        run = tmp_path / "runs" / "text" / f"{cfg.run.name}{'-own' if not tags else ''}"
        run.mkdir(parents=True, exist_ok=True)
        payload = {"kind": "train", "modality": "text", "encoder": cfg.encoder.name, "seed": cfg.seed,
                   "config": config, "created": created, "metrics": {"lengen/loss@1x": loss}}  # fmt: skip
        (run / "summary.json").write_text(json.dumps(payload))

    *most, last = grid
    for _label, _seed, cfg in most:
        write(cfg, ["compare:C1"], 2.0)
    expect = grid[0][2].expect
    write(last[2], [], 2.0)  # trained on its own
    assert docs.measured_verdicts("rope_extension", "text", list(expect), echo=lambda _: None) is None
    write(last[2], ["compare:C2"], 2.0)
    write(grid[0][2], [], 9.0, created="2026-12-02T10:00:00")  # a newer run of its own: not taken
    said = []
    record = docs.measured_verdicts("rope_extension", "text", list(expect), echo=said.append)
    assert record["comparisons"] == ["C1", "C2"] and record["runs"] == 9
    (line,) = said
    assert line.startswith("poslab docs: rope_extension: ") and line.endswith("of comparison(s) C1, C2")
    made = [e for e in record["expectations"] if e["held"] is not None]
    assert f"{sum(e['held'] for e in made)} of {len(made)} checks held" in line
    assert f"({len(record['expectations']) - len(made)} not checked)" in line
    assert "of comparison C1, C2)" in docs.experiments_block({"rope_extension": record})
