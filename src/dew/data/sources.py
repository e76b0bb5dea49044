"""Record sources: TFDS-prepared ArrayRecord directories, read without TensorFlow.

A prepared version directory (what `tfds.builder(...).download_and_prepare(
file_format="array_record")` leaves, or tools/prepare_dataset.py) holds:

  dataset_info.json   name, splits with `shardLengths` and `filepathTemplate`
  features.json       the feature spec (image JPEG, label ClassLabel, file_name Text)
  label.labels.txt    one class name per line
  <name>-<split>.array_record-0000i-of-0000N   serialized tf.train.Example records

A source is a grain random-access source: `len()` records, `source[i]` gives one record as
{"index", "image" (JPEG bytes), "label", "file_name"}. Problems with the directory are found
when the source is made (in the parent process) and raised as one-line DataErrors.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from pathlib import Path

from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from dew.data.tfexample import decode_example, encode_example

DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"


class DataError(ValueError):
    """A dataset that cannot be read: the message is one line naming the file or record."""


def _shard_name(template: str, dataset: str, split: str, shard: int, num_shards: int) -> str:
    return (
        template.replace("{DATASET}", dataset)
        .replace("{SPLIT}", split)
        .replace("{FILEFORMAT}", "array_record")
        .replace("{SHARD_X_OF_Y}", f"{shard:05d}-of-{num_shards:05d}")
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class PreparedTfdsSource:
    """The records of one or more splits of a prepared TFDS version directory, in order."""

    def __init__(self, path: str | Path, split: str = "all"):
        self.path = Path(path)
        info_file = self.path / "dataset_info.json"
        info = read_dataset_info(self.path)
        try:
            self.dataset = info["name"]
            file_format = info.get("fileFormat", "array_record")
            splits = {s["name"]: s for s in info["splits"]}
        except (KeyError, TypeError, AttributeError) as e:
            raise DataError(f"{info_file}: not a TFDS dataset_info.json ({_first_line(e)})") from e
        if file_format != "array_record":
            raise DataError(
                f"{info_file}: fileFormat is {file_format!r}; only 'array_record' is read"
            )
        self.splits = list(splits) if split == "all" else split.split("+")
        for name in self.splits:
            if name not in splits:
                valid = ", ".join(["all", *splits])
                raise DataError(f"split {name!r} not in {self.path}; valid: {valid}")

        self.shard_paths: list[str] = []
        self.shard_starts: list[int] = []
        total = 0
        for name in self.splits:
            lengths = [int(n) for n in splits[name].get("shardLengths", [])]
            template = splits[name].get("filepathTemplate", DEFAULT_TEMPLATE)
            for i, expected in enumerate(lengths):
                shard = self.path / _shard_name(template, self.dataset, name, i, len(lengths))
                _check_shard(shard, expected)
                self.shard_paths.append(str(shard))
                self.shard_starts.append(total)
                total += expected
        self._length = total
        labels_file = self.path / "label.labels.txt"
        self.class_names = labels_file.read_text().splitlines() if labels_file.is_file() else []
        self._readers: dict[int, ArrayRecordReader] = {}

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self._length:
            raise IndexError(f"record {index} outside the {self._length} records of {self.path}")
        shard = bisect.bisect_right(self.shard_starts, index) - 1
        reader = self._readers.get(shard)
        if reader is None:
            # Opened lazily: readers do not pickle, and each grain worker needs its own.
            # The default options read ahead for sequential scans; random access wants none.
            reader = ArrayRecordReader(self.shard_paths[shard], "readahead_buffer_size:0")
            self._readers[shard] = reader
        try:
            serialized = reader.read([index - self.shard_starts[shard]])[0]
        except RuntimeError as e:
            raise DataError(
                f"record {index}: cannot read it from {self.shard_paths[shard]} ({_first_line(e)})"
            ) from e
        return parse_record(serialized, index)

    def __getstate__(self):
        return {**self.__dict__, "_readers": {}}

    def __repr__(self) -> str:
        return f"PreparedTfdsSource({str(self.path)!r}, splits={self.splits}, records={len(self)})"


def read_dataset_info(path: str | Path) -> dict:
    """The dataset_info.json of a prepared version directory, or a DataError saying what
    `path` is instead (missing, not a directory, not prepared, unreadable)."""
    path = Path(path)
    info_file = path / "dataset_info.json"
    if not path.exists():
        raise DataError(f"no such directory: {path}")
    if not path.is_dir():
        raise DataError(f"{path} is not a directory (a prepared dataset is one)")
    if not info_file.is_file():
        raise DataError(
            f"{path} is not a prepared dataset (no dataset_info.json); "
            "make one with tools/prepare_dataset.py"
        )
    try:
        info = json.loads(info_file.read_text())
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise DataError(f"{info_file}: not a TFDS dataset_info.json ({_first_line(e)})") from e
    if not isinstance(info, dict):
        raise DataError(f"{info_file}: not a TFDS dataset_info.json (not a JSON object)")
    return info


def prepared_files(path: str | Path) -> list[Path]:
    """The files of the prepared dataset in `path` (what write_prepared writes, the shards
    its dataset_info.json lists); [] where `path` holds none that can be read."""
    path = Path(path)
    try:
        info = read_dataset_info(path)
        template_shards = [
            (s.get("filepathTemplate", DEFAULT_TEMPLATE), s["name"], len(s["shardLengths"]))
            for s in info["splits"]
        ]
        name = info["name"]
    except (DataError, KeyError, TypeError, AttributeError):
        return []
    files = [path / f for f in ("dataset_info.json", "features.json", "label.labels.txt")]
    for template, split, count in template_shards:
        files += [path / _shard_name(template, name, split, i, count) for i in range(count)]
    # Only files in `path` itself: a template naming another place is not the dataset's.
    return [file for file in files if file.parent == path and file.name not in ("", "..")]


def _check_shard(shard: Path, expected: int) -> None:
    if not shard.is_file():
        raise DataError(f"missing shard {shard} (listed in dataset_info.json)")
    try:
        reader = ArrayRecordReader(str(shard))
        found = reader.num_records()
        reader.close()  # close reads the file's footer too, and fails on a cut one
    except RuntimeError as e:
        raise DataError(
            f"shard {shard} is truncated or not an ArrayRecord file ({_first_line(e)})"
        ) from e
    if found != expected:
        raise DataError(
            f"shard {shard} has {found} records, dataset_info.json says {expected} "
            "(truncated or replaced shard)"
        )


def parse_record(serialized: bytes, index: int) -> dict:
    """One tf.train.Example of an image-classification dataset as a plain dict."""
    try:
        features = decode_example(serialized)
        return {
            "index": index,
            "image": features["image"][0],
            "label": int(features["label"][0]),
            "file_name": features["file_name"][0].decode() if "file_name" in features else "",
        }
    except Exception as e:
        raise DataError(f"record {index}: not an image Example ({_first_line(e)})") from e


def write_prepared(
    path: str | Path,
    dataset: str,
    splits: dict[str, list[dict]],
    class_names: list[str],
    *,
    version: str = "1.0.0",
    records_per_shard: int = 1024,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write records ({"image": JPEG bytes, "label": int, "file_name": str}) as a TFDS-layout
    version directory `path`, readable by PreparedTfdsSource (and by TFDS itself). A split's
    records may be any sequence (a lazy one is read a shard at a time); `progress(done,
    total)` hears each shard written."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    split_infos = []
    total, done = sum(len(records) for records in splits.values()), 0
    for split, records in splits.items():
        num_shards = max(1, -(-len(records) // records_per_shard))
        lengths, size = [], 0
        for shard in range(num_shards):
            chunk = records[shard * records_per_shard : (shard + 1) * records_per_shard]
            name = _shard_name(DEFAULT_TEMPLATE, dataset, split, shard, num_shards)
            # group_size:1 is what makes records randomly accessible (TFDS writes the same).
            writer = ArrayRecordWriter(str(path / name), "group_size:1")
            for record in chunk:
                size += len(record["image"])
                writer.write(
                    encode_example(
                        {
                            "image": record["image"],
                            "label": int(record["label"]),
                            "file_name": record["file_name"].encode(),
                        }
                    )
                )
            writer.close()
            lengths.append(str(len(chunk)))
            done += len(chunk)
            if progress is not None:
                progress(done, total)
        split_infos.append(
            {
                "name": split,
                "filepathTemplate": DEFAULT_TEMPLATE,
                "shardLengths": lengths,
                "numBytes": str(size),
            }
        )
    info = {
        "name": dataset,
        "version": version,
        "fileFormat": "array_record",
        "moduleName": f"tensorflow_datasets.image_classification.{dataset}",
        "splits": split_infos,
        "supervisedKeys": {"tuple": {"items": [{"featureKey": "image"}, {"featureKey": "label"}]}},
    }
    features = {
        "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
        "featuresDict": {
            "features": {
                "image": {
                    "pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
                    "image": {
                        "shape": {"dimensions": ["-1", "-1", "3"]},
                        "dtype": "uint8",
                        "encodingFormat": "jpeg",
                    },
                },
                "label": {
                    "pythonClassName": (
                        "tensorflow_datasets.core.features.class_label_feature.ClassLabel"
                    ),
                    "classLabel": {"numClasses": str(len(class_names))},
                },
                "file_name": {
                    "pythonClassName": "tensorflow_datasets.core.features.text_feature.Text",
                    "text": {},
                },
            }
        },
    }
    (path / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n")
    (path / "features.json").write_text(json.dumps(features, indent=2) + "\n")
    (path / "label.labels.txt").write_text("\n".join(class_names) + "\n")
    return path
