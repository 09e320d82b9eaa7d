"""``make bench-decode``: the cache's tokens/s against full forward passes, both choosing the same tokens."""

from __future__ import annotations

import json

from poslab.tools import decode_bench


def test_the_bench_decodes_the_same_tokens_both_ways_and_writes_its_table(tmp_path, capsys):
    out = tmp_path / "decode.json"
    argv = ["--encoders", "rope", "fox", "--prompt", "5", "--new", "6", "--width", "32", "--depth", "1"]
    assert decode_bench.main([*argv, "--heads", "2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["encoder"] for r in rows] == ["rope", "fox"] and all(r["same_tokens"] for r in rows)
    assert all(r["cached_tok_s"] > 0 and r["full_tok_s"] > 0 for r in rows)
    assert capsys.readouterr().out.startswith("| encoder | cached tokens/s | full tokens/s | speed-up |")
