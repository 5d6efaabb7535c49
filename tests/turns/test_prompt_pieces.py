"""The pure pieces of the prompt pipeline: the tool-result budget, the tail a compaction keeps,
and the shared prefix of two requests."""

from __future__ import annotations

from apps.turns.prompt import (
    TRUNCATION_MARKER,
    fingerprint,
    shared_prefix,
    tail_start,
    truncate_output,
)
from apps.turns.tokens import count_text


def test_an_output_within_its_budget_is_unchanged() -> None:
    text = "line\n" * 100
    assert truncate_output(text, 1000, count_text) is text
    assert truncate_output(text, count_text(text), count_text) is text


def test_a_long_output_keeps_its_head_and_tail_with_the_marker_between() -> None:
    text = "".join(f"line {i}: some file content here\n" for i in range(2000))
    budget = 500

    cut = truncate_output(text, budget, count_text)

    head, tail = cut.split(f"\n{TRUNCATION_MARKER}\n")
    assert text.startswith(head + "\n") and text.endswith(tail)
    assert head.startswith("line 0: ") and tail.endswith("line 1999: some file content here\n")
    assert count_text(cut) <= budget
    assert count_text(head) > 2 * count_text(tail)  # head 60 %, tail 20 %
    assert count_text(cut) >= budget * 0.6  # not cut far more than needed


def test_cuts_fall_between_characters_of_multibyte_text() -> None:
    text = ("日本語のテキストと絵文字🙂🚀、" * 3000)
    cut = truncate_output(text, 300, count_text)

    head, tail = cut.split(TRUNCATION_MARKER)
    head, tail = head.rstrip("\n"), tail.lstrip("\n")
    assert text.encode().startswith(head.encode())  # a byte prefix: no character split
    assert text.encode().endswith(tail.encode())
    assert head and tail and count_text(cut) <= 300


def test_a_zero_budget_leaves_only_the_marker() -> None:
    assert truncate_output("abc" * 100, 0, count_text) == TRUNCATION_MARKER


def test_the_tail_keeps_enough_tokens_and_text_messages() -> None:
    sizes = [100, 100, 100, 100, 100, 100]
    texts = [True, False, True, False, True, False]

    assert tail_start(sizes, texts, min_tokens=150, min_messages=1, max_tokens=10_000) == 4
    assert tail_start(sizes, texts, min_tokens=150, min_messages=3, max_tokens=10_000) == 0
    assert tail_start(sizes, texts, min_tokens=450, min_messages=1, max_tokens=10_000) == 1


def test_the_tail_stops_before_its_maximum_but_always_keeps_the_last_block() -> None:
    assert tail_start([50, 300, 200], [True] * 3, min_tokens=10_000, min_messages=9,
                      max_tokens=400) == 2
    assert tail_start([50, 900], [True] * 2, min_tokens=10_000, min_messages=9,
                      max_tokens=400) == 1


def test_the_shared_prefix_counts_leading_equal_parts() -> None:
    before = [("tools", 50), ("sys", 100), ("u1", 10), ("tail", 30)]
    after = [("tools", 50), ("sys", 100), ("u1", 10), ("a1", 20), ("tail", 30)]

    assert shared_prefix(before, after) == 160
    assert shared_prefix(before, [("other", 50), *after[1:]]) == 0
    assert shared_prefix([], after) == 0


def test_fingerprints_follow_the_bytes_not_the_key_order() -> None:
    assert fingerprint({"role": "user", "content": "a"}) == fingerprint(
        {"content": "a", "role": "user"})
    assert fingerprint({"role": "user", "content": "a"}) != fingerprint(
        {"role": "user", "content": "b"})
