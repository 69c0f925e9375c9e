"""A non-streamed answer's usage read from its usage object alone is what parsing the whole answer gives."""

from __future__ import annotations

import orjson
import pytest

from gateway.relay.unary import answer_usage

VLLM_CHAT = (b'{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
             b'"message":{"role":"assistant","content":"say \\"usage\\":{\\"prompt_tokens\\":99} }","tool_calls":[]},'
             b'"finish_reason":"length"}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":3,'
             b'"total_tokens":19,"completion_tokens":16,"prompt_tokens_details":null},"prompt_logprobs":null,'
             b'"prompt_token_ids":null,"kv_transfer_params":null}')

SAME_AS_A_WHOLE_PARSE = [
    VLLM_CHAT,
    VLLM_CHAT + b"\n",
    b'{"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":1}},"x":null}',
    # a later object may hold a "usage" of its own: the top-level one counts
    b'{"usage":{"prompt_tokens":3},"kv_transfer_params":{"usage":{"prompt_tokens":9}}}',
    # a nested usage and none at the top level
    b'{"choices":[{"usage":{"prompt_tokens":9}}]}',
    b'{"a":{"usage":{"prompt_tokens":9}}}',
    b'{"a":{"usage":{"prompt_tokens":9}},"usage":null}',
    b'{"usage":{"prompt_tokens":9},"s":"}"}',
    b'{"usage": {"prompt_tokens":9}}',
    b'{"usage":{"p":"a}b"}}',
    b'{"usage":{"p":"a{b"},"q":1}',
    b'{"usage":null}',
    b'{"usage":{}}',
]


@pytest.mark.parametrize("answer", SAME_AS_A_WHOLE_PARSE)
def test_usage_is_the_whole_parses(answer):
    assert answer_usage(answer) == orjson.loads(answer).get("usage")


def test_the_vllm_answer_counts_its_top_level_usage():
    assert answer_usage(VLLM_CHAT) == {"prompt_tokens": 3, "total_tokens": 19, "completion_tokens": 16,
                                       "prompt_tokens_details": None}


@pytest.mark.parametrize("answer, error", [
    (b'[1,"usage"]', AttributeError),
    (b'"usage"', AttributeError),
    (b'{"usage":{"prompt_tokens":1}', orjson.JSONDecodeError),
    (b'{"usage":{"prompt_tokens":1},"x":', orjson.JSONDecodeError),
])
def test_an_answer_that_is_no_json_object_fails_as_a_whole_parse_does(answer, error):
    with pytest.raises(error):
        answer_usage(answer)
