"""`pip install ./python` into a fresh virtual environment, offline, then
text in -> text out with the installed `k3` command on the tiny model
(a checkpoint directory: examples/configs/tiny-k3.json, random weights, a
BPE tokenizer trained in the test).

The wheel is built from a copy of python/ with the build's runtime library
and tools bundled (k3/_lib, k3/_bin), by this venv's pip (setuptools + wheel
from python/requirements.txt, no build isolation, no network). The fresh
venv sees this venv's site-packages through a .pth file for numpy,
tokenizers, jinja2 (what install-deps already provides), installs the wheel
with --no-deps --no-index, and runs with no PYTHONPATH, K3_BIN_DIR or
K3_RUNTIME_LIB, from a directory outside the source tree: everything is
found inside the installed package.

    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_pip_install.py
"""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).parent))
import k3  # noqa: E402
import text_fixtures as fx  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")
TOOLS = ("k3-opt", "k3-run", "k3-import")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    pytest.importorskip("wheel", reason="building the wheel offline needs `wheel` "
                        "(python/requirements.txt)")
    tmp = tmp_path_factory.mktemp("pip")
    src = tmp / "src"
    shutil.copytree(ROOT / "python", src, ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info", "dist", "tests", "_lib", "_bin"))
    (src / "k3/_lib").mkdir()
    (src / "k3/_bin").mkdir()
    shutil.copy2(k3.find_runtime_library(), src / "k3/_lib")
    for t in TOOLS:
        shutil.copy2(Path(BIN) / t, src / "k3/_bin" / t)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    wheel = next((tmp / "dist").glob("k3-*.whl"))
    base = getattr(sys, "_base_executable", sys.executable)
    env_dir = tmp / "venv"
    subprocess.run([base, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "k3-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--disable-pip-version-check", str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "K3_BIN_DIR", "K3_RUNTIME_LIB", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}:/usr/bin:/bin"
    env["K3_CACHE_DIR"] = str(tmp / "cache")
    work = tmp / "work"
    work.mkdir()
    ckpt = fx.write_checkpoint(work / "tiny-ckpt")
    return env_dir, env, work, ckpt


def k3cmd(venv, *args):
    env_dir, env, work, _ = venv
    return subprocess.run([str(env_dir / "bin" / "k3"), *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=work)


def test_installed_package_finds_everything_inside_itself(venv):
    env_dir, env, work, _ = venv
    r = subprocess.run([str(env_dir / "bin" / "python"), "-c",
                        "import k3; print(k3.__file__); print(k3.find_runtime_library()); "
                        "print(k3.find_tool('k3-opt'))"],
                       capture_output=True, text=True, env=env, cwd=work, check=True)
    paths = r.stdout.split()
    assert all(p.startswith(str(env_dir)) for p in paths), paths


def test_text_in_text_out(venv):
    env_dir, env, work, ckpt = venv
    r = k3cmd(venv, "run", ckpt, "--prompt", "the quick brown fox", "--max-new-tokens", "24",
              "--ignore-eos", "--max-tokens", "64", "--max-seqs", "2")
    assert r.returncode == 0, r.stderr
    assert "tok/s" in r.stderr and "24 tokens" in r.stderr
    text = r.stdout.rstrip("\n")
    # The same greedy text as the source tree's package gives in-process.
    os.environ["K3_CACHE_DIR"] = env["K3_CACHE_DIR"]
    s = k3.load(ckpt, max_tokens=64, max_seqs=2, progress=False)
    assert text == s.generate("the quick brown fox", 24, ignore_eos=True)
    assert text.strip()
    # Sampled, seeded: reproducible.
    args = ("run", ckpt, "--prompt", "hello world", "--max-new-tokens", "12", "--temperature",
            "0.8", "--top-p", "0.9", "--seed", "4", "--max-tokens", "64", "--max-seqs", "2")
    assert k3cmd(venv, *args).stdout == k3cmd(venv, *args).stdout
    ids = k3cmd(venv, "run", ckpt, "--ids", "1,2,3", "--max-new-tokens", "5", "--max-tokens",
                "64", "--max-seqs", "2")
    assert ids.returncode == 0 and ids.stdout.strip() == \
        ",".join(map(str, s.generate([1, 2, 3], 5)))


def test_compile_import_bench(venv):
    env_dir, env, work, ckpt = venv
    r = k3cmd(venv, "compile", ckpt, "-o", work / "tiny.k3bin", "--max-tokens", "32",
              "--max-seqs", "2")
    assert r.returncode == 0, r.stderr
    assert "tiny-ckpt" in r.stdout and (work / "tiny.k3bin").is_file()
    r = k3cmd(venv, "import", ckpt, "-o", work / "tiny.mlir")
    assert r.returncode == 0 and "k3.layer" in (work / "tiny.mlir").read_text()
    r = k3cmd(venv, "bench", work / "tiny.k3bin", "--random-weights", "1", "--prompt-tokens",
              "8", "--new-tokens", "4", "--batch", "2")
    assert r.returncode == 0, r.stderr
    assert "prefill:" in r.stdout and "decode:" in r.stdout and "tok/s" in r.stdout


def test_cli_errors(venv):
    env_dir, env, work, ckpt = venv
    art = work / "errs.k3bin"
    assert k3cmd(venv, "compile", ckpt, "-o", art, "--max-tokens", "16", "--max-seqs",
                 "1").returncode == 0
    bare = work / "bare"
    bare.mkdir()
    shutil.copy(art, bare / "m.k3bin")
    r = k3cmd(venv, "run", bare / "m.k3bin", "--random-weights", "1", "--prompt", "hi")
    assert r.returncode == 1 and "no tokenizer.json or tiktoken.model; pass --tokenizer" in r.stderr
    r = k3cmd(venv, "run", art, "--random-weights", "1", "--tokenizer", work / "nope.json",
              "--prompt", "hi")
    assert r.returncode == 1 and "tokenizer file not found" in r.stderr
    r = k3cmd(venv, "run", art, "--random-weights", "1", "--ids", "1,999")
    assert r.returncode == 1 and "prompt token 1 = 999 is out of range for vocab_size 256" in r.stderr
    r = k3cmd(venv, "run", art, "--random-weights", "1", "--ids", ",".join(["1"] * 17))
    assert r.returncode == 1 and "17 tokens but the artifact was compiled for max_tokens 16" \
        in r.stderr
    r = k3cmd(venv, "run", art, "--random-weights", "1", "--ids", "1", "--top-p", "0")
    assert r.returncode == 1 and "top_p" in r.stderr
    r = k3cmd(venv, "run", bare / "m.k3bin", "--ids", "1")
    assert r.returncode == 1 and "no weights" in r.stderr and "--random-weights SEED" in r.stderr
    r = k3cmd(venv, "run", work / "missing-dir", "--prompt", "hi")
    assert r.returncode == 1 and "no such model file or checkpoint directory" in r.stderr
    assert "Traceback" not in r.stderr
