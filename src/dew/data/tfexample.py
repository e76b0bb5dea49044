"""tf.train.Example encode/decode with the protobuf package alone (no TensorFlow).

The message definitions are those of tensorflow/core/example/{feature,example}.proto,
built at import time into a private descriptor pool, so a TensorFlow install in the same
process (with its own `tensorflow.Example`) cannot clash with them.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="dew/tensorflow_example.proto", package="tensorflow", syntax="proto3"
    )

    def message(name: str, fields: list[tuple[str, int, int, int, str]]):
        msg = fd.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            field = msg.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                field.type_name = type_name
        return msg

    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
    message("BytesList", [("value", 1, rep, _F.TYPE_BYTES, "")])
    message("FloatList", [("value", 1, rep, _F.TYPE_FLOAT, "")])
    message("Int64List", [("value", 1, rep, _F.TYPE_INT64, "")])
    feature = message(
        "Feature",
        [
            ("bytes_list", 1, opt, _F.TYPE_MESSAGE, ".tensorflow.BytesList"),
            ("float_list", 2, opt, _F.TYPE_MESSAGE, ".tensorflow.FloatList"),
            ("int64_list", 3, opt, _F.TYPE_MESSAGE, ".tensorflow.Int64List"),
        ],
    )
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    features = message(
        "Features", [("feature", 1, rep, _F.TYPE_MESSAGE, ".tensorflow.Features.FeatureEntry")]
    )
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=opt, type=_F.TYPE_STRING)
    entry.field.add(
        name="value", number=2, label=opt, type=_F.TYPE_MESSAGE, type_name=".tensorflow.Feature"
    )
    message("Example", [("features", 1, opt, _F.TYPE_MESSAGE, ".tensorflow.Features")])
    return fd


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file_descriptor())
Example = message_factory.GetMessageClass(_pool.FindMessageTypeByName("tensorflow.Example"))

FeatureValue = bytes | int | float | list[bytes] | list[int] | list[float]


def encode_example(features: dict[str, FeatureValue]) -> bytes:
    """Serialize a dict of bytes / int / float values (or lists of one kind) as an Example."""
    example = Example()
    for key, value in features.items():
        values = value if isinstance(value, list) else [value]
        feature = example.features.feature[key]
        if all(isinstance(v, bytes) for v in values):
            feature.bytes_list.value.extend(values)
        elif all(isinstance(v, int) for v in values):
            feature.int64_list.value.extend(values)
        elif all(isinstance(v, float) for v in values):
            feature.float_list.value.extend(values)
        else:
            raise TypeError(f"feature {key!r}: values must be all bytes, all int or all float")
    return example.SerializeToString()


def decode_example(serialized: bytes) -> dict[str, list]:
    """Parse a serialized Example into {key: list of values} (bytes, int or float)."""
    example = Example()
    example.ParseFromString(serialized)
    out: dict[str, list] = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[key] = list(getattr(feature, kind).value) if kind else []
    return out
