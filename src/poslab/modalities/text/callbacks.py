"""The text run's end-of-run evaluations: the length study (loss and accuracy at multiples of the context)
and flip-flop's sparse test (accuracy at the training length with rarer writes)."""

from __future__ import annotations

import math
from dataclasses import replace

from poslab.encoders.longrope_search import SearchBudget, SearchResult
from poslab.errors import DataError
from poslab.evaluation.probes import Buckets, Evaluation, Probe
from poslab.modalities.text import lengen, passkey
from poslab.modalities.text.lengen import BASE, length_passes, usable_extensions
from poslab.modalities.text.sequence_tasks import WRITE_SHARE
from poslab.track import plots
from poslab.track.loggers import log_line_chart


class LengthGeneralization(Evaluation):
    """Metrics at each multiple of the training context (see :mod:`poslab.modalities.text.lengen`): one
    Lightning test pass per (multiple, encoder variant), logged as ``lengen/<metric>@<m>x[/<extension>]``."""

    def __init__(self, eval_cfg: dict) -> None:
        super().__init__()
        self.multiples = list(eval_cfg["multiples"])
        self.extensions = list(eval_cfg["rope_scaling"])
        self.search_tokens = int(eval_cfg["search_tokens"])
        self.budget = SearchBudget(int(eval_cfg["search_population"]), int(eval_cfg["search_generations"]))
        self.objective = str(eval_cfg["search_objective"])
        self.searched: dict[tuple[str, int], SearchResult] = {}

    def extended(self, trainer, task, step):
        """The encoder of an extension's pass: searched first where the extension's settings are."""
        if step.variant not in task.encoder.searched_extensions:
            return task.encoder.extended(step.variant, step.factor)
        budget = replace(self.budget, seed=int(trainer.datamodule.seed))
        found, result = lengen.searched_extension(
            trainer, task, step.variant, step.factor, step.multiple, budget, self.search_tokens, self.objective
        )
        self.searched[(step.variant, step.multiple)] = result
        return found

    def probes(self, trainer, task):

        datamodule, encoder = trainer.datamodule, task.encoder
        for step in length_passes(encoder, self.multiples, self.extensions):
            variant = "" if step.variant == BASE else f"/{step.variant}"
            if step.factor is None:
                swap = None
            else:

                def swap(step=step):
                    return lengen.encoder_swapped(task.backbone, self.extended(trainer, task, step))

            yield Probe(
                f"lengen/{{}}@{step.multiple}x{variant}",
                datamodule.lengen_loader(step.multiple),
                lambda batch, generated=step.generated: task.lengen_measure(batch, generated, datamodule.context),
                datamodule.as_batch,
                **({"variant": swap} if swap else {}),
                tag=step,
            )

    def summarize(self, trainer, task, results) -> None:

        if not results:
            return
        context = trainer.datamodule.context
        rows = []  # (variant, multiple, {metric name: value}, note)
        for probe, result in results:
            step = probe.tag
            values = {key.split("@")[0].removeprefix("lengen/"): v for key, v in result.metrics.items()}
            rows.append((step.variant, step.multiple, values, result.note))
            if step.variant == BASE and step.multiple == 1:  # an extension at 1x is the trained model itself
                for kind in usable_extensions(task.encoder, self.extensions):
                    rows.append((kind, 1, values, result.note))
                    self.report["metrics"].update({f"{k}/{kind}": v for k, v in result.metrics.items()})
        metric = next((name for _, _, values, _ in rows for name in values), "loss")
        table = [[variant, m, m * context, values.get(metric), note] for variant, m, values, note in rows]
        self.add_table(trainer, f"lengen/{metric}", ["variant", "multiple", "length", metric, "note"], table)
        multiples = sorted({m for _, m, _, _ in rows})
        lengths = [m * context for m in multiples]
        series: dict[str, list[float | None]] = {}
        curve: dict[int, dict[str, float]] = {}
        for variant, m, values, _ in rows:
            series.setdefault(variant, [None] * len(multiples))[multiples.index(m)] = values.get(metric)
            suffix = "" if variant == BASE else f"/{variant}"
            for name, value in values.items():
                curve.setdefault(m * context, {})[f"lengen/curve/{name}{suffix}"] = value
        self.add_curve(trainer, "lengen/curve/length", curve)
        if trainer.is_global_zero:
            log_line_chart(trainer.logger, f"lengen/{metric}_curve", lengths, series, f"{metric} vs context length")
        title = f"{task.encoder.name}: {metric} vs length (trained at {context})"
        self.add_figure(trainer, f"lengen/{metric}", plots.length_figure(lengths, series, metric, context, title))
        base = {probe.tag.multiple: result for probe, result in results if probe.tag.variant == BASE}
        self._depth_heatmap(trainer, task, base, lengths, multiples)
        self._searched_table(trainer, context)

    def _searched_table(self, trainer, context: int) -> None:
        """What each searched extension found: its validation score against its starting candidates', its
        critical dimension (LongRoPE2's) and factors."""
        if not self.searched:
            return
        starts = list(dict.fromkeys(s for r in self.searched.values() for s in r.start))
        rows = [
            [kind, m, m * context, r.fitness, *(r.start.get(s) for s in starts), r.evaluated, r.critical_dim,
             " ".join(map(str, r.factors))]
            for (kind, m), r in sorted(self.searched.items())
        ]  # fmt: skip
        columns = ["variant", "multiple", "length", "val_loss", *(f"val_loss_{s}" for s in starts), "evaluated"]
        self.add_table(trainer, "lengen/searched", [*columns, "critical_dim", "factors"], rows)

    def _depth_heatmap(self, trainer, task, base, lengths, multiples) -> None:
        """Accuracy by answer depth x length (associative recall): the lost-in-the-middle picture."""
        grid = [base[m].buckets.get(f"lengen/depth_acc@{m}x") if m in base else None for m in multiples]
        if not any(grid):
            return
        buckets = len(next(g for g in grid if g))
        rows = [
            [length, b / buckets, acc[b] if acc else None]
            for length, acc in zip(lengths, grid, strict=True)
            for b in range(buckets)
        ]
        self.add_table(trainer, "lengen/acc_by_depth", ["length", "depth", "acc"], rows)
        title = f"{task.encoder.name}: accuracy by depth of the answer"
        self.add_figure(trainer, "lengen/acc_by_depth", plots.depth_heatmap(lengths, grid, title))


class LongDocumentPerplexity(Evaluation):
    """Perplexity against the window's length on the held-out test text as one long document: one test pass
    per length of ``eval.longdoc_lengths`` (sliding windows, :func:`poslab.modalities.text.data.sliding_windows`),
    logged as ``longdoc/loss@<L>`` and ``longdoc/ppl@<L>`` (``exp`` of the mean loss of every scored token),
    with a table, a curve and a figure of perplexity against length."""

    def __init__(self, eval_cfg: dict) -> None:
        super().__init__()
        self.lengths = [int(n) for n in eval_cfg["longdoc_lengths"]]
        self.stride = eval_cfg.get("longdoc_stride")
        self.tokens = int(eval_cfg["longdoc_tokens"])

    def probes(self, trainer, task):
        datamodule = trainer.datamodule
        for length in self.lengths:
            stride = int(self.stride or max(1, length // 2))

            def as_batch(item):
                return {**datamodule.as_batch(item[0]), "scored_from": item[1]}

            yield Probe(f"longdoc/{{}}@{length}", datamodule.longdoc_loader(length, stride, self.tokens),
                        task.longdoc_measure, as_batch, tag=length)  # fmt: skip

    def summarize(self, trainer, task, results) -> None:
        rows, curve = [], {}
        for probe, result in results:
            loss = result.value(f"longdoc/loss@{probe.tag}")
            ppl = None if loss is None else math.exp(loss)
            if ppl is not None:
                self.report["metrics"][f"longdoc/ppl@{probe.tag}"] = ppl
                curve[probe.tag] = {"longdoc/curve/ppl": ppl, "longdoc/curve/loss": loss}
            rows.append([probe.tag, loss, ppl, result.note])
        if not rows:
            return
        self.add_table(trainer, "longdoc/ppl", ["length", "loss", "ppl", "note"], rows)
        self.add_curve(trainer, "longdoc/curve/length", curve)
        lengths = [r[0] for r in rows]
        series = {task.encoder.name: [r[2] for r in rows]}
        if trainer.is_global_zero:
            log_line_chart(trainer.logger, "longdoc/ppl_curve", lengths, series, "perplexity vs window length")
        title = f"{task.encoder.name}: long-document perplexity vs window (trained at {trainer.datamodule.context})"
        self.add_figure(trainer, "longdoc/ppl", plots.length_figure(lengths, series, "ppl", trainer.datamodule.context,
                                                                    title))  # fmt: skip


class PasskeyRetrieval(Evaluation):
    """Passkey retrieval at each length of ``eval.passkey_lengths`` (:mod:`poslab.modalities.text.passkey`):
    one test pass per length, logged as ``passkey/acc@<length>``, with the length x depth table
    ``passkey/acc_by_depth`` and its heatmap."""

    def __init__(self, eval_cfg: dict) -> None:
        super().__init__()
        self.lengths = [int(n) for n in eval_cfg["passkey_lengths"]]
        self.depths, self.trials = int(eval_cfg["passkey_depths"]), int(eval_cfg["passkey_trials"])
        self.unwritable: dict[int, str] = {}  # length -> why its prompts could not be written in the run's tokens

    def probes(self, trainer, task):
        datamodule = trainer.datamodule
        for length in self.lengths:

            def as_batch(item):
                return {**datamodule.as_batch(item[0]), "answer": item[1], "depth": item[2]}

            try:
                loader = datamodule.passkey_loader(length, self.depths, self.trials)
            except DataError as exc:  # a character vocabulary without digits, a length shorter than the prompt
                self.unwritable[length] = str(exc)
                continue

            def measure(batch):
                retrieved = task.passkey_retrieved(batch)
                return {"acc": retrieved, "depth_acc": Buckets(retrieved, batch["depth"], self.depths)}

            yield Probe(f"passkey/{{}}@{length}", loader, measure, as_batch, tag=length)

    def summarize(self, trainer, task, results) -> None:
        lengths = [probe.tag for probe, _ in results]
        grid = [result.buckets.get(f"passkey/depth_acc@{probe.tag}") for probe, result in results]
        positions = passkey.depths(self.depths)
        rows = [
            [n, positions[b], acc[b] if acc else None, result.note]
            for n, acc, (_, result) in zip(lengths, grid, results, strict=True)
            for b in range(self.depths)
        ]
        rows += [[n, None, None, why] for n, why in self.unwritable.items()]
        if rows:
            self.add_table(trainer, "passkey/acc_by_depth", ["length", "depth", "acc", "note"], rows)
        if not any(grid):
            return
        title = f"{task.encoder.name}: passkey retrieval by depth (trained at {trainer.datamodule.context})"
        self.add_figure(trainer, "passkey/acc_by_depth", plots.depth_heatmap(lengths, grid, title))


class SparseFlipFlop(Evaluation):
    """Flip-flop at the training length with writes ``s`` times rarer for each ``s`` in ``eval.sparsity``
    (Liu et al. 2023's sparse test, apart from the length study): one test pass each, logged as
    ``sparse/<metric>@<s>x``."""

    def __init__(self, eval_cfg: dict) -> None:
        super().__init__()
        self.sparsity = [float(s) for s in eval_cfg["sparsity"]]

    def probes(self, trainer, task):
        datamodule = trainer.datamodule
        for sparsity in self.sparsity:
            yield Probe(
                f"sparse/{{}}@{sparsity:g}x",
                datamodule.sparse_loader(sparsity),
                lambda batch: task.lengen_measure(batch, False, datamodule.context),
                datamodule.as_batch,
                tag=sparsity,
            )

    def summarize(self, trainer, task, results) -> None:
        rows = [
            [probe.tag, WRITE_SHARE / probe.tag, result.value(f"sparse/acc@{probe.tag:g}x")]
            for probe, result in results
        ]
        if rows:
            self.add_table(trainer, "sparse/acc", ["sparsity", "write share", "acc"], rows)
