"""Speed of the speech task on this machine (a benchmark, not a test): run it on an idle machine.

    python benchmarks/speech.py                      # the quick start's corpus and model, 2 threads
    python benchmarks/speech.py --steps 20 --utterances 100   # a quick check

Prints, as a table and JSON:
  features     log-mel extraction (reading, resampling, filterbank) in seconds of audio per second
  training     training steps of the quick start's model (batch 32), seconds of audio per second
  decoding     real-time factor (decoding seconds per second of audio) of greedy search and beam 5,
               batches of 64 utterances and one utterance at a time
  memory       peak resident memory of the process (MB)
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import attnmt  # noqa: E402, F401 (before torch, so that OpenMP's threads wait as in attnmt's commands)
import torch  # noqa: E402

from attnmt.core.config import config_from_dict  # noqa: E402
from attnmt.speech import corpora as speech  # noqa: E402
from attnmt.speech.audio import audio_features, read_speech_tsv  # noqa: E402
from attnmt.speech.quickstart import speech_config  # noqa: E402
from attnmt.speech.training import speech_parts  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def features_speed(tsv: Path, settings, count: int) -> tuple[list, float]:
    paths, _ = read_speech_tsv(tsv)
    start = time.perf_counter()
    features = [audio_features(tsv.parent / p, settings, p) for p in paths[:count]]
    seconds = time.perf_counter() - start
    audio = sum(f.size(0) for f in features) * settings.hop_ms / 1000
    return features, audio / seconds


def training_speed(parts, steps: int, hop_ms: float) -> float:
    model, loss, optimizer = parts.setup.model, parts.setup.loss, parts.setup.optimizer
    model.train()
    batches = [list(range(i * 32, (i + 1) * 32)) for i in range(steps)]
    audio, start = 0.0, time.perf_counter()
    for indices in batches:
        indices = [i % len(parts.sizes) for i in indices]
        batch = parts.make_batch(indices)
        total, tokens = loss(batch)
        optimizer.zero_grad()
        (total / tokens).backward()
        optimizer.step()
        audio += sum(parts.sizes[i] for i in indices) * hop_ms / 1000
    return audio / (time.perf_counter() - start)


def real_time_factor(recognizer, features: list, beam: int, batch_size: int) -> float:
    audio = sum(f.size(0) for f in features) * recognizer.config.speech.hop_ms / 1000
    start = time.perf_counter()
    recognizer.transcribe_features(features, beam=beam, batch_size=batch_size)
    return (time.perf_counter() - start) / audio


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="runs/quickstart-speech/data", help="spoken corpus (made if absent)")
    parser.add_argument("--utterances", type=int, default=300, help="utterances for features and decoding")
    parser.add_argument("--steps", type=int, default=100, help="training steps timed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--model",
        default="runs/quickstart-speech/model",
        help="trained speech model whose decoding is timed (default: the quick start's); if absent, "
        "the model trained for --steps here, whose outputs may run to the length limit",
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    from requirements import check, program

    made = all((Path(args.data) / f"{name}.tsv").is_file() for name in ("train", "dev", "test"))
    check(
        "benchmarks/speech.py",
        None if made else program("espeak-ng", f"synthesizes the spoken corpus into {args.data}", apt="espeak-ng"),
    )
    torch.set_num_threads(args.threads)
    data = speech.write_spoken_corpus(Path(args.data))
    folder = Path(args.data).resolve().parent / "benchmark"
    config = config_from_dict(speech_config(folder, data, args.steps, "location"), Path("."))

    features, extraction = features_speed(data["test"], config.speech, args.utterances)
    parts = speech_parts(config, torch.device("cpu"), log=lambda m: None)
    training = training_speed(parts, args.steps, config.speech.hop_ms)

    from attnmt.core.checkpoint import save_model
    from attnmt.speech.recognizer import Recognizer

    model_dir = Path(args.model)
    if not (model_dir / "config.yaml").is_file():
        save_model(parts.setup.model, config.experiment_dir / "best.safetensors")
        model_dir = config.experiment_dir
    recognizer = Recognizer(model_dir)
    results = {
        "threads": args.threads,
        "utterances": len(features),
        "decoding_model": str(model_dir),
        "features_audio_seconds_per_second": round(extraction, 1),
        "training_audio_seconds_per_second": round(training, 2),
    }
    for beam in (1, 5):
        for batch in (64, 1):
            results[f"rtf_beam{beam}_batch{batch}"] = round(real_time_factor(recognizer, features, beam, batch), 4)
    results["peak_memory_mb"] = round(peak_mb())
    for key, value in results.items():
        print(f"{key:38} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
