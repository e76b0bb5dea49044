"""The files issue 63's inputs (input_probe_cases.py) read, beside scripts/bad_inputs.py's
scratch directory: records empty, cut, edited and partial, loader records of two worker
counts, bundles with their bundle.json damaged, unicode names."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "results" / "runs"


def setup(d: Path, root: Path = REPO) -> None:
    """The probe's own files beside bad_inputs.scratch's (`root`: the tree under test, whose
    install.py the bundles hold)."""
    aa1 = json.loads((RUNS / "20261202-cpu-smoke-stats-aa1-a" / "step.json").read_text())
    shutil.copy(RUNS / "20261202-cpu-smoke-stats-aa1-a" / "step.json", d / "aa1.json")
    shutil.copy(RUNS / "20261202-cpu-smoke-stats-aa1-b" / "step.json", d / "aa2.json")
    shutil.copy(RUNS / "20261203T072252Z-small-compile-only-cpu-d90a3f0" / "step.json",
                d / "co.json")  # fmt: skip
    loaders = RUNS / "20261203-first-gpu-run-cpu"
    shutil.copy(loaders / "data-workers-0.json", d / "w0.json")
    shutil.copy(loaders / "data-workers-8.json", d / "w8.json")
    shutil.copy(RUNS / "20261203T072745Z-cpu-smoke-cpu-d90a3f0" / "data-workers-0.json",
                d / "w0b.json")  # fmt: skip
    shutil.copy(d / "aa1.json", d / "résumé ✓.json")
    shutil.copy(d / "aa1.json", d / "with space.json")

    def edited(name: str, change) -> None:
        data = json.loads(json.dumps(aa1))
        change(data)
        (d / name).write_text(json.dumps(data))

    def partial(r):
        r.update(partial="stopped by SIGINT: 3 of 4 cases finished", rows=r["rows"][:3])

    edited("partial.json", partial)
    edited("tpukind.json", lambda r: r["environment"]["devices"].update(kind="TPU v5 lite"))
    edited("gpukind.json", lambda r: r["environment"]["devices"].update(kind="NVIDIA H200"))
    edited("inflated.json", lambda r: r["rows"][0].update(ms_per_step=440.0))
    edited("huge.json", lambda r: r["rows"][0].update(ms_per_step=1e308))
    edited("version-str.json", lambda r: r.update(schema_version="4"))
    edited("version-99.json", lambda r: r.update(schema_version=99))
    edited("rows-object.json", lambda r: r.update(rows={"a": 1}))
    edited("kind-nope.json", lambda r: r.update(kind="nope"))
    edited("created-word.json", lambda r: r.update(created="yesterday"))
    edited("negative-ms.json", lambda r: r["rows"][0].update(ms_per_step=-1.0))
    edited("status-maybe.json", lambda r: r["rows"][0].update(status="maybe"))
    edited("count-str.json", lambda r: r["environment"]["devices"].update(count="1"))
    (d / "empty.json").write_text("")
    (d / "blank.json").write_text(" \n\t\n")
    (d / "bom.json").write_bytes(b"\xef\xbb\xbf" + (d / "aa1.json").read_bytes())
    text = (d / "aa1.json").read_text()  # json.dumps writes NaN for a float nan
    (d / "nan.json").write_text(
        re.sub(r'"ms_per_step": [0-9.]+', '"ms_per_step": NaN', text, count=1)
    )
    (d / "cut.json").write_text((d / "aa1.json").read_text()[:500])
    (d / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (d / "dupkeys.json").write_text('{"kind": "step", "kind": "data"}')
    (d / "null.json").write_text("null")
    (d / "a-file").write_text("a file\n")
    (d / "empty-dir").mkdir()
    (d / "elsewhere").mkdir()
    for name, text in BUNDLES.items():  # install.py beside a bundle.json damaged so
        bundle = d / f"bundle-{name}"
        (bundle / "wheels").mkdir(parents=True)
        shutil.copy(root / "src" / "dew" / "host" / "bundle_install.py", bundle / "install.py")
        if text is not None:
            (bundle / "bundle.json").write_text(text)


BUNDLES = {
    "missing": None,
    "cut": '{"python": "3.1',
    "empty": "",
    "list": "[]",
    "no-wheels": '{"python": "3.12", "lock": "x", "host_packages": {}, "host_present": []}',
}


def fill(word: str, py: str, root: Path, d: Path) -> str:
    """A word of argv with its places filled (JSON's braces left alone)."""
    return word.replace("{py}", py).replace("{root}", str(root)).replace("{d}", str(d))
