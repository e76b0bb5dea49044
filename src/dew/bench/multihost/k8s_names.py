"""The names the Kubernetes manifests carry, checked as the API server and the JobSet webhook
will (dew.bench.multihost.kubernetes): DNS labels, the pod names the JobSet makes, and the
image reference, parsed whole. Standard library only. Each check raises UsageError in one
line naming the flag."""

from __future__ import annotations

import re

from dew.bench.common.errors import UsageError

MAX_LABEL = 63  # a DNS label: a Service, a JobSet's Job and pod names, a hostname
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # RFC 1035: Services, JobSets
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# The Job controller names an indexed Job's pod `<job>-<index>-<5 random characters>`; the
# JobSet webhook refuses a JobSet whose longest pod name, counted with a 5-character suffix,
# is not a DNS label (pkg/webhooks/jobset_webhook.go: GenPodName(...) + "-abcde").
POD_NAME_SUFFIX = "-abcde"

# The image reference grammar of the distribution project (reference/regexp.go), whole:
# [domain[:port]/]path[:tag]@sha256:<64 hex>. A digest only: a tag can move between pulls.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
IMAGE = re.compile(
    rf"(?P<repository>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"@sha256:(?P<digest>[0-9a-f]{64})"
)
MAX_REPOSITORY = 255


def check_label(flag: str, value: str) -> None:
    if not DNS_LABEL.fullmatch(value) or len(value) > MAX_LABEL:
        raise UsageError(f"{flag} {value!r} is not a DNS label (a-z, 0-9, -; 63 at most)")


def check_subdomain(flag: str, value: str) -> None:
    if not DNS_SUBDOMAIN.fullmatch(value) or len(value) > 253:
        raise UsageError(f"{flag} {value!r} is not a DNS subdomain (a-z, 0-9, - and .)")


def longest_pod_name(jobset: str, replicated_job: str, pods: int) -> str:
    """The longest pod name the JobSet of one Job makes, as its webhook counts it."""
    return f"{jobset}-{replicated_job}-0-{pods - 1}{POD_NAME_SUFFIX}"


def check_jobset_name(name: str, replicated_job: str, pods: int) -> None:
    check_label("--name", name)
    longest = longest_pod_name(name, replicated_job, pods)
    if len(longest) > MAX_LABEL:
        raise UsageError(
            f"--name {name!r} makes pod names like {longest} ({len(longest)} characters with "
            f"the 5 the Job controller adds); the JobSet webhook refuses more than "
            f"{MAX_LABEL}: give a --name of at most {len(name) - len(longest) + MAX_LABEL}"
        )


def check_image(image: str) -> dict[str, str | None]:
    """The reference's parts (repository, tag or None, digest), or UsageError saying what
    is wrong with it."""
    found = IMAGE.fullmatch(image)
    if found and len(found["repository"]) <= MAX_REPOSITORY:
        return found.groupdict()
    if image != "".join(image.split()):
        raise UsageError(f"--image {image!r} has white space: give the reference alone")
    if "@sha256:" not in image:
        raise UsageError(
            f"--image {image!r} names no digest: give REPOSITORY[:TAG]@sha256:<64 hex> (after a "
            "push, `podman image inspect --format '{{index .RepoDigests 0}}' TAG`); a tag can "
            "move between the pods' pulls and is not resolved here"
        )
    digest = image.rsplit("@sha256:", 1)[1]
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise UsageError(
            f"--image {image!r}: the digest is not sha256 of exactly 64 lowercase hex "
            f"characters ({len(digest)} given)"
        )
    raise UsageError(
        f"--image {image!r} is not an image reference: REPOSITORY[:TAG]@sha256:<64 hex>, the "
        "repository lowercase path components (a registry host first if any), no spaces"
    )
