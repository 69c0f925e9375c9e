"""Build the embedded model: a tiny, randomly initialised Qwen3 checkpoint.

It exists to exercise the real serving path (vLLM loads it exactly like a real
Qwen checkpoint: config.json + safetensors + tokenizer.json + ChatML chat
template) on machines with no GPU and no model hub. Its output is gibberish.

The build is deterministic: a fixed seed for the weights and a byte-level BPE
tokenizer trained on a fixed, sorted selection of the Python standard library's
own sources. Runs in the engine's virtual environment (needs torch,
transformers and tokenizers), in a few seconds.

    python engine/build_embedded_model.py OUTPUT_DIR
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

BUILDER_VERSION = "2"
VOCAB_SIZE = 2048
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
        model_max_length=8192,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_weights(out: Path, vocab_size: int, eos_id: int, pad_id: int) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,  # vLLM's CPU attention rejects 16; 64 works
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        # A wide init makes greedy output varied (not one repeated token), so
        # tests that compare streamed text catch gaps and duplicates.
        initializer_range=0.3,
        eos_token_id=eos_id,
        bos_token_id=None,
        pad_token_id=pad_id,
        dtype="bfloat16",
    )
    config.architectures = ["Qwen3ForCausalLM"]
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id).save_pretrained(out)


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
