"""The pure parts of benchmarks/peers.py: log parsing, config rendering, the ratio table (no installs)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import require

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("peers_benchmark", REPO / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)

# Lines as OpenNMT-py 3.5.1 writes them (report every 10 steps, validation every 50).
ONMT_LOG = """\
[2026-11-22 19:00:01,204 INFO] Start training loop and validate every 50 steps...
[2026-11-22 19:00:01,210 INFO] Scoring with: TransformPipe()
[2026-11-22 19:00:07,904 INFO] Step 10/1000000; acc: 2.9; ppl: 7751.2; xent: 9.0; lr: 0.00050; sents:     640; \
bsz:   23/  16/64; 2291/1574 tok/s;      7 sec;
[2026-11-22 19:00:33,517 INFO] Step 50/1000000; acc: 11.3; ppl: 741.0; xent: 6.6; lr: 0.00050; sents:     640; \
bsz:   24/  17/64; 2401/1626 tok/s;     32 sec;
[2026-11-22 19:00:40,001 INFO] UPDATING VALIDATION BLEU
[2026-11-22 19:00:40,002 INFO] validation BLEU: 0.8731
[2026-11-22 19:00:40,010 INFO] Train perplexity: 2100.3
[2026-11-22 19:00:40,011 INFO] Validation perplexity: 611.9
[2026-11-22 19:00:46,322 INFO] Step 60/1000000; acc: 12.0; ppl: 600.1; xent: 6.4; lr: 0.00050; sents:     640; \
bsz:   25/  17/64; 1100/ 750 tok/s;     45 sec;
[2026-11-22 19:01:10,004 INFO] Step 100/1000000; acc: 14.0; ppl: 420.5; xent: 6.0; lr: 0.00050; sents:     640; \
bsz:   24/  16/64; 2350/1650 tok/s;     69 sec;
[2026-11-22 19:01:16,100 INFO] validation BLEU: 3.5012
[2026-11-22 19:01:16,200 INFO] Saving checkpoint /w/onmt/model/rnn_step_100.pt
"""

# Lines as JoeyNMT 2.3.0 writes them (logging every 10 steps, validation every 50).
JOEY_LOG = """\
2026-11-22 19:10:00,000 - INFO - joeynmt.training - Train stats:
2026-11-22 19:10:02,500 - INFO - joeynmt.training - EPOCH 1
2026-11-22 19:10:14,100 - INFO - joeynmt.training - Epoch   1, Step:       10, Batch Loss:   102.312683, \
Batch Acc: 0.011927, Tokens per Sec:      905, Lr: 0.000500
2026-11-22 19:11:02,500 - INFO - joeynmt.training - Epoch   1, Step:       50, Batch Loss:    80.100000, \
Batch Acc: 0.080000, Tokens per Sec:      915, Lr: 0.000500
2026-11-22 19:11:02,600 - INFO - joeynmt.prediction - Predicting 1014 example(s)... (Greedy decoding with \
min_output_length=1, max_output_length=100, return_prob='none', generate_unk=True, repetition_penalty=-1, \
no_repeat_ngram_size=-1)
2026-11-22 19:11:20,000 - INFO - joeynmt.prediction - Evaluation result (greedy): bleu:   1.25, chrf:  17.30, \
loss:  75.10, ppl: 240.00, acc:   0.12, 17.2000[sec]
2026-11-22 19:11:20,100 - INFO - joeynmt.training - Hooray! New best validation result [bleu]!
2026-11-22 19:11:32,500 - INFO - joeynmt.training - Epoch   1, Step:       60, Batch Loss:    78.000000, \
Batch Acc: 0.090000, Tokens per Sec:      920, Lr: 0.000500
"""


def test_onmt_log_gives_last_step_its_seconds_tokens_and_validation_by_step():
    parsed = peers.parse_onmt_log(ONMT_LOG)
    assert parsed["steps"] == 100
    assert parsed["seconds"] == 69
    assert parsed["tokens_per_s"] == pytest.approx((1574 + 1626 + 750 + 1650) / 4)
    assert parsed["validation"] == [{"step": 50, "bleu": 0.8731}, {"step": 100, "bleu": 3.5012}]


def test_joey_log_gives_last_step_seconds_from_epoch_1_tokens_and_validation_by_step():
    parsed = peers.parse_joey_log(JOEY_LOG)
    assert parsed["steps"] == 60
    assert parsed["seconds"] == pytest.approx(90.0)  # 19:11:32.5 - 19:10:02.5
    assert parsed["tokens_per_s"] == pytest.approx((905 + 915 + 920) / 3)
    assert parsed["validation"] == [{"step": 50, "bleu": 1.25}]


def test_logs_without_a_step_give_no_figures():
    assert peers.parse_onmt_log("[2026-11-22 19:00:01,204 INFO] Loading vocab\n")["steps"] == 0
    assert peers.parse_joey_log("2026-11-22 19:10:02,500 - INFO - joeynmt.training - EPOCH 1\n")["seconds"] is None


def test_training_figures_count_64_sentences_a_step_over_the_logged_seconds():
    figures = peers.training_figures(peers.parse_onmt_log(ONMT_LOG), {"peak_rss_gb": 1.5}, Path("log"))
    assert figures["sentences_per_s"] == pytest.approx(100 * 64 / 69)
    assert (figures["valid_bleu_end"], figures["valid_step_end"], figures["peak_rss_gb"]) == (3.5012, 100, 1.5)


def test_render_replaces_anchors_and_keeps_the_text_without_overrides(tmp_path):
    text = '# comment kept\nmodel_dir: "<anchors>/joey/model"\ntraining:\n    validation_freq: 500\n'
    assert peers.render(text, tmp_path) == text.replace("<anchors>", str(tmp_path.resolve()))
    changed = yaml.safe_load(peers.render(text, tmp_path, {"training.validation_freq": 50}))
    assert changed == {"model_dir": f"{tmp_path.resolve()}/joey/model", "training": {"validation_freq": 50}}


def test_intervals_are_the_peers_own_at_20_minutes_and_fewer_steps_for_short_budgets():
    assert peers.intervals(20) == {"log": 100, "validate": 500, "save": 500}
    assert peers.intervals(60) == {"log": 100, "validate": 500, "save": 500}
    assert peers.intervals(3) == {"log": 10, "validate": 50, "save": 10}  # a checkpoint near the end
    assert peers.intervals(10) == {"log": 50, "validate": 250, "save": 50}


def test_rendered_peer_configs_have_no_anchor_left_and_short_budget_intervals(tmp_path):
    require(
        peers.PEER_CONFIGS.is_dir(),
        f"{peers.PEER_CONFIGS} not found: the peers' configurations live in ../shared/peers beside the checkout",
    )
    paths = peers.render_configs(tmp_path, 3, "uniform-init")
    texts = {name: path.read_text() for name, path in paths.items()}
    assert not any("<anchors>" in text for text in texts.values())
    onmt = yaml.safe_load(texts["opennmt-train"])
    assert (onmt["valid_steps"], onmt["save_checkpoint_steps"], onmt["report_every"]) == (50, 10, 10)
    assert onmt["src_vocab"] == f"{tmp_path.resolve()}/onmt/vocab.shared"
    joey = yaml.safe_load(texts["joeynmt-train"])
    assert joey["model"]["initializer"] == "uniform"
    greedy, beam5 = yaml.safe_load(texts["joeynmt-greedy"]), yaml.safe_load(texts["joeynmt-beam5"])
    assert (greedy["testing"]["beam_size"], beam5["testing"]["beam_size"]) == (1, 5)
    assert beam5["testing"]["load_model"] == f"{joey['model_dir']}/best.ckpt"  # the model this run trains
    full = peers.render_configs(tmp_path / "full", 20, "default")
    source = (peers.PEER_CONFIGS / "opennmt-rnn_de_en.yaml").read_text()
    assert full["opennmt-train"].read_text() == source.replace("<anchors>", str((tmp_path / "full").resolve()))


def test_table_has_a_ratio_column_per_peer_and_marks_missing_figures():
    systems = {
        "attnmt": {"sentences_per_s": 80.0, "steps": 1400, "peak_rss_gb": 2.0, "bleu_beam5": 33.0},
        "opennmt": {"sentences_per_s": 100.0, "steps": 2000, "peak_rss_gb": 4.0, "bleu_beam5": None},
        "joeynmt": {"sentences_per_s": 40.0, "steps": 700, "peak_rss_gb": 1.0, "bleu_beam5": 6.0},
    }
    lines = peers.table(systems).splitlines()
    assert lines[0] == (
        "| figure | attnmt | OpenNMT-py 3.5.1 | JoeyNMT 2.3.0 | attnmt / OpenNMT-py | attnmt / JoeyNMT |"
    )
    assert "| training sentences/s | 80 | 100 | 40 | 0.80 | 2.00 |" in lines
    assert "| steps | 1,400 | 2,000 | 700 | 0.70 | 2.00 |" in lines
    assert "| training peak RSS GB (lower is better) | 2.00 | 4.00 | 1.00 | 0.50 | 2.00 |" in lines
    assert "| test_2016 BLEU beam 5 | 33.0 | — | 6.0 | — | 5.50 |" in lines
    assert len(lines) == 2 + len(peers.ROWS)


def test_cheaper_inference_rows_compare_with_the_peers_float32_figures():
    systems = {
        "attnmt": {
            "decode_beam5": 80.0,
            "decode_beam5_bf16": 120.0,
            "bleu_beam5_int8": 36.0,
            "decode_beam5_only": 90.0,
            "decode_beam5_shortlist_only": 150.0,
        },
        "opennmt": {"decode_beam5": 40.0, "bleu_beam5": 30.0, "decode_beam5_only": 50.0},
    }
    lines = peers.table(systems).splitlines()
    assert "| decode sent/s beam 5, batch 64, whole command | 80 | 40 | 2.00 |" in lines
    assert "| decode sent/s beam 5, batch 64, decoding only | 90 | 50 | 1.80 |" in lines
    assert (
        "| decode sent/s beam 5, batch 64, attnmt --bf16, whole command (peers: float32) | 120 | 40 | 3.00 |" in lines
    )
    assert "| test_2016 BLEU beam 5, attnmt --int8 (int8 linear layers; peers: float32) | 36.0 | 30.0 | 1.20 |" in lines
    # decoding alone beside the peer's decoding alone, not beside its whole command
    assert "| decode sent/s beam 5, batch 64, attnmt --shortlist, decoding only | 150 | 50 | 3.00 |" in lines


def test_table_of_peers_alone_has_no_ratio_column():
    header = peers.table({"joeynmt": {"steps": 700}}).splitlines()[0]
    assert header == "| figure | JoeyNMT 2.3.0 |"


def test_only_accepts_the_three_systems():
    assert peers.parse_args(["--only", "opennmt, joeynmt"]).systems == ["opennmt", "joeynmt"]
    with pytest.raises(SystemExit):
        peers.parse_args(["--only", "marian"])


@pytest.mark.slow
def test_machine_speed_probe_gives_the_gflops_of_its_products():
    gflops = peers.machine_speed(seconds=0.2)
    assert isinstance(gflops, float) and 0.1 < gflops < 100_000


# ---------------------------------------------------------------------------------------------- --device cuda
# The parts of the GPU run that need no GPU: rendering, nvidia-smi's output, the stubs, the table.


def test_cuda_rendering_puts_opennmt_on_gpu_0_with_the_peers_intervals_and_no_joeynmt(tmp_path):
    require(
        peers.PEER_CONFIGS.is_dir(),
        f"{peers.PEER_CONFIGS} not found: the peer configurations are ../shared/peers beside the checkout",
    )
    paths = peers.render_configs(tmp_path, 2, "default", peers.PEER_CONFIGS, "cuda")
    assert set(paths) == {"opennmt-train", "opennmt-greedy", "opennmt-beam5"}
    onmt = yaml.safe_load(paths["opennmt-train"].read_text())
    assert (onmt["gpu_ranks"], onmt["world_size"]) == ([0], 1)
    assert (onmt["valid_steps"], onmt["save_checkpoint_steps"], onmt["report_every"]) == (500, 100, 100)
    source = yaml.safe_load((peers.PEER_CONFIGS / "opennmt-rnn_de_en.yaml").read_text())
    for key in ("batch_size", "batch_type", "rnn_type", "global_attention", "learning_rate", "dropout", "seed"):
        assert onmt[key] == source[key]  # the shared configuration otherwise
    assert onmt["src_vocab"] == f"{tmp_path.resolve()}/onmt/vocab.shared"
    for search, beam in (("greedy", 1), ("beam5", 5)):
        decode = yaml.safe_load(paths[f"opennmt-{search}"].read_text())
        assert (decode["gpu"], decode["beam_size"], decode["batch_size"]) == (0, beam, 64)
    assert peers.intervals(20, "cuda") == {"log": 100, "validate": 500, "save": 500}


def test_cuda_commands_use_this_python_with_the_stubs_first():
    work = Path("/w")
    assert peers.onmt_command(work, "train", "cuda") == [peers.sys.executable, "-m", "onmt.bin.train"]
    assert peers.onmt_command(work, "translate") == [work / "venv-opennmt" / "bin" / "onmt_translate"]
    env = peers.onmt_env(work, "cuda")
    assert env["PYTHONPATH"].split(peers.os.pathsep)[0] == "/w/stubs"
    assert env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"
    assert "PYTHONPATH" not in peers.onmt_env() or peers.onmt_env()["PYTHONPATH"] == peers.os.environ["PYTHONPATH"]
    cmd = [str(c) for c in peers.attnmt_command(Path("/w/attnmt-tokens"), 2, "cuda", Path("/d"), 5000)]
    assert cmd[cmd.index("--device") + 1] == "cuda" and cmd[cmd.index("--data") + 1] == "/d"
    assert cmd[cmd.index("--batch-tokens") + 1] == "5000" and cmd[cmd.index("--validate-every") + 1] == "500"
    cpu = [str(c) for c in peers.attnmt_command(Path("/w/attnmt"), 2)]
    assert "--device" not in cpu and "--batch-tokens" not in cpu  # the CPU command as before


def test_cuda_arguments_run_attnmt_twice_and_opennmt_and_refuse_joeynmt():
    args = peers.parse_args(["--device", "cuda", "--minutes", "2"])
    assert args.systems == ["attnmt", "attnmt_tokens", "opennmt"] and args.batch_tokens == 5000
    assert args.work.endswith("peers-cuda")
    assert peers.parse_args(["--device", "cuda", "--batch-tokens", "0"]).systems == ["attnmt", "opennmt"]
    assert peers.parse_args([]).systems == ["attnmt", "opennmt", "joeynmt"]  # the CPU run as before
    data = peers.parse_args(["--device", "cuda", "--data", ".peers-data", "--peer-configs", ".peers-data/peers"])
    assert data.data == Path(".peers-data").resolve() and data.peer_configs == Path(".peers-data/peers").resolve()
    with pytest.raises(SystemExit):
        peers.parse_args(["--device", "cuda", "--only", "opennmt,joeynmt"])
    # a system a command, for budgets that do not fit one command
    assert peers.parse_args(["--device", "cuda", "--only", "attnmt"]).systems == ["attnmt"]
    assert peers.parse_args(["--device", "cuda", "--only", "attnmt_tokens"]).systems == ["attnmt_tokens"]
    with pytest.raises(SystemExit):
        peers.parse_args(["--only", "attnmt_tokens"])  # on the CPU, without --batch-tokens


def test_nvidia_smi_lines_give_utilisation_and_memory_per_gpu():
    assert peers.parse_nvidia_smi("13, 2048\n") == [(13.0, 2048.0)]
    assert peers.parse_nvidia_smi("85, 70123\n0, 1\n\n") == [(85.0, 70123.0), (0.0, 1.0)]
    assert peers.parse_nvidia_smi("[N/A], 512\n") == [(None, 512.0)]
    assert peers.parse_nvidia_smi("") == []
    with pytest.raises(ValueError):
        peers.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 580.159.04, 3\n")
    assert peers.parse_gpu_info("NVIDIA H100 80GB HBM3, 580.159.04\n") == {
        "gpu": "NVIDIA H100 80GB HBM3",
        "driver": "580.159.04",
    }


def test_gpu_sampler_reads_in_the_background_and_sums_up_a_window(tmp_path):
    with peers.GpuSampler(interval=0.02, command=["echo", "40, 1024"], csv=tmp_path / "gpu.csv") as sampler:
        peers.time.sleep(0.2)
    assert len(sampler.samples) >= 2 and not sampler.errors
    assert sampler.summary() == {"util": 40.0, "mem_gb": 1.0, "samples": len(sampler.samples)}
    assert (tmp_path / "gpu.csv").read_text().splitlines()[1].endswith(",40,1024")
    sampler.samples = [(10.0, 0.0, 1024.0), (10.5, 60.0, 2048.0), (11.0, 80.0, 4096.0), (11.5, None, 512.0)]
    assert sampler.summary(10.4, 11.6) == {"util": 70.0, "mem_gb": 4.0, "samples": 3}
    assert sampler.summary(20, 30) == {"util": None, "mem_gb": None, "samples": 0}
    figures = peers.gpu_figures(sampler, "train", 10.4, 11.1)
    assert figures == {"gpu_util_train": 70.0, "gpu_mem_train_gb": 4.0, "gpu_samples_train": 2}
    decoding = peers.gpu_figures(sampler, "beam5", 11.2, 11.6, memory_over_all=True)
    assert decoding == {"gpu_util_beam5": None, "gpu_mem_beam5_gb": 4.0, "gpu_samples_beam5": 1}
    assert peers.gpu_figures(sampler, "train", None, None)["gpu_util_train"] is None  # no window: no mean
    with peers.GpuSampler(interval=0.02, command=["false"]) as failing:
        peers.time.sleep(0.05)
    assert not failing.samples and failing.errors and failing.summary()["util"] is None


def test_stubs_say_they_were_imported_and_fail_with_a_marker_when_used(tmp_path):
    stubs = peers.write_stubs(tmp_path)
    code = (
        "import spacy, fasttext\n"
        "assert not hasattr(spacy, '__version__')\n"  # introspection: no use
        "try:\n    spacy.load('en_core_web_sm')\nexcept AttributeError as e:\n    print('failed:', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(stubs)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "peers.py stub: spacy imported" in done.stderr and "peers.py stub: fasttext imported" in done.stderr
    assert "failed: spacy.load: spacy is a stub of benchmarks/peers.py" in done.stdout
    log = tmp_path / "opennmt-train.log"
    log.write_text(done.stderr)
    assert peers.stub_uses(log) == ["peers.py stub used: spacy.load"]
    log.write_text("peers.py stub: spacy imported (by OpenNMT-py at start-up; not used by this benchmark)\n")
    assert peers.stub_uses(log, tmp_path / "absent.log") == []


def test_onmt_report_time_gives_the_decoding_seconds_and_their_window():
    text = (
        "[2026-11-26 10:00:00,000 INFO] Loading checkpoint from rnn_step_900.pt\n"
        "[2026-11-26 10:00:04,500 INFO] PRED SCORE: -0.3, PRED PPL: 1.35 NB SENTENCES: 1000\n"
        "[2026-11-26 10:00:04,500 INFO] Total translation time (s): 1.8\n"
        "[2026-11-26 10:00:04,501 INFO] Average translation time (ms): 1.8\n"
        "Time w/o python interpreter load/terminate:  6.2\n"
    )
    report = peers.parse_onmt_translate_log(text)
    assert report["seconds"] == 1.8
    end = peers.joey_time("2026-11-26 10:00:04,500")
    assert report["window"] == [pytest.approx(end - 1.8), end]
    assert peers.parse_onmt_translate_log("no report\n") == {"seconds": None, "window": None}


def test_gpu_table_has_gpu_rows_and_a_ratio_column_per_attnmt_run():
    systems = {
        "attnmt": {
            "sentences_per_s": 2400.0,
            "gpu_util_train": 65.0,
            "gpu_mem_train_gb": 2.5,
            "decode_beam5_only": 1200.0,
            "decode_beam5": 300.0,
            "batch_tokens": None,
        },
        "attnmt_tokens": {"sentences_per_s": 4800.0, "gpu_util_train": 80.0, "batch_tokens": 5000},
        "opennmt": {
            "sentences_per_s": 800.0,
            "gpu_util_train": 20.0,
            "gpu_mem_train_gb": 5.0,
            "decode_beam5_only": 600.0,
            "decode_beam5": 100.0,
        },
    }
    lines = peers.table(systems, peers.GPU_ROWS).splitlines()
    assert lines[0] == (
        "| figure | attnmt | attnmt, batch_tokens 5,000 | OpenNMT-py 3.5.1 | attnmt / OpenNMT-py "
        "| attnmt tokens / OpenNMT-py |"
    )
    assert "| training sentences/s | 2400 | 4800 | 800 | 3.00 | 6.00 |" in lines
    assert "| GPU utilisation while training, mean % (nvidia-smi every 0.5 s) | 65 | 80 | 20 | 3.25 | 4.00 |" in lines
    assert (
        "| GPU memory while training, peak GB (nvidia-smi memory.used; lower is better) | 2.5 | — | 5.0 | 0.50 | — |"
    ) in lines
    assert "| decode sent/s beam 5, batch 64, decoding only | 1200 | — | 600 | 2.00 | — |" in lines
    assert (
        "| decode sent/s beam 5, batch 64, whole command (start-up and model loading included) | 300 | — | 100 "
        "| 3.00 | — |"
    ) in lines
    assert len(lines) == 2 + len(peers.GPU_ROWS)
    assert not any("GFLOP" in line or "--int8" in line for line in lines)  # the CPU's rows


def test_run_py_writes_a_cuda_config_with_token_batches_and_the_given_data(tmp_path):
    spec = importlib.util.spec_from_file_location("run_benchmark", REPO / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    from attnmt.core.config import load_config

    args = SimpleNamespace(
        config=str(REPO / "configs" / "rnn-bahdanau.yaml"),
        minutes=2.0,
        threads=2,
        precision="bf16",
        validate_every=500,
        device="cuda",
        batch_tokens=5000,
        data=str(tmp_path / "multi30k"),
    )
    config = load_config(run.write_config(args, tmp_path / "out"))
    assert (config.training.device, config.training.precision, config.data.batch_tokens) == ("cuda", "bf16", 5000)
    assert config.data.train.src == tmp_path / "multi30k" / "train.de.gz"
    assert config.data.dev.tgt == tmp_path / "multi30k" / "val.en.gz"
    assert config.experiment_dir == tmp_path / "out" / "model" and config.training.max_minutes == 2.0


def test_run_py_decodes_each_time_in_a_fresh_process():
    """As each of the peers' translate commands: a decoding never finds the device warmed by another."""
    import os

    spec = importlib.util.spec_from_file_location("run_benchmark", REPO / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    first, second = run.in_fresh_process(os.getpid), run.in_fresh_process(os.getpid)
    assert len({first, second, os.getpid()}) == 3
    assert run.in_fresh_process(divmod, 7, 2) == (3, 1)
    assert "in_fresh_process(decode_test," in (REPO / "benchmarks" / "run.py").read_text()


@pytest.mark.slow  # (starts a process or a server and waits on it)
def test_run_watched_notes_when_the_marker_line_appears_and_fails_with_the_exit_status(tmp_path):
    code = (
        "import time; print('starting'); time.sleep(0.6); "
        "print('model: bahdanau attention, 9 parameters; 29,000 training pairs'); time.sleep(0.6)"
    )
    before = peers.time.time()
    run = peers.run_watched(
        [sys.executable, "-c", code], tmp_path / "log", {**os.environ, "PYTHONUNBUFFERED": "1"}, 60, peers.ATTNMT_LOOP
    )
    assert before + 0.5 < run["marker_at"] < before + run["wall_s"]
    assert "29,000 training pairs" in (tmp_path / "log").read_text()
    with pytest.raises(peers.StepFailed, match="exit status 3"):
        peers.run_watched(
            [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "log", dict(os.environ), 60, peers.ATTNMT_LOOP
        )


def test_steady_speed_counts_from_the_first_log_line_for_both_systems(tmp_path):
    assert peers.parse_onmt_log(ONMT_LOG)["steady_steps_per_s"] == pytest.approx((100 - 10) / (69 - 7))
    figures = peers.training_figures(peers.parse_onmt_log(ONMT_LOG), {}, Path("log"))
    assert figures["sentences_per_s_steady"] == pytest.approx(90 * 64 / 62)
    records = [
        {"type": "train", "step": 50, "seconds": 10.0},
        {"type": "valid", "step": 100, "seconds": 19.0},
        {"type": "train", "step": 100, "seconds": 20.0},
        {"type": "train", "step": 150, "seconds": 30.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(peers.json.dumps(r) + "\n" for r in records))
    assert peers.attnmt_steady(tmp_path, 64) == pytest.approx(100 * 64 / 20)
    assert peers.attnmt_steady(tmp_path / "absent", 64) is None
    padded = (
        "[2026-11-25 17:55:39,841 INFO] Step  5/   10; acc: 4.4; ppl: 5730.4; xent: 8.7; lr: 0.00050; sents: "
        "320; bsz:  947/ 940/64; 903/897 tok/s;      5 sec;\n"
    )  # OpenNMT-py pads steps under 10
    assert peers.parse_onmt_log(padded)["steps"] == 5


def test_figures_of_a_stopped_run_are_kept_for_the_next_one(tmp_path):
    assert peers.earlier_systems(tmp_path) == {}
    (tmp_path / "results.json").write_text(
        peers.json.dumps({"systems": {"attnmt": {"steps": 1}, "opennmt": {"steps": 2}}})
    )
    assert peers.earlier_systems(tmp_path) == {"attnmt": {"steps": 1}, "opennmt": {"steps": 2}}
    partial = tmp_path / "results.partial.json"
    partial.write_text(peers.json.dumps({"systems": {"attnmt": {"steps": 3}}}))
    os.utime(partial, (peers.time.time() + 10, peers.time.time() + 10))  # newer than results.json
    assert peers.earlier_systems(tmp_path) == {"attnmt": {"steps": 3}, "opennmt": {"steps": 2}}
    os.utime(partial, (peers.time.time() - 1000, peers.time.time() - 1000))  # older: a finished run's
    assert peers.earlier_systems(tmp_path)["attnmt"] == {"steps": 1}


def test_decode_only_measures_decoding_again_and_keeps_the_training_figures(tmp_path, monkeypatch):
    earlier = {
        "attnmt": {"sentences_per_s": 205, "decode_beam5": 91, "decode_beam5_shortlist": 141},
        "opennmt": {"sentences_per_s": 119, "decode_beam5": 57},
    }
    commands = []

    def fake_run_logged(cmd, log, **kwargs):  # run.py --decode-only rewrites its results.json
        commands.append([str(c) for c in cmd])
        if "translate" in commands[-1]:  # a whole translate command: 8 s, 5 s with the shortlist
            return 5.0 if "--shortlist" in commands[-1] else 8.0
        (tmp_path / "attnmt").mkdir(exist_ok=True)
        (tmp_path / "attnmt" / "results.json").write_text(
            peers.json.dumps(
                {
                    "attnmt": {
                        "sentences_per_s": 999,
                        "decode_beam5": 95,
                        "decode_beam5_shortlist": 150,
                        "decode_beam5_only": 110,
                        "decode_beam5_shortlist_only": 170,
                        "bleu_beam5_shortlist": 39.5,
                    }
                }
            )
        )
        return 1.0

    monkeypatch.setattr(peers, "run_logged", fake_run_logged)
    monkeypatch.setattr(peers, "score", lambda hypotheses, work: {"sentences": 1000, "bleu": 39.5})
    monkeypatch.setattr(peers, "machine_speed", lambda: 150.0)
    monkeypatch.setattr(peers, "decode_opennmt", lambda work, configs: {"decode_beam5": 55})
    ours = peers.decode_again("attnmt", tmp_path, {}, earlier)
    assert "--decode-only" in commands[0]
    translate = [c for c in commands if "translate" in c]
    assert [c[c.index("--beam") + 1] for c in translate] == ["1", "5", "5"]
    assert "--shortlist" in translate[2] and all("--device" in c for c in translate)
    # the table's figures: whole commands, as the peers'; run.py's in-process ones kept beside them
    assert (ours["sentences_per_s"], ours["decode_beam5"], ours["decode_beam5_shortlist"]) == (205, 125, 200)
    assert (ours["decode_beam5_loaded"], ours["decode_beam5_only"], ours["decode_beam5_shortlist_only"]) == (
        95,
        110,
        170,
    )
    assert ours["decoded_again"] and ours["probe_gflops_before"] == 150.0
    theirs = peers.decode_again("opennmt", tmp_path, {}, earlier)
    assert (theirs["sentences_per_s"], theirs["decode_beam5"]) == (119, 55)
    with pytest.raises(peers.StepFailed, match="joeynmt has no figures"):
        peers.decode_again("joeynmt", tmp_path, {}, earlier)
    with pytest.raises(SystemExit):
        peers.parse_args(["--decode-only", "--device", "cuda"])


def test_rounds_keep_each_decoding_speed_at_its_best_and_every_round():
    first = {
        "decode_beam5": 50.0,
        "decode_greedy": 120.0,
        "decode_beam5_loaded": None,
        "bleu_beam5": 36.1,
        "probe_gflops_before": 140.0,
        "probe_gflops_after": 150.0,
    }
    second = {**first, "decode_beam5": 60.0, "decode_greedy": 100.0, "probe_gflops_before": 100.0}
    merged = peers.best_of_rounds(peers.best_of_rounds(None, first), second)
    assert (merged["decode_beam5"], merged["decode_greedy"]) == (60.0, 120.0)  # each its own best round
    assert merged["bleu_beam5"] == 36.1 and merged["probe_gflops_before"] == 100.0  # the rest: the latest
    assert [r["decode_greedy"] for r in merged["rounds"]] == [120.0, 100.0]
    assert [r["probe_gflops_before"] for r in merged["rounds"]] == [140.0, 100.0]
    assert "decode_beam5_loaded" not in merged["rounds"][0]  # not measured: no speed to compare


def test_rounds_need_decode_only():
    with pytest.raises(SystemExit):
        peers.parse_args(["--rounds", "3"])
    assert peers.parse_args(["--decode-only", "--rounds", "3"]).rounds == 3
