"""The offline auditor: every verification step over a bundle or a tiles directory, no ledger.

``audit_bundle`` runs the same numbered steps as ``memroot.ledger.verify.audit`` (the step logic is
shared: ``memroot.ledger.verify.audit_source``), reading a bundle directory
(``memroot.ledger.bundle.export``)
instead of a SQLite store. It needs the standard library, cbor2 and cryptography only: no
storage driver is imported, and content commitments (step 4) use the native ``blake3``
package when it is installed and a pure-Python BLAKE3 otherwise (the report says which).

What a bundle cannot show, the report does not claim: a bundle has no stored caches (leaf
hashes, tree nodes, content addresses), so step 5 recomputes the roots from the entry bytes
and compares them with the signed checkpoints, and nothing else.

``audit_tiles`` runs the same steps over a C2SP tlog-tiles directory written by
``memroot publish`` (``memroot.ledger.transparency.tiles``), reading nothing but its files: the
entries from the entry bundles, the leaf hashes from the level-0 tiles (each must be the hash
of its entry), every upper tile against the level below, and every retained checkpoint's root
computed from the tiles alone, as a tile client would. Tiles carry no event content, so step 4
is not checked there.

``WitnessPolicy`` adds the witness checks of ``--witness-vkey``/``--quorum`` (step 6: the
newest checkpoint carries a quorum of valid cosignatures) and ``--witness URL`` (step 10: the
log is not older than, and agrees with, the newest checkpoint a witness cosigned; no local
state needed) to any of the three sources.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from memroot.ledger import merkle
from memroot.ledger.bundle.export import BundleBranch, BundleReader, BundleRow, CachelessSource
from memroot.ledger.entries import CANONICAL_BRANCH, Entry, Kind
from memroot.ledger.errors import (
    DecodeError,
    MemrootError,
    NotFoundError,
    RefusedError,
)
from memroot.ledger.hashing import BLAKE3_NATIVE, HASH_SIZE, node_hash
from memroot.ledger.keyset import KEY_ENTRY_TYPES, KeyEntryError, KeySet
from memroot.ledger.note import parse_checkpoint, split_note
from memroot.ledger.transparency.cosignature import WitnessKey
from memroot.ledger.transparency.tiles import (
    CHECKPOINTS_DIR,
    TILE_HEIGHT,
    TILE_WIDTH,
    TileReader,
    read_tile_file,
    split_bundle,
    tile_path,
)
from memroot.ledger.transparency.witness import (
    CheckpointSource,
    check_cosignatures,
    witnessed_trust,
)
from memroot.ledger.trust import TrustedLog, TrustedState
from memroot.ledger.verify import (
    AfterScan,
    AuditReport,
    BranchLike,
    Finding,
    Progress,
    ReplayCheck,
    RowLike,
    audit_source,
)

__all__ = [
    "GenesisSource",
    "TilesSource",
    "WitnessPolicy",
    "audit_bundle",
    "audit_tiles",
    "open_bundle",
    "verify_bundle",
]


def open_bundle(path: Path) -> BundleReader:
    """Open a bundle for reading (its manifest is read and checked).

    Raises:
        NotFoundError: if there is no bundle directory at ``path``.
        DecodeError: if the manifest is missing or malformed.
    """
    return BundleReader(Path(path))


def audit_bundle(
    bundle: Path | BundleReader,
    *,
    vkeys: Sequence[str] = (),
    trusted: TrustedState | None = None,
    checks: Sequence[ReplayCheck] = (),
    progress: Progress | None = None,
    update_trusted: bool = True,
) -> AuditReport:
    """Run every auditor step over a bundle and return the report; never raises for bad data.

    Keys and trusted state work as in ``memroot.ledger.verify.audit``: the given ``vkeys``, else the
    trusted state's keys for the bundle's origin, else (trust on first use, reported as a note)
    the keys in the bundle's own genesis entry. ``checks`` are the replay checks of the layers
    above (steps 7-9), built from the same reader so they can read its sections.
    """
    try:
        reader = bundle if isinstance(bundle, BundleReader) else open_bundle(bundle)
    except MemrootError as e:
        return _unopened("the bundle", e)

    def read_sections(report: AuditReport) -> None:
        # (1) every file of the bundle is read whole: sections that no replay check consumed
        # are still checked against the manifest, so a damaged file never passes unnoticed.
        for name in reader.section_names():
            try:
                for _ in reader.section(name):
                    pass
            except MemrootError as e:
                report.add(Finding(1, f"bundle section {name!r} cannot be read: {e}"))

    report = audit_source(
        reader,
        origin=reader.manifest.origin,
        trusted=trusted,
        vkeys=vkeys,
        checks=[*checks, AfterScan(read_sections, (1,))],
        progress=progress,
        update_trusted=update_trusted,
    )
    report.trusted["bundle"] = _bundle_facts(reader)
    if not BLAKE3_NATIVE:
        report.add(
            Finding(
                4,
                "the blake3 package is not installed: content commitments were checked with "
                "memroot's pure-Python BLAKE3 (same result, slower)",
                severity="note",
            )
        )
    return report


def _unopened(what: str, error: MemrootError) -> AuditReport:
    """(1) The report on a source that cannot be opened: that one finding, step 1 checked."""
    report = AuditReport()
    report.steps_checked.add(1)
    report.add(Finding(1, f"{what} cannot be opened: {error}"))
    return report


def verify_bundle(bundle: Path | BundleReader, **kwargs: Any) -> AuditReport:
    """Like ``audit_bundle``, but raise an ``IntegrityError`` for the first finding.

    Raises:
        IntegrityError: carrying the first finding's step, branch, seq, expected and actual.
    """
    return audit_bundle(bundle, **kwargs).raise_first()


def _bundle_facts(reader: BundleReader) -> dict[str, Any]:
    m = reader.manifest
    return {
        "path": str(reader.path),
        "origin": m.origin,
        "ledger_id": m.ledger_id,
        "created": m.created,
        "sections": list(m.sections),
        "branches": {b.name: {"size": b.size, "root": b.root.hex()} for b in m.branches},
    }


# --------------------------------------------------------------------------- tiles


class TilesSource(CachelessSource):
    """A tlog-tiles directory (``memroot publish``) seen as a ``LedgerSource``.

    One branch, ``main``: the log whose checkpoint is ``checkpoint``. Rows carry the entry
    bytes from the entry bundles and, as their cached leaf hash, the level-0 tile hash (step 5
    compares them). Checkpoints are the retained notes under ``memroot/checkpoints/`` plus
    ``checkpoint``. It has no stored caches and no content (step 4 is not checked):
    ``audit_tiles`` checks the tiles themselves.
    """

    has_content = False

    def __init__(self, directory: Path) -> None:
        """Open the directory (its ``checkpoint`` is read, not verified).

        Raises:
            NotFoundError: if there is no ``checkpoint`` file.
            DecodeError: if it is not a checkpoint note.
        """
        self.directory = Path(directory)
        try:
            self.note = (self.directory / "checkpoint").read_text("utf-8")
        except FileNotFoundError as e:
            raise NotFoundError(f"no tiles directory at {self.directory} (no checkpoint)") from e
        except (OSError, UnicodeDecodeError) as e:
            raise DecodeError(f"cannot read {self.directory / 'checkpoint'}: {e}") from e
        cp = parse_checkpoint(split_note(self.note)[0])
        self.size = cp.size
        self.root = bytes(cp.root)
        self.reader = TileReader(self.directory, self.size)
        try:
            head = self.reader.node(0, self.size - 1) if self.size else bytes(HASH_SIZE)
        except MemrootError:
            # The last leaf tile is missing or damaged: the scan reports it (step 1).
            head = bytes(HASH_SIZE)
        self._branch = BundleBranch(0, CANONICAL_BRANCH, self.size, head)
        self._genesis: Entry | None = None

    def branches(self) -> list[BundleBranch]:
        """Return the one branch the directory publishes."""
        return [self._branch]

    def branch(self, name: str) -> BundleBranch:
        """Return the branch (``NotFoundError`` for any other name)."""
        if name != CANONICAL_BRANCH:
            raise NotFoundError(f"the tiles directory publishes only {CANONICAL_BRANCH!r}")
        return self._branch

    def bundle(self, index: int) -> list[bytes]:
        """Return the entries of entry bundle ``index`` of the tree at the head size.

        Raises:
            NotFoundError: if the bundle is missing or outside the tree.
            DecodeError: if it does not split into the entries it must hold.
        """
        full = self.size // TILE_WIDTH
        width = TILE_WIDTH if index < full else self.size % TILE_WIDTH
        if index > full or width == 0:
            raise NotFoundError(f"entry bundle {index} is outside the tree of size {self.size}")
        rel = tile_path("entries", index, width)
        data = read_tile_file(self.directory, rel, f"entry bundle {rel} is missing")
        entries = split_bundle(data, rel)
        if len(entries) != width:
            raise DecodeError(f"entry bundle {rel} holds {len(entries)} entries, not {width}")
        return entries

    def iter_entry_rows(self, branch_no: int) -> Iterator[BundleRow]:
        """Yield every entry, with its level-0 tile hash as the row's cached hash."""
        for index in range((self.size + TILE_WIDTH - 1) // TILE_WIDTH):
            hashes = self.reader.hashes(0, index)
            for i, data in enumerate(self.bundle(index)):
                yield BundleRow(index * TILE_WIDTH + i, data, hash=hashes[i])

    def entry_row(self, branch_no: int, seq: int) -> BundleRow:
        """Return one entry (``NotFoundError`` if outside the tree)."""
        if not 0 <= seq < self.size:
            raise NotFoundError(f"no entry {seq} in the tiles directory")
        return BundleRow(seq, self.bundle(seq // TILE_WIDTH)[seq % TILE_WIDTH])

    def checkpoints(self, branch_no: int) -> list[tuple[int, bytes, str]]:
        """Return every published checkpoint ``(size, root, note)``, by size (unverified).

        Every note a client could fetch is listed: the retained note of the head's size too
        when its text differs from ``checkpoint`` (newer cosignatures), so each is verified.

        Raises:
            DecodeError: if a note is malformed or filed under another size.
        """
        notes: dict[int, list[str]] = {self.size: [self.note]}
        base = self.directory / CHECKPOINTS_DIR
        if base.is_dir():
            for path in sorted(base.rglob("*")):
                if not path.is_file() or path.name.startswith("."):
                    continue
                try:
                    text = path.read_text("utf-8")
                except (OSError, UnicodeDecodeError) as e:
                    raise DecodeError(f"cannot read {path}: {e}") from e
                cp = parse_checkpoint(split_note(text)[0])
                rel = "".join(p.lstrip("x") for p in path.relative_to(base).parts)
                if not rel.isdigit() or int(rel) != cp.size:
                    raise DecodeError(f"{path} holds the checkpoint of size {cp.size}")
                same = notes.setdefault(cp.size, [])
                if text not in same:
                    same.append(text)
        out = []
        for size in sorted(notes):
            for text in notes[size]:
                cp = parse_checkpoint(split_note(text)[0])
                out.append((size, bytes(cp.root), text))
        return out

    def latest_checkpoint(self, branch_no: int) -> tuple[int, bytes, str] | None:
        """Return the directory's ``checkpoint``."""
        return (self.size, self.root, self.note)

    def meta(self, key: str) -> Any:
        """Return a genesis value (the directory serves no other copy of them)."""
        if self._genesis is None:
            try:
                self._genesis = Entry.from_bytes(self.entry_row(0, 0).data)
            except MemrootError:
                return None
        return self._genesis.body.get(key)

    def read_nodes(self, branch_no: int, ids: Sequence[tuple[int, int]]) -> list[bytes]:
        """Serve tree nodes from the tiles."""
        return self.reader(ids)


def _check_tile_tree(source: TilesSource, report: AuditReport) -> None:
    """(5): upper tiles hash their tiles below; tiles give every checkpoint's signed root."""
    size = source.size
    level = 1
    while size >> (TILE_HEIGHT * level):
        count = size >> (TILE_HEIGHT * level)  # complete subtrees of 256**level leaves
        for i in range(count):
            try:
                below = source.reader.hashes(level - 1, i)
                above = source.reader.node(TILE_HEIGHT * level, i)
            except MemrootError as e:
                report.add(Finding(5, f"tile level {level}: {e}", CANONICAL_BRANCH))
                return
            hs = below
            while len(hs) > 1:
                hs = [node_hash(hs[j], hs[j + 1]) for j in range(0, len(hs), 2)]
            if hs[0] != above:
                report.add(
                    Finding(
                        5,
                        f"tile hash {i} at level {level} is not the root of tile {level - 1}/{i}",
                        CANONICAL_BRANCH,
                        ((i + 1) << (TILE_HEIGHT * level)) - 1,
                        expected=hs[0].hex(),
                        actual=above.hex(),
                    )
                )
        level += 1
    try:
        stored = source.checkpoints(0)
    except MemrootError as e:
        report.add(Finding(6, f"the checkpoints cannot be read: {e}", CANONICAL_BRANCH))
        return
    for cp_size in sorted({s for s, _, _ in stored}):
        root = next(r for s, r, _ in stored if s == cp_size)
        try:
            got = merkle.tree_root(cp_size, TileReader(source.directory, cp_size))
        except MemrootError as e:
            report.add(
                Finding(
                    5,
                    f"the tiles for checkpoint size {cp_size} cannot be read (a partial tile "
                    f"of that size is missing?): {e}",
                    CANONICAL_BRANCH,
                    cp_size - 1 if cp_size else None,
                )
            )
            continue
        if got != root:
            report.add(
                Finding(
                    5,
                    f"the root computed from the tiles at size {cp_size} is not the signed one",
                    CANONICAL_BRANCH,
                    cp_size - 1 if cp_size else None,
                    expected=root.hex(),
                    actual=got.hex(),
                )
            )
        width = cp_size % TILE_WIDTH
        rel = tile_path("entries", cp_size // TILE_WIDTH, width) if width else None
        if rel is not None and not (source.directory / rel).is_file():
            # C2SP: a log serves the partial bundle of every size it signed.
            report.add(
                Finding(
                    5,
                    f"entry bundle {rel} of checkpoint size {cp_size} is missing",
                    CANONICAL_BRANCH,
                    cp_size - 1,
                )
            )


def _parse_tile_path(rel: str) -> tuple[int | str, int, int] | None:
    """Return ``(level, index, width)`` of a canonical tile path ``rel``, else None."""
    parts = rel.split("/")
    if len(parts) < 3 or parts[0] != "tile":
        return None
    level: int | str = parts[1]
    if level != "entries":
        if not parts[1].isdigit():
            return None
        level = int(parts[1])
    groups, width = parts[2:], TILE_WIDTH
    if len(groups) >= 2 and groups[-2].endswith(".p"):
        if not groups[-1].isdigit():
            return None
        width = int(groups[-1])
        groups = [*groups[:-2], groups[-2][:-2]]
    digits = "".join(g[1:] if g.startswith("x") else g for g in groups)
    if not digits.isdigit() or not 1 <= width <= TILE_WIDTH:
        return None
    index = int(digits)
    try:
        canonical = tile_path(level, index, width)
    except ValueError:
        return None
    return (level, index, width) if canonical == rel else None


def _check_tile_files(source: TilesSource, report: AuditReport) -> None:
    """(5): every file under ``tile/`` a client could fetch belongs to the signed tree.

    The tiles and the entry bundles at the head's size are checked by the scan and the roots
    (step 5); every other one (the partial tiles and partial entry bundles of older
    checkpoints, at every level, and any stray file) must be the start of the one at the
    head's size that holds the same index: a flipped byte in an old partial tile a client
    uses to verify an old checkpoint fails here, at any size.
    """
    base = source.directory / "tile"
    if not base.is_dir():
        return
    head = source.size
    for path in sorted(base.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        rel = path.relative_to(source.directory).as_posix()
        parsed = _parse_tile_path(rel)
        if parsed is None:
            report.add(Finding(5, f"{rel} is not a tile path", CANONICAL_BRANCH))
            continue
        level, index, width = parsed
        shift = 0 if level == "entries" else TILE_HEIGHT * int(level)
        full = head >> (shift + TILE_HEIGHT)
        head_width = TILE_WIDTH if index < full else (head >> shift) % TILE_WIDTH
        if index > full or head_width == 0 or width > head_width:
            report.add(
                Finding(
                    5,
                    f"{rel} lies outside the signed tree of size {head} (a file of a larger "
                    "or another tree)",
                    CANONICAL_BRANCH,
                )
            )
            continue
        if width == head_width:
            continue  # the head's own file: checked by the scan and the roots
        try:
            data = read_tile_file(source.directory, rel, f"{rel} is missing")
            if level == "entries":
                good = split_bundle(data, rel) == source.bundle(index)[:width]
            else:
                whole = source.reader.tile(int(level), index)
                good = len(data) == width * HASH_SIZE and data == whole[: width * HASH_SIZE]
        except MemrootError as e:
            report.add(Finding(5, f"{rel} cannot be checked: {e}", CANONICAL_BRANCH))
            continue
        if not good:
            report.add(
                Finding(
                    5,
                    f"{rel} is not the start of the signed tile at index {index} "
                    f"(tampered partial {'entry bundle' if level == 'entries' else 'tile'})",
                    CANONICAL_BRANCH,
                    (index << (shift + TILE_HEIGHT)) + (width << shift) - 1,
                )
            )


def audit_tiles(
    directory: Path | TilesSource,
    *,
    vkeys: Sequence[str] = (),
    trusted: TrustedState | None = None,
    checks: Sequence[ReplayCheck] = (),
    progress: Progress | None = None,
    update_trusted: bool = True,
) -> AuditReport:
    """Run the auditor's steps over a tiles directory alone; never raises for bad data.

    Steps 1-3, 5, 6 and 10 as for a ledger (keys: the given ``vkeys``, else the trusted state,
    else the genesis published in the tiles, trust on first use); step 5 also checks the
    tile pyramid, each retained checkpoint's root from the tiles, and every other tile and
    entry bundle file against the signed tree. Step 4 is not checked: tiles carry entries
    (with their content commitments) but no content. ``checks`` run after the tiles' own
    (the witness policy's, say); the trusted state moves only when all of them pass.
    """
    try:
        source = directory if isinstance(directory, TilesSource) else TilesSource(directory)
    except MemrootError as e:
        return _unopened("the tiles directory", e)
    origin = source.meta("origin")

    def tiles(report: AuditReport) -> None:
        _check_tile_tree(source, report)
        _check_tile_files(source, report)

    report = audit_source(
        source,
        origin=str(origin) if isinstance(origin, str) else "",
        trusted=trusted,
        vkeys=vkeys,
        checks=[AfterScan(tiles, (5,)), *checks],
        progress=progress,
        update_trusted=update_trusted,
    )
    report.add(Finding(4, "tiles carry no event content: step 4 is not checked", severity="note"))
    report.trusted["tiles"] = {
        "path": str(source.directory),
        "size": source.size,
        "root": source.root.hex(),
    }
    return report


# --------------------------------------------------------------------------- witnesses


class GenesisSource(Protocol):
    """What the witness lookups read: the branches and the genesis (a store, bundle, tiles)."""

    def branches(self) -> Sequence[BranchLike]:
        """Return every branch."""

    def branch(self, name: str) -> BranchLike:
        """Return one branch by name."""

    def entry_row(self, branch_no: int, seq: int) -> RowLike:
        """Return one entry row."""

    def iter_entry_rows(self, branch_no: int) -> Iterable[RowLike]:
        """Yield a branch's entry rows in order."""


def _log_openers(source: GenesisSource, origin: str, log_keys: Sequence[str]) -> list[str]:
    """Every key ``main``'s key entries make a key of the log, from a trusted root on.

    For opening the witnesses' checkpoints only (step 10's reference points; their
    cosignatures are checked, and step 6 judges every signature of the log itself): a
    witness's newest checkpoint may be signed by a writer key or a rotated root key. Nothing
    is learned unless the genesis key is one of ``log_keys``.
    """
    try:
        main = source.branch(CANONICAL_BRANCH)
        genesis = Entry.from_bytes(source.entry_row(main.no, 0).data)
        keys = genesis.body.get("keys")
        if not isinstance(keys, list) or not keys or str(keys[0]) not in log_keys:
            return list(log_keys)
        ks = KeySet.start(origin, str(keys[0]))
        for row in source.iter_entry_rows(main.no):
            e = Entry.from_bytes(row.data)
            if e.kind is Kind.OP and e.type in KEY_ENTRY_TYPES:
                with contextlib.suppress(KeyEntryError):
                    ks.apply(e.seq, bytes(e.prev), str(e.type), e.body.get("payload"))
    except MemrootError:
        return list(log_keys)
    learned = [r.vkey for r in ks.roots] + [w.vkey for w in ks.writers.values()]
    return [*log_keys, *(k for k in learned if k not in log_keys)]


class _WitnessedState(TrustedState):
    """The verifier's trusted state, raised to the newest checkpoints witnesses cosigned.

    ``get`` returns, per origin, whichever is larger: what the file remembers or what a
    witness vouches for (so step 10 compares the log with it); writes go to the file.
    """

    def __init__(self, base: TrustedState | None, witnessed: dict[str, TrustedLog]) -> None:
        self.path = base.path if base is not None else Path("/nonexistent/memroot-trusted")
        self.logs = dict(base.logs) if base is not None else {}
        self._base = base
        self._witnessed = witnessed

    def get(self, origin: str) -> TrustedLog | None:
        """Return the larger of the remembered and the witnessed checkpoint of ``origin``."""
        mine = self._base.get(origin) if self._base is not None else None
        theirs = self._witnessed.get(origin)
        if theirs is None or (mine is not None and mine.size >= theirs.size):
            return mine
        vkeys = mine.vkeys if mine is not None else theirs.vkeys
        return TrustedLog(vkeys, theirs.size, theirs.root, theirs.note)

    def put(self, origin: str, log: TrustedLog) -> None:
        """Remember ``log`` in the file's state."""
        if self._base is not None:
            self._base.put(origin, log)

    def save(self) -> None:
        """Write the file's state."""
        if self._base is not None:
            self._base.save()


@dataclass(frozen=True, slots=True)
class WitnessPolicy:
    """What the auditor asks of witnesses: keys, a quorum, and witnesses to ask directly."""

    keys: tuple[WitnessKey, ...]
    quorum: int
    urls: tuple[str, ...]

    @classmethod
    def from_options(
        cls, vkeys: Sequence[str], quorum: int | None, urls: Sequence[str]
    ) -> WitnessPolicy | None:
        """Build the policy of ``--witness-vkey``/``--quorum``/``--witness`` (None if unused).

        Raises:
            DecodeError: if a witness vkey is malformed.
            RefusedError: if ``--witness`` or ``--quorum`` come without a witness key, or the
                quorum is not between 1 and the number of keys.
        """
        if not vkeys:
            if urls or quorum is not None:
                raise RefusedError(
                    "--witness and --quorum need --witness-vkey: a witness's answer counts "
                    "only with a valid cosignature by a key you trust"
                )
            return None
        keys = tuple(WitnessKey.from_vkey(v) for v in vkeys)
        q = 1 if quorum is None else quorum
        if not 1 <= q <= len(keys):
            raise RefusedError(f"--quorum {q} must be between 1 and the {len(keys)} witness key(s)")
        return cls(keys, q, tuple(urls))

    def trusted(
        self,
        base: TrustedState | None,
        source: GenesisSource,
        origin: str,
        vkeys: Sequence[str],
        report_notes: list[str],
    ) -> TrustedState | None:
        """Ask every ``--witness`` for its newest cosigned checkpoints (one per branch origin).

        Their sizes and roots become the trusted state step 10 checks against. The log's
        signature on a witness's checkpoint is checked with ``vkeys``, else the keys the
        trusted state remembers, else the source's genesis keys (trust on first use).

        Raises:
            StorageError: if a witness cannot be reached.
            IntegrityError: if a witness's answer does not verify.
        """
        if not self.urls:
            return base
        names = [b.name for b in source.branches()]
        origins = [origin if n == CANONICAL_BRANCH else f"{origin}/branch/{n}" for n in names]
        log_keys = list(vkeys)
        remembered = base.get(origin) if base is not None else None
        if not log_keys and remembered is not None:
            log_keys = list(remembered.vkeys)
        if not log_keys:
            log_keys = _genesis_vkeys(source)
            report_notes.append(
                "the witnesses' checkpoints were opened with the log's genesis keys "
                "(trust on first use); pass --vkey to pin the log's key"
            )
        openers = _log_openers(source, origin, log_keys)
        best, notes = witnessed_trust(self.urls, origins, openers, self.keys)
        report_notes.extend(notes)
        witnessed = {o: TrustedLog(tuple(log_keys), s, r, n) for o, (s, r, n, _) in best.items()}
        for o, (s, _, _, url) in best.items():
            report_notes.append(
                f"{o} compared with witness {url}'s newest cosigned checkpoint (size {s})"
            )
        return _WitnessedState(base, witnessed)

    def check(
        self, report: AuditReport, source: CheckpointSource, origin: str, notes: Sequence[str]
    ) -> None:
        """Add the cosignature checks (step 6) and the witness notes to ``report``."""
        check_cosignatures(source, origin, self.keys, self.quorum, report)
        for text in notes:
            report.add(Finding(10, text, severity="note"))

    def as_check(self, source: CheckpointSource, origin: str, notes: Sequence[str]) -> AfterScan:
        """Return ``check`` as a replay check: it then runs before the trusted state moves."""
        return AfterScan(lambda report: self.check(report, source, origin, notes), (6,))


def _genesis_vkeys(source: GenesisSource) -> list[str]:
    try:
        genesis = Entry.from_bytes(source.entry_row(source.branch(CANONICAL_BRANCH).no, 0).data)
    except MemrootError:
        return []
    keys = genesis.body.get("keys", [])
    return [str(k) for k in keys] if isinstance(keys, list) else []
