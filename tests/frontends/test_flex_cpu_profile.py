"""benchmarks/flex_cpu_profile.py's reading of `perf report` and its refusal without perf (the profile
itself is a benchmark, run by hand: its figures are committed in results/reference)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "flex_cpu_profile.py"

# rows as `perf report --sort dso,sym --stdio --no-children -t '|'` printed them for flex and sdpa here
FLEX_REPORT = """\
# Overhead  Shared Object  Symbol
#
 60.38% |c2u6ezsh.main.so     |[.] kernel_micro_gemm_transpose_b_transpose_b_kernel<1l, 16l, false, false>
 13.84% |c2u6ezsh.main.so     |[.] kernel::{lambda(long, long)#2}::operator()
 2.73%  |libgomp.so.1         |[.] 0x000000000001e02a
 0.48%  |[JIT] tid 25486      |[.] 0x00007fb3d8e401e1
 0.46%  |[JIT] tid 25486      |[.] 0x00007fb3d8e402c8
 0.15%  |libc.so.6            |[.] malloc
"""
SDPA_REPORT = """\
 72.33% |libtorch_cpu.so      |[.] mkl_blas_def_sgemm_kernel_0_zen
 13.64% |libtorch_cpu.so      |[.] at::native::(anonymous namespace)::cpu_flash_attention<float, 256l>
 3.78%  |libtorch_cpu.so      |[.] mkl_blas_def_sgemm_scopy_right4_bdz
 3.10%  |libgomp.so.1         |[.] 0x000000000001e02a
 0.20%  |[kernel.kallsyms]    |[k] clear_page_erms
"""


@pytest.fixture(scope="module")
def fp():
    return load_benchmark("flex_cpu_profile")


def test_rows_are_parsed_with_their_object_and_symbol(fp):
    rows = fp.parse_report(FLEX_REPORT)
    assert len(rows) == 6  # the header lines are not rows
    assert rows[0] == (60.38, "c2u6ezsh.main.so", "kernel_micro_gemm_transpose_b_transpose_b_kernel<1l, 16l, "
                                                  "false, false>")  # fmt: skip
    assert rows[3][1] == "[JIT] tid 25486" and rows[3][2] == "0x00007fb3d8e401e1"


def test_flex_samples_split_into_qk_pv_and_the_rest(fp):
    shares = fp.group_shares("flex", fp.parse_report(FLEX_REPORT))
    assert shares == {
        "q.kT micro-gemm (inductor)": 60.4,
        "p.v brgemm (oneDNN JIT)": 0.9,
        "softmax, masks, scale (template)": 13.8,
        "OpenMP": 2.7,
        "other": 0.1,
    }


def test_sdpa_samples_split_into_gemms_and_the_rest(fp):
    shares = fp.group_shares("sdpa", fp.parse_report(SDPA_REPORT))
    assert shares == {"gemms (MKL)": 76.1, "softmax and the rest (ATen flash kernel)": 13.6, "OpenMP": 3.1,
                      "other": 0.2}  # fmt: skip
    named = fp.top_symbols(fp.parse_report(SDPA_REPORT), k=2)
    assert [s["symbol"][:24] for s in named] == ["mkl_blas_def_sgemm_kerne", "at::native::(anonymous n"]


def test_without_perf_it_exits_2_with_one_line_before_any_work(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # an empty directory: no perf on PATH
    out = subprocess.run([sys.executable, str(SCRIPT), "--json", str(tmp_path / "x.json")], env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    reason = "flex_cpu_profile: perf is not on PATH (Debian: apt install linux-perf)"
    assert out.stderr.strip().splitlines() == [reason]
    assert not (tmp_path / "x.json").exists()
