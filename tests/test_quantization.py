"""Dynamic int8 quantization for CPU translation: attnmt.load(..., quantize="int8") and --int8."""

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear

import attnmt
from attnmt.api import quantize_int8
from attnmt.cli import main
from attnmt.core.config import model_config_of
from attnmt.core.errors import AttnmtError
from attnmt.data.batching import make_batch
from attnmt.seq2seq import build_model
from conftest import reverse


def float_linears(model):
    """Linear layers left in float32 (an OutputLayer is an nn.Linear too), but for those with a
    single output (attention's v), which stay float32 on purpose."""
    return [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m.out_features > 1]


def test_int8_model_is_quantized_and_still_reverses(reverse_model):
    model, dev = reverse_model
    quantized = attnmt.load(model.folder, quantize="int8")
    assert quantized.quantize == "int8"
    assert float_linears(quantized.model) == []
    assert isinstance(quantized.model.generator, QuantizedLinear)  # the output layer too
    assert isinstance(quantized.model.decoder.attention.W_s, QuantizedLinear)
    assert type(quantized.model.decoder.attention.v) is torch.nn.Linear  # one output: float32 on purpose
    assert isinstance(model.model.generator, torch.nn.Linear)  # the float model is untouched
    outputs = [t.text for t in quantized.translate(dev, beam=1)]
    exact = sum(out == reverse(src) for src, out in zip(dev, outputs)) / len(dev)
    assert exact >= 0.9, f"exact match {exact:.0%}"
    fp32 = [t.text for t in model.translate(dev, beam=1)]
    assert sum(a == b for a, b in zip(outputs, fp32)) / len(dev) >= 0.95  # int8 ~ the same translations


@pytest.mark.parametrize(
    "changes",
    [
        {"type": "rnn", "embedding_size": 32, "decoder_hidden": 32, "tie_embeddings": True, "encoder_hidden": 16},
        {"type": "transformer", "d_model": 32, "heads": 4, "feed_forward": 64, "share_embeddings": True},
    ],
    ids=["rnn-tied", "transformer-shared"],
)
def test_tied_output_layer_is_quantized_and_embeddings_stay_float(changes):
    config = model_config_of(
        **{
            **({"attention_size": 16} if changes["type"] == "rnn" else {"attention_dropout": 0.0}),
            "dropout": 0.0,
            "encoder_layers": 1,
            "decoder_layers": 1,
            **changes,
        }
    )
    model = build_model(config, 30, 30).eval()
    embedding = model.tgt_embed.tokens if changes["type"] == "transformer" else model.tgt_embed
    assert model.generator.weight is embedding.weight  # tied: one tensor
    quantized = quantize_int8(model)
    assert float_linears(quantized) == []
    assert isinstance(quantized.generator, QuantizedLinear)
    embeddings = [m for m in quantized.modules() if isinstance(m, torch.nn.Embedding)]
    assert embeddings and all(e.weight.dtype == torch.float32 for e in embeddings)
    batch = make_batch([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14]])
    with torch.inference_mode():
        expected, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        got, _ = quantized(batch.src, batch.src_lengths, batch.tgt_in)
    # int8 weights and activations: close to the float scores, not equal
    assert (got - expected).abs().max() < 0.05 * expected.abs().max()
    assert not torch.equal(got, expected)


def test_cli_int8_flag(reverse_model, tmp_path, capsys):
    model, dev = reverse_model
    sources = tmp_path / "src.txt"
    sources.write_text("".join(s + "\n" for s in dev[:20]))
    out = tmp_path / "out.txt"
    assert main(["translate", str(model.folder), "--int8", "--beam", "1", "-i", str(sources), "-o", str(out)]) == 0
    expected = [t.text for t in attnmt.load(model.folder, quantize="int8").translate(dev[:20], beam=1)]
    assert out.read_text().splitlines() == expected
    refs = tmp_path / "ref.txt"
    refs.write_text("".join(reverse(s) + "\n" for s in dev[:20]))
    assert main(["evaluate", str(model.folder), "--int8", "--src", str(sources), "--ref", str(refs)]) == 0
    assert "BLEU" in capsys.readouterr().out


def test_bf16_output_layer_translates_like_float32(reverse_model, tmp_path, monkeypatch):
    """quantize="bf16" (--bf16): the output layer's product runs in bfloat16; translations ~ float32."""
    from attnmt.seq2seq import output

    model, dev = reverse_model
    bf16 = attnmt.load(model.folder, quantize="bf16")
    dtypes = []
    weight_as = output.OutputLayer.weight_as
    monkeypatch.setattr(
        output.OutputLayer, "weight_as", lambda self, dtype: dtypes.append(dtype) or weight_as(self, dtype)
    )
    outputs = [t.text for t in bf16.translate(dev, beam=3)]
    assert dtypes and set(dtypes) == {torch.bfloat16}  # the output layer's product ran in bf16
    dtypes.clear()
    fp32 = [t.text for t in model.translate(dev, beam=3)]
    assert dtypes == []  # and not without quantize="bf16"
    assert sum(a == b for a, b in zip(outputs, fp32)) / len(dev) >= 0.95
    sources, out = tmp_path / "src.txt", tmp_path / "out.txt"
    sources.write_text("".join(s + "\n" for s in dev[:10]))
    assert main(["translate", str(model.folder), "--bf16", "--beam", "3", "-i", str(sources), "-o", str(out)]) == 0
    assert out.read_text().splitlines() == outputs[:10]


def test_unknown_quantization_is_a_clear_error(reverse_model):
    model, _ = reverse_model
    with pytest.raises(AttnmtError, match=r"quantize must be one of None, 'int8', 'bf16', got 'int4'"):
        attnmt.load(model.folder, quantize="int4")
