"""Root conftest: Hypothesis profiles, torch determinism, and the claims plugin.

A run outside the checkout (a conjecture in a researcher's folder) loads this file too, as a
plugin, through the suite's pytest11 entry point (attention_theorems/pytest_plugin.py), so
that it runs as a run in the checkout does; keep it free of assumptions about the rootdir.

Profiles (theorems.framework.profiles): dev, ci (default), ci-random, nightly, debug, chosen
by ATTN_HYPOTHESIS_PROFILE; Hypothesis' --hypothesis-profile overrides it. A random profile's seed
is ATTN_HYPOTHESIS_SEED, or drawn here and printed at the end of the run.
"""

import os

# Thread counts change float results (prior-art C.3). Under xdist each worker gets one thread;
# the environment must be set before torch (and its OpenMP/MKL runtimes) is imported.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _XDIST_WORKER:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_var] = "1"

# cuBLAS is deterministic only with a fixed workspace, which must be set before CUDA starts;
# without it use_deterministic_algorithms (below) warns on every GPU matrix product.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest  # noqa: E402
import torch  # noqa: E402

from theorems.framework import profiles  # noqa: E402

pytest_plugins = ("theorems.framework.plugin",)

# One intra-op thread everywhere: the suite's tensors are tiny, and waking torch's thread pool
# for each op cost 10-50x in measured runs (2 threads on a loaded 2-core machine).
TORCH_THREADS = 1


def _torch_determinism() -> None:
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(TORCH_THREADS)
    # Deterministic kernels where torch has a choice; warn (not raise) on the others.
    torch.use_deterministic_algorithms(True, warn_only=True)


# At import, so that modules imported during collection already see float64 and the profile
# (claims scale their example budgets when they are decorated).
_torch_determinism()
profiles.register_profiles()
try:
    profiles.load_profile()
    # Drawn now, before xdist starts its workers, which inherit it through the environment.
    profiles.run_seed()
except ValueError:
    pass  # theorems.framework.plugin reports the bad ATTN_HYPOTHESIS_PROFILE as a usage error


def pytest_configure(config: pytest.Config) -> None:
    # After each claims run, render reports/index.html and reports/claims.md from claims.json.
    from reports.hook import register

    register()


@pytest.fixture(autouse=True, scope="session")
def torch_determinism():
    """Re-assert the torch settings for the session (a test module may have changed them)."""
    _torch_determinism()
    yield


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    seed = os.environ.get(profiles.SEED_ENV)
    if seed and profiles.current_profile() != "ci":
        terminalreporter.write_line(
            f"attention-theorems: profile {profiles.current_profile()}, seed {seed} (replay: "
            f"ATTN_HYPOTHESIS_PROFILE={profiles.current_profile()} {profiles.SEED_ENV}={seed})"
        )
