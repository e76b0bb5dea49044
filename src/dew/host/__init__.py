"""The host side: what runs on this machine around the benchmarks, before any environment
exists (the noxfile imports it with only src/ on sys.path), so standard library only:
the container engine, images and stacks, the runs in them, the GPU checks, and under
`sessions/` the body of each nox session. Of dew it imports only the standard-library
modules `dew.bench.common.errors`, `dew.bench.common.files` and `dew.bench.record.stack`
(the import contract in pyproject.toml holds it to that).

Every function that takes a `session` takes a nox.Session; nothing here imports nox.
"""
