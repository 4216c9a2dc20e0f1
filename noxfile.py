"""nox sessions for attnbench. `nox -l` lists them; `nox -s bench` is the main job, `nox -s tests` the tests.

Every session measures the torch that is already installed where nox runs (the one matched to the
user's driver): the session's virtualenv gets a .pth file pointing at the site-packages that hold
that torch, so pip sees it as installed and never downloads another. That works whether torch sits
in the base interpreter (as in CI) or in the virtualenv nox was installed into; `--system-site-packages`
alone would only expose the base interpreter's. Only where no torch exists at all does a session
install the fallback pinned in pyproject.toml ([tool.attnbench] fallback-torch).
"""

from __future__ import annotations

import importlib.util
from datetime import datetime
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
FALLBACK_TORCH = PYPROJECT["tool"]["attnbench"]["fallback-torch"]
SOURCE_DIRS = ("attnbench", "harness", "variants", "results", "reports", "tests", "benchmarks")


def _host_torch_site() -> str | None:
    """The site-packages directory holding the torch importable by the interpreter running nox."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(list(spec.submodule_search_locations)[0]).parent)


def _install(session: nox.Session, *extras: str) -> None:
    """Expose the host's torch to the session (or install the fallback), then install attnbench."""
    site = _host_torch_site()
    if site:
        purelib = (
            session.run(
                "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
            )
            .strip()
            .splitlines()[-1]
        )
        Path(purelib, "_attnbench_host_torch.pth").write_text(site + "\n")
        session.log(f"using the torch installed in {site}")
    else:
        session.log(f"no torch where nox runs: installing {FALLBACK_TORCH}")
        session.install(FALLBACK_TORCH)
    target = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", target)
    # the editable install imports from the source tree: its bytecode is written here, once, because a shell
    # with PYTHONDONTWRITEBYTECODE set (as some containers and CI images have) would otherwise compile every
    # module again in each process a session starts (about 0.2 CPU-s each; the suite starts a few hundred)
    session.run("python", "-m", "compileall", "-q", *(str(ROOT / d) for d in SOURCE_DIRS), silent=True)
    session.run("python", "-c", "import torch; print('torch', torch.__version__, torch.__file__)")


def _has_cuda(session: nox.Session) -> bool:
    out = session.run("python", "-c", "import torch; print(torch.cuda.is_available())", silent=True)
    return out.strip().splitlines()[-1] == "True"


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (all of it; pass -m 'not slow' to skip the slow tests)."""
    # the executors' and transformers' tests skip without them: CI has them
    _install(session, "dev", "ray", "slurm", "transformers")
    # two test processes, a test file each at a time (pytest-xdist): most tests wait on worker processes
    # (a torch import, a calibration) more than they compute, and a file's fixtures stay in one process; the
    # files are handed out in collection order, the costliest first (tests/conftest.py: HEAVY_FIRST)
    xdist = ("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
    session.run("python", "-m", "pytest", *xdist, *(session.posargs or ["tests"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check, and the import contract (variants -> harness -> results -> reports)."""
    session.install("ruff", "pytest")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # the contract reads the source with ast: no torch, no install, no tests/conftest.py (which needs torch)
    contract = ("--noconftest", "-q", "-p", "no:cacheprovider", "tests/test_layering.py")
    session.run("python", "-m", "pytest", *contract)


# pinned so that a docs build today and next year render the same pages (mkdocs-material 9.7 and
# mkdocstrings-python 2.x change their templates and options)
DOCS_DEPS = (
    "mkdocs==1.6.1",
    "mkdocs-material==9.6.23",
    "mkdocstrings[python]==0.30.1",
    "mkdocstrings-python==1.18.2",
)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the docs site (mkdocs-material, API reference from docstrings) into site/, strictly."""
    session.install(*DOCS_DEPS)  # no torch, no attnbench: mkdocstrings reads the source statically
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The main job: run the preset that fits this machine (gpu with CUDA, else quick) and render its report.

    Extra arguments go to `attnbench run`, e.g. `nox -s bench -- --seq-len 256..2048`.
    """
    _install(session)
    preset = "gpu" if _has_cuda(session) else "quick"
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = ROOT / "runs" / f"{stamp}-{preset}"
    report_dir = ROOT / "reports" / "out" / f"{stamp}-{preset}"
    args = session.posargs
    if not any(a in ("--preset", "--config") or a.startswith(("--preset=", "--config=")) for a in args):
        args = ["--preset", preset, *args]
    session.run("attnbench", "run", *args, "--out", str(run_dir))
    session.run("attnbench", "report", str(run_dir), "--out", str(report_dir))
    session.log(f"results: {run_dir}")
    session.log(f"report:  {report_dir / 'README.md'} and {report_dir / 'report.html'}")


@nox.session(default=False)
def report(session: nox.Session) -> None:
    """Render a report: nox -s report -- RUN_DIR [RUN_DIR ...] --out DIR."""
    _install(session)
    session.run("attnbench", "report", *session.posargs)


@nox.session(default=False)
def compare(session: nox.Session) -> None:
    """Compare two runs: nox -s compare -- RUN_A RUN_B [--fail-above median:5%]."""
    _install(session)
    session.run("attnbench", "compare", *session.posargs)


@nox.session(default=False)
def profile(session: nox.Session) -> None:
    """Profile one cell with py-spy and torch.profiler: nox -s profile -- --variant chunked --seq-len 2048."""
    _install(session, "profile")
    session.run("attnbench", "profile", *session.posargs)
