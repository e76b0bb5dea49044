"""`nox -s base-image`: the offline base (Debian trixie, Python 3.13) from this machine's
apt archive, its reference and digest logged."""

from __future__ import annotations

from dew.host.bases import build_offline_base
from dew.host.benchmarks import choose_engine
from dew.host.engine import EngineError, base_digest


def base_image(session) -> None:
    engine = choose_engine(session)
    if engine is None:
        session.error("base-image needs podman or docker: `apt-get install podman runc`")
    try:
        ref = build_offline_base(engine, log=session.log)
        session.log(f"{ref} {base_digest(engine, ref)}")
    except EngineError as error:
        session.error(str(error))
