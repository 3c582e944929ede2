"""The pure parts of benchmarks/peers.py: log parsing, config rendering, the ratio table (no installs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
    text = "# comment kept\nmodel_dir: \"<anchors>/joey/model\"\ntraining:\n    validation_freq: 500\n"
    assert peers.render(text, tmp_path) == text.replace("<anchors>", str(tmp_path.resolve()))
    changed = yaml.safe_load(peers.render(text, tmp_path, {"training.validation_freq": 50}))
    assert changed == {"model_dir": f"{tmp_path.resolve()}/joey/model", "training": {"validation_freq": 50}}


def test_intervals_are_the_peers_own_at_20_minutes_and_fewer_steps_for_short_budgets():
    assert peers.intervals(20) == {"log": 100, "validate": 500, "save": 500}
    assert peers.intervals(60) == {"log": 100, "validate": 500, "save": 500}
    assert peers.intervals(3) == {"log": 10, "validate": 50, "save": 10}  # a checkpoint near the end
    assert peers.intervals(10) == {"log": 50, "validate": 250, "save": 50}


def test_rendered_peer_configs_have_no_anchor_left_and_short_budget_intervals(tmp_path):
    require(peers.PEER_CONFIGS.is_dir(), f"{peers.PEER_CONFIGS} not found: the peers' configurations live in "
                                         "../shared/peers beside the checkout")
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
    assert lines[0] == ("| figure | attnmt | OpenNMT-py 3.5.1 | JoeyNMT 2.3.0 | attnmt / OpenNMT-py "
                        "| attnmt / JoeyNMT |")
    assert "| training sentences/s | 80 | 100 | 40 | 0.80 | 2.00 |" in lines
    assert "| steps | 1,400 | 2,000 | 700 | 0.70 | 2.00 |" in lines
    assert "| training peak RSS GB (lower is better) | 2.00 | 4.00 | 1.00 | 0.50 | 2.00 |" in lines
    assert "| test_2016 BLEU beam 5 | 33.0 | — | 6.0 | — | 5.50 |" in lines
    assert len(lines) == 2 + len(peers.ROWS)


def test_cheaper_inference_rows_compare_with_the_peers_float32_figures():
    systems = {"attnmt": {"decode_beam5": 80.0, "decode_beam5_bf16": 120.0, "bleu_beam5_int8": 36.0},
               "opennmt": {"decode_beam5": 40.0, "bleu_beam5": 30.0}}
    lines = peers.table(systems).splitlines()
    assert "| decode sent/s beam 5, batch 64 (wall, load included) | 80 | 40 | 2.00 |" in lines
    assert "| decode sent/s beam 5, batch 64, attnmt --bf16 (peers: float32) | 120 | 40 | 3.00 |" in lines
    assert ("| test_2016 BLEU beam 5, attnmt --int8 (int8 linear layers; peers: float32) | 36.0 | 30.0 | 1.20 |"
            in lines)


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
