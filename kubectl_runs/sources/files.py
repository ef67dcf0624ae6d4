"""Snapshots from files (API.md §2): YAML or JSON, one object, a ``List``, a multi-document stream, a
directory of them, or stdin (``-``).

JSON is decoded straight into typed records with msgspec while the cyclic garbage collector is paused —
the fastest load measured here (NOTES.md). A file that does not decode in one pass (an unknown kind, a bad
field) is decoded again object by object, so that the error names the file, the object and the field path,
and objects of kinds we do not read are skipped with a note.
"""

from __future__ import annotations

import bisect
import collections
import functools
import gc
import itertools
import operator
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Union

import msgspec
import yaml

from ..errors import UserError
from ..kueue.model import LEAN_KINDS, QUEUE_KINDS, QueueObjects
from ..model import (
    CLUSTER_SCOPED,
    EARLIEST_TIME,
    INT64_MAX,
    KIND_API_VERSIONS,
    KINDS,
    LATEST_TIME,
    LEAN_LEASE_KINDS,
    SNAPSHOT_KINDS,
    SNAPSHOT_TIME_ANNOTATION,
    AnyObject,
    NameMeta,
    Snapshot,
    check_time,
)
from ..pods.model import POD_KINDS, PodObjects
from . import snapshot_input
from .json_keys import duplicate_key
from .nesting import json_too_deep, too_deep_message, yaml_too_deep
from .strict_yaml import StrictLoader

SNAPSHOT_SUFFIXES = (".json", ".yaml", ".yml")


class SnapshotError(UserError):
    """A snapshot that cannot be read: names the file, the object and the field path."""


# --- typed documents ------------------------------------------------------------------------------------------


class _ListMeta(msgspec.Struct, frozen=True, gc=False):
    annotations: dict[str, str] = {}


class _TypedList(msgspec.Struct, frozen=True, gc=False):
    """The fast path: a ``List`` whose items are all kinds we read."""

    items: list[AnyObject]  # required: a bare object must not pass for an empty List
    metadata: _ListMeta = _ListMeta()
    kind: str = ""
    api_version: str = msgspec.field(default="", name="apiVersion")


class _PeekMeta(msgspec.Struct, frozen=True, gc=False):
    name: str = ""
    namespace: str = ""
    annotations: dict[str, str] = {}


class _Peek(msgspec.Struct, frozen=True, gc=False):
    """Just enough of any object to name it in an error."""

    kind: str = ""
    metadata: _PeekMeta = _PeekMeta()
    items: list[msgspec.Raw] | None = None
    api_version: str = msgspec.field(default="", name="apiVersion")


class _RawList(msgspec.Struct, frozen=True, gc=False):
    items: list[msgspec.Raw] = []


_LEAN_KINDS = {**SNAPSHOT_KINDS, **LEAN_KINDS, **LEAN_LEASE_KINDS}
_LeanObject = Union[(*_LEAN_KINDS.values(),)]  # as AnyObject, Workloads as WorkloadHead, GPULeases as GPULeaseHead


class _LeanTypedList(msgspec.Struct, frozen=True, gc=False):
    """The fast path of a lean load: the same, Workloads as WorkloadHead (kubectl_runs.kueue.model) and GPULeases
    as GPULeaseHead (kubectl_runs.model)."""

    items: list[_LeanObject]  # type: ignore[valid-type]
    metadata: _ListMeta = _ListMeta()
    kind: str = ""
    api_version: str = msgspec.field(default="", name="apiVersion")


_KIND_OF = {cls: kind for kind, cls in (*SNAPSHOT_KINDS.items(), *LEAN_KINDS.items(), *LEAN_LEASE_KINDS.items())}


@functools.cache
def _decoder(of: Any) -> msgspec.json.Decoder:
    """A JSON decoder of ``of``, made when a snapshot file first needs it: making one resolves the types of
    every kind it can hold, which a live report (``sources.cluster``, which imports this module for the
    collector) does not need to pay for at start-up."""
    return msgspec.json.Decoder(of)


def _object_decoder(kind: str) -> msgspec.json.Decoder | None:
    cls = SNAPSHOT_KINDS.get(kind)
    return None if cls is None else _decoder(cls)


_PATH_IN_ERROR = re.compile(r" - at `\$(?:\.)?(.*)`$")


# A bulk load that made this many GC-tracked objects (mostly the slot tuples of the leases) freezes them.
_FREEZE_AFTER = 50_000


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while millions of small objects are created (NOTES.md: ~4× faster loads).

    After a bulk load the records live as long as the command, so they are moved to the permanent generation
    (``gc.freeze``): otherwise the first collection after the load scans every slot tuple once (~0.7 s for
    200,000 leases) only to find no garbage. Refcounting still frees them when the snapshot goes away."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_count()[0] > _FREEZE_AFTER:
            gc.freeze()
        if was_enabled:
            gc.enable()


# --- the collector ------------------------------------------------------------------------------------------


_NAME = operator.attrgetter("metadata.name")
_SLOTS = operator.attrgetter("spec.slice.slots")
_START = operator.attrgetter("spec.start")
_METADATA = operator.attrgetter("metadata")
_NAMESPACE = operator.attrgetter("metadata.namespace")
_KEYS: dict[str, Callable[[Any], Any]] = {kind: _NAME if kind in CLUSTER_SCOPED  # cluster-scoped: by name
                                          else operator.attrgetter("metadata.namespace", "metadata.name")
                                          for kind in SNAPSHOT_KINDS}


def _increasing(values: list[Any]) -> bool:
    return all(map(operator.lt, values, itertools.islice(values, 1, None)))


def _in_order(kind: str, objects: list[Any]) -> bool:
    """Strictly increasing by (namespace, name): sorted, one copy of each. Checked a namespace at a time,
    which makes no key tuples (twice as fast as comparing them on 200,000 leases)."""
    if kind in CLUSTER_SCOPED:
        return _increasing(list(map(_NAME, objects)))
    if objects and type(objects[0].metadata) is NameMeta:  # lean records: (namespace, name) compared in C
        try:
            return _increasing(list(map(_METADATA, objects)))
        except TypeError:  # lean and full records mixed (a YAML file beside a JSON one): as below
            pass
    namespaces = []
    for namespace, group in itertools.groupby(objects, key=_NAMESPACE):
        if not _increasing(list(map(_NAME, group))):
            return False
        namespaces.append(namespace)
    return _increasing(namespaces)  # each namespace in one run, the runs in order


class _ReadInFull(Exception):
    """A lean load met what its lean records cannot decide (two copies of one object: are they the same?)."""


class _Collector:
    """Objects from every source, with where each came from.

    Two copies of one object (same kind, namespace and name) are what a snapshot cannot hold: the API server
    stores one. From files (``strict``), identical copies — the same file given twice, overlapping exports —
    are read once with a note; copies that differ are refused, naming both files (which one is right is not
    ours to guess). From the API server (not strict) a later copy replaces an earlier one."""

    def __init__(self, strict: bool = False, lean: bool = False) -> None:
        self.strict = strict
        self.lean = lean
        self.by_kind: dict[str, list[Any]] = {kind: [] for kind in SNAPSHOT_KINDS}  # in the order they came
        self.origins: dict[str, tuple[list[int], list[str]]] = {kind: ([], []) for kind in SNAPSHOT_KINDS}
        self.stamps: list[datetime] = []
        self.notes: list[str] = []
        self.skipped: dict[str, dict[str, int]] = {}  # kind -> file -> objects of that kind ignored

    def add_many(self, kind: str, objects: Iterable[Any], where: str = "") -> None:
        found = self.by_kind[kind]
        found.extend(objects)
        ends, wheres = self.origins[kind]
        if wheres and wheres[-1] == where:
            ends[-1] = len(found)
        else:
            ends.append(len(found))
            wheres.append(where)

    def where(self, kind: str, index: int) -> str:
        ends, wheres = self.origins[kind]
        return wheres[bisect.bisect_right(ends, index)]

    def stamp(self, annotations: dict[str, str] | None, where: str) -> None:
        text = (annotations or {}).get(SNAPSHOT_TIME_ANNOTATION)
        if not text:
            return
        try:
            self.stamps.append(msgspec.convert(text, datetime))
        except msgspec.ValidationError:
            raise SnapshotError(f"{where}: annotation {SNAPSHOT_TIME_ANNOTATION}: {text!r} is not an RFC 3339 time") from None

    def skip(self, kind: str, where: str) -> None:
        files = self.skipped.setdefault(kind or "<no kind>", {})
        files[where] = files.get(where, 0) + 1

    def ordered(self, kind: str, copies: dict[tuple[str, str], int]) -> tuple[Any, ...]:
        """By (namespace, name), one copy of each object. Lists from the API server (and `snapshot save`)
        come in this order already: one linear check, then no sort at all (and no copies to look for). Otherwise
        the objects are sorted, and only when two have one key are the copies compared, one by one."""
        objects = self.by_kind[kind]
        if _in_order(kind, objects):
            return tuple(objects)
        keys = list(map(_KEYS[kind], objects))
        order = sorted(range(len(keys)), key=keys.__getitem__)  # stable: copies in the order given
        if _increasing(list(map(keys.__getitem__, order))):  # one copy of each: sorted is all there is to do
            return tuple(map(objects.__getitem__, order))
        first: dict[Any, int] = {}
        for index in order:
            key = keys[index]
            earlier = first.get(key)
            if earlier is None or not self.strict:
                first[key] = index  # (not strict: a later copy replaces an earlier one, in the same place)
                continue
            if self.lean:  # lean records leave fields out: whether two copies are the same is decided in full
                raise _ReadInFull
            pair = (self.where(kind, earlier), self.where(kind, index))
            if objects[earlier] != objects[index]:
                name = key if kind in CLUSTER_SCOPED else "/".join(key)
                also = f"is also in {pair[0]}" if pair[0] != pair[1] else "is given twice in this file"
                raise SnapshotError(
                    f"{pair[1]}: {kind} {name} {also} with different content: a snapshot holds one copy of each "
                    "object (remove the copy that is wrong)"
                )
            copies[pair] = copies.get(pair, 0) + 1
        return tuple(map(objects.__getitem__, first.values()))

    def check_leases(self) -> None:
        """What the API server refuses of a GPULease and msgspec cannot say (crds/gpuleases.jobtree.dev.yaml): a slot
        given twice (``slots`` is a set) and a start outside 1970-9000 (CEL). Over all leases at once, at C speed
        (a ``__post_init__`` per lease costs half the decode); only a lease found wrong is looked at in Python."""
        leases = self.by_kind["GPULease"]
        if not leases:
            return
        slots = list(map(_SLOTS, leases))
        starts = list(map(_START, leases))
        bad = next(itertools.compress(itertools.count(), map(operator.ne, map(len, map(set, slots)), map(len, slots))),
                   None)
        if bad is None and min(starts) >= EARLIEST_TIME and max(starts) < LATEST_TIME:
            return
        if bad is None:
            bad = next(i for i, start in enumerate(starts) if not EARLIEST_TIME <= start < LATEST_TIME)
        lease = leases[bad]
        where = f"{self.where('GPULease', bad)}: GPULease {lease.metadata.namespace}/{lease.metadata.name}"
        twice = [slot for slot, n in collections.Counter(slots[bad]).items() if n > 1]
        if twice:
            raise SnapshotError(f"{where}: spec.slice.slots: {twice[0]!r} is given {slots[bad].count(twice[0]):,} "
                                "times: each slot once (a lease's GPUs are its slots; the CRD's list is a set)")
        try:
            check_time("spec.start", starts[bad])
        except ValueError as exc:
            raise SnapshotError(f"{where}: {exc}") from None

    def snapshot(self) -> Snapshot:
        for kind, files in sorted(self.skipped.items()):
            count = sum(files.values())
            names = list(files)
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more files" if len(names) > 3 else "")
            self.notes.append(
                f"ignored {count} object(s) of kind {kind} in {shown}: kubectl-runs reads {', '.join(KINDS)}"
            )
        if self.strict:
            self.check_leases()
        copies: dict[tuple[str, str], int] = {}
        by_kind = {kind: self.ordered(kind, copies) for kind in SNAPSHOT_KINDS}
        for (first, second), count in copies.items():
            where = f"in {first} and {second}" if first != second else f"in {first}"
            self.notes.append(f"{count} object(s) given more than once {where} with the same content: read once")
        return Snapshot(
            nodes=by_kind["Node"],
            budgets=by_kind["Budget"],
            runs=by_kind["Run"],
            reservations=by_kind["Reservation"],
            leases=by_kind["GPULease"],
            taken_at=max(self.stamps) if self.stamps else None,
            notes=tuple(self.notes),
            queues=QueueObjects.of({kind: by_kind[kind] for kind in QUEUE_KINDS}),
            pods=PodObjects.of({kind: by_kind[kind] for kind in POD_KINDS}),
        )


# --- entry points -------------------------------------------------------------------------------------------


def load_snapshot(paths: Sequence[str], stdin: Any = None, *, lean: bool = False) -> Snapshot:
    """Load every path (a file, a directory, or ``-`` for stdin) into one Snapshot.

    ``lean`` (`queues usage`, `leases audit`): a JSON file's Workloads are read as ``WorkloadHead`` (pod sets left
    undecoded) and its GPULeases as ``GPULeaseHead`` (name and namespace of their metadata) where the fast path
    reads the file; YAML and the slow path read them in full. Not from stdin (a lean load that meets two copies of
    an object reads the files again in full, which decides as a full load does; stdin cannot be read twice)."""
    if lean and "-" not in paths:
        try:
            return _load(paths, stdin, lean=True)
        except _ReadInFull:
            pass
    return _load(paths, stdin, lean=False)


def _load(paths: Sequence[str], stdin: Any, lean: bool) -> Snapshot:
    collector = _Collector(strict=True, lean=lean)
    with gc_paused():
        for path in paths:
            for name, data in _read(path, stdin):
                try:
                    load_document(name, data, collector)
                except MemoryError:
                    size = len(data)
                    del data
                    raise SnapshotError(f"{name}: not enough memory to read its objects ({size:,} bytes)") from None
        return collector.snapshot()


def load_file(name: str, data: bytes) -> Snapshot:
    """One file's bytes (already read, named ``name``) into a Snapshot, as ``load_snapshot`` reads a file."""
    collector = _Collector(strict=True)
    with gc_paused():
        load_document(name, data, collector)
        return collector.snapshot()


def load_file_apart(name: str, data: bytes, kind: str) -> tuple[Snapshot, list[Any]]:
    """``load_file``, but the objects of ``kind`` are kept apart: the snapshot without them, and them as the file
    gives them. They are checked as every object is, but neither put in order nor looked for copies (the caller
    does that its own way: the archive writer counts their keys in DuckDB, and loads the file with ``load_file``
    when two share one). Half a second less for a million leases, which a file has in order already."""
    collector = _Collector(strict=True)
    with gc_paused():
        load_document(name, data, collector)
        apart, collector.by_kind[kind] = collector.by_kind[kind], []
        return collector.snapshot(), apart


def read_file(path: str) -> tuple[str, bytes] | None:
    """(name, bytes) of ``path`` when it is one file (not ``-``, not a directory), as ``load_snapshot`` reads it;
    None otherwise, or when it cannot be read (``load_snapshot`` then says why)."""
    if path == "-" or os.path.isdir(path):
        return None
    try:
        return next(_read(path, None))
    except SnapshotError:
        return None


def load_document(name: str, data: bytes, collector: _Collector) -> None:
    """One file's bytes: JSON when it starts with ``{`` or ``[``, otherwise YAML."""
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        _load_json(name, data, collector)
    else:
        _load_yaml(name, data, collector)


def _read(path: str, stdin: Any) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each file of ``path``: bounded and checked by sources/snapshot_input.py."""
    limit = snapshot_input.max_bytes()
    if path == "-":
        yield "<stdin>", _refused(snapshot_input.read_stdin, stdin, limit)
        return
    if os.path.isdir(path):
        found = []
        for root, _dirs, files in os.walk(path):
            found.extend(os.path.join(root, f) for f in files if f.endswith(SNAPSHOT_SUFFIXES))
        if not found:
            raise SnapshotError(f"{path}: no .json, .yaml or .yml files in this directory")
        for file in sorted(found):
            yield from _read(file, stdin)
        return
    try:
        data = _refused(snapshot_input.read_path, path, limit)
    except FileNotFoundError:
        raise SnapshotError(f"{path}: no such file or directory") from None
    except IsADirectoryError:
        raise SnapshotError(f"{path}: is a directory") from None
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    yield path, data


def _refused(read: Callable[[Any, int], bytes], what: Any, limit: int) -> bytes:
    try:
        return read(what, limit)
    except SnapshotError:
        raise
    except UserError as exc:  # a refusal of snapshot_input: a SnapshotError (read_file's caller tells them apart)
        raise SnapshotError(exc.message, exc.code) from None


# --- JSON ---------------------------------------------------------------------------------------------------


def _load_json(name: str, data: bytes, collector: _Collector) -> None:
    repeated = duplicate_key(data)  # hand-written files only (see sources/json_keys.py)
    if repeated is not None:
        key, line, first = repeated
        raise SnapshotError(f"{name}: duplicate key {key!r} at line {line} (first given at line {first}): an object "
                            "gives each key once (the API server refuses it)")
    try:
        typed = _decoder(_LeanTypedList if collector.lean else _TypedList).decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        # (msgspec has a depth guard of its own: nesting past Python's recursion limit is a RecursionError, never
        # a crash. A typed List that decodes is as shallow as the model; anything else is checked below.)
        typed = None
    if typed is not None:
        _check_list_version(name, typed.kind, typed.api_version)
        collector.stamp(typed.metadata.annotations, name)
        _collect_typed(typed.items, collector, name)
        return
    _load_json_slowly(name, data, collector)


def _collect_typed(items: list[Any], collector: _Collector, where: str) -> None:
    for cls, objects in itertools.groupby(items, key=type):  # a List holds its kinds in runs
        collector.add_many(_KIND_OF[cls], objects, where)


def _check_list_version(name: str, kind: str, api_version: str) -> None:
    """A ``List`` is ``v1``; a typed list (``BudgetList``, as the API server answers a list) is its kind's
    version. Absent is fine (hand-written files)."""
    if not api_version:
        return
    item_kind = kind[:-4] if kind.endswith("List") else ""
    expected = "v1" if kind in ("", "List") else KIND_API_VERSIONS.get(item_kind)
    if expected is not None and api_version != expected:
        raise SnapshotError(f"{name}: {kind or 'List'}: apiVersion {api_version!r} is not {expected}")


def _load_json_slowly(name: str, data: bytes, collector: _Collector) -> None:
    line = json_too_deep(data)
    if line is not None:
        raise SnapshotError(too_deep_message(name, line))
    try:
        _decode_json_slowly(name, data, collector)
    except RecursionError:  # a backstop: the check above refuses anything this deep first
        raise SnapshotError(f"{name}: nested too deeply to read (no Kubernetes object is nested that deep)") from None


def _decode_json_slowly(name: str, data: bytes, collector: _Collector) -> None:
    try:
        if data.lstrip()[:1] == b"[":
            raws = _decoder(list[msgspec.Raw]).decode(data)
        else:
            peek = _decoder(_Peek).decode(data)
            if peek.items is None:
                raws = [msgspec.Raw(data)]
            else:
                _check_list_version(name, peek.kind, peek.api_version)
                collector.stamp(peek.metadata.annotations, name)
                raws = peek.items
    except msgspec.DecodeError as exc:
        raise SnapshotError(f"{name}: not valid JSON: {exc}") from None
    except msgspec.ValidationError as exc:
        raise SnapshotError(f"{name}: not a Kubernetes object or List: {exc}") from None
    for index, raw in enumerate(raws):
        try:
            peek = _decoder(_Peek).decode(raw)
        except msgspec.ValidationError as exc:
            raise SnapshotError(f"{name}: items[{index}]: not a Kubernetes object: {_field_error(exc)}") from None
        decoder = _object_decoder(peek.kind)
        if decoder is None:
            if peek.items is not None:  # a nested List
                _check_list_version(name, peek.kind, peek.api_version)
                _decode_json_slowly(name, bytes(raw), collector)
            else:
                collector.skip(peek.kind, name)
            continue
        try:
            obj = decoder.decode(raw)
        except msgspec.ValidationError as exc:
            raise SnapshotError(f"{name}: {_describe(peek.kind, peek.metadata)}: {_field_error(exc, peek.kind)}") from None
        collector.add_many(peek.kind, (obj,), name)


# --- YAML ---------------------------------------------------------------------------------------------------


def _yaml_loader() -> type:
    return StrictLoader


def _load_yaml(name: str, data: bytes, collector: _Collector) -> None:
    line = yaml_too_deep(data)  # before the C loader, whose composer overflows the C stack on deep input
    if line is not None:
        raise SnapshotError(too_deep_message(name, line))
    try:
        documents = [doc for doc in yaml.load_all(data, Loader=_yaml_loader()) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SnapshotError(f"{name}: not valid YAML{where}: {problem}") from None
    for index, doc in enumerate(documents):
        _collect_dict(name, doc, collector, f"document {index + 1}")


def _collect_dict(name: str, doc: Any, collector: _Collector, where: str) -> None:
    if not isinstance(doc, dict):
        raise SnapshotError(f"{name}: {where}: not a Kubernetes object (a mapping with kind and metadata)")
    kind = doc.get("kind")
    items = doc.get("items")
    if isinstance(items, list) and (kind is None or str(kind).endswith("List")):
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        _check_list_version(name, str(kind or ""), str(doc.get("apiVersion") or ""))
        collector.stamp(meta.get("annotations"), name)
        for index, item in enumerate(items):
            _collect_dict(name, item, collector, f"items[{index}]")
        return
    cls = SNAPSHOT_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        collector.skip(kind if isinstance(kind, str) else "", name)
        return
    body = {k: v for k, v in doc.items() if k != "kind"}
    try:
        obj = msgspec.convert(body, cls, from_attributes=False, strict=True)  # "8" is not 8, in YAML as in JSON
    except msgspec.ValidationError as exc:
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        peek_meta = _PeekMeta(name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")))
        raise SnapshotError(f"{name}: {_describe(kind, peek_meta)}: {_field_error(exc, kind)}") from None
    collector.add_many(kind, (obj,), name)


# --- error text -----------------------------------------------------------------------------------------


def _describe(kind: str, meta: _PeekMeta) -> str:
    if not meta.name:
        return f"{kind} <unnamed>"
    if kind in CLUSTER_SCOPED:
        return f"{kind} {meta.name}"
    return f"{kind} {meta.namespace or 'default'}/{meta.name}"


def _field_error(exc: msgspec.ValidationError, kind: str = "") -> str:
    """msgspec says ``Expected `int`, got `str` - at `$.spec.envelopes[1].concurrency```; we say
    ``spec.envelopes[1].concurrency: expected int, got str``."""
    text = str(exc)
    match = _PATH_IN_ERROR.search(text)
    path = match.group(1) if match else ""
    message = _PATH_IN_ERROR.sub("", text)
    missing = _MISSING_FIELD.match(message)
    if missing:  # name the missing field's own path: ``spec.owner: required field is missing``
        path = f"{path}.{missing.group(1)}" if path else missing.group(1)
        message = "required field is missing"
    if path == "apiVersion" and kind in KIND_API_VERSIONS:
        wrong = message.partition("Invalid enum value ")[2] or message
        return f"apiVersion {wrong} is not {KIND_API_VERSIONS[kind]} (the version of {kind} kubectl-runs reads)"
    message = message[:1].lower() + message[1:]
    message = message.replace("`", "").replace(f"<= {INT64_MAX}", f"<= {INT64_MAX} (an int64)")
    for python_name, wire in (("class_", "class"),):
        message = message.replace(python_name, wire)
    if path:
        return f"{path}: {message}"
    return message


_MISSING_FIELD = re.compile(r"^Object missing required field `([^`]+)`$")
