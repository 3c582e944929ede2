"""`attnmt info MODEL_DIR`: what a trained model folder holds, without translating anything:
its task and model, its size (parameters, vocabularies), the data it was trained on (or, for a model
that attnmt import made, where it came from), how far it was trained, and its scores (the best
validation and the test sets, from metrics.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from attnmt.core.checkpoint import read_info, read_trainer_state
from attnmt.core.folders import inside_folder, kept_checkpoints, load_folder
from attnmt.core.task import task_of
from attnmt.translation.marian import IMPORTED

MAX_IMPORTED_BYTES = 1_000_000  # imported.json: attnmt import's record of a model's origin

# Fields of a metrics record that are bookkeeping, not scores
NOT_SCORES = {"type", "step", "epoch", "seconds", "lr", "best", "name", "sentences", "beam", "utterances"}


def model_info(folder: str | Path) -> dict:
    """A JSON-serialisable summary of a trained model folder (AttnmtError if it is not one)."""
    folder = Path(folder)
    model = load_folder(folder)  # checks the folder, the config and the weights' checksum
    config = model.config
    info = {
        "folder": str(folder),
        "task": config.task,
        "model": task_of(config.task).architecture(config),
        "parameters": sum(p.numel() for p in model.model.parameters()),
        "vocabularies": _vocabularies(model),
    }
    imported = _imported(folder)
    if imported is not None:  # never trained here: its config's data section is a placeholder
        info["imported_from"] = imported
    else:
        info["data"] = _data(config)
    last = inside_folder(folder, folder / "last.safetensors")
    if last.is_file():
        state = read_trainer_state(last)
        minutes = round(state["seconds"] / 60, 2)
        tc = config.training
        start = None if tc.init_from is None else f"{tc.init_from} ({tc.init_checkpoint})"
        info["training"] = {
            "steps": state["step"],
            "epochs": state["epoch"],
            "minutes": minutes,
            "stopped_early": bool(state.get("stopped_early")),
            "fine_tuned_from": start,
        }
    info["checkpoints"] = _checkpoints(folder)
    info["scores"] = _scores(inside_folder(folder, folder / "metrics.jsonl"))
    return info


def _imported(folder: Path) -> str | None:
    """Where an imported model came from (the folder or hub name given to attnmt import), or None."""
    path = inside_folder(folder, folder / IMPORTED)
    if not path.is_file() or path.stat().st_size > MAX_IMPORTED_BYTES:
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    source = record.get("source") if isinstance(record, dict) else None
    return f"{source} (a Marian model, by attnmt import)" if isinstance(source, str) else None


def _checkpoints(folder: Path) -> dict:
    """The steps of the checkpoints kept for averaging (training.keep_checkpoints) and of those
    that averaged.safetensors averages (attnmt average)."""
    found = {}
    if kept := kept_checkpoints(folder):
        found["kept"] = list(kept)
    averaged = inside_folder(folder, folder / "averaged.safetensors")
    if averaged.is_file():
        found["averaged"] = read_info(averaged).get("averaged_steps", [])
    return found


def _vocabularies(model) -> dict:
    """Sizes of the vocabularies: source and target, or one joint (and a classifier's labels)."""
    kind = model.config.data.subwords.type
    if hasattr(model, "labels"):  # a sentence-pair classifier: one vocabulary, and the classes
        return {"joint": len(model.subwords), "type": kind, "labels": list(model.labels)}
    if model.src_subwords is model.tgt_subwords:
        return {"joint": len(model.src_subwords), "type": kind}
    sizes = {"source": model.src_subwords, "target": model.tgt_subwords}  # speech: no source vocabulary
    return {**{side: len(v) for side, v in sizes.items() if v is not None}, "type": kind}


def _files(files) -> str:
    if getattr(files, "split", None) is not None:
        return f"{files.split} pairs held out of the training data"
    if getattr(files, "tsv", None) is not None:
        return str(files.tsv)
    return f"{files.src} + {files.tgt}"


def _data(config) -> dict:
    data = config.data
    sets = {"train": _files(data.train)}
    for i, files in enumerate(getattr(data, "extra_train", ())):  # (task: pairs has none)
        how = [f"tagged {files.tag}"] * (files.tag is not None) + [f"{files.repeat} times"] * (files.repeat > 1)
        sets[f"extra train {i + 1}"] = _files(files) + (f" ({', '.join(how)})" if how else "")
    if data.dev is not None:
        sets["dev"] = _files(data.dev)
    sets.update({f"test {name}": _files(files) for name, files in data.test.items()})
    return sets


def _scores(metrics: Path) -> dict:
    """The best validation record (the last marked best) and each test set's latest record."""
    scores = {}
    if not metrics.is_file():
        return scores
    for line in metrics.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash: the others still count
        if not isinstance(record, dict):
            continue
        values = {k: v for k, v in record.items() if k not in NOT_SCORES and isinstance(v, (int, float))}
        if record.get("type") == "valid" and record.get("best"):
            scores["best validation"] = {"step": record.get("step"), **values}
        elif record.get("type") == "test":
            scores[f"test {record.get('name', '')}".strip()] = values
    return scores


def format_info(info: dict) -> str:
    """The summary as aligned "name  value" lines."""
    vocab = info["vocabularies"]
    sizes = ", ".join(f"{side} {vocab[side]:,}" for side in ("source", "target", "joint") if side in vocab)
    rows = [
        ("folder", info["folder"]),
        ("task", info["task"]),
        ("model", info["model"]),
        ("parameters", f"{info['parameters']:,}"),
        ("vocabularies", f"{sizes} ({vocab['type']} pieces)"),
    ]
    if "labels" in vocab:
        rows.append(("labels", ", ".join(vocab["labels"])))
    if "imported_from" in info:
        rows.append(("imported from", info["imported_from"]))
    rows += [(f"data {name}", files) for name, files in info.get("data", {}).items()]
    if "training" in info:
        t = info["training"]
        rows.append(
            (
                "trained",
                f"{t['steps']:,} steps (epoch {t['epochs']}), {t['minutes']:.1f} minutes"
                f"{', stopped early' if t['stopped_early'] else ''}",
            )
        )
        if t["fine_tuned_from"]:
            rows.append(("fine-tuned from", t["fine_tuned_from"]))
    for name, steps in info["checkpoints"].items():
        rows.append((f"checkpoints {name}", "steps " + ", ".join(f"{step:,}" for step in steps)))
    for name, values in info["scores"].items():
        rows.append((name, ", ".join(f"{k} {_number(v)}" for k, v in values.items())))
    if not info["scores"]:
        rows.append(("scores", "none recorded (no metrics.jsonl)"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _number(value) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"
