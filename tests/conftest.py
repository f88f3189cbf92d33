"""Shared pytest setup for the instance_norm tests.

* `requires_cuda` marker: tests (or whole modules, via `pytestmark`) carrying it are
  skipped when `torch.cuda.is_available()` is False.
* A fresh random seed for every test, drawn from os.urandom (override with
  INSTANCE_NORM_TEST_SEED=<int> to reproduce a failure).  The seed is printed in the
  report of every failing test.
* `instance_norm` is imported lazily inside fixtures, so collection never triggers a
  CUDA build.
"""

import os
import random
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SOURCE_PATH = os.path.join(ROOT, "instance_norm.py")
SEED_ENV = "INSTANCE_NORM_TEST_SEED"


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_cuda: needs a CUDA GPU (skipped otherwise)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="torch.cuda.is_available() is False")
    for item in items:
        if "requires_cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def seed(request):
    """Fresh seed for every test: seeds torch (CPU and all GPUs) and `random`."""
    env = os.environ.get(SEED_ENV)
    value = int(env) if env else int.from_bytes(os.urandom(8), "little") >> 1
    torch.manual_seed(value)
    random.seed(value)
    request.node.user_properties.append(("seed", value))
    return value


@pytest.fixture
def rng(seed):
    """A Python RNG for shapes and options, derived from the test's seed."""
    return random.Random(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        seeds = [value for key, value in item.user_properties if key == "seed"]
        if seeds:
            report.sections.append(
                ("random seed", f"seed={seeds[0]}  (reproduce with {SEED_ENV}={seeds[0]})")
            )


@pytest.fixture(scope="session")
def inorm():
    """The module under test, imported lazily."""
    import instance_norm

    return instance_norm


@pytest.fixture(scope="session")
def source_text():
    with open(SOURCE_PATH, encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def submission(source_text, tmp_path, monkeypatch):
    """instance_norm.py executed the way the benchmark harness does it: the file text
    exec'd in a fresh dict with __name__ "kernelbench_submission" and no __file__,
    from an empty temporary working directory.  Returns that dict."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    namespace = {"__name__": "kernelbench_submission"}
    exec(compile(source_text, "kernelbench_submission", "exec"), namespace)
    assert "__file__" not in namespace
    return namespace
