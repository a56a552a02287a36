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
from collections.abc import Callable
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


def _is_repeated(fd: FieldDescriptor) -> bool:
    # `label` is deprecated in newer protobuf releases; `is_repeated` replaces it.
    rep = getattr(fd, "is_repeated", None)
    if rep is not None:
        return bool(rep)
    return fd.label == FieldDescriptor.LABEL_REPEATED  # pragma: no cover


def _item_from(item_tp: Any, fd: FieldDescriptor) -> Callable[[Any], Any]:
    if dataclasses.is_dataclass(item_tp):
        return _compile_from(item_tp, _message_class(fd))  # type: ignore[arg-type]
    if item_tp in _SCALARS:
        return item_tp  # type: ignore[no-any-return]
    raise ConversionError(f"unsupported item type {item_tp}")


def _item_to(item_tp: Any, fd: FieldDescriptor) -> Callable[[Any], Any] | None:
    if dataclasses.is_dataclass(item_tp):
        return _compile_to(item_tp, _message_class(fd))  # type: ignore[arg-type]
    return None


def _compile_from(cls: type, msg_cls: type[Message]) -> Callable[[Any], Any]:
    key = (cls, msg_cls)
    if key in _FROM_CACHE:
        return _FROM_CACHE[key]
    hints = typing.get_type_hints(cls)
    fields_by_name = msg_cls.DESCRIPTOR.fields_by_name
    getters: list[tuple[str, Callable[[Any], Any]]] = []
    # placeholder so recursive types terminate
    _FROM_CACHE[key] = lambda msg: build(msg)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        fd = fields_by_name.get(f.name)
        if fd is None:
            raise ConversionError(f"{msg_cls.__name__} has no field {f.name!r} ({cls.__name__})")
        tp, nullable = _unwrap_optional(hints[f.name])
        name = f.name
        seq = _sequence_item(tp)
        has_default = f.default is not dataclasses.MISSING
        default = f.default
        if seq is not None:
            item_tp, container = seq
            if _is_repeated(fd):
                conv = _item_from(item_tp, fd)
                if conv in _SCALARS:
                    getters.append((name, _rep_scalar_from(name, container)))
                else:
                    getters.append((name, _rep_msg_from(name, container, conv)))
            elif fd.message_type is not None and nullable:
                inner_fields = fd.message_type.fields
                if len(inner_fields) != 1 or not _is_repeated(inner_fields[0]):
                    raise ConversionError(f"{name}: wrapper must hold one repeated field")
                inner = inner_fields[0]
                conv = _item_from(item_tp, inner)
                getters.append((name, _wrapped_from(name, inner.name, container, conv)))
            else:
                raise ConversionError(f"{cls.__name__}.{name}: sequence vs non-repeated field")
        elif dataclasses.is_dataclass(tp):
            sub = _compile_from(tp, _message_class(fd))  # type: ignore[arg-type]
            if nullable:
                getters.append((name, _nullable_msg_from(name, sub)))
            else:
                getters.append((name, _msg_from(name, sub)))
        elif tp in _SCALARS:
            if nullable:
                if not fd.has_presence:
                    raise ConversionError(f"{cls.__name__}.{name}: nullable needs `optional`")
                getters.append((name, _nullable_scalar_from(name)))
            elif fd.has_presence and has_default:
                getters.append((name, _defaulted_scalar_from(name, default)))
            else:
                getters.append((name, _scalar_from(name)))
        else:
            raise ConversionError(f"{cls.__name__}.{name}: unsupported type {tp}")

    names = [n for n, _ in getters]
    funcs = [g for _, g in getters]

    def build(msg: Any) -> Any:
        return cls(**{n: g(msg) for n, g in zip(names, funcs, strict=True)})

    _FROM_CACHE[key] = build
    return build


def _scalar_from(name: str) -> Callable[[Any], Any]:
    return lambda msg: getattr(msg, name)


def _defaulted_scalar_from(name: str, default: Any) -> Callable[[Any], Any]:
    return lambda msg: getattr(msg, name) if msg.HasField(name) else default


def _nullable_scalar_from(name: str) -> Callable[[Any], Any]:
    return lambda msg: getattr(msg, name) if msg.HasField(name) else None


def _msg_from(name: str, sub: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda msg: sub(getattr(msg, name))


def _nullable_msg_from(name: str, sub: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda msg: sub(getattr(msg, name)) if msg.HasField(name) else None


def _rep_scalar_from(name: str, container: type) -> Callable[[Any], Any]:
    return lambda msg: container(getattr(msg, name))


def _rep_msg_from(name: str, container: type, conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda msg: container(conv(m) for m in getattr(msg, name))


def _wrapped_from(
    name: str, inner: str, container: type, conv: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    if conv in _SCALARS:
        return lambda msg: (
            container(getattr(getattr(msg, name), inner)) if msg.HasField(name) else None
        )
    return lambda msg: (
        container(conv(m) for m in getattr(getattr(msg, name), inner))
        if msg.HasField(name)
        else None
    )


def _compile_to(cls: type, msg_cls: type[Message]) -> Callable[[Any], Any]:
    key = (cls, msg_cls)
    if key in _TO_CACHE:
        return _TO_CACHE[key]
    _TO_CACHE[key] = lambda obj: build(obj)
    hints = typing.get_type_hints(cls)
    fields_by_name = msg_cls.DESCRIPTOR.fields_by_name
    plan: list[tuple[str, int, Any]] = []  # (name, kind, aux)
    SCALAR, MSG, REP_SCALAR, REP_MSG, WRAP = range(5)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        fd = fields_by_name.get(f.name)
        if fd is None:
            raise ConversionError(f"{msg_cls.__name__} has no field {f.name!r} ({cls.__name__})")
        tp, nullable = _unwrap_optional(hints[f.name])
        seq = _sequence_item(tp)
        if seq is not None:
            item_tp, _ = seq
            if _is_repeated(fd):
                sub = _item_to(item_tp, fd)
                plan.append((f.name, REP_SCALAR if sub is None else REP_MSG, sub))
            else:
                inner = fd.message_type.fields[0]
                wrapper_cls = _message_class(fd)
                sub = _item_to(item_tp, inner)
                plan.append((f.name, WRAP, (wrapper_cls, inner.name, sub)))
        elif dataclasses.is_dataclass(tp):
            plan.append((f.name, MSG, _compile_to(tp, _message_class(fd))))  # type: ignore[arg-type]
        else:
            plan.append((f.name, SCALAR, None))

    def build(obj: Any) -> Any:
        kwargs: dict[str, Any] = {}
        for name, kind, aux in plan:
            value = getattr(obj, name)
            if value is None:
                continue  # unset = null / default
            if kind == SCALAR:
                kwargs[name] = value
            elif kind == MSG:
                kwargs[name] = aux(value)
            elif kind == REP_SCALAR:
                kwargs[name] = value
            elif kind == REP_MSG:
                kwargs[name] = [aux(v) for v in value]
            else:
                wrapper_cls, inner, sub = aux
                items = value if sub is None else [sub(v) for v in value]
                kwargs[name] = wrapper_cls(**{inner: items})
        return msg_cls(**kwargs)

    _TO_CACHE[key] = build
    return build


def from_message(msg: Message, cls: type[T]) -> T:
    """Build a ``cls`` dataclass from a protobuf message of the matching shape."""
    return _compile_from(cls, type(msg))(msg)  # type: ignore[no-any-return]


def to_message(obj: Any, msg_cls: type[M]) -> M:
    """Build a ``msg_cls`` protobuf message from a dataclass of the matching shape."""
    return _compile_to(type(obj), msg_cls)(obj)  # type: ignore[no-any-return]


def converter_from(cls: type[T], msg_cls: type[Message]) -> Callable[[Message], T]:
    return _compile_from(cls, msg_cls)


def converter_to(cls: type, msg_cls: type[M]) -> Callable[[Any], M]:
    return _compile_to(cls, msg_cls)
