"""The XSpace schema: the .proto text, the runtime descriptor and the wire format agree."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import descriptor_pb2

import tracekit.xspace
from tracekit.xspace.proto import MESSAGES, file_descriptor, message_class, parse_xspace

PROTO = Path(tracekit.xspace.__file__).with_name("xplane.proto")

_TYPES = {
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
}


def _proto_fields() -> dict[str, dict[str, tuple[int, str]]]:
    """message -> field -> (number, type) from xplane.proto (comments stripped)."""
    text = re.sub(r"//[^\n]*", "", PROTO.read_text())
    out: dict[str, dict[str, tuple[int, str]]] = {}
    for name, body in re.findall(r"message (\w+) \{(.*?)\n\}", text, flags=re.S):
        fields = {}
        for ftype, fname, number in re.findall(
            r"(?:repeated\s+)?(map<[^>]+>|\w+)\s+(\w+)\s*=\s*(\d+);", body
        ):
            fields[fname] = (int(number), ftype)
        out[name] = fields
    return out


def test_proto_text_matches_runtime_descriptor() -> None:
    text = _proto_fields()
    assert set(text) == set(MESSAGES)
    fd = file_descriptor()
    for msg in fd.message_type:
        runtime = {f.name: f for f in msg.field}
        assert set(runtime) == set(text[msg.name]), msg.name
        for fname, (number, ftype) in text[msg.name].items():
            field = runtime[fname]
            assert field.number == number, f"{msg.name}.{fname}"
            if ftype in _TYPES:
                assert field.type == _TYPES[ftype], f"{msg.name}.{fname}"
            else:  # a message or a map of messages
                assert field.type == descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE


def test_public_field_numbers() -> None:
    # Spot checks against tsl/profiler/protobuf/xplane.proto (openxla/xla).
    fd = file_descriptor()
    num = {(m.name, f.name): f.number for m in fd.message_type for f in m.field}
    assert num["XSpace", "planes"] == 1 and num["XSpace", "hostnames"] == 4
    assert num["XPlane", "event_metadata"] == 4 and num["XPlane", "stats"] == 6
    assert num["XLine", "display_id"] == 10 and num["XLine", "duration_ps"] == 9
    assert num["XLine", "display_name"] == 11 and num["XLine", "timestamp_ns"] == 3
    assert num["XEvent", "offset_ps"] == 2 and num["XEvent", "num_occurrences"] == 5
    assert num["XStat", "ref_value"] == 7 and num["XStat", "str_value"] == 5
    assert num["XEventMetadata", "display_name"] == 4 and num["XEventMetadata", "child_id"] == 6


def test_wire_format_bytes() -> None:
    """Hand-encoded protobuf bytes decode as expected: field numbers are on the wire."""
    # XSpace{hostnames: "h", planes: [XPlane{id: 3, name: "p"}]}
    plane = bytes([0x08, 0x03, 0x12, 0x01]) + b"p"
    data = bytes([0x0A, len(plane)]) + plane + bytes([0x22, 0x01]) + b"h"
    space = parse_xspace(data)
    assert list(space.hostnames) == ["h"]
    assert space.planes[0].id == 3 and space.planes[0].name == "p"
    # And back: the same bytes (fields serialize in number order).
    assert space.SerializeToString() == data


def test_oneofs_and_maps_round_trip() -> None:
    space = message_class("XSpace")()
    plane = space.planes.add(id=1, name="/host:CPU")
    plane.event_metadata[5].name = "ev"
    plane.stat_metadata[2].name = "st"
    line = plane.lines.add(id=9, timestamp_ns=1, duration_ps=2)
    ev = line.events.add(metadata_id=5, offset_ps=10, duration_ps=20)
    ev.stats.add(metadata_id=2, double_value=1.5)
    ev.stats.add(metadata_id=2, ref_value=2)
    back = parse_xspace(space.SerializeToString())
    ev2 = back.planes[0].lines[0].events[0]
    assert ev2.WhichOneof("data") == "offset_ps" and ev2.offset_ps == 10
    assert [s.WhichOneof("value") for s in ev2.stats] == ["double_value", "ref_value"]
    assert back.planes[0].event_metadata[5].name == "ev"
