"""Convert between the core's frozen dataclasses and protobuf messages, by field name.

The core never imports generated code; its requests, responses and records are dataclasses
whose field names equal the protobuf field names. This module is the one place that maps
them, with a converter compiled once per (dataclass, message) pair.

Mapping rules (dataclass annotation <-> protobuf field):

* ``str``/``int``/``bool``/``bytes``/``float`` <-> scalar. If the protobuf field is
  ``optional`` (has presence) and is unset, the dataclass field's *default* is used: this is
  how Kafka defaults such as ``generation_id = -1`` survive proto3's zero defaults.
* ``X | None`` <-> ``optional`` scalar or a message field: unset = ``None``.
* a dataclass ``D`` <-> a message field (recursively).
* ``tuple[T, ...]`` / ``list[T]`` <-> ``repeated`` field.
* ``tuple[T, ...] | None`` <-> a wrapper message holding exactly one repeated field (Kafka's
  nullable arrays): unset = ``None``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

T = TypeVar("T")
M = TypeVar("M", bound=Message)

_SCALARS = (str, int, bool, bytes, float)
_FROM_CACHE: dict[tuple[type, type], Callable[[Any], Any]] = {}
_TO_CACHE: dict[tuple[type, type], Callable[[Any], Any]] = {}


class ConversionError(TypeError):
    """A dataclass and a message disagree (a programming error, caught by tests)."""


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
        raise ConversionError(f"unsupported union {tp}")
    return tp, False


def _sequence_item(tp: Any) -> tuple[Any, type] | None:
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0], tuple
        raise ConversionError(f"only homogeneous tuple[T, ...] is supported, got {tp}")
    if origin is list:
        return typing.get_args(tp)[0], list
    return None


def _message_class(fd: FieldDescriptor) -> type[Message]:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(fd.message_type)


def is_repeated(fd: FieldDescriptor) -> bool:
    # `label` is deprecated in newer protobuf releases; `is_repeated` replaces it.
    rep = getattr(fd, "is_repeated", None)
    if rep is not None:
        return bool(rep)
    return fd.label == FieldDescriptor.LABEL_REPEATED  # pragma: no cover


def _item_from(item_tp: Any, fd: FieldDescriptor) -> Callable[[Any], Any]:
    if dataclasses.is_dataclass(item_tp):
        return _compile_from(item_tp, _message_class(fd))  # type: ignore[arg-type]
    if item_tp in _SCALARS:
        return item_tp
    raise ConversionError(f"unsupported item type {item_tp}")


def _item_to(item_tp: Any, fd: FieldDescriptor) -> Callable[[Any], Any] | None:
    if dataclasses.is_dataclass(item_tp):
        return _compile_to(item_tp, _message_class(fd))  # type: ignore[arg-type]
    return None


def _codegen(name: str, body: list[str], namespace: dict[str, Any]) -> Callable[[Any], Any]:
    """Compile a straight-line converter (as ``dataclasses`` builds ``__init__``): several
    times faster per call than a chain of per-field closures."""
    src = f"def {name}(x):\n" + "\n".join(f"    {line}" for line in body)
    exec(src, namespace)  # noqa: S102 - source built from field names of our own types
    return namespace[name]


def _items_from(i: int, conv: Callable[[Any], Any], source: str, ns: dict[str, Any]) -> str:
    """The expression building field ``i``'s container (``_c{i}``) from the repeated
    ``source``, converting each item with ``conv`` unless it is a scalar."""
    if conv in _SCALARS:
        return f"_c{i}({source})"
    ns[f"_s{i}"] = conv
    return f"_c{i}([_s{i}(v) for v in {source}])"


Compiler = Callable[[type, type[Message]], Callable[[Any], Any]]


def _memoized(
    cache: dict[tuple[type, type], Callable[[Any], Any]],
) -> Callable[[Compiler], Compiler]:
    """One converter per (dataclass, message) pair, compiled on first use."""

    def wrap(compile: Compiler) -> Compiler:
        def compiled(cls: type, msg_cls: type[Message]) -> Callable[[Any], Any]:
            key = (cls, msg_cls)
            if key not in cache:
                # placeholder so that a recursive type terminates (resolved lazily at call time)
                cache[key] = lambda x: cache[key](x)
                cache[key] = compile(cls, msg_cls)
            return cache[key]

        return compiled

    return wrap


def _paired_fields(
    cls: type, msg_cls: type[Message]
) -> Iterator[tuple[int, dataclasses.Field[Any], FieldDescriptor, Any, bool]]:
    """Each dataclass field with its index, the message field of the same name, and its
    annotation without ``| None`` (and whether it had it)."""
    hints = typing.get_type_hints(cls)
    fields_by_name = msg_cls.DESCRIPTOR.fields_by_name
    for i, f in enumerate(dataclasses.fields(cls)):
        fd = fields_by_name.get(f.name)
        if fd is None:
            raise ConversionError(f"{msg_cls.__name__} has no field {f.name!r} ({cls.__name__})")
        tp, nullable = _unwrap_optional(hints[f.name])
        yield i, f, fd, tp, nullable


@_memoized(_FROM_CACHE)
def _compile_from(cls: type, msg_cls: type[Message]) -> Callable[[Any], Any]:
    ns: dict[str, Any] = {"_cls": cls}
    args: list[str] = []
    for i, f, fd, tp, nullable in _paired_fields(cls, msg_cls):
        n = f.name
        present = f"x.HasField({n!r})"
        seq = _sequence_item(tp)
        if seq is not None:
            item_tp, container = seq
            ns[f"_c{i}"] = container
            if is_repeated(fd):
                expr = _items_from(i, _item_from(item_tp, fd), f"x.{n}", ns)
            elif fd.message_type is not None and nullable:
                inner_fields = fd.message_type.fields
                if len(inner_fields) != 1 or not is_repeated(inner_fields[0]):
                    raise ConversionError(f"{n}: wrapper must hold one repeated field")
                inner = inner_fields[0]
                items = _items_from(i, _item_from(item_tp, inner), f"x.{n}.{inner.name}", ns)
                expr = f"({items} if {present} else None)"
            else:
                raise ConversionError(f"{cls.__name__}.{n}: sequence vs non-repeated field")
        elif dataclasses.is_dataclass(tp):
            ns[f"_s{i}"] = _compile_from(tp, _message_class(fd))  # type: ignore[arg-type]
            expr = f"(_s{i}(x.{n}) if {present} else None)" if nullable else f"_s{i}(x.{n})"
        elif tp in _SCALARS:
            if nullable:
                if not fd.has_presence:
                    raise ConversionError(f"{cls.__name__}.{n}: nullable needs `optional`")
                expr = f"(x.{n} if {present} else None)"
            elif fd.has_presence and f.default is not dataclasses.MISSING:
                ns[f"_d{i}"] = f.default
                expr = f"(x.{n} if {present} else _d{i})"
            else:
                expr = f"x.{n}"
        else:
            raise ConversionError(f"{cls.__name__}.{n}: unsupported type {tp}")
        args.append(f"{n}={expr}")
    return _codegen("build", [f"return _cls({', '.join(args)})"], ns)


@_memoized(_TO_CACHE)
def _compile_to(cls: type, msg_cls: type[Message]) -> Callable[[Any], Any]:
    ns: dict[str, Any] = {"_msg": msg_cls}
    always: list[str] = []  # keyword arguments that are never None
    maybe: list[str] = []  # statements adding a keyword argument when the value is not None
    for i, f, fd, tp, nullable in _paired_fields(cls, msg_cls):
        n = f.name
        seq = _sequence_item(tp)
        if seq is not None:
            item_tp, _ = seq
            if is_repeated(fd):
                sub = _item_to(item_tp, fd)
                if sub is None:
                    expr = "{v}"
                else:
                    ns[f"_s{i}"] = sub
                    expr = f"[_s{i}(e) for e in {{v}}]"
            else:
                inner = fd.message_type.fields[0]
                ns[f"_w{i}"] = _message_class(fd)
                sub = _item_to(item_tp, inner)
                if sub is None:
                    expr = f"_w{i}({inner.name}={{v}})"
                else:
                    ns[f"_s{i}"] = sub
                    expr = f"_w{i}({inner.name}=[_s{i}(e) for e in {{v}}])"
        elif dataclasses.is_dataclass(tp):
            ns[f"_s{i}"] = _compile_to(tp, _message_class(fd))  # type: ignore[arg-type]
            expr = f"_s{i}({{v}})"
        else:
            expr = "{v}"
        if nullable:
            maybe += [f"v = x.{n}", "if v is not None:", f"    kw[{n!r}] = " + expr.format(v="v")]
        else:
            always.append(f"{n}=" + expr.format(v=f"x.{n}"))
    if maybe:
        body = [f"kw = dict({', '.join(always)})", *maybe, "return _msg(**kw)"]
    else:
        body = [f"return _msg({', '.join(always)})"]
    return _codegen("build", body, ns)


def from_message(msg: Message, cls: type[T]) -> T:
    """Build a ``cls`` dataclass from a protobuf message of the matching shape."""
    return _compile_from(cls, type(msg))(msg)


def to_message(obj: Any, msg_cls: type[M]) -> M:
    """Build a ``msg_cls`` protobuf message from a dataclass of the matching shape."""
    return _compile_to(type(obj), msg_cls)(obj)


def optional(msg: Message, field: str) -> Any:
    """An ``optional`` field (one with presence): its value, or None when it is unset."""
    return getattr(msg, field) if msg.HasField(field) else None


def set_optional(msg: M, **values: Any) -> M:
    """Set the ``optional`` fields whose value is not None (None leaves a field unset);
    returns ``msg``."""
    for name, value in values.items():
        if value is not None:
            setattr(msg, name, value)
    return msg


def converter_from(cls: type[T], msg_cls: type[Message]) -> Callable[[Message], T]:
    return _compile_from(cls, msg_cls)


def converter_to(cls: type, msg_cls: type[M]) -> Callable[[Any], M]:
    return _compile_to(cls, msg_cls)
