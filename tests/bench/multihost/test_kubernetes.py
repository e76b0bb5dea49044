"""The Kubernetes manifests of a multi-host run (dew.bench.multihost.kubernetes): what the
generator writes, the committed examples are what it writes, the names and image it
refuses (one line, exit 2). Their validation against Kubernetes' schemas, the JobSet's CRD
and the restricted Pod Security level: test_kubernetes_schemas.py."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dew.bench.multihost import k8s_run, kubernetes, yaml_text
from dew.bench.runtime import protocol
from dew.bench.sweep import settings

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = [REPO / "docs" / "multihost" / name for name in ("jobset.yaml", "jobset-tpu.yaml")]
IMAGE = "registry.example/dew@sha256:" + "0123456789abcdef" * 4
TWO_BY_EIGHT = ["--hosts", "2", "--devices-per-host", "8", "--image", IMAGE]


def generate(argv: list[str]) -> list[dict]:
    args = kubernetes.parser().parse_args(argv)
    return [doc for doc in yaml.safe_load_all(kubernetes.manifests_text(args, argv)) if doc]


@pytest.mark.parametrize("detection", ["jax", "env"])
def test_two_hosts_of_eight_gpus(detection):
    """Their validation: test_kubernetes_schemas.py."""
    manifests = generate([*TWO_BY_EIGHT, "--detection", detection])
    kinds = [manifest["kind"] for manifest in manifests]
    rbac = ["Role", "RoleBinding"] if detection == "jax" else []
    assert kinds == ["ServiceAccount", *rbac, "Service", "JobSet"]
    job = manifests[-1]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (2, 2, "Indexed")
    container = job["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["resources"] == {
        "requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 8},
        "limits": {"nvidia.com/gpu": 8},
    }
    flags = container["args"]
    assert flags[flags.index("--mesh") + 1] == '{"fsdp": 16}'
    assert flags[flags.index("--json-out") + 1] == "/results/dew-step/step.json"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_the_committed_example_is_what_the_generator_writes(example):
    header = example.read_text().splitlines()[0]
    command = header.split("`nox -s k8s-manifests -- ", 1)[1].rstrip("`")
    argv = shlex.split(command)
    args = kubernetes.parser().parse_args(argv)
    assert example.read_text() == kubernetes.manifests_text(args, argv)
    assert argv[:4] == (["--hosts", "2", "--devices-per-host", "8"] if example.name ==
        "jobset.yaml" else ["--hosts", "2", "--devices-per-host", "4"])  # fmt: skip


def test_the_deadline_counts_cases_repeats_and_the_join():
    cases = json.dumps([{"architecture": "simple_dit"}, {"architecture": "uvit"}])
    argv = [*TWO_BY_EIGHT, "--case-timeout", "100", "--", "--cases", cases, "--repeats", "3"]
    job = generate(argv)[-1]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["activeDeadlineSeconds"] == k8s_run.JOIN_S + 2 * 3 * 100
    # The defaults are the tool's own per-case deadlines with one compile job.
    per_case = protocol.COMPILE_S + protocol.TIMED_S * 2  # 200 steps: twice the timing
    job = generate([*TWO_BY_EIGHT, "--", "--cases", cases, "--steps", "200"])[-1]
    spec = job["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert spec["activeDeadlineSeconds"] == k8s_run.JOIN_S + 2 * per_case
    assert k8s_run.TIMED_STEPS == settings.TIMED_STEPS


@pytest.mark.parametrize(
    "value",
    ["yes", "No", "on", "null", "~", "2", "1e3", "0x10", "1.5", ".inf", "", "a: b", "#x",
     "-x", "[1]", "{}", "é", 'say "hi"', "line\nbreak", "metadata.labels['job-name']"],
)  # fmt: skip
def test_a_string_reads_back_as_itself(value):
    text = yaml_text.document({"key": value, "list": [value, {"inner": value}]})
    assert yaml.safe_load(text) == {"key": value, "list": [value, {"inner": value}]}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hosts", "2", "--devices-per-host", "8", "--image", "r/dew:cuda13"], "names no digest"),
        ([*TWO_BY_EIGHT[:-1], IMAGE + "0"], "exactly 64 lowercase hex characters (65 given)"),
        ([*TWO_BY_EIGHT[:-1], IMAGE[:-1]], "exactly 64 lowercase hex characters (63 given)"),
        ([*TWO_BY_EIGHT[:-1], IMAGE.replace("abc", "ABC")], "exactly 64 lowercase hex"),
        ([*TWO_BY_EIGHT[:-1], IMAGE + " "], "has white space"),
        ([*TWO_BY_EIGHT[:-1], " " + IMAGE], "has white space"),
        ([*TWO_BY_EIGHT[:-1], "@sha256:" + "0" * 64], "is not an image reference"),
        ([*TWO_BY_EIGHT[:-1], "Registry/Dew@sha256:" + "0" * 64], "is not an image reference"),
        ([*TWO_BY_EIGHT[:-1], "r/dew:@sha256:" + "0" * 64], "is not an image reference"),
        ([*TWO_BY_EIGHT[:-1], "x@sha256:" + "0" * 64 + "@sha256:" + "0" * 64], "not an image"),
        (["--hosts", "0", "--devices-per-host", "8", "--image", IMAGE], "--hosts 0"),
        (["--hosts", "two", "--devices-per-host", "8", "--image", IMAGE], "invalid int value"),
        (["--hosts", "2", "--devices-per-host", "0", "--image", IMAGE], "--devices-per-host 0"),
        (["--hosts", "2", "--devices-per-host", "8"], "required: --image"),
        ([*TWO_BY_EIGHT, "--name", "Dew_Step"], "not a DNS label"),
        ([*TWO_BY_EIGHT, "--name", "d" * 46], "d-workers-0-1-abcde (64 characters"),
        ([*TWO_BY_EIGHT, "--name", "d" * 51], "give a --name of at most 45"),
        ([*TWO_BY_EIGHT, "--name", "d" * 64], "not a DNS label"),
        ([*TWO_BY_EIGHT, "--namespace", "Bench"], "--namespace 'Bench' is not a DNS label"),
        ([*TWO_BY_EIGHT, "--run-as", "0:0"], "--run-as '0:0' is root: GPU pods run as"),
        ([*TWO_BY_EIGHT, "--run-as", "dew"], "--run-as 'dew' is not UID:GID"),
        ([*TWO_BY_EIGHT, "--cpu", "0"], "--cpu '0' is not a number of CPUs > 0"),
        ([*TWO_BY_EIGHT, "--cpu", "two"], "--cpu 'two' is not a number of CPUs"),
        ([*TWO_BY_EIGHT, "--memory", "8GB"], "--memory '8GB' is not an amount of memory"),
        ([*TWO_BY_EIGHT, "--memory", "0Gi"], "--memory '0Gi' is not an amount of memory"),
        ([*TWO_BY_EIGHT, "--priority-class", "High Priority"], "--priority-class 'High"),
        ([*TWO_BY_EIGHT, "--accelerator", "tpu-v9"], "argument --accelerator: invalid choice"),
        ([*TWO_BY_EIGHT, "--topology", "2x4"], "--topology is a TPU slice's"),
        ([*TWO_BY_EIGHT, "--accelerator", "tpu-v5-lite-podslice"], "no --topology: a tpu-v5"),
        ([*TWO_BY_EIGHT, "--accelerator", "tpu-v5-lite-podslice", "--topology", "3x3"],
         "--topology '3x3': a tpu-v5-lite-podslice slice on GKE is one of 1x1, 2x2, 2x4,"),
        ([*TWO_BY_EIGHT, "--accelerator", "tpu-v5-lite-podslice", "--topology", "4x4"],
         "give --hosts 4 --devices-per-host 4"),
        ([*TWO_BY_EIGHT, "--accelerator", "tpu-v6e-slice", "--topology", "2x2"], "(4 chips)"),
        (["--hosts", "1", "--devices-per-host", "8", "--image", IMAGE, "--accelerator",
          "tpu-v5-lite-podslice", "--topology", "2x4", "--detection", "env"],
         "--detection is for GPUs"),
        ([*TWO_BY_EIGHT, "--case-timeout", "nan"], "not a number of seconds"),
        ([*TWO_BY_EIGHT, "--detection", "slurm"], "invalid choice"),
        ([*TWO_BY_EIGHT, "--preset", "small"], "unrecognized arguments: --preset"),
        ([*TWO_BY_EIGHT, "--", "--preset", "small"], "name the cases with --cases"),
        ([*TWO_BY_EIGHT, "--", "--cases", "[{"], "--cases is not valid JSON"),
        ([*TWO_BY_EIGHT, "--", "--step", "m:f", "--json-out", "x.json"], "--json-out is the"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert kubernetes.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("k8s-manifests: error: ") and message in err
    with pytest.raises(SystemExit) as stopped:  # the nox session's way
        kubernetes.main(argv, exit_on_error=True)
    assert stopped.value.code == 2


@pytest.mark.parametrize("hosts", [2, 8, 64])
def test_the_log_recipe_follows_every_pod(hosts):
    """kubectl follows at most 5 pods of a selector unless --max-log-requests says more."""
    argv = ["--hosts", str(hosts), "--devices-per-host", "4", "--image", IMAGE]
    if hosts > 2:
        argv += ["--accelerator", "tpu-v6e-slice", "--topology", {8: "4x8", 64: "16x16"}[hosts]]
    text = kubernetes.manifests_text(kubernetes.parser().parse_args(argv), argv)
    recipe = "kubectl logs -f -n default -l jobset.sigs.k8s.io/jobset-name=dew-step --prefix"
    assert f"#   {recipe} --max-log-requests {hosts}\n" in text
    docs = (REPO / "docs" / "multihost.md").read_text()
    follows = [line for line in docs.splitlines() if "kubectl logs -f -l" in line]
    assert follows and all("--max-log-requests" in line for line in follows), follows


def test_out_is_never_clobbered(tmp_path, capsys):
    out = tmp_path / "dew.yaml"
    assert kubernetes.main([*TWO_BY_EIGHT, "--out", str(out)]) == 0
    written = out.read_text()
    assert written.startswith("# Generated by `nox -s k8s-manifests -- --hosts 2")
    assert "--out" not in written.splitlines()[0]
    assert kubernetes.main([*TWO_BY_EIGHT, "--name", "other", "--out", str(out)]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert out.read_text() == written


def test_the_generator_runs_on_the_standard_library_alone():
    """As the noxfile calls it: no site-packages (-I -S), only src/ on the path."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO / 'src')!r}); "
        "from dew.bench.multihost import kubernetes; "
        f"code = kubernetes.main({TWO_BY_EIGHT!r}); "
        "assert not {'pydantic', 'yaml', 'jax'} & set(sys.modules), sorted(sys.modules); "
        "sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "kind: JobSet" in done.stdout
