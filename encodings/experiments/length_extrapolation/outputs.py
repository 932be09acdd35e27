"""The outputs: Markdown, JSON, TensorBoard scalars and the loss-per-position image."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from ...harness.performance.plots import PALETTE
from ...harness.verdicts.reports import atomic_write
from .config import ROPE_VARIANTS
from .verdicts import against_nope, past_training, seed_entries, verdicts


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _cell(entries: list[dict], key: str, digits: int = 3) -> str:
    """``mean [min, max]`` of ``key`` over seeds, or the reason it has none."""
    if any("raises" in e for e in entries):
        return "raises"
    values = [e[key] for e in entries]
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{_mean(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def _table(results: dict, rows: list[tuple[str, list[list[dict]]]], lengths: list[int], key: str) -> list[str]:
    L = results["config"]["train_length"]
    header = "| | " + " | ".join(f"{n // L}L = {n}" for n in lengths) + " |"
    lines = [header, "|---|" + "---|" * len(lengths)]
    lines += [f"| {name} | " + " | ".join(_cell(entries, key) for entries in cells) + " |" for name, cells in rows]
    return lines


def _past_training_rows(results: dict, longer: list[int]) -> list[tuple[str, list[list[dict]]]]:
    """Per encoding (and RoPE re-scored by each variant), per length: each seed's loss past L."""
    seeds = len(next(iter(results["runs"].values())))
    names = [(e, e, None) for e in results["runs"]]
    if "rope" in results["runs"]:
        names += [(f"rope, {v}", "rope", v) for v in ROPE_VARIANTS]
    rows = []
    for name, encoding, variant in names:
        cells = []
        for n in longer:
            losses = past_training(results, encoding, n, variant)
            cells.append([{"loss": x} for x in losses] if losses else [{"raises": "cannot run past L"}] * seeds)
        rows.append((name, cells))
    return rows


def _against_nope_lines(results: dict) -> list[str]:
    """One line per encoding: at which lengths it is better and worse than NoPE past L (spread rule)."""
    lines, L = [], results["config"]["train_length"]
    for name, by_length in against_nope(results).items():
        said = [f"{word} at {', '.join(f'{int(n) // L}L' for n in lengths)}"
                for word in ("worse", "better", "overlapping")
                if (lengths := [n for n, w in by_length.items() if w == word])]
        lines.append(f"- {name}: " + "; ".join(said))
    return lines or ["- (no run to compare with NoPE)"]


def markdown_report(results: dict) -> str:
    """``results.md``: loss, R(k) and accuracy per encoding and length (mean [min, max] over seeds),
    the windowed control, RoPE's frequency variants, then the verdicts and their rules."""
    config, chain = results["config"], results["chain"]
    L, runs = config["train_length"], results["runs"]
    lengths = [k * L for k in config["multipliers"]]
    longer = lengths[1:]
    plain = [(e, [seed_entries(results, e, n) for n in lengths]) for e in runs]
    windowed = [(e, [seed_entries(results, e, n, "windowed") for n in longer]) for e in runs]
    lines = [
        "# Length extrapolation",
        "",
        (f"Order-2 Markov chain, vocab {chain['vocab']}, {chain['successors']} successors per context (chain seed "
         f"{chain['seed']}). Entropy floor H(X_t | X_t-2, X_t-1) = **{chain['entropy_floor']:.4f}** nats/token "
         f"(order-1 predictor {chain['order1_entropy']:.4f}, order-0 {chain['order0_entropy']:.4f})."),
        "",
        (f"Models: {config['n_layers']} pre-LN layers, d_model {config['d_model']}, {config['n_heads']} heads, "
         f"trained {config['steps']} steps at L = {L}, batch {config['batch']}, seeds {list(config['seeds'])}. "
         f"Held-out: {config['eval_sequences']} sequences at the longest length, as many tokens at each length. "
         "Cells: mean [min, max] over seeds."),
        "",
        (f"Wall time {results['wall_seconds']:.0f} s on {results['machine']['cpu']} "
         f"({results['machine']['workers']} workers, torch {results['machine']['torch']}"
         + (f"; load average {', '.join(map(str, results['machine']['load_average']))} at the end"
            if results['machine'].get('load_average') else "") + ")."),
        "", "## Loss (nats/token)", "", *_table(results, plain, lengths, "loss"),
        "", "## R(k) = loss(kL) / loss(L)", "", *_table(results, [(e, c[1:]) for e, c in plain], longer, "ratio"),
        "", "## Next-token accuracy", "", *_table(results, plain, lengths, "accuracy"),
        "", f"## Windowed control (keys more than L - 1 = {L - 1} back masked): loss, then R(k)", "",
        "Loss:", "", *_table(results, windowed, longer, "loss"),
        "", "R(k):", "", *_table(results, windowed, longer, "ratio"),
    ]
    if "rope" in runs:
        variants = [(name, [[run["rope_variants"][name][str(n)] for _, run in sorted(runs["rope"].items())]
                            for n in longer]) for name in ROPE_VARIANTS]
        lines += ["", "## RoPE re-scored without retraining (frequencies for k = n / L): loss, then R(k)", "",
                  "Loss:", "", *_table(results, variants, longer, "loss"), "",
                  "R(k) against plain RoPE at L:", "", *_table(results, variants, longer, "ratio")]
    lines += ["", "## Loss on the positions past L only (what EXT-1, EXT-3 and ROPE-14 compare)", "",
              *_table(results, _past_training_rows(results, longer), longer, "loss"),
              "", "## Against NoPE (a model with no positions), on the positions past L", "",
              *_against_nope_lines(results)]
    lines += ["", "## Verdicts", "", "Decided from the losses above by the rules of this version (each rule is stated "
              "with its verdict).", ""]
    for claim, judged in verdicts(results).items():
        verdict = judged.as_dict()
        lines += [f"- **{claim}: {verdict['outcome']}** - rule: {verdict['rule']}.",
                  f"  Evidence: `{json.dumps(_rounded(verdict['evidence']), ensure_ascii=False)}`"]
    return "\n".join(lines) + "\n"


def _rounded(value, digits: int = 4):
    """``value`` with every float rounded, for reading."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v, digits) for v in value]
    return value


def mean_buckets(results: dict) -> dict[str, tuple[int, list[float]]]:
    """Per encoding: the longest length every seed ran and the mean bucket losses there."""
    curves = {}
    for encoding, seeds in results["runs"].items():
        for length in sorted((int(n) for n in next(iter(seeds.values()))["lengths"]), reverse=True):
            entries = seed_entries(results, encoding, length)
            if all("buckets" in e for e in entries):
                curves[encoding] = (length, [_mean(list(b)) for b in zip(*(e["buckets"] for e in entries))])
                break
    return curves


def loss_by_position_plot(results: dict, size: tuple[int, int] = (900, 560)):
    """Mean loss per position bucket (width L) for each encoding, with the entropy floor and L
    marked; linear axes. Returns a ``PIL.Image``."""
    from PIL import Image, ImageDraw, ImageFont

    L, floor = results["config"]["train_length"], results["chain"]["entropy_floor"]
    curves = mean_buckets(results)
    image = Image.new("RGB", size, "white")
    draw, font = ImageDraw.Draw(image), ImageFont.load_default()
    left, right, top, bottom = 70, size[0] - 230, 40, size[1] - 60
    x_max = max(n for n, _ in curves.values())
    values = [v for _, line in curves.values() for v in line] + [floor]
    y_low, y_high = 0.0, max(values) * 1.05

    def at(x, y):
        return left + x / x_max * (right - left), bottom - (y - y_low) / (y_high - y_low) * (bottom - top)

    for i in range(9):
        x, y = x_max * i / 8, y_low + (y_high - y_low) * i / 8
        draw.text((at(x, 0)[0] - 10, bottom + 6), f"{x:.0f}", fill="black", font=font)
        draw.line([left, at(0, y)[1], right, at(0, y)[1]], fill="#e0e0e0")
        draw.text((10, at(0, y)[1] - 6), f"{y:.2f}", fill="black", font=font)
    draw.rectangle([left, top, right, bottom], outline="black")
    draw.line([at(L, y_low), at(L, y_high)], fill="#999999", width=1)
    draw.text((at(L, 0)[0] + 4, top + 4), "L (trained)", fill="#555555", font=font)
    dash = x_max / 64
    for i in range(0, 64, 2):
        draw.line([at(i * dash, floor), at((i + 1) * dash, floor)], fill="black")
    draw.text((right - 120, at(0, floor)[1] - 14), "entropy floor", fill="black", font=font)
    draw.text((left, 12), f"loss per position bucket (width L = {L}), mean over seeds", fill="black", font=font)
    draw.text(((left + right) // 2 - 30, bottom + 28), "position", fill="black", font=font)
    for i, (name, (length, line)) in enumerate(curves.items()):
        color = PALETTE[i % len(PALETTE)]
        xy = [at(min(b * L + L / 2, length), v) for b, v in enumerate(line)]
        if len(xy) > 1:
            draw.line(xy, fill=color, width=2)
        for px, py in xy:
            draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=color)
        label = name if length == x_max else f"{name} (runs to {length})"
        draw.rectangle([right + 16, top + 16 * i + 2, right + 28, top + 16 * i + 12], fill=color)
        draw.text((right + 34, top + 16 * i), label, fill="black", font=font)
    return image


def _by_length(key: str, *section: str):
    """Reads ``{length: value or None}`` of ``key`` from the per-length entries at ``run[section…]``."""
    def read(run: dict) -> dict[int, float | None]:
        for part in section:
            run = run[part]
        return {int(n): entry.get(key) for n, entry in run.items()}
    return read


SCALARS = {
    "loss_vs_length": _by_length("loss", "lengths"),
    "ratio_vs_length": _by_length("ratio", "lengths"),
    "accuracy_vs_length": _by_length("accuracy", "lengths"),
    "windowed_loss_vs_length": _by_length("loss", "windowed"),
    "train_loss": lambda run: {step: loss for step, loss in run["train"]["curve"]},
}


def _mean_series(runs: list[dict], read) -> dict[int, float]:
    """``{step: mean over runs}`` of ``read(run)``, leaving out steps where any run has no value (it raised)."""
    series = [read(run) for run in runs]
    return {step: _mean([s[step] for s in series]) for step in series[0]
            if all(s.get(step) is not None for s in series)}


def write_tensorboard(results: dict, logdir: Path, image) -> None:
    """Scalars ``extrapolation/<quantity>/<encoding>`` against the evaluation length (the training
    loss against the step) and ``extrapolation/rope_variants/<variant>``: one run per seed
    (``seed<k>``) and one for the mean over seeds (``mean``, with the loss-per-position image).
    A rerun replaces the whole folder: no run of an earlier experiment (another seed count) is left."""
    from torch.utils.tensorboard import SummaryWriter

    shutil.rmtree(logdir, ignore_errors=True)
    runs = results["runs"]
    seeds = sorted(next(iter(runs.values())))
    for run_name, chosen in [*((f"seed{s}", [s]) for s in seeds), ("mean", seeds)]:
        with SummaryWriter(log_dir=str(logdir / run_name)) as writer:
            for encoding, by_seed in runs.items():
                picked = [by_seed[s] for s in chosen]
                tags = {f"{quantity}/{encoding}": read for quantity, read in SCALARS.items()}
                if "rope_variants" in picked[0]:
                    tags.update({f"rope_variants/{name}": _by_length("loss", "rope_variants", name)
                                 for name in ROPE_VARIANTS})
                for tag, read in tags.items():
                    for step, value in _mean_series(picked, read).items():
                        writer.add_scalar(f"extrapolation/{tag}", value, global_step=step)
            if run_name == "mean":
                pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
                writer.add_image("extrapolation/loss_by_position", pixels.view(image.height, image.width, 3),
                                 dataformats="HWC")


def write_outputs(results: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write ``results.json``, ``results.md``, ``loss_by_position.png`` and ``tensorboard/``; returns the paths."""
    out = Path(out_dir)
    paths = {"json": out / "results.json", "markdown": out / "results.md", "png": out / "loss_by_position.png",
             "tensorboard": out / "tensorboard"}
    atomic_write(paths["json"], json.dumps(results, indent=1) + "\n")
    atomic_write(paths["markdown"], markdown_report(results))
    image = loss_by_position_plot(results)
    image.save(paths["png"])
    write_tensorboard(results, paths["tensorboard"], image)
    return paths
