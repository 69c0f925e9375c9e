"""A batch line's usage is counted as a live request's is (``tenancy.usage.counts``): one reading of every shape."""

from __future__ import annotations

import pytest

from gateway.batches.usage import usage_of


def test_an_anthropic_lines_cache_reads_are_part_of_its_prompt_as_on_the_live_path():
    # Anthropic's input_tokens leaves out what was read from or written to the cache; the batch's own
    # reading took input_tokens as the whole prompt, so its cached tokens (90) exceeded its prompt (10).
    answer = {"type": "message", "usage": {"input_tokens": 10, "cache_read_input_tokens": 90,
                                           "cache_creation_input_tokens": 20, "output_tokens": 5}}
    used = usage_of(answer)
    assert (used.prompt, used.completion, used.cached, used.reasoning) == (120, 5, 90, 0)


@pytest.mark.parametrize(("answer", "expected"), [
    ({"usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
                "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 2}}},
     (7, 3, 4, 2)),
    ({"usage": {"input_tokens": 8, "output_tokens": 6, "input_tokens_details": {"cached_tokens": 3},
                "output_tokens_details": {"reasoning_tokens": 1}}}, (8, 6, 3, 1)),
    ({"usage": {"prompt_tokens": 12, "total_tokens": 12}}, (12, 0, 0, 0)),   # embeddings
    ({"usage": {"prompt_tokens": 2, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 9}}},
     (2, 1, 2, 0)),                                                          # cached never above the prompt
    ({"usage": None}, (0, 0, 0, 0)),
    ("not an object", (0, 0, 0, 0)),
])
def test_every_shape_is_read_the_live_paths_way(answer, expected):
    used = usage_of(answer)
    assert (used.prompt, used.completion, used.cached, used.reasoning) == expected
