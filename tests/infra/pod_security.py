"""The Pod Security Standards' "baseline" and "restricted" levels (kubernetes.io/docs/concepts/
security/pod-security-standards; restricted includes every baseline control), as a namespace
labelled `pod-security.kubernetes.io/enforce: <level>` admits pods, checked offline on a pod
spec.
No maintained checker installs from PyPI (the admission controller is Go:
k8s.io/pod-security-admission), so each control is written out here, one function each, and
tests/bench/multihost/test_kubernetes_schemas.py shows each one refusing a pod that breaks it.
Linux pods only (the Windows exemptions are not modelled)."""

from __future__ import annotations

from collections.abc import Iterator

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
    "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}  # fmt: skip
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def _containers(pod: dict) -> Iterator[tuple[str, dict]]:
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for index, container in enumerate(pod.get(field) or []):
            yield f"{field}[{index}]", container


def _context(container: dict) -> dict:
    return container.get("securityContext") or {}


def violations(pod: dict, level: str = "restricted") -> list[str]:
    """What keeps a namespace of this level from admitting a pod of this spec; [] if
    nothing."""
    if level not in ("baseline", "restricted"):
        raise ValueError(f"level {level!r}: baseline or restricted")
    found: list[str] = []
    pod_context = pod.get("securityContext") or {}
    # --- baseline
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"host namespaces: {field}")
    contexts = [("securityContext", pod_context)]
    contexts += [(f"{where}.securityContext", _context(c)) for where, c in _containers(pod)]
    for where, context in contexts:
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"HostProcess: {where}.windowsOptions.hostProcess")
        selinux = context.get("seLinuxOptions") or {}
        if (
            selinux.get("type", "") not in SELINUX_TYPES
            or selinux.get("user")
            or selinux.get("role")
        ):
            found.append(f"SELinux: {where}.seLinuxOptions")
        apparmor = (context.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"AppArmor: {where}.appArmorProfile {apparmor}")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append(f"seccomp: {where}.seccompProfile Unconfined")
    for where, container in _containers(pod):
        context = _context(container)
        if context.get("privileged"):
            found.append(f"privileged: {where}")
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"host ports: {where}")
        if context.get("procMount", "Default") != "Default":
            found.append(f"/proc mount: {where}")
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            found.append(f"hostPath volume {volume['name']}")
    for sysctl in pod_context.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctls: {sysctl['name']}")
    if level == "baseline":
        return found
    # --- restricted
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume types: {volume['name']} is {sorted(kinds)}")
    pod_non_root = pod_context.get("runAsNonRoot")
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    if pod_context.get("runAsUser") == 0:
        found.append("running as non-root user: securityContext.runAsUser 0")
    for where, container in _containers(pod):
        context = _context(container)
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"privilege escalation: {where}.allowPrivilegeEscalation is not false")
        non_root = context.get("runAsNonRoot")
        if non_root is False or (non_root is None and pod_non_root is not True):
            found.append(f"running as non-root: {where} (runAsNonRoot not true)")
        if context.get("runAsUser") == 0:
            found.append(f"running as non-root user: {where}.runAsUser 0")
        seccomp = (context.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"seccomp: {where} has no RuntimeDefault or Localhost profile")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"capabilities: {where} does not drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"capabilities: {where} adds more than NET_BIND_SERVICE")
    return found
