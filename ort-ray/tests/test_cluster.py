"""OrtPredictor on a real local Ray cluster (ray.init(num_cpus=2, num_gpus=2): the GPUs are
Ray's fake resources, so scheduling is real while no GPU exists)."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

import ort_core
from ort_core.testing import models

ray = pytest.importorskip("ray")

from ort_ray import OrtPredictor, predictor_resources  # noqa: E402

# the test double below lives in this module, which Ray's workers cannot import: ship it by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROWS = 4000


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, ignore_reinit_error=True)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def mlp():
    return models.mlp(in_features=32, hidden=64, layers=2, classes=8).SerializeToString()


def _rows(n: int) -> np.ndarray:
    return np.random.default_rng(7).standard_normal((n, 32)).astype(np.float32)


@pytest.mark.parametrize("actors", [1, 2])
def test_results_equal_a_single_process_loop(cluster, mlp, actors):
    x = _rows(ROWS)  # distinct random rows: equal outputs row by row also prove the order
    ds = ray.data.from_numpy(x).materialize()  # one column, "data"
    start = time.perf_counter()
    out = ds.map_batches(
        OrtPredictor,
        fn_constructor_kwargs={"model": mlp, "providers": ["CPUExecutionProvider"], "input_columns": {"x": "data"}},
        concurrency=actors, batch_size=250, batch_format="numpy",
    ).take_all()
    seconds = time.perf_counter() - start
    print(f"\n{actors} actor(s): {ROWS / seconds:.0f} rows/s ({ROWS} rows, {seconds:.2f} s with actor start-up)")
    assert len(out) == ROWS
    np.testing.assert_array_equal(np.stack([r["data"] for r in out]), x)  # same rows, same order
    session = ort_core.InferenceSession(mlp)
    expected = np.concatenate([session.run(None, {"x": x[i : i + 1]})[0] for i in range(ROWS)])
    np.testing.assert_allclose(np.stack([r["probs"] for r in out]), expected, rtol=1e-5, atol=1e-6)


class _RecordingPredictor(OrtPredictor):
    """Test double: records the options the session would get, then runs on the CPU provider
    (no CUDA provider exists here; the scheduling under test is Ray's, with fake GPUs)."""

    def _create_session(self, model, providers, provider_options, sess_options):
        self.requested = providers
        return ort_core.InferenceSession(model, providers=["CPUExecutionProvider"])

    def __call__(self, batch):
        out = super().__call__(batch)
        out["device_id"] = np.full(len(out["probs"]), self.requested[0][1]["device_id"])
        out["ray_gpu"] = np.full(len(out["probs"]), int(ray.get_gpu_ids()[0]))
        return out


def test_gpu_actors_get_the_gpu_ray_assigned(cluster, mlp):
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    ds = ray.data.from_items([{"x": row} for row in _rows(400)])
    out = ds.map_batches(
        _RecordingPredictor, fn_constructor_kwargs={"model": mlp, "providers": providers},
        concurrency=2, batch_size=50, batch_format="numpy", **predictor_resources(providers),
    ).take_all()
    # Ray isolates each actor's GPU (CUDA_VISIBLE_DEVICES), so inside the actor it is device 0
    assert {r["device_id"] for r in out} == {0}
    assert {r["ray_gpu"] for r in out} <= {0, 1}


def test_bad_row_in_a_dataset_names_row_and_input(cluster, mlp):
    items = [{"x": row} for row in _rows(20)]
    items[13] = {"x": np.zeros(5, np.float32)}
    ds = ray.data.from_items(items)
    with pytest.raises(Exception, match=r"row 13: input 'x'"):
        ds.map_batches(OrtPredictor, fn_constructor_kwargs={"model": mlp}, concurrency=1,
                       batch_size=20, batch_format="numpy").take_all()


def test_the_readme_example_runs_as_written(tmp_path):
    """The README's "Running on a Ray cluster" block, extracted and run in its own process."""
    import re
    import subprocess
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme[readme.index("## Running on a Ray cluster"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "example.py"
    script.write_text(code.replace("ray.init(address=os.environ.get(\"RAY_ADDRESS\"))",
                                   "ray.init(address=os.environ.get(\"RAY_ADDRESS\"), num_cpus=2, include_dashboard=False)"))
    env = {k: v for k, v in __import__("os").environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"\[\s*[-\d.e]+", done.stdout), done.stdout  # the first row's scores printed
