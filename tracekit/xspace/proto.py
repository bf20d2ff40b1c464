"""The XSpace protobuf schema, built at run time (no protoc, no generated code).

``xplane.proto`` beside this file is the readable form; this module builds the
same messages as a ``FileDescriptorProto`` in a private descriptor pool and asks
the installed ``protobuf`` runtime (a TensorBoard dependency) for the message
classes. The wire format depends only on field numbers and types, so the files
written here are read by xprof's C++ converter as ordinary XSpace protos.

A private pool (not the default one) keeps these names from clashing with a
TensorFlow or xprof copy of the same schema loaded in the same process.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tensorflow.profiler"
FILE_NAME = "tracekit/xspace/xplane.proto"

_F = descriptor_pb2.FieldDescriptorProto
_INT64, _UINT64, _DOUBLE = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
_STRING, _BYTES, _MESSAGE = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# (field name, number, type, label, message type or None, oneof name or None).
# Field numbers: tsl/profiler/protobuf/xplane.proto (docs/xspace.md says how
# they were checked).
FieldSpec = tuple[str, int, int, int, "str | None", "str | None"]

MESSAGES: dict[str, list[FieldSpec]] = {
    "XSpace": [
        ("planes", 1, _MESSAGE, _REP, "XPlane", None),
        ("errors", 2, _STRING, _REP, None, None),
        ("warnings", 3, _STRING, _REP, None, None),
        ("hostnames", 4, _STRING, _REP, None, None),
    ],
    "XPlane": [
        ("id", 1, _INT64, _OPT, None, None),
        ("name", 2, _STRING, _OPT, None, None),
        ("lines", 3, _MESSAGE, _REP, "XLine", None),
        ("event_metadata", 4, _MESSAGE, _REP, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _MESSAGE, _REP, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _MESSAGE, _REP, "XStat", None),
    ],
    "XLine": [
        ("id", 1, _INT64, _OPT, None, None),
        ("display_id", 10, _INT64, _OPT, None, None),
        ("name", 2, _STRING, _OPT, None, None),
        ("display_name", 11, _STRING, _OPT, None, None),
        ("timestamp_ns", 3, _INT64, _OPT, None, None),
        ("duration_ps", 9, _INT64, _OPT, None, None),
        ("events", 4, _MESSAGE, _REP, "XEvent", None),
    ],
    "XEvent": [
        ("metadata_id", 1, _INT64, _OPT, None, None),
        ("offset_ps", 2, _INT64, _OPT, None, "data"),
        ("num_occurrences", 5, _INT64, _OPT, None, "data"),
        ("duration_ps", 3, _INT64, _OPT, None, None),
        ("stats", 4, _MESSAGE, _REP, "XStat", None),
    ],
    "XStat": [
        ("metadata_id", 1, _INT64, _OPT, None, None),
        ("double_value", 2, _DOUBLE, _OPT, None, "value"),
        ("uint64_value", 3, _UINT64, _OPT, None, "value"),
        ("int64_value", 4, _INT64, _OPT, None, "value"),
        ("str_value", 5, _STRING, _OPT, None, "value"),
        ("bytes_value", 6, _BYTES, _OPT, None, "value"),
        ("ref_value", 7, _UINT64, _OPT, None, "value"),
    ],
    "XEventMetadata": [
        ("id", 1, _INT64, _OPT, None, None),
        ("name", 2, _STRING, _OPT, None, None),
        ("display_name", 4, _STRING, _OPT, None, None),
        ("metadata", 3, _BYTES, _OPT, None, None),
        ("stats", 5, _MESSAGE, _REP, "XStat", None),
        ("child_id", 6, _INT64, _REP, None, None),
    ],
    "XStatMetadata": [
        ("id", 1, _INT64, _OPT, None, None),
        ("name", 2, _STRING, _OPT, None, None),
        ("description", 3, _STRING, _OPT, None, None),
    ],
}

# proto3 maps are repeated nested "entry" messages flagged map_entry.
MAP_ENTRIES: dict[str, dict[str, tuple[int, str]]] = {
    "XPlane": {
        "EventMetadataEntry": (_INT64, "XEventMetadata"),
        "StatMetadataEntry": (_INT64, "XStatMetadata"),
    }
}


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The schema as a FileDescriptorProto (proto3)."""
    fd = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    for msg_name, fields in MESSAGES.items():
        msg = fd.message_type.add(name=msg_name)
        oneofs: list[str] = []
        for name, number, ftype, label, type_name, oneof in fields:
            field = msg.field.add(name=name, number=number, type=ftype, label=label)
            if type_name is not None:
                field.type_name = f".{PACKAGE}.{type_name}"
            if oneof is not None:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    msg.oneof_decl.add(name=oneof)
                field.oneof_index = oneofs.index(oneof)
        for entry_name, (key_type, value_type) in MAP_ENTRIES.get(msg_name, {}).items():
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=key_type, label=_OPT)
            entry.field.add(
                name="value",
                number=2,
                type=_MESSAGE,
                label=_OPT,
                type_name=f".{PACKAGE}.{value_type}",
            )
    return fd


@cache
def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    out: dict[str, Any] = {}
    for name in MESSAGES:
        desc = pool.FindMessageTypeByName(f"{PACKAGE}.{name}")
        get_class = getattr(message_factory, "GetMessageClass", None)
        if get_class is not None:  # protobuf >= 4.22
            out[name] = get_class(desc)
        else:  # pragma: no cover - protobuf 3.20 .. 4.21
            out[name] = message_factory.MessageFactory(pool).GetPrototype(desc)
    return out


def message_class(name: str) -> Any:
    """The message class for ``name`` (``"XSpace"``, ``"XPlane"``, ...)."""
    return _classes()[name]


def new_xspace() -> Any:
    """An empty XSpace message."""
    return message_class("XSpace")()


def parse_xspace(data: bytes) -> Any:
    """Decode serialized XSpace bytes."""
    space = new_xspace()
    space.ParseFromString(data)
    return space
