"""Test infrastructure: what the tests drive but dew itself never imports.

slurm_cluster   a throwaway one-node SLURM cluster to submit to (munged, slurmctld and
                slurmd as root); standard library only, because the slurm-smoke
                session (dew.host.sessions.slurm_smoke) imports it before any environment
                exists
browser         headless Chromium driven by Selenium through chromedriver (Debian's
                chromium and chromium-driver): the site's browser test and the README's
                screenshot
processes       whether a process has ended (a zombie counts), waiting a while for it
full_disk       a small tmpfs mounted for one test and filled to a chosen free space: a
                real ENOSPC for the writes of the tools (root only; skipped otherwise)
memory_cgroup   a memory cgroup for one run: past its limit the kernel's OOM killer ends a
                process, as in a container (root only; skipped otherwise)

The tests import it as the package `infra` (`from infra import slurm_cluster`):
tests/conftest.py puts tests/ on sys.path, whatever pytest's import mode.
"""
