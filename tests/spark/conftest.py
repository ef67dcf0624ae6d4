"""The Spark tier: docs/archive.md's Spark SQL run as written by the real Spark (PySpark's ``spark-sql``, local
mode) on lease archives that kubectl-runs writes. scripts/spark.sh installs PySpark into a virtualenv of its own
under ~/.cache/kubectl-runs/spark (a cold install downloads about 450 MB), and Java 17 with apt-get where
``java`` is absent. Skipped only where there is no Java and it cannot be installed here (not root, or no
apt-get), and never where KUBECTL_RUNS_REQUIRE_CONTROLPLANE is set (CI): there that is a failure, as is an
install that fails anywhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRE_ENV = "KUBECTL_RUNS_REQUIRE_CONTROLPLANE"
INSTALL_TIMEOUT = 30 * 60  # seconds; a cold install took 126 s here (94 s with pip's cache warm)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/spark" in str(item.fspath):
            item.add_marker(pytest.mark.spark)


def _missing(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"Spark tier required here: {reason}")
    pytest.skip(f"{reason}; set {REQUIRE_ENV}=1 to make this an error")


@dataclass(frozen=True)
class Spark:
    home: Path  # the virtualenv scripts/spark.sh made: bin/python imports pyspark, bin/spark-sql is on PATH
    env: dict[str, str]

    @property
    def version(self) -> str:
        done = subprocess.run([str(self.home / "bin" / "python"), "-c", "import pyspark; print(pyspark.__version__)"],
                              capture_output=True, text=True, timeout=120, check=True)
        return done.stdout.strip()


@pytest.fixture(scope="session")
def spark() -> Spark:
    """PySpark installed by scripts/spark.sh (now, or from its cache), with its bin/ first on PATH: spark-sql
    finds its Spark there (the pip package's launcher asks that directory's python where Spark is)."""
    if shutil.which("java") is None and (os.geteuid() != 0 or shutil.which("apt-get") is None):
        _missing("'java' is not on PATH, and scripts/spark.sh can install it only as root with apt-get")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "spark.sh")], capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT, cwd=ROOT)
    if done.returncode != 0:
        pytest.fail(f"scripts/spark.sh failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    home = Path(done.stdout.strip().splitlines()[-1])
    env = {**os.environ, "PATH": os.pathsep.join([str(home / "bin"), os.environ.get("PATH", "")])}
    for name in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV"):
        env.pop(name, None)  # the cache's PySpark, whatever the calling shell points at
    return Spark(home=home, env=env)
