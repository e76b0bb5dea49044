"""The Kubernetes manifests of a multi-host run (dew.bench.multihost.kubernetes), checked
offline: every object against Kubernetes' own schemas (kubernetes-validate, strict: an
unknown field is an error), the JobSet against its v1alpha2 schema kept beside this file
(jobset.x-k8s.io_v1alpha2.schema.json) with its Job template resolved in Kubernetes'
definitions; the committed example is what the generator writes; bad input is one line."""

import copy
import json
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from kubernetes_validate import utils as k8s_schemas

from dew.bench.multihost import kubernetes, yaml_text
from dew.bench.runtime import protocol
from dew.bench.sweep import settings

REPO = Path(__file__).resolve().parents[3]
JOBSET_SCHEMA = Path(__file__).with_name("jobset.x-k8s.io_v1alpha2.schema.json")
EXAMPLE = REPO / "docs" / "multihost" / "jobset.yaml"
IMAGE = "registry.example/dew@sha256:" + "0123456789abcdef" * 4
TWO_BY_EIGHT = ["--hosts", "2", "--devices-per-host", "8", "--image", IMAGE]
# The oldest Kubernetes JobSet's releases of 2026 support, and the newest schemas known.
VERSIONS = ["1.29.0", "1.37.0"]


def generate(argv: list[str]) -> list[dict]:
    args = kubernetes.parser().parse_args(argv)
    return [doc for doc in yaml.safe_load_all(kubernetes.manifests_text(args, argv)) if doc]


def jobset_validator(version: str) -> jsonschema.Draft202012Validator:
    """The JobSet schema with Kubernetes' definitions of `version` (ObjectMeta, the Job
    template) as the resource its references name."""
    definitions = k8s_schemas.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version
    )
    registry = referencing.Registry().with_resource(
        definitions["$id"], referencing.Resource.from_contents(definitions)
    )
    return jsonschema.Draft202012Validator(json.loads(JOBSET_SCHEMA.read_text()), registry=registry)


def problems(manifest: dict, version: str) -> list[str]:
    """What is wrong with one object; [] when it validates."""
    if manifest["kind"] == "JobSet":
        errors = jobset_validator(version).iter_errors(manifest)
        return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(map(str, error.path))}: {error.message}"]
    return []


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("detection", ["jax", "env"])
def test_two_hosts_of_eight_gpus_validate(version, detection):
    manifests = generate([*TWO_BY_EIGHT, "--detection", detection])
    kinds = [manifest["kind"] for manifest in manifests]
    rbac = ["Role", "RoleBinding"] if detection == "jax" else []
    assert kinds == ["ServiceAccount", *rbac, "Service", "JobSet"]
    for manifest in manifests:
        assert problems(manifest, version) == [], manifest["kind"]
    job = manifests[-1]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (2, 2, "Indexed")
    container = job["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["resources"] == {
        "requests": {"nvidia.com/gpu": 8},
        "limits": {"nvidia.com/gpu": 8},
    }
    flags = container["args"]
    assert flags[flags.index("--mesh") + 1] == '{"fsdp": 16}'
    assert flags[flags.index("--json-out") + 1] == "/results/dew-step/step.json"


def test_a_wrong_field_fails_validation():
    """The schemas can fail: a misspelt JobSet field, a Job field of the wrong type and an
    unknown field of a Service are each found."""
    manifests = generate(TWO_BY_EIGHT)
    jobset = copy.deepcopy(manifests[-1])
    jobset["spec"]["network"]["enableDnsHostnames"] = jobset["spec"]["network"].pop(
        "enableDNSHostnames"
    )
    assert any("enableDnsHostnames" in line for line in problems(jobset, VERSIONS[0]))
    jobset = copy.deepcopy(manifests[-1])
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = "2"
    assert any("parallelism" in line for line in problems(jobset, VERSIONS[0]))
    jobset = copy.deepcopy(manifests[-1])
    jobset["spec"]["failurePolicy"]["restartStrategy"] = "Sometimes"
    assert any("restartStrategy" in line for line in problems(jobset, VERSIONS[0]))
    service = copy.deepcopy(manifests[-2])
    service["spec"]["headless"] = True
    assert problems(service, VERSIONS[0]) != []


def test_the_committed_example_is_what_the_generator_writes():
    header = EXAMPLE.read_text().splitlines()[0]
    command = header.split("`nox -s k8s-manifests -- ", 1)[1].rstrip("`")
    argv = shlex.split(command)
    args = kubernetes.parser().parse_args(argv)
    assert EXAMPLE.read_text() == kubernetes.manifests_text(args, argv)
    assert argv[: len(TWO_BY_EIGHT) - 1] == TWO_BY_EIGHT[:-1]  # 2 hosts x 8 GPUs


def test_the_deadline_counts_cases_repeats_and_the_join():
    cases = json.dumps([{"architecture": "simple_dit"}, {"architecture": "uvit"}])
    argv = [*TWO_BY_EIGHT, "--case-timeout", "100", "--", "--cases", cases, "--repeats", "3"]
    job = generate(argv)[-1]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["activeDeadlineSeconds"] == kubernetes.JOIN_S + 2 * 3 * 100
    # The defaults are the tool's own per-case deadlines with one compile job.
    per_case = protocol.COMPILE_S + protocol.TIMED_S * 2  # 200 steps: twice the timing
    job = generate([*TWO_BY_EIGHT, "--", "--cases", cases, "--steps", "200"])[-1]
    spec = job["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert spec["activeDeadlineSeconds"] == kubernetes.JOIN_S + 2 * per_case
    assert kubernetes.TIMED_STEPS == settings.TIMED_STEPS


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
        (["--hosts", "0", "--devices-per-host", "8", "--image", IMAGE], "--hosts 0"),
        (["--hosts", "two", "--devices-per-host", "8", "--image", IMAGE], "invalid int value"),
        (["--hosts", "2", "--devices-per-host", "0", "--image", IMAGE], "--devices-per-host 0"),
        (["--hosts", "2", "--devices-per-host", "8"], "required: --image"),
        ([*TWO_BY_EIGHT, "--name", "Dew_Step"], "not a DNS label"),
        ([*TWO_BY_EIGHT, "--name", "d" * 55], "at most 63"),
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
