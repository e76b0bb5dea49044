"""The published records validate and hold what the seed text says, nothing more."""

from pathlib import Path

import pytest

from dew.bench.record import validate
from dew.bench.record.schema import read_run

PUBLISHED = Path(__file__).resolve().parents[3] / "results" / "published"
FIRST = PUBLISHED / "2026-09-02-rtx4080-6b0f119-small.json"
RERUN = PUBLISHED / "2026-09-05-rtx4080-9886c20-rerun.json"
LOADER = PUBLISHED / "oxford-flowers-loader.json"

# Lines copied verbatim from seed/step-benchmarks.md (tab-separated, as published).
SEED_FIRST_TABLE = """\
unet	64x64x3	16	10,159,299	16.4	18.2 / 18.4 / 19.0	977.2	646.4	40.5%	0.75	36.4
simple_dit	64x64x3	16	19,835,568	7.9	8.8 / 9.1 / 10.0	2036.0	292.9	38.2%	0.90	9.9
unet_3d	8x64x64x3	4	11,045,699	33.9	36.7 / 37.2 / 39.6	117.8	1384.1	41.8%	1.72	46.6
causal_transformer	512 tokens	16	66,950,784	83.0	83.7 / 83.8 / 84.0	192.7	3406.4	42.1%	5.81	10.1"""  # noqa: E501
SEED_COST_TABLE = """\
unet	28.7	646.4	22.50x
causal_transformer	1320.1	3406.4	2.58x
simple_dit	296.9	292.9	0.99x"""
SEED_RERUN_TABLE = """\
simple_dit	7.9	7.02	7.5 / 7.6 / 7.9	2278.3	292.9	42.8%	0.83	8.0
causal_transformer	83.0	88.78	89.5 / 89.7 / 89.9	180.2	3406.4	39.4%	4.51	9.5"""
SEED_HEAD_CHUNKS = "(1: 87.02 ms, 5.67 GiB; 2: 88.39 ms, 4.85 GiB; 4: 88.90 ms, 4.51 GiB; 8: 89.67 ms, 4.41 GiB; 50 steps each)"  # noqa: E501


def by_arch(run):
    return {r.architecture: r for r in run.rows if r.head_chunks is None and not r.case}


def test_every_published_record_validates(capsys):
    files = sorted(PUBLISHED.glob("*.json"))
    assert {FIRST, RERUN, LOADER} <= set(files)
    assert validate.main([str(f) for f in files]) == 0
    assert capsys.readouterr().err == ""


def test_first_table_rows_match_the_seed():
    run = read_run(FIRST)
    assert len(run.rows) == 12 and all(r.status == "ok" for r in run.rows)
    rows = by_arch(run)
    for line in SEED_FIRST_TABLE.splitlines():
        arch, sample, batch, params, ms, pct, sps, gflop, util, peak, comp = line.split("\t")
        row = rows[arch]
        assert (row.sample, row.batch, row.params) == (
            sample,
            int(batch),
            int(params.replace(",", "")),
        )
        assert [row.p10_ms, row.p50_ms, row.p90_ms] == [float(x) for x in pct.split(" / ")]
        assert row.ms_per_step == float(ms) and row.samples_per_s == float(sps)
        assert row.gflop_per_step == float(gflop) and row.peak_gib == float(peak)
        assert row.util == pytest.approx(float(util.rstrip("%")) / 100)
        assert row.compile_s == float(comp)
        assert row.condition_params == 0  # the CharTable was a constant at 6b0f119
    for line in SEED_COST_TABLE.splitlines():
        arch, cost, hlo, ratio = line.split("\t")
        row = rows[arch]
        assert row.cost_analysis_gflop == float(cost) and row.gflop_per_step == float(hlo)
        # The seed's ratio is of the unrounded counts, printed to 2 decimals: agree within
        # what rounding both counts to 0.1 GFLOP and the ratio to 0.01 allows.
        ours = row.gflop_per_step / row.cost_analysis_gflop
        slack = ours * (0.05 / row.cost_analysis_gflop + 0.05 / row.gflop_per_step) + 0.005
        assert ours == pytest.approx(float(ratio.rstrip("x")), abs=slack)


def test_first_record_states_the_stack_and_nothing_more():
    run = read_run(FIRST)
    env = run.environment
    assert env.packages == {"jax": "0.11.1", "jaxlib": "0.11.1", "flax": "0.12.9", "optax": "0.2.8"}
    assert env.driver_version == "595.84" and env.code.commit == "6b0f119"
    assert (env.devices.kind, env.devices.count, env.devices.memory_gib) == ("RTX 4080", 1, 16)
    assert (run.settings.steps, run.settings.warmup, run.settings.dtype) == (100, 2, "bfloat16")
    # Not in the seed: unknown, not invented.
    assert env.cuda_version is None and env.cudnn_version is None and env.python is None
    assert env.host is None and env.env_flags is None and env.code.dirty is None


def test_rerun_rows_head_chunks_and_failed_moe_match_the_seed():
    run = read_run(RERUN)
    first = by_arch(read_run(FIRST))
    rows = by_arch(run)
    assert len(rows) == 4
    for line in SEED_RERUN_TABLE.splitlines():
        arch, before, ms, pct, sps, gflop, util, peak, comp = line.split("\t")
        row = rows[arch]
        assert first[arch].ms_per_step == float(before)
        assert row.ms_per_step == float(ms) and row.samples_per_s == float(sps)
        assert [row.p10_ms, row.p50_ms, row.p90_ms] == [float(x) for x in pct.split(" / ")]
        assert row.params == first[arch].params + 99_840 == first[arch].params + 130 * 768
    sweep = sorted((r for r in run.rows if r.head_chunks is not None), key=lambda r: r.head_chunks)
    described = "; ".join(
        f"{r.head_chunks}: {r.ms_per_step:.2f} ms, {r.peak_gib:.2f} GiB" for r in sweep
    )
    assert f"({described}; 50 steps each)" == SEED_HEAD_CHUNKS
    assert all(r.architecture == "causal_transformer" and r.steps == 50 for r in sweep)
    (moe,) = [r for r in run.rows if r.case and r.case.get("moe")]
    assert moe.status == "failed" and "RESOURCE_EXHAUSTED" in moe.error and "4.47GiB" in moe.error
    assert run.environment.env_flags == {
        "JAX_PLATFORMS": "cuda",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.8",
    }
    assert run.environment.code.commit == "9886c20"
    assert (run.settings.steps, run.settings.warmup) == (100, 2)


def test_loader_record_matches_the_seed():
    run = read_run(LOADER)
    assert run.kind == "data" and run.created is None  # the seed gives no date
    rows = {r.workers: r for r in run.rows}
    assert set(rows) == {0, 8}
    assert (rows[0].samples_per_s, rows[0].p50_ms, rows[0].p95_ms) == (322.1, 25.1, 32.8)
    assert (rows[8].samples_per_s, rows[8].p50_ms, rows[8].p95_ms) == (505.0, 0.05, 77.1)
    assert all(r.batch == 8 and r.image_size == 64 for r in run.rows)


def test_step_table_renders_the_seed_layout():
    from dew.bench.analysis import tables as report

    text = report.step_table(read_run(FIRST).rows, "tsv")
    header, *lines = text.splitlines()
    assert header.split("\t") == list(report.STEP_HEADERS)
    rendered = {line.split("\t")[0]: line.split("\t") for line in lines}
    for seed_line in SEED_FIRST_TABLE.splitlines():
        seed = seed_line.split("\t")
        ours = rendered[seed[0]]
        assert float(ours[4]) == float(seed[4])  # ms/step: we print two decimals
        assert ours[:4] + ours[5:] == seed[:4] + seed[5:]
    md = report.step_table(read_run(RERUN).rows, "md")
    assert "| causal_transformer (moe) | 512 tokens | 16 | failed: RESOURCE_EXHAUSTED" in md
    assert "| causal_transformer (head_chunks=8) |" in md


def test_data_table_renders_the_loader_rows():
    from dew.bench.analysis import tables as report

    lines = report.data_table(read_run(LOADER).rows, "tsv").splitlines()
    assert lines[1].split("\t")[3:8] == ["0", "16", "322.1", "25.10 ms", "32.8 ms"]
    assert lines[2].split("\t")[3:8] == ["8", "16", "505.0", "0.05 ms", "77.1 ms"]
