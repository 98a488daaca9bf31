"""The keyed, order-free digest of ``conv_parents`` that verify step 9 compares."""

from __future__ import annotations

import hashlib
import random

from hypothesis import given
from hypothesis import strategies as st

from memroot.memory_root.tables_check import _row_digest

KEY = bytes(range(32))


def test_digest_is_the_keyed_sum_docs_format_describes() -> None:
    """Count, and the sum mod 2^256 of BLAKE2b-256(key, id + U+0000 + parent or U+0001)."""

    def mac(text: str) -> int:
        return int.from_bytes(hashlib.blake2b(text.encode(), key=KEY).digest(), "big")

    rows = [("e1", None), ("e2", "e1"), ("é3", "e2")]
    want = (mac("e1\x00\x01") + mac("e2\x00e1") + mac("é3\x00e2")) % (1 << 256)
    assert _row_digest(rows, KEY) == (want, 3)
    assert _row_digest([], KEY) == (0, 0)
    assert _row_digest(rows, bytes(32))[0] != want  # another key, another digest


rows = st.lists(
    st.tuples(st.text("abc-0", min_size=1, max_size=8), st.none() | st.text("abc-0", max_size=8)),
    unique_by=lambda r: r[0],
    max_size=20,
)


@given(rows, st.randoms())
def test_digest_ignores_order_and_sees_every_row(
    value: list[tuple[str, str | None]], rnd: random.Random
) -> None:
    """Any order gives the same digest; dropping a row or changing a parent changes it."""
    shuffled = list(value)
    rnd.shuffle(shuffled)
    assert _row_digest(shuffled, KEY) == _row_digest(value, KEY)
    if value:
        assert _row_digest(value[1:], KEY) != _row_digest(value, KEY)
        first_id, parent = value[0]
        changed = [(first_id, None if parent is not None else "p"), *value[1:]]
        assert _row_digest(changed, KEY)[0] != _row_digest(value, KEY)[0]
