"""Sampling with a decoding cache, and ``poslab generate`` on a trained checkpoint."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pytest
import torch

from poslab.cli import main
from poslab.encoders.registry import build_encoder_in_context
from poslab.modalities.text.generation import pick, sample
from poslab.modalities.text.model import CausalLM
from poslab.positions import Positions
from poslab.run.generate import Sampling


def test_pick_is_greedy_at_temperature_0_and_top_1():
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.9], [3.0, 0.0, 0.0, 2.9]])
    assert pick(logits, 0.0, None, None).flatten().tolist() == [1, 0]
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        assert pick(logits, 5.0, 1, generator).flatten().tolist() == [1, 0]


def test_draws_follow_the_tempered_softmax_over_the_top_k():
    """Frequencies of 20,000 draws against softmax(logits / T) restricted to the k largest (written out here)."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    temperature, k, draws = 0.7, 3, 20_000
    weights = [torch.exp(torch.tensor(v / temperature)).item() for v in (2.0, 1.0, 0.5)]
    expected = torch.tensor([w / sum(weights) for w in weights] + [0.0, 0.0])
    generator = torch.Generator().manual_seed(0)
    picked = pick(logits.expand(draws, -1), temperature, k, generator).flatten()
    frequencies = torch.bincount(picked, minlength=5).float() / draws
    torch.testing.assert_close(frequencies, expected, atol=0.015, rtol=0)


@pytest.mark.parametrize("name", ["rope", "alibi", "fox"])
def test_greedy_sampling_with_the_cache_is_greedy_decoding_by_full_forward_passes(name):
    torch.manual_seed(0)
    encoder = build_encoder_in_context(name, dim=32, num_heads=4, options={}, context={"max_len": 8, "causal": True})
    model = CausalLM(encoder, vocab_size=11, dim=32, depth=2, num_heads=4).eval()
    prompt = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(1))
    out = sample(model, prompt, 20, temperature=0.0)
    reference = prompt
    with torch.no_grad():
        for _ in range(20):  # the whole sequence again at every step, its last row's argmax
            logits = model(reference, Positions.consecutive(reference.shape[1]))[:, -1]
            reference = torch.cat((reference, logits.argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(out, reference)
    assert out.shape == (2, 25) and torch.equal(out[:, :5], prompt)


def test_sampling_options_are_parsed_checked_and_the_rest_left_as_overrides():
    sampling, rest = Sampling.parse(["prompt=ROMEO:\\n", "top_k=null", "temperature=0", "data.root=/x", "samples=3"])
    assert (sampling.prompt, sampling.top_k, sampling.temperature, sampling.samples) == ("ROMEO:\n", None, 0.0, 3)
    assert rest == ["data.root=/x"]
    from poslab.errors import ConfigError

    for bad, says in [
        ("max_new_tokens=0", "max_new_tokens=0 (at least 1)"),
        ("temperature=-1", "temperature=-1.0 (0 for greedy, or more)"),
        ("top_k=0", "top_k=0 (at least 1, or null)"),
        ("samples=x", "samples='x' is not an integer"),
        ("device=tpu", "device=tpu (auto, cpu, cuda, cuda:N, mps)"),
    ]:
        with pytest.raises(ConfigError, match=f"^generate: {bad.split('=')[0]}"):
            Sampling.parse([bad])
        with pytest.raises(ConfigError) as raised:
            Sampling.parse([bad])
        assert says in str(raised.value)


def poslab(*args: str) -> subprocess.CompletedProcess:
    """The command in this process (what it prints, and its exit code): one import of Lightning for all."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def text_checkpoints(tmp_path_factory, corpus_file):
    """A character-level and a BPE checkpoint of a few steps (one trained command each)."""
    root = tmp_path_factory.mktemp("generate")
    found = {}
    for tokenizer in ("char", "bpe"):
        result = poslab(
            "train", "modality=text", "logger=none", f"run.root={root / tokenizer}", "data=textfile",
            f"data.path={corpus_file}", f"data.tokenizer={tokenizer}", "data.vocab_size=300", "data.context=16",
            "data.batch_size=8", "data.eval_tokens=256", "model.dim=32", "model.depth=1", "model.num_heads=2",
            "trainer.max_steps=3", "trainer.enable_progress_bar=false", "encoder=rope",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        found[tokenizer] = next((root / tokenizer).rglob("last.ckpt"))
    return found


def test_generate_continues_a_prompt_reproducibly_by_its_seed(text_checkpoints):
    ckpt = text_checkpoints["char"]
    args = ("generate", f"ckpt={ckpt}", "prompt=The king", "max_new_tokens=40", "samples=2", "seed=3")
    first, again = poslab(*args), poslab(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout == again.stdout
    samples = first.stdout[:-1].split("\n---\n")  # print's line end
    assert len(samples) == 2 and all(s.startswith("The king") for s in samples)
    assert [len(s) for s in samples] == [len("The king") + 40] * 2, samples  # characters: one a token
    other = poslab(*args[:-1], "seed=4")
    assert other.returncode == 0 and other.stdout != first.stdout


def test_a_bpe_checkpoint_decodes_with_the_tokenizer_its_data_trained(text_checkpoints):
    result = poslab("generate", f"ckpt={text_checkpoints['bpe']}", "prompt=the king shall", "max_new_tokens=10",
                    "temperature=0")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("the king shall") and len(result.stdout) > len("the king shall")
    other = poslab("generate", f"ckpt={text_checkpoints['bpe']}", "data.vocab_size=280")
    assert other.returncode == 2
    assert (
        other.stderr.strip()
        .splitlines()[-1]
        .endswith("the data's tokenizer (bpe) has 280 tokens, the checkpoint's model 300: it was trained on other data")
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "poslab generate needs exactly one ckpt=PATH"),
        (("ckpt=missing.ckpt",), "checkpoint missing.ckpt does not exist"),
        (("CKPT", "prompt="), "prompt= is empty"),
        (("CKPT", "top_k=-2"), "generate: top_k=-2 (at least 1, or null)"),
        (("CKPT", "model.dim=8"), "'model.dim' is fixed by the checkpoint"),
    ],
)
def test_bad_input_ends_in_one_line(text_checkpoints, args, says):
    args = tuple(f"ckpt={text_checkpoints['char']}" if a == "CKPT" else a for a in args)
    result = poslab("generate", *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr, result.stderr


def test_make_generate_says_what_it_needs():
    result = subprocess.run(["make", "-s", "generate"], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert result.returncode == 2 and "make generate needs CKPT=" in result.stderr
