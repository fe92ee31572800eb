"""Assets: data a task produces and a Dag can be scheduled on (data-aware scheduling).

An :class:`Asset` names a piece of data by URI (``Asset("s3://bucket/orders.csv")``).
A task lists the Assets it updates as its ``outlets``; a Dag whose ``schedule`` is an
Asset runs after that Asset is updated. Combine Assets with ``&`` (all of them) and
``|`` (any of them); a list means all of them::

    with Dag("report", schedule=orders & (prices | rates)):
        ...

The scheduler reads a schedule as an :class:`AssetCondition`, plain data that
serialises with the Dag.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from spawnflow.sdk.names import defined_in_dag_file

URI_MAX = 1500
NAME_MAX = 1500
GROUP_MAX = 250
_URI_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$", re.DOTALL)


class _Combinable:
    """``&`` and ``|`` for Assets and conditions; any other operand is a TypeError."""

    __slots__ = ()

    def __and__(self, other: object) -> AssetAll:
        if not isinstance(other, Asset | AssetAll | AssetAny):
            return NotImplemented
        return AssetAll(self, other)  # type: ignore[arg-type]  # self is one of them too

    def __or__(self, other: object) -> AssetAny:
        if not isinstance(other, Asset | AssetAll | AssetAny):
            return NotImplemented
        return AssetAny(self, other)  # type: ignore[arg-type]  # self is one of them too


class Asset(_Combinable):
    """A piece of data, named by URI; equal (and hashed) by URI only.

    Args:
        uri: ``scheme://rest``, such as ``s3://bucket/key`` or ``file:///data/x.csv``;
            at most 1500 characters, with no whitespace or control characters.
        name: a readable name, the URI unless given; at most 1500 characters.
        group: a label for listing Assets together; at most 250 characters.
        watchers: :class:`~spawnflow.sdk.triggers.AssetWatcher` objects: triggers the
            triggerer runs for as long as a Dag references the Asset, each of whose
            events becomes an event of the Asset.

    Raises:
        ValueError: naming the bad uri, name, group or watcher.
    """

    __slots__ = ("group", "name", "uri", "watchers")

    uri: str
    name: str
    group: str
    watchers: tuple[Any, ...]

    def __init__(self, uri: str, *, name: str | None = None, group: str = "asset",
                 watchers: Iterable[Any] = ()):  # fmt: skip
        object.__setattr__(self, "uri", _check_uri(uri))
        object.__setattr__(
            self, "name", _check_text(uri if name is None else name, "name", NAME_MAX)
        )
        object.__setattr__(self, "group", _check_text(group, "group", GROUP_MAX))
        object.__setattr__(self, "watchers", _check_watchers(uri, watchers))

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"Asset {self.uri!r} cannot be changed; create another Asset")

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and copy despite __setattr__
        return _asset, (self.uri, self.name, self.group, self.watchers)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Asset):
            return NotImplemented
        return self.uri == other.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __repr__(self) -> str:
        extra = "" if self.name == self.uri else f", name={self.name!r}"
        extra += "" if self.group == "asset" else f", group={self.group!r}"
        return f"Asset({self.uri!r}{extra})"


class _Combination(_Combinable):
    """Assets and conditions joined by one operator; nested ones of the same kind flatten."""

    __slots__ = ("items",)

    items: tuple[Asset | AssetAll | AssetAny, ...]

    def __init__(self, *items: Asset | AssetAll | AssetAny):
        flat: list[Asset | AssetAll | AssetAny] = []
        for item in items:
            if type(item) is type(self):
                flat.extend(item.items)  # type: ignore[union-attr]  # same kind as self
            elif isinstance(item, Asset | AssetAll | AssetAny):
                flat.append(item)
            else:
                raise TypeError(
                    f"{type(self).__name__} item {item!r} must be an Asset, AssetAll or AssetAny"
                )
        if not flat:
            raise ValueError(f"{type(self).__name__} needs at least one Asset")
        object.__setattr__(self, "items", tuple(flat))

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} cannot be changed; combine Assets again")

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and copy despite __setattr__
        return type(self), self.items

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Combination):
            return NotImplemented
        return type(self) is type(other) and self.items == other.items

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.items))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.items))})"


class AssetAll(_Combination):
    """True once every item is: ``a & b``."""

    __slots__ = ()


class AssetAny(_Combination):
    """True once at least one item is: ``a | b``."""

    __slots__ = ()


class AssetCondition(msgspec.Struct, frozen=True):
    """The serialisable form of an Asset schedule: one asset, or all/any of items."""

    kind: Literal["asset", "all", "any"]
    #: The Asset's URI when ``kind`` is ``asset``.
    uri: str | None = None
    #: The conditions joined when ``kind`` is ``all`` or ``any``.
    items: list[AssetCondition] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind == "asset" and (self.uri is None or self.items):
            raise ValueError("an asset condition of kind 'asset' needs a uri and no items")
        if self.kind != "asset" and (self.uri is not None or not self.items):
            raise ValueError(f"an asset condition of kind {self.kind!r} needs items and no uri")

    def uris(self) -> list[str]:
        """Every asset URI in the condition, sorted, each once."""
        found: set[str] = set()

        def visit(condition: AssetCondition) -> None:
            if condition.uri is not None:
                found.add(condition.uri)
            for item in condition.items:
                visit(item)

        visit(self)
        return sorted(found)

    def evaluate(self, seen: set[str] | frozenset[str]) -> bool:
        """Whether the condition holds once the assets with the URIs in ``seen`` are updated."""
        if self.kind == "asset":
            return self.uri in seen
        if self.kind == "all":
            return all(item.evaluate(seen) for item in self.items)
        return any(item.evaluate(seen) for item in self.items)

    def describe(self) -> str:
        """The condition as written, such as ``s3://a & (s3://b | s3://c)``."""
        if self.kind == "asset":
            return self.uri or ""
        operator = " & " if self.kind == "all" else " | "
        return operator.join(
            item.describe() if item.kind == "asset" else f"({item.describe()})"
            for item in self.items
        )


class WatcherRef(msgspec.Struct, frozen=True):
    """An asset watcher as a serialized Dag keeps it: its trigger, rebuilt on the triggerer."""

    name: str
    classpath: str
    #: The trigger's keyword arguments, as JSON text (see ``spawnflow.sdk.xcom``).
    kwargs: str


class AssetRef(msgspec.Struct, frozen=True):
    """One Asset a serialized Dag references, in its schedule or a task's outlets."""

    uri: str
    name: str
    group: str
    watchers: list[WatcherRef] = msgspec.field(default_factory=list)


def condition_of(value: object) -> AssetCondition:
    """The AssetCondition for an Asset, ``&``/``|`` of them, or a non-empty list (all of them).

    Raises:
        ValueError: for anything else, an empty list included.
    """
    if isinstance(value, list | tuple):
        if not value or not all(isinstance(v, Asset | AssetAll | AssetAny) for v in value):
            raise ValueError(
                f"asset condition {value!r} must be an Asset, Assets combined with & or |, "
                "or a non-empty list of them"
            )
        value = AssetAll(*value)
    if isinstance(value, Asset):
        return AssetCondition("asset", uri=value.uri)
    if isinstance(value, AssetAll | AssetAny):
        if len(value.items) == 1:
            return condition_of(value.items[0])
        kind: Literal["all", "any"] = "all" if isinstance(value, AssetAll) else "any"
        return AssetCondition(kind, items=[condition_of(item) for item in value.items])
    raise ValueError(
        f"asset condition {value!r} must be an Asset, Assets combined with & or |, "
        "or a non-empty list of them"
    )


def assets_in(value: object) -> list[Asset]:
    """Every Asset object in an Asset, a condition or a list of them, in order."""
    found: list[Asset] = []

    def visit(item: object) -> None:
        if isinstance(item, Asset):
            found.append(item)
        elif isinstance(item, _Combination):
            visit_all(item.items)
        elif isinstance(item, list | tuple):
            visit_all(item)

    def visit_all(items: Iterable[object]) -> None:
        for item in items:
            visit(item)

    visit(value)
    return found


def _asset(uri: str, name: str, group: str, watchers: tuple[Any, ...] = ()) -> Asset:
    return Asset(uri, name=name, group=group, watchers=watchers)


def _check_watchers(uri: str, watchers: Iterable[Any]) -> tuple[Any, ...]:
    from spawnflow.sdk.triggers import AssetWatcher

    if isinstance(watchers, str | bytes) or not isinstance(watchers, Iterable):
        raise ValueError(f"watchers of asset {_shown(uri)} must be a list of AssetWatchers")
    found = tuple(watchers)
    names: set[str] = set()
    for watcher in found:
        if not isinstance(watcher, AssetWatcher):
            raise ValueError(
                f"watchers of asset {_shown(uri)} must be AssetWatchers, not {watcher!r}"
            )
        if watcher.name in names:
            raise ValueError(f"asset {_shown(uri)} has two watchers named {watcher.name!r}")
        names.add(watcher.name)
    return found


def watcher_refs(asset: Asset) -> list[WatcherRef]:
    """The Asset's watchers as a serialized Dag keeps them; ValueError for a trigger the
    triggerer could not build again."""
    from spawnflow.sdk import xcom

    refs = []
    for watcher in asset.watchers:
        classpath, kwargs = watcher.trigger.serialize()
        if defined_in_dag_file(classpath):
            raise ValueError(
                f"the trigger of asset watcher {watcher.name!r} is a class defined in the Dag "
                "file, which the triggerer does not import: put it in a module of its own "
                "(the Dags folder is on the triggerer's path)"
            )
        try:
            text = xcom.encode(kwargs, subject=f"an argument of watcher {watcher.name!r}")
        except xcom.XComError as error:
            raise ValueError(str(error)) from None
        refs.append(WatcherRef(name=watcher.name, classpath=classpath, kwargs=text))
    return refs


def _check_uri(uri: object) -> str:
    if not isinstance(uri, str):
        raise ValueError(f"asset uri {uri!r} must be a string such as 's3://bucket/key'")
    if not 1 <= len(uri) <= URI_MAX:
        raise ValueError(
            f"asset uri {_shown(uri)} must be 1-{URI_MAX} characters long, not {len(uri)}"
        )
    if any(char.isspace() or unicodedata.category(char) == "Cc" for char in uri):
        raise ValueError(
            f"asset uri {_shown(uri)} must not contain whitespace or control characters"
        )
    if not _URI_PATTERN.match(uri):
        raise ValueError(
            f"asset uri {_shown(uri)} must look like 'scheme://path', such as 's3://bucket/key'"
        )
    return uri


def _check_text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= limit:
        raise ValueError(
            f"asset {what} {_shown(value)} must be a non-empty string of at most {limit} characters"
        )
    return value


def _shown(value: object) -> str:
    """``repr(value)``, cut short for a long string."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:50]}...{text[-5:]}"
