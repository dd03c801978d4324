"""``parley capacity`` (capacity/cli.py): the printed plan, and bad input → exit code 2."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from parley.capacity.cli import add_capacity_parser
from parley.config import load_settings

SEED = [
    "--users", "20000", "--active-fraction", "0.1", "--messages-per-minute", "1",
    "--prompt-tokens", "2000", "--output-tokens", "500",
    "--model", "llama-3-70b", "--kv-memory", "110GB",
    "--curve", "1:40,8:300,32:1000,64:1600,128:2200", "--prefill-ms", "300",
    "--itl-target-ms", "50", "--ttft-target-ms", "2000",
]  # fmt: skip


def capacity(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``parley capacity ARGV``: the code, stdout and stderr."""
    parser = argparse.ArgumentParser(prog="parley")
    add_capacity_parser(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(["capacity", *argv])
        code = asyncio.run(args.handler(args, load_settings()))
    except SystemExit as e:  # argparse's own refusals
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_seeds_example_prints_the_exact_kv_figure_beside_the_guess(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = capacity(SEED, capsys)
    assert code == 0
    assert "2 x 80 x 8 x 128 x 1 = 163,840 bytes = 160 KiB" in out
    assert "~1 MB per token" in out
    assert "holds 268 sequences at 2,500 tokens" in out
    assert "81 at the model's full 8,192-token window" in out
    assert "the latency target, not memory, limits a replica" in out
    assert "L = λW" in out
    assert "replicas: " in out


def test_every_input_is_labelled(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = capacity([*SEED, "--measured", "users,prompt-tokens,curve"], capsys)
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert lines["users"].endswith("[measured]")
    assert lines["prompt"].endswith("[measured]")
    assert lines["output"].endswith("[assumed]")
    assert "given points [measured]" in lines["throughput"]
    assert "[assumed]" in lines["engine"]


def test_memory_bound_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SEED, "--kv-memory", "20GB", "--context-tokens", "8192", "--itl-target-ms", "200"]
    code, out, _ = capacity(argv, capsys)
    assert code == 0
    assert "KV memory, not the latency target, limits a replica" in out


def test_extrapolation_is_warned(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = capacity([*SEED, "--curve", "1:40,8:300,16:520"], capsys)
    assert code == 0
    assert "warning: extrapolating" in out


def test_a_curve_from_bench_engine_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "curve.json"
    levels = {"1": {"tok_s": 40.0, "itl_p50": 0.025, "ttft_p50": 0.12}}
    levels["8"] = {"tok_s": 280.0, "itl_p50": 0.028, "ttft_p50": 0.2}
    path.write_text(json.dumps({"sides": {"parley-fp32": {"label": "x", "levels": levels}}}))
    argv = [
        "--rate", "2", "--prompt-tokens", "200", "--output-tokens", "100",
        "--model", "smollm2-135m", "--kv-memory", "1GiB", "--curve-json", str(path),
    ]  # fmt: skip
    code, out, _ = capacity(argv, capsys)
    assert code == 0, out
    assert "engine TTFT         120 ms [measured" in out
    assert "46,080 bytes = 45 KiB" in out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--active-fraction", "1.5"], "active fraction must be in (0, 1]"),
        (["--kv-dtype", "fp6"], "unknown KV dtype 'fp6'"),
        (["--users", "-3"], "users must be a positive number"),
        (["--kv-memory", "lots"], "is not a size"),
        (["--curve", "8-300"], "CONCURRENCY:TOKENS_PER_S"),
        (["--model", "gpt-9"], "unknown model"),
        (["--itl-target-ms", "5"], "no concurrency meets it"),
        (["--measured", "vibes"], "--measured: unknown vibes"),
        (["--curve-json", "/nonexistent.json"], "give one throughput curve"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    change: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = capacity([*SEED, *change], capsys)
    assert code == 2
    assert message in err
    assert out == ""


def test_a_missing_required_flag_is_argparses_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = capacity(["--rate", "1"], capsys)
    assert code == 2
    assert "--prompt-tokens" in err


def test_parley_capacity_through_the_parley_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from parley.cli import main

    monkeypatch.chdir(tmp_path)  # no parley.toml of the checkout's
    assert main(["capacity", *SEED]) == 0
    assert "163,840 bytes = 160 KiB" in capsys.readouterr().out
    assert main(["capacity", *SEED, "--active-fraction", "0"]) == 2
    assert "active fraction must be in (0, 1]" in capsys.readouterr().err
