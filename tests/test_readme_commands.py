"""Every command the READMEs show is one a user can paste: each `python run.py ...` composes in Hydra
(every job of a sweep) and passes the job's validation pass (`build_plan`, nothing loaded), and each
`specsparse ...` parses. Commands naming placeholders (DIR, <time>, HOST, /data/...), files of an
earlier run (outputs/...) or GPUs this machine lacks are composed only."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from specsparse.cli import build_parser
from specsparse.jobs.config import build_plan

pytestmark = pytest.mark.usefixtures("embedded_models_installed")  # configs, not this machine's installs

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", *sorted((ROOT / "experiments").glob("*/README.md"))]
PLACEHOLDERS = re.compile(r"DIR|<[a-z_]+>|HOST|ENTITY|/data/|/abs/|=outputs/|\.\.\.")
CHOICE_GROUPS = ("model", "drafter", "domain", "search", "runner", "logger", "experiment")


def readme_commands(path: Path) -> list[str]:
    """`python run.py ...` and `specsparse ...` lines of fenced blocks (continuations joined) and of inline code."""
    text = path.read_text()
    commands = []
    for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith(("python run.py", "specsparse ")):
                commands.append(line)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    commands += re.findall(r"`((?:python run\.py|specsparse [a-z-]+)(?: [^`]*)?)`", prose)
    return commands


def shown_commands() -> list[tuple[str, str]]:
    return [(f"{path.parent.name if path.parent != ROOT else 'README'}: {c}", c)
            for path in READMES for c in dict.fromkeys(readme_commands(path))]


HYDRA_FLAGS = {"-m": 0, "--multirun": 0, "--resolve": 0, "--cfg": 1, "-c": 1, "--package": 1, "-p": 1}


def run_py_overrides(words: list[str]) -> list[str]:
    """The overrides of `python run.py [-m] [--cfg job] ...`: Hydra's own flags, optional `[key=value]`
    parts and a prose `...` left out."""
    overrides, rest = [], iter(words[2:])
    for word in rest:
        if word in HYDRA_FLAGS:
            for _ in range(HYDRA_FLAGS[word]):
                next(rest)
        elif word != "..." and not (word.startswith("[") and word.endswith("]")):
            overrides.append(word)
    return overrides


def jobs_of(overrides: list[str]) -> list[list[str]]:
    """Hydra's own parse of the overrides, one list per job of the sweep."""
    options = []
    for override in OverridesParser.create().parse_overrides(overrides):
        if override.is_sweep_override():
            options.append([f"{override.get_key_element()}={v}" for v in override.sweep_string_iterator()])
        else:
            options.append([override.input_line])
    return [list(job) for job in itertools.product(*options)]


def compose_and_check(overrides: list[str], tmp_path: Path, validate: bool) -> None:
    for i, job in enumerate(jobs_of(overrides)):
        job = [o for o in job if not o.startswith("paths.outputs=")] + [f"paths.outputs={tmp_path / 'out'}"]
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=job, return_hydra_config=True)
        choices = {g: str(v) for g, v in cfg.hydra.runtime.choices.items() if g in CHOICE_GROUPS and v is not None}
        with open_dict(cfg):
            del cfg["hydra"]
        if not validate or str(cfg.model.get("device", "cpu")).startswith("cuda") and not torch.cuda.is_available():
            continue  # composed only: it needs a GPU
        build_plan(OmegaConf.to_container(cfg, resolve=True), output_dir=tmp_path / f"job{i}", cwd=tmp_path,
                   overrides=job, choices=choices)
    assert not (tmp_path / "out").exists(), "validation wrote outputs"


@pytest.mark.parametrize(("where", "command"), shown_commands(), ids=[w for w, _ in shown_commands()])
def test_a_readme_command_composes_and_validates(where, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    words = shlex.split(command, comments=True)
    if words[0] == "specsparse":
        args = build_parser().parse_args(words[1:])  # argparse exits (code 2) on a flag that does not exist
        inner = list(getattr(args, "command", None) or [])
        words = inner[1:] if inner[:1] == ["--"] else inner
        if args.command_name == "run":  # the packaged conf is the checkout's
            words = ["python", "run.py", *args.overrides]
        if words[:2] != ["python", "run.py"]:
            return
    compose_and_check(run_py_overrides(words), tmp_path, validate=not PLACEHOLDERS.search(command))


def test_the_readmes_show_commands():
    where = {w.split(":")[0] for w, _ in shown_commands()}
    assert len(shown_commands()) >= 30 and {"README", "quickstart", "tss_main", "paper_tss"} <= where


@pytest.mark.slow
def test_the_first_hour_runs_in_a_fresh_shell(tmp_path):
    """README's first steps in a shell that never activated the environment: a job on the tiny model, then
    the command its last line prints, pasted as printed; and `source .venv/bin/activate` then `specsparse`."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "activate").is_file():
        pytest.skip(f"{sys.executable} is not a virtual environment's python")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "SPECSPARSE_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1", "WANDB_MODE": "offline",
           "OMP_NUM_THREADS": "1"}

    def shell(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "--norc", "--noprofile", "-c", command], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)

    job = shell(f"{shlex.quote(str(bin_dir / 'python'))} run.py model=tiny domain=qa domain.limit=10 "
                f"generation.max_new_tokens=8 timing_prompts=2 progress=false logger=none paths.outputs={tmp_path / 'out'}")
    assert job.returncode == 0, job.stderr[-2000:]
    [printed] = re.findall(r"tables and plots: (.+)", job.stdout + job.stderr)
    report = shell(printed)
    assert report.returncode == 0, (printed, report.stderr[-2000:])
    folder = Path(printed.split()[-1])
    assert (folder / "report" / "report.md").is_file() and (folder / "speedup.png").is_file()
    activated = shell(f"source {shlex.quote(str(bin_dir / 'activate'))} && specsparse report --help")
    assert activated.returncode == 0 and "usage" in activated.stdout
