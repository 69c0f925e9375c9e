"""Build the embedded model: a tiny, randomly initialised Qwen3 checkpoint.

It exists to exercise the real serving path (vLLM loads it exactly like a real
Qwen checkpoint: config.json + safetensors + tokenizer.json + ChatML chat
template) on machines with no GPU and no model hub. Its output is gibberish.

The build is deterministic: a fixed seed for the weights and a byte-level BPE
tokenizer trained on a fixed, sorted selection of the Python standard library's
own sources. Runs in the engine's virtual environment (needs torch,
transformers and tokenizers), in a few seconds.

Two properties matter to the clients that run against it (docs/embedded-model.md):

- **A context for coding agents** (``CONTEXT_TOKENS``): Claude Code's first request
  (system prompt and 12 tools, ~49 KB) is ~20k tokens with this tokenizer (~33k
  for its 21-tool fallback, ~78 KB), Codex's (~40 KB) ~17k; 65,536 positions hold
  either with its 32,000-token output limit. The KV cache of this model is 512
  bytes a token, so the whole context is 32 MiB.
- **Answers that end** (``shape_end_of_turn``): random weights almost never pick
  ``<|im_end|>``, and agents treat an answer cut at its token limit as a failure
  (Codex exits 1). One hidden dimension carries a constant through every layer,
  and only ``<|im_end|>`` reads it, so its logit is a fixed score against the
  other tokens' random ones: sampled answers end after a few dozen tokens, while
  it is almost never the single best token, so greedy streams run on.

    python engine/build_embedded_model.py OUTPUT_DIR
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

BUILDER_VERSION = "3"
VOCAB_SIZE = 2048
CONTEXT_TOKENS = 65536
HIDDEN_SIZE = 128
# The end-of-turn shaping (``shape_end_of_turn``): the hidden dimension that holds a
# constant, its value, and the score ``<|im_end|>`` gets from it, in units of the
# other tokens' pre-normalisation logits (chosen by measurement: docs/embedded-model.md).
CONSTANT_DIM = 0
CONSTANT_VALUE = 1.0
END_OF_TURN_SCORE = 375.0
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
CORPUS_MODULES = [
    "abc.py", "argparse.py", "ast.py", "asyncio/base_events.py", "bisect.py",
    "collections/__init__.py", "dataclasses.py", "functools.py", "heapq.py",
    "json/decoder.py", "json/encoder.py", "pathlib.py", "random.py", "re/_parser.py",
    "string.py", "textwrap.py", "typing.py",
]

# ChatML, as Qwen's checkpoints use it, including the hermes-style tool block
# so `--tool-call-parser hermes` sees the same structure as with a real model.
# Message content is rendered as a string (vLLM's "string" content format, as
# with Qwen's own templates): a template that loops over content parts makes
# vLLM pass every message as a list of parts, which this one would print raw.
CHAT_TEMPLATE = """{%- if tools %}<|im_start|>system
{%- if messages[0].role == 'system' %}
{{ messages[0].content }}
{%- endif %}

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content if message.content is string else '' }}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments if call.function.arguments is string else call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}
{%- endif %}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def corpus_files() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [str(stdlib / name) for name in CORPUS_MODULES if (stdlib / name).exists()]
    if not files:
        raise SystemExit(f"no corpus files found under {stdlib}")
    return files


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(corpus_files(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=CONTEXT_TOKENS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_weights(out: Path, vocab_size: int, eos_id: int, pad_id: int) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,  # vLLM's CPU attention rejects 16; 64 works
        max_position_embeddings=CONTEXT_TOKENS,
        tie_word_embeddings=False,  # the output head differs from the embeddings in one row
        # A wide init makes greedy output varied (not one repeated token), so
        # tests that compare streamed text catch gaps and duplicates.
        initializer_range=0.3,
        eos_token_id=eos_id,
        bos_token_id=None,
        pad_token_id=pad_id,
        dtype="bfloat16",
    )
    config.architectures = ["Qwen3ForCausalLM"]
    model = Qwen3ForCausalLM(config)
    shape_end_of_turn(model, eos_id)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id).save_pretrained(out)


def shape_end_of_turn(model, eos_id: int) -> None:
    """Give ``<|im_end|>`` a steady logit: real probability under sampling, rarely the argmax.

    Every token's embedding holds ``CONSTANT_VALUE`` in ``CONSTANT_DIM``, and no layer writes
    there (that row of each output projection is zero), so the final residual stream carries
    the constant at every position; no layer reads it either (its norm weights are zero there). The output head is the embedding matrix (as when tied)
    with that column zeroed, except for ``<|im_end|>``, whose row reads the constant alone.
    Before the final RMSNorm's common scale, the other tokens score ``w . x`` (random, spread
    with the hidden state) and ``<|im_end|>`` scores ``END_OF_TURN_SCORE``: below the best of
    2,047 random scores almost always (greedy rarely ends), but within reach of the sampled
    ones (sampling ends after a few dozen tokens).
    """
    import torch

    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        embed[:, CONSTANT_DIM] = CONSTANT_VALUE
        for layer in model.model.layers:
            # No layer writes the dimension, and none reads it: the layers see what they saw
            # before the shaping (greedy output stays as varied), the constant only feeds the head.
            layer.self_attn.o_proj.weight[CONSTANT_DIM, :] = 0.0
            layer.mlp.down_proj.weight[CONSTANT_DIM, :] = 0.0
            layer.input_layernorm.weight[CONSTANT_DIM] = 0.0
            layer.post_attention_layernorm.weight[CONSTANT_DIM] = 0.0
        head = embed.detach().clone()
        head[:, CONSTANT_DIM] = 0.0
        head[eos_id, :] = 0.0
        head[eos_id, CONSTANT_DIM] = END_OF_TURN_SCORE / CONSTANT_VALUE
        model.lm_head.weight = torch.nn.Parameter(head)


def build(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    build_weights(out, len(tok), tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id)
    (out / "EMBEDDED_MODEL.json").write_text(
        json.dumps({"builder_version": BUILDER_VERSION, "note": "random weights: output is gibberish"})
    )


def is_current(out: Path) -> bool:
    marker = out / "EMBEDDED_MODEL.json"
    return marker.exists() and json.loads(marker.read_text()).get("builder_version") == BUILDER_VERSION


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    if is_current(out):
        print(f"embedded model already built: {out}")
        return
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    try:
        build(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)  # atomic: a half-built directory is never mistaken for a model
    except OSError:
        if not is_current(out):  # not a concurrent build that finished first
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # an interrupted build leaves nothing behind
    print(f"embedded model built: {out}")


if __name__ == "__main__":
    main()
