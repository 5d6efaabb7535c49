"""Full-text search over user memories: PostgreSQL text search, or SQLite FTS5.

A query is split into words (letters and digits; punctuation, ``_`` and a short list of common
English words dropped). A memory matches when it contains **any** of the words (word-level OR,
as the original); a word of four characters or more (two outside ASCII) also matches as a
prefix (``test`` finds ``tests``). ``matches`` answers, per matching memory of the user, how
many distinct query words it contains: the ranking (``selectors.user_memory_search``)
multiplies that by the memory's importance weight.

Both backends see the same words:

* PostgreSQL: a GIN index on ``to_tsvector('simple', translate(content, <punctuation>, ' '))``
  (migration ``0002_fulltext``). The ``simple`` configuration lowercases and neither stems nor
  drops stop words; the ``translate`` splits URLs, paths, e-mail addresses and ``snake_case`` into
  their words, which PostgreSQL's parser would otherwise keep as single tokens. A query uses the
  same expression, so the index serves it.
* SQLite: an FTS5 table ``memory_usermemory_fts(content, owner)`` (``unicode61`` tokenizer, which
  splits on every non-alphanumeric character), kept in step by triggers; ``owner`` is the token
  ``u<user id>`` so that a user's search never reads another user's matches.

One query per search, whatever the number of words (a ``UNION ALL`` of one indexed match per
word, counted per memory).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.db import connection

from rtcagent.rows import read

MAX_TERMS = 16
MAX_TERM_CHARS = 64  # a longer "word" (a hash, a blob) is searched by its start
PREFIX_MIN_CHARS = 4
# Split like the index: PostgreSQL's parser would keep URLs, paths, e-mail addresses, tags and
# hyphenated or snake_case words whole; the ``translate`` turns these characters into spaces.
# (No ``%`` or quote: the expression is also written into queries with parameters.)
PUNCTUATION = "@./:_~+=?&#<>\\-"
_WORD = re.compile(r"[^\W_]+")
# Words that would match nearly every memory; a query made only of them finds nothing.
STOP_WORDS = frozenset(
    "a an and are as at be but by can could do does for from had has have he her his how i if "
    "in into is it its me my no not of on or our she so than that the their them then there "
    "these they this to us was we were what when where which who why will with would you your"
    .split()
)


def query_terms(text: str) -> list[str]:
    """The distinct words of ``text`` that a search looks for (lowercase, at most 16)."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        word = word[:MAX_TERM_CHARS]
        if word in STOP_WORDS or word in terms:
            continue
        if len(word) < 2 and word.isascii():
            continue
        terms.append(word)
        if len(terms) == MAX_TERMS:
            break
    return terms


def pg_vector(column: str = "content") -> str:
    """The indexed expression (it must read exactly so for the index to serve a query)."""
    spaces = " " * len(PUNCTUATION)
    return f"to_tsvector('simple'::regconfig, translate({column}, '{PUNCTUATION}', '{spaces}'))"


def matches(user_id: int, terms: Iterable[str]) -> dict[int, int]:
    """``{memory id: number of distinct terms it contains}`` for the user's matching memories.
    Read with ``rtcagent.rows.read``: a prompt's build sends ``matches_statement`` with its
    other first reads (``rows.together``), and this takes its rows."""
    statement = matches_statement(user_id, terms)
    if statement is None:
        return {}
    return {int(row[0]): int(row[1]) for row in read(*statement)}


def matches_statement(user_id: int, terms: Iterable[str]) -> tuple[str, list[object]] | None:
    """``matches``'s statement and parameters; None when there is nothing to look for."""
    terms = list(terms)
    if not terms:
        return None
    if connection.vendor == "postgresql":
        return _postgresql(user_id, terms)
    if connection.vendor == "sqlite":
        return _sqlite(user_id, terms)
    raise NotImplementedError(f"no full-text search for {connection.vendor}")  # pragma: no cover


def _prefix(term: str) -> bool:
    # Non-Latin scripts (CJK above all) pack a word into fewer characters.
    return len(term) >= (PREFIX_MIN_CHARS if term.isascii() else 2)


# The SQL below is built from constants only (the query words are parameters): S608 is moot.


def _postgresql(user_id: int, terms: list[str]) -> tuple[str, list[object]]:
    one = (
        "SELECT id FROM memory_usermemory WHERE user_id = %s "  # noqa: S608
        f"AND {pg_vector()} @@ to_tsquery('simple'::regconfig, %s)"
    )
    params: list[object] = []
    for term in terms:
        params += [user_id, f"{term}:*" if _prefix(term) else term]
    union = " UNION ALL ".join([one] * len(terms))
    return f"SELECT id, COUNT(*) FROM ({union}) AS hits GROUP BY id", params  # noqa: S608


def _sqlite(user_id: int, terms: list[str]) -> tuple[str, list[object]]:
    one = "SELECT rowid AS id FROM memory_usermemory_fts WHERE memory_usermemory_fts MATCH %s"
    params: list[object] = []
    for term in terms:
        star = " *" if _prefix(term) else ""
        params.append(f'owner : "u{int(user_id)}" AND content : "{term}"{star}')
    union = " UNION ALL ".join([one] * len(terms))
    return f"SELECT id, COUNT(*) FROM ({union}) AS hits GROUP BY id", params  # noqa: S608
