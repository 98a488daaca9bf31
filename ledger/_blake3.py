"""A pure-Python BLAKE3 (hash and keyed hash), used only when the ``blake3`` package is absent.

memroot's offline verifier must run with nothing but the standard library, cbor2 and
cryptography (docs/FORMAT.md §7), yet event content is committed with BLAKE3 (SPEC 2).
``memroot.ledger.hashing`` imports the fast ``blake3`` package when it is installed and falls back
to
this module otherwise, so an auditor without it still checks every content commitment (step 4),
only more slowly (tens of kilobytes per second instead of gigabytes).

This follows the BLAKE3 specification (Aumasson, Neves, O'Connor, Wilcox-O'Hearn, 2020):
1024-byte chunks of 64-byte blocks, the 7-round compression function with the SHA-256 IV, and
a binary tree whose left subtree holds the largest power-of-two number of chunks. Only the
default 32-byte output is produced. Tests compare it with the ``blake3`` package byte for byte.
"""

from __future__ import annotations

from typing import Final

__all__ = ["blake3"]

_IV: Final = (
    0x6A09E667,
    0xBB67AE85,
    0x3C6EF372,
    0xA54FF53A,
    0x510E527F,
    0x9B05688C,
    0x1F83D9AB,
    0x5BE0CD19,
)
_PERM: Final = (2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8)
_CHUNK_START: Final = 1
_CHUNK_END: Final = 2
_PARENT: Final = 4
_ROOT: Final = 8
_KEYED_HASH: Final = 16
_BLOCK: Final = 64
_CHUNK: Final = 1024
_M32: Final = 0xFFFFFFFF

# The message word order of each of the 7 rounds, precomputed from the permutation.
_SCHEDULE: list[tuple[int, ...]] = [tuple(range(16))]
for _ in range(6):
    _SCHEDULE.append(tuple(_SCHEDULE[-1][i] for i in _PERM))


def _compress(
    cv: tuple[int, ...] | list[int], block: bytes, counter: int, block_len: int, flags: int
) -> list[int]:
    """Return the 16-word output of the compression function (section 2.2)."""
    m = [int.from_bytes(block[i : i + 4], "little") for i in range(0, _BLOCK, 4)]
    v = [*cv, *_IV[:4], counter & _M32, (counter >> 32) & _M32, block_len, flags]
    for s in _SCHEDULE:
        for a, b, c, d, x, y in (
            (0, 4, 8, 12, s[0], s[1]),
            (1, 5, 9, 13, s[2], s[3]),
            (2, 6, 10, 14, s[4], s[5]),
            (3, 7, 11, 15, s[6], s[7]),
            (0, 5, 10, 15, s[8], s[9]),
            (1, 6, 11, 12, s[10], s[11]),
            (2, 7, 8, 13, s[12], s[13]),
            (3, 4, 9, 14, s[14], s[15]),
        ):
            va = (v[a] + v[b] + m[x]) & _M32
            vd = v[d] ^ va
            vd = ((vd >> 16) | (vd << 16)) & _M32
            vc = (v[c] + vd) & _M32
            vb = v[b] ^ vc
            vb = ((vb >> 12) | (vb << 20)) & _M32
            va = (va + vb + m[y]) & _M32
            vd ^= va
            vd = ((vd >> 8) | (vd << 24)) & _M32
            vc = (vc + vd) & _M32
            vb ^= vc
            v[a], v[b], v[c], v[d] = va, ((vb >> 7) | (vb << 25)) & _M32, vc, vd
    return [v[i] ^ v[i + 8] for i in range(8)] + [v[i + 8] ^ cv[i] for i in range(8)]


class _Output:
    """A node's inputs, kept so it can become either a chaining value or the root."""

    __slots__ = ("block", "block_len", "counter", "cv", "flags")

    def __init__(
        self,
        cv: tuple[int, ...] | list[int],
        block: bytes,
        counter: int,
        block_len: int,
        flags: int,
    ) -> None:
        self.cv, self.block, self.counter = cv, block, counter
        self.block_len, self.flags = block_len, flags

    def chaining_value(self) -> list[int]:
        return _compress(self.cv, self.block, self.counter, self.block_len, self.flags)[:8]

    def root(self) -> bytes:
        words = _compress(self.cv, self.block, 0, self.block_len, self.flags | _ROOT)[:8]
        return b"".join(w.to_bytes(4, "little") for w in words)


def _chunk_output(key: tuple[int, ...], chunk: bytes, index: int, flags: int) -> _Output:
    """Compress every block of a chunk but the last; return the last block's pending output."""
    cv: tuple[int, ...] | list[int] = key
    blocks = [chunk[i : i + _BLOCK] for i in range(0, len(chunk), _BLOCK)] or [b""]
    for n, block in enumerate(blocks[:-1]):
        start = _CHUNK_START if n == 0 else 0
        cv = _compress(cv, block, index, _BLOCK, flags | start)[:8]
    last = blocks[-1]
    start = _CHUNK_START if len(blocks) == 1 else 0
    return _Output(cv, last.ljust(_BLOCK, b"\0"), index, len(last), flags | start | _CHUNK_END)


def _parent(key: tuple[int, ...], left: list[int], right: list[int], flags: int) -> _Output:
    block = b"".join(w.to_bytes(4, "little") for w in left + right)
    return _Output(key, block, 0, _BLOCK, flags | _PARENT)


class blake3:  # mirrors the blake3 package's class name
    """The subset of the ``blake3`` package's API that memroot uses: one-shot 32-byte digests.

    Raises:
        ValueError: if ``key`` is given and is not 32 bytes.
    """

    def __init__(self, data: bytes = b"", *, key: bytes | None = None) -> None:
        self._key: tuple[int, ...] = _IV
        self._flags = 0
        if key is not None:
            if len(key) != 32:
                raise ValueError("a BLAKE3 key is 32 bytes")
            self._key = tuple(int.from_bytes(key[i : i + 4], "little") for i in range(0, 32, 4))
            self._flags = _KEYED_HASH
        self._data = bytes(data)

    def digest(self) -> bytes:
        """Return the 32-byte BLAKE3 output of the data."""
        data, key, flags = self._data, self._key, self._flags
        n_chunks = max(1, -(-len(data) // _CHUNK))
        stack: list[list[int]] = []
        for i in range(n_chunks - 1):
            cv = _chunk_output(key, data[i * _CHUNK : (i + 1) * _CHUNK], i, flags).chaining_value()
            # Merge completed subtrees: chunk i+1 closes one subtree per trailing zero bit.
            total = i + 1
            while total & 1 == 0:
                cv = _parent(key, stack.pop(), cv, flags).chaining_value()
                total >>= 1
            stack.append(cv)
        last = n_chunks - 1
        out = _chunk_output(key, data[last * _CHUNK :], last, flags)
        while stack:
            out = _parent(key, stack.pop(), out.chaining_value(), flags)
        return out.root()
